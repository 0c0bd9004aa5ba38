"""Benchmark: the replay job (issue 18.1) on a generated lake, on ``local[2]``.

The lake: ``n`` messages over 24 hours in the archiver's layout (``raw/kind=messages`` and
``raw/kind=bodies``, gzipped JSON Lines, Hive ``dt``/``hour`` partitions, 12 objects per hour and
kind — one per 5 minutes; the archiver writes one per minute and stream shard, so a real lake
of the same size has more, smaller objects), 64
queues, properties ``{kind: "k0".."k5", tier: 0..9, code: "0000".."9999"}``, 0-2 of 4 tags,
~100-byte bodies. Generated once by Spark and kept under ``--dir`` (default
``/tmp/lakeq-replay-bench``), so a second run measures the job only.

Measured, each in the same session, per filter of :data:`FILTERS` (``--filters``): the *baseline* —
a scan that only counts the slice's rows of both kinds (the partitions pruned the same way) — and
the *job* (``run_replay``: select, join the bodies, sort, write the manifest and summary to a
temporary folder: the generated lake is only read), with the load average before each (the
machine may be shared: judge by the ratio). The filters: the one the job was built around, no
filter, filters no substring pre-filter narrows (anything-but, a range, exists + prefix, a mix), a
90 % one, a single ``code``, tags only. ``--compare`` runs each filter twice, first with the job
as it was before its counts were observed during the write (``legacy=True``: the same plan, a
gzipped manifest and the summary read back from it), then the current one; ``--compare-plan``
also runs the plan before the one-shuffle pipeline (``previous=True``: the dedup, join and order
shuffles, with that legacy output); ``--compare-udf`` runs each filter with conditions first with
``native=False`` (the matcher UDF on every row the pre-filter lets through); ``--compare-bodies``
runs each filtered replay first with every body of the slice shuffled (``narrow_bodies=False``);
``--compare-sides`` runs each first with the messages joined with the bodies (``one_sided=False``:
the plan before body rows carried their metadata, on the same lake); ``--compare-order`` runs each
first with the bucketed selection's sort by the manifest's keys alone (before the packed order key,
``replay.sort_order``); ``--compare-manifest`` runs each with the manifest as JSON Lines and as
records (:mod:`lakeq.store.replay_manifest`), ``--rounds`` times, the order reversed every other
round, no scan baseline, the digest the rows' content (equal across formats when the rows are;
``LAKEQ_BENCH_NO_DIGEST=1``: no digest, ``-`` — reading a 10M-row manifest in Python takes minutes);
``--compare-levels PATH`` runs each filter with conditions with the levels of another
``native_filter.py`` (the code before: ``git show main:glue_jobs/lakeq_lake/native_filter.py >
PATH``) and the `plain` regex on every row, and as it is now (the compacted bodies' ``plain``
column read where it is), ``--rounds`` pairs, the order reversed every other round. Each line ends with the manifest's
SHA-256 (its parts in order, byte for
byte: equal for runs that selected the same rows in the same order). Each line also shows
the job's two phases (``sel+wr``: select and write the manifest; ``summ.``: the summary), and
after the filter's name the plan that wrote the manifest when the job had to select twice
(``(+matcher)``: rows whose properties are not plain; ``(2 sides)``: rows archived without
metadata). ``--dir`` may name a lake made by hand (e.g. the generated one with a few objects of
such rows added). The job's progress bar is on stderr.

``--layout-before`` (with ``--parquet`` / ``--parquet-only``): each filter also over the lake as
the compaction wrote it before 2026-12-07 (``pq-flat``: one file per hour, duplicates kept, so the
selection shuffles and drops duplicates; ``<dir>/n<rows>-v2-compacted``) just before the current
layout (deduplicated, one file per hour and hash bucket of queue: read bucket by bucket, no
shuffle). ``--parquet``: the same lake compacted too (a hard-linked copy beside it, ``<dir>/n<rows>-v2-compacted-b8``,
compacted once by the compaction job's own code, :func:`lakeq_lake.compact.run_compact`, its wall
and CPU seconds printed) and each filter run over the raw lake then over the compacted one, side
by side in the process (``--parquet-only``: the compacted one alone). ``--adversarial``: the lake
used is a hard-linked copy plus one object per kind of :data:`ADV_ROWS` rows whose properties hold
an emoji, control characters, quotes and a backslash (:func:`add_adversarial`); compacted, those
rows arrive late in a compacted hour and are folded into its next generation.

``python bench/replay.py --quick`` (1M rows, the 3-hour window, the filters of :data:`QUICK_FILTERS`) ·
``python bench/replay.py --window 24h --filters mixed-miss,none`` (10M rows, the whole day;
generating the lake takes ~10 min the first time).
"""
from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
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
# The filter mix (--filters): the one the job was built around, and the ones it was not. Shares of
# the generated lake in the comments (kind k0..k5, tier 0..9, code "0000".."9999", each tag 1/3).
FILTERS = {
    "designed": FILTER,  # 5.2 %: string values + range + tags, the native pre-filters narrow it
    "none": None,  # 100 %: no filter, the manifest holds every body of the window
    "anything-but": {"conditions": [{"field": "kind", "anything_but": ["k0", "k5"]}]},  # 67 %
    "range": {"conditions": [{"field": "tier", "range": [2, 6]}]},  # 50 %
    "exists+prefix": {"conditions": [{"field": "code", "exists": True}, {"field": "code", "prefix": "1"}]},  # 10 %
    "mixed-miss": {"conditions": [{"field": "tier", "anything_but": [0]}, {"field": "kind", "exists": True},
                                  {"field": "tier", "range": [1.5, 9]}]},  # 80 %: no needle narrows it
    "unselective": {"conditions": [{"field": "tier", "anything_but": [9]}]},  # 90 %
    "one-code": {"conditions": [{"field": "code", "values": ["0042"]}]},  # 0.01 %
    "tags-only": {"tags": ["green"]},  # 33 %
}

# --quick's default: the designed filter, none, one no substring narrows, the most selective
# (all nine took 79 s here idle; these four stay under a minute)
QUICK_FILTERS = ("designed", "none", "anything-but", "one-code")


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
    mid = F.concat(F.lit("m"), F.col("id").cast("string")).alias("id")
    key = F.lit(None).cast("string").alias("key")
    props = F.struct(F.concat(F.lit("k"), (F.abs(h) % 6).cast("string")).alias("kind"),
                     (F.abs(F.shiftright(h, 24)) % 10).alias("tier"),
                     F.lpad((F.abs(F.shiftright(h, 32)) % 10000).cast("string"), 4, "0").alias("code"),
                     ).alias("properties")
    msgs = base.select("topic", "queue", "offset", mid, key, F.lit(100).cast("long").alias("size"), tags.alias("tags"),
                       props, "produced_at", "seq", F.lit(0).alias("inc"), "dt", "hour")
    # body rows carry their message's metadata, as the archiver writes them since 2026-11-28
    # (lakeq.lake.archive.body_row): a replay selects from them alone (replay.select_one_sided)
    bodies = base.select("topic", "queue", "offset", mid, key, tags.alias("tags"), props,
                         F.concat(F.lit("{\"order\":"), F.col("id").cast("string"),
                                  F.lit(",\"note\":\""), F.sha1(F.col("id").cast("string")),
                                  F.lit("\",\"qty\":"), (F.col("id") % 97).cast("string"), F.lit("}")).alias("body"),
                         "seq", "produced_at", F.lit(0).alias("inc"), "dt", "hour")
    for kind, df in (("messages", msgs), ("bodies", bodies)):
        (df.write.mode("overwrite")
         .partitionBy("dt", "hour").option("compression", "gzip").json(str(root / "raw" / f"kind={kind}")))


def size_of(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*.gz"))


ADV_ROWS = 1_000  # rows per kind of the adversarial object (0.01 % of the 10M lake)
# a value with an emoji (beyond U+FFFF), control characters, a quote and a backslash
ADV_NOTE = "\U0001F600 line\nbreak \u0001 say \"hi\"\\ok"


def linked_copy(src: Path, dst: Path) -> None:
    """``dst``: the files of ``src`` hard-linked (no bytes copied; the raw lake stays as it was)."""
    if not dst.exists():
        tmp = dst.with_name(dst.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(src, tmp, copy_function=os.link)
        tmp.rename(dst)


def add_adversarial(root: Path, n: int) -> None:
    """One object per kind at 12:00 of the day: :data:`ADV_ROWS` rows, queue ``i % 64``, offsets past
    the generated ones, properties ``{kind, tier, code, note}`` with ``note`` = :data:`ADV_NOTE`
    (Jackson escapes, as the archiver's rows have them)."""
    import gzip
    import json

    per_q = n // QUEUES + 1
    for kind in ("messages", "bodies"):
        lines = []
        for i in range(ADV_ROWS):
            at = T0 + 12 * HOUR + i
            props = {"kind": f"k{i % 6}", "tier": i % 10, "code": f"{i % 10000:04d}", "note": ADV_NOTE}
            row = {"topic": "bench", "queue": i % QUEUES, "offset": per_q + i // QUEUES, "id": f"adv{i}",
                   "key": None, "tags": ["red", "green"][: i % 3], "properties": props,
                   "produced_at": at, "seq": f"adv{i}", "inc": 0}
            row.update({"size": 100} if kind == "messages" else {"body": json.dumps({"adv": i, "note": ADV_NOTE})})
            lines.append(json.dumps(row, ensure_ascii=True))
        d = root / "raw" / f"kind={kind}" / "dt=2026-01-01" / "hour=12"
        with gzip.open(d / "part-adversarial.json.gz", "wt", encoding="ascii") as f:
            f.write("\n".join(lines) + "\n")


def cpu_seconds(spark) -> float:
    """CPU seconds (user + system) used so far by this process and its Spark JVM."""
    pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    t = os.times()
    return (int(fields[11]) + int(fields[12])) / ticks + t.user + t.system


def compacted(spark, lake_root: Path, n: int, adversarial: bool = False, buckets: int | None = None) -> Path:
    """``lake_root`` compacted once, in a hard-linked copy beside it (the compaction job's code,
    the messages and the bodies of the 24 closed hours); prints its wall and CPU seconds.
    ``buckets``: the compaction's (default :data:`lakeq.lake.compaction.BUCKETS`: deduplicated, one
    file per hour and hash bucket of queue, ``<dir>/n<rows>-v2-compacted-b<buckets>``); 0: the
    layout before (one file per hour, ``<dir>/n<rows>-v2-compacted``).
    ``adversarial``: a hard-linked copy of that one, :func:`add_adversarial`'s objects added to
    its raw hour 12 and compacted again: late arrivals folded into the hour's next generation."""
    from lakeq.lake import compaction as C
    from lakeq_lake.compact import run_compact
    from lakeq_lake.store import Lake

    buckets = C.BUCKETS if buckets is None else buckets
    suffix = f"-compacted-b{buckets}" if buckets else "-compacted"

    def compact(dst: Path, what: str) -> None:
        lines = []
        for kind in ("messages", "bodies"):  # timed one kind at a time
            load0, cpu0, t = load(), cpu_seconds(spark), time.perf_counter()
            out = run_compact(spark, Lake(str(dst)), at_ms=T0 + 25 * HOUR, kinds=(kind,), log=lambda *_: None,
                              show_progress=True, buckets=buckets)
            wall, cpu = time.perf_counter() - t, cpu_seconds(spark) - cpu0
            pq = sum(f.stat().st_size for f in (dst / "lake" / f"kind={kind}").rglob("*.parquet"))
            lines.append(f"compacted {what}, {kind}: {len(out[kind]['hours'])} hours in {wall:.1f} s wall, "
                         f"{cpu:.1f} CPU-s → {wall / n * 1e6:.1f} s wall, {cpu / n * 1e6:.1f} CPU-s per million "
                         f"messages of the lake; Parquet {pq / 1e6:.1f} MB; load before {load0}, after {load()}")
            print(lines[-1], flush=True)
        (dst / "_compacted").write_text("\n".join(lines) + "\n")

    dst = lake_root.with_name(lake_root.name + suffix)
    if not (dst / "_compacted").exists():
        shutil.rmtree(dst, ignore_errors=True)
        linked_copy(lake_root, dst)
        compact(dst, f"{n:,} messages")
    if not adversarial:
        return dst
    adv = lake_root.with_name(lake_root.name + suffix + "-adv")
    if not (adv / "_compacted").exists():
        shutil.rmtree(adv, ignore_errors=True)
        linked_copy(dst, adv)
        (adv / "_compacted").unlink()
        add_adversarial(adv, n)
        compact(adv, f"the adversarial lake ({ADV_ROWS:,} late rows per kind in hour 12)")
    return adv


def scans(spark, lake_root: Path, lo: int, hi: int, name: str) -> list[str]:
    """The file scans of the one-sided selection's plan with filter ``name`` over ``lake_root``
    (no job runs): the format, the columns read, the partition and pushed filters."""
    import re

    from lakeq.replay.rules import Filter
    from lakeq_lake import replay as R
    from lakeq_lake.store import Lake

    spark.conf.set("spark.sql.maxMetadataStringLength", "2000")  # the pushed filters in full
    df = R.select_one_sided(R.read_slice(spark, Lake(str(lake_root)), "bodies", lo, hi), "bench", lo, hi,
                            Filter.of(FILTERS[name]), matcher=False, keep_plain=True)
    plan = df._jdf.queryExecution().executedPlan().toString()
    out = []
    for m in re.finditer(r"FileScan (\w+) \[([^\]]*)\][^\n]*", plan):
        line = m.group(0)
        got = {k: re.search(k + r": (\[[^\]]*\]|[^,]*)", line) for k in ("PartitionFilters", "PushedFilters")}
        where = re.search(r"Location: (\w+\(\d+ paths?\))", line)
        out.append(f"{m.group(1)}: columns [{m.group(2)}]; {where.group(1) if where else ''}; "
                   + "; ".join(f"{k} {v.group(1)}" for k, v in got.items() if v))
    return out


def manifest_digest(work: Path, summary: dict) -> str:
    """The manifest's parts in the copier's order (the summary's ``parts``), byte for byte: the
    first 12 hex digits of their SHA-256 (two runs selecting the same rows in the same order print
    the same; not timed)."""
    import hashlib

    h = hashlib.sha256()
    for p in summary.get("parts") or []:
        with open(work / p["key"], "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()[:12]


def content_digest(work: Path, summary: dict) -> str:
    """The manifest's rows as the copier reads them (records or JSON Lines, by each part's name),
    in its order: the first 12 hex digits of the SHA-256 of each row's columns as canonical JSON —
    equal for two manifests selecting the same messages in the same order whatever their format
    (not timed; ~10 µs a row in Python)."""
    import gzip
    import hashlib
    import json

    from lakeq.store import replay_manifest as RM

    cols = ("queue", "inc", "offset", "id", "key", "tags", "properties", "produced_at", "body", "claim")
    h = hashlib.sha256()
    for p in summary.get("parts") or []:
        key = p["key"]
        with (gzip.open if key.endswith(".gz") else open)(work / key, "rb") as f:
            rows = RM.iter_rows(f.read) if RM.is_records(key) else (json.loads(x) for x in f if x.strip())
            for r in rows:
                h.update(json.dumps([r.get(c) for c in cols], ensure_ascii=False).encode("utf-8") + b"\n")
    return h.hexdigest()[:12]


def load() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def run(spark, lake_root: Path, n: int, label: str, lo: int, hi: int, name: str, work: Path,
        lake_kind: str = "raw", native: bool = True, previous: bool = False, legacy: bool = False,
        narrow_bodies: bool = True, one_sided: bool = True, by_keys: bool = False, manifest: str = "records",
        by_content: bool = False, scan: bool = True, levels_before: str | None = None) -> None:
    """One line: the scan baseline then the job with filter ``name``, side by side, the load
    average (1/5/15 min) read before each. ``native=False``: the matcher UDF on every row the
    substring pre-filter lets through; ``previous=True``: the plan before the one-shuffle pipeline
    (with the output before: gzipped parts, the summary read back); ``legacy=True``: the current
    plan with that output (the job before the counts were observed during the write);
    ``narrow_bodies=False``: every body of the slice shuffled (before the bodies were narrowed to
    the selected messages); ``one_sided=False``: the messages joined with the bodies (the plan
    before body rows carried their metadata); ``by_keys``: the bucketed selection's sort by
    ``replay.KEYS`` alone (before ``replay.sort_order``'s packed key: the same order);
    ``manifest="json"``: the manifest as JSON Lines (before the records of
    :mod:`lakeq.store.replay_manifest`); ``by_content``: the digest printed is
    :func:`content_digest`'s (format-independent) instead of the bytes'; ``scan=False``: no scan
    baseline (its columns print 0 and nan); ``levels_before``: the path of another
    ``native_filter.py`` (the code before, e.g. ``git show main:glue_jobs/lakeq_lake/native_filter.py``)
    whose levels the selection uses instead, with the `plain` regex on every row
    (``stored_plain=False``)."""
    from lakeq.replay.rules import Filter
    from lakeq_lake import replay as R
    from lakeq_lake.store import Lake

    lk = Lake(str(lake_root))
    load0 = load()
    t = time.perf_counter()
    base_rows = (R.read_slice(spark, lk, "messages", lo, hi).count()
                 + R.read_slice(spark, lk, "bodies", lo, hi).count()) if scan else 0
    base_s = time.perf_counter() - t if scan else float("nan")
    rid = f"bench-{label}-{name}"
    out = Lake(str(work))  # the manifest goes to our own folder: the generated lake stays read-only
    load1 = load()
    cpu1 = cpu_seconds(spark)
    t = time.perf_counter()
    packed, nf = R.sort_order, R.NF
    if by_keys:
        R.sort_order = lambda: list(R.KEYS)
    if levels_before:
        import importlib.util

        spec = importlib.util.spec_from_file_location("native_filter_before", levels_before)
        R.NF = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(R.NF)
    try:
        s = R.run_replay(spark, lk, rid, "bench", lo, hi, Filter.of(FILTERS[name]), show_progress=True,
                         log=lambda *_: None, out=out, native=native, previous=previous, legacy=legacy,
                         narrow_bodies=narrow_bodies, one_sided=one_sided, manifest=manifest,
                         stored_plain=not levels_before)
    finally:
        R.sort_order, R.NF = packed, nf
    job_s = time.perf_counter() - t
    job_cpu = cpu_seconds(spark) - cpu1
    digest = "-" if os.environ.get("LAKEQ_BENCH_NO_DIGEST") else (
        content_digest(work, s) if by_content else manifest_digest(work, s))
    shutil.rmtree(work / "replays" / rid, ignore_errors=True)
    tag = (name + ("" if native else " (udf)") + (" (prev)" if previous else " (before)" if legacy else "")
           + ("" if narrow_bodies else " (all b.)") + (" (by keys)" if by_keys else "")
           + (" (json)" if manifest == "json" else "") + (" (before)" if levels_before else "")
           + {"two sides": " (2 sides)", "one side, matcher": " (+matcher)"}.get(s.get("plan"), ""))
    ph = s["phases"]
    print(f"{n:>12,} {label:>6} {lake_kind:>7} {tag:>20} {base_rows // 2:>12,} {s['found']:>10,} "
          f"{(100 * s['found'] / max(1, base_rows // 2)) if scan else float('nan'):>6.2f} {base_s:>7.1f} {job_s:>7.1f} "
          f"{job_s / base_s:>6.2f} {ph['select_write']:>7.1f} {ph['summary']:>7.1f} {job_cpu:>7.1f}  {load0} {load1}"
          f"  {digest}",
          flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="1M rows (< 1 min once generated)")
    ap.add_argument("--rows", type=int, default=None)
    ap.add_argument("--dir", default="/tmp/lakeq-replay-bench")
    ap.add_argument("--generate-only", action="store_true")
    ap.add_argument("--filters", default=None,
                    help=f"comma-separated names among {', '.join(FILTERS)} (default: all; with --quick: "
                         f"{','.join(QUICK_FILTERS)})")
    ap.add_argument("--window", choices=["3h", "24h", "both"], default=None,
                    help="default: 3h with --quick, both otherwise")
    ap.add_argument("--compare", action="store_true",
                    help="also run each filter with the job before its counts were observed during the write "
                         "(legacy=True: gzipped manifest, summary read back) just before")
    ap.add_argument("--compare-plan", action="store_true",
                    help="also run each filter with the plan before the one-shuffle pipeline (previous=True, "
                         "with the legacy output) just before")
    ap.add_argument("--compare-udf", action="store_true",
                    help="also run each filter with conditions with the UDF on every row (native=False) just before")
    ap.add_argument("--compare-bodies", action="store_true",
                    help="also run each filter with every body of the slice shuffled (narrow_bodies=False: "
                         "before the bodies were narrowed to the selected messages) just before")
    ap.add_argument("--compare-sides", action="store_true",
                    help="also run each filter with the messages joined with the bodies (one_sided=False: the "
                         "plan before body rows carried their metadata) just before")
    ap.add_argument("--compare-order", action="store_true",
                    help="also run each filter with the manifest's order sorted by its keys alone (the sort "
                         "before replay.sort_order's packed key) just before")
    ap.add_argument("--compare-manifest", action="store_true",
                    help="also run each filter with the manifest written as JSON Lines (before the records of "
                         "lakeq.store.replay_manifest); the digest printed is then the rows' content "
                         "(format-independent), not the bytes'")
    ap.add_argument("--rounds", type=int, default=1,
                    help="with --compare-manifest or --compare-levels: rounds per filter, the order reversed every "
                         "other round "
                         "(round 1: JSON first)")
    ap.add_argument("--compare-levels", metavar="NATIVE_FILTER_PY", default=None,
                    help="also run each filter with conditions with the levels of another native_filter.py (the "
                         "code before) and the `plain` regex on every row; --rounds: pairs, the order reversed "
                         "every other round (round 1: before first)")
    ap.add_argument("--parquet", action="store_true",
                    help="also compact the lake (a hard-linked copy, once) and run each filter over it just after "
                         "the raw lake")
    ap.add_argument("--parquet-only", action="store_true", help="the compacted lake alone")
    ap.add_argument("--layout-before", action="store_true",
                    help="with --parquet / --parquet-only: also the lake compacted as before (one file per hour, "
                         "duplicates kept: the selection shuffles and deduplicates), run just before the bucketed one")
    ap.add_argument("--adversarial", action="store_true",
                    help=f"the lake plus {ADV_ROWS:,} rows per kind whose values hold an emoji, control characters, "
                         "quotes (a hard-linked copy)")
    ap.add_argument("--plan", action="store_true",
                    help="print each lake's file scans in the selection's plan (columns, pushed filters) first")
    ap.add_argument("--work", default=None, help="where manifests are written (default: a temporary folder)")
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
    lake_root = Path(a.dir) / f"n{n}-v2"  # v2: body rows with their metadata (2026-11-28)
    if not (lake_root / "_generated").exists():
        t = time.perf_counter()
        generate(spark, lake_root, n)
        (lake_root / "_generated").write_text(str(n))
        print(f"generated {n:,} messages in {time.perf_counter() - t:.1f} s → {lake_root}")
    lakes = []
    if (a.parquet or a.parquet_only) and a.layout_before:
        lakes.append(("pq-flat", compacted(spark, lake_root, n, a.adversarial, buckets=0)))
    if a.parquet or a.parquet_only:
        lakes.append(("parquet", compacted(spark, lake_root, n, a.adversarial)))
    if a.adversarial:
        adv = lake_root.with_name(lake_root.name + "-adv")
        if not (adv / "raw" / "kind=bodies" / "dt=2026-01-01" / "hour=12" / "part-adversarial.json.gz").exists():
            shutil.rmtree(adv, ignore_errors=True)
            linked_copy(lake_root, adv)
            add_adversarial(adv, n)
        lake_root = adv
    if not a.parquet_only:
        lakes.insert(0, ("raw", lake_root))
    if a.generate_only:
        return 0
    m, b = size_of(lake_root / "raw" / "kind=messages"), size_of(lake_root / "raw" / "kind=bodies")
    print(f"lake: messages {m / 1e6:.1f} MB, bodies {b / 1e6:.1f} MB gzipped "
          f"({m / n:.1f} + {b / n:.1f} bytes per message)")
    names = [x for x in (a.filters or ",".join(QUICK_FILTERS if a.quick else FILTERS)).split(",") if x]
    unknown = [x for x in names if x not in FILTERS]
    if unknown:
        ap.error(f"unknown filter(s) {unknown}; known: {', '.join(FILTERS)}")
    for name in names:
        print(f"filter {name}: {FILTERS[name]}")
    window = a.window or ("3h" if a.quick else "both")
    windows = [w for w in (("3h", T0 + 6 * HOUR, T0 + 9 * HOUR), ("24h", T0, T0 + 24 * HOUR))
               if window in (w[0], "both")]
    work = Path(a.work or tempfile.mkdtemp(prefix="lakeq-replay-bench-out-"))
    # warm-up (not timed): the first Spark job of a session pays the JIT and the file listing cache
    from lakeq_lake import replay as R
    from lakeq_lake.store import Lake

    for kind, root in lakes:
        R.read_slice(spark, Lake(str(root)), "messages", T0, T0 + HOUR).count()
        if a.plan:
            for label, lo, hi in windows:
                for name in names:
                    for scan in scans(spark, root, lo, hi, name):
                        print(f"plan {kind} {label} {name}: {scan}")
    print(f"{'lake rows':>12} {'window':>6} {'lake':>7} {'filter':>20} {'slice rows':>12} {'selected':>10} "
          f"{'sel %':>6} "
          f"{'scan s':>7} {'job s':>7} {'ratio':>6} {'sel+wr':>7} {'summ.':>7} {'job CPU':>7}  "
          f"load before scan, before job (1/5/15 min)  manifest sha256")
    for label, lo, hi in windows:
        for name in names:
            for kind, root in lakes:
                def go(**kw):
                    run(spark, root, n, label, lo, hi, name, work, lake_kind=kind, **kw)
                if a.compare_udf and FILTERS[name] and FILTERS[name].get("conditions"):
                    go(native=False)
                if a.compare_plan:
                    go(previous=True)
                if a.compare:
                    go(legacy=True)
                if a.compare_bodies and FILTERS[name]:
                    go(narrow_bodies=False)
                if a.compare_sides:
                    go(one_sided=False)
                if a.compare_order:
                    go(by_keys=True)
                if a.compare_levels and FILTERS[name] and FILTERS[name].get("conditions"):
                    for r in range(a.rounds):
                        pair = [dict(levels_before=a.compare_levels), {}]
                        for kw in (pair if r % 2 == 0 else pair[::-1]):
                            go(**kw)
                    continue
                if a.compare_manifest:
                    for r in range(a.rounds):
                        for fmt in (("json", "records") if r % 2 == 0 else ("records", "json")):
                            go(manifest=fmt, by_content=True, scan=False)
                    continue
                go()
    spark.stop()
    if not a.work:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
