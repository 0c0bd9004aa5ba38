"""infra/local/emf.py: the local stack keeps its functions' EMF lines as CloudWatch would (per
series, per minute, the last hour) and a worker's stdout tee picks them out of what it prints."""
from __future__ import annotations

import io
import json

from infra.local import emf, interceptor

T0 = 1_800_000_000_000 // 60_000 * 60_000


def doc(ts, **values):
    directive = {"Namespace": "lakeq", "Dimensions": [["Topic", "service"]],
                 "Metrics": [{"Name": k, "Unit": "Count"} for k in values]}
    return {"_aws": {"Timestamp": ts, "CloudWatchMetrics": [directive]}, "Topic": "t", "service": "lakeq", **values}


def test_points_per_minute_sum_count_max_last_and_only_the_last_hour():
    c = emf.Collected()
    c.add(doc(T0 + 1, A=[2.0, 5.0]))
    c.add(doc(T0 + 59_999, A=1))
    c.add(doc(T0 + 60_000, A=7, B=3))
    (a,) = c.series("A")
    assert a["dimensions"] == {"Topic": "t", "service": "lakeq"} and a["unit"] == "Count"
    assert a["points"] == [{"minute": T0, "sum": 8.0, "count": 3, "max": 5.0, "last": 1.0},
                           {"minute": T0 + 60_000, "sum": 7.0, "count": 1, "max": 7.0, "last": 7.0}]
    assert [s["name"] for s in c.series()] == ["A", "B"] and c.series(namespace="other") == []
    c.add(doc(T0 + emf.KEEP_MINUTES * 60_000, A=1))  # an hour after the first minute: it goes
    assert [p["minute"] for p in c.series("A")[0]["points"]] == [T0 + 60_000, T0 + emf.KEEP_MINUTES * 60_000]


def test_the_tee_writes_through_and_keeps_only_emf_lines():
    out = io.StringIO()
    tee = emf.Tee(out)
    line = json.dumps(doc(T0, A=1))
    tee.write('{"level":"INFO","message":"x"}\n' + line[:10])
    tee.write(line[10:] + "\nplain\n")
    assert out.getvalue() == '{"level":"INFO","message":"x"}\n' + line + "\nplain\n"
    assert tee.take() == [line] and tee.take() == []
    c = emf.Collected()
    assert c.add_text('noise\n{"not": "emf", "_aws": 1}\n' + line) == 1


def test_metric_data_is_what_cloudwatch_makes_of_a_document_and_the_sink_gets_each_one():
    d = doc(T0 + 5, A=[2.0, 5.0], B=1)
    d["_aws"]["CloudWatchMetrics"][0]["Metrics"][1]["Unit"] = "Milliseconds"
    ((ns, data),) = emf.metric_data(d)
    assert ns == "lakeq" and [x["MetricName"] for x in data] == ["A", "B"]
    assert data[0]["Dimensions"] == [{"Name": "Topic", "Value": "t"}, {"Name": "service", "Value": "lakeq"}]
    assert data[0]["Values"] == [2.0, 5.0] and data[1]["Values"] == [1.0] and data[1]["Unit"] == "Milliseconds"
    assert round(data[0]["Timestamp"].timestamp() * 1000) == T0 + 5  # the document's timestamp
    assert emf.metric_data(doc(T0, A="x")) == []  # no number, no datum

    class Fake:
        def __init__(self):
            self.calls = []

        def put_metric_data(self, **kw):
            self.calls.append(kw)
            self.as_function = interceptor._function.get()

    fake = Fake()
    c = emf.Collected(sink=emf.CloudWatchSink(fake))
    with interceptor.acting_as("ProduceFunction"):  # a worker's reply is collected in the invoking thread
        c.add_text(json.dumps(doc(T0, A=3)) + "\nnot emf\n")
    assert fake.as_function is None  # put as CloudWatch Logs would, not with the function's role
    assert [(k["Namespace"], k["MetricData"][0]["Values"]) for k in fake.calls] == [("lakeq", [3.0])]
    assert c.series("A")[0]["points"][0]["sum"] == 3.0  # still served at /_local/metrics too
