"""Fan-out function: SegmentsTable stream → subscription message lists (logic in lakeq.fanout).

Not powertools' BatchProcessor: it handles records one at a time, while the fan-out groups a whole
batch per subscription (one list append per subscription and batch, not per record). The partial
failure contract is the same: ``batchItemFailures`` names the earliest record not done.
"""
from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit

from lakeq import fanout
from lakeq.service import clock

logger = Logger(service="lakeq")
metrics = Metrics(namespace="lakeq", service="lakeq")


@logger.inject_lambda_context
@metrics.log_metrics(raise_on_empty_metrics=False)
def lambda_handler(event, context):
    out = fanout.handle(event, clock())
    metrics.add_metric(name="FanoutRecords", unit=MetricUnit.Count, value=len(event.get("Records") or []))
    if out["batchItemFailures"]:
        metrics.add_metric(name="FanoutFailures", unit=MetricUnit.Count, value=1)
    return out
