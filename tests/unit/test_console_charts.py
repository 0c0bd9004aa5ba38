"""lakeq.console.charts: the console metrics route's input, window, queries and series shaping
(pure parts; the route on moto with the template's IAM: tests/integration/test_console_routes.py)."""
from __future__ import annotations

import pytest

from lakeq.common.errors import BadRequest
from lakeq.console import charts

M0 = 1_800_000_000_000 // 60_000 * 60_000


def test_parse_takes_topic_and_group_together_or_neither_and_nothing_else():
    assert charts.parse({}) == (None, None)
    assert charts.parse({"topic": "quotes/sh", "group": "risk"}) == ("quotes/sh", "risk")
    for bad in ({"topic": "quotes"}, {"group": "risk"}, {"topic": "quotes", "group": "risk", "period": "1"},
                {"from": "0"}, {"topic": "bad name", "group": "risk"}, {"topic": "quotes", "group": "a/b"},
                {"topic": "", "group": ""}, {"topic": "q" * 1000, "group": "risk"}):
        with pytest.raises(BadRequest):
            charts.parse(bad)


def test_window_is_the_last_hour_of_whole_minutes_and_the_current_one():
    start, end = charts.window(M0 + 12_345)
    assert end == M0 + 60_000 and start == M0 - 60 * 60_000 and (end - start) // 60_000 == 61
    assert charts.window(M0) == (start, end)


def test_queries_one_call_three_series_fixed_period_per_topic_and_group(monkeypatch):
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "ns")
    monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", "svc")
    qs = {q["Id"]: q["MetricStat"] for q in charts.queries("quotes/sh", "risk")}
    assert set(qs) == {"produced", "consumed", "backlog"} and {s["Period"] for s in qs.values()} == {60}
    assert qs["produced"]["Metric"] == {"Namespace": "ns", "MetricName": "NumberOfMessagesSent",
                                        "Dimensions": [{"Name": "Topic", "Value": "quotes/sh"},
                                                       {"Name": "service", "Value": "svc"}]}
    assert qs["produced"]["Stat"] == qs["consumed"]["Stat"] == "Sum" and qs["backlog"]["Stat"] == "Maximum"
    assert qs["consumed"]["Metric"]["MetricName"] == "NumberOfAcks"
    assert qs["backlog"]["Metric"]["MetricName"] == "ApproximateNumberOfMessagesBacklog"
    assert qs["backlog"]["Metric"]["Dimensions"] == qs["consumed"]["Metric"]["Dimensions"] == [
        {"Name": "Topic", "Value": "quotes/sh"}, {"Name": "Group", "Value": "risk"}, {"Name": "service", "Value": "svc"}]
    totals = {q["Id"]: q["MetricStat"] for q in charts.queries(None, None)}
    assert [totals[k]["Metric"]["Dimensions"] for k in ("produced", "consumed", "backlog")] == [
        [{"Name": "service", "Value": "svc"}]] * 3


def test_shape_one_point_per_minute_in_the_window_oldest_first():
    start, end = charts.window(M0)
    raw = {"produced": [(M0, 6.0), (M0 - 120_000, 2.5), (start - 60_000, 9.0), (end, 1.0)],
           "backlog": [(M0 - 60_000 + 30_000, 4.0)]}
    out = charts.shape(raw, start, end)
    assert out["produced"] == [{"t": M0 - 120_000, "v": 2.5}, {"t": M0, "v": 6}]  # outside the window: dropped
    assert out["backlog"] == [{"t": M0 - 60_000, "v": 4}] and out["consumed"] == []
