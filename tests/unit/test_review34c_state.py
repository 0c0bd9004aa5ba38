"""Review 34c (adversarial) of the metrics function's scheduling and growth figure after 2c811d8
(:func:`lakeq.console.gauges.schedule`, :func:`lakeq.console.gauges.remember`): each strict xfail
fails on the code it was written against."""
from __future__ import annotations

from types import SimpleNamespace as N

import pytest

from lakeq.console.gauges import MAX_ROWS, remember, row_key, schedule

NOW_MIN = 30_000_000
MINUTES = 15  # template.yaml BacklogGrowingMinutes' default


def test_one_increase_after_a_long_gap_is_not_fifteen_minutes_of_growth():
    s, _, g = remember(None, {"a": False}, {"a": (10, None)}, NOW_MIN, NOW_MIN * 60_000)
    # the function does not run for an hour (a deploy gone wrong, throttled, the clock stepped forward)
    s, _, g = remember(s, {"a": False}, {"a": (11, None)}, NOW_MIN + 60, (NOW_MIN + 60) * 60_000)
    assert g < MINUTES, g  # one read found one more message: BacklogGrowingAlarm fires at once


def test_a_single_increase_in_a_paged_deployment_does_not_fire_the_growth_alarm():
    pages = 8  # 3,501-4,000 rows: each row read every 8 minutes
    keys = {"a": False, "b": False}
    s, _, _ = remember(None, keys, {"a": (10, None)}, NOW_MIN, 0, pages)
    figures = []
    for m in range(1, pages):
        s, _, g = remember(s, keys, {"b": (0, None)}, NOW_MIN + m, 0, pages)
    s, _, g = remember(s, keys, {"a": (11, None)}, NOW_MIN + pages, 0, pages)  # one more message: one increase
    figures.append(g)
    for m in range(pages + 1, 2 * pages):  # a's next read is at 2 * pages
        s, _, g = remember(s, keys, {"b": (0, None)}, NOW_MIN + m, 0, pages)
        figures.append(g)
    assert max(figures) < MINUTES, figures


def test_a_second_read_in_a_minute_that_finds_less_ends_the_growing_run():
    """Review 34c: a second read in the same minute that found the backlog lower kept the row's growing
    run (since = the earlier read's) with its lower backlog as the reference: 10, 20, 5 (same minute), 6
    counted 2 minutes of growth at every read."""
    keys = {"a": False}
    s, _, _ = remember(None, keys, {"a": (10, None)}, NOW_MIN, 0)
    s, _, g = remember(s, keys, {"a": (20, None)}, NOW_MIN + 1, 0)
    s, _, g = remember(s, keys, {"a": (30, None)}, NOW_MIN + 2, 0)
    assert g == 2  # two growing reads since minute 0
    s, _, g = remember(s, keys, {"a": (5, None)}, NOW_MIN + 2, 0)  # a late (throttled) run in the same minute
    assert g == 0
    s, _, g = remember(s, keys, {"a": (6, None)}, NOW_MIN + 3, 0)
    s, _, g = remember(s, keys, {"a": (7, None)}, NOW_MIN + 4, 0)
    assert g == 2, g  # grew 5 -> 6 -> 7 since minute 2; 30 -> 5 was no growth


def _starve(churners: int, others: int, runs: int, max_rows: int = MAX_ROWS, per_churner: int = 100):
    """Each minute, ``churners`` clients delete their ``per_churner`` subscriptions to one topic and create
    as many new ones (new ids: rows never read); ``others`` ordinary one-row units. Returns how many
    minutes each ordinary row went unread at most."""
    ordinary = [[("pair", N(name=f"t{i:05d}"), N(name="g"))] for i in range(others)]
    state = None
    last = {i: -1 for i in range(others)}
    worst = 0
    for m in range(runs):
        churn = [[("sub", N(id=f"c{c}-{m}-{j}"), N(name=f"c{c}")) for j in range(per_churner)]
                 for c in range(churners)]
        units = churn + ordinary
        read = schedule(units, state, max_rows, m) if state is not None else units[:max_rows]
        seen = {}
        for u in read:
            for r in u:
                seen[row_key(*r)] = (0, None)
                if r[0] == "pair":
                    last[int(r[1].name[1:])] = m
        state, _, _ = remember(state, {row_key(*r): False for u in units for r in u}, seen, m, 0)
        worst = max(worst, max(m - v for v in last.values()))
    return worst


def test_one_churning_client_slows_the_others_a_little():
    """Control: one client churning its 100 subscriptions every minute takes 100 of the 500 rows a run."""
    pages = -(-1_100 // MAX_ROWS)
    assert _starve(1, 1_000, 12) <= 2 * pages + 5


def test_churned_new_subscriptions_do_not_starve_the_other_rows():
    pages = -(-1_500 // MAX_ROWS)
    worst = _starve(5, 1_000, 12)
    assert worst <= 2 * pages + 5, worst  # remember's own staleness bound


@pytest.mark.xfail(strict=True, reason="review34c: a group falling behind in a sawtooth (+10, +10, -5 a minute: "
                   "its backlog 0 -> 300 in an hour) never grows at 15 reads in a row, so AlarmedBacklogGrowingMinutes "
                   "stays <= 2; only the age alarm can catch it (and not at all for a dead-letter topic's reader)")
def test_a_backlog_growing_in_a_sawtooth_fires_the_growth_alarm():
    keys = {"a": False}
    s, backlog, figures = None, 0, []
    for m in range(60):
        s, _, g = remember(s, keys, {"a": (backlog, None)}, NOW_MIN + m, 0)
        figures.append(g)
        backlog += -5 if m % 3 == 2 else 10
    assert backlog >= 300 and max(figures) >= MINUTES, (backlog, max(figures))
