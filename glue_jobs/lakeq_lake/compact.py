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
   Parquet's row-group min/max statistics let a reader of one topic skip the others;
3. per hour: Athena's ``symlink.txt`` (the new files), then the commit — the manifest
   ``gen=<n>.json``, created only if absent — then the tag ``lakeq-compacted=true`` on its
   newly folded raw objects (S3: a lifecycle rule expires them two days later);
4. garbage: files and manifests no newest manifest names, older than two days, are deleted.

A crash anywhere leaves each hour exactly once for every reader: before the commit the readers
still read the previous generation and the raw keys (Athena may already read the new symlink: the
same rows); the next run plans the hour again with a new generation.
"""
from __future__ import annotations

import secrets
import time
from collections.abc import Callable

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lakeq.lake import compaction as C

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


MAX_HOURS = 24 * 7  # hours a run writes per kind (oldest first): a first run over a long raw/ takes several
ROW_GROUP_BYTES = 16 * 1024 * 1024  # Parquet row groups: several per hour's file, each a narrow range of topics


def compact_kind(spark: SparkSession, lake: Lake, kind: str, at_ms: int | None = None,
                 grace_ms: int = C.GRACE_MS, keep_ms: int = C.KEEP_MS, log=print,
                 show_progress: bool = False, crash: Callable[[str], None] | None = None,
                 max_hours: int = MAX_HOURS) -> dict:
    """Compact the closed hours of ``kind`` (the oldest ``max_hours`` of them); returns
    ``{"hours": [...committed], "conflicts": [...], "deleted": n, "left": n}``. ``crash(step)``
    (tests) is called after ``written``, ``symlink`` and ``committed`` of each hour: raising there
    is a crash at that point."""
    at = at_ms or now_ms()
    manifests = lake.manifests(kind)
    raw_keys = lake.raw_keys(kind)
    work = C.plan(kind, raw_keys, manifests, at, grace_ms)
    left = max(0, len(work) - max_hours)
    work = work[:max_hours]
    committed, conflicts = [], []
    if work:
        run = f"{at}-{secrets.token_hex(3)}"
        out = C.run_prefix(kind, run)
        hours = {(w.day, w.hour) for w in work}
        # exactly what the plan saw: a raw key arriving after the listing above is left for the
        # next run (read again, it would be in this Parquet without this manifest naming it: twice)
        df = _hour_columns(lake.read_kind(spark, kind, stored=True, hours=hours, planned=(manifests, raw_keys)))
        parts = max(1, min(len(work), 64))
        log(f"compact {kind}: {len(work)} hour(s) -> {out}")
        with progress(spark, f"compact {kind}", show_progress):
            (df.repartition(parts, "dt", "hour").sortWithinPartitions("dt", "hour", *SORT[kind])
             .write.mode("errorifexists").option("parquet.block.size", ROW_GROUP_BYTES)
             .partitionBy("dt", "hour").parquet(lake.path(out)))
        files: dict[C.Hour, list[str]] = {}
        for k in lake.list_keys(out):
            p = C.parquet_hour(k)
            if p is not None:
                files.setdefault((p[2], p[3]), []).append(k)
        if crash:
            crash("written")
        for w in work:
            parquet = files.get((w.day, w.hour), [])
            lake.put_text(C.symlink_key(kind, w.day, w.hour), C.symlink_text(lake.root, parquet))
            if crash:
                crash("symlink")
            doc = C.manifest_doc(kind, w.day, w.hour, w.gen, run, parquet, w.raw, now_ms())
            if not lake.create_json(C.manifest_key(kind, w.day, w.hour, w.gen), doc):
                log(f"compact {kind} {w.day} {w.hour}: generation {w.gen} was committed by another run")
                conflicts.append(f"{w.day} {w.hour}")
                continue
            manifests[(w.day, w.hour)] = doc
            committed.append({"dt": w.day, "hour": w.hour, "generation": w.gen, "late": len(w.late),
                              "parquet": len(parquet)})
            if crash:
                crash("committed")
            lake.tag(list(w.late), C.COMPACTED_TAG)
    live = [k for m in manifests.values() for k in m.get("parquet", ())]
    written = lake.modified(f"{C.LAKE}/kind={kind}") | lake.modified(f"{C.MANIFESTS}/kind={kind}")
    trash = C.garbage(kind, written, written, live, at, keep_ms)
    lake.delete(trash)
    log(f"compact {kind}: {len(committed)} hour(s) committed, {len(trash)} unreferenced file(s) deleted"
        + (f", {left} hour(s) left for the next run" if left else ""))
    return {"kind": kind, "hours": committed, "conflicts": conflicts, "deleted": len(trash), "left": left}


def run_compact(spark: SparkSession, lake: Lake, at_ms: int | None = None, grace_ms: int = C.GRACE_MS,
                kinds: tuple[str, ...] = C.KINDS, log=print, show_progress: bool = False,
                max_hours: int = MAX_HOURS) -> dict:
    """The job body: every kind's closed hours (at most ``max_hours`` each)."""
    return {k: compact_kind(spark, lake, k, at_ms, grace_ms, log=log, show_progress=show_progress,
                            max_hours=max_hours) for k in kinds}
