"""Queue choice, lock and ack rules for the queue-offset records (SPEC §1). Pure.

A queue-offset record exists per (group, topic, queue) — per (group, client_id, topic, queue) in
broadcasting mode, per subscription for a subscription's list. Its lock is the pair
``lock_ts`` (the timestamp of the newest lock, strictly increasing per record) and ``lock_until``
(0 when unlocked). Receipts carry ``lock_ts``; a newer lock therefore invalidates older receipts.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable


@dataclass(frozen=True)
class QueueView:
    """What a pull knows of one queue: the log's offsets and the group's record (if any)."""

    queue: int
    min_offset: int
    max_offset: int
    committed: int | None = None  # None: the group has no record yet
    lock_ts: int = 0
    lock_until: int = 0
    last_consumed_at: int = 0
    acks: tuple[str, ...] = ()  # the record's recently acknowledged receipts (see ack_key)
    lock_next: int | None = None
    settle: str | None = None  # the record's settlement state beyond the simple form (lakeq.log.settlement)
    sv: int | None = None  # the record's write counter (None: never written by issue 9's code)
    dead_lettered: int = 0
    run: int = 0  # locks in a row taken by folding the previous lock's ack into them (see may_fold)

    def state(self):
        """The record's :class:`lakeq.log.settlement.State` (a queue the owner never read: from ``start``)."""
        from lakeq.log.settlement import floor, from_record
        return floor(from_record(self.start if self.committed is None else self.committed, self.lock_ts,
                                 self.lock_until, self.lock_next, self.settle, self.dead_lettered), self.min_offset)

    @property
    def start(self) -> int:
        """Where reading starts: the committed offset, never below ``min_offset``."""
        return self.min_offset if self.committed is None else max(self.committed, self.min_offset)

    @property
    def backlog(self) -> int:
        """Messages not settled yet: ``max_offset - start`` for a record in the simple form; with
        per-message settlement state, the offsets past the frontier plus the pending and due ones
        below it (offsets settled above the lowest unsettled one do not count)."""
        if self.settle is None:
            return max(0, self.max_offset - self.start)
        s = self.state()
        return max(0, self.max_offset - s.frontier) + len(set(s.pend) | set(s.due))

    def locked(self, now: int) -> bool:
        return self.lock_until > now


def candidates(views: Iterable[QueueView], now: int, allowed: set[int] | None = None) -> list[QueueView]:
    """Queues a pull may lock, best first. O(q log q) for q queues.

    A queue qualifies when it is not locked (or its lock has expired), has unconsumed messages
    and, when ``allowed`` is given (a member pull), is one of the allowed queues. Order: most
    backlog first; on a tie the one consumed longest ago; then the lowest queue number.
    """
    out = [
        v
        for v in views
        if v.backlog > 0 and not v.locked(now) and (allowed is None or v.queue in allowed)
    ]
    out.sort(key=lambda v: (-v.backlog, v.last_consumed_at, v.queue))
    return out


def lagging(view: QueueView, now: int, allowed: set[int] | None = None) -> bool:
    """Does a ranked pull probe this queue's chain (issue 16 item 3)? Its ``max_offset`` is a hint
    the SegmentsTable stream moves a stream delay after each append without ids, so a queue whose
    hint shows nothing past the frontier may hold messages a producer was just told are in: a
    pull may lock it (not locked, ``allowed``) and its hint is at or below the frontier. The
    probe (one Query of the newest segment) costs 0.5 RRU, so queues whose hint already shows
    messages are not probed (they rank by the hint).

    >>> lagging(QueueView(0, 0, 5, committed=5), 0), lagging(QueueView(0, 0, 6, committed=5), 0)
    (True, False)
    >>> lagging(QueueView(0, 0, 5, committed=5, lock_until=9, lock_ts=1, lock_next=5), 1)
    False
    >>> lagging(QueueView(1, 0, 0), 0, allowed={0})
    False
    """
    if view.locked(now) or (allowed is not None and view.queue not in allowed):
        return False
    return view.max_offset <= view.state().frontier


FOLD_RUN = 16  # a queue is locked by folded acks at most this many times in a row, then ranked again


def may_fold(run: int, fold_run: int | None = None) -> bool:
    """May a pull that acknowledges a receipt of this queue (``ack=``) lock the same queue again
    in that same write, without ranking the topic's queues? Yes for the first ``fold_run`` locks in
    a row (``run``: how many the record's current run already took): after that the pull ranks the
    queues as any other pull (:func:`candidates`), so a consumer that always finds messages on its
    queue still moves to a queue with more backlog, and queues it does not hold are not starved
    when there are fewer consumers than busy queues.

    >>> may_fold(0), may_fold(FOLD_RUN - 1), may_fold(FOLD_RUN)
    (True, True, False)
    """
    return run < (FOLD_RUN if fold_run is None else fold_run)


def next_lock_ts(now: int, previous_lock_ts: int) -> int:
    """The new lock timestamp: ``now``, but strictly greater than the previous one."""
    return max(now, previous_lock_ts + 1)


def lock_until(now: int, visibility_ms: int) -> int:
    """A lock's new expiry when its visibility is set to ``visibility_ms``: 0 ends it now.

    >>> lock_until(1_000, 30_000), lock_until(1_000, 0)
    (31000, 0)
    """
    return now + visibility_ms if visibility_ms > 0 else 0


def ack_key(offset: int, next_offset: int, timestamp: int) -> str:
    """How an acknowledged receipt is remembered on its queue-offset record: a lock's timestamp is
    unique per record (strictly increasing), so this names one lock's batch exactly."""
    return f"{offset}:{next_offset}:{timestamp}"


def ack_entry(key: str, committed: int) -> str:
    """A whole-batch ack as the record's ``acks`` keeps it: its :func:`ack_key` and, when the
    committed offset the ack answered is not the receipt's end, that offset after ``=`` (so a
    retry answers the same body, shared/API.md).

    >>> ack_entry("0:3:9", 3), ack_entry("0:3:9", 0)
    ('0:3:9', '0:3:9=0')
    """
    return key if committed == int(key.split(":")[1]) else f"{key}={committed}"


def acked(acks: tuple[str, ...] | list[str] | None, key: str) -> int | None:
    """The committed offset the whole-batch ack ``key`` answered, if the record remembers it
    (:func:`ack_entry`); None: not remembered.

    >>> acked(("0:3:9", "3:5:10=4"), "3:5:10"), acked(["0:3:9"], "0:3:9"), acked(["0:3:9=0"], "0:3:8")
    (4, 3, None)
    """
    for e in acks or ():
        k, _, c = e.partition("=")
        if k == key:
            return int(c) if c else int(k.split(":")[1])
    return None


def kept_acks(acks: tuple[str, ...] | list[str], keep: int) -> list[str] | None:
    """The acknowledgements a new lock keeps (the newest ``keep``), or None when nothing needs
    dropping. With one ack per lock at most, a record never holds more than ``keep + 1``."""
    return list(acks[-keep:]) if len(acks) > keep else None


def may_ack(lock_ts: int, committed: int, receipt_ts: int, receipt_offset: int) -> bool:
    """An ack succeeds only if the lock still carries the receipt's timestamp and the committed
    offset is still the receipt's offset (also after the visibility timeout, while no newer
    pull has re-locked the queue)."""
    return lock_ts == receipt_ts and committed == receipt_offset


SEGMENTS_PAGE = 8  # segments a log read asks for per Query page when it knows nothing better


def segments_wanted(offsets: int, per_segment: int | None) -> int:
    """How many segments a read of ``offsets`` offsets should ask for in its first Query page
    (a Query is billed for every item it reads), when the queue's segments were last seen holding
    ``per_segment`` messages (None: not known).

    >>> segments_wanted(100, 100), segments_wanted(10, 10), segments_wanted(10, 3), segments_wanted(1, None)
    (1, 1, 4, 8)
    >>> segments_wanted(32, 1), segments_wanted(0, 5)
    (8, 1)
    """
    if per_segment is None or per_segment < 1:
        return SEGMENTS_PAGE
    return max(1, min(SEGMENTS_PAGE, -(-offsets // per_segment)))
