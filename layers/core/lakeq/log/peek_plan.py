"""Peek: which offsets one page of a peek shows, and what each shows about a consumer's state. Pure.

A peek reads a log without locking, settling or counting a delivery: a topic queue from any
offset (:func:`window`), or what one consumer has not settled yet (:func:`unsettled`: pending
and due offsets below its frontier, then every offset from the frontier to the head), each with
its state (:func:`entry_state`). Pages are cut by offset; the cursor of the next page is the
offset after the last one examined (:func:`next_cursor`), and for a consumer's pages over several
queues ``"<queue>:<offset>"`` (:func:`parse_cursor`, :func:`cursor`).

A group's pending peek also walks the hidden lists of the replays into that group (issue 18.1's
``{"group"}`` target) before the topic's queues, as its pulls serve them: the page's sources are
ordered by :func:`source_key` (the replays' lists by id, then the queues by number) and the cursor
names one (:func:`source_cursor`: ``"~r.<replay id>:<list offset>"`` or ``"<queue>:<offset>"``,
read back by :func:`parse_source_cursor`); :func:`start_in` says where a page starts in each
source, so a source gone between pages (a replay ended) shifts nothing.
"""
from __future__ import annotations

from lakeq.common.errors import BadRequest
from lakeq.common.names import REPLAY_PREFIX, is_name
from lakeq.log.receipts import replay_field
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
    >>> unsettled(s, 13, 0, 0), unsettled(s, 13, 5, 0), unsettled(s, 13, 11, 0), unsettled(s, 10, 10, 0)
    (([], 0), ([], 5), ([], 11), ([], None))
    """
    below = sorted(o for o in {*s.pend, *s.due} if start <= o < s.frontier)
    out = below[:limit]
    if len(below) > limit:
        return out, (out[-1] + 1 if out else start)
    fresh_from = max(s.frontier, start)
    take = max(0, min(limit - len(out), max_offset - fresh_from))
    out += list(range(fresh_from, fresh_from + take))
    nxt = fresh_from + take
    return out, (nxt if nxt < max_offset else None)


def entry_state(s: State, offset: int, now: int) -> dict:
    """What a consumer's state says of ``offset``: ``state`` — ``locked`` (delivered, under a live
    lock), ``pending`` (delivered, unsettled, not locked: served again first), ``due`` (decided for
    the dead-letter path, its copy not yet written), ``new`` (never delivered) or ``settled`` —,
    ``deliveries`` and ``locked_until`` (0 when not locked). The caller passes the state the next
    pull starts from (:func:`lakeq.log.settlement.upkept`), so a message that pull dead-letters
    (its ``max_deliveries`` reached by expiry) shows ``due``, never ``pending``.

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


Source = tuple[int, "str | int"]  # (0, replay id): a replay's hidden list; (1, queue): a topic queue
BEFORE_ALL: Source = (0, "")  # where a walk without a cursor starts (no replay id is empty)


def replay_source(replay_id: str) -> Source:
    return (0, replay_id)


def queue_source(queue: int) -> Source:
    return (1, queue)


def source_key(src: Source) -> tuple[int, str | int]:
    """The order a group's pending peek walks its sources in, the order its pulls serve them: the
    replays' lists (oldest id first, :func:`lakeq.store.replay_lists.active_replays`), then the
    topic's queues by number.

    >>> sorted([queue_source(1), replay_source("rp_b"), queue_source(0), replay_source("rp_a")], key=source_key)
    [(0, 'rp_a'), (0, 'rp_b'), (1, 0), (1, 1)]
    """
    return src


def source_cursor(src: Source, offset: int) -> str:
    """The cursor of a page that continues in ``src`` at ``offset`` (a replay list's offset is the
    entry's ``list_offset``).

    >>> source_cursor(replay_source("rp_1"), 3), source_cursor(queue_source(2), 17)
    ('~r.rp_1:3', '2:17')
    """
    kind, name = src
    return f"{replay_field(str(name))}:{offset}" if kind == 0 else cursor(int(name), offset)


def parse_source_cursor(raw: str | None) -> tuple[Source, int]:
    """A group pending peek's ``from``: ``"~r.<replay id>:<offset>"`` or ``"<queue>:<offset>"``
    (:func:`parse_cursor`); None → before every source; anything else → 400.

    >>> parse_source_cursor("~r.rp_1:3"), parse_source_cursor("2:17"), parse_source_cursor(None)
    (((0, 'rp_1'), 3), ((1, 2), 17), ((0, ''), 0))
    >>> for bad in ("~r.:1", "~r.rp_1", "~r.rp_1:", "~r.rp_1:-1", "~r.a b:1", "~r.rp:1:1", "~r.x:" + "9" * 16):
    ...     try:
    ...         parse_source_cursor(bad)
    ...     except BadRequest:
    ...         pass
    ...     else:
    ...         print("accepted", bad)
    """
    if raw is None:
        return BEFORE_ALL, 0
    if not raw.startswith(REPLAY_PREFIX):
        q, off = parse_cursor(raw)
        return queue_source(q), off
    rid, sep, off = raw[len(REPLAY_PREFIX):].partition(":")
    if not (sep and is_name(rid) and off.isascii() and off.isdigit() and len(off) <= 15):
        raise BadRequest("'from' must be a cursor ('<queue>:<offset>' or '~r.<replay id>:<offset>') "
                         "as a previous page's 'next' gave it")
    return replay_source(rid), int(off)


def start_in(src: Source, at: Source, offset: int) -> int | None:
    """Where a page whose cursor is (``at``, ``offset``) starts reading ``src``: None when ``src``
    comes before the cursor's source (done on earlier pages), ``offset`` in the cursor's source, 0
    after it. A cursor's source that is gone (a replay ended between pages) still orders the rest.

    >>> at = replay_source("rp_b")
    >>> [start_in(s, at, 4) for s in (replay_source("rp_a"), at, replay_source("rp_c"), queue_source(0))]
    [None, 4, 0, 0]
    >>> [start_in(s, queue_source(1), 9) for s in (replay_source("rp_z"), queue_source(0), queue_source(1))]
    [None, None, 9]
    """
    k, c = source_key(src), source_key(at)
    if k < c:
        return None
    return offset if k == c else 0


def page(sources: list[tuple[Source, State, int, int]], at: Source, offset: int,
         limit: int) -> tuple[list[tuple[Source, list[int]]], str | None]:
    """One page of a consumer's unsettled offsets over several sources, each given as (source,
    state, ``min_offset``, ``max_offset``): walked in :func:`source_key` order from the cursor
    (``at``, ``offset``), at most ``limit`` offsets. Returns ([(source, offsets)], the next page's
    cursor or None when nothing is left). The page is cut by offsets alone (a message a read does
    not return is left out of the page, never from the paging); the caller may cut it shorter by
    bytes, its cursor then naming the first message left out (:func:`source_cursor`). A page that one source fills
    exactly points at the next source with anything unsettled (none: None).

    >>> a, b = State(2, pend={0: 1}), State(0)
    >>> srcs = [(queue_source(0), b, 0, 2), (replay_source("rp_1"), a, 0, 3)]
    >>> page(srcs, BEFORE_ALL, 0, 2)
    ([((0, 'rp_1'), [0, 2])], '0:0')
    >>> page(srcs, queue_source(0), 0, 5), page(srcs, BEFORE_ALL, 0, 1), page(srcs, replay_source("rp_1"), 1, 9)
    (([((1, 0), [0, 1])], None), ([((0, 'rp_1'), [0])], '~r.rp_1:2'), ([((0, 'rp_1'), [2]), ((1, 0), [0, 1])], None))
    """
    out: list[tuple[Source, list[int]]] = []
    n = 0
    for src, st, lo, hi in sorted(sources, key=lambda s: source_key(s[0])):
        start = start_in(src, at, offset)
        if start is None:
            continue
        start = max(start, lo)
        if n >= limit:  # full: continue where there is something (no read: the state says)
            more, _ = unsettled(st, hi, start, 1)
            if more:
                return out, source_cursor(src, more[0])
            continue
        offs, nxt = unsettled(st, hi, start, limit - n)
        if offs:
            out.append((src, offs))
            n += len(offs)
        if nxt is not None:
            return out, source_cursor(src, nxt)
    return out, None
