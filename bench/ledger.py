"""Benchmark: the delivery ledger's transform (issue 32.4) beside the backlog's, on ``local[2]``,
over the same synthetic lake, alternating in one process.

The lake is ``bench/lake.py``'s (one topic, 64 queues, ``n`` message rows over 24 hours, 4 groups)
with its offsets rows as the archiver now writes them: per group and queue, a lock delivering the
next 20 offsets (``delivered``) and the commit accepting them (``settled``), trailing production by
30 minutes — ``n/5`` rows. Inputs are generated inside Spark and cached; the figure is the transform
run in full (``noop`` sink): the ledger's rows are one per group and message (4 ``n``).

``python bench/ledger.py [--rows N] [--rounds R]`` (default 1M rows, 1 round).
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]  # (bench/queue.py)
for p in (ROOT / "glue_jobs", ROOT / "layers" / "core", ROOT / "layers" / "matcher"):
    sys.path.insert(0, str(p))


def lake_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_lake", ROOT / "bench" / "lake.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def synthetic(spark, n: int):
    """``bench/lake.py``'s messages; offsets rows with the ledger's columns (see the module's doc)."""
    from pyspark.sql import functions as F

    from lakeq_lake import schemas

    B = lake_module()
    msgs, _ = B.synthetic(spark, n)
    per_q = n // B.QUEUES
    k = n // 20  # lock + commit pairs per group
    i = F.floor(F.col("id") / 2)
    j = F.floor(i / B.GROUPS)
    c = F.floor(j / B.QUEUES)
    lo, hi = (c * 20).cast("long"), (c * 20 + 20).cast("long")
    is_lock = (F.col("id") % 2) == 0
    span = F.array(F.struct(lo.alias("lo"), hi.alias("hi"), F.lit("accepted").alias("outcome"),
                            F.lit(None).cast("string").alias("reason"), F.lit(None).cast("long").alias("deliveries")))
    offs = spark.range(2 * k * B.GROUPS).select(
        F.concat(F.lit("g"), (i % B.GROUPS).cast("string")).alias("group"),
        F.lit(None).cast("string").alias("client_id"), F.lit(None).cast("string").alias("subscription"),
        F.lit("bench").alias("topic"), (j % B.QUEUES).cast("long").alias("queue"),
        F.when(is_lock, lo).otherwise(hi).alias("committed_offset"),
        F.lit(None).cast("long").alias("prev_committed_offset"), F.lit(0).cast("long").alias("lock_ts"),
        F.lit(0).cast("long").alias("lock_until"), F.lit(0).cast("long").alias("last_consumed_at"),
        F.lit("MODIFY").alias("event"), F.when(is_lock, "lock").otherwise("commit").alias("change"),
        (F.lit(B.T0 + 1_800_000) + F.floor(c * 20 * B.SPAN_MS / max(per_q, 1))).cast("long").alias("at"),
        F.col("id").cast("string").alias("seq"), F.lit(0).cast("long").alias("inc"),
        F.when(is_lock, F.array().cast(schemas.SETTLED)).otherwise(span).alias("settled"),
        F.when(is_lock, F.sequence(lo, hi - 1)).otherwise(F.array().cast("array<bigint>")).alias("delivered"),
        F.when(is_lock & (c == 0), F.lit(0)).cast("long").alias("start_offset"))
    return msgs, offs, B


def timed(spark, msgs, offs, f) -> float:
    t = time.perf_counter()
    f(msgs, offs).write.format("noop").mode("overwrite").save()
    return time.perf_counter() - t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=1)
    a = ap.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("lakeq-bench-ledger")
             .config("spark.sql.shuffle.partitions", "8").config("spark.ui.enabled", "false")
             .config("spark.driver.memory", "4g").config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    from lakeq_lake import ledger as L
    from lakeq_lake import transforms as T

    print(f"machine: {platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"Spark {spark.version} local[2]")
    msgs, offs, B = synthetic(spark, a.rows)
    msgs, offs = msgs.cache(), offs.cache()
    rows = msgs.count() + offs.count()
    as_of = B.T0 + B.SPAN_MS
    jobs = {"backlog": lambda m, o: T.backlog(m, o, as_of, 3_600_000, persisted=[]),
            "ledger": lambda m, o: L.ledger(m, o, B.T0, as_of + 1, as_of)}
    if a.rows <= 200_000:  # the premise: every group's messages accounted for, nothing lost
        check = L.summary(L.ledger(msgs, offs, B.T0, as_of + 1, as_of)).collect()
        print("ledger check: " + "; ".join(f"{r['group']}: {L.line({k: r[k] for k in L.COUNTS})}"
                                           for r in sorted(check, key=lambda r: r["group"])))
    for name in ("backlog", "ledger"):  # warm-up
        print(f"warm-up {name}: {timed(spark, msgs.limit(10_000), offs.limit(2_000), jobs[name]):.2f} s")
    print(f"{'message rows':>13} {'rows read':>10} {'round':>5} {'backlog s':>9} {'ledger s':>8} {'ratio':>6}"
          "  load (1 min)")
    for r in range(1, a.rounds + 1):
        b = timed(spark, msgs, offs, jobs["backlog"])
        led = timed(spark, msgs, offs, jobs["ledger"])
        print(f"{a.rows:>13,} {rows:>10,} {r:>5} {b:>9.2f} {led:>8.2f} {led / b:>5.2f}x  {os.getloadavg()[0]:.2f}",
              flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
