"""The log's repository (:class:`LogRepo`): a queue's items, its segments, the head and the dedup
items of client-chosen message ids; and the container's copies that its reads keep (the messages per
segment last read on a queue, the queue items' hints, the owners' locks that :class:`OffsetRepo
<lakeq.store.offsets.OffsetRepo>` reads).

Every append to a queue's log is a conditional put of a segment item keyed by its first offset
(with the client-chosen message ids in the same transaction when there are any), so the log is a
contiguous chain by construction. Costs per call are listed in ``docs/design.md``.
"""
from __future__ import annotations

import itertools
import time
from collections.abc import Iterable, Iterator
from datetime import datetime, timezone

from botocore.exceptions import ClientError
from pynamodb.exceptions import DoesNotExist, UpdateError
from pynamodb.transactions import TransactWrite

from lakeq.common import backoff
from lakeq.common.errors import Unavailable
from lakeq.common.memo import keep
from lakeq.common.names import change_key
from lakeq.log import segments as seg
from lakeq.log.produce_plan import TRANSACT_ITEMS, Append, pq
from lakeq.log.selection import segments_wanted
from lakeq.store.models import DedupModel, QueueModel, SegmentModel, TopicModel, queue_key
from lakeq.store.records import Change, Queue, Topic, queue_from_item, record_of
from lakeq.store.writes import CONDITION_FAILED, TransactionFailed, conditional_failed, transact

DEDUP_TTL_S = 24 * 3600
# a copier (replay, redrive) whose copies are dropped as duplicates by their ids resumes a batch in
# flight only well within the ids' life (an hour kept for clocks apart)
RESUME_WINDOW_MS = (DEDUP_TTL_S - 3600) * 1000
BATCH_GET_KEYS = 100  # DynamoDB's BatchGetItem limit
EXACT_WALK_ROUNDS = 4  # LogRepo.exact_ends: segments a lagging hint is followed by BatchGetItem before a Query
# the store's write limits and item-size bounds live with the (pure) produce planner


_segment_sizes: dict[str, int] = {}  # pq -> messages in the last segment this container read there
SEGMENT_SIZES_MAX = 4096


def remember_segment_size(pq_: str, count: int) -> None:
    """Note how many messages a segment of queue ``pq_`` held (the next read's first page size)."""
    keep(_segment_sizes, pq_, count, SEGMENT_SIZES_MAX)


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

        def attempt(_n: int):
            nonlocal page
            data = conn.batch_get_item(page, consistent_read=consistent, attributes_to_get=attributes)
            out.extend(data.get("Responses", {}).get(table, []))
            # already typed (``{"S": …}`` / ``{"N": "…"}``): pynamodb passes those as they are
            page = data.get("UnprocessedKeys", {}).get(table, {}).get("Keys") or []
            return backoff.RETRY if page else None
        _unprocessed_rounds(attempt)
    return out


def batch_get_models(model, keys, consistent: bool = False, attributes: list[str] | None = None) -> list:
    """``model.batch_get(keys)`` (hash keys, or ``(hash, range)`` pairs; duplicates asked once),
    through :func:`_batch_get`: pynamodb's own asks UnprocessedKeys again at once and without bound
    (a throttled table: a tight loop until the function's timeout); here with the one backoff and
    503 after the one bound. The models that exist, in no particular order."""
    h = model._hash_key_attribute().attr_name
    r = model._range_key_attribute()
    plain = [{h: k[0], r.attr_name: k[1]} if r is not None else {h: k} for k in dict.fromkeys(keys)]
    return [model.from_raw_data(item) for item in _batch_get(model, plain, consistent, attributes)]


def _unprocessed_rounds(attempt) -> None:
    """The rounds of one BatchGetItem: ``attempt(n)`` sends what is left and answers
    :data:`~lakeq.common.backoff.RETRY` while UnprocessedKeys came back (a throttled table, or an
    answer past 16 MB). The one retry loop (:func:`lakeq.common.backoff.cas`), with longer waits
    than a compare-and-set's (10 ms doubling to 1 s: throttling eases in seconds, not ms); a table
    that still holds keys back after :data:`~lakeq.common.backoff.CAS_ATTEMPTS` rounds answers 503
    ``busy`` (:class:`Unavailable`) instead of looping until the function's timeout."""
    backoff.cas(attempt, on_exhausted=_reads_throttled, base=0.01, cap=1.0)


def _reads_throttled():
    raise Unavailable("the store kept holding reads back (throttled); retry")


def _batch_get_tables(client, req: dict) -> dict[str, list]:
    """Every item BatchGetItem request ``req`` (``RequestItems``: table -> keys) names, by table,
    UnprocessedKeys asked again (:func:`_unprocessed_rounds`)."""
    got: dict[str, list] = {t: [] for t in req}

    def attempt(_n: int):
        nonlocal req
        data = client.batch_get_item(RequestItems=req)
        for table, items in (data.get("Responses") or {}).items():
            got.setdefault(table, []).extend(items)
        req = data.get("UnprocessedKeys") or {}
        return backoff.RETRY if req else None
    _unprocessed_rounds(attempt)
    return got


# The container's copies of an owner's locks (OffsetRepo.held): owner -> (monotonic read time, {queue: lock_until})
_HELD: dict[str, tuple[float, dict[int, int]]] = {}
HELD_KEPT = 1024  # at most this many owners' copies (past it, all dropped)
HELD_MAX_AGE_S = 1.0

# The offsets records this container's own lock writes left (OffsetRepo.write_state: UpdateItem's
# ALL_NEW answer, which pynamodb reads into the model at no unit), per (owner, queue): the folded
# pull that acknowledges that lock takes the record from here instead of a GetItem (issue 33 item 2;
# OffsetRepo.known). A copy is used once, and only while its lock is live; only locks in the simple
# form are kept (no ``settle``: ~0.9 KiB a record with its 8 kept acks, tracemalloc, so ~1 MiB full)
_WROTE: dict[tuple[str, int], object] = {}
WROTE_KEPT = 1024

# The container's copies of queue items (LogRepo.queue_hints): (topic, n, only) -> (monotonic expiry, raw items)
_HINTS: dict[tuple, tuple[float, list[dict]]] = {}
HINTS_KEPT = 1024  # at most this many copies (expired ones dropped first; past it, none kept)


# A topic's change marker (issue 33; docs/design.md "The long poll's waiting rounds"): one small
# QueuesTable item per topic log (``<log>#w``) that the produce path bumps after its appends, so a
# waiting long poll reads it alone each round instead of every queue item and chain. A container
# bumps a topic at most once per CHANGE_EVERY_MS (a busy topic pays at most that many writes a
# second per producing container, not one per produce); the appends it does not signal fall in
# [its last bump, + CHANGE_EVERY_MS), so a reader treats the CHANGE_EVERY_MS + CHANGE_SKEW_MS after
# a bump as "may have changed unsignalled" (it reads everything then).
CHANGE_EVERY_MS = 1000
CHANGE_SKEW_MS = 250  # clocks of containers apart, and an append's commit before its check
_BUMPED: dict[str, int] = {}  # log -> when this container last bumped its marker (epoch ms)
BUMPED_KEPT = 4096
# The topic items a long poll's last waiting round read with the marker (LogRepo.change_and_topic),
# and those the native pull reads (LogRepo.topic, issue 33 item 2): the next pull of this container
# within TOPIC_SEEN_S takes the topic from here (no GetItem), so a busy container reads each topic
# item about once per TOPIC_SEEN_S, not once a request; a topic write in this container (create,
# grow, the SQS endpoint's) drops its copy (LogRepo.forget_topic)
TOPIC_SEEN_S = 1.5
_TOPIC_SEEN: dict[str, tuple[float, Topic]] = {}


# Offsets this container knows to be a segment's end, per queue (``pq`` -> the end of the last
# segment it read there, or a lock's ``bnd`` a pull read, LogRepo.note_end): a read starting there
# needs no Query for a segment around its start (segments never change: every segment starts where
# another ends, so a segment's end is a boundary for good)
_ENDS: dict[str, int] = {}
# The newest segment this container read per queue (``pq`` -> (base, end)): a read starting inside it
# (the previous batch ended mid-segment, as its lock's frontier) runs its one forward Query from that
# base, instead of a forward Query from the start and another, newest first, for the segment around it
_SPANS: dict[str, tuple[int, int]] = {}

# What the last full round of a pull that found nothing to lock saw, per (log, owner, queues) (issue 33
# item 2, lakeq.consume.reader.EmptyLook): the next pull of this container for the same owner answers
# empty from the change marker and the owner's records alone while they say nothing changed
_LOOKS: dict[tuple, object] = {}
LOOKS_KEPT = 4096


def _monotonic() -> float:
    """The clock of the container's copies (a seam for tests)."""
    return time.monotonic()


def _change_of(item: dict) -> Change:
    """The record of a raw change-marker item."""
    return Change(int((item.get("wv") or {}).get("N") or 0), int((item.get("wat") or {}).get("N") or 0))


def _split_change(topic: str, items: list[dict]) -> tuple[list[Queue], Change | None]:
    """Raw items of topic ``topic``'s queues and of its change marker (:meth:`LogRepo._items_and_change`):
    the queue records ordered by queue, and the marker (None: not among them, never bumped)."""
    ck = change_key(topic)
    change = None
    metas = []
    for item in items:
        if item.get("pq", {}).get("S") == ck:
            change = _change_of(item)
        else:
            metas.append(queue_from_item(item))
    metas.sort(key=lambda m: int(m.queue))
    return metas, change


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

    @classmethod
    def queues_of(cls, wants: dict[str, int]) -> dict[str, list[Queue]]:
        """:meth:`queues` (eventually consistent, exact) of many logs at once, ``wants``: log -> its
        number of queues: one BatchGetItem of every queue item (100 keys a call), then their exact
        ends by :meth:`exact_ends` (no Query a queue): what a reader of many topics and lists at once
        reads (the operator's summary, ``GET /v1/summary``), ceil(queues / 100) calls and the
        walk's few."""
        keys, log_of_pq = [], {}
        for log, n in wants.items():
            for q in range(int(n)):
                k = queue_key(log, q)
                keys.append({"pq": k})
                log_of_pq[k] = log
        out: dict[str, list[Queue]] = {log: [] for log in wants}
        ms = [queue_from_item(item) for item in _batch_get(QueueModel, keys)]
        cls.exact_ends(ms)
        for m in ms:
            out[log_of_pq[m.pq]].append(m)
        for v in out.values():
            v.sort(key=lambda m: int(m.queue))
        return out

    @classmethod
    def exact_ends(cls, ms: list[Queue]) -> None:
        """What :meth:`queues`' ``exact`` does to each item (its ``max_offset`` and
        ``last_produced_at`` from the newest segment when the hint lags), for many queues in a few
        BatchGetItems instead of one Query a queue: the hint is a segment's end (the head mover and
        the append's transaction move it to one), so the segment starting at it, when there is one,
        is the next; each round asks, for every queue still lagging, for the segment at its new end
        (eventually consistent, 0.5 RRU a key that is absent: the common case, a hint that is
        current). After :data:`EXACT_WALK_ROUNDS` rounds the queues still lagging (a head mover more
        than that many segments behind) take :meth:`_exact`'s Query."""
        walking = {m.pq: m for m in ms}
        hints = {m.pq: (m.max_offset, m.last_produced_at) for m in ms}
        last: dict[str, SegmentModel] = {}
        for _ in range(EXACT_WALK_ROUNDS):
            if not walking:
                break
            found = cls.segments_at({k: int(m.max_offset) for k, m in walking.items()})
            for k, item in found.items():
                walking[k].max_offset = int(item.end)
                last[k] = item
            walking = {k: walking[k] for k in found}
        for k, m in walking.items():  # still lagging: the newest segment by its Query, as queues() reads it
            m.max_offset, m.last_produced_at = hints[k]
            last.pop(k, None)
            cls._exact(m, False)
        for m in ms:
            item = last.get(m.pq)
            if item is not None:
                m.last_produced_at = max(int(m.last_produced_at or 0), int(item.produced_at or 0))

    @classmethod
    def first_segments(cls, wants: Iterable[tuple[str, int, int]]) -> dict[tuple[str, int, int], seg.Segment | None]:
        """For each ``(log, queue, start)``: the first segment :meth:`read` yields for ``start``
        (the one holding it; None when there is none to read), for many at once: one BatchGetItem of
        the segments starting exactly at ``start`` (100 keys a call, eventually consistent: a
        committed offset at a segment's boundary, the common case of a batch that took whole
        segments); a ``start`` inside a segment (a batch that ended mid-segment) one Query, newest
        first, of the segment before it (:meth:`read`'s Queries when none holds it)."""
        wants = list(dict.fromkeys(wants))
        keys = list(dict.fromkeys((cls.pq(log, q), int(start)) for log, q, start in wants))
        at: dict[tuple[str, int], SegmentModel] = {}
        for item in _batch_get(SegmentModel, [{"pq": k, "base": b} for k, b in keys]):
            m = SegmentModel.from_raw_data(item)
            at[(m.pq, int(m.base))] = m
        out: dict[tuple[str, int, int], seg.Segment | None] = {}
        for log, q, start in wants:
            item = at.get((cls.pq(log, q), int(start)))
            if item is None:  # inside a segment: the one before it, newest first (read()'s second Query)
                item = next(iter(SegmentModel.query(cls.pq(log, q), SegmentModel.base < int(start),
                                                    scan_index_forward=False, limit=1)), None)
                if item is None or int(item.end) <= int(start):  # none holds it (a gap): as read() answers
                    out[(log, q, start)] = next(iter(cls.read(log, q, start, 1)), None)
                    continue
            out[(log, q, start)] = cls._segment(item)
        return out

    @staticmethod
    def queue_items(topic: str, n: int, consistent: bool = False, only: Iterable[int] | None = None) -> list[dict]:
        """The raw items :meth:`queues` reads (one BatchGetItem; in no particular order): what a
        container may keep a copy of (each read makes fresh records of it)."""
        numbers = range(n) if only is None else sorted(q for q in set(only) if 0 <= q < n)
        keys = [{"pq": queue_key(topic, q)} for q in numbers]
        return _batch_get(QueueModel, keys, consistent=consistent)

    @staticmethod
    def next_dues(topic: str, queues: Iterable[int]) -> dict[int, int | None]:
        """Each of ``queues``' ``next_due`` (None: nothing delayed there), from a strongly consistent
        BatchGetItem of their queue items (1 RRU a small item): a young empty look that grows up
        (:func:`lakeq.consume.reader._probed_empty`). A missing item is left out."""
        keys = [{"pq": queue_key(topic, int(q))} for q in dict.fromkeys(queues)]
        out: dict[int, int | None] = {}
        for item in _batch_get(QueueModel, keys, consistent=True, attributes=["pq", "queue", "next_due"]):
            m = queue_from_item(item)
            out[int(m.queue)] = None if m.next_due is None else int(m.next_due)
        return out

    @staticmethod
    def forget_hints() -> None:
        """Drop the container's copies of queue items (:meth:`queue_hints`) and of locks
        (:meth:`OffsetRepo.held`) and of the records its lock writes left (:meth:`OffsetRepo.known`; tests: a
        fresh store), when it last bumped each change marker
        (:meth:`bump_change`), and its pulls' empty looks (:meth:`note_look`)."""
        _HINTS.clear()
        _HELD.clear()
        _WROTE.clear()
        _BUMPED.clear()
        _TOPIC_SEEN.clear()
        _ENDS.clear()
        _SPANS.clear()
        _LOOKS.clear()

    @staticmethod
    def note_look(key: tuple, look: object | None) -> None:
        """Keep (None: drop) what the last empty full round of ``key`` (log, owner, queues) saw
        (:class:`lakeq.consume.reader.EmptyLook`; container memory, no store call)."""
        if look is None:
            _LOOKS.pop(key, None)
            return
        keep(_LOOKS, key, look, LOOKS_KEPT)

    @staticmethod
    def look(key: tuple) -> object | None:
        """What :meth:`note_look` kept for ``key``, or None."""
        return _LOOKS.get(key)

    @classmethod
    def queues_and_change(cls, topic: str, n: int,
                          only: Iterable[int] | None = None) -> tuple[list[Queue], Change | None]:
        """:meth:`queues` with ``exact=False`` (the hints) and the topic's change marker
        (:meth:`change`) in the same BatchGetItem (eventually consistent; +0.5 RRU): what a long
        poll's full round reads. The marker is None when no produce bumped it yet."""
        return _split_change(topic, cls._items_and_change(topic, n, only))

    @staticmethod
    def _items_and_change(topic: str, n: int, only: Iterable[int] | None) -> list[dict]:
        """The raw queue items :meth:`queue_items` reads and the topic's change-marker item, in one
        BatchGetItem (eventually consistent)."""
        numbers = range(n) if only is None else sorted(q for q in set(only) if 0 <= q < n)
        keys = [{"pq": queue_key(topic, q)} for q in numbers] + [{"pq": change_key(topic)}]
        return _batch_get(QueueModel, keys)

    @staticmethod
    def change(topic: str) -> Change | None:
        """The topic's change marker (issue 33): one strongly consistent GetItem of a small item
        (1 RRU), what a waiting long poll reads each round. None when no produce bumped it yet."""
        try:
            item = QueueModel.get(change_key(topic), consistent_read=True, attributes_to_get=["pq", "wv", "wat"])
        except DoesNotExist:
            return None
        return Change(int(item.wv or 0), int(item.wat or 0))

    @staticmethod
    def change_and_topic(log: str, name: str) -> Change | None:
        """:meth:`change` and topic ``name``'s item in one BatchGetItem (both strongly consistent,
        ~2 RRU): a long poll's last waiting round, so the next poll of this container within
        :data:`TOPIC_SEEN_S` takes the topic item from :meth:`seen_topic` instead of a GetItem."""
        conn = QueueModel._get_connection().connection
        qt, tt = QueueModel.Meta.table_name, TopicModel.Meta.table_name
        ck = change_key(log)
        req = {qt: {"Keys": [{"pq": {"S": ck}}], "ConsistentRead": True},
               tt: {"Keys": [{"name": {"S": name}}], "ConsistentRead": True}}
        got = _batch_get_tables(conn.client, req)
        topic = None
        if got[tt]:
            t = record_of(Topic, TopicModel.from_raw_data(got[tt][0]))
            topic = t if t.deleted_at is None else None
        if topic is None:
            _TOPIC_SEEN.pop(name, None)
        else:
            LogRepo._keep_topic(name, topic)
        return _change_of(got[qt][0]) if got[qt] else None

    @classmethod
    def topic(cls, name: str) -> Topic | None:
        """Topic ``name``'s item for the native pull (issue 33 item 2): the container's copy when
        read less than :data:`TOPIC_SEEN_S` ago (:meth:`seen_topic`: no call), else one strongly
        consistent GetItem (1 RRU), kept as the copy. None: no such topic, or a tombstone (never
        kept). A copy is stale for at most :data:`TOPIC_SEEN_S` after another container deleted,
        re-created or grew the topic: a pull then reads the old incarnation's or count's queues
        (every key is a log name: nothing of the new incarnation; the deleted one's queue items
        are gone, so a ranked pull locks nothing, but a folded ack reads no queue item and can lock
        and serve the deleted log's next messages: docs/design.md "Queue lifecycle"), as a long
        poll's copy already did; a pull acking a receipt of another incarnation reads the item
        again (:func:`lakeq.consume.service.pull`). The produce does not use it (it would append to
        a deleted incarnation's log for up to that long)."""
        hit = cls.seen_topic(name)
        if hit is not None:
            return hit
        try:
            t = record_of(Topic, TopicModel.get(name, consistent_read=True))
        except DoesNotExist:
            t = None
        if t is None or t.deleted_at is not None:
            _TOPIC_SEEN.pop(name, None)
            return None
        cls._keep_topic(name, t)
        return t

    @staticmethod
    def _keep_topic(name: str, t: Topic) -> None:
        keep(_TOPIC_SEEN, name, (_monotonic() + TOPIC_SEEN_S, t), HINTS_KEPT)

    @staticmethod
    def forget_topic(name: str) -> None:
        """This container wrote topic ``name``'s item (created, grown, changed, deleted): its next
        read of it is the item as stored, not the copy."""
        _TOPIC_SEEN.pop(name, None)

    @staticmethod
    def seen_topic(name: str) -> Topic | None:
        """Topic ``name``'s item as a long poll of this container read it less than
        :data:`TOPIC_SEEN_S` ago (:meth:`change_and_topic`), else None (read it)."""
        hit = _TOPIC_SEEN.get(name)
        return hit[1] if hit is not None and hit[0] > _monotonic() else None

    @staticmethod
    def bump_change(topic: str, now: int, force: bool = False) -> bool:
        """After appends to topic log ``topic`` (the produce path): move its change marker
        (``wv`` + 1, ``wat`` := ``now``; one UpdateItem, 1 WRU, creating the item the first time;
        conditional on the key naming no queue item) unless this container bumped it less than
        :data:`CHANGE_EVERY_MS` ago (no call then). ``wat`` only moves forward: when a bump with a
        later time landed first, a second UpdateItem moves ``wv`` alone. True when it wrote.
        ``force``: bump even within that second (a delayed produce: a pull answered from a young
        empty look learns of its ``next_due`` from the marker alone, issue 33 item 2)."""
        last = _BUMPED.get(topic)
        if not force and last is not None and 0 <= now - last < CHANGE_EVERY_MS:
            return False
        item = QueueModel(change_key(topic))
        try:
            # ``wat`` never goes back: a bump computed earlier that lands after a later one (a
            # throttled write retried by botocore) would make the marker look settled while the later
            # bumper is inside its unsignalled second (its next append unsignalled, review_c)
            item.update(actions=[QueueModel.wv.add(1), QueueModel.wat.set(now)],
                        condition=QueueModel.queue.does_not_exist()
                        & (QueueModel.wat.does_not_exist() | (QueueModel.wat <= now)))
        except UpdateError as e:
            if not conditional_failed(e):
                raise
            try:  # a later bump landed first: the version moves (this container's appends), the time stays
                item.update(actions=[QueueModel.wv.add(1)], condition=QueueModel.queue.does_not_exist())
            except UpdateError as e2:
                if conditional_failed(e2):
                    return False
                raise
        keep(_BUMPED, topic, now, BUMPED_KEPT)
        return True

    @classmethod
    def queue_hints(cls, topic: str, n: int, max_age_s: float, only: Iterable[int] | None = None,
                    refresh: bool = False) -> tuple[list[Queue], Change | None, bool]:
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
        millisecond. Fresh records each call (a poll moves their heads in memory), the topic's change
        marker read with them (issue 33: in the same BatchGetItem, +0.5 RRU, and kept in the same
        copy: a long poll waits on it, :func:`lakeq.consume.reader._wait_for_change`; as old as the
        items, so never newer than what they show), and whether they came from the copy;
        ``refresh``: read the items now (and keep them). O(n)."""
        key = (topic, n, None if only is None else tuple(sorted(set(only))))
        now = _monotonic()
        hit = None if refresh else _HINTS.get(key)
        copied = hit is not None and hit[0] > now
        if copied:
            items = hit[1]
        else:
            items = cls._items_and_change(topic, n, only)
            if len(_HINTS) >= HINTS_KEPT:
                for k, (until, _) in list(_HINTS.items()):
                    if until <= now:
                        _HINTS.pop(k, None)
            if any("next_due" in item for item in items) or (len(_HINTS) >= HINTS_KEPT and key not in _HINTS):
                _HINTS.pop(key, None)
            else:
                _HINTS[key] = (now + max_age_s, items)
        metas, change = _split_change(topic, items)
        return metas, change, copied

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
    def segments_at(starts: dict[str, int], consistent: bool = False) -> dict[str, SegmentModel]:
        """For each queue ``pq_ -> start``: the segment starting exactly at ``start``, for those
        that have one (BatchGetItem of the segment keys, eventually consistent unless ``consistent``
        — 1 RRU a key then: a young empty look's probe that grows it up, review_f —, at most 100 keys a
        call, UnprocessedKeys asked again after a jittered backoff), for many queues in one round
        trip: 0.5 RRU per key when there is no such segment (the common case of a drained queue),
        the segment's size when there is (a BatchGetItem bills each item's full size whatever it
        returns of it; the pull that locks it reads it from here instead of a Query, :meth:`read`'s
        ``first``). Exact only when each ``start`` is a segment boundary (the pull's probe asks at
        a frontier equal to the queue item's ``max_offset`` or the record's ``bnd``, each a
        segment's end)."""
        keys = [{"pq": k, "base": int(v)} for k, v in starts.items()]
        out = {}
        for item in _batch_get(SegmentModel, keys, consistent=consistent):
            m = SegmentModel.from_raw_data(item)
            out[m.pq] = m
        return out

    @staticmethod
    def change_and_segments_at(topic: str, starts: dict[str, int],
                               consistent: bool = False) -> tuple[Change | None, dict[str, SegmentModel]]:
        """:meth:`change` (strongly consistent, 1 RRU) and :meth:`segments_at` (``consistent`` or not:
        1 or 0.5 RRU a key when there is no such segment) in one BatchGetItem over both tables — the
        same units as the two calls, one round trip fewer (issue 33 item 2: a young empty look's
        pull, :func:`lakeq.consume.reader._probed_empty`, when it probes few queues). The two reads
        are not ordered against each other; at most :data:`BATCH_GET_KEYS` - 1 keys."""
        conn = QueueModel._get_connection().connection
        qt, st = QueueModel.Meta.table_name, SegmentModel.Meta.table_name
        req: dict = {qt: {"Keys": [{"pq": {"S": change_key(topic)}}], "ConsistentRead": True}}
        if starts:
            req[st] = {"Keys": [{"pq": {"S": k}, "base": {"N": str(int(v))}} for k, v in starts.items()],
                       "ConsistentRead": consistent}
        got = _batch_get_tables(conn.client, req)
        got.setdefault(st, [])
        segs = {}
        for item in got[st]:
            m = SegmentModel.from_raw_data(item)
            segs[m.pq] = m
        return (_change_of(got[qt][0]) if got[qt] else None), segs

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
        for item in batch_get_models(DedupModel, [(topic, i) for i in ids]):
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
        for item in batch_get_models(DedupModel, [(topic, i) for i in ids]):
            out[item.id] = (int(item.queue), None if item.offset is None else int(item.offset),
                            None if item.deliver_at is None else int(item.deliver_at))
        return out

    @classmethod
    def head(cls, topic: str, queue: int, fresh: bool = False, past: int | None = None) -> int | None:
        """Where the next segment goes: the end of the queue's last segment.

        Cheap path (issue 16 item 3): the newest segment's end (eventually consistent Query, one
        item, :meth:`chain_end`); only when the chain is empty, the queue item's ``max_offset``
        (eventually consistent GetItem: exact then, see :meth:`chain_end`). A stale answer only
        makes the put fail its condition, and the caller asks again with ``fresh``: the queue item
        and the newest segment, both strongly consistent. None when the queue does not exist (an
        empty chain and no queue item; a put at the head of a queue whose item is gone but whose
        segments are left fails in the transaction paths, and is a deleted incarnation's log).

        ``past`` (with ``fresh``): the end of a segment of this queue the caller has just seen
        written (a lost put's answer, ``TransactionFailed.head``). Then the consistent Query alone
        when the newest segment ends there or later: that segment is newer than one just written,
        so no segment ending later is gone, and the queue item's ``max_offset`` (moved only to the
        end of a segment written) is not past it; the queue item is read only when the Query
        finds less (issue 33 item 3: one read, not two one after the other, in a contended
        queue's later rounds). Like a round at a learned base, it does not see the queue item
        gone (a deleted incarnation's log, unreachable: docs/design.md, "Queue lifecycle")."""
        if not fresh:
            end = cls.chain_end(cls.pq(topic, queue))
            if end is not None:
                return end
        elif past is not None:
            end = cls.chain_end(cls.pq(topic, queue), consistent=True)
            if end is not None and end >= past:
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
            cls._put_alone(seg_item(part.segments[0], alone=True))
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
    def _put_alone(item: SegmentModel) -> None:
        """The one conditional PutItem of an append without ids (``attribute_not_exists``), through
        the model's botocore client: pynamodb 6.1's ``save`` cannot pass
        ``ReturnValuesOnConditionCheckFailure``. The item is serialized by the model (its attribute
        names and types). A lost write raises :class:`TransactionFailed` whose ``head`` is the
        ``end`` of the segment that sits at this base (DynamoDB returns it in the
        ConditionalCheckFailedException's ``Item``, read as the condition was evaluated: fresh), the
        next free base when nothing was appended after it since (issue 33 item 3: the append loop
        retries there without a head read, :func:`lakeq.store.append.append_at_head`)."""
        client = SegmentModel._get_connection().connection.client
        try:
            client.put_item(TableName=SegmentModel.Meta.table_name, Item=item.serialize(),
                            ConditionExpression="attribute_not_exists(#k)", ExpressionAttributeNames={"#k": "pq"},
                            ReturnValuesOnConditionCheckFailure="ALL_OLD")
        except ClientError as e:
            if (e.response.get("Error") or {}).get("Code") != "ConditionalCheckFailedException":
                raise
            met = e.response.get("Item") or {}
            if met and LogRepo._same_segment(item, met):
                return  # the SDK's retry of this very put, which had landed (a 500, a lost answer)
            end = (met.get("end") or {}).get("N")
            raise TransactionFailed([CONDITION_FAILED], head=None if end is None else int(end)) from None

    @staticmethod
    def _same_segment(item: SegmentModel, raw: dict) -> bool:
        """Whether the segment a failed put met (``raw``, the item DynamoDB returned) is the one it
        was putting: the SDK retries a PutItem whose answer it did not get although the write may
        have landed, and the retry then fails its condition on its own segment. Same offsets,
        time, index and bodies (the index holds each message's id, made per request): the write
        landed, it is not a lost race (whose retry would append the messages a second time)."""
        try:
            met = SegmentModel.from_raw_data(raw)
        except Exception:  # noqa: BLE001 - an item that does not read as a segment is not this one
            return False
        return (int(met.end), int(met.count), int(met.produced_at), bytes(met.idx), bytes(met.data)) == \
            (int(item.end), int(item.count), int(item.produced_at), bytes(item.idx), bytes(item.data))

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
    def note_end(cls, topic: str, queue: int, end: int) -> None:
        """``end`` is known to be the end of a segment of (``topic``, ``queue``) (a record's ``bnd``:
        the end of the newest segment a lock read): a read starting there asks for no segment
        around it (:meth:`read`)."""
        cls._note_end(cls.pq(topic, queue), end)

    @staticmethod
    def _note_end(pq: str, end: int) -> None:
        keep(_ENDS, pq, end, BUMPED_KEPT)

    @classmethod
    def read(cls, topic: str, queue: int, start: int, max_offsets: int, first: SegmentModel | None = None):
        """Yield the segments holding offsets ``start..`` in order, until ``max_offsets`` offsets
        are covered. One Query ``base >= start``; when ``start`` falls inside a segment (the
        previous batch ended mid-segment), one more Query, newest first, for the segment that
        contains it — not when that segment is the newest this container read on the queue
        (``_SPANS``): the one Query then starts at its base. Eventually consistent: a segment not
        yet visible only shortens the batch
        (the caller stops at the first gap). ``first``: the segment starting at ``start`` when
        the caller already read it (the pull's probe, :meth:`segments_at`): no Query when it covers
        ``max_offsets``, else the Query from its end.

        The forward Query's first page asks for as many segments as the batch should need
        (:func:`lakeq.log.selection.segments_wanted`, from the messages per segment this container
        last read on the queue; 8 when it read none): a Query is billed for every item it reads,
        and a page of 8 segments of a hundred messages was ~10 times what a batch of a hundred
        needs. Further pages (when the segments are smaller than that) ask for 8 as before."""
        pq = cls.pq(topic, queue)
        # is ``start`` known to be a segment's base or end (no segment around it)? A segment's end
        # this container saw (:meth:`note_end`) is: a drained queue's read is then one Query, not two
        boundary = _ENDS.get(pq) == start
        if first is not None and int(first.base) == start:
            s = cls._segment(first)
            remember_segment_size(pq, s.count)
            keep(_SPANS, pq, (int(s.base), int(s.end)), BUMPED_KEPT)
            yield s
            if s.end - start >= max_offsets:
                return
            max_offsets -= s.end - start
            start, boundary = s.end, True
        # ``start`` inside the newest segment this container read there: one Query from its base
        span = None if boundary else _SPANS.get(pq)
        since = span[0] if span is not None and span[0] < start < span[1] else start
        forward = cls._forward(pq, since, segments_wanted(max_offsets + start - since, _segment_sizes.get(pq)))
        first = next(forward, None)
        if since < start and first is not None and int(first.base) == since:
            boundary = True  # the first segment holds ``start``: no segment around it to ask for
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
            cls._note_end(pq, int(s.end))
            keep(_SPANS, pq, (int(s.base), int(s.end)), BUMPED_KEPT)
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
