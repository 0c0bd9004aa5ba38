"""Delayed delivery (``delay_ms``): storing delayed messages and promoting them into their queues.

A produce message with ``delay_ms`` > 0 does not join its queue at once: its queue is chosen at
produce time (key hash or the request's spread queue, as for any message) and it is kept in
DelayedTable (``pq`` = ``<topic>#<queue>``, sort key ``<deliver_at>#<id>``) until ``deliver_at``;
the answer is ``{"id", "queue", "offset": null, "deliver_at"}``. The queue item's ``next_due`` (the
earliest ``deliver_at`` there) tells a pull, which reads every queue item of its topic anyway,
whether anything is due at no extra cost; only then it Queries the due items and promotes them
(:func:`promote_due`, the pull's promotion step: :meth:`lakeq.consume.reader.TopicLog.promote`). The
scheduled PromoterFunction does the same once a minute for queues nobody pulls (:func:`sweep`).

Promotion appends the due messages to their queue exactly once, in due order then request order then id, keeping
their id, body, key, tags, properties and ``produced_at`` (the produce time): one transaction per
part moves the head, puts the segments, records the client ids' offsets and deletes the promoted
delayed items (:meth:`lakeq.store.delayed.DelayedRepo.promote`), conditioned on the queue item's ``dver``,
which every delayed produce and every promotion moves. So two promoters racing cannot both append,
a crash leaves all of a part or none of it, and a delayed produce racing a promotion makes the
promotion try again (``next_due`` is never raised past a waiting message: no lost timer).
"""
from __future__ import annotations

import logging
from dataclasses import replace

from lakeq.common import backoff, clock
from lakeq.common.backoff import CAS_ATTEMPTS
from lakeq.common.errors import NotFound, Unavailable, counted
from lakeq.log.delay_plan import Delayed, decode_message, due_count, plan_delayed, promotion_extra
from lakeq.log.produce_plan import plan_parts
from lakeq.store.delayed import DelayedRepo
from lakeq.store.queue_log import LogRepo
from lakeq.store.records import Queue
from lakeq.store.writes import TransactionFailed, warm_transactions

log = logging.getLogger("lakeq.produce.delayed")

_MORE = object()  # a promotion won and more is due
# delayed items read per promotion transaction: at most 98 fit one (head move + one segment + one
# delete each); client ids need a dedup put more, and plan_parts cuts by item count and size
PROMOTE_QUERY = 98


def result(mid: str, queue: int, offset: int | None, deliver_at: int | None) -> dict:
    """A produce result: ``{"id", "queue", "offset"}``, plus ``deliver_at`` while the message waits."""
    if offset is None:
        return {"id": mid, "queue": queue, "offset": None, "deliver_at": deliver_at}
    return {"id": mid, "queue": queue, "offset": offset}


def known_results(topic: str, ids: list[str]) -> dict[str, dict]:
    """The recorded result of each id already seen on ``topic`` (delayed or in its queue)."""
    return {mid: result(mid, q, off, due) for mid, (q, off, due) in LogRepo.dedup_entries(topic, ids).items()}


def produce_delayed(topic: str, q: int, items: list[Delayed], results: list, now: int, moved: list[int]) -> None:
    """Store queue ``q``'s delayed messages, part by part (:func:`lakeq.log.delay_plan.plan_delayed`),
    filling ``results``. An id another request recorded meanwhile is answered with its result.
    ``q`` is appended to ``moved`` when a part moved the queue's ``next_due`` earlier (or set it), or
    answered ids another request recorded meanwhile that are still delayed (:func:`_add`): only then
    must the topic's change marker move at once (:func:`lakeq.store.append.bump_change` with ``force``) — a part stored
    behind an earlier ``next_due`` (its transaction conditioned on it) changes nothing a look keeps:
    the look already waits for that earlier due, which the request that set it signalled, and a due
    that passes sends the pull to a full round that reads the new one. ``q`` is appended as soon as
    one of its parts does so (a later part's failure raises before the caller's bump: the caller
    signals it then, review_g)."""
    for part in plan_delayed(topic, q, items):
        if _add(topic, q, part, results, now) and q not in moved:
            moved.append(q)


def _add(topic: str, q: int, part: list[Delayed], results: list, now: int) -> bool:
    """One part in one transaction (:meth:`DelayedRepo.add`); True when it set ``next_due``, or
    answered an id another request recorded meanwhile that is still delayed: that request (a first
    attempt still running when its retry read the dedup table) may yet fail at its forced bump, after
    this one answered 200 (review_g; review_d's race, with a delayed message)."""
    lowered = False

    def attempt(n: int):
        nonlocal part, lowered
        meta = LogRepo.queue(topic, q, consistent=n > 0)
        if meta is None:
            raise NotFound(f"queue {q} of topic '{topic}' does not exist")
        dmin = min(d.deliver_at for d in part)
        lower = meta.next_due is None or int(meta.next_due) >= dmin
        try:
            DelayedRepo.add(topic, q, part, now, lower)
        except TransactionFailed as e:
            if n + 1 >= CAS_ATTEMPTS:
                return backoff.RETRY  # the last lost round: give up (503) without reading further
            cids = [d for d in part if d.cid]
            first = len(e.reasons) - len(cids)
            dup = {d.message.id for k, d in enumerate(cids) if e.failed(first + k)}
            if dup:  # another request recorded these ids meanwhile: answer with its result
                found = known_results(topic, sorted(dup))
                keep = []
                for d in part:
                    if d.cid and d.message.id in found:
                        results[d.index] = found[d.message.id]
                        lowered = lowered or found[d.message.id].get("offset") is None
                    else:
                        keep.append(d)
                part = keep
            return backoff.RETRY if part else None
        for d in part:
            results[d.index] = result(d.message.id, q, None, d.deliver_at)
        lowered = lowered or lower
        return None
    backoff.cas(attempt, on_exhausted=_contended)
    return lowered


def _contended():
    raise Unavailable("the queue is too contended; retry the request with the same message ids")


def promote(topic: str, q: int, now: int, meta: Queue | None = None) -> int | None:
    """Append queue ``q``'s messages due at ``now`` to it; returns the queue's head afterwards
    (None: the queue does not exist). ``meta``: the queue item when the caller just read it
    consistently. Gives up quietly after :data:`~lakeq.common.backoff.CAS_ATTEMPTS` lost races (the
    next pull or the next scheduled run carries on); raises nothing for contention."""
    return promote_queue(topic, q, now, meta)[0]


def promote_queue(topic: str, q: int, now: int, meta: Queue | None = None) -> tuple[int | None, int | None]:
    """:func:`promote`, also returning the earliest ``deliver_at`` still ahead in that queue as
    far as the last read saw it (None: nothing delayed ahead, or unknown after giving up)."""
    head: int | None = None
    raced = False  # the last lost round lost a transaction (not a next_due set right)

    def attempt(n: int):
        nonlocal meta, head, raced
        if meta is None or n > 0:
            meta = LogRepo.queue(topic, q, consistent=True)
        if meta is None:
            return head, None
        head = int(meta.max_offset)
        if meta.next_due is None or int(meta.next_due) > now:
            return head, None if meta.next_due is None else int(meta.next_due)
        seen = None if meta.dver is None else int(meta.dver)
        entries = DelayedRepo.due(topic, q, now, PROMOTE_QUERY)
        try:
            if not entries:  # next_due was earlier than every delayed item: set it right
                DelayedRepo.set_next_due(topic, q, seen, DelayedRepo.after(topic, q, None))
                raced = False
                return backoff.AT_ONCE
            # the consistent read above is the head; after a lost race, the newest segment says
            base = head if n == 0 else LogRepo.head(topic, q, fresh=True)
            if base is None:
                return head, None
            # each keeps its produce time and records when it joined the queue (its age counts from then)
            items = [(k, replace(decode_message(e.data if e.data is not None else e.msg),
                                 visible_at=int(e.deliver_at)), bool(e.cid))
                     for k, e in enumerate(entries)]
            part, placed = plan_parts(topic, q, items, base, extra=promotion_extra(topic, q))[0]
            promoted = entries[:len(placed)]
            nxt = (int(entries[len(placed)].deliver_at) if len(placed) < len(entries)
                   else DelayedRepo.after(topic, q, promoted[-1].due))
            DelayedRepo.promote(topic, q, base, part, promoted, seen, nxt, now)
        except TransactionFailed:
            raced = True
            return backoff.RETRY
        head = part.segments[-1].end
        meta = None
        if nxt is None or nxt > now:
            return head, nxt
        return _MORE  # more due: the next promotion is a compare-and-set of its own

    def gave_up() -> tuple[int | None, None]:
        if raced:
            log.warning("promotion of %s#%d gave up after %d lost races", topic, q, CAS_ATTEMPTS)
        return head, None

    while True:
        out = backoff.cas(attempt, on_exhausted=gave_up)
        if out is not _MORE:
            return out


def promote_due(topic: str, metas: list[Queue], now: int | None = None) -> int | None:
    """A pull's promotion step (:meth:`lakeq.consume.reader.TopicLog.promote`): promote the due messages
    of every queue item in ``metas`` whose ``next_due`` has come (free: the pull read these items
    anyway), and move each item's ``max_offset`` in memory to the head after promotion, so this
    very poll reads them. Returns the earliest ``deliver_at`` still ahead (the long poll's wake-up)."""
    now = clock.now() if now is None else now
    wake: int | None = None
    for m in metas:
        ahead = None
        if m.next_due is not None and int(m.next_due) <= now:
            head, ahead = promote_queue(topic, int(m.queue), now)
            if head is not None and head > int(m.max_offset):
                m.max_offset = head
        elif m.next_due is not None:
            ahead = int(m.next_due)
            warm_transactions()  # the promotion at its due time will need it
        if ahead is not None and ahead > now:
            wake = ahead if wake is None else min(wake, ahead)
    return wake


def sweep(now: int | None = None) -> dict:
    """The scheduled promoter: every queue whose ``next_due`` has come (one Scan of the queue items,
    filtered on ``next_due``), promoted. A queue whose promotion raises (a store error, an entry
    that cannot be read) is logged and counted in ``errors``, and the queues after it in the Scan's
    order are still promoted. Returns counts for the log."""
    now = clock.now() if now is None else now
    out = {"queues": 0, "promoted": 0}
    for m in DelayedRepo.due_queues(now):
        if m.topic is None or m.queue is None:
            continue
        out["queues"] += 1
        before = int(m.max_offset)
        with counted(out, log, "promoting the due messages of %s#%s failed; the next run tries again",
                     m.topic, m.queue):
            head = promote(m.topic, int(m.queue), now)
            if head is not None:
                out["promoted"] += max(0, head - before)
    return out


__all__ = ["Delayed", "due_count", "known_results", "produce_delayed", "promote", "promote_due", "promote_queue",
           "result", "sweep"]
