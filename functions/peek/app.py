"""Peek function: read a queue, a group's or a subscription's unsettled messages without locking
or counting a delivery (routes in lakeq.api.peek; its role may only read)."""
from aws_lambda_powertools.logging import correlation_paths

from lakeq.api.http import make_app
from lakeq.api.peek import router
from lakeq.common.obs import logger, tracer

app = make_app(router)


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_HTTP)
@tracer.capture_lambda_handler(capture_response=False)
def lambda_handler(event, context):
    return app.resolve(event, context)
