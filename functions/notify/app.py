"""Notify function: SegmentsTable stream → a wake-up to each WebSocket connection watching a log
that got a new segment (lakeq.wake.notify). Never fails a batch for a wake-up it could not post:
a wake-up is a hint, the consumer's fallback pull delivers anyway (docs/design.md)."""
from aws_lambda_powertools.metrics import MetricUnit

from lakeq.common.obs import logger, metrics, tracer
from lakeq.wake import notify as wake

_post = None


@logger.inject_lambda_context
@metrics.log_metrics(raise_on_empty_metrics=False)
@tracer.capture_lambda_handler(capture_response=False)
def lambda_handler(event, context):
    global _post
    if _post is None:
        _post = wake.management_poster()
    out = wake.notify(event.get("Records") or [], _post)
    metrics.add_metric(name="WakePosted", unit=MetricUnit.Count, value=out.posted)
    if out.gone:
        metrics.add_metric(name="WakeGone", unit=MetricUnit.Count, value=len(out.gone))
    if out.failed:
        logger.warning("wake-ups not posted", extra={"connections": out.failed[:20], "count": len(out.failed)})
        metrics.add_metric(name="WakeFailed", unit=MetricUnit.Count, value=len(out.failed))
    return {"keys": len(out.keys), "posted": out.posted, "gone": len(out.gone), "failed": len(out.failed)}
