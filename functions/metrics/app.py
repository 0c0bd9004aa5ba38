"""Metrics function (EventBridge schedule, rate(1 minute)): prints the per-minute gauges — per
(topic, group), per subscription, per topic and the deployment's totals — as CloudWatch embedded
metric format documents, one per row (lakeq.console.gauges computes them, lakeq.common.obs.emit
prints them; CloudWatch Logs turns them into metrics: no PutMetricData call, no cloudwatch:* IAM).
It stops 5 s before the invocation's end (the rest of its page waits: the next run of that page
starts at another row, so no row waits for ever). Between runs it keeps each row's last figures in
one S3 object (what the alarms watch is computed from every row's, not the run's page only): read
at the start, written at the end if no other run wrote it in between."""

import os

from lakeq.common import clock
from lakeq.common.obs import emit, logger, tracer
from lakeq.console import gauges

MARGIN_MS = 5_000


@logger.inject_lambda_context
@tracer.capture_lambda_handler(capture_response=False)
def lambda_handler(event, context):
    now = clock.now()
    deadline = now + max(0, context.get_remaining_time_in_millis() - MARGIN_MS)
    # each row printed as soon as it is computed: a run the timeout cuts keeps what it printed
    out = gauges.run(now=now, deadline=deadline, detail=os.environ.get("LAKEQ_METRICS_DETAIL", "active"),
                     sink=lambda row: emit(*row, timestamp_ms=now))
    stats = {"rows": out.published, "of": out.total_rows, "truncated": out.truncated, "state_saved": out.state_saved}
    logger.info("metrics published", extra=stats)
    return stats
