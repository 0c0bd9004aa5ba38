"""Fan-out function: SegmentsTable stream → subscription message lists (logic in lakeq.fanout.worker).

Not powertools' BatchProcessor: it handles records one at a time, while the fan-out groups a whole
batch per subscription (one list append per subscription and batch, not per record), parks a
failing subscription instead of failing its records, and must keep a shard's order. The partial
failure contract is the same: ``batchItemFailures`` names the earliest record not done and every
record after it. A poison record first in a batch of several raises (a function error), so the
event source mapping's ``BisectBatchOnFunctionError`` isolates it; alone, it is reported failed,
retried ``MaximumRetryAttempts`` times and sent to the on-failure queue (template.yaml).
"""
from aws_lambda_powertools.metrics import MetricUnit

from lakeq.common import clock
from lakeq.common.obs import logger, metrics, tracer
from lakeq.fanout import worker as fanout


@logger.inject_lambda_context
@metrics.log_metrics(raise_on_empty_metrics=False)
@tracer.capture_lambda_handler(capture_response=False)
def lambda_handler(event, context):
    if "Records" not in event:  # the scheduled sweep (template.yaml: Redeliver)
        out = fanout.redeliver_parked(clock.now())
        if out.unparked:
            logger.warning("subscriptions un-parked", extra={"unparked": out.unparked})
            metrics.add_metric(name="FanoutUnparked", unit=MetricUnit.Count, value=len(out.unparked))
        return {"unparked": len(out.unparked), "added": out.added}
    records = event.get("Records") or []
    metrics.add_metric(name="FanoutRecords", unit=MetricUnit.Count, value=len(records))
    try:
        out = fanout.handle_batch(event, clock.now())
    except fanout.PoisonBatch:
        metrics.add_metric(name="FanoutPoisonRecords", unit=MetricUnit.Count, value=1)
        raise
    if out.poison is not None:
        metrics.add_metric(name="FanoutPoisonRecords", unit=MetricUnit.Count, value=1)
    if out.parked:
        logger.error("subscriptions parked", extra={"parked": out.parked})
        metrics.add_metric(name="FanoutParked", unit=MetricUnit.Count, value=len(out.parked))
    if out.unparked:
        logger.warning("subscriptions un-parked", extra={"unparked": out.unparked})
        metrics.add_metric(name="FanoutUnparked", unit=MetricUnit.Count, value=len(out.unparked))
    resp = fanout.response(out, records)
    if resp["batchItemFailures"]:
        metrics.add_metric(name="FanoutFailures", unit=MetricUnit.Count, value=len(resp["batchItemFailures"]))
    return resp
