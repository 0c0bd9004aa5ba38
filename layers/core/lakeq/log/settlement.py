"""Per-message settlement of one log for one consumer (issue 9): the state machine. Pure.

One consumer (a clustering group, a broadcasting group's client, a subscription) reads one log
(a topic queue or a subscription's list) and keeps one OffsetsTable record of it. The record's
settlement state (:class:`State`):

- ``frontier`` F: every offset below F was examined by some pull (a message a tag filter skipped
  counts as settled there, as before);
- ``pend``: the delivered but unsettled offsets below F → how many times each was delivered;
- ``due``: offsets decided for the dead-letter path (rejected, or delivered ``max_deliveries``
  times and not accepted) whose copy is not yet known to be in the dead-letter topic → (reason,
  deliveries). They are settled (:func:`dead_lettered`) only after the copy was appended;
- the lock: ``lock_ts`` (strictly increasing; receipts carry it), ``lock_until`` (0: ended),
  ``lock_from`` / ``lock_next`` (the receipt's offset / next_offset; ``lock_next`` None: the
  last lock ended with everything settled and nothing is pending), ``batch`` (the offsets that
  lock delivered) and ``held`` (those of them not settled yet);
- ``suspect``: pending offsets whose last lock ended with them unsettled (expired, visibility 0),
  so nothing tells which of that batch killed its consumer. With a ``max_deliveries`` they are
  served one at a time, lowest first, each until it is settled (poison isolation, issue 14): a
  message that kills its consumer every time then fails alone and reaches ``max_deliveries`` on
  its own, while its neighbours, delivered once in the failed batch and once alone, are accepted.
  A message is therefore delivered in a batch of several at most once (fresh), so with
  ``max_deliveries`` >= 2 an innocent neighbour is never at its limit when a batch fails; with
  ``max_deliveries`` 1 (no second delivery to find the culprit with) every batch is one message.
  Explicitly released messages are the consumer's own verdict and are not suspects;
- ``dead_lettered``: how many messages were dead-lettered (copied, or dropped without a topic).

The committed offset is derived: the lowest unsettled offset, ``min(pend ∪ due ∪ {F})``.

A pull serves pending offsets first (lowest first) and tops up with fresh offsets from F only when
it offered every pending one, so ``len(pend) <= MAX_PULL`` always (100; ``due`` holds the rest).

Most batches need none of this: a record holding an unfiltered batch ``[C, N)`` delivered once and
locked, or nothing at all, is stored in the old *simple* form (``committed_offset``, ``lock_next``,
no ``settle`` attribute), so a whole-batch ack stays one conditional UpdateItem.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Iterable

from lakeq.common.errors import LakeqError

REJECTED, MAX_DELIVERIES = "rejected", "max_deliveries"


class Stale(LakeqError):
    """The receipt is not the record's lock (locked again, reset, or ended by expiry)."""


class NotInBatch(LakeqError):
    """An outcome names an offset the receipt's batch did not deliver (400)."""


@dataclass(frozen=True)
class State:
    frontier: int
    pend: dict[int, int] = field(default_factory=dict)
    due: dict[int, tuple[str, int]] = field(default_factory=dict)
    lock_ts: int = 0
    lock_until: int = 0
    lock_from: int = 0
    lock_next: int | None = None
    batch: tuple[int, ...] = ()
    held: frozenset[int] = frozenset()
    suspect: frozenset[int] = frozenset()
    dead_lettered: int = 0

    @property
    def committed(self) -> int:
        """The lowest unsettled offset.

        >>> State(10, pend={7: 1, 9: 2}).committed, State(10, due={4: ("rejected", 1)}).committed, State(3).committed
        (7, 4, 3)
        """
        return min([self.frontier, *self.pend, *self.due])

    def live(self, now: int) -> bool:
        """Does a lock still hold messages at ``now``?"""
        return bool(self.held) and self.lock_until > now


# --- the record codec ---------------------------------------------------------------------------
def from_record(committed: int, lock_ts: int, lock_until: int, lock_next: int | None, settle: str | None,
                dead_lettered: int = 0) -> State:
    """The state of an OffsetsTable record. Without ``settle`` (the simple form, also every record
    written before issue 9): a lock ``[committed, lock_next)`` delivered once, or nothing.

    >>> s = from_record(5, 77, 1000, 8, None)
    >>> s.pend, sorted(s.held), s.committed, s.frontier
    ({5: 1, 6: 1, 7: 1}, [5, 6, 7], 5, 8)
    >>> from_record(5, 77, 0, None, None) == State(5, lock_ts=77, lock_from=5)
    True
    """
    if settle is None:
        if lock_next is None or lock_next <= committed:
            return State(max(committed, lock_next or 0), lock_ts=lock_ts, lock_until=lock_until,
                         lock_from=committed, dead_lettered=dead_lettered)
        rng = tuple(range(committed, lock_next))
        return State(lock_next, {o: 1 for o in rng}, {}, lock_ts, lock_until, committed, lock_next, rng,
                     frozenset(rng), frozenset(), dead_lettered)
    d = json.loads(settle)
    held = frozenset(d.get("h", ()))
    pend = {int(k): int(n) for k, n in d.get("p", {}).items()}
    # "i" (before issue 14): the last lock ended unsettled; its pending messages are the suspects
    sus = frozenset(d["s"]) if "s" in d else frozenset(o for o in pend if o not in held) if d.get("i") else frozenset()
    return State(
        frontier=int(d["f"]), pend=pend,
        due={int(k): (str(r), int(n)) for k, (r, n) in d.get("d", {}).items()},
        lock_ts=lock_ts, lock_until=lock_until, lock_from=int(d.get("lf", committed)), lock_next=lock_next,
        batch=tuple(d.get("b", ())), held=held, suspect=sus,
        dead_lettered=dead_lettered)


def simple(s: State) -> bool:
    """Can ``s`` be stored in the simple form (no ``settle`` attribute)?"""
    if s.due or s.suspect:
        return False
    if s.lock_next is None:
        return not s.pend and not s.held and s.lock_from == s.frontier
    c = s.committed
    rng = tuple(range(c, s.lock_next))
    return (bool(rng) and s.frontier == s.lock_next and s.lock_from == c and s.batch == rng
            and s.held == frozenset(rng) and s.pend == {o: 1 for o in rng})


def to_settle(s: State) -> str | None:
    """The record's ``settle`` attribute for ``s`` (None: the simple form). Round trip:
    ``from_record(s.committed, s.lock_ts, s.lock_until, s.lock_next, to_settle(s), s.dead_lettered) == s``."""
    if simple(s):
        return None
    d: dict = {"f": s.frontier, "lf": s.lock_from}
    if s.pend:
        d["p"] = {str(k): n for k, n in sorted(s.pend.items())}
    if s.due:
        d["d"] = {str(k): [r, n] for k, (r, n) in sorted(s.due.items())}
    if s.batch:
        d["b"] = list(s.batch)
    if s.held:
        d["h"] = sorted(s.held)
    if s.suspect:
        d["s"] = sorted(s.suspect)
    return json.dumps(d, separators=(",", ":"))


def floor(s: State, min_offset: int) -> State:
    """Offsets below the log's ``min_offset`` are gone (retention): nothing to settle there.

    >>> floor(State(5, pend={1: 1, 3: 2}), 2).pend, floor(State(1), 4).frontier
    ({3: 2}, 4)
    """
    if s.frontier >= min_offset and all(o >= min_offset for o in [*s.pend, *s.due]):
        return s
    return replace(s, frontier=max(s.frontier, min_offset),
                   pend={o: n for o, n in s.pend.items() if o >= min_offset},
                   due={o: d for o, d in s.due.items() if o >= min_offset},
                   held=frozenset(o for o in s.held if o >= min_offset),
                   suspect=frozenset(o for o in s.suspect if o >= min_offset))


# --- pulls ---------------------------------------------------------------------------------------
def normalize(s: State, now: int, max_deliveries: int | None) -> State:
    """End a lock that expired (or whose visibility was set to 0) with messages unsettled: they
    are pending again and suspects (served alone from here), those delivered ``max_deliveries``
    times become due (``max_deliveries``), and ``lock_ts`` moves on (the old receipt is stale)."""
    if not s.held or s.lock_until > now:
        return s
    pend, due = dict(s.pend), dict(s.due)
    for o in s.held:
        if max_deliveries is not None and pend[o] >= max_deliveries:
            due[o] = (MAX_DELIVERIES, pend.pop(o))
    suspect = frozenset(o for o in s.suspect | s.held if o in pend)
    return replace(s, pend=pend, due=due, held=frozenset(), lock_until=0, lock_ts=s.lock_ts + 1, suspect=suspect)


def upkept(s: State, now: int, max_deliveries: int | None) -> State:
    """The state the next pull at ``now`` starts from (:func:`plan`'s first step; what a peek shows,
    :mod:`lakeq.log.peek_plan`): an expired lock ended (:func:`normalize`), and every pending offset
    not under a live lock that was delivered ``max_deliveries`` times (reached by expiry, or
    ``max_deliveries`` lowered since) due for the dead-letter path instead of served again.

    >>> s = from_record(0, 5, 10, 2, None)                       # [0, 2) delivered once, lock until 10
    >>> upkept(s, 5, 1) == s, upkept(s, 20, 1).due, upkept(s, 20, 2).pend, upkept(s, 20, None).due
    (True, {0: ('max_deliveries', 1), 1: ('max_deliveries', 1)}, {0: 1, 1: 1}, {})
    >>> n = upkept(State(3, pend={1: 3, 2: 1}, suspect=frozenset({1, 2})), 0, 2)   # lowered to 2 since
    >>> n.pend, n.due, n.suspect
    ({2: 1}, {1: ('max_deliveries', 3)}, frozenset({2}))
    """
    n = normalize(s, now, max_deliveries)
    if max_deliveries is not None and any(c >= max_deliveries for o, c in n.pend.items() if o not in n.held):
        # pending ones already delivered max_deliveries times (it was lowered since): due, not served again
        over = {o: (MAX_DELIVERIES, c) for o, c in n.pend.items() if c >= max_deliveries and o not in n.held}
        due = {**n.due, **over}
        n = replace(n, due=due, pend={o: c for o, c in n.pend.items() if o not in due},
                    suspect=frozenset(o for o in n.suspect if o not in due))
    return n


@dataclass(frozen=True)
class Plan:
    """What a pull does with a record: ``upkeep`` (dead-letter the due entries of ``state`` first),
    else offer ``redeliver`` (pending offsets, lowest first) and read up to ``fresh`` new offsets
    from ``state.frontier``."""

    state: State
    upkeep: bool
    redeliver: tuple[int, ...] = ()
    fresh: int = 0
    alone: bool = False  # poison isolation: ``redeliver`` is the lowest suspect, served alone


def plan(s: State, now: int, limit: int, max_deliveries: int | None, isolate: bool = True) -> Plan:
    """A pull's plan for a record whose lock is not live (the caller only pulls from those).
    ``isolate`` False: a batch even while there are suspects (a tag-filtered pull that matches
    none of them: they wait for a pull that does).

    >>> p = plan(from_record(0, 5, 10, 3, None), 20, 32, 5)   # expired [0, 3): each served alone
    >>> p.upkeep, p.redeliver, p.fresh, p.alone, sorted(p.state.suspect)
    (False, (0,), 0, True, [0, 1, 2])
    >>> plan(replace(p.state, pend={1: 2, 2: 1}, suspect=frozenset({1, 2})), 20, 32, 5).redeliver
    (1,)
    >>> plan(from_record(0, 5, 10, 3, None), 20, 32, None).redeliver  # no max_deliveries: as before
    (0, 1, 2)
    >>> q = plan(State(3, pend={1: 2}), 0, 32, None)
    >>> q.upkeep, q.redeliver, q.fresh
    (False, (1,), 31)
    """
    n = upkept(s, now, max_deliveries)
    if n.due:
        return Plan(n, True)
    if max_deliveries is not None:  # unlimited deliveries: nothing to isolate a poison for
        if n.suspect and isolate:
            return Plan(n, False, (min(n.suspect),), 0, True)
        if max_deliveries == 1:  # no second delivery to tell a poison from its neighbours with
            limit = 1
    redeliver = tuple(sorted(n.pend)[:limit])
    fresh = limit - len(n.pend) if len(n.pend) < limit else 0
    return Plan(n, False, redeliver, fresh)


def lock(s: State, lock_ts: int, lock_until: int, served: Iterable[int], fresh: Iterable[int],
         frontier: int) -> State:
    """Lock the batch ``served`` (pending offsets delivered again) + ``fresh`` (new offsets
    delivered, all in ``[s.frontier, frontier)``; the others there were skipped: settled)."""
    served, fresh = list(served), list(fresh)
    pend = dict(s.pend)
    for o in served:
        pend[o] += 1
    for o in fresh:
        pend[o] = 1
    batch = tuple(sorted(served + fresh))
    out = replace(s, frontier=max(s.frontier, frontier), pend=pend, lock_ts=lock_ts, lock_until=lock_until,
                  batch=batch, held=frozenset(batch), lock_next=max(s.frontier, frontier))
    return replace(out, lock_from=out.committed)


def advance(s: State, frontier: int) -> State:
    """A pull examined ``[s.frontier, frontier)`` and found nothing to deliver (all skipped)."""
    return replace(s, frontier=max(s.frontier, frontier))


# --- settling ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Outcomes:
    """What an ack says of its batch: ``accept`` None = every unsettled message of the batch."""

    accept: tuple[int, ...] | None = None
    release: tuple[int, ...] = ()
    reject: tuple[int, ...] = ()


@dataclass(frozen=True)
class Outcome:
    state: State
    new_due: tuple[int, ...]  # offsets this settle decided to dead-letter
    changed: bool

    @property
    def unsettled(self) -> list[int]:
        return sorted(self.state.held)


def check_receipt(s: State, lock_ts: int, offset: int, next_offset: int) -> bool:
    """Is the receipt ``(offset, next_offset, lock_ts)`` the record's current lock?"""
    return s.lock_ts == lock_ts and s.lock_next == next_offset and s.lock_from == offset


def settle(s: State, lock_ts: int, offset: int, next_offset: int, accept: Iterable[int] | None = None,
           release: Iterable[int] = (), reject: Iterable[int] = (), max_deliveries: int | None = None) -> Outcome:
    """Settle offsets of the receipt's batch. ``accept`` None: every held offset is accepted (the
    whole-batch ack). An offset already settled is left alone (retries are no-ops); an offset the
    batch did not deliver raises :class:`NotInBatch`; a receipt that is not the lock raises
    :class:`Stale`. Released offsets stay pending (due when at ``max_deliveries``), rejected ones
    become due. When nothing is held any more the lock ends (``lock_until`` 0).

    >>> s = lock(State(0), 9, 100, [], [0, 1, 2], 3)
    >>> o = settle(s, 9, 0, 3, accept=[1], reject=[2])
    >>> o.unsettled, o.new_due, o.state.committed, o.state.due
    ([0], (2,), 0, {2: ('rejected', 1)})
    >>> r = settle(s, 9, 0, 3, accept=[], release=[0]).state  # released, then accepted, same receipt
    >>> sorted(r.pend), sorted(settle(r, 9, 0, 3, accept=[0]).state.pend)
    ([0, 1, 2], [1, 2])

    A suspect released by its consumer is that consumer's verdict, no longer a suspect (served
    again in batches); the other suspects stay first:

    >>> x = upkept(s, 200, 3)  # the lock ran out: 0, 1 and 2 are suspects
    >>> y = lock(x, 10, 300, [0], [], 3)  # the lowest suspect, alone
    >>> sorted(settle(y, 10, 0, 3, accept=[], release=[0]).state.suspect)
    [1, 2]
    """
    if s.lock_ts != lock_ts:
        raise Stale()
    if s.lock_next is None:  # that lock ended with everything settled (lock_from: its next_offset): a retry
        if next_offset != s.lock_from:
            raise Stale()
        if accept is None or all(offset <= o < next_offset for o in [*accept, *release, *reject]):
            return Outcome(s, (), False)
        raise NotInBatch()
    if s.lock_next != next_offset or s.lock_from != offset:
        raise Stale()
    full = accept is None
    acc, rel, rej = (list(s.held) if full else list(accept)), list(release), list(reject)
    batch = set(s.batch)
    if any(o not in batch for o in [*acc, *rel, *rej]):
        raise NotInBatch()
    held, pend, due = set(s.held), dict(s.pend), dict(s.due)
    new_due: list[int] = []
    accepted_released = False
    for o in acc:
        if o in held:
            held.discard(o)
            pend.pop(o, None)
        elif not full and o in pend:  # released by this lock and not delivered again since (that would be a
            pend.pop(o)               # new lock): its receipt is still the newest, so it settles it (SQS:
            accepted_released = True  # DeleteMessage after ChangeMessageVisibility 0 deletes)
    released: set[int] = set()
    for o in rel:
        if o in held:
            held.discard(o)
            released.add(o)
            if max_deliveries is not None and pend[o] >= max_deliveries:
                due[o] = (MAX_DELIVERIES, pend.pop(o))
                new_due.append(o)
    for o in rej:
        if o in held:
            held.discard(o)
            due[o] = (REJECTED, pend.pop(o))
            new_due.append(o)
    if len(held) == len(s.held) and not accepted_released:
        return Outcome(s, (), False)
    out = replace(s, held=frozenset(held), pend=pend, due=due,
                  suspect=frozenset(o for o in s.suspect if o in pend and o not in released))
    if not held:
        out = replace(out, lock_until=0)
        if not pend and not due:
            out = replace(out, lock_next=None, batch=(), lock_from=out.frontier)
    return Outcome(out, tuple(sorted(new_due)), True)


def visibility(s: State, lock_ts: int, offset: int, next_offset: int, lock_until: int) -> State:
    """Set the lock's expiry (0: end it now); :class:`Stale` unless the receipt's lock still holds
    messages (an acknowledged or fully settled lock has nothing left to hold)."""
    if not check_receipt(s, lock_ts, offset, next_offset) or not s.held:
        raise Stale()
    return replace(s, lock_until=lock_until)


def dead_lettered(s: State, offsets: Iterable[int], count: bool = True) -> State:
    """The due ``offsets`` are in the dead-letter topic (or dropped): settled and counted
    (``count`` False: gone with retention, nothing was dead-lettered; see :func:`gone`)."""
    due = dict(s.due)
    n = 0
    for o in offsets:
        if due.pop(o, None) is not None:
            n += 1
    if not n:
        return s
    out = replace(s, due=due, dead_lettered=s.dead_lettered + (n if count else 0))
    if out.lock_next is not None and not out.held and not out.pend and not out.due:
        out = replace(out, lock_next=None, batch=(), lock_from=out.frontier)
    return out


def gone(s: State, offsets: Iterable[int]) -> State:
    """The due ``offsets`` are below the log's ``min_offset`` (or the log is gone): settled, not
    counted as dead-lettered (no copy could be written).

    >>> g = gone(State(5, due={1: ("rejected", 1), 3: ("rejected", 2)}), [1])
    >>> g.due, g.dead_lettered, g.committed
    ({3: ('rejected', 2)}, 0, 3)
    """
    return dead_lettered(s, offsets, count=False)
