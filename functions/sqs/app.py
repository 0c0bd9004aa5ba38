"""SQS function: the SQS-compatible endpoint, POST / and POST /{account}/{queue} (lakeq.sqs.handler)."""
from aws_lambda_powertools.logging import correlation_paths

from lakeq.common.obs import logger, metrics, tracer
from lakeq.sqs.handler import handle


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_HTTP)
@metrics.log_metrics(raise_on_empty_metrics=False)
@tracer.capture_lambda_handler(capture_response=False)
def lambda_handler(event, context):
    return handle(event, logger)
