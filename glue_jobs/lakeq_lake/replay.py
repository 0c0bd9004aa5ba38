"""The replay job's selection (issue 18.1, docs/design.md "Replay"): which archived messages a
replay copies, in which order, with their bodies.

* :func:`read_slice` — ``raw/kind=<messages|bodies>/`` pruned to the hour partitions of
  ``[from, to)`` (a filter on the partition columns only: Spark lists and reads those folders
  only) and to the columns the selection needs. Messages are read with :data:`MESSAGES_RAW`: the
  ``properties`` object as its JSON text, so the filter sees the typed values (``1``, ``"1"``,
  ``true``) the archiver wrote, not the lake schema's ``map<string,string>``.
* :func:`select` — DataFrames in, a DataFrame out (with a filter it runs the selection first,
  :func:`_bodies_of_selected`): the topic, ``from <= produced_at < to``,
  duplicates of redelivered batches dropped (``topic, inc, queue, offset``: :data:`KEYS`), the filter — tags natively
  (``arrays_overlap``), each required field natively as a substring of the properties' text, the
  levels natively on plain properties texts (:mod:`.native_filter`, proved equal to the matcher by
  tests), and the matcher layer itself on the other rows only (a Python UDF calling
  :meth:`lakeq.replay.rules.Filter.json_predicate`: the subscriptions' semantics by construction) —
  joined with the bodies, ordered by ``queue, inc, offset`` — one shuffle per side (by ``queue``).
* :func:`run_replay` — the job body: select, write the manifest (JSON Lines, parts in
  ``(queue, inc, offset)`` order) and its summary under ``replays/<id>/``.
"""
from __future__ import annotations

import atexit
import importlib
import json
import os
import shutil
import tempfile
import time
import zipfile

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.observation import Observation
from pyspark.sql.types import ArrayType, BooleanType, LongType, StringType, StructField, StructType

from lakeq.contract.validation import QUEUES_MAX
from lakeq.replay.rules import Filter, field_needles, hour_bounds
from lakeq.store import replay_manifest as RECORDS

from . import native_filter as NF
from . import schemas
from .progress import progress
from .schemas import incarnation
from .store import Lake

MESSAGES_RAW = StructType([
    StructField("topic", StringType()), StructField("queue", LongType()),
    StructField("offset", LongType()), StructField("id", StringType()),
    StructField("key", StringType()), StructField("tags", ArrayType(StringType())),
    StructField("properties", StringType()),  # the JSON object's text: the values keep their JSON types
    StructField("produced_at", LongType()),
    StructField("inc", LongType()),  # the topic's incarnation (lakeq.lake.archive); null (0) in older rows
])

# kind=bodies as the replay reads it: schemas.BODIES (the message's metadata, archived with its body
# since 2026-11-28: a replay then reads this kind alone, select_one_sided) without the stream's seq,
# with the compaction's derived columns (schemas.DERIVED: `plain`, null on raw rows) — which the
# selection reads instead of the regex (_narrowed; until 2026-12-08 this schema left it out, so no
# job ever read it: docs/benchmarks.md "The plain test read back")
BODIES = StructType([f for f in schemas.STORED["bodies"].fields if f.name != "seq"])

MANIFEST_COLUMNS = ["queue", "offset", "id", "key", "tags", "properties", "produced_at", "body", "claim", "inc"]
# A message of the lake is (topic, inc, queue, offset): a topic deleted and made again (SQS DeleteQueue,
# then CreateQueue) starts its offsets at 0 again in its next incarnation ``inc``; per queue the
# manifest is in (inc, offset) order, which is produce order.
KEYS = ["queue", "inc", "offset"]
# the column carrying a row's `plain` test (native_filter.plain) from the native filter to the write
PLAIN = "__lakeq_plain"


# order_key()'s layout: the queue's 6 bits (QUEUES_MAX = 64), then the incarnation's 9, the offset's 48
_INC_BITS, _OFFSET_BITS = 9, 48
assert (QUEUES_MAX - 1).bit_length() + _INC_BITS + _OFFSET_BITS <= 63
_INC_TOP, _OFFSET_TOP = (1 << _INC_BITS) - 1, (1 << _OFFSET_BITS) - 1


def order_key() -> F.Column:
    """One ``bigint`` never decreasing in :data:`KEYS` order (``queue, inc, offset``, ascending,
    nulls first): ``queue << 57 | inc << 48 | offset`` while ``0 <= queue <
    64``, ``0 <= inc < 511`` and ``0 <= offset < 2^48`` — distinct for distinct keys, so a sort by
    ``[order_key(), *KEYS]`` (:func:`sort_order`) decides every comparison on the sort's 8-byte
    prefix, the row is never read (by :data:`KEYS` alone the prefix is the queue, the same for
    every row of a queue: each comparison reads both rows' ``inc`` and ``offset`` from the sort's
    memory). Outside those ranges it saturates (a queue below 0 or null: the smallest long, 64 or
    more: the largest; an ``inc`` below 0 or null: the queue's smallest value, 511 or more: its
    largest; an offset below 0 or null, or over 2^48: its end of the range), still never decreasing — such
    rows tie and :data:`KEYS` decides between them: the order is exactly :data:`KEYS`' whatever the values."""
    q, i, o = F.col("queue").cast("long"), F.col("inc").cast("long"), F.col("offset").cast("long")
    off = F.coalesce(F.least(F.greatest(o, F.lit(0)), F.lit(_OFFSET_TOP)), F.lit(0))
    low = (F.when(i.isNull() | (i < 0), F.lit(0))
           .when(i >= _INC_TOP, F.lit((_INC_TOP << _OFFSET_BITS) | _OFFSET_TOP))
           .otherwise(F.shiftleft(i, _OFFSET_BITS).bitwiseOR(off)))
    return (F.when(q.isNull() | (q < 0), F.lit(-(1 << 63)))
            .when(q >= QUEUES_MAX, F.lit((1 << 63) - 1))
            .otherwise(F.shiftleft(q, _INC_BITS + _OFFSET_BITS).bitwiseOR(low)))


def sort_order() -> list:
    """The manifest's order (:data:`KEYS`) as a sort whose comparisons are the prefix's:
    :func:`order_key` first."""
    return [order_key(), *KEYS]


_SHIPPED: dict[str, str] = {}
_SHIP_DIR: str | None = None


def _ship_dir() -> str:
    """One temporary folder per process for the shipped zips, removed when the process exits
    (Spark serves an added file from its path for the whole session; a folder per call was left
    behind by every run: ~370 KB each, hundreds under /tmp after a day of test runs)."""
    global _SHIP_DIR
    if _SHIP_DIR is None:
        _SHIP_DIR = tempfile.mkdtemp(prefix="lakeq-ship-")
        atexit.register(shutil.rmtree, _SHIP_DIR, True)
    return _SHIP_DIR


def ship(spark: SparkSession, *packages: str) -> None:
    """Make ``packages`` importable by the Python workers (the filter's UDF imports the matcher):
    one zip of each package's ``.py`` files, ``addPyFile``d once per process. Locally the workers do
    not see the driver's ``sys.path``; on Glue the executors do not see the bundle unpacked on the
    driver; a zip handed to Spark reaches both."""
    for name in packages:
        if name in _SHIPPED:
            continue
        root = os.path.dirname(importlib.import_module(name).__file__)
        path = os.path.join(_ship_dir(), f"{name}.zip")
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
            for dirpath, _, files in os.walk(root):
                for f in sorted(files):
                    if f.endswith(".py"):
                        full = os.path.join(dirpath, f)
                        z.write(full, os.path.join(name, os.path.relpath(full, root)))
        spark.sparkContext.addPyFile(path)
        _SHIPPED[name] = path


def _keep_udf(levels_json: list[str], tags: list[str]):
    """The filter as a Python UDF; each worker builds the matcher's index once (not pickled)."""
    cache: dict = {}

    def keep(props, row_tags):
        pred = cache.get("p")
        if pred is None:
            from lakeq.replay.rules import Filter as _F

            pred = cache["p"] = _F(tuple(levels_json), tuple(tags)).json_predicate()
        return pred(props, row_tags)
    return F.udf(keep, BooleanType())


def manifest_prefix(replay_id: str) -> str:
    return f"replays/{replay_id}/manifest"


def summary_key(replay_id: str) -> str:
    return f"replays/{replay_id}/selection.json"


def read_slice(spark: SparkSession, lake: Lake, kind: str, from_ms: int, to_ms: int) -> DataFrame:
    """The ``kind`` (``messages`` / ``bodies``) rows of the hour partitions overlapping
    ``[from_ms, to_ms)``: the committed Parquet of the compacted hours and the raw rows no
    committed manifest names (:meth:`Lake.read_kind`, ``stored``: ``properties`` as its JSON text);
    a lake not compacted in that range is read as raw, pruned by a filter on the partition columns
    (Spark lists and reads those folders only). Empty when nothing was archived."""
    schema = MESSAGES_RAW if kind == "messages" else BODIES
    lo, hi = hour_bounds(from_ms, to_ms)
    df = lake.read_kind(spark, kind, lo, hi, stored=True)
    return df.select(*schema.fieldNames())


def read_slice_buckets(spark: SparkSession, lake: Lake, kind: str, from_ms: int,
                       to_ms: int) -> tuple[int, DataFrame] | None:
    """:func:`read_slice` when every hour of ``[from_ms, to_ms)`` is compacted and bucketed, with
    no late raw key (:meth:`Lake.read_buckets`): ``(buckets, rows)``, ``rows`` in ``buckets``
    partitions, partition ``b`` holding the queues of hash bucket ``b`` (Spark's hash partitioning
    of ``queue`` into ``buckets``), each message once. None otherwise."""
    schema = MESSAGES_RAW if kind == "messages" else BODIES
    lo, hi = hour_bounds(from_ms, to_ms)
    got = lake.read_buckets(spark, kind, lo, hi)
    return None if got is None else (got[0], got[1].select(*schema.fieldNames()))


# set by select() on its session: see its docstring
SESSION_CONF = {"spark.sql.requireAllClusterKeysForCoPartition": "false",
                "spark.sql.codegen.aggregate.sortAggregate.enabled": "true",
                # generated classes named alike, so the same code is compiled once: a selection over
                # compacted buckets has one scan and filter per bucket (Lake.read_buckets), which
                # were 8 compilations of the same filter (1M `designed`: 7.4 -> 5.4 CPU-s)
                "spark.sql.codegen.useIdInClassName": "false"}


def _with_tags(m: DataFrame, flt: Filter, unknown: F.Column | None = None) -> DataFrame:
    """``m``'s rows carrying one of the filter's tags (all of them when it names none), and the
    ``unknown`` ones (see :func:`_narrowed`)."""
    if not flt.tags:
        return m
    return m.where(_or(unknown, F.arrays_overlap(F.coalesce(F.col("tags"), F.array().cast("array<string>")),
                                                 F.array(*[F.lit(t) for t in flt.tags]))))


def _or(unknown: F.Column | None, cond: F.Column) -> F.Column:
    return cond if unknown is None else unknown | cond


def _needles(flt: Filter):
    """The substring pre-filter: per level, one of its needles must be in the properties text (a
    necessary condition on every row)."""
    props = F.coalesce(F.col("properties"), F.lit(""))
    needles = F.lit(True)
    for alternatives in field_needles(flt):
        cond = props.contains(alternatives[0])
        for nd in alternatives[1:]:
            cond = cond | props.contains(nd)
        needles = needles & cond
    return needles


def _narrowed(messages: DataFrame, topic: str, from_ms: int, to_ms: int, flt: Filter, native: bool,
              extra: tuple[str, ...] = (), unknown: F.Column | None = None, stored_plain: bool = True):
    """The slice's message rows of ``topic`` and ``[from, to)`` that may match ``flt``: tags
    natively, the substring pre-filter, and (``native``) the native levels on plain texts — every
    test that needs no shuffle. Returns the rows (with the ``extra`` columns too and, ``native``
    with levels, :data:`PLAIN`) and the ``plain`` test (None without levels; ``native``: that
    column). ``unknown``: rows the filter cannot judge (body rows archived
    without their metadata) and lets through, for :func:`run_replay` to count them.
    ``stored_plain`` and rows with the compaction's ``plain`` column (compacted bodies,
    :func:`.native_filter.plain_of`): the test read from it where it is this version's, the regex
    on the other rows only; False: the regex on every row (the code before, for the benchmark)."""
    stored = "plain" if stored_plain and flt.conditions and "plain" in messages.columns else None
    m = (messages.where((F.col("topic") == topic) & (F.col("produced_at") >= from_ms)
                        & (F.col("produced_at") < to_ms) & F.col("offset").isNotNull() & F.col("queue").isNotNull())
         .select("topic", "queue", incarnation(), "offset", "id", "key", "tags", "properties", "produced_at", *extra,
                 *([stored] if stored else [])))
    m = _with_tags(m, flt, unknown)
    if not flt.conditions:
        return m, None
    # the substring pre-filter first (cheap, and a necessary condition on every row: a single `code`
    # leaves the regexes a handful of rows), then the native levels on plain texts (a null text is
    # plain: an unknown row stays on the native side)
    m = m.where(_or(unknown, _needles(flt)))
    if not native:
        return (m.drop(stored) if stored else m), NF.plain(F.col("properties"))
    # `plain` once per row, in with_levels' projection, carried on as a column (PLAIN) to the UDF
    # branch's split and the write's `not_plain` count instead of the regex again on each
    m, keep, tokens = NF.with_levels(m, "properties", flt.levels, plain_as=PLAIN,
                                     **({"stored": stored} if stored else {}))
    plain = F.col(PLAIN)
    return m.where(_or(unknown, ~plain | keep)).drop(*tokens, *([stored] if stored else [])), plain


def select(messages: DataFrame, bodies: DataFrame, topic: str, from_ms: int, to_ms: int,
           flt: Filter, parts: int | None = None, native: bool = True, previous: bool = False,
           narrow_bodies: bool = True) -> DataFrame:
    """The manifest rows (:data:`MANIFEST_COLUMNS`) of a replay: ``parts`` partitions (default
    ``spark.sql.shuffle.partitions``; hash of ``queue``: a queue's rows are in one partition), each
    sorted by :data:`KEYS` ``queue, inc, offset`` — the order the copier needs is per queue, so no global sort. A
    message whose body row is missing keeps ``body`` null (the copier counts it failed).

    **One shuffle per side**: the narrowed messages and the slice's bodies are each hash-partitioned
    by ``queue`` into the same ``parts`` and sorted by ``(queue, offset)`` once; the duplicates'
    drop (a streaming aggregate over sorted rows), the left join (a merge of co-partitioned sorted
    sides) and the output order then need no other exchange or sort. The session's
    ``spark.sql.requireAllClusterKeysForCoPartition`` is set false here: with its default Spark
    re-shuffles both sides by ``(queue, offset)`` for the join (a partitioning by ``queue`` alone
    satisfies the join, but Spark asks for every key by default) — and the order per part would
    then need a third exchange. ``spark.sql.codegen.aggregate.sortAggregate.enabled`` (Spark 3.3+,
    off by default) compiles the duplicates' drop (``first`` over strings is a sort-based
    aggregate): about a third of the merge stage's CPU on the 1M lake (docs/benchmarks.md).

    The filter: tags natively; the levels natively (:mod:`.native_filter`) on every row whose
    properties text is plain, the matcher UDF on the others only — after the duplicates' drop, as
    two branches over the one (reused) exchange, then re-partitioned by ``queue`` (the union loses
    the partitioning: one more exchange of the selected messages' metadata, never of bodies).
    ``native=False``: the UDF decides every row the substring pre-filter lets through.
    A filtered replay (``narrow_bodies``, the default) computes its selected messages first and
    narrows the bodies to them before their shuffle (:func:`_bodies_of_selected`): ``select`` then
    runs Spark jobs itself (the checkpoint and its count); its blocks are freed by Spark's
    ContextCleaner once the returned frame is garbage-collected. ``narrow_bodies=False``: every body
    of the slice is shuffled (the plan before; kept for the benchmark's before/after).
    ``previous=True``: the plan before the one-shuffle pipeline (kept for the benchmark's
    before/after): a dedup shuffle per side, the join's shuffle by ``(queue, offset)``, a final
    repartition by ``queue``."""
    if previous:
        return _select_previous(messages, bodies, topic, from_ms, to_ms, flt, parts, native)
    spark = messages.sparkSession
    for k, val in SESSION_CONF.items():
        spark.conf.set(k, val)
    parts = parts or int(spark.conf.get("spark.sql.shuffle.partitions"))
    m = _deduplicated_and_filtered(*_narrowed(messages, topic, from_ms, to_ms, flt, native), flt, parts, native)
    b = (bodies.where((F.col("topic") == topic) & (F.col("produced_at") >= from_ms) & (F.col("produced_at") < to_ms)
                      & F.col("offset").isNotNull() & F.col("queue").isNotNull())
         .select("queue", incarnation(), "offset", "body", "claim"))
    if narrow_bodies and (flt.conditions or flt.tags):
        m, b = _bodies_of_selected(m, b)
    b = (b.repartition(parts, "queue")
         .sortWithinPartitions(*KEYS))
    b = _deduplicated(b)
    j = m.join(b, KEYS, "left").select(*MANIFEST_COLUMNS)
    return j.sortWithinPartitions(*KEYS)


def _deduplicated(df: DataFrame) -> DataFrame:
    """``df`` (partitioned by ``queue``, sorted by :data:`KEYS`) with one row per key: a streaming
    aggregate taking each key's first row whole (``first`` of one struct of the other columns), so
    the partitioning and order stay. ``dropDuplicates(KEYS)`` is the same aggregate with one
    ``first`` per column, which cost ~40 % more of the merge stage's CPU on the 10M lake (20 against
    12 task-seconds over the sort, docs/benchmarks.md "Under the line"); the columns come out keys first."""
    others = [c for c in df.columns if c not in KEYS]
    return df.groupBy(*KEYS).agg(F.first(F.struct(*others)).alias("__row")).select(*KEYS, "__row.*")


def _deduplicated_and_filtered(m: DataFrame, plain, flt: Filter, parts: int, native: bool,
                               unknown: F.Column | None = None, bucketed: bool = False) -> DataFrame:
    """:func:`_narrowed`'s rows hash-partitioned by ``queue`` into ``parts``, sorted by :data:`KEYS`,
    duplicates dropped, and the rest of the filter (the UDF on what the native test cannot judge):
    one shuffle, or two with a UDF branch (the union loses the partitioning). ``unknown`` rows
    (:func:`_narrowed`) are kept. ``bucketed`` (rows of :func:`read_slice_buckets`: already
    partitioned by ``queue``, each message once) and no UDF branch: only sorted, no shuffle."""
    if bucketed and plain is None:
        return m.drop("topic").sortWithinPartitions(*sort_order())
    m = _deduplicated(m.drop("topic").repartition(parts, "queue").sortWithinPartitions(*KEYS))
    if plain is not None:
        keep = _keep_udf(list(flt.conditions), list(flt.tags))
        udf_rows = m.where(_or(unknown, keep(F.col("properties"), F.col("tags"))))
        m = udf_rows if not native else m.where(plain).unionByName(udf_rows.where(~plain))
        m = m.repartition(parts, "queue").sortWithinPartitions(*KEYS)
    return m


def _without_metadata() -> F.Column:
    """A ``kind=bodies`` row archived before body rows carried their message's metadata (2026-11-28):
    no ``properties`` (the archiver writes ``{}`` for a message without any)."""
    return F.col("properties").isNull()


def select_one_sided(bodies: DataFrame, topic: str, from_ms: int, to_ms: int, flt: Filter,
                     parts: int | None = None, native: bool = True, matcher: bool = True,
                     keep_plain: bool = False, bucketed: bool = False, stored_plain: bool = True) -> DataFrame:
    """:func:`select` over the ``kind=bodies`` rows alone, for rows archived with their metadata
    (since 2026-11-28, ``lakeq.lake.archive.body_row``): the same filter, duplicates' drop and order,
    with no ``kind=messages`` side — one dataset read, one shuffle, no join.

    Rows the native filter cannot judge are let through by every test, so they reach the output,
    where :func:`run_replay` counts them (in the write's own observation: :func:`_unjudged`) and
    then selects again another way: a row without metadata (:func:`_without_metadata`: archived
    before), and — ``matcher=False`` — a row whose properties text is not plain
    (:func:`.native_filter.plain`). ``matcher=True``: those go to the matcher UDF as in
    :func:`select`, a branch whose union with the native rows loses the partitioning — a second
    shuffle, here of the selected rows *with their bodies*: ``anything-but`` at 10M took 84.8 s
    with it and ~40 % less without (docs/benchmarks.md "One side"), hence the first pass without.
    ``native=False``: the UDF judges every row the substring pre-filter lets through.
    ``keep_plain``: the output also has the :data:`PLAIN` column when the native filter computed it
    (for :func:`_unjudged`; the caller drops it before writing). ``bucketed``: ``bodies`` is
    :func:`read_slice_buckets`' (``parts`` its buckets): without the matcher's branch the plan
    has no exchange at all — the narrow filters, then a sort per bucket (the hours' files are each
    sorted, not the bucket's concatenation of them). ``stored_plain``: :func:`_narrowed`'s."""
    spark = bodies.sparkSession
    for k, val in SESSION_CONF.items():
        spark.conf.set(k, val)
    parts = parts or int(spark.conf.get("spark.sql.shuffle.partitions"))
    unknown = _without_metadata()
    m, plain = _narrowed(bodies, topic, from_ms, to_ms, flt, native, ("body", "claim"), unknown, stored_plain)
    if native and not matcher:
        plain = None  # (no UDF branch: the rows not plain went through the native test unjudged)
    m = _deduplicated_and_filtered(m, plain, flt, parts, native, unknown, bucketed)
    extra = [PLAIN] if keep_plain and PLAIN in m.columns else []
    # (the order _deduplicated_and_filtered sorted by: this sort is then no sort in the plan)
    order = sort_order() if bucketed and plain is None else KEYS
    return m.select(*MANIFEST_COLUMNS, *extra).sortWithinPartitions(*order)


def _unjudged(flt: Filter, columns: list[str]) -> list[F.Column]:
    """What :func:`run_replay` observes on a one-sided selection's output (whose ``columns``): the
    rows without metadata (``without_metadata``) and, when the filter has levels, the rows whose
    properties text is not plain (``not_plain``; a row without metadata counts in the first only: a
    null text is plain) — from the :data:`PLAIN` column when the output carries it (an observed
    metric is evaluated row by row outside the generated code: the regex again there cost more
    than the rest of the observation), else by the regex."""
    out = [F.sum(_without_metadata().cast("long")).alias("without_metadata")]
    if flt.conditions:
        plain = F.col(PLAIN) if PLAIN in columns else NF.plain(F.col("properties"))
        out.append(F.sum((~plain).cast("long")).alias("not_plain"))
    return out


SEMI_JOIN_KEYS_MAX = 2_000_000  # selected messages up to which the bodies are narrowed first


def _bodies_of_selected(m: DataFrame, b: DataFrame) -> tuple[DataFrame, DataFrame]:
    """A filtered replay's selected messages ``m`` (partitioned by ``queue`` and sorted) and the
    bodies ``b`` to join: ``m`` computed once and kept (``localCheckpoint``, memory then disk), and when it
    holds at most :data:`SEMI_JOIN_KEYS_MAX` rows, ``b`` narrowed to their ``(queue, offset)``
    before its shuffle (a left semi-join with the keys broadcast: tens of bytes a key) — a
    5 % filter then shuffles and sorts 5 % of the bodies, not all of them (docs/benchmarks.md,
    "Bodies of the selected only"). Over the limit ``b`` is unchanged; the kept ``m`` costs one
    write of the selected metadata."""
    # With adaptive execution on (Spark's default, and Glue's) the checkpoint does not keep the
    # partitioning and order (an adaptive plan reports none), so the join shuffles and sorts the
    # selection once more: small for a selective filter. Turning adaptive execution off for the
    # checkpoint's job keeps them, but made the 10M `designed` job 67.4 s instead of 49.7 s
    # (docs/benchmarks.md, "Idle 10M runs"), so it stays on.
    m = m.localCheckpoint(eager=True)
    if m.count() <= SEMI_JOIN_KEYS_MAX:
        b = b.join(F.broadcast(m.select(*KEYS)), KEYS, "left_semi")
    return m, b


def _select_previous(messages: DataFrame, bodies: DataFrame, topic: str, from_ms: int, to_ms: int,
                     flt: Filter, parts: int | None = None, native: bool = True) -> DataFrame:
    """:func:`select`'s plan before the one-shuffle pipeline (``previous=True``; for the benchmark's
    before/after): the duplicates' drop as its own shuffle by ``(topic, queue, offset)`` per side
    (two sort-based aggregates each), the UDF branch over that shuffle, the join's shuffle by
    ``(queue, offset)`` and a final repartition by ``queue`` with its sort — five exchanges of which
    three carry the bodies."""
    m = (messages.where((F.col("topic") == topic) & (F.col("produced_at") >= from_ms)
                        & (F.col("produced_at") < to_ms) & F.col("offset").isNotNull())
         .select("topic", "queue", incarnation(), "offset", "id", "key", "tags", "properties", "produced_at"))
    m = _with_tags(m, flt)
    needles = _needles(flt)
    if not flt.conditions:
        m = m.dropDuplicates(["topic", *KEYS])
    elif not native:
        keep = _keep_udf(list(flt.conditions), list(flt.tags))
        m = m.where(needles).where(keep(F.col("properties"), F.col("tags")))
        m = m.dropDuplicates(["topic", *KEYS])
    else:
        plain = NF.plain(F.col("properties"))
        # before the shuffle: the substring pre-filter first (cheap, and a necessary condition on
        # every row: a single `code` leaves the regexes a handful of rows), then the native levels
        m = m.where(needles).where(~plain | NF.native_filter(F.col("properties"), flt.levels))
        m = m.dropDuplicates(["topic", *KEYS])
        keep = _keep_udf(list(flt.conditions), list(flt.tags))
        m = m.where(plain).unionByName(m.where(~plain).where(keep(F.col("properties"), F.col("tags"))))
    b = (bodies.where((F.col("topic") == topic) & (F.col("produced_at") >= from_ms) & (F.col("produced_at") < to_ms))
         .select("queue", incarnation(), "offset", "body", "claim").dropDuplicates(KEYS))
    j = m.join(b, KEYS, "left").select(*MANIFEST_COLUMNS)
    j = j.repartition(parts, "queue") if parts else j.repartition("queue")
    return j.sortWithinPartitions(*KEYS)


def run_replay(spark: SparkSession, lake: Lake, replay_id: str, topic: str, from_ms: int, to_ms: int,
               flt: Filter, show_progress: bool = False, log=print, out: Lake | None = None,
               native: bool = True, previous: bool = False, legacy: bool = False,
               narrow_bodies: bool = True, one_sided: bool = True, dry_run: bool = False,
               manifest: str = "records", stored_plain: bool = True) -> dict:
    """Select and write ``replays/<id>/manifest/part-*.txt`` (records, :mod:`lakeq.store.replay_manifest`:
    each string's bytes after a header of lengths, nothing escaped; each part holds whole queues,
    sorted by ``queue, inc, offset``) in one pass over the slice, then
    ``replays/<id>/selection.json``: ``found``, ``missing_bodies``, per part its key and row count
    (the copier's cursor is a position in the parts' order), per queue its count and ``sample``
    (:func:`manifest_sample`: the first :data:`SAMPLE_MAX` rows in the copier's order, what a dry
    run shows). Returns the
    summary (``seconds``: the whole job; ``phases``: ``select_write`` and ``summary``, seconds).
    ``out``: where ``replays/<id>/`` is written (default: ``lake`` itself; the benchmark
    keeps its generated lake read-only). ``native``, ``previous``, ``narrow_bodies``: :func:`select`'s.

    The counts come from the write itself (:func:`_observed`: ``DataFrame.observe`` aggregates over
    the rows as they are written, per queue; each queue's part is its hash partition, checked
    against the files written), so the manifest is never read back; when that check fails (it
    never has) the summary falls back to reading the manifest (:func:`_summary_by_reading`).
    **One side first** (``one_sided``, the default): the slice's ``kind=bodies`` rows carry their
    message's metadata (since 2026-11-28), so the job selects from them alone
    (:func:`select_one_sided`: one dataset read and shuffled, no join, the native filter only),
    counting in the write's observation the rows it could not judge (:func:`_unjudged`): with rows
    archived without metadata it selects again the two-sided way (:func:`select`, the messages
    joined), with rows whose properties are not plain it selects one-sided again with the matcher
    UDF branch, each time overwriting the manifest — such a replay pays two passes. The summary's
    ``plan`` says which one wrote the manifest (``one side``, ``one side, matcher``, ``two sides``).
    ``one_sided=False``, ``narrow_bodies=False`` or ``legacy``: the two-sided selection only.
    ``stored_plain=False``: the `plain` regex on every row even where the compaction stored its
    answer (the code before; ``bench/replay.py --compare-plain``).
    ``legacy=True`` (also implied by ``previous``): the job's output as it was before — gzipped
    parts (``.json.gz``) and the summary read back from them — kept for ``bench/replay.py``'s
    before/after.

    ``dry_run``: the same selection, but no manifest is written — the pass that would write it
    collects each partition's first :data:`SAMPLE_MAX` rows instead (:func:`_dry_pass`: their
    place in the copier's order), its observation counting every row; ``selection.json`` then
    holds ``found``, ``missing_bodies``, ``queues`` and ``sample``, no ``parts``, ``dry_run``
    true.

    ``manifest="json"``: the parts as JSON Lines (``part-*.json``, Spark's JSON writer), the format
    before 2026-12-07, kept for ``bench/replay.py --compare-manifest`` (the copier reads both)."""
    t0 = time.perf_counter()
    legacy = legacy or previous
    if manifest not in ("records", "json"):
        raise ValueError(f"unknown manifest format {manifest!r}")
    if flt.conditions:
        ship(spark, "matcher", "lakeq")
    if dry_run and legacy:
        raise ValueError("a dry run has no legacy output")
    dest = out or lake
    firsts: list = []
    where = dest.path(manifest_prefix(replay_id))
    parts = int(spark.conf.get("spark.sql.shuffle.partitions"))
    plan = "one side" if one_sided and not legacy and narrow_bodies else "two sides"
    if plan == "one side":
        # the native filter alone first (each row the native test cannot judge is let through and
        # counted), then, only if some were: the matcher UDF for the rows not plain, or both sides
        # joined for rows archived without metadata
        for matcher in (False, True):
            with progress(spark, f"replay {replay_id}: select + write (one side)", show_progress):
                # whole compacted hours: read bucket by bucket, no shuffle, no duplicates' drop
                # (not for the matcher's branch: its union would lose the buckets)
                buckets = None if matcher else read_slice_buckets(spark, lake, "bodies", from_ms, to_ms)
                parts = buckets[0] if buckets else int(spark.conf.get("spark.sql.shuffle.partitions"))
                bods = buckets[1] if buckets else read_slice(spark, lake, "bodies", from_ms, to_ms)
                df = select_one_sided(bods, topic, from_ms, to_ms, flt, parts=parts, native=native,
                                      matcher=matcher, keep_plain=True, bucketed=buckets is not None,
                                      stored_plain=stored_plain)
                obs = Observation(f"replay-{replay_id}")
                firsts = _emit(df.observe(obs, *_observed(), *_unjudged(flt, df.columns)).select(*MANIFEST_COLUMNS),
                               where, dry_run, manifest)
            seen = obs.get
            without, not_plain = int(seen.get("without_metadata") or 0), int(seen.get("not_plain") or 0)
            if without:
                log(f"replay {replay_id}: {without} body row(s) of the slice archived without metadata: "
                    "selecting again with the messages joined")
                plan = "two sides"
                break
            if not not_plain or matcher or not native:
                plan = "one side" + (", matcher" if matcher else "")
                break
            log(f"replay {replay_id}: {not_plain} row(s) the native filter cannot judge: "
                "selecting again with the matcher")
    if plan == "two sides":
        with progress(spark, f"replay {replay_id}: select + write", show_progress):
            msgs = read_slice(spark, lake, "messages", from_ms, to_ms)
            bods = read_slice(spark, lake, "bodies", from_ms, to_ms)
            df = select(msgs, bods, topic, from_ms, to_ms, flt, parts=parts, native=native, previous=previous,
                        narrow_bodies=narrow_bodies)
            if legacy:
                df.write.mode("overwrite").option("compression", "gzip").json(where)
            else:
                obs = Observation(f"replay-{replay_id}")
                firsts = _emit(df.observe(obs, *_observed()), where, dry_run, manifest)
    t1 = time.perf_counter()
    if dry_run:
        metrics = obs.get
        summary = {
            "replay_id": replay_id, "topic": topic, "from": from_ms, "to": to_ms, "filter": flt.to_json(),
            "found": int(metrics.get("n") or 0), "missing_bodies": int(metrics.get("missing") or 0), "parts": [],
            "queues": _observed_queues(metrics), "sample": firsts, "manifest": None, "plan": plan,
            "dry_run": True, "seconds": round(time.perf_counter() - t0, 3),
            "phases": {"select_write": round(t1 - t0, 3), "summary": 0.0},
        }
        dest.put_json(summary_key(replay_id), summary)
        log(f"replay {replay_id}: dry run, {summary['found']} message(s) selected in {summary['seconds']} s")
        return summary
    counts = None if legacy else _summary_observed(dest, replay_id, obs.get, parts, log)
    if counts is None:
        with progress(spark, f"replay {replay_id}: summary", show_progress):
            counts = _summary_by_reading(spark, dest, replay_id)
    t2 = time.perf_counter()
    per_part, per_queue, missing = counts
    found = sum(p["rows"] for p in per_part)
    sample = manifest_sample(dest, per_part)
    summary = {
        "replay_id": replay_id, "topic": topic, "from": from_ms, "to": to_ms, "filter": flt.to_json(),
        "found": found, "missing_bodies": missing, "parts": per_part,
        "queues": dict(sorted(per_queue.items(), key=lambda kv: int(kv[0]))),
        "sample": sample, "manifest": manifest_prefix(replay_id), "plan": plan,
        "manifest_format": "json" if legacy or manifest == "json" else RECORDS.FORMAT,
        "seconds": round(time.perf_counter() - t0, 3),
        "phases": {"select_write": round(t1 - t0, 3), "summary": round(t2 - t1, 3)},
    }
    dest.put_json(summary_key(replay_id), summary)
    log(f"replay {replay_id}: {found} message(s) selected in {summary['seconds']} s → {where}")
    return summary


SAMPLE_MAX = 20  # rows of the summary's ``sample`` (a dry run shows them; docs/api.md)
SAMPLE_FIELDS = ("queue", "offset", "id", "key", "produced_at", "size")


def sample_row(row: dict) -> dict:
    """A manifest row as the summary's ``sample`` shows it: where it is, its id and key, when it was
    produced and its body's size in bytes (UTF-8; a body kept in the lake bucket: its claim's
    ``size``; null when the lake has no body for it)."""
    claim = row.get("claim")
    claim = json.loads(claim) if isinstance(claim, str) and claim else claim
    if isinstance(claim, dict) and isinstance(claim.get("size"), int):
        size = int(claim["size"])
    elif row.get("body") is not None:
        size = len(str(row["body"]).encode("utf-8"))
    else:
        size = None
    return {"queue": row.get("queue"), "offset": row.get("offset"), "id": row.get("id"), "key": row.get("key"),
            "produced_at": row.get("produced_at"), "size": size}


def manifest_sample(dest: Lake, per_part: list[dict], n: int = SAMPLE_MAX) -> list[dict]:
    """The first ``n`` rows of the manifest in the copier's order (the parts in order, each from its
    start): the messages a replay copies first. Reads at most ``n`` lines, streamed."""
    out: list[dict] = []
    for p in per_part:
        if len(out) >= n:
            break
        out += [sample_row(r) for r in head_rows(dest, p["key"], min(int(p["rows"]), n - len(out)))]
    return out


def head_rows(dest: Lake, key: str, n: int) -> list[dict]:
    """The first ``n`` rows of manifest part ``key`` (records or JSON Lines, by its name), streamed."""
    if n <= 0:
        return []
    if not RECORDS.is_records(key):
        return [json.loads(x) for x in dest.head_lines(key, n)]
    out: list[dict] = []
    with dest.open_read(key) as f:
        for row in RECORDS.iter_rows(f.read):
            out.append(row)
            if len(out) >= n:
                break
    return out


def record_column() -> F.Column:
    """The manifest row (:data:`MANIFEST_COLUMNS`) as one record of :mod:`lakeq.store.replay_manifest`:
    the header (the integers, then each text's length in bytes, -1 for null), ``:``, the texts'
    bytes as they are, a line break (the text writer's). ``tags`` as its JSON array's text."""
    def num(c: str) -> F.Column:
        return F.coalesce(F.col(c).cast("string"), F.lit(""))
    texts = {"id": F.col("id"), "key": F.col("key"), "tags": F.to_json(F.col("tags")),
             "properties": F.col("properties"), "body": F.col("body"), "claim": F.col("claim")}
    assert tuple(texts) == RECORDS.TEXTS
    head = [num(c) for c in RECORDS.INTS] + [F.coalesce(F.octet_length(t), F.lit(-1)).cast("string")
                                             for t in texts.values()]
    parts = [head[0]]
    for h in head[1:]:
        parts += [F.lit(","), h]
    parts.append(F.lit(":"))
    parts += [F.coalesce(t, F.lit("")) for t in texts.values()]
    return F.concat(*parts).alias("value")


POSITION_BITS = 33  # monotonically_increasing_id(): the partition's index above, the row's place in it below


def _emit(df: DataFrame, where: str, dry_run: bool, manifest: str = "records") -> list[dict]:
    """The selection's one action: write the manifest to ``where`` (returns ``[]``: records,
    :func:`record_column` through Spark's text writer, or JSON Lines), or — a dry run —
    :func:`_dry_pass`."""
    if not dry_run:
        if manifest == "json":
            df.write.mode("overwrite").json(where)
        else:
            df.select(record_column()).write.mode("overwrite").text(where)
        return []
    return _dry_pass(df)


def _dry_pass(df: DataFrame, n: int = SAMPLE_MAX) -> list[dict]:
    """A dry run's pass over the manifest's rows, writing nothing: each partition's first ``n``
    rows (``monotonically_increasing_id``: the partition index, then the row's place — the order of
    the part files the write would name by their index, each sorted), as :func:`sample_row` shows
    them (a body's size computed here: the bodies are not collected), the first ``n`` of them in
    that order. The observation on ``df`` counts every row (each partition is read to its end)."""
    claim_size = F.get_json_object(F.col("claim").cast("string"), "$.size")
    size = F.when(claim_size.rlike(r"^-?[0-9]+$"), claim_size.cast("long")).otherwise(
        F.octet_length(F.col("body")).cast("long"))
    rows = (df.select(F.monotonically_increasing_id().alias("_pos"), *SAMPLE_FIELDS[:-1], size.alias("size"))
            .where(F.col("_pos").bitwiseAND((1 << POSITION_BITS) - 1) < n).collect())
    rows.sort(key=lambda r: r["_pos"])
    return [{f: r[f] for f in SAMPLE_FIELDS} for r in rows[:n]]


def _observed_queues(metrics: dict) -> dict[str, int]:
    """The rows per queue from the observed histogram (:func:`_observed`), ``{}`` if it merged queues."""
    bins = json.loads(metrics.get("per_queue") or "null") or []
    if any(float(b["x"]) != int(b["x"]) or float(b["y"]) != int(b["y"]) for b in bins):
        return {}
    return {str(int(b["x"])): int(b["y"]) for b in sorted(bins, key=lambda b: int(b["x"])) if int(b["y"])}


def _part_keys(dest: Lake, replay_id: str) -> dict[str, int]:
    """The manifest's part files (key → size), in key order."""
    sizes = dest.sizes(manifest_prefix(replay_id))
    return {k: sizes[k] for k in sorted(sizes) if k.rsplit("/", 1)[-1].startswith("part-")}


def _observed() -> list[F.Column]:
    """What the write observes (one pass, no shuffle): the row count, the rows without a body, the
    smallest and largest queue, and the rows per queue (``per_queue``: a histogram of the queue
    numbers with :data:`QUEUES_MAX` bins, as JSON text). A topic has at most :data:`QUEUES_MAX`
    queues, numbered from 0 (the min/max say when a row is outside), and ``histogram_numeric``
    merges bins only when it sees more distinct values than bins, so each bin is one queue and its
    count is exact — :func:`_summary_observed` checks it (integral centres and counts, summing to
    the row count). One aggregate instead of one ``sum(when(queue == i))`` per queue: observed
    metrics are evaluated row by row outside the generated code, and the 64 sums took ~20 s of task
    time on a 10M-row manifest (the histogram ~5 s; docs/benchmarks.md "One side")."""
    q = F.col("queue")
    return [F.count(F.lit(1)).alias("n"), F.sum(F.col("body").isNull().cast("long")).alias("missing"),
            F.min(q).alias("qmin"), F.max(q).alias("qmax"),
            F.to_json(F.histogram_numeric(q, F.lit(QUEUES_MAX))).alias("per_queue")]


def _mix(h: int, k: int) -> int:
    m = 0xFFFFFFFF
    k = (k * 0xCC9E2D51) & m
    k = ((k << 15) | (k >> 17)) & m
    k = (k * 0x1B873593) & m
    h ^= k
    h = ((h << 13) | (h >> 19)) & m
    return (h * 5 + 0xE6546B64) & m


def hash_partition(value: int, parts: int) -> int:
    """The partition Spark's hash partitioning by one ``bigint`` column puts ``value`` in:
    ``pmod(hash(value), parts)``, ``hash`` = Murmur3 x86 32-bit with seed 42 over the long's low
    then high 32 bits (``Murmur3_x86_32.hashLong``), as a signed int. Tested against Spark."""
    m = 0xFFFFFFFF
    h = _mix(_mix(42, value & m), (value >> 32) & m)
    h ^= 8
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & m
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & m
    h ^= h >> 16
    return (h - (1 << 32) if h >= 1 << 31 else h) % parts


def _summary_observed(dest: Lake, replay_id: str, metrics: dict, parts: int, log):
    """``(per_part, per_queue, missing)`` from the observed counts, or None (then the caller reads
    the manifest back) unless every check holds: each queue within ``0 .. QUEUES_MAX - 1``, the
    per-queue counts summing to the row count, and each part file where :func:`select`'s
    partitioning puts its queues — a file ``part-NNNNN-…`` for every partition ``NNNNN`` =
    ``pmod(hash(queue), parts)`` (Spark's hash partitioning, :func:`hash_partition`) holding rows,
    whose first row's queue is one of them, and no other non-empty file."""
    n = int(metrics.get("n") or 0)
    bins = json.loads(metrics.get("per_queue") or "null") or []
    if any(float(b["x"]) != int(b["x"]) or float(b["y"]) != int(b["y"]) for b in bins) or len(
            {int(b["x"]) for b in bins}) != len(bins):
        log(f"replay {replay_id}: the per-queue histogram merged queues: counting the manifest")
        return None
    per_queue = {int(b["x"]): int(b["y"]) for b in bins if int(b["y"])}
    files = _part_keys(dest, replay_id)
    if n and not (0 <= int(metrics["qmin"]) and int(metrics["qmax"]) < QUEUES_MAX):
        log(f"replay {replay_id}: queue numbers outside 0..{QUEUES_MAX - 1}: counting the manifest")
        return None
    if sum(per_queue.values()) != n:
        log(f"replay {replay_id}: observed counts disagree: counting the manifest")
        return None
    part_of = {q: hash_partition(q, parts) for q in range(QUEUES_MAX)}
    rows_of: dict[int, int] = {}
    for q, c in per_queue.items():
        rows_of[part_of[q]] = rows_of.get(part_of[q], 0) + c
    by_index: dict[int, list[str]] = {}
    for key, size in files.items():
        name = key.rsplit("/", 1)[-1]
        idx = name.split("-")[1] if name.count("-") >= 2 else ""
        if not idx.isdigit():
            log(f"replay {replay_id}: unexpected part name {name}: counting the manifest")
            return None
        if size:
            by_index.setdefault(int(idx), []).append(key)
    if set(by_index) != set(rows_of) or any(len(v) != 1 for v in by_index.values()):
        log(f"replay {replay_id}: parts written {sorted(by_index)} are not the expected {sorted(rows_of)}: "
            "counting the manifest")
        return None
    for idx, (key,) in by_index.items():
        first = (head_rows(dest, key, 1) or [{}])[0]
        if "queue" not in first or part_of.get(int(first["queue"])) != idx:
            log(f"replay {replay_id}: {key} starts with queue {first['queue']}, not of its partition: "
                "counting the manifest")
            return None
    per_part = [{"key": by_index[i][0], "rows": rows_of[i]} for i in sorted(by_index, key=lambda i: by_index[i][0])]
    return per_part, {str(q): c for q, c in per_queue.items()}, int(metrics.get("missing") or 0)


def _summary_by_reading(spark: SparkSession, dest: Lake, replay_id: str):
    """``(per_part, per_queue, missing)`` by reading the manifest back (one task per part file)."""
    keys = list(_part_keys(dest, replay_id))
    per_part, per_queue, missing = [], {}, 0
    if keys and all(RECORDS.is_records(k) for k in keys):
        # records: a body may hold line breaks, so no line-based reader splits them; read on the
        # driver, streamed (a fallback that has never run outside the tests forcing it)
        per_q: dict[int, int] = {}
        for k in keys:
            n = 0
            with dest.open_read(k) as f:
                for row in RECORDS.iter_rows(f.read):
                    n += 1
                    per_q[int(row["queue"])] = per_q.get(int(row["queue"]), 0) + 1
                    missing += row.get("body") is None
            if n:
                per_part.append({"key": k, "rows": n})
        return per_part, {str(q): c for q, c in sorted(per_q.items())}, missing
    if keys:
        man = (spark.read.schema("queue long, body string").json(dest.path(manifest_prefix(replay_id)))
               .withColumn("file", F.input_file_name()))
        rows = man.groupBy("file", "queue").agg(
            F.count(F.lit(1)).alias("n"), F.sum(F.col("body").isNull().cast("long")).alias("missing")).collect()
        by_file: dict[str, int] = {}
        for r in rows:
            name = r["file"].rsplit("/", 1)[-1]
            by_file[name] = by_file.get(name, 0) + int(r["n"])
            per_queue[str(int(r["queue"]))] = int(r["n"])
            missing += int(r["missing"] or 0)
        per_part = [{"key": k, "rows": by_file.get(k.rsplit("/", 1)[-1], 0)} for k in keys]
        per_part = [p for p in per_part if p["rows"]]
    return per_part, per_queue, missing
