"""Subscriptions (SPEC §3, API.md "Subscriptions"): storage, the routes' use cases, message lists.

A subscription's message list is a *pseudo-queue* of the topic-queue machinery, not a second one:
queue item ``topic="~<id>", queue=0`` in QueuesTable, segments under ``pq="~<id>#0"`` in
SegmentsTable, the offsets record ``owner="s|<id>", queue=0`` in OffsetsTable, and dedup items
under ``topic="~<id>"`` in DedupTable keyed ``<source topic>@<source queue>:<source segment base>``.
Pulls run :func:`lakeq.service.consume` over that one queue (receipt queue field ``~<id>``); acks
run :meth:`OffsetRepo.ack`. The stream-triggered fan-out (:mod:`lakeq.fanout`) appends to the
lists with :meth:`LogRepo.append`.

A list entry keeps its *source* coordinates: a pulled subscription message carries the topic,
queue and offset it was published at (``offset`` = the source offset); the receipt carries the
list's own offsets. ``SubscriptionsTable`` also holds one counter item ``id="~version"``
(attribute ``version``) bumped by every create and delete, so the fan-out knows when to rebuild
its cached index.
"""
from __future__ import annotations

import json
import time
import uuid

from pynamodb.attributes import ListAttribute, NumberAttribute, UnicodeAttribute
from pynamodb.exceptions import DoesNotExist
from pynamodb.indexes import AllProjection, GlobalSecondaryIndex
from pynamodb.models import Model
from pynamodb.transactions import TransactWrite

from matcher.index import validate_conditions, validate_tags

from . import segments as seg
from . import service
from . import validation as v
from .errors import BadRequest, Conflict, Forbidden, NotFound
from .models import DedupModel, OffsetModel, QueueModel, SegmentModel, _meta
from .names import check_name, check_topic, is_name
from .receipts import Receipt, parse as parse_receipt, subscription_field
from .repos import LogRepo, OffsetRepo, TransactionFailed, transact

VERSION_ID = "~version"
MAX_LEVELS = 64
MAX_CONDITIONS_BYTES = 64 * 1024
CONDITION_FAILED = "ConditionalCheckFailed"


class BySubscriber(GlobalSecondaryIndex):
    class Meta:
        index_name = "by-subscriber"
        projection = AllProjection()

    subscriber = UnicodeAttribute(hash_key=True)
    created_at = NumberAttribute(range_key=True)


class SubscriptionModel(Model):
    """A subscription (``id`` = 32 hex digits), or the version counter item ``id="~version"``."""

    Meta = _meta("SUBSCRIPTIONS_TABLE", "lakeq-subscriptions")
    id = UnicodeAttribute(hash_key=True)
    subscriber = UnicodeAttribute(null=True)
    topic = UnicodeAttribute(null=True)
    conditions = UnicodeAttribute(null=True)  # JSON: the normalised levels, in the caller's order
    tags = ListAttribute(of=UnicodeAttribute, null=True)
    created_at = NumberAttribute(null=True)
    version = NumberAttribute(null=True)
    by_subscriber = BySubscriber()


def list_topic(sub_id: str) -> str:
    """The pseudo-queue topic of a subscription's message list (topic names never start with ``~``)."""
    return f"~{sub_id}"


def list_owner(sub_id: str) -> str:
    return f"s|{sub_id}"


class SubscriptionRepo:
    @staticmethod
    def get(sub_id: str) -> SubscriptionModel | None:
        if sub_id == VERSION_ID:
            return None
        try:
            return SubscriptionModel.get(sub_id, consistent_read=True)
        except DoesNotExist:
            return None

    @staticmethod
    def create(sub: SubscriptionModel) -> None:
        """Subscription item + its list's queue item + version bump: one transaction (4 WCU x2)."""
        def build(t: TransactWrite) -> None:
            t.save(sub, condition=SubscriptionModel.id.does_not_exist())
            t.save(QueueModel(list_topic(sub.id), 0, max_offset=0, min_offset=0, last_produced_at=0),
                   condition=QueueModel.topic.does_not_exist())
            t.update(SubscriptionModel(VERSION_ID), actions=[SubscriptionModel.version.add(1)])
        transact(build)

    @staticmethod
    def delete(sub_id: str) -> bool:
        """Delete the subscription, its list's queue item (no append can succeed afterwards: appends
        are conditioned on it) and bump the version, atomically. False when it did not exist."""
        def build(t: TransactWrite) -> None:
            t.delete(SubscriptionModel(sub_id), condition=SubscriptionModel.id.exists())
            t.delete(QueueModel(list_topic(sub_id), 0))
            t.update(SubscriptionModel(VERSION_ID), actions=[SubscriptionModel.version.add(1)])
        try:
            transact(build)
        except TransactionFailed as e:
            if e.reasons and e.reasons[0] == CONDITION_FAILED:
                return False
            raise
        return True

    @staticmethod
    def purge_list(sub_id: str) -> int:
        """Delete the list's segments, offsets record and dedup items (after :meth:`delete`).
        Consistent queries + batch deletes; returns the number of items deleted."""
        n = 0
        lt = list_topic(sub_id)
        keys = [SegmentModel._hash_key_attribute().attr_name, SegmentModel._range_key_attribute().attr_name]
        with SegmentModel.batch_write() as b:
            for item in SegmentModel.query(LogRepo.pq(lt, 0), consistent_read=True, attributes_to_get=keys):
                b.delete(item)
                n += 1
        with OffsetModel.batch_write() as b:
            for item in OffsetModel.query(list_owner(sub_id), consistent_read=True):
                b.delete(item)
                n += 1
        with DedupModel.batch_write() as b:
            for item in DedupModel.query(lt, attributes_to_get=["topic", "id"]):
                b.delete(item)
                n += 1
        return n

    @staticmethod
    def of_subscriber(subscriber: str) -> list[SubscriptionModel]:
        """Through the ``by-subscriber`` GSI (eventually consistent), oldest first."""
        return list(SubscriptionModel.by_subscriber.query(subscriber))

    @staticmethod
    def version() -> int:
        try:
            item = SubscriptionModel.get(VERSION_ID, consistent_read=True)
        except DoesNotExist:
            return 0
        return int(item.version or 0)

    @staticmethod
    def all() -> list[SubscriptionModel]:
        """Every subscription: a consistent paginated Scan (the fan-out's index rebuild)."""
        return [s for s in SubscriptionModel.scan(consistent_read=True) if s.id != VERSION_ID]


# --- views ------------------------------------------------------------------------------------
def view(s: SubscriptionModel) -> dict:
    return {"id": s.id, "subscriber": s.subscriber, "topic": s.topic,
            "conditions": json.loads(s.conditions or "[]"), "tags": list(s.tags or []),
            "created_at": int(s.created_at or 0)}


def _conditions(raw) -> list[dict]:
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
    tags = v.tag_list(raw, "tags")
    try:
        return list(validate_tags(tags))
    except ValueError as e:  # pragma: no cover - tag_list is stricter
        raise BadRequest(str(e)) from None


def _sub_or_404(sub_id: str) -> SubscriptionModel:
    s = SubscriptionRepo.get(sub_id) if is_name(sub_id) else None
    if s is None:
        raise NotFound(f"subscription '{sub_id}' does not exist")
    return s


def _may_act(p: service.Principal, s: SubscriptionModel) -> None:
    if not p.may_act_as(s.subscriber):
        raise Forbidden(f"this key may not act for '{s.subscriber}'")


# --- use cases --------------------------------------------------------------------------------
def create(p: service.Principal, raw: str | None) -> dict:
    body = v.json_body(raw)
    subscriber = check_name(body.get("subscriber"), "subscriber")
    topic = check_topic(body.get("topic"))
    levels = _conditions(body.get("conditions"))
    tags = _tags(body.get("tags"))
    service.topic_or_404(topic)
    client = service.client_or_404(subscriber, "consumer")
    service.authorize(p, client, topic)
    now = service.clock()
    sub = SubscriptionModel(uuid.uuid4().hex, subscriber=subscriber, topic=topic,
                            conditions=json.dumps(levels, separators=(",", ":")), tags=tags or None,
                            created_at=now)
    SubscriptionRepo.create(sub)
    # Delivery rule: messages with produced_at > created_at. Answer only once the clock has moved
    # past created_at, so anything produced after this response (same clock) is strictly later.
    while service.clock() <= now:
        time.sleep(0.0005)
    return view(sub)


def list_(p: service.Principal, params: dict) -> dict:
    subscriber = check_name(params.get("subscriber"), "subscriber")
    service.client_or_404(subscriber, "consumer")
    if not p.may_act_as(subscriber):
        raise Forbidden(f"this key may not act for '{subscriber}'")
    return {"subscriptions": [view(s) for s in SubscriptionRepo.of_subscriber(subscriber)]}


def delete(p: service.Principal, sub_id: str) -> None:
    check_name(sub_id, "subscription id")
    s = _sub_or_404(sub_id)
    _may_act(p, s)
    if not SubscriptionRepo.delete(sub_id):
        raise NotFound(f"subscription '{sub_id}' does not exist")
    SubscriptionRepo.purge_list(sub_id)


def _ack(s: SubscriptionModel, receipt: Receipt) -> dict:
    if receipt.subscription != s.id:
        raise BadRequest("this receipt is not for this subscription's message list")
    if receipt.broker != service.broker() or not OffsetRepo.ack(list_owner(s.id), 0, receipt, service.clock()):
        raise Conflict("the receipt is stale: the list was locked again or acknowledged since",
                       code="stale_receipt")
    return {"subscription": s.id, "queue": 0, "committed_offset": receipt.next_offset}


def ack(p: service.Principal, sub_id: str, receipt: Receipt) -> dict:
    """``POST /v1/acks {"subscription", "receipt"}`` (called by :func:`lakeq.service.ack`)."""
    s = _sub_or_404(sub_id)
    _may_act(p, s)
    return _ack(s, receipt)


def read_list(sub_id: str, start: int, limit: int, max_offset: int) -> tuple[list[dict], int]:
    """Up to ``limit`` list entries from list offset ``start`` (contiguous), each with its source
    ``topic``, ``queue`` and ``offset``. Returns (messages, next list offset)."""
    budget = min(limit, max_offset - start)
    out: list[dict] = []
    nxt = start
    for s in LogRepo.read(list_topic(sub_id), 0, start, budget):
        if s.base > nxt:
            break
        for off, msg in seg.read(s, nxt, budget - (nxt - start)):
            nxt = off + 1
            msg["offset"] = msg.pop("source_offset")  # type: ignore[union-attr]
            out.append(msg)  # type: ignore[arg-type]
            if len(out) >= limit:
                return out, nxt
        if nxt - start >= budget:
            break
    return out, nxt


def pull(p: service.Principal, sub_id: str, params: dict) -> dict:
    check_name(sub_id, "subscription id")
    max_ = v.int_param(params, "max", 1, v.MAX_PULL, v.DEFAULT_PULL)
    wait_ms = v.int_param(params, "wait_ms", 0, v.MAX_WAIT_MS, 0)
    raw_ack = params.get("ack")
    if raw_ack is not None and not raw_ack:
        raise BadRequest("'ack' must be a receipt")
    ack_receipt = parse_receipt(raw_ack) if raw_ack is not None else None
    s = _sub_or_404(sub_id)
    _may_act(p, s)
    client = service.client_or_404(s.subscriber, "consumer")
    if ack_receipt is not None:
        _ack(s, ack_receipt)
    lt, owner = list_topic(sub_id), list_owner(sub_id)
    req = v.PullRequest(group=None, client_id=None, member_id=None, max=max_, wait_ms=wait_ms, tags=None, ack=None)
    field = subscription_field(sub_id)
    return service.consume(owner, lt, {"group": s.subscriber, "topic": lt}, lambda _v: field,
                           lambda: service._views(lt, owner), int(client.visibility_timeout_ms), req, None, "-",
                           reader=lambda q, start, lim, mx: read_list(sub_id, start, lim, mx))
