"""The hourly compaction (issue 32.1, docs/guide-lake.md "Compaction"): each closed hour of
``raw/kind=<k>/`` → Parquet under ``lake/kind=<k>/``, committed per hour by a manifest. The
decisions (which hours, which generation, which files are garbage) are
:mod:`lakeq.lake.compaction`'s; here the I/O.

Per kind, one run:

1. plan: the closed hours with raw keys their newest manifest does not name (never compacted, or
   late arrivals) — :func:`lakeq.lake.compaction.plan`;
2. write: those hours as the readers see them (:meth:`Lake.read_kind` ``stored``: the previous
   generation's Parquet + the raw keys not in it) to ``lake/kind=<k>/run=<run>/dt=/hour=/`` — one
   file per hour, sorted by topic (then incarnation, queue, offset / the kind's own order), so
   Parquet's row-group min/max statistics let a reader of one topic skip the others. Messages and
   bodies (:data:`lakeq.lake.compaction.BUCKETED`) are written deduplicated — one row per
   ``(topic, inc, queue, offset)``: every copy of a message is in its ``produced_at`` hour — and as
   ``buckets`` files per hour, ``bucket=NN/`` = ``pmod(hash(queue), buckets)``, each sorted by
   ``(topic, inc, queue, offset)`` (:func:`_deduplicated_buckets`; one shuffle, the one the write
   had already): the replay job reads such hours bucket by bucket with no shuffle and no
   duplicates' drop;
3. per hour: the commit — the manifest ``gen=<n>.json``, created only if absent — then, if it
   was this run's, Athena's ``symlink.txt`` from the committed manifest and the tag
   ``lakeq-compacted=true`` on its newly folded raw objects (S3: a lifecycle rule expires them two
   days later); a run that lost the commit writes neither;
4. the hours past retention (:data:`lakeq.lake.compaction.RETAIN_DAYS` after their day) are
   deleted: symlinks, files, manifests; a symlink older than its hour's newest manifest is
   rewritten from it; files and manifests no newest manifest names, older than two days, are
   deleted (decided from the listed key names, :func:`lakeq.lake.compaction.garbage`).

A run GETs only the newest manifests of the hours with raw keys, of the hours whose garbage needs
one and of the symlinks to repair: bounded by the work, not by the lake's age.

A crash anywhere leaves each hour exactly once for every reader: before the commit the readers
still read the previous generation and the raw keys; the next run plans the hour again with a new
generation, and rewrites a symlink the crash left behind its manifest.
"""
from __future__ import annotations

import secrets
import time
from collections.abc import Callable

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lakeq.lake import compaction as C

from . import native_filter as NF
from .progress import progress
from .store import Lake

# a kind's rows in each Parquet file, in this order: a topic's rows are contiguous
SORT = {
    "messages": ["topic", "inc", "queue", "offset"],
    "bodies": ["topic", "inc", "queue", "offset"],
    "offsets": ["topic", "group", "queue", "at"],
    "members": ["group", "at"],
}


def now_ms() -> int:
    return int(time.time() * 1000)


def _hour_columns(df: DataFrame) -> DataFrame:
    """``dt``, ``hour`` as the layout's strings (``2026-01-01``, ``07``) for ``partitionBy``."""
    return (df.withColumn("dt", F.date_format(F.col("dt"), "yyyy-MM-dd"))
            .withColumn("hour", F.lpad(F.col("hour").cast("string"), 2, "0")))


def _deduplicated_buckets(df: DataFrame, buckets: int, parts: int) -> DataFrame:
    """A bucketed kind's rows (with ``dt``, ``hour``) as they are written: one per message
    (``topic, inc, queue, offset``; ``inc`` null read as 0, as the jobs do), column ``bucket`` =
    ``pmod(hash(queue), buckets)``, partitioned by ``(dt, hour, bucket)`` and sorted by it then
    :data:`SORT` — one shuffle, then a streaming aggregate over the sorted rows (``first`` of a struct
    of the other columns: the rows' order and partitioning stay, so the write sorts nothing
    again). A row without a key (no topic, queue or offset: no reader uses it) is kept as it is."""
    keyed = F.col("topic").isNotNull() & F.col("queue").isNotNull() & F.col("offset").isNotNull()
    keys = ["dt", "hour", "bucket", "topic", "_inc", "queue", "offset", "_odd"]
    row = [c for c in df.columns if c not in ("dt", "hour")]  # the file's columns, in their order
    df = (df.withColumn("bucket", F.expr(f"pmod(hash(queue), {int(buckets)})"))
          .withColumn("_inc", F.coalesce(F.col("inc"), F.lit(0)).cast("long"))
          .withColumn("_odd", F.when(keyed, F.lit(0)).otherwise(F.monotonically_increasing_id())))
    df = df.repartition(parts, "dt", "hour", "bucket").sortWithinPartitions(*keys)
    return (df.groupBy(*keys).agg(F.first(F.struct(*row)).alias("__row"))
            .select("dt", "hour", "bucket", "__row.*"))


MAX_HOURS = 24 * 7  # hours a run writes per kind (oldest first): a first run over a long raw/ takes several
ROW_GROUP_BYTES = 16 * 1024 * 1024  # Parquet row groups: several per hour's file, each a narrow range of topics


def compact_kind(spark: SparkSession, lake: Lake, kind: str, at_ms: int | None = None,
                 grace_ms: int = C.GRACE_MS, keep_ms: int = C.KEEP_MS, log=print,
                 show_progress: bool = False, crash: Callable[[str], None] | None = None,
                 max_hours: int = MAX_HOURS, retain_days: int = C.RETAIN_DAYS,
                 buckets: int = C.BUCKETS) -> dict:
    """Compact the closed hours of ``kind`` (the oldest ``max_hours`` of them); returns
    ``{"hours": [...committed], "conflicts": [...], "deleted": n, "retired": n, "repaired": n,
    "retagged": n, "left": n}``. ``buckets``: files per hour of a bucketed kind (0: one file per
    hour, not deduplicated — the layout before, kept for ``bench/replay.py``'s before/after).
    ``crash(step)`` (tests) is called after ``written``, ``committed`` and
    ``symlink`` of each hour: raising there is a crash at that point."""
    at = at_ms or now_ms()
    raw_keys = lake.raw_keys(kind)
    newest = C.newest_manifests(lake.list_keys(f"{C.MANIFESTS}/kind={kind}"), kind)
    # the newest manifests of the hours with raw keys to plan: not every manifest ever written
    manifests = lake.manifest_docs({h: newest[h] for h in sorted(C.plan_hours(kind, raw_keys, at, grace_ms,
                                                                               retain_days)) if h in newest})
    work = C.plan(kind, raw_keys, manifests, at, grace_ms, retain_days)
    left = max(0, len(work) - max_hours)
    work = work[:max_hours]
    committed, conflicts = [], []
    # raw keys a committed manifest names that outlived their tag's expiry: the tag never came
    retag = C.untagged(raw_keys, manifests, at, keep_ms)
    if work:
        run = f"{at}-{secrets.token_hex(3)}"
        out = C.run_prefix(kind, run)
        hours = {(w.day, w.hour) for w in work}
        # exactly what the plan saw: a raw key arriving after the listing above is left for the
        # next run (read again, it would be in this Parquet without this manifest naming it: twice)
        df = _hour_columns(lake.read_kind(spark, kind, stored=True, hours=hours, planned=(manifests, raw_keys)))
        if kind == "bodies":  # the replay filter's `plain` test, once per message (schemas.DERIVED)
            df = df.withColumn("plain", NF.stored_plain(F.col("properties")))
        parts = max(1, min(len(work), 64))
        nb = buckets if kind in C.BUCKETED else 0
        log(f"compact {kind}: {len(work)} hour(s) -> {out}")
        with progress(spark, f"compact {kind}", show_progress):
            if nb:
                w = (_deduplicated_buckets(df, nb, max(1, min(len(work) * nb, 64)))
                     .write.partitionBy("dt", "hour", "bucket"))
            else:
                w = (df.repartition(parts, "dt", "hour").sortWithinPartitions("dt", "hour", *SORT[kind])
                     .write.partitionBy("dt", "hour"))
            w.mode("errorifexists").option("parquet.block.size", ROW_GROUP_BYTES).parquet(lake.path(out))
        files: dict[C.Hour, list[str]] = {}
        for k in lake.list_keys(out):
            p = C.parquet_hour(k)
            if p is not None:
                files.setdefault((p[2], p[3]), []).append(k)
        if crash:
            crash("written")
        for w in work:
            parquet = files.get((w.day, w.hour), [])
            doc = C.manifest_doc(kind, w.day, w.hour, w.gen, run, parquet, w.raw, now_ms(), nb)
            if not lake.create_json(C.manifest_key(kind, w.day, w.hour, w.gen), doc):
                # the hour's symlink is the winner's to write: this run's files are garbage
                log(f"compact {kind} {w.day} {w.hour}: generation {w.gen} was committed by another run")
                conflicts.append(f"{w.day} {w.hour}")
                continue
            manifests[(w.day, w.hour)] = doc
            committed.append({"dt": w.day, "hour": w.hour, "generation": w.gen, "late": len(w.late),
                              "parquet": len(parquet)})
            if crash:
                crash("committed")
            # Athena's view, from the committed manifest (a crash before it: the next run repairs it)
            lake.put_text(C.symlink_key(kind, w.day, w.hour), C.symlink_text(lake.root, doc["parquet"]))
            if crash:
                crash("symlink")
            lake.tag(list(w.late), C.COMPACTED_TAG)
    if retag:
        lake.tag(retag, C.COMPACTED_TAG)
    # what is there now (listings, no reads): the hours past retention, symlinks to repair, garbage
    manifest_times = lake.modified(f"{C.MANIFESTS}/kind={kind}")
    symlink_times = lake.modified(f"{C.SYMLINKS}/kind={kind}")
    written = lake.modified(f"{C.LAKE}/kind={kind}") | manifest_times
    retire = C.retired(kind, [*symlink_times, *written], at, retain_days)
    gone = {k for keys in retire for k in keys}
    for keys in retire:  # symlinks, files, manifests: in this order
        lake.delete(keys)
    manifest_times = {k: t for k, t in manifest_times.items() if k not in gone}
    written = {k: t for k, t in written.items() if k not in gone}
    newest = C.newest_manifests(manifest_times, kind)

    def current(hours) -> dict[C.Hour, dict]:
        """The newest manifest of each hour: this run's (committed or read), else read now."""
        have = {h: manifests[h] for h in hours if h in manifests
                and C.manifest_key(kind, h[0], h[1], int(manifests[h]["generation"])) == newest[h]}
        return have | lake.manifest_docs({h: newest[h] for h in sorted(hours) if h not in have})

    stale = C.stale_symlinks(kind, manifest_times, symlink_times)
    for h, doc in current(stale).items():
        lake.put_text(C.symlink_key(kind, *h), C.symlink_text(lake.root, doc.get("parquet", ())))
    if stale:
        log(f"compact {kind}: {len(stale)} symlink(s) older than their manifest rewritten")
    trash = C.garbage(kind, written, at, keep_ms, current(C.doubtful_hours(kind, written, at, keep_ms)))
    lake.delete(trash)
    log(f"compact {kind}: {len(committed)} hour(s) committed, {len(trash)} unreferenced file(s) deleted"
        + (f", {len(gone)} object(s) past retention deleted" if gone else "")
        + (f", {len(retag)} raw object(s) tagged again" if retag else "")
        + (f", {left} hour(s) left for the next run" if left else ""))
    return {"kind": kind, "hours": committed, "conflicts": conflicts, "deleted": len(trash), "left": left,
            "retired": len(gone), "repaired": len(stale), "retagged": len(retag)}


def run_compact(spark: SparkSession, lake: Lake, at_ms: int | None = None, grace_ms: int = C.GRACE_MS,
                kinds: tuple[str, ...] = C.KINDS, log=print, show_progress: bool = False,
                max_hours: int = MAX_HOURS, buckets: int = C.BUCKETS) -> dict:
    """The job body: every kind's closed hours (at most ``max_hours`` each)."""
    return {k: compact_kind(spark, lake, k, at_ms, grace_ms, log=log, show_progress=show_progress,
                            max_hours=max_hours, buckets=buckets) for k in kinds}
