"""Issue 34: the embedded-metric-format documents lakeq prints (lakeq.common.obs.emit, and the shared
Metrics' flush) validate against the format's specification (tests/emf.py), and the checker itself
rejects what CloudWatch would drop."""
from __future__ import annotations

import copy
import json

import pytest
from aws_lambda_powertools.metrics import MetricUnit

from lakeq.common import metric_names as M
from lakeq.common import obs
from tests.emf import documents, problems

SHAPES = [{}, {"Topic": "quotes/sh", "Group": "risk"}, {"Subscription": "s-1"}, {"Topic": "quotes"},
          {"Endpoint": "group:risk"}, {"Redrive": "r1"}, {"Replay": "p1"}]


@pytest.mark.parametrize("dims", SHAPES)
def test_every_table_metric_under_every_dimension_shape_is_valid(dims, capsys, monkeypatch):
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "lakeq")
    monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", "lakeq")
    names = sorted(M.ALL)
    for i in range(0, len(names), 8):  # a document holds what one row has (at most 8 in the gauges)
        doc = obs.emit(dims, {n: 3 for n in names[i:i + 8]}, timestamp_ms=1_700_000_000_000)
        assert problems(doc) == []
        (printed,) = documents(capsys.readouterr().out)
        assert printed == json.loads(json.dumps(doc))
        (d,) = doc["_aws"]["CloudWatchMetrics"]
        assert d["Namespace"] == "lakeq" and d["Dimensions"] == [[*dims, "service"]]
        assert {m["Name"]: m["Unit"] for m in d["Metrics"]} == {n: M.UNITS[n] for n in names[i:i + 8]}


def test_the_shared_metrics_flush_is_valid(capsys, monkeypatch):
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "lakeq")
    obs.metrics.add_metric(name=M.SENT, unit=MetricUnit.Count, value=2)
    obs.metrics.flush_metrics()
    (doc,) = documents(capsys.readouterr().out)
    assert problems(doc) == [] and doc[M.SENT] == [2.0]


def test_count_rows_one_row_rides_the_invocations_document_several_rows_get_their_own(capsys, monkeypatch):
    """Issue 34 item 1: a request's per-row counters. One row: the shared document gets the row's
    dimension set besides ``service`` (no second line); several: one document a row; zeros dropped."""
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "lakeq")
    monkeypatch.setattr(obs.metrics, "service", "lakeq")
    obs.metrics.add_metric(name=M.RECEIVED, unit=MetricUnit.Count, value=3)
    obs.count_rows({(("Topic", "quotes"), ("Group", "risk")): {M.RECEIVED: 3}})
    obs.metrics.flush_metrics()
    (doc,) = documents(capsys.readouterr().out)
    assert problems(doc) == [] and doc[M.RECEIVED] == [3.0]
    assert doc["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [["service"], ["Topic", "Group", "service"]]
    assert (doc["Topic"], doc["Group"]) == ("quotes", "risk")

    obs.count_rows({(("Topic", "a"), ("Group", "g")): {M.ACKS: 1, M.ACCEPTED: 0},
                    (("Subscription", "s-1"),): {M.ACKS: 2}, (("Topic", "b"), ("Group", "g")): {M.ACKS: 0}})
    docs = documents(capsys.readouterr().out)
    assert [problems(d) for d in docs] == [[], []]
    shapes = [(d["_aws"]["CloudWatchMetrics"][0]["Dimensions"],
               [m["Name"] for m in d["_aws"]["CloudWatchMetrics"][0]["Metrics"]]) for d in docs]
    assert shapes == [([["Topic", "Group", "service"]], [M.ACKS]), ([["Subscription", "service"]], [M.ACKS])]
    assert obs.metrics.provider.dimension_sets == []  # several rows leave the invocation's document alone

    obs.count_rows({(("Topic", "a"),): {M.SENT: 0}})  # an empty row: nothing printed, nothing added
    assert capsys.readouterr().out == "" and obs.metrics.provider.dimension_sets == []
    monkeypatch.setenv("LAKEQ_METRICS_DETAIL", "totals")  # MetricsDetail totals: a fixed metric count
    obs.count_rows({(("Topic", "a"),): {M.SENT: 1}, (("Topic", "b"),): {M.SENT: 1}})
    obs.count_rows({(("Topic", "a"),): {M.SENT: 1}})
    assert capsys.readouterr().out == "" and obs.metrics.provider.dimension_sets == []


def test_two_invocations_at_once_each_flush_their_own_metrics(capsys, monkeypatch):
    """Two handlers decorated with ``metrics.log_metrics`` run at once in two threads (as the
    in-process tests run requests), each adding its metric and its row before either flushes
    (flake35). Each prints one document with its own value and dimensions. Was: powertools' one
    metric set per process, so the first flush printed both values and the second found the set
    emptied (a warning, or ``SchemaValidationError`` out of the handler when it was emptied between
    its check and its serialisation: a test thread dead, seen under sys.setswitchinterval(1e-6))."""
    import threading
    import warnings

    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "lakeq")
    monkeypatch.setattr(obs.metrics, "service", "lakeq")
    both_added = threading.Barrier(2, timeout=60)
    errors: list = []

    @obs.metrics.log_metrics(raise_on_empty_metrics=False)
    def handler(event, context):
        obs.metrics.add_metric(name=M.SENT, unit=MetricUnit.Count, value=event)
        obs.count_rows({(("Topic", f"t{event}"),): {M.SENT: event}})
        both_added.wait()

    def run(i: int) -> None:
        try:
            handler(i, None)
        except BaseException as e:  # noqa: BLE001 (reported below)
            errors.append(repr(e))
    threads = [threading.Thread(target=run, args=(i,)) for i in (1, 2)]
    with warnings.catch_warnings(record=True) as caught:  # (this thread's: the filters are the process's)
        warnings.simplefilter("always")
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    assert errors == [] and [str(w.message) for w in caught] == []  # "No application metrics to publish"
    docs = documents(capsys.readouterr().out)
    assert [problems(d) for d in docs] == [[], []]
    assert sorted((d[M.SENT], d["Topic"]) for d in docs) == [([1.0], "t1"), ([2.0], "t2")], docs


GOOD = {"_aws": {"Timestamp": 1_700_000_000_000,
                 "CloudWatchMetrics": [{"Namespace": "lakeq", "Dimensions": [["Topic", "service"]],
                                        "Metrics": [{"Name": "A", "Unit": "Count"}]}]},
        "Topic": "t", "service": "lakeq", "A": [1.0]}


def broken(change):
    doc = copy.deepcopy(GOOD)
    change(doc)
    return doc


def many_dimensions(d, n):
    d["_aws"]["CloudWatchMetrics"][0]["Dimensions"] = [[f"d{i}" for i in range(n)]]
    d.update({f"d{i}": "v" for i in range(n)})


def many_metrics(d, n):
    d["_aws"]["CloudWatchMetrics"][0]["Metrics"] = [{"Name": f"m{i}", "Unit": "Count"} for i in range(n)]
    d.update({f"m{i}": 1 for i in range(n)})


def test_the_limits_themselves_pass():
    assert problems(broken(lambda d: many_dimensions(d, 30))) == []
    assert problems(broken(lambda d: many_metrics(d, 100))) == []


@pytest.mark.parametrize("change", [
    lambda d: d.pop("_aws"),
    lambda d: d["_aws"].pop("Timestamp"),
    lambda d: d["_aws"]["CloudWatchMetrics"][0].pop("Namespace"),
    lambda d: d.pop("Topic"),                                     # a dimension without its value
    lambda d: d.update(Topic=7),                                  # a dimension value that is not a string
    lambda d: d.pop("A"),                                         # a metric without its value
    lambda d: d.update(A="1"),                                    # a value that is not a number
    lambda d: d["_aws"]["CloudWatchMetrics"][0]["Metrics"][0].update(Unit="Items"),
    lambda d: many_dimensions(d, 31),
    lambda d: many_metrics(d, 101),
])
def test_the_checker_rejects_what_cloudwatch_drops(change):
    assert problems(GOOD) == []
    assert problems(broken(change))
