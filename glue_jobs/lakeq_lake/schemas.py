"""Explicit schemas of the raw log rows (lakeq.lake.archive): the jobs never infer a schema from the lake."""
from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

MESSAGES = StructType([
    StructField("topic", StringType()), StructField("queue", LongType()),
    StructField("offset", LongType()), StructField("id", StringType()),
    StructField("key", StringType()), StructField("size", LongType()),
    StructField("tags", ArrayType(StringType())),
    StructField("properties", MapType(StringType(), StringType())),
    StructField("produced_at", LongType()), StructField("seq", StringType()),
    StructField("inc", LongType()),  # the topic's incarnation (lakeq.lake.archive); null (0) in older rows
])

# The columns added for the delivery ledger (issue 32.4) after the ones above, which stay as they
# were (the transforms' tests build rows of MESSAGES / OFFSETS as tuples): a whole raw row is
# MESSAGES + DEAD_LETTER (:data:`BY_KIND`), OFFSETS + LEDGER_EVENTS.
# a dead-lettered copy's origin and cause (lakeq.lake.archive._dead_letter); null on other messages
DEAD_LETTER = [StructField("dead_letter", StructType([
    StructField("topic", StringType()), StructField("queue", LongType()), StructField("offset", LongType()),
    StructField("id", StringType()), StructField("group", StringType()),
    StructField("deliveries", LongType()), StructField("reason", StringType()), StructField("at", LongType())]))]

# what one write of an offsets record settled (lakeq.lake.archive.settlement_of: the delivery ledger)
SETTLED = ArrayType(StructType([
    StructField("lo", LongType()), StructField("hi", LongType()), StructField("outcome", StringType()),
    StructField("reason", StringType()), StructField("deliveries", LongType())]))

OFFSETS = StructType([
    StructField("group", StringType()), StructField("client_id", StringType()),
    StructField("subscription", StringType()), StructField("topic", StringType()),
    StructField("queue", LongType()), StructField("committed_offset", LongType()),
    StructField("prev_committed_offset", LongType()), StructField("lock_ts", LongType()),
    StructField("lock_until", LongType()), StructField("last_consumed_at", LongType()),
    StructField("event", StringType()), StructField("change", StringType()),
    StructField("at", LongType()), StructField("seq", StringType()),
    StructField("inc", LongType()),  # the topic's incarnation; null (0) in older rows
])

# the delivery ledger's events (lakeq.lake.archive.settlement_of); null in rows archived before them
LEDGER_EVENTS = [StructField("settled", SETTLED), StructField("delivered", ArrayType(LongType())),
                 StructField("start_offset", LongType())]
MESSAGE_ROWS = StructType(MESSAGES.fields + DEAD_LETTER)
OFFSET_ROWS = StructType(OFFSETS.fields + LEDGER_EVENTS)

MEMBERS = StructType([
    StructField("group", StringType()), StructField("generation", LongType()),
    StructField("member_id", StringType()), StructField("change", StringType()),
    StructField("state", StringType()), StructField("topics", ArrayType(StringType())),
    StructField("assignment", ArrayType(StringType())),
    StructField("at", LongType()), StructField("seq", StringType()),
])

PROPERTIES = MapType(StringType(), StringType())

# kind=bodies as the replay reads it (lakeq.lake.archive.body_row): its metadata since 2026-11-28
# (null in rows archived before), ``properties`` as the JSON object's text
BODIES = StructType([
    StructField("topic", StringType()), StructField("queue", LongType()),
    StructField("offset", LongType()), StructField("body", StringType()),
    StructField("id", StringType()), StructField("key", StringType()),
    StructField("tags", ArrayType(StringType())), StructField("properties", StringType()),
    StructField("produced_at", LongType()),
    StructField("claim", StringType()),  # a body in the lake bucket (issue 18.2): its claim, as JSON text
    StructField("inc", LongType()),
    StructField("seq", StringType()),
])

# The compacted lake's Parquet rows (lake/kind=<k>/, lakeq.lake.compaction) and the Glue tables'
# columns (template.yaml): the raw rows with these schemas. ``properties`` of a message stays the
# JSON object's text — its values keep their JSON types (1, "1", true), which the replay's filter
# tells apart; :meth:`Lake.read_kind` gives the jobs the map of :data:`MESSAGES`.
# Columns the compaction derives (never read from a raw row: :meth:`Lake.read_kind` nulls them there):
# ``plain`` — the replay filter's test of ``properties`` (lakeq_lake.native_filter.stored_plain:
# +version plain, -version not), computed once per message instead of by every replay.
DERIVED = {"bodies": [StructField("plain", IntegerType())]}

STORED = {
    "messages": StructType([StructField("properties", StringType()) if f.name == "properties" else f
                            for f in MESSAGE_ROWS.fields]),
    "bodies": StructType(BODIES.fields + DERIVED["bodies"]),
    "offsets": OFFSET_ROWS,
    "members": MEMBERS,
}

BY_KIND = {"messages": MESSAGE_ROWS, "bodies": BODIES, "offsets": OFFSET_ROWS, "members": MEMBERS}

BACKLOG = StructType([
    StructField("group", StringType()), StructField("client_id", StringType()),
    StructField("topic", StringType()), StructField("queue", LongType()),
    StructField("bucket_start", LongType()), StructField("at", LongType()),
    StructField("produced", LongType()), StructField("committed", LongType()),
    StructField("backlog", LongType()), StructField("produced_in_bucket", LongType()),
    StructField("consumed_in_bucket", LongType()), StructField("production_rate", DoubleType()),
    StructField("consumption_rate", DoubleType()), StructField("oldest_unconsumed_age_ms", LongType()),
])


def incarnation() -> Column:
    """The row's incarnation of its topic, as column ``inc`` (``lakeq.lake.archive``; rows written
    before the lake had it: 0)."""
    return F.coalesce(F.col("inc"), F.lit(0)).cast("long").alias("inc")
