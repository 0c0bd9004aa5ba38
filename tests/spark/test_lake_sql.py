"""docs/guide-lake.md's Athena queries (issue 32, item 2), run as they are written there — the
``sql`` block of "The catalog", read from the doc, so doc and test cannot drift — through Spark SQL
over a small local lake compacted to Parquet, each table registered as template.yaml's Glue table
declares it (its columns and types, ``dt``/``hour`` or ``computed_at``), and each answer checked
against plain Python over the same rows: the rows generated (messages, offsets) or the report rows
the jobs wrote (backlog, plans). The lake has a redelivered batch (duplicate rows the queries must
not count twice), a day before the queried one, a second group and topic, dead-lettered copies in two
dead-letter topics (their ``dead_letter``: origin and cause), and a decoy plan run."""
from __future__ import annotations

import datetime as dt
import json
import random
import re
from pathlib import Path

from lakeq.lake import archive as lake
from lakeq.lake import compaction as C
from lakeq_lake import jobs
from lakeq_lake.compact import compact_kind
from lakeq_lake.store import Lake

ROOT = Path(__file__).resolve().parents[2]
H = 3_600_000
DAY0 = 1_796_515_200_000  # 2026-12-06T00:00Z: the doc's day
COMPUTED = 1_796_603_400_000  # the doc's computed_at (2026-12-07T00:30Z)
SEG = "arn:aws:dynamodb:us-east-1:1:table/lakeq-local-segments/stream/x"
OFF = "arn:aws:dynamodb:us-east-1:1:table/lakeq-local-offsets/stream/x"
QUIET = {"log": lambda *_: None}
# Athena's double-quoted names ("offset", "group", "at") are names in Spark only so
ANSI = {"spark.sql.ansi.enabled": "true", "spark.sql.ansi.doubleQuotedIdentifiers": "true"}


def doc_queries() -> list[str]:
    """The statements of the first ``sql`` block under "## The catalog" of docs/guide-lake.md."""
    text = (ROOT / "docs" / "guide-lake.md").read_text()
    section = text.split("## The catalog", 1)[1]
    block = re.search(r"```sql\n(.*?)```", section, re.S).group(1)
    return [q.strip() for q in block.split(";\n") if q.strip().rstrip(";").strip()
            and any(not ln.strip().startswith("--") for ln in q.strip().splitlines())]


def _rows(rng: random.Random):
    """Messages from 10 minutes before the doc's day to hour 03 (one every 40 s): topics quotes and
    other, keys order-42 / order-7 / none, a ``region`` property a string, a number or absent;
    groups risk and audit commit (and lock) now and then."""
    msgs, offs, offsets = [], [], {}
    for i in range(360):
        at = DAY0 - 600_000 + i * 40_000
        topic = rng.choice(["quotes", "quotes", "quotes", "other"])
        q = rng.randrange(3)
        off = offsets.get((topic, q), 0)
        offsets[(topic, q)] = off + 1
        props = {}
        r = rng.random()
        if r < 0.4:
            props["region"] = rng.choice(["eu", "us"])
        elif r < 0.5:
            props["region"] = 1
        props["n"] = i
        msgs.append({"topic": topic, "queue": q, "offset": off, "id": f"m{i}",
                     "key": rng.choice(["order-42", "order-7", None]), "size": 3, "tags": [],
                     "properties": props, "produced_at": at, "seq": str(1000 + i), "inc": 0, "body": f"b{i}"})
        if i % 6 == 1:  # a consumer dead-letters it: its copy in a dead-letter topic, with origin and cause
            dlt = rng.choice(["dlq", "dlq", "dlq-audit"])
            doff = offsets.get((dlt, 0), 0)
            offsets[(dlt, 0)] = doff + 1
            msgs.append({"topic": dlt, "queue": 0, "offset": doff, "id": f"dl-{i}", "key": None, "size": 3,
                         "tags": [], "properties": {}, "produced_at": at + 500, "seq": str(5000 + i), "inc": 0,
                         "body": f"b{i}",
                         "dead_letter": {"topic": topic, "queue": q, "offset": off, "id": f"m{i}", "group": "risk",
                                         "deliveries": rng.randrange(1, 4),
                                         "reason": rng.choice(["rejected", "max_deliveries"]), "at": at + 500}})
        if i % 5 == 2:
            group = rng.choice(["risk", "risk", "audit"])
            change = rng.choice(["commit", "commit", "lock"])
            offs.append({"group": group, "client_id": None, "subscription": None, "topic": topic, "queue": q,
                         "committed_offset": off, "prev_committed_offset": None, "lock_ts": 0, "lock_until": 0,
                         "last_consumed_at": at, "event": "MODIFY", "change": change, "at": at + 1,
                         "seq": str(1000 + i), "inc": 0})
    return msgs, offs


def _write(root: Path, msgs, offs, suffix: str = "") -> None:
    for kind, arn, rows in (("messages", SEG, [{k: v for k, v in r.items() if k != "body"} for r in msgs]),
                            ("bodies", SEG, [lake.body_row(r, r["body"]) for r in msgs]),
                            ("offsets", OFF, offs)):
        for i in range(0, len(rows), 100):
            for key, blob in lake.objects(kind, arn + suffix, rows[i:i + 100]).items():
                (root / key).parent.mkdir(parents=True, exist_ok=True)
                (root / key).write_bytes(blob)


def _register(spark, df, template, logical_id: str) -> None:
    """``df`` as a temporary view named as template.yaml's Glue table ``logical_id``, with exactly
    its columns and types (partition keys last)."""
    from pyspark.sql import functions as F

    t = template["Resources"][logical_id]["Properties"]["TableInput"]
    name = t["Name"]
    columns = [(c["Name"], c["Type"]) for c in t["StorageDescriptor"]["Columns"] + t.get("PartitionKeys", [])]
    assert {c for c, _ in columns} <= set(df.columns), (name, df.columns)
    df.select(*[F.col(f"`{c}`").cast(t).alias(c) for c, t in columns]).createOrReplaceTempView(name)


def _json_extract_scalar_fn():
    """Athena's ``json_extract_scalar`` for a ``$.name`` path: a scalar as text, else null (made
    here so that Spark's workers get the function by value, not by this test module's name)."""
    def json_extract_scalar(text, path):
        import json as j

        if text is None or not path.startswith("$."):
            return None
        v = j.loads(text).get(path[2:])
        if isinstance(v, bool):
            return "true" if v else "false"
        return v if isinstance(v, str) else (j.dumps(v) if isinstance(v, (int, float)) else None)
    return json_extract_scalar


_json_extract_scalar = _json_extract_scalar_fn()


def _utc(ms_or_s: int) -> str:
    return dt.datetime.fromtimestamp(ms_or_s, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def test_the_guides_athena_queries_answer_as_plain_python(spark, template, tmp_path, monkeypatch):
    from lakeq_lake import transforms as T
    from lakeq_lake.jobs import PLANS_PREFIX

    root = tmp_path / "lake"
    msgs, offs = _rows(random.Random(32))
    _write(root, msgs, offs)
    _write(root, msgs[:60], offs[:10], suffix="-again")  # a redelivered stream batch: the same rows again
    lk = Lake(str(root))
    for kind in ("messages", "offsets"):  # hours up to 02 Parquet, 03 raw (bodies: no query reads them)
        compact_kind(spark, lk, kind, DAY0 + 3 * H + C.GRACE_MS, **QUIET)
    assert lk.manifests("messages") and lk.manifests("offsets")
    monkeypatch.setattr(jobs, "now_ms", lambda: COMPUTED)
    jobs.run_backlog(spark, lk, as_of_ms=DAY0 + 4 * H, **QUIET)
    m, o = lk.read_kind(spark, "messages"), lk.read_kind(spark, "offsets")
    weights = T.queue_weights(m, T.latest(T.backlog(m, o, DAY0 + 4 * H, H)), DAY0 + 4 * H, H, H).collect()
    wdf = spark.createDataFrame(weights)
    for at in (COMPUTED, COMPUTED - H):  # the doc's run and an older one the query must leave out
        wdf.coalesce(1).write.parquet(lk.path(f"{PLANS_PREFIX}/history/computed_at={at}"))

    for kind in ("messages", "offsets"):
        _register(spark, lk.read_kind(spark, kind, stored=True), template, f"Lake{kind.capitalize()}Table")
    _register(spark, spark.read.parquet(lk.path("reports/backlog/history")), template, "LakeBacklogTable")
    _register(spark, spark.read.parquet(lk.path(f"{PLANS_PREFIX}/history")), template, "LakePlansTable")
    spark.udf.register("json_extract_scalar", _json_extract_scalar_fn(), "string")

    # --- plain Python over the same rows
    day = "2026-12-06"
    by_msg = {(r["topic"], r["inc"], r["queue"], r["offset"]): r for r in msgs}
    want = {"messages": sorted(
        {(r["topic"], r["inc"], r["queue"], r["offset"], r["id"], _utc(r["produced_at"] // 1000),
          _json_extract_scalar(json.dumps(r["properties"]), "$.region"))
         for r in by_msg.values()
         if lake.partition(r["produced_at"])[0] == day and r["topic"] == "quotes" and r["key"] == "order-42"},
        key=lambda x: (x[2], x[1], x[3]))}
    commits: dict[tuple[int, str], list] = {}
    for r in offs:
        d, h = lake.partition(r["at"])
        if d == day and r["group"] == "risk" and r["change"] == "commit":
            commits.setdefault((int(h), r["topic"]), []).append(r)
    want["offsets"] = [(h, t, len({r["seq"] for r in rs}), max(r["committed_offset"] for r in rs))
                       for (h, t), rs in sorted(commits.items())]
    dead: dict[tuple, list] = {}
    for r in by_msg.values():
        if lake.partition(r["produced_at"])[0] == day and r.get("dead_letter"):
            d = r["dead_letter"]
            dead.setdefault((r["topic"], d["topic"], d["reason"]), []).append(r)
    want["dead_letters"] = [(t, o, c, len({r["id"] for r in rs}), max(r["dead_letter"]["deliveries"] for r in rs))
                            for (t, o, c), rs in sorted(dead.items())]
    hist = spark.read.parquet(lk.path(f"reports/backlog/history/computed_at={COMPUTED}")).collect()
    sums: dict[tuple[str, str], int] = {}
    for r in hist:
        if r["group"] == "risk" and DAY0 <= r["at"] <= DAY0 + 24 * H:
            k = (_utc(r["at"] // 1000), r["topic"])
            sums[k] = sums.get(k, 0) + r["backlog"]
    want["backlog"] = [(a, t, b) for (a, t), b in sorted(sums.items())]
    want["plans"] = [(r["topic"], r["queue"], r["rate"], r["backlog"], r["weight"])
                     for r in sorted((r for r in weights if r["group"] == "risk"),
                                     key=lambda r: (-r["weight"], r["topic"], r["queue"]))]
    # premises: each answer has rows, and the noise is there to be left out
    assert all(len(v) >= 2 for v in want.values()), {k: len(v) for k, v in want.items()}
    assert any(x[6] == "1" for x in want["messages"]) and any(x[6] is None for x in want["messages"])
    assert any(h == 3 for h, *_ in want["offsets"])  # the open hour (raw) too

    queries = doc_queries()
    tables = ["dead_letters" if "dead_letter IS NOT NULL" in q else re.search(r"FROM lakeq_lake\.(\w+)", q).group(1)
              for q in queries]  # (two queries read messages: the dead letters by cause is named so)
    assert sorted(tables) == sorted(want), tables  # every query of the doc is checked, each once
    old = {k: spark.conf.get(k, None) for k in ANSI}
    try:
        for k, v in ANSI.items():
            spark.conf.set(k, v)
        for q, table in zip(queries, tables):
            got = [tuple(r) for r in spark.sql(q.replace("lakeq_lake.", "")).collect()]
            assert got == want[table], (table, got[:5], want[table][:5])
    finally:
        for k, v in old.items():
            if v is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, v)
