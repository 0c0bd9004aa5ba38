"""Reading logs: the one pull loop over topic queues and subscription lists (SPEC §1).

A *log* is a topic queue (``topic``, ``queue``) or a subscription's message list (pseudo-topic
``~<id>``, queue 0): segments in SegmentsTable, head and tail offsets in QueuesTable, the consumer's
record in OffsetsTable. A :data:`LogReader` reads one log from an offset; :func:`topic_reader` and
:func:`list_reader` are the two kinds, both built on :func:`read_log` (contiguous offsets, a tag
filter, at most one Lambda response of messages). :func:`consume` chooses a log, reads, locks it
with a conditional write and answers, long-polling until ``wait_ms`` passes.
"""
from __future__ import annotations

import os
import time
from typing import Callable

from . import clock
from . import segments as seg
from . import validation as v
from .auth import topic_or_404
from .payload import ByteBudget
from .receipts import Receipt
from .repos import LogRepo, OffsetRepo
from .selection import QueueView, candidates, next_lock_ts

SCAN_FACTOR = 10  # a filtered pull examines at most max * SCAN_FACTOR (>= 1000) offsets per queue
POLL_MIN_MS, POLL_MAX_MS = 50, 500

# (queue, start, limit, max_offset) -> (messages, next_offset)
LogReader = Callable[[int, int, int, int], "tuple[list[dict], int]"]


def broker() -> str:
    return os.environ.get("LAKEQ_BROKER") or "lakeq"


def message_out(m: dict) -> dict:
    """A delivered message as API.md shows it (field order fixed).

    >>> list(message_out({"offset": 3, "id": "a", "extra": 1}))
    ['id', 'topic', 'queue', 'offset', 'body', 'key', 'tags', 'properties', 'produced_at']
    """
    return {k: m.get(k) for k in ("id", "topic", "queue", "offset", "body", "key", "tags", "properties",
                                  "produced_at")}


def views(topic: str, owner: str, n_queues: int | None = None, recs: dict | None = None) -> list[QueueView]:
    """Each queue's log offsets and ``owner``'s record: BatchGetItem of the ``n_queues`` queue
    items (a subscription's list ``~<id>`` has one; a topic's count is read when not given) and
    one Query of the owner's records (``recs``: those records when the caller already read them)."""
    if n_queues is None:
        n_queues = 1 if topic.startswith("~") else int(topic_or_404(topic).queues)
    metas = LogRepo.queues(topic, n_queues)
    recs = OffsetRepo.records(owner) if recs is None else recs
    out = []
    for m in metas:
        r = recs.get(int(m.queue))
        if r is None:
            out.append(QueueView(int(m.queue), int(m.min_offset), int(m.max_offset)))
        else:
            out.append(QueueView(int(m.queue), int(m.min_offset), int(m.max_offset), int(r.committed_offset),
                                 int(r.lock_ts), int(r.lock_until), int(r.last_consumed_at), tuple(r.acks or ())))
    return out


def read_log(log: str, queue: int, start: int, limit: int, max_offset: int, shape: Callable[[dict, int], None],
             tags: list[str] | None = None, scan: int | None = None) -> tuple[list[dict], int]:
    """Read log (``log``, ``queue``) from ``start``: up to ``limit`` deliverable messages among at
    most ``scan`` offsets (default ``limit``), contiguous offsets only (stop at a gap: never deliver
    n+1 before n), and no more than fit one Lambda response (:class:`lakeq.payload.ByteBudget`;
    always at least one). ``shape(message, offset)`` fills in the delivered fields in place.
    Returns (messages, next_offset): ``next_offset`` is after the last offset examined (skipped
    ones included); when the byte budget cuts the batch, right after the last message returned,
    so the lock covers exactly what the response carries. ``next_offset == start``: nothing yet."""
    budget = min(scan or limit, max_offset - start)
    size = ByteBudget()
    out: list[dict] = []
    nxt = after = start
    for s in LogRepo.read(log, queue, start, budget):
        if s.base > nxt:
            break
        for off, msg in seg.read(s, nxt, budget - (nxt - start), tags):
            if msg is not None:
                shape(msg, off)
                if not size.take(message_out(msg)):
                    return out, after
                out.append(msg)
                after = off + 1
            nxt = off + 1
            if msg is not None and len(out) >= limit:
                return out, nxt
        if nxt - start >= budget:
            break
    return out, nxt


def topic_reader(topic: str, tags: list[str] | None) -> LogReader:
    """A topic's queues, filtered by ``tags`` (any of; skipped messages count as read)."""
    def read(queue: int, start: int, limit: int, max_offset: int) -> tuple[list[dict], int]:
        def shape_q(msg: dict, off: int) -> None:
            msg["topic"], msg["queue"] = topic, queue
        scan = limit if not tags else max(1000, limit * SCAN_FACTOR)
        return read_log(topic, queue, start, limit, max_offset, shape_q, tags, scan)
    return read


def list_reader(log: str) -> LogReader:
    """A subscription's message list ``~<id>`` (queue 0): each entry keeps its source ``topic``,
    ``queue`` and ``offset`` (= the source offset)."""
    def shape(msg: dict, _off: int) -> None:
        msg["offset"] = msg.pop("source_offset")

    def read(queue: int, start: int, limit: int, max_offset: int) -> tuple[list[dict], int]:
        return read_log(log, 0, start, limit, max_offset, shape)
    return read


def consume(owner: str, topic: str, meta: dict, queue_field, load_views, visibility_ms: int,
            req: v.PullRequest, allowed: set[int] | None, lock_owner: str,
            reader: LogReader | None = None) -> dict:
    """The pull loop shared by topic queues and subscription lists (SPEC §1): choose, read,
    lock with a conditional write, answer; long-poll until ``wait_ms`` passes."""
    reader = reader or topic_reader(topic, req.tags)
    deadline = clock.now() + req.wait_ms
    poll = POLL_MIN_MS
    while True:
        now = clock.now()
        progressed = False
        for view in candidates(load_views(), now, allowed):
            msgs, nxt = reader(view.queue, view.start, req.max, view.max_offset)
            if nxt == view.start:
                continue
            if not msgs:  # only skipped messages: move past them ourselves
                progressed |= OffsetRepo.advance(owner, view, nxt, meta, now)
                continue
            ts = next_lock_ts(now, view.lock_ts)
            if not OffsetRepo.lock(owner, view, ts, now + visibility_ms, nxt, lock_owner, meta, now):
                continue
            receipt = Receipt(broker(), queue_field(view), view.start, nxt, ts)
            return {"messages": [message_out(m) for m in msgs], "receipt": str(receipt)}
        if progressed:
            continue
        remaining = deadline - clock.now()
        if remaining <= 0:
            return {"messages": [], "receipt": None}
        time.sleep(min(poll, remaining) / 1000)
        poll = min(POLL_MAX_MS, poll * 2)
