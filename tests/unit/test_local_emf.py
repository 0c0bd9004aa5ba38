"""infra/local/emf.py: the local stack keeps its functions' EMF lines as CloudWatch would (per
series, per minute, the last hour) and a worker's stdout tee picks them out of what it prints."""
from __future__ import annotations

import io
import json

from infra.local import emf

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
