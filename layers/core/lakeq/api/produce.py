"""The produce route: ``POST /v1/topics/{topic}/messages`` (ProduceFunction)."""
from __future__ import annotations

import os

from aws_lambda_powertools.metrics import MetricUnit

from lakeq.api.http import Router, body, json_response, path
from lakeq.common import metric_names as M
from lakeq.common.obs import count_rows, metrics
from lakeq.produce import service as produce_service

produce_router = Router()


@produce_router.post("/v1/topics/<topic>/messages")
def produce(topic: str):
    p = produce_router.caller
    headers = produce_router.current_event.headers or {}
    # the caller's trace (X-Amzn-Trace-Id), else this invocation's (Tracing: Active sets the variable)
    traces = (headers.get("x-amzn-trace-id"), os.environ.get("_X_AMZN_TRACE_ID"))
    out = produce_service.produce(p, path(topic), body(produce_router), traces=traces)
    metrics.add_metric(name=M.SENT, unit=MetricUnit.Count, value=len(out["results"]))
    count_rows({(("Topic", path(topic)),): {M.SENT: len(out["results"])}})
    return json_response(out)
