"""The backlog console: its static page (``GET /console``, ``GET /console/{asset}``, no auth: the
page holds no secret; the operator pastes a key, kept in sessionStorage) and the small read-only
JSON routes it needs besides the existing ones (``GET /v1/clients``, ``GET /v1/topics/{topic}``;
``GET /v1/subscriptions/{id}/offsets`` is on ``subscriptions_router``, served by the
subscriptions function)."""
from __future__ import annotations

from aws_lambda_powertools.event_handler import Response

from lakeq.api.http import Router, json_response, path, public, query
from lakeq.console import charts, monitor, summary

router = Router()
subscriptions_router = Router()

# the page talks to this same origin only; nothing inline, no third-party script
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
       "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")


def _static(name: str) -> Response:
    ctype, text = monitor.asset(name)
    return Response(status_code=200, content_type=ctype, body=text,
                    headers={"Cache-Control": "no-cache", "Content-Security-Policy": CSP,
                             "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"})


@router.get("/console")
@public
def console_page():
    return _static("index.html")


@router.get("/console/<asset>")
@public
def console_asset(asset: str):
    return _static(path(asset))


@router.get("/v1/clients")
def list_clients():
    return json_response(monitor.list_clients(router.caller))


@router.get("/v1/summary")
def operator_summary():
    """The console's summary first (issue 18 item 3): totals, per topic, per (group, topic)."""
    return json_response(summary.summary(router.caller))


@router.get("/v1/console/metrics")
def console_metrics():
    """The console's charts (issue 34 item 4): produce / consume rates and a backlog, last hour, per
    minute, from CloudWatch (GetMetricData)."""
    return json_response(charts.metrics(router.caller, query(router)))


@router.get("/v1/topics/<topic>")
def topic_detail(topic: str):
    p = router.caller
    return json_response(monitor.topic_detail(p, path(topic)))


@subscriptions_router.get("/v1/subscriptions/<id>/offsets")
def subscription_offsets(id: str):
    p = subscriptions_router.caller
    return json_response(monitor.subscription_offsets(p, path(id)))
