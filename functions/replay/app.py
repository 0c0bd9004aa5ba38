"""Replay function: the replay routes (lakeq.api.replay) and, on its EventBridge schedule
(rate(1 minute)), the copier: each live replay's selection outcome, then its copies at its rate
(lakeq.replay.service.run_all) for the invocation's time left minus a margin."""
from aws_lambda_powertools.logging import correlation_paths

from lakeq.api.http import make_app
from lakeq.api.replay import router
from lakeq.common.obs import logger

app = make_app(router)
MARGIN_MS = 5_000


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_HTTP)
def lambda_handler(event, context):
    if event.get("source") == "aws.events" or event.get("detail-type") == "Scheduled Event":
        from lakeq.replay.service import run_all

        stats = run_all(max(0, context.get_remaining_time_in_millis() - MARGIN_MS))
        logger.info("replays run", extra=stats)
        return stats
    return app.resolve(event, context)
