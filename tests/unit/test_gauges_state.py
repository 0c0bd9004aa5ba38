"""Issue 34, second review: what the alarms watch comes from every row as last read
(:func:`lakeq.console.gauges.remember`), not from the run's page only. Checked against a simple
reference model, and against state a run did not write (garbage, a clock stepped back, stale rows)."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from lakeq.console.gauges import STATE_VERSION, remember

NOW_MIN = 1_000


def state(rows: dict) -> dict:
    return {"v": STATE_VERSION, "rows": rows}


def test_growth_is_each_rows_change_a_minute_between_its_last_two_visits():
    s, age, growth = remember(None, {"a": False, "b": False}, {"a": (5, None), "b": (0, None)}, NOW_MIN, 0)
    assert growth is None and age == 0  # no row has two visits
    s, _, growth = remember(s, {"a": False, "b": False}, {"a": (8, None)}, NOW_MIN + 3, 0)
    assert growth == 1.0  # a: +3 over 3 minutes; b not read this run and has no rate yet
    s, _, growth = remember(s, {"a": False, "b": False}, {"b": (4, None)}, NOW_MIN + 4, 0)
    assert growth == 1.0 + 4 / 4  # a's rate held until its next visit; b: +4 over 4 minutes
    s, _, growth = remember(s, {"a": False, "b": False}, {"a": (8, None), "b": (0, None)}, NOW_MIN + 5, 0)
    assert growth == -4.0  # a unchanged over 2 minutes, b drained in 1


def test_rows_that_appear_or_go_are_not_growth():
    s, _, _ = remember(None, {"a": False}, {"a": (5, None)}, NOW_MIN, 0)
    s, _, growth = remember(s, {"a": False}, {"a": (5, None)}, NOW_MIN + 1, 0)
    assert growth == 0
    # a new group with a backlog of 1,000 appears; a is deleted (its 5 messages go with it)
    s, _, growth = remember(s, {"new": False}, {"new": (1_000, None)}, NOW_MIN + 2, 0)
    assert growth is None and set(s["rows"]) == {"new"}


def test_muted_rows_are_remembered_but_left_out_of_the_alarms():
    t = NOW_MIN * 60_000
    s, age, _ = remember(None, {"a": True, "b": False}, {"a": (5, t - 900_000), "b": (1, t - 10)}, NOW_MIN, t)
    assert age == 10 and set(s["rows"]) == {"a", "b"}
    s, age, growth = remember(s, {"a": True, "b": False}, {"a": (50, t - 900_000), "b": (1, t - 10)},
                              NOW_MIN + 1, t + 60_000)
    assert growth == 0 and age == 60_010
    # unmuted: its remembered figures count at once (no wait for its page)
    _, age, growth = remember(s, {"a": False, "b": False}, {}, NOW_MIN + 2, t + 120_000)
    assert age == 1_020_000 and growth == 45.0


def test_the_age_is_of_every_row_as_last_read():
    t = NOW_MIN * 60_000
    s, age, _ = remember(None, {"a": False, "b": False}, {"a": (1, t - 5_000)}, NOW_MIN, t)
    assert age == 5_000
    s, age, _ = remember(s, {"a": False, "b": False}, {"b": (0, None)}, NOW_MIN + 1, t + 60_000)
    assert age == 65_000  # a not read this minute: its oldest message as last seen, older now


def test_stale_and_future_rows_are_forgotten():
    t = NOW_MIN * 60_000
    prev = state({"a": [3, t - 1_000, NOW_MIN - 8, 2.0], "b": [3, t - 1_000, NOW_MIN + 5, 2.0],
                  "c": [3, t - 1_000, NOW_MIN - 7, 2.0]})
    s, age, growth = remember(prev, {"a": False, "b": False, "c": False}, {}, NOW_MIN, t, pages=1)
    # pages 1: a row unread for more than 2 + 5 minutes is forgotten; b is from the future
    assert set(s["rows"]) == {"c"} and growth == 2.0 and age == 1_000


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
        s, age, growth = remember(prev, {"a": False}, {"a": (1, None)}, NOW_MIN, NOW_MIN * 60_000)
        assert s["rows"]["a"][:3] == [1, None, NOW_MIN] and age == 0
        assert growth in (None, s["rows"]["a"][3])


@given(st.lists(st.dictionaries(st.sampled_from("abcdef"), st.tuples(st.integers(0, 10**6), st.booleans()),
                                max_size=6), min_size=1, max_size=8))
@settings(max_examples=200, deadline=None)
def test_every_row_read_every_minute_is_the_totals_growth(minutes):
    """The reference: when a run reads every row (one page), the growth is the minute's change of the
    summed backlog over the unmuted rows that exist in both minutes."""
    s = None
    prev: dict = {}
    for i, rows in enumerate(minutes):
        live = {k: muted for k, (_, muted) in rows.items()}
        s, _, growth = remember(s, live, {k: (b, None) for k, (b, _) in rows.items()}, NOW_MIN + i, 0)
        both = [k for k in rows if k in prev and not rows[k][1]]
        if both:
            assert growth == sum(rows[k][0] - prev[k] for k in both)
        else:
            assert growth is None
        prev = {k: b for k, (b, _) in rows.items()}
