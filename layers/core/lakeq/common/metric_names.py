"""Every CloudWatch metric lakeq emits (namespace ``POWERTOOLS_METRICS_NAMESPACE``, ``lakeq/<stack name>``): its
name, unit and dimension sets. The emitters use these constants (``add_metric(name=M.SENT…)`` or
:func:`lakeq.common.obs.emit`), template.yaml's alarms and dashboard name them, and
``tests/unit/test_metric_names.py`` checks both against this table (so an alarm cannot watch a
metric nobody emits, and a literal name in an ``add_metric`` call must be in the table).

Names follow SQS's own where the meaning is the same (``NumberOfMessagesSent``,
``ApproximateNumberOfMessagesVisible``, ``ApproximateAgeOfOldestMessage``). Dimensions: every
document carries ``service`` (powertools' default dimension, ``POWERTOOLS_SERVICE_NAME``: the stack's
name; the namespace is ``lakeq/<stack name>``); the
gauges add ``Topic`` + ``Group`` (a consumer group's view of a topic), ``Subscriber`` + ``Topic`` (a
client's subscriptions to a topic), or
``Topic`` alone; deployment totals carry ``service`` only; push counters add ``Endpoint``; the
request paths' counters are printed under ``service`` and under their row's dimensions.
See docs/design.md ("Operations") and docs/costs.md for the count and its price.
"""
from __future__ import annotations

# ---- counters from the request paths (per invocation: service, and per row — Topic for SENT; Topic+Group,
#      Subscriber (a subscription's client) or Replay for the others — lakeq.common.obs.count_rows)
SENT = "NumberOfMessagesSent"                       # produce: messages accepted by POST …/messages
RECEIVED = "NumberOfMessagesReceived"               # group pulls: messages delivered
SUBSCRIPTION_RECEIVED = "NumberOfSubscriptionMessagesReceived"  # subscription pulls
ACKS = "NumberOfAcks"                               # acks (one per receipt settled, batch entries too)
RELEASED = "NumberOfMessagesReleased"               # offsets named in an ack's `release`
REJECTED = "NumberOfMessagesRejected"               # offsets named in an ack's `reject`
ACCEPTED = "NumberOfMessagesAccepted"               # offsets named in an ack's `accept`

# ---- push (per endpoint: Endpoint dimension; and run totals, service only)
PUSH_ATTEMPTS = "PushAttempts"                      # batches POSTed to an endpoint
PUSH_FAILURES = "PushFailures"                      # batches whose POST failed (non-2xx, timeout…)
PUSH_DELIVERED = "PushDelivered"                    # messages delivered by push (run total)
PUSH_FAILED = "PushFailed"                          # batches whose delivery failed (run total)
PUSH_DEAD_LETTERED = "PushDeadLettered"             # messages push dead-lettered (run total)

# ---- redrive and replay progress (per run of their schedules: Redrive / Replay dimension, the id)
REDRIVE_MOVED = "RedriveMessagesMoved"              # a redrive's messages moved so far
REDRIVE_TOTAL = "RedriveMessagesTotal"              # of its total
REPLAY_COPIED = "ReplayMessagesCopied"              # a replay's messages copied so far
REPLAY_FOUND = "ReplayMessagesFound"                # of those its selection found

# ---- gauges, each minute by the metrics function (Topic+Group, Subscriber+Topic, Topic, or totals)
VISIBLE = "ApproximateNumberOfMessagesVisible"      # backlog not locked (available to a pull)
NOT_VISIBLE = "ApproximateNumberOfMessagesNotVisible"  # locked by a pull, not yet settled (in flight)
BACKLOG = "ApproximateNumberOfMessagesBacklog"      # visible + not visible (unsettled)
AGE = "ApproximateAgeOfOldestMessage"               # ms since the oldest unsettled message joined its queue
DEAD_LETTERED = "NumberOfMessagesDeadLettered"      # dead-lettered so far (cumulative; DIFF = new ones)
DELAYED = "ApproximateNumberOfMessagesDelayed"      # per topic: delayed messages not yet in a queue
PUBLISHER_ROWS = "MetricsPublisherRows"             # rows the run published (totals only)
PUBLISHER_TRUNCATED = "MetricsPublisherTruncated"   # 1 when the run left rows of its page out (time, errors)
# what the deployment's alarms watch (service only, lakeq.console.gauges): the rows of clients the admin
# left out of the alarms (PATCH /v1/clients {"alarms": false}) are not in them
ALARMED_AGE = "AlarmedAgeOfOldestMessage"           # every run: the oldest over every row as last read (its
#                                                     own page this minute, the others' within `pages` minutes)
ALARMED_GROWING = "AlarmedBacklogGrowingMinutes"    # every run: the longest run of minutes any row's
#                                                     backlog grew at each of its reads (its own, row by row)
# counted where a message is dead-lettered (lakeq.consume.settle.flush_due, after its write), whatever the
# metrics function reads: the dead-letter alarm sees every row in a deployment of any size
ALARMED_DEAD_LETTERS = "AlarmedMessagesDeadLettered"

# ---- other counters the functions emit (per invocation, service dimension only)
OTHER_COUNTERS = ("WakePosted", "WakeGone", "WakeFailed", "HeadsMoved", "UnsubscribePurgeUnfinished",
                  "FanoutUnparked", "FanoutRecords", "FanoutPoisonRecords", "FanoutParked", "FanoutFailures",
                  "LakePoisonRecords", "LakeRecords", "LakeObjects", "WakeConnects")

UNITS: dict[str, str] = {
    **{n: "Count" for n in (SENT, RECEIVED, SUBSCRIPTION_RECEIVED, ACKS, RELEASED, REJECTED, ACCEPTED,
                            PUSH_ATTEMPTS, PUSH_FAILURES, PUSH_DELIVERED, PUSH_FAILED, PUSH_DEAD_LETTERED,
                            REDRIVE_MOVED, REDRIVE_TOTAL, REPLAY_COPIED, REPLAY_FOUND,
                            VISIBLE, NOT_VISIBLE, BACKLOG, DEAD_LETTERED, DELAYED, PUBLISHER_ROWS,
                            PUBLISHER_TRUNCATED, ALARMED_GROWING, ALARMED_DEAD_LETTERS, *OTHER_COUNTERS)},
    AGE: "Milliseconds",
    ALARMED_AGE: "Milliseconds",
}
ALL = frozenset(UNITS)

# the gauges of one consumer's view (a Topic+Group row, a Subscriber+Topic row, the totals)
CONSUMER_GAUGES = (VISIBLE, NOT_VISIBLE, BACKLOG, AGE, DEAD_LETTERED)
