"""The pure rules of peek (lakeq.log.peek_plan) and redrive (lakeq.log.move_plan) against simple
references (hypothesis)."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lakeq.common.errors import BadRequest
from lakeq.log import move_plan as mp
from lakeq.log import peek_plan as pp
from lakeq.log.settlement import State


@st.composite
def states(draw):
    frontier = draw(st.integers(0, 60))
    below = draw(st.sets(st.integers(0, max(0, frontier - 1)), max_size=20)) if frontier else set()
    due = {o for o in below if draw(st.booleans())}
    pend = {o: draw(st.integers(1, 5)) for o in below - due}
    return State(frontier, pend=pend, due={o: ("rejected", 1) for o in due}), frontier + draw(st.integers(0, 40))


@given(states(), st.integers(1, 15))
def test_pages_of_unsettled_offsets_cover_exactly_the_reference(s_head, limit):
    s, head = s_head
    reference = sorted({*s.pend, *s.due}) + list(range(s.frontier, head))
    got, start, pages = [], 0, 0
    while start is not None:
        page, start = pp.unsettled(s, head, start, limit)
        assert len(page) <= limit and (page or start is None)
        got += page
        pages += 1
        assert pages <= len(reference) + 1
    assert got == reference


@given(st.integers(0, 100), st.integers(0, 50), st.integers(0, 100), st.integers(1, 100))
def test_a_window_stays_within_the_log(start, lo, extra, limit):
    hi = lo + extra
    a, b = pp.window(start, limit, lo, hi)
    assert lo <= a <= b <= hi and b - a <= limit
    assert pp.next_cursor(b, hi) in (None, b)


def test_cursors():
    assert pp.parse_cursor(pp.cursor(3, 99)) == (3, 99)
    for bad in ("", "3", "a:1", "1:-2", ":", "1:2:3"):
        with pytest.raises(BadRequest):
            pp.parse_cursor(bad)


@given(st.integers(mp.MIN_RATE, mp.MAX_RATE), st.integers(1, 400), st.lists(st.integers(0, 3000), max_size=30))
def test_the_rate_is_never_exceeded(rate, total, gaps):
    """Run the runner's schedule against a clock that also jumps ahead at random (slow copies):
    whatever happens, by any time t at most rate·(t − t0)/1000 + one batch have started."""
    now = t0 = 1_000_000
    next_at, moved, starts = 0, 0, []
    g = iter(gaps)
    while moved < total:
        n = mp.batch_size(rate, total - moved)
        at, next_at = mp.slot(next_at, now, n, rate)
        starts.append((at, n))
        moved += n
        now = at + next(g, 0)
    done = 0
    for at, n in starts:
        assert done <= rate * (at - t0) / 1000 + 1e-9  # what started before this batch
        done += n
    assert moved == total and all(n >= 1 for _, n in starts)


@given(st.dictionaries(st.integers(0, 8), st.tuples(st.integers(0, 50), st.integers(0, 50)), max_size=6),
       st.lists(st.tuples(st.integers(0, 8), st.integers(0, 120)), max_size=20))
def test_progress_never_goes_back_nor_past_its_end(qs, moves):
    pos = {q: min(a, b) for q, (a, b) in qs.items()}
    end = {q: max(a, b) for q, (a, b) in qs.items()}
    p = mp.Progress(pos, end)
    for q, to in moves:
        if q not in end:
            continue
        before = p.pos.get(q, 0)
        p = p.advance(q, to)
        assert before <= p.pos[q] <= max(before, end[q])
        assert mp.Progress.load(*p.dump()) == p
    assert p.remaining() == sum(max(0, end[q] - p.pos.get(q, 0)) for q in end)
    assert (p.next_queue() is None) == (p.remaining() == 0)


def test_move_ids_and_destinations():
    ids = {mp.move_id(log, q, o) for log in ("d", "d!1") for q in range(3) for o in range(50)}
    assert len(ids) == 300 and all(len(i) <= 200 for i in ids)
    assert mp.destination({"dead_letter": {"topic": ""}}, None) is None
    assert mp.destination({"dead_letter": "x"}, None) is None


@st.composite
def sources(draw):
    """A group's pending sources: 0-3 replay lists and 1-3 topic queues, each with a state and a head."""
    rids = draw(st.lists(st.sampled_from(["rp_a", "rp_b", "rp_c"]), unique=True, max_size=3))
    out = [(pp.replay_source(r), *draw(states())) for r in rids]
    out += [(pp.queue_source(q), *draw(states())) for q in range(draw(st.integers(1, 3)))]
    return [(src, s, 0, head) for src, s, head in draw(st.permutations(out))]


def _reference(srcs):
    return [(src, o) for src, s, _, head in sorted(srcs, key=lambda x: pp.source_key(x[0]))
            for o in sorted({*s.pend, *s.due}) + list(range(s.frontier, head))]


@given(sources(), st.integers(1, 15))
def test_a_group_pending_walk_over_lists_and_queues_covers_exactly_the_reference(srcs, limit):
    """Replays' lists first (by id), then the queues; every page ≤ limit; a page is empty only when
    it is the last; the cursor text goes through parse_source_cursor (as the route does)."""
    got, cur, pages = [], None, 0
    reference = _reference(srcs)
    while True:
        at, off = pp.parse_source_cursor(cur)
        page, cur = pp.page(srcs, at, off, limit)
        n = sum(len(o) for _, o in page)
        assert n <= limit and (n or cur is None)
        got += [(src, o) for src, offs in page for o in offs]
        pages += 1
        assert pages <= len(reference) + 1
        if cur is None:
            break
    assert got == reference


@given(sources(), st.integers(1, 15), st.data())
def test_a_replay_gone_between_pages_shifts_nothing_else(srcs, limit, data):
    """A replay list that ends (its marker removed) after the first page: the rest pages on from the
    cursor as if it were still there, without a repeat or a gap in the other sources."""
    page, cur = pp.page(srcs, pp.BEFORE_ALL, 0, limit)
    first = [(src, o) for src, offs in page for o in offs]
    lists = [s for s in srcs if s[0][0] == 0]
    gone = data.draw(st.sampled_from(lists)) if lists else None
    rest = [s for s in srcs if s is not gone]
    got = []
    while cur is not None:
        page, cur = pp.page(rest, *pp.parse_source_cursor(cur), limit)
        got += [(src, o) for src, offs in page for o in offs]
    reference = _reference(srcs)
    want = [x for x in reference[len(first):] if gone is None or x[0] != gone[0]]
    assert first == reference[:len(first)] and got == want


def test_group_pending_cursors():
    assert pp.parse_source_cursor(pp.source_cursor(pp.replay_source("rp_1"), 7)) == ((0, "rp_1"), 7)
    assert pp.parse_source_cursor(pp.source_cursor(pp.queue_source(3), 0)) == ((1, 3), 0)
    for bad in ("~r.:1", "~r.rp_v1", "~r.rp_v1:", "~r.rp_v1:-1", "~r.rp_v1:x", "~r.a b:1", "~r.rp:v1:1",
                "~x.rp_v1:1", ":1", "1:", "~r.rp_v1:1234567890123456"):
        with pytest.raises(BadRequest):
            pp.parse_source_cursor(bad)
    assert pp.unsettled(State(10, pend={4: 1}), 13, 0, 0) == ([], 0)  # asked for nothing: was an IndexError
