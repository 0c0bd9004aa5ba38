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
    s, age, growing = remember(None, {"a": False, "b": False}, {"a": (5, None), "b": (0, None)}, NOW_MIN, 0)
    assert growing == 0 and age == 0  # one read each: nothing to compare
    s, _, growing = remember(s, {"a": False, "b": False}, {"a": (8, None)}, NOW_MIN + 3, 0)
    assert growing == 3  # a grew between its reads at minutes 0 and 3
    s, _, growing = remember(s, {"a": False, "b": False}, {"b": (4, None)}, NOW_MIN + 4, 0)
    assert growing == 4  # a (not read) is still growing since minute 0; b since minute 0 too
    s, _, growing = remember(s, {"a": False, "b": False}, {"a": (8, None), "b": (0, None)}, NOW_MIN + 5, 0)
    assert growing == 0  # a no larger, b drained: neither grows


def test_one_rows_drain_does_not_offset_anothers_growth():
    s = None
    for m in range(20):
        seen = {"stuck": (10 * m, None), "tenant": (200 if m % 2 else 0, None)}
        s, _, growing = remember(s, dict.fromkeys(seen, False), seen, NOW_MIN + m, 0)
    assert growing == 19  # the stuck row grew at each of its 19 reads after the first


def test_rows_that_appear_or_go_are_not_growth():
    s, _, _ = remember(None, {"a": False}, {"a": (5, None)}, NOW_MIN, 0)
    s, _, growing = remember(s, {"a": False}, {"a": (6, None)}, NOW_MIN + 1, 0)
    assert growing == 1
    # a new group with a backlog of 1,000 appears; a is deleted (its messages go with it)
    s, _, growing = remember(s, {"new": False}, {"new": (1_000, None)}, NOW_MIN + 2, 0)
    assert growing == 0 and set(s["rows"]) == {"new"}


def test_muted_rows_are_remembered_but_left_out_of_the_alarms():
    t = NOW_MIN * 60_000
    s, age, _ = remember(None, {"a": True, "b": False}, {"a": (5, t - 900_000), "b": (1, t - 10)}, NOW_MIN, t)
    assert age == 10 and set(s["rows"]) == {"a", "b"}
    s, age, growing = remember(s, {"a": True, "b": False}, {"a": (50, t - 900_000), "b": (1, t - 10)},
                               NOW_MIN + 1, t + 60_000)
    assert growing == 0 and age == 60_010
    # put back: its remembered figures count at once (no wait for its turn)
    _, age, growing = remember(s, {"a": False, "b": False}, {}, NOW_MIN + 2, t + 120_000)
    assert age == 1_020_000 and growing == 2


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
    prev = {"v": STATE_VERSION, "rows": {"a": [3, None, NOW_MIN - 8, NOW_MIN - 20],
                                         "b": [3, None, NOW_MIN + 5, NOW_MIN + 1],
                                         "c": [3, None, NOW_MIN - 7, NOW_MIN - 9]}}
    s, _, growing = remember(prev, {"a": False, "b": False, "c": False}, {}, NOW_MIN, 0, pages=1)
    # pages 1: a unread for 8 > 2 + 5 minutes (growth unknown); b from the future: as if read now
    assert set(s["rows"]) == {"a", "b", "c"} and s["rows"]["b"][2] == NOW_MIN and growing == 9


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
            if not rows[k][1]:
                want = max(want, n)
        assert growing == want, (history, growing)


def units_of(names: list[str]) -> list[list]:
    return [[("pair", N(name=t), N(name="g"))] for t in names]


@given(st.integers(1, 30), st.integers(1, 7), st.integers(1, 40))
@settings(max_examples=100, deadline=None)
def test_reading_the_least_recently_read_first_reads_every_row_in_turn(n, per_run, runs):
    """Every row is read within ceil(n / per_run) runs of its last read, whatever n and the cap."""
    units = units_of([f"t{i:02d}" for i in range(n)])
    known: dict = {}
    last = {i: -1 for i in range(n)}
    for m in range(runs):
        got = schedule(units, known, per_run)
        assert len(got) == min(n, per_run)
        for u in got:
            k = row_key(*u[0])
            known[k] = [0, None, m, None]
            last[int(u[0][1].name[1:])] = m
        bound = -(-n // per_run)
        assert all(m - last[i] < bound for i in range(n) if m >= bound - 1), (n, per_run, m, last)
