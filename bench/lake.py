"""Benchmark: the backlog job's transform on synthetic log rows, on ``local[2]``.

Synthetic lake: one topic with 64 queues; ``n`` message rows over 24 hours; one offset row per 20
messages for each of 4 groups (commits trailing production), i.e. ``n/5`` offset rows. Rows are
generated inside Spark (``spark.range``) and cached, so the figure is the transform — aggregations,
the running windows over keys × hourly buckets, the ages join — executed in full (``noop`` sink),
not JSON parsing or S3 I/O. Prints rows/s per size and how time grows with the input.

``python bench/lake.py --quick`` (1M rows, < 1 min) · ``python bench/lake.py`` (1M and 10M) ·
``--side-by-side [--quick|--rows N] [--rounds R]``: :func:`backlog_before` (the transform before its
rewrite) and the current one alternating in one process. ``--from-lake [--quick|--rows N]``: the
same rows written as the archiver's raw lake (gzipped JSON Lines, ``raw/kind=messages|offsets/dt=/hour=/``,
kept under ``--dir``) and compacted (a hard-linked copy, by the compaction job's own code, its wall and
CPU seconds printed); then the job's read (``Lake.read_kind``) and the transform, over the raw lake
and over the compacted one, alternating in one process, with the cached-input figure beside them.
"""
from __future__ import annotations

import argparse
import os
import platform
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# bench/queue.py would shadow the standard library's ``queue`` (py4j imports it)
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]
for p in (ROOT / "glue_jobs", ROOT / "layers" / "core", ROOT / "layers" / "matcher"):
    sys.path.insert(0, str(p))

QUEUES, GROUPS, SPAN_MS, T0 = 64, 4, 24 * 3_600_000, 1_767_225_600_000


def synthetic(spark, n: int):
    from pyspark.sql import functions as F

    per_q = n // QUEUES
    msgs = (spark.range(n).select(
        F.lit("bench").alias("topic"), (F.col("id") % QUEUES).alias("queue"),
        F.floor(F.col("id") / QUEUES).cast("long").alias("offset"), F.col("id").cast("string").alias("id"),
        F.lit(None).cast("string").alias("key"), F.lit(100).cast("long").alias("size"),
        F.array().cast("array<string>").alias("tags"), F.create_map().cast("map<string,string>").alias("properties"),
        (F.lit(T0) + F.floor(F.floor(F.col("id") / QUEUES) * SPAN_MS / max(per_q, 1))).cast("long")
        .alias("produced_at"),
        F.col("id").cast("string").alias("seq"), F.lit(0).cast("long").alias("inc")))  # (schemas.MESSAGES)
    k = n // 20  # commit points per group
    offs = (spark.range(k * GROUPS).select(
        F.concat(F.lit("g"), (F.col("id") % GROUPS).cast("string")).alias("group"),
        F.lit(None).cast("string").alias("client_id"), F.lit(None).cast("string").alias("subscription"),
        F.lit("bench").alias("topic"), (F.floor(F.col("id") / GROUPS) % QUEUES).cast("long").alias("queue"),
        # the c-th commit of a queue is at offset 20*c, 30 minutes behind production
        (F.floor(F.floor(F.col("id") / GROUPS) / QUEUES) * 20).cast("long").alias("committed_offset"),
        F.lit(None).cast("long").alias("prev_committed_offset"), F.lit(0).cast("long").alias("lock_ts"),
        F.lit(0).cast("long").alias("lock_until"), F.lit(0).cast("long").alias("last_consumed_at"),
        F.lit("MODIFY").alias("event"), F.lit("commit").alias("change"),
        (F.lit(T0 + 1_800_000) + F.floor(F.floor(F.floor(F.col("id") / GROUPS) / QUEUES) * 20 * SPAN_MS
                                           / max(per_q, 1))).cast("long").alias("at"),
        F.col("id").cast("string").alias("seq"), F.lit(0).cast("long").alias("inc")))  # (schemas.OFFSETS)
    return msgs, offs


def backlog_before(messages, offsets, as_of_ms: int, bucket_ms: int = 3_600_000,
                   persisted=None):
    """The backlog transform as it was before its one-shuffle-per-log rewrite (fe0740b,
    ``lakeq_lake.transforms.backlog`` then): the reference ``--side-by-side`` times the current one
    against, in the same process. Same results (tests/spark/test_backlog_reference.py)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from lakeq_lake import transforms as T

    last_b = as_of_ms // bucket_ms
    m = (T.clean_messages(messages).where(F.col("produced_at") <= as_of_ms)
         .select("topic", "inc", "queue", "offset", "produced_at")
         .withColumn("b", F.floor(F.col("produced_at") / bucket_ms).cast("long")))
    o = (T.clean_offsets(offsets).where(F.col("at") <= as_of_ms)
         .select("group", "client_id", "topic", "inc", "queue", "committed_offset", "at", "seq")
         .withColumn("b", F.floor(F.col("at") / bucket_ms).cast("long"))
         .withColumn("order", T.seq_order("seq")))
    if persisted is not None:
        m, o = m.persist(), o.persist()
        persisted += [m, o]

    mb = m.groupBy("topic", "inc", "queue", "b").agg(
        F.count(F.lit(1)).alias("produced_in_bucket"), (F.max("offset") + 1).alias("end_in_bucket"))
    ob = o.groupBy(*T.GROUP_KEYS, "inc", "b").agg(
        F.max(F.struct("order", "committed_offset")).alias("latest_b"))
    # (topic, inc) is the log; the grid is built for each topic's newest incarnation only (the
    # inner join with ``starts``), so the left joins below take only that log's rows
    starts = T.current_incarnation(
        mb.select("topic", "inc", "b").unionByName(ob.select("topic", "inc", "b"))
        .groupBy("topic", "inc").agg(F.min("b").alias("start_b")))
    # (a group seen in an older incarnation's offsets only still gets the newest one's queues, at 0)
    keys = (o.select("group", "client_id", "topic").distinct()
            .join(mb.select("topic", "inc", "queue").distinct(), "topic")
            .unionByName(ob.select(*T.GROUP_KEYS, "inc"))
            .distinct())
    grid = (keys.join(starts, ["topic", "inc"])
            .withColumn("b", F.explode(F.sequence(F.col("start_b"), F.lit(last_b))))
            .drop("start_b"))

    w = Window.partitionBy(*T.GROUP_KEYS).orderBy("b")
    running = w.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    g = (grid.join(mb, ["topic", "inc", "queue", "b"], "left")
         .join(ob, [*T.GROUP_KEYS, "inc", "b"], "left")
         .withColumn("produced", F.coalesce(F.max("end_in_bucket").over(running), F.lit(0)).cast("long"))
         # the change with the highest sequence number among those stamped up to this bucket
         .withColumn("committed", F.coalesce(F.max("latest_b").over(running)["committed_offset"],
                                             F.lit(0)).cast("long"))
         .withColumn("consumed_in_bucket",
                     F.greatest(F.col("committed") - F.lag("committed", 1, 0).over(w), F.lit(0)).cast("long"))
         .withColumn("produced_in_bucket", F.coalesce("produced_in_bucket", F.lit(0)).cast("long"))
         .withColumn("bucket_start", (F.col("b") * bucket_ms).cast("long"))
         .withColumn("at", F.least((F.col("b") + 1) * bucket_ms, F.lit(as_of_ms)).cast("long"))
         .withColumn("backlog", F.greatest(F.col("produced") - F.col("committed"), F.lit(0)).cast("long")))
    secs = F.greatest((F.col("at") - F.col("bucket_start")) / 1000.0, F.lit(0.001))
    g = (g.withColumn("production_rate", (F.col("produced_in_bucket") / secs).cast("double"))
         .withColumn("consumption_rate", (F.col("consumed_in_bucket") / secs).cast("double")))

    # age of the oldest unconsumed message: the message at ``committed`` (grid rows with a backlog)
    pending = (g.where(F.col("backlog") > 0)
               .select("topic", "inc", "queue", F.col("committed").alias("offset")).distinct())
    heads = (m.join(F.broadcast(pending), ["topic", "inc", "queue", "offset"])
             .select("topic", "inc", "queue", F.col("offset").alias("committed"), "produced_at"))
    g = (g.join(heads, ["topic", "inc", "queue", "committed"], "left")
         .withColumn("oldest_unconsumed_age_ms",
                     F.when(F.col("backlog") > 0,
                            F.greatest(F.col("at") - F.col("produced_at"), F.lit(0)))
                     .otherwise(F.lit(0)).cast("long")))
    return g.select(
        "group", F.when(F.col("client_id") == "", None).otherwise(F.col("client_id")).alias("client_id"),
        "topic", "queue", "bucket_start", "at", "produced", "committed", "backlog", "produced_in_bucket",
        "consumed_in_bucket", "production_rate", "consumption_rate", "oldest_unconsumed_age_ms")


def exchanges(df) -> tuple[int, int]:
    """Shuffles and broadcasts in ``df``'s executed plan (each once: a persisted frame's plan is
    printed under every scan of it)."""
    found = set(re.findall(r"(BroadcastExchange|Exchange) [^\n]*?\[plan_id=(\d+)\]",
                           df._jdf.queryExecution().executedPlan().toString()))
    return sum(t == "Exchange" for t, _ in found), sum(t == "BroadcastExchange" for t, _ in found)


def run(spark, n: int, transform=None, plan: bool = False):
    """Seconds of ``transform`` (default: ``lakeq_lake.transforms.backlog``) over ``n`` message rows
    and the rows read (``plan``: and :func:`exchanges` of the report)."""
    from lakeq_lake import transforms as T

    transform = transform or T.backlog
    msgs, offs = synthetic(spark, n)
    msgs, offs = msgs.cache(), offs.cache()
    rows = msgs.count() + offs.count()  # materialise the inputs outside the timing
    t = time.perf_counter()
    report = transform(msgs, offs, T0 + SPAN_MS, 3_600_000, persisted=[])
    report.write.format("noop").mode("overwrite").save()
    dt = time.perf_counter() - t
    shape = exchanges(report) if plan else None
    spark.catalog.clearCache()  # the inputs and what the transform persisted
    return (dt, rows, shape) if plan else (dt, rows)


def cpu_seconds(spark) -> float:
    """CPU seconds (user + system) used so far by this process and its Spark JVM."""
    pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    t = os.times()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK") + t.user + t.system


def lakes(spark, n: int, base: Path, buckets: int | None = None) -> tuple[Path, Path]:
    """The raw lake of :func:`synthetic`'s rows (generated once under ``base``) and its compacted
    copy (hard links; compacted once, by ``lakeq_lake.compact.run_compact``: wall and CPU printed).
    ``buckets``: the compaction's (default :data:`lakeq.lake.compaction.BUCKETS`, messages
    deduplicated and bucketed by queue, ``n<rows>-compacted-b<buckets>``; 0: the layout before,
    ``n<rows>-compacted``)."""
    import shutil

    from pyspark.sql import functions as F

    from lakeq_lake.compact import run_compact
    from lakeq_lake.store import Lake

    raw = base / f"n{n}"
    if not (raw / "_generated").exists():
        shutil.rmtree(raw, ignore_errors=True)
        t = time.perf_counter()
        msgs, offs = synthetic(spark, n)
        for kind, df, at in (("messages", msgs, "produced_at"), ("offsets", offs, "at")):
            ts = (F.col(at) / 1000).cast("timestamp")
            (df.withColumn("dt", F.date_format(ts, "yyyy-MM-dd")).withColumn("hour", F.date_format(ts, "HH"))
             .repartition(48, "dt", "hour").write.partitionBy("dt", "hour").option("compression", "gzip")
             .json(str(raw / "raw" / f"kind={kind}")))
        (raw / "_generated").write_text(str(n))
        print(f"raw lake of {n:,} message rows written in {time.perf_counter() - t:.1f} s → {raw}", flush=True)
    from lakeq.lake import compaction as C

    buckets = C.BUCKETS if buckets is None else buckets
    pq = base / (f"n{n}-compacted-b{buckets}" if buckets else f"n{n}-compacted")
    if not (pq / "_compacted").exists():
        shutil.rmtree(pq, ignore_errors=True)
        shutil.copytree(raw, pq, copy_function=os.link)
        load0, cpu0, t = os.getloadavg()[0], cpu_seconds(spark), time.perf_counter()
        out = run_compact(spark, Lake(str(pq)), at_ms=T0 + SPAN_MS + 3_600_000, kinds=("messages", "offsets"),
                          log=lambda *_: None, buckets=buckets)
        wall, cpu = time.perf_counter() - t, cpu_seconds(spark) - cpu0
        line = (f"compacted {n:,} message + {n // 5:,} offset rows ({ {k: len(v['hours']) for k, v in out.items()} }"
                f" hours) in {wall:.1f} s wall, {cpu:.1f} CPU-s; per million message rows {wall / n * 1e6:.1f} s, "
                f"{cpu / n * 1e6:.1f} CPU-s; load {load0:.2f} → {os.getloadavg()[0]:.2f}")
        print(line, flush=True)
        (pq / "_compacted").write_text(line + "\n")
    return raw, pq


def from_lake(spark, sizes: list[int], rounds: int, base: Path, layout_before: bool = False) -> None:
    """Per size: the job's read and the transform over the raw lake, then over the compacted one,
    ``rounds`` times, and the cached-input :func:`run` once (the figure of the other modes).
    ``layout_before``: also over the lake compacted as before (messages one file per hour,
    duplicates kept), between the two."""
    from lakeq_lake import transforms as T
    from lakeq_lake.store import Lake

    def timed(root: Path) -> tuple[float, float]:
        lk = Lake(str(root))
        c, t = cpu_seconds(spark), time.perf_counter()
        persisted: list = []
        report = T.backlog(lk.read_kind(spark, "messages"), lk.read_kind(spark, "offsets"), T0 + SPAN_MS,
                           3_600_000, persisted=persisted)
        report.write.format("noop").mode("overwrite").save()
        out = time.perf_counter() - t, cpu_seconds(spark) - c
        spark.catalog.clearCache()
        return out

    print(f"{'message rows':>13} {'round':>5} {'raw s':>7} {'(CPU)':>7} "
          + (f"{'flat pq s':>9} {'(CPU)':>7} " if layout_before else "")
          + f"{'parquet s':>9} {'(CPU)':>7} {'ratio':>6} {'cached s':>8}  load (1 min)")
    for n in sizes:
        raw, pq = lakes(spark, n, base)
        flat = lakes(spark, n, base, buckets=0)[1] if layout_before else None
        timed(pq)  # warm-up: the JIT, the listings
        for r in range(1, rounds + 1):
            rs, rc = timed(raw)
            fl = ""
            if flat is not None:
                fs, fc = timed(flat)
                fl = f"{fs:>9.2f} {fc:>7.1f} "
            ps, pc = timed(pq)
            cached = f"{run(spark, n)[0]:>8.2f}" if r == 1 else f"{'':>8}"
            print(f"{n:>13,} {r:>5} {rs:>7.2f} {rc:>7.1f} {fl}{ps:>9.2f} {pc:>7.1f} {rs / ps:>5.2f}x {cached}  "
                  f"{os.getloadavg()[0]:.2f}", flush=True)


def side_by_side(spark, sizes: list[int], rounds: int) -> None:
    """The transform before (:func:`backlog_before`) and now, alternating in this process: per size,
    ``rounds`` rounds of before then now (a warm-up of each at 100k rows first), load average
    printed with each figure."""
    from lakeq_lake import transforms as T

    for name, f in (("before", backlog_before), ("now", T.backlog)):
        dt, _, (shuffles, broadcasts) = run(spark, 100_000, f, plan=True)
        print(f"warm-up {name}: 100,000 rows {dt:.2f} s; executed plan: {shuffles} shuffles, {broadcasts} broadcasts")
    print(f"{'message rows':>13} {'round':>5} {'before s':>9} {'now s':>7} {'ratio':>6}  load (1 min)")
    for n in sizes:
        for r in range(1, rounds + 1):
            before, _ = run(spark, n, backlog_before)
            now, _ = run(spark, n, T.backlog)
            print(f"{n:>13,} {r:>5} {before:>9.2f} {now:>7.2f} {before / now:>5.2f}x  {os.getloadavg()[0]:.2f}",
                  flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="1M message rows only (< 1 min)")
    ap.add_argument("--rows", type=int, help="this many message rows only (the suite's smoke test: a small lake)")
    ap.add_argument("--side-by-side", action="store_true",
                    help="the transform before its rewrite and now, alternating in one process")
    ap.add_argument("--rounds", type=int, default=2, help="--side-by-side, --from-lake: rounds per size")
    ap.add_argument("--from-lake", action="store_true",
                    help="the job's read + transform over the raw lake and over the compacted one, alternating")
    ap.add_argument("--dir", default="/tmp/lakeq-lake-bench", help="--from-lake: where the lakes are kept")
    ap.add_argument("--layout-before", action="store_true",
                    help="--from-lake: also over the lake compacted as before (one file per hour, duplicates kept)")
    a = ap.parse_args()
    sizes = [a.rows] if a.rows else [1_000_000] if a.quick else [1_000_000, 10_000_000]
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    t = time.perf_counter()
    spark = (SparkSession.builder.master("local[2]").appName("lakeq-bench")
             .config("spark.sql.shuffle.partitions", "8").config("spark.ui.enabled", "false")
             .config("spark.sql.session.timeZone", "UTC")
             .config("spark.driver.memory", "4g").config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    print(f"machine: {platform.machine()} {os.cpu_count()} cores, {platform.system()} {platform.release()}, "
          f"Python {platform.python_version()}, Spark {spark.version} local[2]; "
          f"start-up {time.perf_counter() - t:.1f}s")
    if a.from_lake:
        from_lake(spark, sizes, a.rounds, Path(a.dir), a.layout_before)
        spark.stop()
        return 0
    if a.side_by_side:
        side_by_side(spark, sizes, a.rounds)
        spark.stop()
        return 0
    if not (a.quick or a.rows):
        run(spark, 100_000)  # warm-up (JIT, code generation); --quick counts it in its 1M figure
    prev = None
    print(f"{'message rows':>13} {'all rows':>10} {'seconds':>8} {'rows/s':>10}  growth")
    for n in sizes:
        dt, rows = run(spark, n)
        growth = "" if prev is None else f"x{dt / prev[0]:.2f} time for x{rows / prev[1]:.1f} rows"
        print(f"{n:>13,} {rows:>10,} {dt:>8.2f} {rows / dt:>10,.0f}  {growth}", flush=True)
        prev = (dt, rows)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
