"""The delivery ledger (issue 32.4): for each consumer (a group, or a broadcasting group's client)
and each message produced to its topic in a time range, what became of it — a pure DataFrame
transform over the lake's ``messages`` and ``offsets`` rows (the offsets rows' ``settled``,
``delivered`` and ``start_offset``: :func:`lakeq.lake.archive.settlement_of`).

A message is ``(topic, inc, queue, offset)``; a consumer is ``(group, client_id)`` (``client_id``
``""`` for a clustering group) and is in the ledger of every topic it has offsets rows of. Its
messages are those produced in ``[from_ms, to_ms)`` at or above its first position on that queue
(the smallest ``start_offset`` of its rows; 0 when none is in the lake; at least the committed
offset of its newest row archived before these columns existed, without ``settled``: what that
consumer settled before the upgrade is not in the lake), plus any below that some row names (a
reset back). Each gets exactly one ``state``:

* the outcome of the newest row (in stream order, :func:`lakeq_lake.transforms.seq_order`) whose
  ``settled`` names it, when that is ``accepted`` (acknowledged, or passed over by the consumer's
  tag filter: then with 0 deliveries), ``dead_lettered`` (``cause``: ``rejected`` or
  ``max_deliveries``), ``expired`` (gone from the log before it was settled) or ``skipped`` (passed
  over by a reset of the committed offset);
* otherwise (no row settles it, or the newest says ``reopened``): ``lost`` when the consumer's
  committed offset (its newest row's) is above it — the consumer moved past it and the lake holds no
  settlement of it; else ``expired`` when ``retention_ms`` is given and it was produced that long
  before ``as_of_ms``; else ``pending`` (not settled yet: delivered and unacknowledged, or not
  delivered yet — held back).

``deliveries``: how many rows' ``delivered`` name it (each a lock that delivered it); ``redelivered``:
more than one. Rows after ``as_of_ms`` are left out. A lake missing an offsets row shows it: the
settlement that row held is absent, so its messages are ``lost`` when a later row committed past
them, ``pending`` when none did.

Cost: each log is read once; ``settled`` spans (and ``delivered`` offsets) are exploded only within
the range of offsets the time range produced per queue (a reset over millions of offsets costs what
the range holds), both kinds aggregated in one shuffle per consumer and offset, then one equi-join
with the consumers' messages on ``(consumer, topic, inc, queue, offset)`` (the positions per queue
broadcast).
"""
from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from .schemas import incarnation
from .transforms import clean_messages, seq_order

CONSUMER = ["group", "client_id"]
MSG = ["topic", "inc", "queue", "offset"]
STATES = ("accepted", "dead_lettered", "pending", "expired", "skipped", "lost")
SETTLED_STATES = ("accepted", "dead_lettered", "expired", "skipped")
COUNTS = ("produced", *STATES, "redelivered", "deliveries")
SAMPLE = 20  # the lost and the pending messages a summary names (oldest first)

LEDGER = StructType([
    StructField("group", StringType()), StructField("client_id", StringType()),
    StructField("topic", StringType()), StructField("inc", LongType()), StructField("queue", LongType()),
    StructField("offset", LongType()), StructField("id", StringType()), StructField("produced_at", LongType()),
    StructField("state", StringType()), StructField("cause", StringType()), StructField("deliveries", LongType()),
])


def ledger(messages: DataFrame, offsets: DataFrame, from_ms: int, to_ms: int, as_of_ms: int,
           retention_ms: int | None = None, group: str | None = None, topic: str | None = None) -> DataFrame:
    """One row per consumer and message (schema :data:`LEDGER`; ``client_id`` null for a clustering
    group). ``group`` / ``topic``: only that group's / topic's."""
    m = clean_messages(messages).where((F.col("produced_at") >= from_ms) & (F.col("produced_at") < to_ms)
                                       & (F.col("produced_at") <= as_of_ms))
    o = offsets.where(F.col("group").isNotNull() & F.col("topic").isNotNull() & (F.col("at") <= as_of_ms))
    if topic is not None:
        m, o = m.where(F.col("topic") == topic), o.where(F.col("topic") == topic)
    if group is not None:
        o = o.where(F.col("group") == group)
    m = m.select(*MSG, "id", "produced_at")
    o = (o.select("group", F.coalesce(F.col("client_id"), F.lit("")).alias("client_id"), "topic", incarnation(),
                  "queue", "committed_offset", "settled", "delivered", "start_offset", "seq",
                  seq_order("seq").alias("order"))
         .dropDuplicates(["seq", *CONSUMER, "topic", "inc", "queue"]))  # a stream batch archived twice
    keys = [*CONSUMER, "topic", "inc", "queue"]
    # per consumer and queue: its first position, its committed offset (the newest row's), and what
    # the newest row archived before the ledger's columns existed (no ``settled``) had committed:
    # those messages' settlements are not in the lake, they are before the ledger (not lost)
    pos = o.groupBy(*keys).agg(
        F.min("start_offset").alias("start"),
        F.max(F.when(F.col("committed_offset").isNotNull(), F.struct("order", "committed_offset")))
        ["committed_offset"].alias("committed"),
        F.max(F.when(F.col("settled").isNull() & F.col("committed_offset").isNotNull(),
                     F.struct("order", "committed_offset")))["committed_offset"].alias("legacy"))
    # the offsets the range produced, per queue: what the spans are clipped to
    bounds = m.groupBy("topic", "inc", "queue").agg(F.min("offset").alias("m_lo"), F.max("offset").alias("m_hi"))
    spans = (o.select(*keys, "order", F.explode("settled").alias("e"))
             .join(F.broadcast(bounds), ["topic", "inc", "queue"])
             .select(*keys, "order", F.col("e.outcome").alias("outcome"), F.col("e.reason").alias("reason"),
                     F.greatest("e.lo", "m_lo").alias("lo"), F.least(F.col("e.hi") - 1, F.col("m_hi")).alias("hi"))
             .where(F.col("lo") <= F.col("hi")))
    # one pass over both kinds of events, per consumer and offset: the newest settlement, the deliveries
    settle_ev = spans.select(*keys, F.explode(F.sequence("lo", "hi")).alias("offset"),
                             F.struct("order", "outcome", "reason").alias("ev"), F.lit(0).alias("d"))
    deliver_ev = (o.select(*keys, F.explode("delivered").alias("offset"))
                  .join(F.broadcast(bounds), ["topic", "inc", "queue"])
                  .where(F.col("offset").between(F.col("m_lo"), F.col("m_hi")))
                  .select(*keys, "offset", F.lit(None).cast(settle_ev.schema["ev"].dataType).alias("ev"),
                          F.lit(1).alias("d")))
    events = (settle_ev.unionByName(deliver_ev).groupBy(*keys, "offset")
              .agg(F.max("ev").alias("last"), F.sum("d").alias("deliveries")))
    consumers = o.select(*CONSUMER, "topic", "inc").distinct()
    rows = (consumers.join(m, ["topic", "inc"])
            .join(F.broadcast(pos), keys, "left")
            .join(events, [*keys, "offset"], "left")
            .where((F.col("offset") >= F.greatest(F.coalesce("start", F.lit(0)), F.coalesce("legacy", F.lit(0))))
                   | F.col("last").isNotNull()))
    outcome = F.col("last.outcome")
    older = (F.lit(False) if retention_ms is None
             else F.col("produced_at") + F.lit(retention_ms) <= F.lit(as_of_ms))
    state = (F.when(outcome.isin(*SETTLED_STATES), outcome)
             .when(F.col("offset") < F.coalesce("committed", F.lit(0)), F.lit("lost"))
             .when(older, F.lit("expired"))
             .otherwise(F.lit("pending")))
    return rows.select(
        "group", F.when(F.col("client_id") == "", None).otherwise(F.col("client_id")).alias("client_id"),
        "topic", "inc", "queue", "offset", "id", "produced_at", state.alias("state"),
        F.when(outcome == "dead_lettered", F.col("last.reason")).alias("cause"),
        F.coalesce("deliveries", F.lit(0)).cast("long").alias("deliveries"))


def summary(rows: DataFrame) -> DataFrame:
    """Per group, topic and client: ``produced`` and the count of each state (:data:`STATES`),
    ``redelivered`` (deliveries > 1) and ``deliveries`` (all); dead letters per cause: :func:`causes`."""
    counts = [F.sum((F.col("state") == s).cast("long")).alias(s) for s in STATES]
    return (rows.groupBy("group", "topic", "client_id")
            .agg(F.count(F.lit(1)).alias("produced"), *counts,
                 F.sum((F.col("deliveries") > 1).cast("long")).alias("redelivered"),
                 F.sum("deliveries").cast("long").alias("deliveries")))


def causes(rows: DataFrame) -> DataFrame:
    """Dead letters per group, topic, client and cause."""
    return (rows.where(F.col("state") == "dead_lettered")
            .groupBy("group", "topic", "client_id", "cause").agg(F.count(F.lit(1)).alias("n")))


def unaccounted(rows: DataFrame, limit: int) -> DataFrame:
    """The first ``limit`` lost and pending messages of each group, topic and client (oldest first)."""
    w = Window.partitionBy("group", "topic", "client_id", "state").orderBy("produced_at", "queue", "offset")
    return (rows.where(F.col("state").isin("lost", "pending")).withColumn("_n", F.row_number().over(w))
            .where(F.col("_n") <= limit).drop("_n"))


def line(c: dict) -> str:
    """The console's summary line of a report's counts.

    >>> line({"produced": 5, "accepted": 4, "lost": 0, "redelivered": 1, "dead_lettered": 1, "pending": 0})
    '5 produced, 4 accepted, 1 dead-lettered, 0 pending, 0 lost, 1 redelivered'
    """
    return (f"{c['produced']} produced, {c['accepted']} accepted, {c['dead_lettered']} dead-lettered, "
            f"{c['pending']} pending, {c['lost']} lost, {c['redelivered']} redelivered")


def run_ledger(spark, lake, as_of_ms: int | None = None, window_hours: int = 24,
               retention_hours: int | None = None, log=print) -> dict:
    """The ledger job: the messages produced in the ``window_hours`` before ``as_of_ms`` (now) →
    Parquet ``reports/ledger/history/computed_at=<ms>/`` (one row per consumer and message) and one
    JSON summary per group and topic at :func:`lakeq.lake.report_keys.ledger_key` (what
    ``GET /v1/groups/{group}/ledger`` serves). Returns the summaries."""
    from lakeq.lake.report_keys import LEDGER as LEDGER_PREFIX
    from lakeq.lake.report_keys import history_prefix, ledger_key, ledger_run_key

    from .jobs import now_ms

    computed_at = now_ms()
    as_of = as_of_ms or computed_at
    lo = as_of - window_hours * 3_600_000
    retention_ms = None if retention_hours is None else retention_hours * 3_600_000
    rows = ledger(lake.read_kind(spark, "messages"), lake.read_kind(spark, "offsets"), lo, as_of + 1, as_of,
                  retention_ms).cache()
    out = lake.path(history_prefix(LEDGER_PREFIX, computed_at))
    log(f"ledger: writing {out}")
    rows.coalesce(1).write.mode("overwrite").parquet(out)
    counts = summary(rows).collect()
    by_cause = causes(rows).collect()
    samples = unaccounted(rows, SAMPLE).orderBy("produced_at", "queue", "offset").collect()
    rows.unpersist()
    summaries: dict[tuple[str, str], dict] = {}
    for r in sorted(counts, key=lambda r: (r["group"], r["topic"], r["client_id"] or "")):
        s = summaries.setdefault((r["group"], r["topic"]), {
            "group": r["group"], "topic": r["topic"], "computed_at": computed_at, "as_of": as_of,
            "from": lo, "to": as_of, "retention_ms": retention_ms, **{k: 0 for k in COUNTS},
            "causes": {}, "lost_messages": [], "pending_messages": []})
        for k in COUNTS:
            s[k] += int(r[k] or 0)
        if r["client_id"] is not None:
            s.setdefault("clients", []).append({"client_id": r["client_id"], **{k: int(r[k] or 0) for k in COUNTS}})
    for r in by_cause:
        c = summaries[(r["group"], r["topic"])]["causes"]
        c[r["cause"] or "unknown"] = c.get(r["cause"] or "unknown", 0) + int(r["n"])
    for r in samples:
        s = summaries[(r["group"], r["topic"])]
        lst = s[f"{r['state']}_messages"]
        if len(lst) < SAMPLE:
            m = {"queue": int(r["queue"]), "offset": int(r["offset"]), "id": r["id"],
                 "produced_at": int(r["produced_at"]), "deliveries": int(r["deliveries"])}
            if r["client_id"] is not None:
                m["client_id"] = r["client_id"]
            lst.append(m)
    for (group, topic), s in summaries.items():
        s["line"] = line(s)
        lake.put_json(ledger_key(group, topic), s)
    lake.put_json(ledger_run_key(), {"computed_at": computed_at, "as_of": as_of, "from": lo, "to": as_of,
                                     "summaries": len(summaries)})
    log(f"ledger: {len(summaries)} group/topic summaries")
    return {"computed_at": computed_at, "summaries": list(summaries.values())}
