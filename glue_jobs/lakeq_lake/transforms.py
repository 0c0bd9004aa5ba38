"""Pure DataFrame transforms of the data-lake jobs (no I/O: DataFrames in, DataFrames out).

Inputs are the raw log rows of :mod:`lakeq.lake.archive` (schemas in :mod:`.schemas`). Times are epoch ms.

* :func:`backlog` — per group (and client, for broadcasting groups), topic, queue and time bucket:
  ``produced`` (the queue's log end offset at the bucket's end), ``committed``, ``backlog``,
  messages produced and consumed in the bucket, their rates (per second) and the age of the
  oldest unconsumed message.
* :func:`latest` — the newest bucket of each queue (what ``GET /v1/reports/backlog`` serves).
* :func:`queue_weights` — per group, topic and queue: the load a consumer of that queue will carry
  over the next ``horizon``: measured production rate plus the backlog to drain within the horizon.
"""
from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from .schemas import incarnation

GROUP_KEYS = ["group", "client_id", "topic", "queue"]


def clean_messages(messages: DataFrame) -> DataFrame:
    """Drop rows a redelivered stream batch wrote twice: a message is ``(topic, inc, queue, offset)``
    (a topic made again after a deletion starts its offsets at 0 again: its rows are not duplicates)."""
    return (messages.where(F.col("topic").isNotNull() & F.col("offset").isNotNull())
            .withColumn("inc", incarnation())
            .dropDuplicates(["topic", "inc", "queue", "offset"]))


def clean_offsets(offsets: DataFrame) -> DataFrame:
    """Group offset changes only (subscriptions' lists are not groups), one row per stream record
    (``seq``); ``client_id`` is ``""`` for clustering groups so it can be a join key."""
    return (offsets.where(F.col("group").isNotNull() & F.col("topic").isNotNull()
                          & F.col("committed_offset").isNotNull())
            .withColumn("inc", incarnation())
            .dropDuplicates(["seq", "group", "client_id", "topic", "inc", "queue"])
            .withColumn("client_id", F.coalesce(F.col("client_id"), F.lit(""))))


def current_incarnation(df: DataFrame) -> DataFrame:
    """``df``'s rows of each topic's newest incarnation among them (``df`` with ``topic`` and
    ``inc``; meant for small, aggregated frames: a window by ``topic``, no join, so the frame is
    computed once). The reports describe a topic as it is: a deleted incarnation's queues, offsets
    and group positions are not the topic's any more.

    Cost: one shuffle of ``df`` by ``topic``. (A join with a broadcast ``max(inc)`` of the same
    frames, the first version, made Spark compute the messages' and offsets' aggregates twice —
    the join's inferred filters kept the exchanges from being reused: the backlog of
    ``bench/lake.py --quick`` went 18.8 s → 47.1 s; docs/benchmarks.md.)"""
    newest = F.max("inc").over(Window.partitionBy("topic"))
    return df.withColumn("_newest", newest).where(F.col("inc") == F.col("_newest")).drop("_newest")


def seq_order(col: str = "seq"):
    """A sortable key for a DynamoDB stream sequence number: numeric order of a string of digits of
    any length (up to 40: more than a long or a decimal(38) holds) = (digits without leading zeros
    by length, then the digits). Never (at, seq-as-string): ``at`` comes from the writers' clocks
    and "99" > "100" as strings."""
    digits = F.expr(f"trim(LEADING '0' FROM coalesce(`{col}`, ''))")  # (a regular expression: 2× the time)
    return F.struct(F.length(digits).alias("seq_len"), digits.alias("seq_digits"))


def backlog(messages: DataFrame, offsets: DataFrame, as_of_ms: int, bucket_ms: int = 3_600_000,
            persisted: list | None = None) -> DataFrame:
    """Backlog over time (schema :data:`.schemas.BACKLOG`).

    Keys: every ``(group, client, topic)`` seen in the offsets log × every queue of that topic that
    has messages (a queue the group never pulled has ``committed`` 0, as the API says), plus queues
    with offset records only. Buckets: from the topic's first event to the bucket holding
    ``as_of_ms``; rows after ``as_of_ms`` are ignored. Only the topic's newest incarnation counts
    (:func:`current_incarnation`, decided once on the topics' start buckets: a topic deleted and
    made again restarts at offset 0, and the old log's ends and commits are not the new one's).
    ``at`` = the bucket's end, or ``as_of_ms`` for the last bucket. ``committed`` carries the
    committed offset of the change with the highest stream sequence number (numeric,
    :func:`seq_order`) among those recorded before ``at`` (0 before any): the writers' clocks only
    place a change in a bucket, never order two changes. ``oldest_unconsumed_age_ms`` = ``at`` −
    ``produced_at`` of the message at ``committed`` when there is a backlog, else 0.

    Cost: each log is read once and shuffled once at full size (its deduplication); everything
    after works on aggregates. The offsets are aggregated first (``ob``: the newest change per key
    and bucket); the offsets they name (and offset 0, where a queue never pulled starts) are the
    only candidates for the head of a backlog, so the messages' pass flags those rows (a broadcast
    join of the candidates) and keeps their ``produced_at`` in its per-bucket aggregate (``mb``):
    the ages need no second read of the messages. With ``persisted`` (a list: the jobs pass one)
    the two aggregates — read by the incarnations, the keys and the grid's joins — are persisted
    and appended to it, for the caller to ``unpersist()`` once the report is written; without it
    Spark computes them for each branch again (small frames are fine; 10M rows are not).
    (Before: the cleaned logs persisted whole and read by every branch, the grid computed twice
    for the ages: 49 exchanges, 153 → 55.8 s at 10M rows; docs/benchmarks.md.)"""
    last_b = as_of_ms // bucket_ms

    def keep(df):
        if persisted is None:
            return df
        df = df.persist()
        persisted.append(df)
        return df

    # the offsets: one row per key and bucket with the change of the highest sequence number. No
    # deduplication first: a stream record written twice is the same change twice, and a maximum
    # does not count (what clean_offsets removes changes nothing here)
    o = (offsets.where(F.col("group").isNotNull() & F.col("topic").isNotNull()
                       & F.col("committed_offset").isNotNull() & (F.col("at") <= as_of_ms))
         .select("group", F.coalesce(F.col("client_id"), F.lit("")).alias("client_id"), "topic", incarnation(),
                 "queue", "committed_offset", F.floor(F.col("at") / bucket_ms).cast("long").alias("b"),
                 seq_order("seq").alias("order")))
    ob = keep(o.groupBy(*GROUP_KEYS, "inc", "b").agg(
        F.max(F.struct("order", "committed_offset")).alias("latest_b")))
    # the messages: a message is (topic, inc, queue, offset) (clean_messages), and a bucket's count
    # is of distinct offsets — counted in blocks of 64 offsets, one bit each (a message written twice
    # sets its bit twice), so the map side sends one row per block, not one per message. A backlog's
    # head is the message at ``committed``: 0 or an offset some change committed; those rows (a
    # broadcast join of the candidates) keep their own group, with their ``produced_at``.
    heads_wanted = (ob.select("topic", "inc", "queue", F.col("latest_b.committed_offset").alias("offset"))
                    .distinct().withColumn("_wanted", F.lit(True)))
    m = (messages.where(F.col("topic").isNotNull() & F.col("offset").isNotNull()
                        & (F.col("produced_at") <= as_of_ms))
         .select("topic", incarnation(), "queue", "offset", "produced_at")
         .join(F.broadcast(heads_wanted), ["topic", "inc", "queue", "offset"], "left"))
    blocks = keep(m.groupBy(
        "topic", "inc", "queue", F.floor(F.col("produced_at") / bucket_ms).cast("long").alias("b"),
        F.shiftright("offset", 6).alias("block"),
        F.when((F.col("offset") == 0) | F.col("_wanted"), F.col("offset")).alias("head"),
    ).agg(F.bit_or(F.expr("shiftleft(1L, int(offset & 63))")).alias("bits"),
          F.max("offset").alias("last"), F.min("produced_at").alias("head_at")))
    # (whether a row is a head's is a function of its message: a message's copies all set their bit
    # in one group, so the groups of a block hold disjoint bits and their counts add up)
    mb = keep(blocks.groupBy("topic", "inc", "queue", "b")
              .agg(F.sum(F.bit_count("bits")).cast("long").alias("produced_in_bucket"),
                   (F.max("last") + 1).alias("end_in_bucket")))
    # (topic, inc) is the log; the grid is built for each topic's newest incarnation only (the
    # inner join with ``starts``), so the left joins below take only that log's rows
    starts = current_incarnation(
        mb.select("topic", "inc", "b").unionByName(ob.select("topic", "inc", "b"))
        .groupBy("topic", "inc").agg(F.min("b").alias("start_b")))
    # (a group seen in an older incarnation's offsets only still gets the newest one's queues, at 0)
    keys = (ob.select("group", "client_id", "topic").distinct()
            .join(mb.select("topic", "inc", "queue").distinct(), "topic")
            .unionByName(ob.select(*GROUP_KEYS, "inc"))
            .distinct())
    grid = (keys.join(starts, ["topic", "inc"])
            .withColumn("b", F.explode(F.sequence(F.col("start_b"), F.lit(last_b))))
            .drop("start_b"))

    w = Window.partitionBy(*GROUP_KEYS).orderBy("b")
    running = w.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    g = (grid.join(mb, ["topic", "inc", "queue", "b"], "left")
         .join(ob, [*GROUP_KEYS, "inc", "b"], "left")
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

    # age of the oldest unconsumed message: the message at ``committed`` (one row per message; a
    # message written twice with two clocks' ``produced_at``: the earliest)
    heads = (blocks.where(F.col("head").isNotNull()).groupBy("topic", "inc", "queue", F.col("head").alias("committed"))
             .agg(F.min("head_at").alias("produced_at")))
    g = (g.join(heads, ["topic", "inc", "queue", "committed"], "left")
         .withColumn("oldest_unconsumed_age_ms",
                     F.when(F.col("backlog") > 0,
                            F.greatest(F.col("at") - F.col("produced_at"), F.lit(0)))
                     .otherwise(F.lit(0)).cast("long")))
    return g.select(
        "group", F.when(F.col("client_id") == "", None).otherwise(F.col("client_id")).alias("client_id"),
        "topic", "queue", "bucket_start", "at", "produced", "committed", "backlog", "produced_in_bucket",
        "consumed_in_bucket", "production_rate", "consumption_rate", "oldest_unconsumed_age_ms")


def latest(report: DataFrame) -> DataFrame:
    """The newest row of each ``(group, client_id, topic, queue)`` of a :func:`backlog` report."""
    w = Window.partitionBy("group", "client_id", "topic", "queue").orderBy(F.col("at").desc())
    return report.withColumn("_n", F.row_number().over(w)).where(F.col("_n") == 1).drop("_n")


def queue_weights(messages: DataFrame, latest_backlog: DataFrame, as_of_ms: int,
                  lookback_ms: int = 3_600_000, horizon_ms: int = 3_600_000) -> DataFrame:
    """Per clustering group, topic and queue: ``rate`` (messages/s produced over the ``lookback``
    before ``as_of_ms``), ``backlog`` (from :func:`latest`) and
    ``weight = rate + backlog / horizon_s`` — the messages per second a consumer of that queue must
    handle to keep up and drain the backlog within the horizon. Broadcasting groups (a
    ``client_id``) are left out: every client reads every queue, there is nothing to assign."""
    lo = as_of_ms - lookback_ms
    rates = (clean_messages(messages)
             .where((F.col("produced_at") > lo) & (F.col("produced_at") <= as_of_ms))
             .groupBy("topic", "inc", "queue").agg((F.count(F.lit(1)) / (lookback_ms / 1000.0)).alias("rate")))
    # the newest incarnation's rates only (a topic deleted and made again within the lookback)
    rates = current_incarnation(rates).drop("inc")
    lag = latest_backlog.where(F.col("client_id").isNull()).select("group", "topic", "queue", "backlog")
    return (lag.join(rates, ["topic", "queue"], "left")
            .withColumn("rate", F.coalesce("rate", F.lit(0.0)).cast("double"))
            .withColumn("weight", (F.col("rate") + F.col("backlog") / (horizon_ms / 1000.0)).cast("double"))
            .select("group", "topic", "queue", "rate", "backlog", "weight"))
