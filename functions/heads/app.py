"""Heads function: SegmentsTable stream → each queue's ``max_offset`` moved to the end of its newest
segment (lakeq.produce.heads): one conditional UpdateItem per queue per stream batch, instead of
one per append on the produce path (issue 16 item 3). A failed batch raises and is retried whole
by the event source mapping: the writes only move heads forward, so applying it again is safe."""
from aws_lambda_powertools.metrics import MetricUnit

from lakeq.common.obs import logger, metrics, tracer
from lakeq.produce import heads


@logger.inject_lambda_context
@metrics.log_metrics(raise_on_empty_metrics=False)
@tracer.capture_lambda_handler(capture_response=False)
def lambda_handler(event, context):
    out = heads.advance(event.get("Records") or [])
    metrics.add_metric(name="HeadsMoved", unit=MetricUnit.Count, value=out["moved"])
    return out
