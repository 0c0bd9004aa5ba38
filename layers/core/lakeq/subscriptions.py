"""Subscriptions (SPEC §3, API.md "Subscriptions"): storage, the routes' use cases, message lists.

A subscription's message list is a *pseudo-queue* of the topic-queue machinery, not a second one:
queue item ``topic="~<id>", queue=0`` in QueuesTable, segments under ``pq="~<id>#0"`` in
SegmentsTable, the offsets record ``owner="s|<id>", queue=0`` in OffsetsTable, and dedup items
under ``topic="~<id>"`` in DedupTable keyed ``<source topic>@<source queue>:<source segment base>``.
Pulls run :func:`lakeq.logread.consume` over that one queue (receipt queue field ``~<id>``); acks
run :mod:`lakeq.settling` (as a group's do). The stream-triggered fan-out (:mod:`lakeq.fanout`) appends to the
lists with :meth:`LogRepo.append`.

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

from pynamodb.attributes import ListAttribute, NumberAttribute, UnicodeAttribute
from pynamodb.exceptions import DoesNotExist
from pynamodb.indexes import AllProjection, GlobalSecondaryIndex
from pynamodb.models import Model
from pynamodb.transactions import TransactWrite

from matcher.index import validate_conditions, validate_tags

from . import clock, settling
from . import validation as v
from .auth import Principal, authorize, client_or_404, topic_or_404
from .errors import BadRequest, Forbidden, NotFound, StaleReceipt
from .fanout_plan import parked_view
from .logread import ListLog, broker, consume, list_reader
from .models import DedupModel, OffsetModel, QueueModel, SegmentModel, _meta
from .names import check_name, check_topic, covers, is_name
from .receipts import Receipt, subscription_field
from .receipts import parse as parse_receipt
from .repos import LogRepo, transact, transact_if_first
from .selection import lock_until
from .settlement import Outcomes
from .settling import Policy

log = logging.getLogger("lakeq.subscriptions")

VERSION_ID = "~version"
MAX_LEVELS = 64
MAX_CONDITIONS_BYTES = 64 * 1024


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
    # JSON {"<topic>#<queue>": {...}}: source queues the fan-out could not deliver from (lakeq.fanout)
    parked = UnicodeAttribute(null=True)
    # JSON {"<topic>": [head of queue 0, head of queue 1, ...]}: where each covered queue's log
    # ended when the subscription was created (only topics with messages then); see Start
    starts = UnicodeAttribute(null=True)
    # dead letters (issue 9, lakeq.settling.Policy): deliveries before a message is dead-lettered
    # (absent: unlimited) and where copies go (absent: dropped and counted)
    max_deliveries = NumberAttribute(null=True)
    dead_letter_topic = UnicodeAttribute(null=True)
    by_subscriber = BySubscriber()


def list_topic(sub_id: str) -> str:
    """The pseudo-queue topic of a subscription's message list (topic names never start with ``~``)."""
    return f"~{sub_id}"


def list_owner(sub_id: str) -> str:
    return f"s|{sub_id}"


MAX_STARTS_BYTES = 256 * 1024


class Start:
    """Where a subscription starts, without comparing clocks of different hosts (API.md: "the
    messages published after the subscription was created").

    At creation, each covered queue's head (``max_offset``, strongly consistent: a produce
    answers 2xx only after its head moved) is recorded; the fan-out keeps a message for the
    subscription iff its offset is at or past its queue's recorded head. A message acknowledged
    before the create began is below the head read during it; a message produced after the
    create answered is at or past it. Topics (and queues) that did not exist or had no messages
    at creation start at 0. Subscriptions stored before this rule (no ``starts``) keep the old
    one, ``produced_at > created_at``."""

    __slots__ = ("_heads", "_raw", "created_at")

    def __init__(self, heads: dict[str, list[int]] | None, created_at: int = 0, raw: str | None = None):
        self._heads = heads
        self._raw = raw  # parsed on first use: the fan-out's index rebuild stays one JSON decode a subscription
        self.created_at = created_at

    @property
    def heads(self) -> dict[str, list[int]] | None:
        if self._raw is not None:
            self._heads, self._raw = json.loads(self._raw), None
        return self._heads

    @classmethod
    def read(cls, topic: str) -> "Start":
        """The heads of every queue of ``topic`` and its descendants: a consistent Scan of the
        topics and a consistent BatchGet of each covered topic's queue items (creation only:
        1 RCU per covered queue plus the Scan's 1 RCU per 4 KB of topics)."""
        from .models import TopicModel, log_of
        heads: dict[str, list[int]] = {}
        for t in TopicModel.scan(consistent_read=True):
            if t.deleted_at is not None or not covers(topic, t.name):
                continue  # (a deleted topic's tombstone: a topic made again later starts at 0)
            per_queue = {int(q.queue): int(q.max_offset)
                         for q in LogRepo.queues(log_of(t), int(t.queues), consistent=True)}
            if any(per_queue.values()):
                hs = [per_queue.get(i, 0) for i in range(max(per_queue) + 1)]
                while hs and hs[-1] == 0:
                    hs.pop()
                heads[log_of(t)] = hs  # per log name: another incarnation of the topic starts at 0
        return cls(heads)

    def dump(self) -> str:
        raw = json.dumps(self.heads, separators=(",", ":"), sort_keys=True)
        if len(raw) > MAX_STARTS_BYTES:
            raise BadRequest(f"the topic covers too many queues with messages to subscribe to at once "
                             f"({len(self.heads or {})} topics); subscribe to narrower topics")
        return raw

    @classmethod
    def of(cls, s: SubscriptionModel) -> "Start":
        raw = getattr(s, "starts", None)
        if raw is None:
            return cls(None, int(s.created_at or 0))
        return cls(None, raw=raw)

    def delivers(self, topic: str, queue: int, msg: dict) -> bool:
        """Keep source message ``msg`` (its ``offset``; ``produced_at`` for old subscriptions)
        of ``topic``'s queue ``queue`` for this subscription? (``topic``: the source's log name.)"""
        heads = self.heads
        if heads is None:
            return msg["produced_at"] > self.created_at
        hs = heads.get(topic)
        return hs is None or queue >= len(hs) or msg["offset"] >= hs[queue]


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
        return transact_if_first(build)

    @staticmethod
    def purge_list(sub_id: str, deadline: float | None = None) -> bool:
        """Delete the list's segments, offsets record and dedup items (after :meth:`delete`).
        Consistent queries + batch deletes (25 items a call). Idempotent: every step deletes what
        is still there, so a crash anywhere and a re-run (the unsubscribe stream consumer's retry,
        a retried DELETE) finish the job. Stops early once ``time.monotonic()`` passes
        ``deadline``: True when nothing of the list is left, False when stopped early."""
        lt = list_topic(sub_id)
        keys = [SegmentModel._hash_key_attribute().attr_name, SegmentModel._range_key_attribute().attr_name]
        sources = [
            (SegmentModel, lambda: SegmentModel.query(LogRepo.pq(lt, 0), consistent_read=True, attributes_to_get=keys)),
            (OffsetModel, lambda: OffsetModel.query(list_owner(sub_id), consistent_read=True)),
            (DedupModel, lambda: DedupModel.query(lt, consistent_read=True, attributes_to_get=["topic", "id"])),
        ]
        for model, items in sources:
            with model.batch_write() as b:
                for n, item in enumerate(items(), 1):
                    b.delete(item)
                    if n % 25 == 0 and deadline is not None and time.monotonic() > deadline:
                        return False
        return True

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
    out = {"id": s.id, "subscriber": s.subscriber, "topic": s.topic,
           "conditions": json.loads(s.conditions or "[]"), "tags": list(s.tags or []),
           "created_at": int(s.created_at or 0), "parked": _parked_view(s.parked)}
    if s.max_deliveries is not None:  # issue 9: shown when set
        out["max_deliveries"] = int(s.max_deliveries)
    if s.dead_letter_topic is not None:
        out["dead_letter_topic"] = s.dead_letter_topic
    return out


def policy(s: SubscriptionModel) -> Policy:
    return Policy(None if s.max_deliveries is None else int(s.max_deliveries), s.dead_letter_topic, s.subscriber)


def _parked_view(raw: str | None) -> list[dict]:
    """Source queues the fan-out parked this subscription on (empty when all is delivered)."""
    return parked_view(raw) if raw else []


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


def _may_act(p: Principal, s: SubscriptionModel) -> None:
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
    now = clock.now()
    sub = SubscriptionModel(uuid.uuid4().hex, subscriber=subscriber, topic=topic,
                            conditions=json.dumps(levels, separators=(",", ":")), tags=tags or None,
                            created_at=now, starts=Start.read(topic).dump(), max_deliveries=dl.get("max_deliveries"),
                            dead_letter_topic=dl.get("dead_letter_topic"))
    SubscriptionRepo.create(sub)
    return view(sub)


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
    :func:`purge_removed` (UnsubscribeFunction) purge the list again, with the event source
    mapping's retries, so a crash after the transaction (or a list too long to purge inline)
    leaves nothing behind. A retried DELETE after a lost 204 answers 404 (the subscription is
    gone, as API.md says of unknown ids); it also purges whatever of that id's list is left."""
    check_name(sub_id, "subscription id")
    s = SubscriptionRepo.get(sub_id) if is_name(sub_id) else None
    if s is None:
        if _is_subscription_id(sub_id):
            SubscriptionRepo.purge_list(sub_id, time.monotonic() + PURGE_INLINE_S)
        raise NotFound(f"subscription '{sub_id}' does not exist")
    _may_act(p, s)
    if not SubscriptionRepo.delete(sub_id):
        raise NotFound(f"subscription '{sub_id}' does not exist")
    SubscriptionRepo.purge_list(sub_id, time.monotonic() + PURGE_INLINE_S)


def _is_subscription_id(sub_id: str) -> bool:
    return len(sub_id) == 32 and all(c in "0123456789abcdef" for c in sub_id)


def purge_removed(event: dict, deadline: float | None = None) -> dict:
    """UnsubscribeFunction: SubscriptionsTable stream records → purge the lists of deleted
    subscriptions. Only ``REMOVE`` records of subscription items count (the event source
    mapping filters the others out on AWS; the local pump delivers all). Idempotent; a list not
    purged by ``deadline`` is reported in ``batchItemFailures`` and retried from there."""
    records = event.get("Records") or []
    for r in records:
        if r.get("eventName") != "REMOVE":
            continue
        sid = (((r.get("dynamodb") or {}).get("Keys") or {}).get("id") or {}).get("S")
        if not sid or sid == VERSION_ID or not _is_subscription_id(sid):
            continue
        try:
            done = SubscriptionRepo.purge_list(sid, deadline)
        except Exception:  # noqa: BLE001 - reported, retried by the event source mapping
            log.exception("purging the list of subscription %s failed", sid)
            done = False
        if not done:
            return {"batchItemFailures": [{"itemIdentifier": r["dynamodb"]["SequenceNumber"]}]}
    return {"batchItemFailures": []}


STALE = "the receipt is stale: the list was locked again or acknowledged since"


def _list_receipt(s: SubscriptionModel, receipt: Receipt) -> str:
    """The checks every use of a list's receipt makes (ack, visibility): this subscription's (400),
    this broker's (409 ``stale_receipt``). Returns the list's offsets owner."""
    if receipt.subscription != s.id:
        raise BadRequest("this receipt is not for this subscription's message list")
    if receipt.broker != broker():
        raise StaleReceipt(STALE)
    return list_owner(s.id)


def _ack(s: SubscriptionModel, receipt: Receipt, outcomes: Outcomes = Outcomes()) -> dict:
    owner = _list_receipt(s, receipt)
    out = settling.settle(owner, 0, receipt, outcomes, policy(s), list_reader(list_topic(s.id)), clock.now(), STALE)
    return {"subscription": s.id, "queue": 0, **out}


def ack(p: Principal, sub_id: str, receipt: Receipt, outcomes: Outcomes = Outcomes()) -> dict:
    """``POST /v1/acks {"subscription", "receipt", ["accept"], ["release"], ["reject"]}`` (dispatched
    by the ack route, :mod:`lakeq.api.queue`)."""
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
    if not settling.visibility(owner, 0, receipt, until, now):
        raise StaleReceipt(STALE)
    return {"subscription": s.id, "queue": 0, "locked_until": until}


def read_list(sub_id: str, start: int, limit: int, max_offset: int) -> tuple[list[dict], int]:
    """Up to ``limit`` list entries from list offset ``start`` (:func:`lakeq.logread.list_reader`)."""
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
    client = client_or_404(s.subscriber, "consumer")
    if ack_receipt is not None:
        _ack(s, ack_receipt)
    lt, owner = list_topic(sub_id), list_owner(sub_id)
    req = v.PullRequest(group=None, client_id=None, member_id=None, max=max_, wait_ms=wait_ms, tags=None, ack=None)
    return consume(ListLog(lt, owner, {"group": s.subscriber, "topic": lt}, subscription_field(sub_id)),
                   vis or int(client.visibility_timeout_ms), req, None, policy=policy(s))
