"""Redrive function: the redrive routes (lakeq.api.redrive) and, on its EventBridge schedule
(rate(1 minute)), the runner that moves the running redrives' messages at their rates
(lakeq.redrive.service.run_all) for the invocation's time left minus a margin."""
from aws_lambda_powertools.logging import correlation_paths

from lakeq.api.http import make_app
from lakeq.api.redrive import router
from lakeq.common import metric_names as M
from lakeq.common.obs import emit, logger, tracer

app = make_app(router)
MARGIN_MS = 5_000


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_HTTP)
@tracer.capture_lambda_handler(capture_response=False)
def lambda_handler(event, context):
    if event.get("source") == "aws.events" or event.get("detail-type") == "Scheduled Event":
        from lakeq.redrive.service import run_all

        stats = run_all(max(0, context.get_remaining_time_in_millis() - MARGIN_MS), progress=progress)
        logger.info("redrives run", extra=stats)
        return stats
    return app.resolve(event, context)


def progress(view: dict) -> None:
    """A redrive's progress after its turn, per redrive (its id): messages moved, of its total."""
    emit({"Redrive": view["id"]}, {M.REDRIVE_MOVED: view["moved"], M.REDRIVE_TOTAL: view["total"]})
