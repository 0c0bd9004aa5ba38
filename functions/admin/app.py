"""Admin function: health, topics, clients, offset reset, OpenAPI (routes in lakeq.api.admin)."""
from aws_lambda_powertools.logging import correlation_paths

from lakeq.api.admin import router
from lakeq.api.console import router as console_router
from lakeq.api.http import make_app
from lakeq.common.obs import logger, tracer

app = make_app(router, console_router)


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_HTTP)
@tracer.capture_lambda_handler(capture_response=False)
def lambda_handler(event, context):
    return app.resolve(event, context)
