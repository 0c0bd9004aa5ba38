"""Push function (issue 17): delivers subscriptions' and consumer groups' messages to their push
endpoints.

Triggers (template.yaml): the SegmentsTable stream, filtered to INSERTs of segments, so a new
message is pushed promptly — a list segment (``pq = "~<id>#0"``) to its subscription's endpoint, a
topic segment to the endpoints of the consumer groups registered on its topic (one registry Query
per topic per batch); and a schedule (rate 1 minute) that runs every active endpoint (due retries,
anything the stream missed). Logic in lakeq.push.delivery (no HTTP use case is loaded here).
"""
from aws_lambda_powertools.metrics import MetricUnit

from lakeq.common import metric_names as M
from lakeq.common.obs import emit, logger, metrics, tracer
from lakeq.push import delivery as push


@logger.inject_lambda_context
@metrics.log_metrics(raise_on_empty_metrics=False)
@tracer.capture_lambda_handler(capture_response=False)
def lambda_handler(event, context):
    # every request of the run ends before the invocation does (lakeq.push.delivery.run_deadline)
    remaining_ms = context.get_remaining_time_in_millis()
    if "Records" in event:
        out = push.stream(event["Records"], remaining_ms=remaining_ms)
    else:  # the scheduled sweep
        out = push.sweep(remaining_ms=remaining_ms)
    for endpoint, d in out.items():  # per endpoint: the batches POSTed, and those that failed
        if d.batches:
            emit({"Endpoint": endpoint}, {M.PUSH_ATTEMPTS: d.batches, M.PUSH_FAILURES: d.failed})
    delivered = sum(d.delivered for d in out.values())
    failed = sum(d.failed for d in out.values())
    dead = sum(d.dead_lettered for d in out.values())
    metrics.add_metric(name=M.PUSH_DELIVERED, unit=MetricUnit.Count, value=delivered)
    metrics.add_metric(name=M.PUSH_FAILED, unit=MetricUnit.Count, value=failed)
    if dead:
        metrics.add_metric(name=M.PUSH_DEAD_LETTERED, unit=MetricUnit.Count, value=dead)
    skipped = sum(d.skipped for d in out.values())
    summary = {"endpoints": len(out), "delivered": delivered, "failed": failed, "dead_lettered": dead}
    if skipped:  # endpoints the run's deadline left to the next run
        summary["skipped"] = skipped
    logger.info("push run", extra=summary)
    if "Records" in event:  # every record is done: a failed push is retried by the schedule, not the stream
        return {"batchItemFailures": []}
    return summary
