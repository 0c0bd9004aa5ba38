"""The consume routes (ConsumeFunction): pull, ack, visibility, a group's offsets. A subscription's
receipt is settled by :mod:`lakeq.subscriptions.service`, handed to the consume use cases here (they
do not import it)."""
from __future__ import annotations

import json

from aws_lambda_powertools.metrics import MetricUnit

from lakeq import consume
from lakeq.api.http import Router, body, json_response, path, query
from lakeq.common import metric_names as M
from lakeq.common.obs import count_rows, metrics
from lakeq.subscriptions import service as subscriptions

consume_router = Router()


@consume_router.get("/v1/topics/<topic>/messages")
def pull(topic: str):
    p = consume_router.caller
    q = query(consume_router)
    out = consume.pull(p, path(topic), q)
    metrics.add_metric(name=M.RECEIVED, unit=MetricUnit.Count, value=len(out["messages"]))
    row = (("Topic", path(topic)), ("Group", q["group"]))
    rows = {row: {M.RECEIVED: len(out["messages"])}}
    if q.get("ack") is not None:  # the piggybacked ack settled (else the pull answered its error): one ack
        metrics.add_metric(name=M.ACKS, unit=MetricUnit.Count, value=1)
        replay = consume.receipt_replay(q["ack"])
        ack_row = (("Replay", replay),) if replay is not None else row
        rows[ack_row] = {**rows.get(ack_row, {}), M.ACKS: 1}
    count_rows(rows)
    return json_response(out)


@consume_router.post("/v1/acks")
def ack():
    p = consume_router.caller
    raw = body(consume_router)
    out = consume.ack(p, raw, subscription_ack=subscriptions.ack)
    count_acks(json.loads(raw), out, p.client or "admin")
    return json_response(out)


def count_acks(req: dict, out: dict, caller: str) -> None:
    """Count a settled ack (each entry of a batch ack that did not fail): ``NumberOfAcks``, and the
    offsets its ``accept`` / ``release`` / ``reject`` lists name, each once (a whole-batch ack names
    none) — the deployment's (``service``) and each row's (:func:`row_of`)."""
    entries = req["acks"] if "acks" in req else [req]
    results = out["results"] if "acks" in req else [out]
    done = [(e, r) for e, r in zip(entries, results) if "error" not in r]
    # the group the validation checked (the request's, a batch's envelope): never an entry's own
    # "group" field, which the validation ignores (any JSON a key writes there would be a dimension)
    group = req.get("group")
    rows: dict[tuple, dict[str, int]] = {}
    for e, r in done:
        row = rows.setdefault(row_of(group, r, caller), dict.fromkeys(ACK_COUNTS, 0))
        row[M.ACKS] += 1
        for field, name in ACK_FIELDS:
            # each offset once, as the validation (lakeq.contract.validation.outcomes) settles it
            row[name] += len(set(e.get(field) or ()))
    metrics.add_metric(name=M.ACKS, unit=MetricUnit.Count, value=len(done))
    for _, name in ACK_FIELDS:
        n = sum(row[name] for row in rows.values())
        if n:
            metrics.add_metric(name=name, unit=MetricUnit.Count, value=n)
    count_rows(rows)


ACK_FIELDS = (("accept", M.ACCEPTED), ("release", M.RELEASED), ("reject", M.REJECTED))
ACK_COUNTS = (M.ACKS, M.ACCEPTED, M.RELEASED, M.REJECTED)


def row_of(group: str | None, result: dict, caller: str) -> tuple[tuple[str, str], ...]:
    """The row an ack's counts go to: a subscription's, its ``Subscriber`` (``caller``: the
    client whose key acked, ``admin`` for the admin key — not the subscription's id, which a key
    could churn into new metrics by creating and deleting subscriptions); its ``Replay`` (an entry
    of a replay's list into a group: the dimension of the replay's progress; replays are the
    admin's); else its ``Topic`` + ``Group``."""
    if result.get("subscription") is not None:
        return (("Subscriber", caller),)
    if result.get("replay") is not None:
        return (("Replay", result["replay"]),)
    return (("Topic", result["topic"]), ("Group", group or "-"))


@consume_router.post("/v1/visibility")
def visibility():
    p = consume_router.caller
    return json_response(consume.visibility(p, body(consume_router),
                                            subscription_visibility=subscriptions.visibility))


@consume_router.get("/v1/groups/<group>/offsets")
def offsets(group: str):
    p = consume_router.caller
    return json_response(consume.offsets(p, path(group), query(consume_router)))
