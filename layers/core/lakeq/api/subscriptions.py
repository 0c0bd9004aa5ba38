"""Subscription routes: create, list, delete, pull (ack goes through POST /v1/acks)."""
from __future__ import annotations

from aws_lambda_powertools.metrics import MetricUnit

from lakeq.api.http import Router, body, json_response, path, query
from lakeq.common import metric_names as M
from lakeq.common.obs import count_rows, metrics
from lakeq.subscriptions import service as subscriptions

router = Router()


@router.post("/v1/subscriptions")
def create():
    p = router.caller
    return json_response(subscriptions.create(p, body(router)), 201)


@router.get("/v1/subscriptions")
def list_():
    p = router.caller
    return json_response(subscriptions.list_(p, query(router)))


@router.delete("/v1/subscriptions/<id>")
def delete(id: str):  # noqa: A002 - the route's parameter name
    p = router.caller
    subscriptions.delete(p, path(id))
    return json_response(None, 204)


@router.get("/v1/subscriptions/<id>/messages")
def pull(id: str):  # noqa: A002
    p = router.caller
    out = subscriptions.pull(p, path(id), query(router))
    metrics.add_metric(name=M.SUBSCRIPTION_RECEIVED, unit=MetricUnit.Count, value=len(out["messages"]))
    # per subscriber client, not per subscription id (a key could churn ids into new metrics)
    count_rows({(("Subscriber", p.client or "admin"),): {M.SUBSCRIPTION_RECEIVED: len(out["messages"])}})
    return json_response(out)
