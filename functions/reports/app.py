"""Reports function: the data-lake jobs' reports (routes in lakeq.api.reports)."""
from aws_lambda_powertools.logging import correlation_paths

from lakeq.api.http import make_app
from lakeq.api.reports import reports_router
from lakeq.common.obs import logger, tracer

app = make_app(reports_router)


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_HTTP)
@tracer.capture_lambda_handler(capture_response=False)
def lambda_handler(event, context):
    return app.resolve(event, context)
