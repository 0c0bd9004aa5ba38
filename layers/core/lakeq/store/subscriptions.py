"""Subscription storage: the subscription items (and the ``~version`` counter the fan-out's index
cache follows), their message lists' lifecycle, and :class:`Start` (where a new subscription's
delivery begins). The use cases are in :mod:`lakeq.subscriptions.service`; the fan-out
(:mod:`lakeq.fanout.worker`) reads and parks through this module."""
from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Iterable
from dataclasses import dataclass

from pynamodb.attributes import BooleanAttribute, ListAttribute, MapAttribute, NumberAttribute, UnicodeAttribute
from pynamodb.exceptions import DoesNotExist
from pynamodb.indexes import AllProjection, GlobalSecondaryIndex
from pynamodb.models import Model
from pynamodb.transactions import TransactWrite

from lakeq.common import backoff
from lakeq.common.errors import BadRequest, LakeqError
from lakeq.common.names import covers, list_log
from lakeq.store.models import ClientModel, DedupModel, OffsetModel, QueueModel, SegmentModel, _meta
from lakeq.store.queue_log import LogRepo, batch_get_models
from lakeq.store.records import model_of, record_of
from lakeq.store.writes import TransactionFailed, transact, transact_if_first

VERSION_ID = "~version"
# the version item keeps the last CHANGES_KEPT changes (slot ``version % CHANGES_KEPT`` →
# "<version>:<subscription id>"), written in the transaction that bumps the version: a fan-out
# container that is at most this many changes behind re-reads only those subscriptions
# (lakeq.fanout.worker.Matcher.refresh). 64 entries of ~45 B keep the item under 4 KB: the
# fan-out's per-batch consistent GetItem of it stays 1 RCU
CHANGES_KEPT = 64
# compare-and-set rounds of the version's bump (read, then the transaction conditioned on it) before
# it bumps with the plain ADD and no change entry (lakeq.store.subscriptions.bumped): churn that
# moves the version under every round costs each fan-out container a Scan, never a 503 (review_d)
VERSION_CAS_ROUNDS = 8


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
    changes = MapAttribute(null=True)  # the version item only: see CHANGES_KEPT
    # JSON {"<topic>#<queue>": {...}}: source queues the fan-out could not deliver from (lakeq.fanout.worker)
    parked = UnicodeAttribute(null=True)
    # JSON {"<topic>": [head of queue 0, head of queue 1, ...]}: where each covered queue's log
    # ended when the subscription was created (only topics with messages then); see Start
    starts = UnicodeAttribute(null=True)
    # dead letters (issue 9, lakeq.consume.settle.Policy): deliveries before a message is dead-lettered
    # (absent: unlimited) and where copies go (absent: dropped and counted)
    max_deliveries = NumberAttribute(null=True)
    dead_letter_topic = UnicodeAttribute(null=True)
    # who granted the dead-letter topic (issue 30.4): "admin" (the admin key named it), else absent —
    # the subscriber's key named the topic its client's own dead-letter setting names, checked again at
    # each dead-lettering (lakeq.consume.settle.granted)
    dead_letter_by = UnicodeAttribute(null=True)
    # push delivery (issue 17, lakeq.store.push): the endpoint's settings (JSON), its signing secrets
    # (JSON list), paused or not, the deliverer's last attempt (JSON) and its counters
    push = UnicodeAttribute(null=True)
    push_secrets = UnicodeAttribute(null=True)
    push_paused = BooleanAttribute(null=True)
    push_state = UnicodeAttribute(null=True)
    push_failures = NumberAttribute(null=True)       # failed attempts since the last success
    push_delivered = NumberAttribute(null=True)      # messages acknowledged by the endpoint (ADD)
    push_dead_lettered = NumberAttribute(null=True)  # messages rejected after max_attempts (ADD)
    push_send_at = NumberAttribute(null=True)  # a rate-limited endpoint's next batch may start then (epoch ms)
    # counted in its subscriber's ``subscriptions`` (ClientModel) at creation; absent: made before the
    # counter existed, nothing to give back at deletion
    counted = BooleanAttribute(null=True)
    by_subscriber = BySubscriber()


@dataclass(frozen=True, slots=True, eq=False)  # eq and hash by identity, as the model's (a list inside)
class Subscription:
    """A subscription item as the use cases see it (:class:`SubscriptionModel`'s attributes; absent:
    None). Frozen: a subscription changes only through a repository call."""
    id: str
    subscriber: str | None = None
    topic: str | None = None
    conditions: str | None = None
    tags: list[str] | None = None
    created_at: int | None = None
    version: int | None = None
    changes: dict | None = None  # the version item's (CHANGES_KEPT)
    parked: str | None = None
    starts: str | None = None
    max_deliveries: int | None = None
    dead_letter_topic: str | None = None
    dead_letter_by: str | None = None
    push: str | None = None
    push_secrets: str | None = None
    push_paused: bool | None = None
    push_state: str | None = None
    push_failures: int | None = None
    push_delivered: int | None = None
    push_dead_lettered: int | None = None
    push_send_at: int | None = None
    counted: bool | None = None


def list_topic(sub_id: str) -> str:
    """The pseudo-queue topic of a subscription's message list (topic names never start with ``~``)."""
    return list_log(sub_id)


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

    @property
    def unparsed(self) -> int:
        """Bytes of the stored starts not parsed yet (0 once parsed, or with none)."""
        return 0 if self._raw is None else len(self._raw)

    @classmethod
    def read(cls, topic: str) -> "Start":
        """The heads of every queue of ``topic`` and its descendants: a consistent Scan of the
        topics and a consistent BatchGet of each covered topic's queue items (creation only:
        1 RCU per covered queue plus the Scan's 1 RCU per 4 KB of topics)."""
        from lakeq.common.names import log_of
        from lakeq.store.models import TopicModel
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


def uncount(t: TransactWrite, owner: str) -> None:
    """Add to ``t``: one push endpoint fewer on ``owner``'s client item, only while it counts one
    (``push_endpoints`` > 0): a client item gone (an SQS queue's deleted group) or an endpoint
    registered before the counter existed has none to give back, and the count never goes below
    0 (a negative count would raise the client's limit for good)."""
    t.update(ClientModel(owner), actions=[ClientModel.push_endpoints.add(-1)],
             condition=ClientModel.push_endpoints > 0)


def transact_uncounting(build, uncounting: bool, at: int) -> bool:
    """:func:`transact_if_first` of ``build(uncounting)``; when only the uncount (item ``at``,
    :func:`uncount`) failed its condition, the same without it: the endpoint was not counted."""
    if uncounting:
        try:
            transact(build(True))
            return True
        except TransactionFailed as e:
            if e.failed(0):
                return False
            if not e.failed(at):
                raise
    return transact_if_first(build(False))


class VersionMoved(LakeqError):
    """The version item changed between its read and the transaction that bumps it: read again."""


@dataclass(frozen=True, slots=True)
class Changes:
    """The version item as read: the version and the changes it keeps ({version: subscription id})."""
    version: int
    log: dict[int, str]
    has_log: bool = False

    def since(self, version: int) -> set[str] | None:
        """The subscriptions changed in (``version``, ``self.version``], None when one of those
        changes is not kept (too far behind, or bumped by code that kept none)."""
        if not 0 <= self.version - version <= CHANGES_KEPT:
            return None
        out = set()
        for u in range(version + 1, self.version + 1):
            sid = self.log.get(u)
            if sid is None:
                return None
            out.add(sid)
        return out


def read_changes() -> Changes:
    """The version item, consistent (1 RCU: under 4 KB)."""
    try:
        item = SubscriptionModel.get(VERSION_ID, consistent_read=True)
    except DoesNotExist:
        return Changes(0, {})
    raw = getattr(item, "changes", None)
    entries = raw.as_dict() if raw is not None else {}
    log: dict[int, str] = {}
    for v in entries.values():
        u, _, sid = str(v).partition(":")
        log[int(u)] = sid
    return Changes(int(item.version or 0), log, raw is not None)


def bumped(run, sub_id: str):
    """``run(bump)`` until the version did not move under it: ``bump(t)`` adds to a transaction the
    version's compare-and-set (version ``v`` → ``v + 1``, change ``v + 1`` = ``sub_id`` in its
    slot), ``v`` read just before; ``run`` raises :class:`VersionMoved` when that item failed its
    condition. One loop, :func:`lakeq.common.backoff.cas`. Past :data:`VERSION_CAS_ROUNDS` lost
    rounds the bump is the plain ADD, with no change entry (review_d): the change lands, and every
    fan-out container Scans once (:meth:`Changes.since` finds the entry missing), where churn that
    moved the version under every round made parks and other tenants' creates and deletes 503."""
    S = SubscriptionModel

    def attempt(n: int):
        if n >= VERSION_CAS_ROUNDS:
            def add(t: TransactWrite) -> None:
                t.update(S(VERSION_ID), actions=[S.version.add(1)])
            try:
                return run(add)
            except VersionMoved:  # (an ADD has no condition: not expected)
                return backoff.RETRY
        cur = read_changes()
        v = cur.version
        slot, entry = str((v + 1) % CHANGES_KEPT), f"{v + 1}:{sub_id}"
        same = S.version == v if v else S.version.does_not_exist()
        if cur.has_log:
            action, cond = S.changes[slot].set(entry), same & S.changes.exists()
        else:
            action, cond = S.changes.set({slot: entry}), same & S.changes.does_not_exist()

        def bump(t: TransactWrite) -> None:
            t.update(S(VERSION_ID), actions=[S.version.set(v + 1), action], condition=cond)
        try:
            return run(bump)
        except VersionMoved:
            return backoff.RETRY
    return backoff.cas(attempt)


class SubscriptionRepo:
    @staticmethod
    def get(sub_id: str) -> Subscription | None:
        if sub_id == VERSION_ID:
            return None
        try:
            return record_of(Subscription, SubscriptionModel.get(sub_id, consistent_read=True))
        except DoesNotExist:
            return None

    @staticmethod
    def create(s: Subscription, limit: int) -> bool:
        """Subscription item + its list's queue item + version bump + one more on its subscriber's
        ``subscriptions`` count: one transaction (4 WCU x2). False, nothing written, when the client
        item is gone or already counts ``limit`` (absent counts 0): the count is the condition, so
        concurrent creations cannot pass the limit together."""
        sub = model_of(SubscriptionModel, dataclasses.replace(s, counted=True))
        C = ClientModel

        def run(bump) -> bool:
            def build(t: TransactWrite) -> None:
                t.save(sub, condition=SubscriptionModel.id.does_not_exist())
                t.save(QueueModel(list_topic(sub.id), 0, max_offset=0, min_offset=0, last_produced_at=0),
                       condition=QueueModel.topic.does_not_exist())
                bump(t)
                t.update(C(s.subscriber), actions=[C.subscriptions.add(1)],
                         condition=C.name.exists() & (C.subscriptions.does_not_exist() | (C.subscriptions < limit)))
            try:
                transact(build)
            except TransactionFailed as e:
                if e.failed(2):
                    raise VersionMoved from e
                if e.failed(3):
                    return False
                raise
            return True
        return bumped(run, sub.id)

    @staticmethod
    def count_of(client: str) -> int | None:
        """The subscriptions ``client``'s item counts (None: no such client), consistent."""
        try:
            c = ClientModel.get(client, consistent_read=True, attributes_to_get=["name", "subscriptions"])
        except DoesNotExist:
            return None
        return int(c.subscriptions or 0)

    @staticmethod
    def delete(sub_id: str, push_owner: str | None = None, counted_by: str | None = None) -> bool:
        """Delete the subscription, its list's queue item (no append can succeed afterwards: appends
        are conditioned on it) and bump the version, atomically. ``push_owner``: the subscription
        has a push endpoint, uncounted on that client's item in the same transaction (None: it has
        none). ``counted_by``: the subscription is counted (``counted``) in that client's
        ``subscriptions``, given back in the same transaction — both on the one client item (the
        subscriber's), each only while it counts one (a count never goes below 0). False when it
        did not exist or its endpoint came or went meanwhile (read again)."""
        S, C = SubscriptionModel, ClientModel
        owner = push_owner or counted_by

        def build(push: bool, sub: bool, bump):
            def b(t: TransactWrite) -> None:
                pushed = S.push.exists() if push_owner is not None else S.push.does_not_exist()
                t.delete(S(sub_id), condition=S.id.exists() & pushed)
                t.delete(QueueModel(list_topic(sub_id), 0))
                bump(t)
                counts = [a for a, on in ((C.push_endpoints, push), (C.subscriptions, sub)) if on]
                if counts:
                    cond = counts[0] > 0
                    for a in counts[1:]:
                        cond = cond & (a > 0)
                    t.update(C(owner), actions=[a.add(-1) for a in counts], condition=cond)
            return b
        # the client item's condition failed: one of its counts has nothing to give back (a client item
        # gone, or counted before its counter existed): the same without that one, then without both
        tries = [(p, c) for p, c in ((True, True), (True, False), (False, True), (False, False))
                 if (not p or push_owner is not None) and (not c or counted_by is not None)]

        def run(bump) -> bool:
            for n, (p, c) in enumerate(tries):
                try:
                    transact(build(p, c, bump))
                    return True
                except TransactionFailed as e:
                    if e.failed(0):
                        return False
                    if e.failed(2):
                        raise VersionMoved from e
                    if n + 1 == len(tries) or not e.failed(3):
                        raise
            raise AssertionError("unreachable")  # pragma: no cover
        return bumped(run, sub_id)

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
    def of_subscriber(subscriber: str) -> list[Subscription]:
        """Through the ``by-subscriber`` GSI (eventually consistent), oldest first."""
        return [record_of(Subscription, m) for m in SubscriptionModel.by_subscriber.query(subscriber)]

    @staticmethod
    def of_subscribers(subscribers: Iterable[str], most: int | None = None) -> dict[str, list[Subscription]] | None:
        """:meth:`of_subscriber` of many subscribers at once (eventually consistent, each list oldest
        first as the index orders it): one paginated Scan of the table instead of a Query a
        subscriber (the operator's summary over every consumer, ``GET /v1/summary``). ``most``: the
        Scan reads at most ``most`` + 1 items (one page of that many) and answers None when the table
        holds more than ``most`` — a Scan reads every tenant's subscriptions, so its cost is the
        table's, not the caller's (review_g)."""
        out: dict[str, list[Subscription]] = {s: [] for s in subscribers}
        read = 0
        for s in SubscriptionModel.scan(page_size=None if most is None else most + 1):
            read += 1
            if most is not None and read > most:
                return None
            # the index holds only items with a created_at (a sparse index): the same here
            if s.id != VERSION_ID and s.subscriber in out and s.created_at is not None:
                out[s.subscriber].append(record_of(Subscription, s))
        for v in out.values():
            v.sort(key=lambda s: int(s.created_at))  # stable: the Scan's order among equal times
        return out

    @staticmethod
    def changes() -> Changes:
        """The version and the last :data:`CHANGES_KEPT` changes: one consistent GetItem."""
        return read_changes()

    @staticmethod
    def some(ids) -> list[Subscription]:
        """These subscriptions (those that exist), consistent BatchGetItem (100 keys a call)."""
        keys = [i for i in dict.fromkeys(ids) if i != VERSION_ID]
        if not keys:
            return []
        return [record_of(Subscription, s) for s in batch_get_models(SubscriptionModel, keys, consistent=True)]

    @staticmethod
    def all(consistent: bool = True, attributes: list[str] | None = None) -> list[Subscription]:
        """Every subscription: a paginated Scan, consistent by default (the fan-out's index rebuild;
        the metrics publisher's is eventual: half the read units). ``attributes``: only these are
        read (a ProjectionExpression; the others are None in the records)."""
        return [record_of(Subscription, s)
                for s in SubscriptionModel.scan(consistent_read=consistent, attributes_to_get=attributes)
                if s.id != VERSION_ID]


class ParkRepo:
    """The ``parked`` attribute of a subscription item: optimistic read-modify-write, each write
    one transaction with the version bump and its change entry (so every fan-out container re-reads
    it). 2 items: 4 WCU + ~6 for the version item's ~3 KB; consistent GetItems before (the
    subscription, the version item): 2 RCU."""

    @staticmethod
    def read(sub_id: str) -> tuple[bool, str | None]:
        try:
            item = SubscriptionModel.get(sub_id, consistent_read=True,
                                         attributes_to_get=["id", "parked"])
        except DoesNotExist:
            return False, None
        return True, getattr(item, "parked", None)

    @staticmethod
    def write(sub_id: str, old: str | None, new: str | None) -> bool:
        """``parked``: ``old`` → ``new`` (None: removed) if the subscription exists and still has
        ``old``. False when it changed meanwhile or the subscription is gone."""
        attr = SubscriptionModel.parked
        cond = SubscriptionModel.id.exists() & (attr.does_not_exist() if old is None else attr == old)
        action = attr.remove() if new is None else attr.set(new)

        def run(bump) -> bool:
            def build(t: TransactWrite) -> None:
                t.update(SubscriptionModel(sub_id), actions=[action], condition=cond)
                bump(t)
            try:
                transact(build)
            except TransactionFailed as e:
                if e.failed(0):
                    return False
                if e.failed(1):
                    raise VersionMoved from e
                raise
            return True
        return bumped(run, sub_id)


def is_subscription_id(sub_id: str) -> bool:
    """32 lowercase hex digits: the ids ``POST /v1/subscriptions`` makes (``~version`` is not one)."""
    return len(sub_id) == 32 and all(c in "0123456789abcdef" for c in sub_id)
