"""Promoter function (EventBridge schedule, rate(1 minute)): due delayed messages (produce
``delay_ms``) of queues nobody pulls join their queues (lakeq.produce.delayed.sweep). A pull promotes its own
topic's due messages at once; this covers idle queues, so a message joins within about a minute."""

from lakeq.common.obs import logger, tracer
from lakeq.produce.delayed import sweep


@logger.inject_lambda_context
@tracer.capture_lambda_handler(capture_response=False)
def lambda_handler(event, context):
    stats = sweep()
    logger.info("delayed messages promoted", extra=stats)
    return stats
