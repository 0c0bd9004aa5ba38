"""Replay copier function: on its EventBridge schedule (rate(1 minute)) each live replay's
selection outcome, then its copies at its rate (lakeq.replay.service.run_all) for the invocation's
time left minus a margin. A function of its own, not the routes' ReplayFunction: routes are cut at
API Gateway's 30 s, so a copier sharing their timeout copied for ~25 s a minute (≈ 0.42 × a
replay's rate); this one runs ~55 s of each minute, with no Glue right and no route."""
from aws_lambda_powertools.utilities.typing import LambdaContext

from lakeq.common import metric_names as M
from lakeq.common.obs import emit, logger, tracer

MARGIN_MS = 5_000


@logger.inject_lambda_context
@tracer.capture_lambda_handler(capture_response=False)
def lambda_handler(event: dict, context: LambdaContext) -> dict:
    from lakeq.replay.service import run_all

    stats = run_all(max(0, context.get_remaining_time_in_millis() - MARGIN_MS), progress=progress)
    logger.info("replays run", extra=stats)
    return stats


def progress(view: dict) -> None:
    """A replay's progress after its turn, per replay (its id): messages copied (and found, once
    the selection said how many)."""
    emit({"Replay": view["id"]}, {M.REPLAY_COPIED: view["copied"],
                                  **({M.REPLAY_FOUND: view["found"]} if view.get("found") is not None else {})})
