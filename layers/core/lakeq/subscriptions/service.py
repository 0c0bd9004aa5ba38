"""Subscriptions (SPEC §3, API.md "Subscriptions"): storage, the routes' use cases, message lists.

A subscription's message list is a *pseudo-queue* of the topic-queue machinery, not a second one:
queue item ``topic="~<id>", queue=0`` in QueuesTable, segments under ``pq="~<id>#0"`` in
SegmentsTable, the offsets record ``owner="s|<id>", queue=0`` in OffsetsTable, and dedup items
under ``topic="~<id>"`` in DedupTable keyed ``<source topic>@<source queue>:<source segment base>``.
Pulls run :func:`lakeq.consume.reader.consume` over that one queue (receipt queue field ``~<id>``); acks
run :mod:`lakeq.consume.settle` (as a group's do). The stream-triggered fan-out
(:mod:`lakeq.fanout.worker`) appends to the lists with :meth:`LogRepo.append`.

A list entry keeps its *source* coordinates: a pulled subscription message carries the topic,
queue and offset it was published at (``offset`` = the source offset); the receipt carries the
list's own offsets. ``SubscriptionsTable`` also holds one counter item ``id="~version"``
(attribute ``version``) bumped by every create and delete, so the fan-out knows when to rebuild
its cached index.
"""
from __future__ import annotations

import json
import logging
import time
import uuid

from lakeq.admin.auth import Principal, authorize, client_or_404, dead_letter_grant, topic_or_404
from lakeq.common import clock
from lakeq.common.errors import BadRequest, Conflict, Forbidden, NotFound, StaleReceipt, below_limit
from lakeq.common.names import check_name, check_topic, is_name
from lakeq.consume import (
    ListLog,
    Policy,
    broker,
    consume,
    list_reader,
    receipt_visibility,
    settle_receipt,
    subscription_policy,
)
from lakeq.contract import validation as v
from lakeq.log.fanout_plan import parked_view
from lakeq.log.receipts import Receipt, subscription_field
from lakeq.log.receipts import parse as parse_receipt
from lakeq.log.selection import lock_until
from lakeq.log.settlement import Outcomes
from lakeq.store.subscriptions import (
    Start,
    Subscription,
    SubscriptionRepo,
    is_subscription_id,
    list_owner,
    list_topic,
)

log = logging.getLogger("lakeq.subscriptions.service")

MAX_LEVELS = 64
# subscriptions per client (issue 34 review): each is a row the metrics function publishes and a list
# the fan-out appends to; the count on the client item is the creation's condition
MAX_SUBSCRIPTIONS_PER_CLIENT = 100
MAX_CONDITIONS_BYTES = 64 * 1024


# --- views ------------------------------------------------------------------------------------
def view(s: Subscription) -> dict:
    out = {"id": s.id, "subscriber": s.subscriber, "topic": s.topic,
           "conditions": json.loads(s.conditions or "[]"), "tags": list(s.tags or []),
           "created_at": int(s.created_at or 0), "parked": _parked_view(s.parked)}
    if s.max_deliveries is not None:  # issue 9: shown when set
        out["max_deliveries"] = int(s.max_deliveries)
    if s.dead_letter_topic is not None:
        out["dead_letter_topic"] = s.dead_letter_topic
    if s.push is not None:  # issue 17: the push endpoint's summary (the console shows it)
        out["push"] = push_summary(s)
    return out


def push_summary(s: Subscription) -> dict:
    """A push endpoint's URL, pause and last outcome as lists show them (the full view, settings and
    secrets' dates included, is ``GET /v1/subscriptions/{id}/push``: :mod:`lakeq.push.service`)."""
    last = json.loads(s.push_state) if s.push_state else {}
    return {"url": json.loads(s.push)["url"], "paused": bool(s.push_paused),
            "last_status": last.get("last_status"), "last_attempt_at": last.get("last_attempt_at"),
            "next_attempt_at": last.get("next_attempt_at"), "failures": int(s.push_failures or 0)}


def policy(s: Subscription) -> Policy:
    return subscription_policy(s)


def _parked_view(raw: str | None) -> list[dict]:
    """Source queues the fan-out parked this subscription on (empty when all is delivered)."""
    return parked_view(raw) if raw else []


def _conditions(raw) -> list[dict]:
    # matcher.index on first use: only creating a subscription validates conditions, and the
    # consume function (which imports this module to ack lists) never does (docs/design.md "Cold start")
    from matcher.index import validate_conditions

    if raw is not None and isinstance(raw, list) and len(raw) > MAX_LEVELS:
        raise BadRequest(f"'conditions' may have at most {MAX_LEVELS} levels")
    try:
        levels = validate_conditions(raw)
    except ValueError as e:
        raise BadRequest(str(e)) from None
    if len(json.dumps(levels)) > MAX_CONDITIONS_BYTES:
        raise BadRequest(f"'conditions' is larger than {MAX_CONDITIONS_BYTES} bytes of JSON")
    return levels


def _tags(raw) -> list[str]:
    from matcher.index import validate_tags  # on first use, as in _conditions

    tags = v.tag_list(raw, "tags")
    try:
        return list(validate_tags(tags))
    except ValueError as e:  # pragma: no cover - tag_list is stricter
        raise BadRequest(str(e)) from None


def _sub_or_404(sub_id: str) -> Subscription:
    s = SubscriptionRepo.get(sub_id) if is_name(sub_id) else None
    if s is None:
        raise NotFound(f"subscription '{sub_id}' does not exist")
    return s


def _may_act(p: Principal, s: Subscription) -> None:
    if not p.may_act_as(s.subscriber):
        raise Forbidden(f"this key may not act for '{s.subscriber}'")


# --- use cases --------------------------------------------------------------------------------
def create(p: Principal, raw: str | None) -> dict:
    body = v.json_body(raw)
    subscriber = check_name(body.get("subscriber"), "subscriber")
    topic = check_topic(body.get("topic"))
    levels = _conditions(body.get("conditions"))
    tags = _tags(body.get("tags"))
    dl = v.dead_letter_settings(body)
    topic_or_404(topic)
    client = client_or_404(subscriber, "consumer")
    if dl.get("dead_letter_topic") is not None:
        topic_or_404(dl["dead_letter_topic"])
    authorize(p, client, topic)
    by = dead_letter_grant(p, client, [topic], dl.get("dead_letter_topic"))
    _below_limit(subscriber)  # before the topics' Scan (Start.read): a refusal costs one read
    now = clock.now()
    sub = Subscription(uuid.uuid4().hex, subscriber=subscriber, topic=topic,
                       conditions=json.dumps(levels, separators=(",", ":")), tags=tags or None,
                       created_at=now, starts=Start.read(topic).dump(), max_deliveries=dl.get("max_deliveries"),
                       dead_letter_topic=dl.get("dead_letter_topic"), dead_letter_by=by)
    if not SubscriptionRepo.create(sub, MAX_SUBSCRIPTIONS_PER_CLIENT):
        _below_limit(subscriber)  # another creation took the last place (or the client went)
        raise Conflict("the subscription limit changed meanwhile; retry")  # pragma: no cover
    return view(sub)


def _below_limit(subscriber: str) -> None:
    """409 ``too_many_subscriptions`` when ``subscriber`` has its most subscriptions. The creation's
    transaction checks the same count on the client item, so concurrent creations cannot pass the
    limit together; this read gives the answer its reason (404 when the client is gone)."""
    below_limit(SubscriptionRepo.count_of(subscriber), MAX_SUBSCRIPTIONS_PER_CLIENT,
                f"consumer '{subscriber}' does not exist",
                f"'{subscriber}' has {MAX_SUBSCRIPTIONS_PER_CLIENT} subscriptions, the most a client may have; "
                "delete one first", "too_many_subscriptions")


def list_(p: Principal, params: dict) -> dict:
    subscriber = check_name(params.get("subscriber"), "subscriber")
    client_or_404(subscriber, "consumer")
    if not p.may_act_as(subscriber):
        raise Forbidden(f"this key may not act for '{subscriber}'")
    return {"subscriptions": [view(s) for s in SubscriptionRepo.of_subscriber(subscriber)]}


PURGE_INLINE_S = 3.0  # a DELETE purges inline for this long; the rest is the stream consumer's


def delete(p: Principal, sub_id: str) -> None:
    """``DELETE /v1/subscriptions/{id}``: one transaction (subscription item, list queue item,
    version bump), then the list's items are purged inline for up to PURGE_INLINE_S.

    Crash-safe: the subscription item's REMOVE record on SubscriptionsTable's stream makes
    :func:`lakeq.subscriptions.purge.purge_removed` (UnsubscribeFunction) purge the list again, with the event source
    mapping's retries, so a crash after the transaction (or a list too long to purge inline)
    leaves nothing behind. A retried DELETE after a lost 204 answers 404 (the subscription is
    gone, as API.md says of unknown ids); it also purges whatever of that id's list is left."""
    check_name(sub_id, "subscription id")
    # not backoff.cas: a lost write means the subscription went (404 next) or its push endpoint came or
    # went, and the next read decides: 5 rounds, no wait
    for _ in range(5):  # False: gone (the next read answers 404) or its push endpoint came or went
        s = SubscriptionRepo.get(sub_id) if is_name(sub_id) else None
        if s is None:
            if is_subscription_id(sub_id):
                SubscriptionRepo.purge_list(sub_id, time.monotonic() + PURGE_INLINE_S)
            raise NotFound(f"subscription '{sub_id}' does not exist")
        _may_act(p, s)
        if SubscriptionRepo.delete(sub_id, s.subscriber if s.push is not None else None,
                                   s.subscriber if s.counted else None):
            break
    else:
        raise Conflict("the subscription's push endpoint changed meanwhile; retry")  # pragma: no cover
    SubscriptionRepo.purge_list(sub_id, time.monotonic() + PURGE_INLINE_S)


STALE = "the receipt is stale: the list was locked again or acknowledged since"


def _list_receipt(s: Subscription, receipt: Receipt) -> str:
    """The checks every use of a list's receipt makes (ack, visibility): this subscription's (400),
    this broker's (409 ``stale_receipt``). Returns the list's offsets owner."""
    if receipt.subscription != s.id:
        raise BadRequest("this receipt is not for this subscription's message list")
    if receipt.broker != broker():
        raise StaleReceipt(STALE)
    return list_owner(s.id)


def _ack(s: Subscription, receipt: Receipt, outcomes: Outcomes = Outcomes()) -> dict:
    owner = _list_receipt(s, receipt)
    out = settle_receipt(owner, 0, receipt, outcomes, policy(s), list_reader(list_topic(s.id)), clock.now(), STALE)
    return {"subscription": s.id, "queue": 0, **out}


def ack(p: Principal, sub_id: str, receipt: Receipt, outcomes: Outcomes = Outcomes()) -> dict:
    """``POST /v1/acks {"subscription", "receipt", ["accept"], ["release"], ["reject"]}`` (dispatched
    by the ack route, :mod:`lakeq.api.consume`)."""
    s = _sub_or_404(sub_id)
    _may_act(p, s)
    return _ack(s, receipt, outcomes)


def visibility(p: Principal, sub_id: str, receipt: Receipt, visibility_ms: int) -> dict:
    """``POST /v1/visibility {"subscription", "receipt", "visibility_timeout_ms"}`` (dispatched by the route)."""
    s = _sub_or_404(sub_id)
    _may_act(p, s)
    owner = _list_receipt(s, receipt)
    now = clock.now()
    until = lock_until(now, visibility_ms)
    if not receipt_visibility(owner, 0, receipt, until, now):
        raise StaleReceipt(STALE)
    return {"subscription": s.id, "queue": 0, "locked_until": until}


def read_list(sub_id: str, start: int, limit: int, max_offset: int) -> tuple[list[dict], int]:
    """Up to ``limit`` list entries from list offset ``start`` (:func:`lakeq.consume.reader.list_reader`)."""
    return list_reader(list_topic(sub_id))(0, start, limit, max_offset)


def pull(p: Principal, sub_id: str, params: dict) -> dict:
    check_name(sub_id, "subscription id")
    max_ = v.int_param(params, "max", 1, v.MAX_PULL, v.DEFAULT_PULL)
    wait_ms = v.int_param(params, "wait_ms", 0, v.MAX_WAIT_MS, 0)
    vis = (v.int_param(params, "visibility_timeout_ms", v.VISIBILITY_MIN, v.VISIBILITY_MAX, 0)
           if params.get("visibility_timeout_ms") is not None else None)
    raw_ack = params.get("ack")
    if raw_ack is not None and not raw_ack:
        raise BadRequest("'ack' must be a receipt")
    ack_receipt = parse_receipt(raw_ack) if raw_ack is not None else None
    s = _sub_or_404(sub_id)
    _may_act(p, s)
    if s.push is not None and not s.push_paused:
        raise Conflict("this subscription's messages are pushed to its endpoint; pause the push endpoint "
                       "(POST …/push/pause) or delete it to pull them", code="push_active")
    client = client_or_404(s.subscriber, "consumer")
    if ack_receipt is not None:
        _ack(s, ack_receipt)
    lt, owner = list_topic(sub_id), list_owner(sub_id)
    req = v.PullRequest(group=None, client_id=None, member_id=None, max=max_, wait_ms=wait_ms, tags=None, ack=None)
    return consume(ListLog(lt, owner, {"group": s.subscriber, "topic": lt}, subscription_field(sub_id)),
                   vis or int(client.visibility_timeout_ms), req, None, policy=policy(s))
