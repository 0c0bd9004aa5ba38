"""Peek: which offsets one page of a peek shows, and what each shows about a consumer's state. Pure.

A peek reads a log without locking, settling or counting a delivery: a topic queue from any
offset (:func:`window`), or what one consumer has not settled yet (:func:`unsettled`: pending
and due offsets below its frontier, then every offset from the frontier to the head), each with
its state (:func:`entry_state`). Pages are cut by offset; the cursor of the next page is the
offset after the last one examined (:func:`next_cursor`), and for a consumer's pages over several
queues ``"<queue>:<offset>"`` (:func:`parse_cursor`, :func:`cursor`).
"""
from __future__ import annotations

from lakeq.common.errors import BadRequest
from lakeq.log.settlement import State

MAX_PEEK = 100
DEFAULT_PEEK = 10


def window(start: int | None, limit: int, min_offset: int, max_offset: int) -> tuple[int, int]:
    """The offsets ``[lo, hi)`` a page of a queue peek reads: from ``start`` (default and floor:
    ``min_offset``, below it the log is gone), ``limit`` offsets at most, never past the head.

    >>> window(None, 10, 3, 50), window(45, 10, 3, 50), window(0, 10, 3, 50), window(60, 10, 3, 50)
    ((3, 13), (45, 50), (3, 13), (50, 50))
    """
    lo = min_offset if start is None else max(start, min_offset)
    lo = min(lo, max_offset)
    return lo, min(lo + limit, max_offset)


def next_cursor(after: int, max_offset: int) -> int | None:
    """The next page's ``from``: the offset after the last one examined; None at the head.

    >>> next_cursor(13, 50), next_cursor(50, 50)
    (13, None)
    """
    return after if after < max_offset else None


def unsettled(s: State, max_offset: int, start: int, limit: int) -> tuple[list[int], int | None]:
    """The offsets ``>= start`` a consumer in state ``s`` has not settled, in order, at most
    ``limit`` of them: its pending and due offsets (below the frontier), then the frontier to the
    head ``max_offset`` (never delivered). Returns (offsets, the next page's start or None when
    nothing is left). O(pending + limit).

    >>> s = State(10, pend={4: 2, 7: 1}, due={5: ("rejected", 1)})
    >>> unsettled(s, 13, 0, 10), unsettled(s, 13, 0, 3), unsettled(s, 13, 8, 10), unsettled(s, 10, 8, 5)
    (([4, 5, 7, 10, 11, 12], None), ([4, 5, 7], 10), ([10, 11, 12], None), ([], None))
    """
    below = sorted(o for o in {*s.pend, *s.due} if start <= o < s.frontier)
    out = below[:limit]
    if len(below) > limit:
        return out, out[-1] + 1
    fresh_from = max(s.frontier, start)
    take = max(0, min(limit - len(out), max_offset - fresh_from))
    out += list(range(fresh_from, fresh_from + take))
    nxt = fresh_from + take
    return out, (nxt if nxt < max_offset else None)


def entry_state(s: State, offset: int, now: int) -> dict:
    """What a consumer's state says of ``offset``: ``state`` — ``locked`` (delivered, under a live
    lock), ``pending`` (delivered, unsettled, not locked: served again first), ``due`` (decided for
    the dead-letter path, its copy not yet written), ``new`` (never delivered) or ``settled`` —,
    ``deliveries`` and ``locked_until`` (0 when not locked).

    >>> s = State(10, pend={4: 2, 7: 1}, due={5: ("rejected", 1)}, lock_until=500, held=frozenset({7}))
    >>> [entry_state(s, o, 100)["state"] for o in (4, 5, 6, 7, 12)]
    ['pending', 'due', 'settled', 'locked', 'new']
    >>> entry_state(s, 7, 100), entry_state(s, 7, 600)["state"]
    ({'state': 'locked', 'deliveries': 1, 'locked_until': 500}, 'pending')
    """
    if offset in s.due:
        return {"state": "due", "deliveries": s.due[offset][1], "locked_until": 0}
    if offset in s.pend:
        live = offset in s.held and s.lock_until > now
        return {"state": "locked" if live else "pending", "deliveries": s.pend[offset],
                "locked_until": s.lock_until if live else 0}
    if offset >= s.frontier:
        return {"state": "new", "deliveries": 0, "locked_until": 0}
    return {"state": "settled", "deliveries": 0, "locked_until": 0}


def cursor(queue: int, offset: int) -> str:
    """A consumer peek's cursor over several queues.

    >>> cursor(2, 17), parse_cursor("2:17"), parse_cursor(None)
    ('2:17', (2, 17), (0, 0))
    """
    return f"{queue}:{offset}"


def parse_cursor(raw: str | None) -> tuple[int, int]:
    """``"<queue>:<offset>"`` → (queue, offset); None → the start (0, 0); anything else → 400."""
    if raw is None:
        return 0, 0
    q, sep, off = raw.partition(":")
    if not sep or not all(x.isascii() and x.isdigit() and len(x) <= 15 for x in (q, off)):
        raise BadRequest("'from' must be a cursor '<queue>:<offset>' as a previous page's 'next' gave it")
    return int(q), int(off)
