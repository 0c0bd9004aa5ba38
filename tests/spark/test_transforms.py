"""The data-lake transforms on small DataFrames (chispa), and the jobs on a local lake folder built
by the archiver's own code from the events/ stream samples."""
from __future__ import annotations

import json
from pathlib import Path

from chispa import assert_df_equality
from pyspark.sql import functions as F

from lakeq.lake import archive as lake
from lakeq.rebalance import state as G
from lakeq_lake import plans, schemas
from lakeq_lake import transforms as T
from lakeq_lake.jobs import run_backlog, summary_key
from lakeq_lake.store import Lake

ROOT = Path(__file__).resolve().parents[2]
H = 3_600_000
T0 = 1_767_225_600_000  # 2026-01-01T00:00Z


def msg(topic, queue, offset, at, seq="s", inc=None):
    return (topic, queue, offset, f"id{offset}", None, 1, [], {}, at, seq, inc)


def off(group, topic, queue, committed, at, seq, client=None, inc=None):
    return (group, client, None, topic, queue, committed, None, 0, 0, 0, "MODIFY", "commit", at, seq, inc)


def test_backlog_over_time_with_duplicates(spark):
    m = [msg("t", 0, i, T0 + 10 + i) for i in range(4)] + [msg("t", 0, 4, T0 + H + 5), msg("t", 1, 0, T0 + 20)]
    m += m[:2]  # a redelivered batch
    o = [off("g", "t", 0, 0, T0 + 100, "1"), off("g", "t", 0, 2, T0 + 200, "2"), off("g", "t", 0, 4, T0 + H + 50, "3")]
    o += o[1:2]
    msgs = spark.createDataFrame(m, schemas.MESSAGES)
    offs = spark.createDataFrame(o, schemas.OFFSETS)
    as_of = T0 + H + 1000
    report = T.backlog(msgs, offs, as_of, H).cache()  # computed once for both checks below
    got = report.select(
        "group", "topic", "queue", "bucket_start", "at", "produced", "committed", "backlog",
        "produced_in_bucket", "consumed_in_bucket", "oldest_unconsumed_age_ms")
    expected = spark.createDataFrame([
        ("g", "t", 0, T0, T0 + H, 4, 2, 2, 4, 2, H - 12),          # head = offset 2, produced at T0+12
        ("g", "t", 0, T0 + H, as_of, 5, 4, 1, 1, 2, as_of - (T0 + H + 5)),
        ("g", "t", 1, T0, T0 + H, 1, 0, 1, 1, 0, H - 20),          # never pulled: committed 0
        ("g", "t", 1, T0 + H, as_of, 1, 0, 1, 0, 0, as_of - (T0 + 20)),
    ], got.schema)
    assert_df_equality(got, expected, ignore_row_order=True, ignore_nullable=True)
    latest = T.latest(report).orderBy("queue").collect()
    report.unpersist()
    assert [(r["queue"], r["produced"], r["committed"], r["backlog"]) for r in latest] == [(0, 5, 4, 1), (1, 1, 0, 1)]
    assert latest[0]["consumption_rate"] == 2 / 1.0  # 2 messages in the last 1 s bucket


def test_broadcasting_clients_are_separate_and_subscriptions_ignored(spark):
    msgs = spark.createDataFrame([msg("t", 0, i, T0 + i) for i in range(3)], schemas.MESSAGES)
    offs = spark.createDataFrame([
        off("b", "t", 0, 1, T0 + 10, "1", client="c1"), off("b", "t", 0, 3, T0 + 11, "2", client="c2"),
        (None, None, "sub", None, 0, 2, None, 0, 0, 0, "MODIFY", "commit", T0 + 12, "3", None),
    ], schemas.OFFSETS)
    got = T.latest(T.backlog(msgs, offs, T0 + 100, H)).select("group", "client_id", "committed", "backlog")
    expected = spark.createDataFrame([("b", "c1", 1, 2), ("b", "c2", 3, 0)], got.schema)
    assert_df_equality(got, expected, ignore_row_order=True, ignore_nullable=True)


def test_queue_weights_and_plan_balance_by_load(spark):
    # queue 0 is hot (lots of traffic and a backlog), the other three are quiet
    m = [msg("t", 0, i, T0 + i) for i in range(60)] + [msg("t", q, 0, T0 + 1) for q in (1, 2, 3)]
    o = [off("g", "t", 0, 30, T0 + 100, "1")] + [off("g", "t", q, 1, T0 + 100, f"q{q}") for q in (1, 2, 3)]
    msgs, offs = spark.createDataFrame(m, schemas.MESSAGES), spark.createDataFrame(o, schemas.OFFSETS)
    as_of = T0 + 1000
    w = T.queue_weights(msgs, T.latest(T.backlog(msgs, offs, as_of, H)), as_of, lookback_ms=H, horizon_ms=H)
    rows = {r["queue"]: r for r in w.collect()}
    assert rows[0]["backlog"] == 30 and rows[1]["backlog"] == 0
    assert abs(rows[0]["weight"] - (60 + 30) / 3600) < 1e-12 and abs(rows[1]["weight"] - 1 / 3600) < 1e-12
    weights = {("t", q): r["weight"] for q, r in rows.items()}
    counts = {"t": 4}
    st = G.new_group("g")
    for i, mid in enumerate(["m1", "m2", "m3"]):
        st, _ = G.join(st, mid, ["t"], [], 45_000, T0 + i, counts)
    p = plans.plan(st, weights, counts)
    assert p["valid"] and sorted(q for qs in p["assignment"].values() for q in map(tuple, qs)) == [("t", i) for i in range(4)]
    assert p["expected_imbalance"] <= p["count_based_imbalance"]
    hot_owner = [m for m, qs in p["assignment"].items() if ["t", 0] in qs][0]
    assert p["assignment"][hot_owner] == [["t", 0]]  # the hot queue gets a member to itself
    # the published plan is applied by the group's next rebalance, every queue once
    assignment = {k: [tuple(q) for q in v] for k, v in p["assignment"].items()}
    st2, _ = G.set_plan(st, T0 + 5000, assignment=assignment, weights=dict((tuple(x[:2]), x[2]) for x in p["weights"]),
                        expected_imbalance=p["expected_imbalance"])
    st3, _ = G.force_rebalance(st2, T0 + 6000, counts)
    assert {m: sorted(x.target) for m, x in st3.members.items()} == {m: sorted(q) for m, q in assignment.items()}


def test_backlog_job_on_a_lake_folder_from_stream_samples(spark, tmp_path):
    arn_kinds = {"lakeq-local-segments": "messages", "lakeq-local-offsets": "offsets", "lakeq-local-groups": "members"}
    for name in ("stream_segments.json", "stream_offsets.json", "stream_groups.json"):
        ev = json.loads((ROOT / "events" / name).read_text())
        for key, blob in lake.batch_objects(ev["Records"], arn_kinds).items():
            (tmp_path / key).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / key).write_bytes(blob)
    lk = Lake(str(tmp_path))
    assert lk.read_kind(spark, "members").count() == 3
    assert set(lk.read_kind(spark, "messages").columns) >= {"dt", "hour", "topic"}  # partition discovery
    out = run_backlog(spark, lk, as_of_ms=T0 + H + 60_000, log=lambda *_: None)
    s = json.loads((tmp_path / summary_key("risk", "quotes")).read_text())
    assert s["group"] == "risk" and s["computed_at"] == out["computed_at"]
    assert [(q["queue"], q["produced"], q["committed"], q["backlog"]) for q in s["queues"]] == [(0, 5, 3, 2)]
    assert s["queues"][0]["at"] == T0 + H + 60_000
    # backlog over time (the console's chart): one point per bucket, oldest first, newest = the summary
    assert len(s["series"]) == 2 and s["series"][-1] == {"at": T0 + H + 60_000, "backlog": 2}
    assert s["series"][0]["at"] < s["series"][1]["at"]
    bc = json.loads((tmp_path / summary_key("bc", "quotes")).read_text())
    assert bc["queues"][0]["client_id"] == "c1" and bc["queues"][0]["backlog"] == 5
    hist = spark.read.parquet(str(tmp_path / "reports" / "backlog" / "history"))
    assert hist.where(F.col("group") == "risk").count() == 2  # two hourly buckets


def test_offset_changes_ordered_by_numeric_stream_sequence_number(spark):
    """Issue 8 (f): a queue's committed offset is the one of the change with the highest stream
    sequence number (numeric: "100" > "99"), whatever the writers' clocks said (``at``)."""
    m = [msg(t, 0, i, T0 + i) for t in ("a", "b", "c") for i in range(10)]
    o = [
        # a: same clock reading, sequence numbers of different lengths ("99" < "100" numerically)
        off("g", "a", 0, 2, T0 + 100, "99"), off("g", "a", 0, 5, T0 + 100, "100"),
        # b: the later change (higher seq) was stamped by a host whose clock is behind
        off("g", "b", 0, 5, T0 + 160, "000000000000000000100"), off("g", "b", 0, 7, T0 + 150, "000000000000000000101"),
        # c: skew across buckets: the newest change (seq 2000) landed in the earlier bucket
        off("g", "c", 0, 9, T0 + H - 5, "2000"), off("g", "c", 0, 6, T0 + H + 5, "999"),
    ]
    msgs, offs = spark.createDataFrame(m, schemas.MESSAGES), spark.createDataFrame(o, schemas.OFFSETS)
    as_of = T0 + H + 1000
    got = {(r["topic"], r["bucket_start"]): r["committed"]
           for r in T.backlog(msgs, offs, as_of, H).where(F.col("queue") == 0).collect()}
    assert got[("a", T0)] == 5 and got[("a", T0 + H)] == 5
    assert got[("b", T0)] == 7 and got[("b", T0 + H)] == 7
    assert got[("c", T0)] == 9 and got[("c", T0 + H)] == 9


def test_a_topic_made_again_is_reported_as_its_new_incarnation(spark):
    """SQS DeleteQueue then CreateQueue: the new incarnation (``inc`` 1) restarts every queue at
    offset 0. Its messages are not duplicates of the old log's (same ``(topic, queue, offset)``), and
    the backlog and the weights are the new log's alone: the old log's end (10) and its group's
    commits are not the new topic's. Rows of incarnation 0 carry no ``inc`` (archived before it)."""
    old = [msg("t", 0, i, T0 + i, seq=f"o{i}") for i in range(10)]
    new = [msg("t", 0, i, T0 + 1000 + i, seq=f"n{i}", inc=1) for i in range(3)]
    o = [off("g", "t", 0, 10, T0 + 500, "10"), off("g", "t", 0, 1, T0 + 2000, "20", inc=1)]
    msgs, offs = spark.createDataFrame(old + new, schemas.MESSAGES), spark.createDataFrame(o, schemas.OFFSETS)
    assert T.clean_messages(msgs).count() == 13  # none of the new log's rows taken for a duplicate
    as_of = T0 + 3000
    latest = T.latest(T.backlog(msgs, offs, as_of, H)).cache()  # computed once for both checks below
    (r,) = latest.collect()
    assert (r["produced"], r["committed"], r["backlog"], r["produced_in_bucket"]) == (3, 1, 2, 3)
    assert r["oldest_unconsumed_age_ms"] == as_of - (T0 + 1001)  # the new log's offset 1, not the old one's
    (w,) = T.queue_weights(msgs, latest, as_of, lookback_ms=H).collect()
    latest.unpersist()
    assert w["backlog"] == 2 and abs(w["rate"] - 3 / 3600) < 1e-12  # the new log's 3 messages an hour
