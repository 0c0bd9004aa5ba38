"""Benchmark: the replay job (issue 18.1) on a generated lake, on ``local[2]``.

The lake: ``n`` messages over 24 hours in the archiver's layout (``raw/kind=messages`` and
``raw/kind=bodies``, gzipped JSON Lines, Hive ``dt``/``hour`` partitions, 12 objects per hour and
kind — one per 5 minutes; the archiver writes one per minute and stream shard, so a real lake
of the same size has more, smaller objects), 64
queues, properties ``{kind: "k0".."k5", tier: 0..9, code: "0000".."9999"}``, 0-2 of 4 tags,
~100-byte bodies. Generated once by Spark and kept under ``--dir`` (default
``/tmp/lakeq-replay-bench``), so a second run measures the job only.

Measured, each in the same session: the *baseline* — a scan that only counts the slice's rows of
both kinds (the partitions pruned the same way) — and the *job* (``run_replay``: select with a
filter that goes through the matcher UDF, join the bodies, sort, write the manifest and summary),
for a 3-hour window and for the whole day. The job's progress bar is on stderr.

``python bench/replay.py --quick`` (1M rows, the 3-hour window only: ~1 min once generated) ·
``python bench/replay.py`` (10M rows, both windows; generating the lake takes ~10 min the first time).
"""
from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# bench/queue.py would shadow the standard library's ``queue`` (py4j imports it)
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]
for p in (ROOT / "glue_jobs", ROOT / "layers" / "core", ROOT / "layers" / "matcher"):
    sys.path.insert(0, str(p))

OBJECTS_PER_HOUR = 12  # one object per 5 minutes and kind
QUEUES, HOUR, T0 = 64, 3_600_000, 1_767_225_600_000  # 2026-01-01T00:00Z
FILTER = {"conditions": [{"field": "kind", "values": ["k1", "k2"]}, {"field": "tier", "range": [0, 4]}],
          "tags": ["red", "blue"]}


def generate(spark, root: Path, n: int) -> None:
    from pyspark.sql import functions as F

    # ids in order of time; one range partition = one object per hour it spans (no shuffle)
    base = spark.range(0, n, 1, OBJECTS_PER_HOUR * 24).select(
        F.lit("bench").alias("topic"), (F.col("id") % QUEUES).alias("queue"),
        F.floor(F.col("id") / QUEUES).cast("long").alias("offset"), F.col("id"))
    base = base.withColumn("produced_at", (F.lit(T0) + F.floor(F.col("id") * 24 * HOUR / n)).cast("long"))
    base = (base.withColumn("dt", F.date_format((F.col("produced_at") / 1000).cast("timestamp"), "yyyy-MM-dd"))
            .withColumn("hour", F.date_format((F.col("produced_at") / 1000).cast("timestamp"), "HH"))
            .withColumn("seq", F.col("id").cast("string")))
    h = F.xxhash64("id")
    tag_list = ["red", "blue", "green", "x"]
    tags = F.filter(F.array(*[F.when(F.shiftright(h, 4 * i) % 3 == 0, F.lit(t)) for i, t in enumerate(tag_list)]),
                    lambda c: c.isNotNull())
    msgs = base.select(
        "topic", "queue", "offset", F.concat(F.lit("m"), F.col("id").cast("string")).alias("id"),
        F.lit(None).cast("string").alias("key"), F.lit(100).cast("long").alias("size"), tags.alias("tags"),
        F.struct(F.concat(F.lit("k"), (F.abs(h) % 6).cast("string")).alias("kind"),
                 (F.abs(F.shiftright(h, 24)) % 10).alias("tier"),
                 F.lpad((F.abs(F.shiftright(h, 32)) % 10000).cast("string"), 4, "0").alias("code")).alias("properties"),
        "produced_at", "seq", "dt", "hour")
    bodies = base.select("topic", "queue", "offset",
                         F.concat(F.lit("{\"order\":"), F.col("id").cast("string"),
                                  F.lit(",\"note\":\""), F.sha1(F.col("id").cast("string")),
                                  F.lit("\",\"qty\":"), (F.col("id") % 97).cast("string"), F.lit("}")).alias("body"),
                         "seq", "produced_at", "dt", "hour")
    for kind, df in (("messages", msgs), ("bodies", bodies)):
        (df.write.mode("overwrite")
         .partitionBy("dt", "hour").option("compression", "gzip").json(str(root / "raw" / f"kind={kind}")))


def size_of(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*.gz"))


def run(spark, lake_root: Path, n: int, label: str, lo: int, hi: int) -> None:
    from lakeq.replay.rules import Filter
    from lakeq_lake import replay as R
    from lakeq_lake.store import Lake

    lk = Lake(str(lake_root))
    t = time.perf_counter()
    base_rows = (R.read_slice(spark, lk, "messages", lo, hi).count()
                 + R.read_slice(spark, lk, "bodies", lo, hi).count())
    base_s = time.perf_counter() - t
    rid = f"bench-{label}"
    t = time.perf_counter()
    s = R.run_replay(spark, lk, rid, "bench", lo, hi, Filter.of(FILTER), show_progress=True, log=lambda *_: None)
    job_s = time.perf_counter() - t
    shutil.rmtree(lake_root / "replays" / rid, ignore_errors=True)
    print(f"{n:>12,} {label:>10} {base_rows // 2:>12,} {s['found']:>10,} {base_s:>9.1f} {job_s:>8.1f} "
          f"{job_s / base_s:>6.2f}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="1M rows (< 1 min once generated)")
    ap.add_argument("--rows", type=int, default=None)
    ap.add_argument("--dir", default="/tmp/lakeq-replay-bench")
    ap.add_argument("--generate-only", action="store_true")
    a = ap.parse_args()
    n = a.rows or (1_000_000 if a.quick else 10_000_000)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    t = time.perf_counter()
    spark = (SparkSession.builder.master("local[2]").appName("lakeq-bench-replay")
             .config("spark.sql.shuffle.partitions", "8").config("spark.ui.enabled", "false")
             .config("spark.sql.session.timeZone", "UTC")
             .config("spark.driver.memory", "4g").config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    print(f"machine: {platform.machine()} {os.cpu_count()} cores, {platform.system()} {platform.release()}, "
          f"Python {platform.python_version()}, Spark {spark.version} local[2]; "
          f"start-up {time.perf_counter() - t:.1f}s")
    lake_root = Path(a.dir) / f"n{n}"
    if not (lake_root / "_generated").exists():
        t = time.perf_counter()
        generate(spark, lake_root, n)
        (lake_root / "_generated").write_text(str(n))
        print(f"generated {n:,} messages in {time.perf_counter() - t:.1f} s → {lake_root}")
    if a.generate_only:
        return 0
    m, b = size_of(lake_root / "raw" / "kind=messages"), size_of(lake_root / "raw" / "kind=bodies")
    print(f"lake: messages {m / 1e6:.1f} MB, bodies {b / 1e6:.1f} MB gzipped "
          f"({m / n:.1f} + {b / n:.1f} bytes per message)")
    print(f"filter: {FILTER}")
    print(f"{'lake rows':>12} {'window':>10} {'slice rows':>12} {'selected':>10} {'scan s':>9} {'job s':>8} "
          f"{'ratio':>6}")
    run(spark, lake_root, n, "3h", T0 + 6 * HOUR, T0 + 9 * HOUR)
    if not a.quick:
        run(spark, lake_root, n, "24h", T0, T0 + 24 * HOUR)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
