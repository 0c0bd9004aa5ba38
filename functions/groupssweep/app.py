"""Groups sweep function (EventBridge schedule, rate(1 minute)): expires silent members of every
consumer group and picks up child topics created under a member's subscribed topics
(lakeq.store.groups.sweep). Requests to a group expire its silent members too; this covers idle groups."""

from lakeq.common.obs import logger, tracer
from lakeq.store.groups import sweep


@logger.inject_lambda_context
@tracer.capture_lambda_handler(capture_response=False)
def lambda_handler(event, context):
    stats = sweep()
    logger.info("groups swept", extra=stats)
    return stats
