"""The consume routes (ConsumeFunction): pull, ack, visibility, a group's offsets. A subscription's
receipt is settled by :mod:`lakeq.subscriptions.service`, handed to the consume use cases here (they
do not import it)."""
from __future__ import annotations

from aws_lambda_powertools.metrics import MetricUnit

from lakeq import consume
from lakeq.api.http import Router, body, json_response, path, query
from lakeq.common.obs import metrics
from lakeq.subscriptions import service as subscriptions

consume_router = Router()


@consume_router.get("/v1/topics/<topic>/messages")
def pull(topic: str):
    p = consume_router.caller
    out = consume.pull(p, path(topic), query(consume_router))
    metrics.add_metric(name="MessagesDelivered", unit=MetricUnit.Count, value=len(out["messages"]))
    return json_response(out)


@consume_router.post("/v1/acks")
def ack():
    p = consume_router.caller
    return json_response(consume.ack(p, body(consume_router), subscription_ack=subscriptions.ack))


@consume_router.post("/v1/visibility")
def visibility():
    p = consume_router.caller
    return json_response(consume.visibility(p, body(consume_router),
                                            subscription_visibility=subscriptions.visibility))


@consume_router.get("/v1/groups/<group>/offsets")
def offsets(group: str):
    p = consume_router.caller
    return json_response(consume.offsets(p, path(group), query(consume_router)))
