"""Issue 34, reviews: what the alarms watch comes from every row as last read
(:func:`lakeq.console.gauges.remember`) and the rows read longest ago are read first
(:func:`lakeq.console.gauges.schedule`). Checked against simple reference models, and against state
a run did not write (garbage, a clock stepped back, stale rows)."""
from __future__ import annotations

from types import SimpleNamespace as N

from hypothesis import given, settings
from hypothesis import strategies as st

from lakeq.console.gauges import STATE_VERSION, remember, row_key, schedule

NOW_MIN = 1_000


def test_growing_counts_the_minutes_a_rows_backlog_grew_at_each_read():
    keys = {"a": False, "b": False}
    s, age, growing = remember(None, keys, {"a": (5, None), "b": (0, None)}, NOW_MIN, 0)
    assert growing == 0 and age == 0  # one read each: nothing to compare
    s, _, growing = remember(s, keys, {"a": (8, None)}, NOW_MIN + 3, 0)
    assert growing == 0  # one larger read is no trend yet
    s, _, growing = remember(s, keys, {"a": (9, None), "b": (4, None)}, NOW_MIN + 4, 0)
    assert growing == 4  # a: larger at its reads of minutes 3 and 4, since its read of minute 0
    s, _, growing = remember(s, keys, {"b": (6, None)}, NOW_MIN + 6, 0)
    assert growing == 6  # b: two larger reads since minute 0; a (not read) still 4
    s, _, growing = remember(s, keys, {"a": (9, None), "b": (0, None)}, NOW_MIN + 7, 0)
    assert growing == 0  # a no larger, b drained: neither grows


def test_one_rows_drain_does_not_offset_anothers_growth():
    s = None
    for m in range(20):
        seen = {"stuck": (10 * m, None), "tenant": (200 if m % 2 else 0, None)}
        s, _, growing = remember(s, dict.fromkeys(seen, False), seen, NOW_MIN + m, 0)
    assert growing == 19  # the stuck row grew at each of its 19 reads after the first


def test_rows_that_appear_or_go_are_not_growth():
    s, _, _ = remember(None, {"a": False}, {"a": (5, None)}, NOW_MIN, 0)
    s, _, _ = remember(s, {"a": False}, {"a": (6, None)}, NOW_MIN + 1, 0)
    s, _, growing = remember(s, {"a": False}, {"a": (7, None)}, NOW_MIN + 2, 0)
    assert growing == 2
    # a new group with a backlog of 1,000 appears; a is deleted (its messages go with it)
    s, _, growing = remember(s, {"new": False}, {"new": (1_000, None)}, NOW_MIN + 3, 0)
    assert growing == 0 and set(s["rows"]) == {"new"}


def test_muted_rows_are_remembered_but_left_out_of_the_alarms():
    t = NOW_MIN * 60_000
    s, age, _ = remember(None, {"a": True, "b": False}, {"a": (5, t - 900_000), "b": (1, t - 10)}, NOW_MIN, t)
    assert age == 10 and set(s["rows"]) == {"a", "b"}
    s, _, _ = remember(s, {"a": True, "b": False}, {"a": (50, t - 900_000), "b": (1, t - 10)},
                       NOW_MIN + 1, t + 60_000)
    s, age, growing = remember(s, {"a": True, "b": False}, {"a": (60, t - 900_000), "b": (1, t - 10)},
                               NOW_MIN + 2, t + 120_000)
    assert growing == 0 and age == 120_010  # a grows, but is muted
    # put back: its remembered figures count at once (no wait for its turn)
    _, age, growing = remember(s, {"a": False, "b": False}, {}, NOW_MIN + 3, t + 180_000)
    assert age == 1_080_000 and growing == 2


def test_the_age_is_of_every_row_as_last_read_stale_or_not():
    t = NOW_MIN * 60_000
    s, age, _ = remember(None, {"a": False, "b": False}, {"a": (1, t - 5_000)}, NOW_MIN, t)
    assert age == 5_000
    s, age, _ = remember(s, {"a": False, "b": False}, {"b": (0, None)}, NOW_MIN + 1, t + 60_000)
    assert age == 65_000  # a not read this minute: its oldest message as last seen, older now
    # a's reads keep failing for an hour: its oldest message still counts (the truncation alarm says why)
    _, age, _ = remember(s, {"a": False, "b": False}, {"b": (0, None)}, NOW_MIN + 60, t + 3_600_000)
    assert age == 3_605_000


def test_a_stale_row_counts_no_growth_and_a_clock_step_back_forgets_nothing():
    prev = {"v": STATE_VERSION, "rows": {"a": [3, None, NOW_MIN - 8, NOW_MIN - 20, 5],
                                         "b": [3, None, NOW_MIN + 5, NOW_MIN + 1, 2],
                                         "c": [3, None, NOW_MIN - 7, NOW_MIN - 9, 2]}}
    s, _, growing = remember(prev, {"a": False, "b": False, "c": False}, {}, NOW_MIN, 0, pages=1)
    # pages 1: a unread for 8 > 2 + 5 minutes (growth unknown); b from the future: as if read now;
    # c: grew from minute -9 to its read at -7
    assert set(s["rows"]) == {"a", "b", "c"} and s["rows"]["b"][2] == NOW_MIN and growing == 2
    # a is read again after its gap: one larger read after 8 minutes starts no run from before it
    s, _, growing = remember(s, {"a": False, "b": False, "c": False}, {"a": (4, None)}, NOW_MIN + 1, 0, pages=1)
    assert s["rows"]["a"][3:] == [None, 0]


@given(st.one_of(st.none(), st.integers(), st.text(), st.lists(st.integers()),
                 st.dictionaries(st.text(max_size=3), st.recursive(
                     st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=3),
                     lambda x: st.lists(x, max_size=5) | st.dictionaries(st.text(max_size=3), x, max_size=3),
                     max_leaves=12), max_size=4)))
@settings(max_examples=200, deadline=None)
def test_a_state_nobody_wrote_starts_afresh(garbage):
    """Only the function writes its object, but whatever is in it must not break the run: a shape it
    does not know is no state."""
    for prev in (garbage, {"v": STATE_VERSION, "rows": garbage}, {"v": STATE_VERSION, "rows": {"a": garbage}}):
        s, age, growing = remember(prev, {"a": False}, {"a": (1, None)}, NOW_MIN, NOW_MIN * 60_000)
        assert s["rows"]["a"][:3] == [1, None, NOW_MIN] and age == 0 and isinstance(growing, int)


@given(st.lists(st.dictionaries(st.sampled_from("abcdef"), st.tuples(st.integers(0, 50), st.booleans()),
                                max_size=6), min_size=1, max_size=12))
@settings(max_examples=300, deadline=None)
def test_every_row_read_every_minute_matches_the_reference(minutes):
    """The reference: when a run reads every row, a row's growing run is the number of minutes in a
    row (ending now) whose read found its backlog larger than the minute before, the row existing
    throughout; the figure is the longest over the rows in the alarms."""
    s = None
    history: dict[str, list[int]] = {}
    for i, rows in enumerate(minutes):
        history = {k: history.get(k, []) + [b] for k, (b, _) in rows.items()}
        s, _, growing = remember(s, {k: m for k, (_, m) in rows.items()},
                                 {k: (b, None) for k, (b, _) in rows.items()}, NOW_MIN + i, 0)
        want = 0
        for k, bs in history.items():
            n = 0
            while n + 1 < len(bs) and bs[-1 - n] > bs[-2 - n]:
                n += 1
            if not rows[k][1] and n >= 2:  # two larger reads at least
                want = max(want, n)
        assert growing == want, (history, growing)


def units_of(names: list[str]) -> list[list]:
    return [[("pair", N(name=t), N(name="g"))] for t in names]


@given(st.integers(1, 30), st.integers(1, 7), st.integers(1, 40))
@settings(max_examples=100, deadline=None)
def test_reading_the_least_recently_read_first_reads_every_row_in_turn(n, per_run, runs):
    """Every row is read within ceil(n / per_run) runs of its last read (or of the run that first
    listed it), whatever n and the cap: the function's own loop, schedule then remember."""
    units = units_of([f"t{i:02d}" for i in range(n)])
    keys = {row_key(*u[0]): False for u in units}
    state = None
    last = {i: 0 for i in range(n)}
    bound = -(-n // per_run)
    for m in range(runs):
        got = schedule(units, state, per_run, m) if state is not None else units[:per_run]
        assert len(got) == min(n, per_run)
        for u in got:
            last[int(u[0][1].name[1:])] = m
        state, _, _ = remember(state, keys, {row_key(*u[0]): (0, None) for u in got}, m, 0)
        assert all(m - last[i] < bound for i in range(n)), (n, per_run, m, last)


def test_a_new_row_waits_its_turn_behind_the_rows_read_before_it_appeared():
    """Review 34c: a row never read was read before all others, so clients churning new subscriptions
    (100 each) filled every run and the other rows were never read. A new row now counts from the run
    that first listed it."""
    old = units_of(["a", "b", "c"])
    state = None
    for m in range(3):  # one row a run: a, b, c
        got = schedule(old, state, 1, m) if state is not None else old[:1]
        state, _, _ = remember(state, {row_key(*u[0]): False for u in old}, {row_key(*got[0][0]): (0, None)}, m, 0)
    new = units_of(["n"])
    both = {row_key(*u[0]): False for u in old + new}
    got = schedule(old + new, state, 1, 3)
    assert got[0][0][1].name == "a"  # read at 0, before n appeared at 3
    state, _, _ = remember(state, both, {row_key(*got[0][0]): (0, None)}, 3, 0)
    assert [schedule(old + new, state, 1, 4)[0][0][1].name] == ["b"]
