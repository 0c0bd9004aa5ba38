"""Consume function: pull, ack, offsets (routes in lakeq.api.consume)."""
from aws_lambda_powertools.logging import correlation_paths

from lakeq.api.consume import consume_router
from lakeq.api.http import make_app
from lakeq.common.obs import logger, metrics, tracer

app = make_app(consume_router)


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_HTTP)
@metrics.log_metrics(raise_on_empty_metrics=False)
@tracer.capture_lambda_handler(capture_response=False)
def lambda_handler(event, context):
    return app.resolve(event, context)
