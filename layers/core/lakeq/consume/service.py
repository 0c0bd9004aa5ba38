"""Consume use cases behind the HTTP routes: pull (with a piggybacked ack), ack, visibility, a
group's offsets and their reset. Each parses its request and calls consume's engine API
(:mod:`lakeq.consume.engine`: :func:`~lakeq.consume.engine.pull_batch`, the receipt check
:func:`~lakeq.consume.engine.check_receipt`, :func:`~lakeq.consume.engine.set_visibility`); the pull
loop itself is :func:`lakeq.consume.reader.consume`, the settlement of a receipt :mod:`lakeq.consume.settle`.

Check order (API.md): 401 → 400 (syntax) → 404 (named things) → 403 (the key may not act) →
state-dependent answers (400/409). Handlers parse nothing themselves beyond handing over the
raw body and parameters.
"""
from __future__ import annotations

from typing import Callable

from lakeq.admin.auth import (
    Principal,
    authorize,
    client_or_404,
    require_admin,
    topic_copy_or_404,
    topic_or_404,
)
from lakeq.common import clock as _clock
from lakeq.common.errors import ApiError, BadRequest, StaleReceipt
from lakeq.common.names import check_name, check_topic, log_of
from lakeq.consume import engine, replays
from lakeq.consume import settle as settling
from lakeq.consume.reader import topic_reader
from lakeq.consume.reader import views as _views
from lakeq.contract import validation as v
from lakeq.log.receipts import Receipt
from lakeq.log.receipts import parse as parse_receipt
from lakeq.log.selection import lock_until
from lakeq.log.settlement import Outcomes
from lakeq.store.offsets import OffsetRepo
from lakeq.store.queue_log import LogRepo
from lakeq.store.records import Client

# --- pull / ack -----------------------------------------------------------------------------
# The engine's entry points (:mod:`lakeq.consume.engine`) do the work; these parse the request.
_instance = engine.instance
STALE = engine.STALE


def _group_receipt(p: Principal, group: Client, client_id: str | None, receipt: Receipt,
                   use: str) -> tuple[str, int, str]:
    """(topic, queue, offsets owner) of a group's receipt after :func:`lakeq.consume.engine.check_receipt`."""
    lock = engine.check_receipt(p, group, client_id, receipt, use)
    return lock.topic, lock.queue, lock.owner


def _ack_group(p: Principal, group: Client, client_id: str | None, receipt: Receipt,
               outcomes: Outcomes = Outcomes()) -> dict:
    """Settle a group's receipt (:func:`lakeq.consume.settle.settle_receipt`): the whole batch (one UpdateItem
    in the common case) or the offsets ``outcomes`` names."""
    if receipt.replay is not None:  # an entry of a replay's hidden list (issue 18.1)
        owner = replays.receipt_owner(p, group, _instance(group, client_id), receipt, STALE)
        out = settling.settle_receipt(owner, 0, receipt, outcomes, settling.policy_of(group),
                                      replays.replay_reader(receipt.queue, None), _clock.now(), STALE)
        return {"replay": receipt.replay, "queue": 0, **out}
    topic, q, owner = _group_receipt(p, group, client_id, receipt, "acknowledge")
    out = settling.settle_receipt(owner, q, receipt, outcomes, settling.policy_of(group),
                                  topic_reader(receipt.log, None), _clock.now(), STALE)
    return {"topic": topic, "queue": q, **out}


def ack(p: Principal, raw: str | None,
        subscription_ack: Callable[..., dict] | None = None) -> dict:
    """``POST /v1/acks``: a group's receipt here; a subscription's goes to ``subscription_ack``
    (:func:`lakeq.subscriptions.service.ack`, passed in by the route: this module does not import it).
    With ``"acks": [...]`` a batch: ``{"results": [...]}`` in order, each entry's body or error."""
    body = v.json_body(raw)
    if "acks" in body:
        return _ack_batch(p, v.ack_batch(body), subscription_ack)
    req = v.ack(body)
    receipt = parse_receipt(req.receipt)
    return _ack_one(p, req, receipt, subscription_ack)


def _ack_one(p: Principal, req: v.AckIn, receipt: Receipt, subscription_ack) -> dict:
    if req.subscription is not None:
        if subscription_ack is None:
            raise BadRequest("subscription receipts are acknowledged on the consume routes")
        return subscription_ack(p, req.subscription, receipt, req.outcomes)
    group = client_or_404(req.group, "consumer")  # type: ignore[arg-type]
    return _ack_group(p, group, req.client_id, receipt, req.outcomes)


def _ack_batch(p: Principal, req: v.AckBatchIn, subscription_ack) -> dict:
    """Each entry on its own: a refused entry (4xx) is answered with its error and changes
    nothing; the others go on. The consumer named by the envelope must exist (404 for all)."""
    if req.group is not None:
        client_or_404(req.group, "consumer")
    results: list[dict] = []
    for e in req.entries:
        if isinstance(e, ApiError):
            results.append(e.body())
            continue
        try:
            results.append(_ack_one(p, e, parse_receipt(e.receipt), subscription_ack))
        except ApiError as err:
            if err.status >= 500:
                raise
            results.append(err.body())
    return {"results": results}


def _visibility_group(p: Principal, group: Client, client_id: str | None, receipt: Receipt,
                      visibility_ms: int) -> dict:
    if receipt.replay is not None:  # an entry of a replay's hidden list (issue 18.1)
        owner = replays.receipt_owner(p, group, _instance(group, client_id), receipt, STALE)
        now = _clock.now()
        until = lock_until(now, visibility_ms)
        if not settling.receipt_visibility(owner, 0, receipt, until, now):
            raise StaleReceipt(STALE)
        return {"replay": receipt.replay, "queue": 0, "locked_until": until}
    lock = engine.check_receipt(p, group, client_id, receipt, "name")
    return {"topic": lock.topic, "queue": lock.queue, "locked_until": engine.set_visibility(lock, visibility_ms)}


def visibility(p: Principal, raw: str | None,
               subscription_visibility: Callable[[Principal, str, Receipt, int], dict] | None = None) -> dict:
    """``POST /v1/visibility``: extend or end (0) a receipt's lock; checks as :func:`ack`. A
    subscription's receipt goes to ``subscription_visibility`` (:func:`lakeq.subscriptions.service.visibility`)."""
    req = v.visibility(v.json_body(raw))
    receipt = parse_receipt(req.ack.receipt)
    if req.ack.subscription is not None:
        if subscription_visibility is None:
            raise BadRequest("subscription receipts are handled on the consume routes")
        return subscription_visibility(p, req.ack.subscription, receipt, req.visibility_timeout_ms)
    group = client_or_404(req.ack.group, "consumer")  # type: ignore[arg-type]
    return _visibility_group(p, group, req.ack.client_id, receipt, req.visibility_timeout_ms)


def receipt_replay(raw: str) -> str | None:
    """The replay id of a receipt of a replay's list (None: a topic queue's, a list's), for a route
    that counts a piggybacked ack already settled (the receipt parsed)."""
    return parse_receipt(raw).replay


def _another_incarnation(receipt: Receipt, t) -> bool:
    """Whether ``receipt`` is a queue receipt of topic ``t``'s name but of another incarnation than
    ``t``'s (a list's receipt, or a malformed one, is left to the pull's own checks)."""
    if receipt.subscription is not None or receipt.replay is not None:
        return False
    try:
        name, _ = receipt.topic_queue
    except BadRequest:
        return False
    return name == t.name and receipt.log != log_of(t)


def pull(p: Principal, topic: str, params: dict) -> dict:
    """``GET /v1/topics/{topic}/messages``: the query parsed into a
    :class:`~lakeq.contract.validation.PullRequest` (400), the topic read (404), then
    :func:`lakeq.consume.engine.pull_batch`."""
    check_topic(topic)
    req = v.pull(params)
    ack_receipt = parse_receipt(req.ack) if req.ack is not None else None
    # the topic item as this container last read it (< 1.5 s ago: a pull, a produce, a long poll's
    # last round), else read now
    t = topic_copy_or_404(topic)
    if ack_receipt is not None and _another_incarnation(ack_receipt, t):
        # the copy may predate another container's delete and re-create (the receipt then is the
        # stored topic's, not stale): read the topic item now
        LogRepo.forget_topic(topic)
        t = topic_copy_or_404(topic)
    return engine.pull_batch(p, t, req, ack=ack_receipt)


# --- offsets --------------------------------------------------------------------------------
def offsets(p: Principal, group_name: str, params: dict) -> dict:
    check_name(group_name, "group")
    topic = params.get("topic")
    check_topic(topic)
    client_id = params.get("client_id")
    if client_id is not None:
        check_name(client_id, "client_id")
    t = topic_or_404(topic)
    group = client_or_404(group_name, "consumer")
    authorize(p, group, topic)
    owner = OffsetRepo.owner(group.name, log_of(t), _instance(group, client_id))
    now = _clock.now()
    queues = []
    recs = OffsetRepo.records(owner)
    for view in sorted(_views(log_of(t), owner, int(t.queues), recs=recs), key=lambda x: x.queue):
        r = recs.get(view.queue)  # lock_owner: the member_id / client_id holding the lock, "-" for none
        queues.append({"queue": view.queue, "min_offset": view.min_offset, "max_offset": view.max_offset,
                       "committed_offset": view.start,
                       "locked_until": view.lock_until if view.locked(now) else 0,
                       "lock_owner": r.lock_owner if r is not None and view.locked(now) else None,
                       "backlog": view.backlog, "dead_lettered": view.dead_lettered})
    return {"group": group.name, "topic": topic, "backlog": sum(q["backlog"] for q in queues), "queues": queues}


def reset_offset(p: Principal, group_name: str, raw: str | None) -> dict:
    check_name(group_name, "group")
    req = v.reset_offset(v.json_body(raw))
    t = topic_or_404(req.topic)
    group = client_or_404(group_name, "consumer")
    require_admin(p)
    client_id = _instance(group, req.client_id)
    if req.queue >= int(t.queues):
        raise BadRequest(f"topic '{req.topic}' has queues 0-{int(t.queues) - 1}")
    meta = LogRepo.queue(log_of(t), req.queue)
    lo, hi = int(meta.min_offset), int(meta.max_offset)  # type: ignore[union-attr]
    if not lo <= req.offset <= hi:
        raise BadRequest(f"offset must be within [{lo}, {hi}] for queue {req.queue}")
    owner = OffsetRepo.owner(group.name, log_of(t), client_id)
    OffsetRepo.reset(owner, req.queue, req.offset, {"group": group.name, "client_id": client_id, "topic": req.topic},
                     _clock.now())
    return {"group": group.name, "topic": req.topic, "queue": req.queue, "committed_offset": req.offset}
