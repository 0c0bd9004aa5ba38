"""The consume routes (ConsumeFunction): pull, ack, visibility, a group's offsets. A subscription's
receipt is settled by :mod:`lakeq.subscriptions.service`, handed to the consume use cases here (they
do not import it)."""
from __future__ import annotations

import json

from aws_lambda_powertools.metrics import MetricUnit

from lakeq import consume
from lakeq.api.http import Router, body, json_response, path, query
from lakeq.common import metric_names as M
from lakeq.common.obs import metrics
from lakeq.subscriptions import service as subscriptions

consume_router = Router()


@consume_router.get("/v1/topics/<topic>/messages")
def pull(topic: str):
    p = consume_router.caller
    out = consume.pull(p, path(topic), query(consume_router))
    metrics.add_metric(name=M.RECEIVED, unit=MetricUnit.Count, value=len(out["messages"]))
    return json_response(out)


@consume_router.post("/v1/acks")
def ack():
    p = consume_router.caller
    raw = body(consume_router)
    out = consume.ack(p, raw, subscription_ack=subscriptions.ack)
    count_acks(json.loads(raw), out)
    return json_response(out)


def count_acks(req: dict, out: dict) -> None:
    """Count a settled ack (each entry of a batch ack that did not fail): ``NumberOfAcks``, and the
    offsets its ``accept`` / ``release`` / ``reject`` lists name, each once (a whole-batch ack names
    none)."""
    entries = req["acks"] if "acks" in req else [req]
    results = out["results"] if "acks" in req else [out]
    done = [e for e, r in zip(entries, results) if "error" not in r]
    metrics.add_metric(name=M.ACKS, unit=MetricUnit.Count, value=len(done))
    for field, name in (("accept", M.ACCEPTED), ("release", M.RELEASED), ("reject", M.REJECTED)):
        # each offset once, as the validation (lakeq.contract.validation.outcomes) settles it
        n = sum(len(set(e.get(field) or ())) for e in done)
        if n:
            metrics.add_metric(name=name, unit=MetricUnit.Count, value=n)


@consume_router.post("/v1/visibility")
def visibility():
    p = consume_router.caller
    return json_response(consume.visibility(p, body(consume_router),
                                            subscription_visibility=subscriptions.visibility))


@consume_router.get("/v1/groups/<group>/offsets")
def offsets(group: str):
    p = consume_router.caller
    return json_response(consume.offsets(p, path(group), query(consume_router)))
