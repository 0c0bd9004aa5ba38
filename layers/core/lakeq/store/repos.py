"""Repositories: the only code that talks to DynamoDB. Small classes over the pynamodb models.

Every lock, ack and offset move is a conditional write; every append to a queue's log is a
conditional put of a segment item keyed by its first offset (with the client-chosen message ids in
the same transaction when there are any), so the log is a contiguous chain by construction. Costs per call are listed
in ``docs/design.md``.
"""
from __future__ import annotations

import dataclasses
import itertools
import time
from collections.abc import Iterable, Iterator
from datetime import datetime, timezone

from pynamodb.connection import Connection
from pynamodb.exceptions import DoesNotExist, PutError, TransactWriteError, UpdateError
from pynamodb.transactions import TransactWrite

from lakeq.common import backoff
from lakeq.common.errors import LakeqError
from lakeq.common.names import log_name
from lakeq.log import segments as seg
from lakeq.log.delay_plan import Delayed, due_key, encode_message, id_of_due
from lakeq.log.produce_plan import (  # noqa: F401
    QUEUE_ITEM_BYTES,
    TRANSACT_BYTES,
    TRANSACT_ITEMS,
    Append,
    dedup_item_bytes,
    pq,
    segment_item_bytes,
)
from lakeq.log.receipts import Receipt
from lakeq.log.selection import QueueView, ack_key, kept_acks, segments_wanted
from lakeq.store.models import (
    ClientModel,
    DedupModel,
    DelayedModel,
    KeyModel,
    OffsetModel,
    QueueModel,
    SegmentModel,
    TopicModel,
    queue_key,
)
from lakeq.store.records import Client, Queue, Topic, queue_from_item, record_of

DEDUP_TTL_S = 24 * 3600
# a copier (replay, redrive) whose copies are dropped as duplicates by their ids resumes a batch in
# flight only well within the ids' life (an hour kept for clocks apart)
RESUME_WINDOW_MS = (DEDUP_TTL_S - 3600) * 1000
CONDITION_FAILED = "ConditionalCheckFailed"
BATCH_GET_KEYS = 100  # DynamoDB's BatchGetItem limit
# the store's write limits and item-size bounds live with the (pure) produce planner


def conditional_failed(e: Exception) -> bool:
    """A single-item write (PutError / UpdateError / DeleteError) refused by its condition."""
    cause = getattr(e, "cause_response_code", None)
    return cause == "ConditionalCheckFailedException"


def _reasons(e: TransactWriteError) -> list[str | None]:
    return [r.code if r is not None else None for r in (e.cancellation_reasons or [])]


class TransactionFailed(LakeqError):
    """A transaction was cancelled; ``reasons`` lists each item's cancellation code (or None)."""

    def __init__(self, reasons: list[str | None]):
        super().__init__(f"transaction cancelled: {reasons}")
        self.reasons = reasons

    def failed(self, i: int) -> bool:
        """Whether item ``i`` (in the order ``build`` added the items) failed its condition.

        >>> e = TransactionFailed(["None", CONDITION_FAILED])
        >>> e.failed(1), e.failed(0), e.failed(2), e.failed(-1)
        (True, False, False, False)
        """
        return 0 <= i < len(self.reasons) and self.reasons[i] == CONDITION_FAILED


_connections: dict[str, Connection] = {}


def _connection() -> Connection:
    """One pynamodb Connection (one botocore client) per region and container, made on first
    use: a new client per transaction loaded botocore's service model each time (~0.5 s on the
    test machine, tens of ms on Lambda) on produce's hot path."""
    region = TopicModel.Meta.region
    conn = _connections.get(region)
    if conn is None:
        conn = _connections[region] = Connection(region=region)
    return conn


def warm_transactions() -> None:
    """Create the transaction client now (its botocore client, made on first use, loads the service
    model): a pull that sees a delayed message ahead calls this so the promotion at its due time
    does not pay that on the consumer's clock (lakeq.produce.delayed)."""
    _ = _connection().client


_KIND_ORDER = {"condition_check": 0, "delete": 1, "save": 2, "update": 3}


class _Recorder:
    """Wraps a TransactWrite and remembers the kind of each item in call order: pynamodb sends
    condition checks first, then deletes, puts and updates, and DynamoDB's cancellation reasons
    follow that order, not ours."""

    def __init__(self, t: TransactWrite):
        self._t = t
        self.kinds: list[str] = []

    def __getattr__(self, name: str):
        attr = getattr(self._t, name)
        if name not in _KIND_ORDER:
            return attr

        def call(*args, **kwargs):
            self.kinds.append(name)
            return attr(*args, **kwargs)
        return call

    def in_call_order(self, reasons: list) -> list:
        sent = sorted(range(len(self.kinds)), key=lambda i: (_KIND_ORDER[self.kinds[i]], i))
        out: list = [None] * len(self.kinds)
        for position, i in enumerate(sent):
            out[i] = reasons[position] if position < len(reasons) else None
        return out


TRANSACTION_CONFLICT = "TransactionConflict"
TRANSACT_ATTEMPTS = 6


def only_conflicts(reasons: list[str | None]) -> bool:
    """Whether a cancellation is only another transaction in flight on some item (nothing failed
    its condition): the transaction wrote nothing and may be sent again as it is.

    >>> only_conflicts([None, "TransactionConflict"]), only_conflicts(["None", "TransactionConflict"])
    (True, True)
    >>> only_conflicts(["TransactionConflict", "ConditionalCheckFailed"]), only_conflicts([None, "None"])
    (False, False)
    """
    codes = {r for r in reasons if r not in (None, "None")}
    return codes == {TRANSACTION_CONFLICT}


def transact(build) -> None:
    """Run ``build(t)`` inside one TransactWrite; raise :class:`TransactionFailed` with the
    cancellation reasons listed in the order ``build`` added the items.

    A cancellation that is only ``TransactionConflict`` (another transaction in flight on one of the
    items, which the SDK does not retry) is sent again, rebuilt by ``build``, after the common
    backoff, up to :data:`TRANSACT_ATTEMPTS` times in all: it wrote nothing and every condition
    is evaluated again. It was a 500 on the routes that met it."""
    for attempt in range(TRANSACT_ATTEMPTS):
        recorder = None
        try:
            with TransactWrite(connection=_connection()) as t:
                recorder = _Recorder(t)
                build(recorder)
            return
        except TransactWriteError as e:
            reasons = _reasons(e)
            if not reasons:
                raise
            if only_conflicts(reasons) and attempt + 1 < TRANSACT_ATTEMPTS:
                backoff.sleep(attempt, base=0.005, cap=0.32)
                continue
            raise TransactionFailed(recorder.in_call_order(reasons) if recorder else reasons) from e


def update_if(item, actions: list, condition) -> bool:
    """One conditional UpdateItem of ``item``: True when written, False when ``condition``
    refused it; any other error raises."""
    try:
        item.update(actions=actions, condition=condition)
        return True
    except UpdateError as e:
        if conditional_failed(e):
            return False
        raise


def transact_if_first(build, answers: tuple[int, ...] = (0,)) -> bool:
    """:func:`transact`, answering False when the first item ``build`` added (or any item of
    ``answers``, in the order added) failed its condition (the usual "it changed meanwhile / it is
    gone" outcome); any other cancellation raises."""
    try:
        transact(build)
    except TransactionFailed as e:
        if any(e.failed(i) for i in answers):
            return False
        raise
    return True


def topic_live():
    """Condition: the topic item exists and is no tombstone (docs/design.md "Queue lifecycle")."""
    return TopicModel.name.exists() & TopicModel.deleted_at.does_not_exist()


def topic_inc_is(inc: int):
    """Condition: the topic item's incarnation is ``inc`` (absent = 0)."""
    return TopicModel.inc.does_not_exist() if not inc else TopicModel.inc == inc


def inc_of(t: Topic | TopicModel | None) -> int:
    """A topic item's (or tombstone's) incarnation; 0 for none."""
    return 0 if t is None or t.inc is None else int(t.inc)


class TopicRepo:
    @staticmethod
    def get(name: str) -> Topic | None:
        """The topic item; None when there is none or it is a tombstone (a deleted topic)."""
        t = TopicRepo.get_any(name)
        return None if t is None or t.deleted_at is not None else t

    @staticmethod
    def get_any(name: str) -> Topic | None:
        """The topic item or its tombstone (consistent GetItem)."""
        try:
            return record_of(Topic, TopicModel.get(name, consistent_read=True))
        except DoesNotExist:
            return None

    @staticmethod
    def create_condition(old: Topic | None):
        """Condition of a topic item put over ``old`` (what a read found): absent then, or the same
        tombstone (a live topic fails it)."""
        if old is None:
            return TopicModel.name.does_not_exist()
        return TopicModel.deleted_at.exists() & topic_inc_is(inc_of(old))

    @staticmethod
    def next_inc(old: Topic | None) -> int | None:
        """The incarnation of a topic created over ``old``: 0 (absent) when there was none, else
        the tombstone's + 1."""
        return None if old is None else inc_of(old) + 1

    @staticmethod
    def create(name: str, queues: int, parent: str | None, now: int) -> None:
        """Topic item + one queue item per queue, atomically; the parent must exist. Over a
        tombstone (a deleted topic of this name) the topic is its next incarnation: new keys, so
        nothing of the deleted one is seen. Raises TransactionFailed: reason index 0 = topic exists
        (or was deleted or created meanwhile), 1 = parent missing."""
        old = TopicRepo.get_any(name)
        inc = TopicRepo.next_inc(old)
        log = log_name(name, inc)

        def build(t: TransactWrite) -> None:
            t.save(TopicModel(name, queues=queues, parent=parent, created_at=now, inc=inc),
                   condition=TopicRepo.create_condition(old))
            if parent is not None:
                t.condition_check(TopicModel, parent, condition=topic_live())
            for q in range(queues):
                t.save(QueueModel(log, q, max_offset=0, min_offset=0, last_produced_at=0),
                       condition=QueueModel.pq.does_not_exist())
        transact(build)

    @staticmethod
    def grow(name: str, old: int, new: int, inc: int = 0) -> None:
        """Queue count ``old`` → ``new`` and the new queue items, atomically, in incarnation
        ``inc`` (the one read). Raises TransactionFailed: reason index 0 = the count is no longer
        ``old`` or the topic is no longer that incarnation."""
        log = log_name(name, inc)

        def build(t: TransactWrite) -> None:
            t.update(TopicModel(name), actions=[TopicModel.queues.set(new)],
                     condition=topic_live() & topic_inc_is(inc) & (TopicModel.queues == old))
            for q in range(old, new):
                t.save(QueueModel(log, q, max_offset=0, min_offset=0, last_produced_at=0),
                       condition=QueueModel.pq.does_not_exist())
        transact(build)

    @staticmethod
    def all() -> list[Topic]:
        """Every topic (tombstones left out), by name."""
        return sorted((record_of(Topic, t) for t in TopicModel.scan() if t.deleted_at is None), key=lambda t: t.name)


class ClientRepo:
    @staticmethod
    def all() -> list[Client]:
        """Every client, by name: one Scan of the clients table (all its pages)."""
        return sorted((record_of(Client, c) for c in ClientModel.scan()), key=lambda c: c.name)

    @staticmethod
    def get(name: str) -> Client | None:
        try:
            return record_of(Client, ClientModel.get(name, consistent_read=True))
        except DoesNotExist:
            return None

    @staticmethod
    def model(client: Client) -> ClientModel:
        """The item of ``client`` as a model to put (its absent attributes left out)."""
        return ClientModel(client.name, **{k: v for k, v in dataclasses.asdict(client).items()
                                           if k != "name" and v is not None})

    @staticmethod
    def create(client: Client | ClientModel) -> None:
        """Client and its key item, atomically; index 0 failing = the name exists."""
        item = client if isinstance(client, ClientModel) else ClientRepo.model(client)

        def build(t: TransactWrite) -> None:
            t.save(item, condition=ClientModel.name.does_not_exist())
            t.save(KeyModel(client.key_hash, client=client.name, key_id=client.key_hash[:16],
                            created_at=client.created_at),
                   condition=KeyModel.key_hash.does_not_exist())
        transact(build)

    @staticmethod
    def client_for_key(key_hash: str) -> str | None:
        """Strongly consistent: a key revoked a moment ago is not found (0.5 RCU more than an
        eventually consistent read, paid once per key and container per cache TTL)."""
        try:
            return KeyModel.get(key_hash, consistent_read=True).client
        except DoesNotExist:
            return None

    @staticmethod
    def set_keys(client: Client, version: int | None, key_map: str, add: tuple[str, str, int] | None = None,
                 remove: str | None = None) -> None:
        """The client's key set ``key_map`` (conditioned on ``key_version`` still being ``version``)
        and the key item added (``add`` = (key hash, key id, created at), absent before) or removed
        (``remove`` = its key hash), in one transaction. Raises TransactionFailed: reason
        index 0 = the client is gone or its keys changed meanwhile (read again)."""
        cond = ClientModel.name.exists() & (ClientModel.key_version.does_not_exist() if version is None
                                            else ClientModel.key_version == version)

        def build(t: TransactWrite) -> None:
            t.update(ClientModel(client.name), actions=[ClientModel.key_map.set(key_map),
                                      ClientModel.key_version.set((version or 0) + 1)], condition=cond)
            if add is not None:
                t.save(KeyModel(add[0], client=client.name, key_id=add[1], created_at=add[2]),
                       condition=KeyModel.key_hash.does_not_exist())
            if remove is not None:
                t.delete(KeyModel(remove),
                         condition=KeyModel.key_hash.does_not_exist() | (KeyModel.client == client.name))
        transact(build)


    @staticmethod
    def set_settings(name: str, changes: dict) -> Client | None:
        """A consumer's ``max_deliveries`` / ``dead_letter_topic`` (None removes): one conditional
        UpdateItem (the client exists and is a consumer). None when it is not (any more)."""
        actions = [getattr(ClientModel, k).remove() if val is None else getattr(ClientModel, k).set(val)
                   for k, val in changes.items()]
        c = ClientModel(name)
        written = update_if(c, actions, ClientModel.name.exists() & (ClientModel.role == "consumer"))
        return record_of(Client, c) if written else None


_segment_sizes: dict[str, int] = {}  # pq -> messages in the last segment this container read there
SEGMENT_SIZES_MAX = 4096


def remember_segment_size(pq_: str, count: int) -> None:
    """Note how many messages a segment of queue ``pq_`` held (the next read's first page size)."""
    if len(_segment_sizes) >= SEGMENT_SIZES_MAX and pq_ not in _segment_sizes:
        _segment_sizes.clear()
    _segment_sizes[pq_] = count


def _wire_key(key: dict) -> dict:
    """A plain key as pynamodb's low-level calls need it: a number as its string (``{"N": "5"}``);
    pynamodb's client does not validate parameters, so an ``int`` would go out as a JSON number,
    which moto accepts and DynamoDB rejects (SerializationException)."""
    return {k: str(v) if isinstance(v, int) and not isinstance(v, bool) else v for k, v in key.items()}


def _batch_get(model, keys: list[dict], consistent: bool = False,
               attributes: list[str] | None = None) -> list[dict]:
    """The raw items of ``model``'s table at ``keys`` (plain key dicts), in no particular order;
    a missing item is left out. BatchGetItem, at most :data:`BATCH_GET_KEYS` keys a call,
    UnprocessedKeys asked again after a jittered exponential backoff (throttled: longer waits).
    ``attributes``: a projection (only those attributes come back)."""
    conn = model._get_connection()
    table = model.Meta.table_name
    out: list[dict] = []
    for i in range(0, len(keys), BATCH_GET_KEYS):
        page: list[dict] = [_wire_key(k) for k in keys[i:i + BATCH_GET_KEYS]]
        attempt = 0
        while page:
            data = conn.batch_get_item(page, consistent_read=consistent, attributes_to_get=attributes)
            out.extend(data.get("Responses", {}).get(table, []))
            left = data.get("UnprocessedKeys", {}).get(table, {}).get("Keys") or []
            page = left  # already typed (``{"S": …}`` / ``{"N": "…"}``): pynamodb passes those as they are
            if page:
                attempt += 1
                backoff.sleep(attempt, base=0.01, cap=1.0)
    return out


# The container's copies of an owner's locks (OffsetRepo.held): owner -> (monotonic read time, {queue: lock_until})
_HELD: dict[str, tuple[float, dict[int, int]]] = {}
HELD_KEPT = 1024  # at most this many owners' copies (past it, all dropped)
HELD_MAX_AGE_S = 1.0

# The container's copies of queue items (LogRepo.queue_hints): (topic, n, only) -> (monotonic expiry, raw items)
_HINTS: dict[tuple, tuple[float, list[dict]]] = {}
HINTS_KEPT = 1024  # at most this many copies (expired ones dropped first; past it, none kept)


def _monotonic() -> float:
    """The clock of the container's copies (a seam for tests)."""
    return time.monotonic()


class LogRepo:
    @staticmethod
    def pq(topic: str, queue: int) -> str:
        return pq(topic, queue)

    @classmethod
    def queues(cls, topic: str, n: int, consistent: bool = False, exact: bool = True,
               only: Iterable[int] | None = None) -> list[Queue]:
        """The queue items ``0..n-1`` of a topic (``n`` = the topic item's ``queues``), ordered by
        queue: BatchGetItem, at most 100 keys a call, UnprocessedKeys asked again after a jittered
        exponential backoff. A missing item (not created yet) is left out. ``only``: just those of
        these queue numbers (a group member's assigned queues: its pull reads no other member's).
        Cost: 0.5 RCU per queue item eventually consistent (1 RCU strongly), against one Query's
        0.5 RCU per 4 KB when the table was keyed by topic (see docs/design.md).

        ``max_offset`` is a hint that may lag (issue 16 item 3: an append without ids does not move
        it; the SegmentsTable stream's consumer does, :mod:`lakeq.produce.heads`). ``exact`` (the
        default) corrects each item's ``max_offset`` in memory from its chain
        (:meth:`chain_end`: one Query a queue, consistent when ``consistent``): what every
        reader outside the hot pull path gets. ``exact=False``: the hints alone (the ranked pull,
        which probes only the queues whose hint shows nothing to read, ``lakeq.consume.reader``)."""
        out = [queue_from_item(item) for item in cls.queue_items(topic, n, consistent, only)]
        out.sort(key=lambda m: int(m.queue))
        if exact:
            for m in out:
                cls._exact(m, consistent)
        return out

    @staticmethod
    def queue_items(topic: str, n: int, consistent: bool = False, only: Iterable[int] | None = None) -> list[dict]:
        """The raw items :meth:`queues` reads (one BatchGetItem; in no particular order): what a
        container may keep a copy of (each read makes fresh records of it)."""
        numbers = range(n) if only is None else sorted(q for q in set(only) if 0 <= q < n)
        keys = [{"pq": queue_key(topic, q)} for q in numbers]
        return _batch_get(QueueModel, keys, consistent=consistent)

    @staticmethod
    def forget_hints() -> None:
        """Drop the container's copies of queue items (:meth:`queue_hints`) and of locks
        (:meth:`OffsetRepo.held`; tests: a fresh store)."""
        _HINTS.clear()
        _HELD.clear()

    @classmethod
    def queue_hints(cls, topic: str, n: int, max_age_s: float, only: Iterable[int] | None = None,
                    refresh: bool = False) -> tuple[list[Queue], bool]:
        """:meth:`queues` with ``exact=False`` (the hints), from the container's copy when it is
        younger than ``max_age_s`` (monotonic): no store call then. A pull that takes these (the
        SQS endpoint's receives, issue 16 item 4) ranks by hints at most that much older than the
        stream's head mover already makes them, probes the queues whose hint shows nothing
        (read-after-write kept, :meth:`lakeq.consume.reader.Log.probe`) and locks with its
        conditional write on the offset record, read consistently each time: a stale copy costs a
        read that finds nothing, never a wrong lock (but the copy outlives its queue for up to
        ``max_age_s`` when another container deletes it: see docs/costs.md "SQS endpoint: the
        queue items' copy"). Items naming delayed messages (``next_due``)
        are never kept: such a topic's pulls read them each time, so its promotions are due to the
        millisecond. Fresh records each call (a poll moves their heads in memory), and whether they
        came from the copy; ``refresh``: read the items now (and keep them). O(n)."""
        key = (topic, n, None if only is None else tuple(sorted(set(only))))
        now = _monotonic()
        hit = None if refresh else _HINTS.get(key)
        copied = hit is not None and hit[0] > now
        if copied:
            items = hit[1]
        else:
            items = cls.queue_items(topic, n, only=only)
            if len(_HINTS) >= HINTS_KEPT:
                for k, (until, _) in list(_HINTS.items()):
                    if until <= now:
                        _HINTS.pop(k, None)
            if any("next_due" in item for item in items) or (len(_HINTS) >= HINTS_KEPT and key not in _HINTS):
                _HINTS.pop(key, None)
            else:
                _HINTS[key] = (now + max_age_s, items)
        return sorted((queue_from_item(item) for item in items), key=lambda m: int(m.queue)), copied

    @classmethod
    def queue(cls, topic: str, queue: int, consistent: bool = True, exact: bool = True) -> Queue | None:
        """The queue item; ``exact``: its ``max_offset`` corrected from the chain (:meth:`queues`)."""
        try:
            m = record_of(Queue, QueueModel.get(queue_key(topic, queue), consistent_read=consistent))
        except DoesNotExist:
            return None
        return cls._exact(m, consistent) if exact else m

    @staticmethod
    def _exact(m: Queue, consistent: bool) -> Queue:
        """``m`` with ``max_offset`` and ``last_produced_at`` (both moved by the head mover) taken
        from the newest segment when it is ahead."""
        item = LogRepo._newest(m.pq, consistent)
        if item is not None and int(item.end) > int(m.max_offset):
            m.max_offset = int(item.end)
            m.last_produced_at = max(int(m.last_produced_at or 0), int(item.produced_at or 0))
        return m

    @staticmethod
    def _newest(pq_: str, consistent: bool) -> SegmentModel | None:
        """Queue ``pq_``'s newest segment (one Query, newest first, one item), None when the chain
        is empty."""
        for item in SegmentModel.query(pq_, scan_index_forward=False, limit=1, consistent_read=consistent):
            return item
        return None

    @staticmethod
    def segments_at(starts: dict[str, int]) -> dict[str, SegmentModel]:
        """For each queue ``pq_ -> start``: the segment starting exactly at ``start``, for those
        that have one (BatchGetItem of the segment keys, eventually consistent, at most 100 keys a
        call, UnprocessedKeys asked again after a jittered backoff), for many queues in one round
        trip: 0.5 RRU per key when there is no such segment (the common case of a drained queue),
        the segment's size when there is (a BatchGetItem bills each item's full size whatever it
        returns of it; the pull that locks it reads it from here instead of a Query, :meth:`read`'s
        ``first``). Exact only when each ``start`` is a segment boundary (the pull's probe asks at
        a frontier equal to the queue item's ``max_offset`` or the record's ``bnd``, each a
        segment's end)."""
        keys = [{"pq": k, "base": int(v)} for k, v in starts.items()]
        out = {}
        for item in _batch_get(SegmentModel, keys):
            m = SegmentModel.from_raw_data(item)
            out[m.pq] = m
        return out

    @staticmethod
    def chain_end(pq_: str, consistent: bool = False) -> int | None:
        """The end of queue ``pq_``'s newest segment (one Query, newest first, one item: 0.5 RRU
        per 4 KB of that segment eventually consistent, 1 strongly), None when the chain is empty
        (never written, or every segment expired: then the queue item's ``max_offset`` is exact, the
        stream's consumer moved it within seconds of each put, long before a segment's TTL)."""
        item = LogRepo._newest(pq_, consistent)
        return None if item is None else int(item.end)

    @staticmethod
    def dedup_lookup(topic: str, ids: list[str]) -> dict[str, tuple[int, int]]:
        out: dict[str, tuple[int, int]] = {}
        if not ids:
            return out
        for item in DedupModel.batch_get([(topic, i) for i in dict.fromkeys(ids)]):
            if item.offset is not None:  # a delayed message's id has no offset yet (dedup_entries)
                out[item.id] = (int(item.queue), int(item.offset))
        return out

    @staticmethod
    def dedup_entries(topic: str, ids: list[str]) -> dict[str, tuple[int, int | None, int | None]]:
        """As :meth:`dedup_lookup`, delayed messages included: id → (queue, offset or None while the
        message is delayed, deliver_at or None)."""
        out: dict[str, tuple[int, int | None, int | None]] = {}
        if not ids:
            return out
        for item in DedupModel.batch_get([(topic, i) for i in dict.fromkeys(ids)]):
            out[item.id] = (int(item.queue), None if item.offset is None else int(item.offset),
                            None if item.deliver_at is None else int(item.deliver_at))
        return out

    @classmethod
    def head(cls, topic: str, queue: int, fresh: bool = False) -> int | None:
        """Where the next segment goes: the end of the queue's last segment.

        Cheap path (issue 16 item 3): the newest segment's end (eventually consistent Query, one
        item, :meth:`chain_end`); only when the chain is empty, the queue item's ``max_offset``
        (eventually consistent GetItem: exact then, see :meth:`chain_end`). A stale answer only
        makes the put fail its condition, and the caller asks again with ``fresh``: the queue item
        and the newest segment, both strongly consistent. None when the queue does not exist (an
        empty chain and no queue item; a put at the head of a queue whose item is gone but whose
        segments are left fails in the transaction paths, and is a deleted incarnation's log)."""
        if not fresh:
            end = cls.chain_end(cls.pq(topic, queue))
            if end is not None:
                return end
        meta = cls.queue(topic, queue, consistent=fresh, exact=False)
        if meta is None:
            return None
        head = int(meta.max_offset)
        if fresh:
            end = cls.chain_end(cls.pq(topic, queue), consistent=True)
            if end is not None:
                head = max(head, end)
        return head

    @classmethod
    def append(cls, topic: str, queue: int, base: int, part: Append, now: int) -> None:
        """Put ``part``'s segments at ``base`` (which must be the queue's head).

        Each segment item is keyed by its first offset and written only if no segment starts
        there (``attribute_not_exists``): since every segment starts where an existing one ends,
        the log stays one contiguous chain — no hole, no overlap — without a lock or a counter.
        A part without client-chosen ids and with one segment is one conditional PutItem and
        nothing else (issue 16 item 3): the queue item's ``max_offset`` is moved by the
        SegmentsTable stream's consumer (:mod:`lakeq.produce.heads`), so it lags the chain by a
        stream delay; readers that need the exact head read the chain (:meth:`queues`,
        :meth:`queue`, :meth:`chain_end`).

        A part with ids (or several segments) is one transaction: the queue item's head move
        (``max_offset <= base`` → the part's end), the segments, then the dedup items (each
        conditioned on its absence). The head moves atomically with the messages, so a message id
        found in the dedup table is always below the head: a retry answered from the dedup items
        is readable (issue 8, defect 2). Raises :class:`TransactionFailed` with reasons in that
        order: index 0 = the head is past ``base`` or the queue is gone, 1..len(segments) = a
        segment already starts there (someone appended first), the last ``len(part.dedup)`` =
        the corresponding message id was recorded meanwhile.
        At most :data:`TRANSACT_ITEMS` items: ``1 + len(segments) + len(dedup)``."""
        assert part.segments[0].base == base
        assert 1 + len(part.segments) + len(part.dedup) <= TRANSACT_ITEMS
        pq = cls.pq(topic, queue)
        end = part.segments[-1].end

        def seg_item(s: seg.Segment, alone: bool = False) -> SegmentModel:
            return SegmentModel(pq, s.base, end=s.end, count=s.count, idx=s.idx, data=s.data, z=s.compressed,
                                produced_at=now, h=True if alone else None)

        if not part.dedup and len(part.segments) == 1:
            try:
                seg_item(part.segments[0], alone=True).save(condition=SegmentModel.pq.does_not_exist())
            except PutError as e:
                if conditional_failed(e):
                    raise TransactionFailed([CONDITION_FAILED]) from None
                raise
        else:
            def build(t: TransactWrite) -> None:
                t.update(cls._queue_item(topic, queue),
                         actions=[QueueModel.max_offset.set(end), QueueModel.last_produced_at.set(now)],
                         condition=QueueModel.topic.exists() & (QueueModel.max_offset <= base))
                for s in part.segments:
                    t.save(seg_item(s), condition=SegmentModel.pq.does_not_exist())
                for mid, off in part.dedup:
                    t.save(DedupModel(topic, mid, queue=queue, offset=off,
                                      expires_at=datetime.fromtimestamp(now // 1000 + DEDUP_TTL_S, timezone.utc)),
                           condition=DedupModel.id.does_not_exist())
            transact(build)

    @staticmethod
    def _queue_item(topic: str, queue: int) -> QueueModel:
        """The queue item's key (the one place that builds it)."""
        return QueueModel(topic, queue)

    @classmethod
    def advance_head(cls, topic: str, queue: int, end: int, now: int) -> None:
        """``max_offset`` := ``end`` unless it is already there or past (:meth:`advance_key`)."""
        cls.advance_key(cls.pq(topic, queue), end, now)

    @staticmethod
    def advance_key(pq_: str, end: int, produced_at: int) -> bool:
        """Queue item ``pq_``'s ``max_offset`` := ``end`` unless it is already there or past (one
        conditional UpdateItem, ``max_offset < end``: the head only ever moves forward, so a
        stream batch applied twice or late changes nothing). A gone queue item (a deleted
        topic) is not created. A write that meets a transaction in flight on the queue item
        (``TransactionConflictException``, which the SDK does not retry) is retried. True when
        it moved the head."""
        for attempt in range(8):
            try:
                QueueModel(pq_).update(
                    actions=[QueueModel.max_offset.set(end), QueueModel.last_produced_at.set(produced_at)],
                    condition=QueueModel.topic.exists() & (QueueModel.max_offset < end))
                return True
            except UpdateError as e:
                if conditional_failed(e):
                    return False
                if getattr(e, "cause_response_code", None) != "TransactionConflictException" or attempt == 7:
                    raise
                backoff.sleep(attempt, base=0.005, cap=0.32)
        return False

    @classmethod
    def read(cls, topic: str, queue: int, start: int, max_offsets: int, first: SegmentModel | None = None):
        """Yield the segments holding offsets ``start..`` in order, until ``max_offsets`` offsets
        are covered. One Query ``base >= start``; when ``start`` falls inside a segment (the
        previous batch ended mid-segment), one more Query, newest first, for the segment that
        contains it. Eventually consistent: a segment not yet visible only shortens the batch
        (the caller stops at the first gap). ``first``: the segment starting at ``start`` when
        the caller already read it (the pull's probe, :meth:`segments_at`): no Query when it covers
        ``max_offsets``, else the Query from its end.

        The forward Query's first page asks for as many segments as the batch should need
        (:func:`lakeq.log.selection.segments_wanted`, from the messages per segment this container
        last read on the queue; 8 when it read none): a Query is billed for every item it reads,
        and a page of 8 segments of a hundred messages was ~10 times what a batch of a hundred
        needs. Further pages (when the segments are smaller than that) ask for 8 as before."""
        pq = cls.pq(topic, queue)
        boundary = False  # is ``start`` known to be a segment's base or end (no segment around it)?
        if first is not None and int(first.base) == start:
            s = cls._segment(first)
            remember_segment_size(pq, s.count)
            yield s
            if s.end - start >= max_offsets:
                return
            max_offsets -= s.end - start
            start, boundary = s.end, True
        forward = cls._forward(pq, start, segments_wanted(max_offsets, _segment_sizes.get(pq)))
        first = next(forward, None)
        if not boundary and (first is None or int(first.base) > start):
            for item in SegmentModel.query(pq, SegmentModel.base < start, scan_index_forward=False, limit=1):
                if int(item.end) > start:
                    yield cls._segment(item)
                    max_offsets -= int(item.end) - start
                    start = int(item.end)
                break
            if max_offsets <= 0:
                return
        covered = 0
        items = [first] if first is not None else []
        for item in itertools.chain(items, forward):
            s = cls._segment(item)
            remember_segment_size(pq, s.count)
            yield s
            covered += s.end - max(start, s.base)
            if covered >= max_offsets:
                return

    @classmethod
    def segments_between(cls, topic: str, queue: int, start: int, upto: int) -> Iterator[seg.Segment]:
        """The queue's segments with a base in ``[start, upto]``, in order: one consistent Query
        (``base`` BETWEEN), read page by page as the caller iterates (the fan-out's catch-up,
        :func:`lakeq.fanout.worker.catch_up`)."""
        for item in SegmentModel.query(cls.pq(topic, queue), SegmentModel.base.between(start, upto),
                                       consistent_read=True):
            yield cls._segment(item)

    @staticmethod
    def _forward(pq: str, start: int, first_page: int):
        """The segments from ``start`` on, in order: a first Query page of ``first_page`` items,
        then pages of 8."""
        page = SegmentModel.query(pq, SegmentModel.base >= start, limit=first_page, page_size=first_page)
        n = 0
        for item in page:
            n += 1
            yield item
        if n < first_page or page.last_evaluated_key is None:
            return
        yield from SegmentModel.query(pq, SegmentModel.base >= start, page_size=8,
                                      last_evaluated_key=page.last_evaluated_key)

    @staticmethod
    def _segment(item: SegmentModel) -> seg.Segment:
        return seg.Segment(int(item.base), int(item.count), item.idx, item.data, bool(item.z))


class DelayedRepo:
    """Delayed messages (``delay_ms``, :mod:`lakeq.produce.delayed`): DelayedTable items and the queue item's
    ``next_due`` / ``delayed`` / ``dver``. Invariant: a queue with a delayed item has ``next_due`` at
    or before that item's ``deliver_at``; every write here moves ``dver``."""

    @staticmethod
    def add(topic: str, queue: int, part: list[Delayed], now: int, lower: bool) -> None:
        """Store ``part`` (one queue's delayed messages) in one transaction: the queue item
        (``delayed`` += n, ``dver`` += 1, and — ``lower`` — ``next_due`` := the part's earliest
        ``deliver_at`` if it is not earlier already; else conditioned on ``next_due`` being at or
        before it), each message's DelayedTable item (absent before), each client id's dedup item
        (absent before; no offset, its ``deliver_at``). Raises :class:`TransactionFailed`: index 0 =
        the queue is gone or ``next_due`` is on the other side (read again), 1..len(part) = a
        delayed item exists, then one per client id (in ``part`` order) = the id was recorded."""
        dmin = min(d.deliver_at for d in part)
        actions = [QueueModel.delayed.add(len(part)), QueueModel.dver.add(1)]
        if lower:
            actions.append(QueueModel.next_due.set(dmin))
            cond = QueueModel.topic.exists() & (QueueModel.next_due.does_not_exist() | (QueueModel.next_due >= dmin))
        else:
            cond = QueueModel.topic.exists() & (QueueModel.next_due <= dmin)
        pq_ = pq(topic, queue)
        expires = datetime.fromtimestamp(now // 1000 + DEDUP_TTL_S, timezone.utc)

        def build(t: TransactWrite) -> None:
            t.update(QueueModel(topic, queue), actions=actions, condition=cond)
            for d in part:
                t.save(DelayedModel(pq_, due_key(d.deliver_at, d.message.id, d.index), deliver_at=d.deliver_at,
                                    cid=d.cid, data=encode_message(d.message)),
                       condition=DelayedModel.pq.does_not_exist())
            for d in part:
                if d.cid:
                    t.save(DedupModel(topic, d.message.id, queue=queue, deliver_at=d.deliver_at, expires_at=expires),
                           condition=DedupModel.id.does_not_exist())
        transact(build)

    @staticmethod
    def due(topic: str, queue: int, now: int, limit: int, max_bytes: int = TRANSACT_BYTES) -> list[DelayedModel]:
        """The queue's first delayed items due at ``now``, in due order (a consistent Query from the
        partition's start): at most ``limit``, and no more once their messages pass ``max_bytes``
        (one transaction could not carry more; the Query reads at most one 1 MB page beyond)."""
        out: list[DelayedModel] = []
        size = 0
        for item in DelayedModel.query(pq(topic, queue), DelayedModel.due < due_key(now + 1, ""), consistent_read=True,
                                       limit=limit):
            out.append(item)
            size += len(item.data) if item.data is not None else len((item.msg or "").encode("utf-8"))
            if size > max_bytes:
                break
        return out

    @staticmethod
    def after(topic: str, queue: int, due: str | None) -> int | None:
        """``deliver_at`` of the queue's first delayed item after sort key ``due`` (from the start
        when None); None when there is none. One consistent Query of one item."""
        cond = DelayedModel.due > due if due is not None else None
        for item in DelayedModel.query(pq(topic, queue), cond, consistent_read=True, limit=1):
            return int(item.deliver_at)
        return None

    @staticmethod
    def due_queues(now: int) -> Iterator[Queue]:
        """The queue items whose ``next_due`` has come (``pq``, ``topic``, ``queue``, ``max_offset``,
        ``next_due`` only): one Scan of the queues table filtered on ``next_due <= now``, read page by
        page as the caller iterates (the scheduled promoter, :func:`lakeq.produce.delayed.sweep`)."""
        return (record_of(Queue, m) for m in QueueModel.scan(
            QueueModel.next_due <= now, attributes_to_get=["pq", "topic", "queue", "max_offset", "next_due"]))

    @staticmethod
    def _dver_is(seen: int | None):
        return QueueModel.dver.does_not_exist() if seen is None else QueueModel.dver == seen

    @classmethod
    def set_next_due(cls, topic: str, queue: int, seen: int | None, next_due: int | None) -> bool:
        """Repair ``next_due`` (it was earlier than every delayed item), if ``dver`` is still ``seen``."""
        action = QueueModel.next_due.set(next_due) if next_due is not None else QueueModel.next_due.remove()
        try:
            QueueModel(topic, queue).update(actions=[action, QueueModel.dver.add(1)],
                                            condition=QueueModel.topic.exists() & cls._dver_is(seen))
            return True
        except UpdateError as e:  # changed meanwhile, or a transaction in flight on it: read again
            if conditional_failed(e) or getattr(e, "cause_response_code", None) == "TransactionConflictException":
                return False
            raise

    @classmethod
    def promote(cls, topic: str, queue: int, base: int, part: Append, entries: list[DelayedModel],
                seen: int | None, next_due: int | None, now: int) -> None:
        """Append ``entries`` (due delayed items, in due order: ``part`` holds their segments at
        ``base``, the queue's head) in one transaction: the queue item (head to the part's end,
        ``delayed`` -= n, ``dver`` += 1, ``next_due`` := ``next_due``; conditioned on the head being at
        or before ``base`` and ``dver`` still ``seen``: nobody promoted nor delayed a message on this
        queue since it was read), the segments (absent before), each client id's offset (its dedup
        item, conditioned on having no offset yet) and the deletes of the delayed items
        (conditioned on existing). Two promoters racing: one transaction wins, the other is
        cancelled (TransactionFailed) and nothing of it is written."""
        assert part.segments[0].base == base
        pq_ = pq(topic, queue)
        end = part.segments[-1].end
        actions = [QueueModel.max_offset.set(end), QueueModel.last_produced_at.set(now),
                   QueueModel.delayed.add(-len(entries)), QueueModel.dver.add(1),
                   QueueModel.next_due.set(next_due) if next_due is not None else QueueModel.next_due.remove()]
        at = {id_of_due(e.due): int(e.deliver_at) for e in entries}
        expires = datetime.fromtimestamp(now // 1000 + DEDUP_TTL_S, timezone.utc)

        def build(t: TransactWrite) -> None:
            t.update(QueueModel(topic, queue), actions=actions,
                     condition=QueueModel.topic.exists() & (QueueModel.max_offset <= base) & cls._dver_is(seen))
            for s in part.segments:
                t.save(SegmentModel(pq_, s.base, end=s.end, count=s.count, idx=s.idx, data=s.data, z=s.compressed,
                                    produced_at=now), condition=SegmentModel.pq.does_not_exist())
            for mid, off in part.dedup:
                t.save(DedupModel(topic, mid, queue=queue, offset=off, deliver_at=at.get(mid), expires_at=expires),
                       condition=DedupModel.offset.does_not_exist())
            for e in entries:
                t.delete(DelayedModel(pq_, e.due), condition=DelayedModel.pq.exists())
        transact(build)


class OffsetRepo:
    @staticmethod
    def owner(group: str, topic: str, client_id: str | None = None) -> str:
        return f"b|{group}|{client_id}|{topic}" if client_id is not None else f"g|{group}|{topic}"

    @classmethod
    def held(cls, owner: str, now: int) -> frozenset[int]:
        """The queues whose record holds a lock live at ``now`` (epoch ms), a hint: from the
        container's copy of ``owner``'s locks when it is at most HELD_MAX_AGE_S old (no call; the
        copy follows this container's own reads and lock writes of ``owner``), else one eventually
        consistent Query of two attributes, kept as the copy (billed by the records' whole size, the
        projection does not lower it: 0.5 RRU per 4 KB read, e.g. a CreateQueue queue's 4 records)."""
        hit = _HELD.get(owner)
        if hit is None or _monotonic() - hit[0] > HELD_MAX_AGE_S:
            hit = cls._keep_held(owner, {int(r.queue): int(r.lock_until or 0) for r in OffsetModel.query(
                owner, attributes_to_get=["queue", "lock_until"])})
        return frozenset(q for q, until in hit[1].items() if until > now)

    @staticmethod
    def _keep_held(owner: str, locks: dict[int, int]) -> tuple[float, dict[int, int]]:
        if len(_HELD) >= HELD_KEPT and owner not in _HELD:
            _HELD.clear()
        _HELD[owner] = entry = (_monotonic(), locks)
        return entry

    @staticmethod
    def _held_moved(owner: str, queue: int, lock_until: int) -> None:
        """This container wrote ``owner``'s lock on ``queue``: its copy of the locks follows (only
        an owner whose locks a send asked for, :meth:`held`, has a copy). The copy is replaced,
        never changed in place: another thread (the local stack's) may be reading it."""
        hit = _HELD.get(owner)
        if hit is not None:
            _HELD[owner] = (hit[0], {**hit[1], queue: lock_until})

    @classmethod
    def records(cls, owner: str) -> dict[int, OffsetModel]:
        out = {int(r.queue): r for r in OffsetModel.query(owner, consistent_read=True)}
        if owner in _HELD:
            cls._keep_held(owner, {q: int(r.lock_until or 0) for q, r in out.items()})
        return out

    @staticmethod
    def get(owner: str, queue: int) -> OffsetModel | None:
        try:
            return OffsetModel.get(owner, queue, consistent_read=True)
        except DoesNotExist:
            return None

    @staticmethod
    def _expect(view: QueueView):
        """Condition: the record is still exactly as the pull saw it (``sv``: every write moves it)."""
        if view.committed is None:
            return OffsetModel.owner.does_not_exist()
        same = (OffsetModel.lock_ts == view.lock_ts) & (OffsetModel.committed_offset == view.committed)
        return same & (OffsetModel.sv.does_not_exist() if view.sv is None else OffsetModel.sv == view.sv)

    @staticmethod
    def view_of(rec: OffsetModel, min_offset: int = 0, max_offset: int = 0) -> QueueView:
        """A record as a :class:`QueueView` (the log's offsets when known)."""
        return QueueView(int(rec.queue), min_offset, max_offset, int(rec.committed_offset), int(rec.lock_ts),
                         int(rec.lock_until), int(rec.last_consumed_at), tuple(rec.acks or ()),
                         None if rec.lock_next is None else int(rec.lock_next), rec.settle,
                         None if rec.sv is None else int(rec.sv), int(rec.dead_lettered or 0), int(rec.run or 0))

    @classmethod
    def write_state(cls, owner: str, view: QueueView, state, meta: dict | None, now: int, *,
                    lock_owner: str | None = None, consumed: bool = False, ack: str | None = None,
                    run: int | None = None, bnd: int | None = None) -> bool:
        """Store a :class:`lakeq.log.settlement.State` on the record ``view`` was read from, if it is
        still exactly that (:meth:`_expect`): committed offset, lock, ``settle`` (removed in the
        simple form), ``dead_lettered``; ``lock_owner`` for a new lock (which also trims ``acks``),
        ``ack`` appended to ``acks`` (a whole-batch ack; with ``lock_owner``: the previous lock's
        ack folded into the new lock, :func:`lakeq.consume.reader.fold`), ``run`` the new lock's place in
        a run of folded locks (with ``lock_owner`` and no ``run``: the run ends), ``bnd`` the end of
        the newest segment the lock read (:attr:`lakeq.store.models.OffsetModel.bnd`). One conditional
        UpdateItem; False when the record moved meanwhile."""
        from lakeq.log.settlement import to_settle
        raw = to_settle(state)
        actions = [OffsetModel.committed_offset.set(state.committed), OffsetModel.lock_ts.set(state.lock_ts),
                   OffsetModel.lock_until.set(state.lock_until), OffsetModel.updated_at.set(now),
                   OffsetModel.sv.add(1),
                   (OffsetModel.lock_next.remove() if state.lock_next is None
                    else OffsetModel.lock_next.set(state.lock_next)),
                   OffsetModel.settle.remove() if raw is None else OffsetModel.settle.set(raw)]
        if state.dead_lettered or view.dead_lettered:
            actions.append(OffsetModel.dead_lettered.set(state.dead_lettered))
        if lock_owner is not None:
            actions.append(OffsetModel.lock_owner.set(lock_owner))
            actions.append(OffsetModel.run.remove() if run is None else OffsetModel.run.set(run))
            kept = kept_acks(view.acks, cls.ACKS_KEPT)
            if ack is not None:  # one path may be set once: the kept acks and the folded one together
                actions.append(OffsetModel.acks.set(list(view.acks if kept is None else kept) + [ack]))
            elif kept is not None:
                actions.append(OffsetModel.acks.set(kept))
        if consumed:
            actions.append(OffsetModel.last_consumed_at.set(now))
        if bnd is not None:
            actions.append(OffsetModel.bnd.set(bnd))
        if ack is not None and lock_owner is None:
            actions.append(OffsetModel.acks.set((OffsetModel.acks | []).append([ack])))
        if view.committed is None and meta:
            actions += [getattr(OffsetModel, k).set(v) for k, v in meta.items() if v is not None]
        if not update_if(OffsetModel(owner, view.queue), actions, cls._expect(view)):
            return False
        cls._held_moved(owner, view.queue, int(state.lock_until))
        return True

    ACKS_KEPT = 8  # acknowledged receipts remembered per record (a retry window of 8 batches)

    @staticmethod
    def _receipt_lock(receipt: Receipt):
        """Condition: the record's lock is still ``receipt``'s, in the simple form (``lock_ts`` is
        unique per record; an acknowledged lock has no ``lock_next``)."""
        return ((OffsetModel.lock_ts == receipt.timestamp) & (OffsetModel.committed_offset == receipt.offset)
                & (OffsetModel.lock_next == receipt.next_offset) & OffsetModel.settle.does_not_exist())

    @classmethod
    def ack_fast(cls, owner: str, queue: int, receipt: Receipt, now: int) -> bool | OffsetModel | None:
        """A whole batch in the simple form acknowledged with one conditional UpdateItem (issue 9's
        fast path): commit ``receipt.next_offset``, unlock, and append the receipt to ``acks`` (the
        newest :attr:`ACKS_KEPT` are kept by each lock, so a retried acknowledgement can be told
        from a stale receipt). True: acknowledged. Otherwise the record as one consistent GetItem
        found it (None: absent), for the caller to decide (a retry found in ``acks``, a settle of
        the general form, stale)."""
        key = ack_key(receipt.offset, receipt.next_offset, receipt.timestamp)
        actions = [OffsetModel.committed_offset.set(receipt.next_offset), OffsetModel.lock_until.set(0),
                   OffsetModel.lock_next.remove(), OffsetModel.last_consumed_at.set(now),
                   OffsetModel.updated_at.set(now), OffsetModel.acks.set((OffsetModel.acks | []).append([key])),
                   OffsetModel.sv.add(1)]
        if update_if(OffsetModel(owner, queue), actions, cls._receipt_lock(receipt)):
            return True
        return cls.get(owner, queue)

    @classmethod
    def set_visibility(cls, owner: str, queue: int, receipt: Receipt, lock_until: int, now: int) -> bool:
        """Set the lock's ``lock_until`` (0: unlocked now), if the lock still is the receipt's
        (:meth:`_receipt_lock`, as :meth:`ack_fast`). One conditional UpdateItem; a plain re-set, so
        a retry answers the same or a later expiry. False: stale."""
        return update_if(OffsetModel(owner, queue),
                         [OffsetModel.lock_until.set(lock_until), OffsetModel.updated_at.set(now),
                          OffsetModel.sv.add(1)],
                         cls._receipt_lock(receipt))

    @staticmethod
    def reset(owner: str, queue: int, offset: int, meta: dict, now: int) -> None:
        """Set the committed offset, drop any lock and invalidate outstanding receipts
        (``lock_ts`` moves on). One unconditional UpdateItem."""
        actions = [OffsetModel.committed_offset.set(offset), OffsetModel.lock_until.set(0),
                   OffsetModel.lock_next.remove(), OffsetModel.lock_ts.add(1), OffsetModel.updated_at.set(now),
                   OffsetModel.settle.remove(), OffsetModel.sv.add(1)]
        actions += [getattr(OffsetModel, k).set(v) for k, v in meta.items() if v is not None]
        OffsetModel(owner, queue).update(actions=actions)


__all__ = ["TopicRepo", "ClientRepo", "LogRepo", "DelayedRepo", "OffsetRepo", "Append", "TransactionFailed", "transact",
           "PutError"]
