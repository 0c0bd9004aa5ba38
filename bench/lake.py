"""Benchmark: the backlog job's transform on synthetic log rows, on ``local[2]``.

Synthetic lake: one topic with 64 queues; ``n`` message rows over 24 hours; one offset row per 20
messages for each of 4 groups (commits trailing production), i.e. ``n/5`` offset rows. Rows are
generated inside Spark (``spark.range``) and cached, so the figure is the transform — aggregations,
the running windows over keys × hourly buckets, the ages join — executed in full (``noop`` sink),
not JSON parsing or S3 I/O. Prints rows/s per size and how time grows with the input.

``python bench/lake.py --quick`` (1M rows, < 1 min) · ``python bench/lake.py`` (1M and 10M).
"""
from __future__ import annotations

import argparse
import os
import platform
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
        (F.lit(T0) + F.floor(F.floor(F.col("id") / QUEUES) * SPAN_MS / max(per_q, 1))).cast("long").alias("produced_at"),
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


def run(spark, n: int) -> tuple[float, int]:
    from lakeq_lake import transforms as T

    msgs, offs = synthetic(spark, n)
    msgs, offs = msgs.cache(), offs.cache()
    rows = msgs.count() + offs.count()  # materialise the inputs outside the timing
    t = time.perf_counter()
    T.backlog(msgs, offs, T0 + SPAN_MS, 3_600_000, persisted=[]).write.format("noop").mode("overwrite").save()
    dt = time.perf_counter() - t
    spark.catalog.clearCache()  # the inputs and what the transform persisted
    return dt, rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="1M message rows only (< 1 min)")
    ap.add_argument("--rows", type=int, help="this many message rows only (the suite's smoke test: a small lake)")
    a = ap.parse_args()
    sizes = [a.rows] if a.rows else [1_000_000] if a.quick else [1_000_000, 10_000_000]
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    t = time.perf_counter()
    spark = (SparkSession.builder.master("local[2]").appName("lakeq-bench")
             .config("spark.sql.shuffle.partitions", "8").config("spark.ui.enabled", "false")
             .config("spark.driver.memory", "4g").config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    print(f"machine: {platform.machine()} {os.cpu_count()} cores, {platform.system()} {platform.release()}, "
          f"Python {platform.python_version()}, Spark {spark.version} local[2]; start-up {time.perf_counter() - t:.1f}s")
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
