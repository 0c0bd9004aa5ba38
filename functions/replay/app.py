"""Replay function: the replay routes (lakeq.api.replay): start (the selection job through Glue's
StartJobRun), show, list, cancel. The copies are made by ReplayCopierFunction's schedule."""
from aws_lambda_powertools.logging import correlation_paths

from lakeq.api.http import make_app
from lakeq.api.replay import router
from lakeq.common.obs import logger, tracer

app = make_app(router)


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_HTTP)
@tracer.capture_lambda_handler(capture_response=False)
def lambda_handler(event, context):
    return app.resolve(event, context)
