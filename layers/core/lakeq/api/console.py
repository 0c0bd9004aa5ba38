"""The backlog console: its static page (``GET /console``, ``GET /console/{asset}``, no auth: the
page holds no secret; the operator pastes a key, kept in sessionStorage) and the small read-only
JSON routes it needs besides the existing ones (``GET /v1/clients``, ``GET /v1/topics/{topic}``;
``GET /v1/subscriptions/{id}/offsets`` is on ``subscriptions_router``, served by the
subscriptions function)."""
from __future__ import annotations

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.router import APIGatewayHttpRouter

from lakeq.api.http import check_query, json_response, path, principal
from lakeq.console import monitor, summary

router = APIGatewayHttpRouter()
subscriptions_router = APIGatewayHttpRouter()

# the page talks to this same origin only; nothing inline, no third-party script
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
       "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")


def _static(name: str) -> Response:
    ctype, text = monitor.asset(name)
    return Response(status_code=200, content_type=ctype, body=text,
                    headers={"Cache-Control": "no-cache", "Content-Security-Policy": CSP,
                             "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"})


@router.get("/console")
def console_page():
    check_query(router)
    return _static("index.html")


@router.get("/console/<asset>")
def console_asset(asset: str):
    check_query(router)
    return _static(path(asset))


@router.get("/v1/clients")
def list_clients():
    return json_response(monitor.list_clients(principal(router)))


@router.get("/v1/summary")
def operator_summary():
    """The console's summary first (issue 18 item 3): totals, per topic, per (group, topic)."""
    check_query(router)
    return json_response(summary.summary(principal(router)))


@router.get("/v1/topics/<topic>")
def topic_detail(topic: str):
    p = principal(router)
    return json_response(monitor.topic_detail(p, path(topic)))


@subscriptions_router.get("/v1/subscriptions/<id>/offsets")
def subscription_offsets(id: str):
    p = principal(subscriptions_router)
    return json_response(monitor.subscription_offsets(p, path(id)))
