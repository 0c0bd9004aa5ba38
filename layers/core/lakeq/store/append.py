"""The one append-with-retry loop: put items at a log queue's head, write by write, exactly once.

Used by the produce path (:func:`lakeq.consume.service.produce`), dead-lettering
(:func:`lakeq.consume.settle.append_copy`) and the fan-out to subscription lists
(:func:`lakeq.fanout.worker.append_groups`); each says how its items become writes (``plan``) and what a
recorded id means to it (``on_recorded``), this module does the racing.

One round: read the queue's head (:meth:`lakeq.store.queue_log.LogRepo.head`; after a lost race, fresh:
the newest segment's end), plan the next write there, :meth:`lakeq.store.queue_log.LogRepo.append` it.
A write that loses a race (someone appended at that head first) raises ``TransactionFailed``:

- a single-segment put without ids (the hot path) says where the head went (``e.head``: the end of
  the segment that sits at its base, returned by the failed write itself, so read after the
  winner's write and stronger than the eventually consistent head read): the next round plans at
  that base at once, with no head read and no wait, after the write's first lost round
  (:data:`AT_ONCE_LOSSES`; a later lost round of the same write waits and reads the head fresh, as
  below) (issue 33 item 3). The chain stays one chain: that base is the end of a segment that
  exists, so a put there either is the next link or fails again (retention removes only segments
  far older than one request, never the just-written one it learned; a re-created topic is another
  log name, so a base learned in one incarnation is never used in another);
- if dedup keys of the write were recorded meanwhile (their conditions are the last reasons),
  ``on_recorded(items, keys)`` answers those items its own way and returns the items still to
  append; when it answered some, the next round starts at once (progress was made);
- otherwise (a transaction: ids or several segments; a put's later lost rounds) the round waits
  (:func:`lakeq.common.backoff.sleep`) and plans again at the fresh head; after a lost put that
  said the head, that fresh read is the chain's consistent Query alone when it reaches the end
  the put returned (:data:`KNOWN_END_READ`, :meth:`~lakeq.store.queue_log.LogRepo.head`'s ``past``).

Each write is a round of the one compare-and-set loop (:func:`lakeq.common.backoff.cas`): after
:data:`~lakeq.common.backoff.CAS_ATTEMPTS` lost races in a row :class:`Contended` is raised with the items not
appended. Store calls per round are those of ``LogRepo.head`` and ``LogRepo.append`` (a round after a
lost single-segment put: ``LogRepo.append`` alone). A queue deleted while a producer races on it: a
round that learned its base does not read the queue item (the fresh head read did), so its put may
land in the deleted incarnation's log, as a first round's already could (that log is unreachable:
docs/design.md, "Queue lifecycle").
"""
from __future__ import annotations

import logging
from typing import Callable, TypeVar

from lakeq.common import backoff, clock
from lakeq.common.backoff import CAS_ATTEMPTS
from lakeq.common.errors import LakeqError, Unavailable
from lakeq.common.names import is_list
from lakeq.log.produce_plan import Append
from lakeq.store.queue_log import LogRepo
from lakeq.store.writes import TransactionFailed

T = TypeVar("T")
_ANSWERED = object()  # a round's answer: on_recorded answered every item left
# A lost single-segment put returns the winner's segment (TransactionFailed.head): the next round
# writes at its end at once, no head read, no wait (issue 33 item 3; AT_ONCE_LOSSES). False only for
# bench/ceiling.py's side-by-side baseline (the loop before it: wait, then a fresh head read).
LEARN_HEAD = True
# A write's first AT_ONCE_LOSSES lost rounds go again at once at the head they learned; a later lost
# round waits the backoff and reads the head fresh, as before (a head learned before a wait is stale
# after it: the put would walk the chain a lost round a segment). Producers that keep losing on a
# crowded queue step aside instead of all writing every round (bench/ceiling.py, docs/benchmarks.md:
# every lost round at once ran 40 of 300 requests out of their 40 rounds at 16 producers on one
# queue; the learned head kept across the wait, 25 at 8).
AT_ONCE_LOSSES = 1
# A later round of a write whose last lost put said the head reads it fresh with the newest segment's
# consistent Query alone (``LogRepo.head``'s ``past``: that end is known to exist), not the queue
# item's GetItem then the Query (issue 33 item 3: a landed put after a read follows the head move
# by one read, not two). False only for bench/ceiling.py's side-by-side baseline.
KNOWN_END_READ = True
# A change marker's bump (bump_change) tries this many times before the request answers 503: a
# throttled marker item (the per-item limit, ~1,000 writes a second; every container bumps a topic
# at most once a second) or a transient store error, after botocore's own retries.
BUMP_ATTEMPTS = 4


class Contended(LakeqError):
    """The queue's head moved under every one of :data:`~lakeq.common.backoff.CAS_ATTEMPTS` writes in a row.
    ``remaining``: the items not appended (in order); ``cause``: the last ``TransactionFailed``."""

    def __init__(self, remaining: list, cause: TransactionFailed):
        super().__init__(f"{len(remaining)} item(s) not appended after {CAS_ATTEMPTS} lost races")
        self.remaining = remaining
        self.cause = cause


def recorded_keys(e: TransactionFailed, part: Append) -> list[str]:
    """The dedup keys of ``part`` whose write failed in ``e`` (their reasons come last)."""
    if not part.dedup:
        return []
    first = len(e.reasons) - len(part.dedup)
    return [key for k, (key, _) in enumerate(part.dedup) if e.failed(first + k)]


def append_at_head(log: str, queue: int, items: list[T], now: int,
                   plan: Callable[[list[T], int], "tuple[Append, int]"],
                   on_written: Callable[[list[T], Append], None] | None = None,
                   on_recorded: Callable[[list[T], list[str]], list[T]] | None = None,
                   attempts: int = CAS_ATTEMPTS) -> bool:
    """Append ``items`` to queue ``queue`` of log ``log`` (a topic's log name or a list's).

    ``plan(items, base)`` → ``(part, n)``: the next write at offset ``base``, holding the first
    ``n`` items. ``on_written(done, part)`` after each write. ``on_recorded(items, keys)`` →
    the items still to append, when a write failed because ``keys`` were recorded meanwhile
    (default: drop nothing). False when the queue does not exist (the items left were not
    appended), True when every item is appended or answered. Raises :class:`Contended`."""
    lost: list[TransactionFailed] = []
    learned: int | None = None  # the head the last lost write returned (None: read it)
    answered = False  # some items answered from ids another request recorded meanwhile

    def attempt(r: int):
        nonlocal items, learned, answered
        if learned is not None:
            base, learned = learned, None
        elif r > 0 and KNOWN_END_READ and lost and lost[-1].head is not None:
            base = LogRepo.head(log, queue, fresh=True, past=lost[-1].head)
        else:
            base = LogRepo.head(log, queue, fresh=r > 0)
        if base is None:
            return None
        part, n = plan(items, base)
        try:
            LogRepo.append(log, queue, base, part, now)
        except TransactionFailed as e:
            lost.append(e)
            if e.head is not None and LEARN_HEAD and r < AT_ONCE_LOSSES:  # the winner's end: the next free base
                learned = e.head
                return backoff.AT_ONCE
            keys = recorded_keys(e, part) if r + 1 < attempts else []  # the last lost round gives up
            if keys and on_recorded is not None:
                left = on_recorded(items, keys)
                if len(left) < len(items):  # answered some: progress, go on at once
                    items, answered = left, True
                    return backoff.AT_ONCE if items else _ANSWERED
            return backoff.RETRY
        return part, n

    def contended():
        raise Contended(items, lost[-1]) from lost[-1]

    wrote, exists = False, True
    try:
        while items:
            out = backoff.cas(attempt, attempts, contended)  # each write is a compare-and-set of the head
            if out is None:
                exists = False
                break
            if out is _ANSWERED:
                break
            part, n = out
            wrote = True
            if on_written is not None:
                on_written(items[:n], part)
            items = items[n:]
    except BaseException:
        if wrote:  # the request fails anyway: what was written is signalled if the marker lets us
            bump_change_hint(log)
        raise
    if wrote or answered:
        # before the caller answers: a pull's empty look trusts the marker. Items answered from ids
        # another request recorded meanwhile too: that request (a first attempt the client retried
        # while it ran) may fail at its own bump after this one answered 200 (review_d)
        bump_change(log)
    return exists


def bump_change(log: str, force: bool = False) -> None:
    """After writes to log ``log``, before the request that made them answers: move its change
    marker when it is a topic's (issue 33: its long polls wait on it, and a pull's empty look
    trusts it — :func:`lakeq.consume.reader._still_empty`; :meth:`LogRepo.bump_change`, at most
    once a second per container). A failed bump is retried :data:`BUMP_ATTEMPTS` times with the
    one backoff; then :class:`~lakeq.common.errors.Unavailable` (503 ``busy``: the writes stand, a
    retry with the same message ids answers their first results and bumps again). A produce that
    answered 200 with its bump lost left its message to the container's 60-s safety net where the
    look was kept (review_c); a 503 says so instead. ``force``: within the second too (a delayed
    produce, :meth:`LogRepo.bump_change`)."""
    if is_list(log):
        return

    def attempt(n: int):
        try:
            if force:
                LogRepo.bump_change(log, clock.now(), force=True)
            else:
                LogRepo.bump_change(log, clock.now())
            return True
        except Exception:  # noqa: BLE001 - any failure of the write: retried, then 503 below
            logging.getLogger(__name__).warning("change marker not bumped (attempt %d)", n + 1, exc_info=True)
            return backoff.RETRY

    backoff.cas(attempt, BUMP_ATTEMPTS, _marker_unavailable)


def _marker_unavailable():
    raise Unavailable("the topic's change marker could not be written; retry with the same message ids")


def bump_change_hint(log: str, force: bool = False) -> None:
    """:func:`bump_change` on a path that fails anyway (an exception after some writes): one try,
    a failure logged, never raised over the exception that is on its way. ``force``: within the
    container's second too (a delayed produce that moved a ``next_due`` earlier before it failed)."""
    if is_list(log):
        return
    try:
        if force:
            LogRepo.bump_change(log, clock.now(), force=True)
        else:
            LogRepo.bump_change(log, clock.now())
    except Exception:  # noqa: BLE001 - a hint, see above
        logging.getLogger(__name__).warning("change marker not bumped", exc_info=True)


def append_copies(log: str, n_queues: int, msgs: list, now: int) -> int:
    """Append copies ``msgs`` (:class:`lakeq.log.segments.Message`, each with a derived id) to log
    ``log`` of ``n_queues`` queues once each: a copy goes to its key's queue (no key: a hash of its
    id), ids already in the log's dedup table are skipped (one BatchGetItem), the rest are appended
    with their ids recorded in the same transactions (an id recorded meanwhile is skipped too).
    Returns how many were appended; the others were there already (a copy made again after a
    crash). Used by redrive (:mod:`lakeq.redrive.service`) and replay (:mod:`lakeq.replay.service`).
    Raises :class:`Contended`; a queue that does not exist appends nothing of its copies."""
    import zlib

    from lakeq.log.produce_plan import plan_parts, queue_for_key

    known = LogRepo.dedup_lookup(log, [m.id for m in msgs])
    per_queue: dict[int, list] = {}
    seen: set[str] = set()
    for i, m in enumerate(msgs):
        if m.id not in known and m.id not in seen:
            seen.add(m.id)
            q = queue_for_key(m.key, n_queues) if m.key is not None else zlib.crc32(m.id.encode()) % n_queues
            per_queue.setdefault(q, []).append((i, m, True))
    appended = 0
    for q, its in sorted(per_queue.items()):
        def plan(left: list, base: int, q: int = q) -> tuple:
            part, placed = plan_parts(log, q, left, base)[0]
            return part, len(placed)

        def written(done: list, _part) -> None:
            nonlocal appended
            appended += len(done)
        append_at_head(log, q, its, now, plan, written,
                       on_recorded=lambda left, keys: [it for it in left if it[1].id not in keys])
    if known:  # copies made by an attempt that failed before its bump (a 503): signal them now
        bump_change(log)
    return appended
