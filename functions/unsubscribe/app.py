"""Unsubscribe function: SubscriptionsTable stream REMOVE records → purge the deleted
subscription's message list (logic in lakeq.subscriptions.purge.purge_removed).

``DELETE /v1/subscriptions/{id}`` already purges inline; this is what makes the purge survive a
crash of that request (or finish a list too long to purge inline): the REMOVE record exists iff
the delete transaction committed, and the event source mapping retries until the purge is done.
"""
import time

from aws_lambda_powertools.metrics import MetricUnit

from lakeq.common.obs import logger, metrics, tracer
from lakeq.subscriptions.purge import purge_removed

MARGIN_S = 5.0  # stop purging this long before the function's timeout, and report the rest


@logger.inject_lambda_context
@metrics.log_metrics(raise_on_empty_metrics=False)
@tracer.capture_lambda_handler(capture_response=False)
def lambda_handler(event, context):
    deadline = time.monotonic() + max(1.0, context.get_remaining_time_in_millis() / 1000 - MARGIN_S)
    out = purge_removed(event, deadline)
    if out["batchItemFailures"]:
        metrics.add_metric(name="UnsubscribePurgeUnfinished", unit=MetricUnit.Count, value=1)
    return out
