"""Replay routes (ReplayFunction): start, show, list and cancel replays (:mod:`lakeq.replay.service`)."""
from __future__ import annotations

from aws_lambda_powertools.event_handler.router import APIGatewayHttpRouter

from lakeq.api.http import body, json_response, path, principal, query
from lakeq.replay import service

router = APIGatewayHttpRouter()


@router.post("/v1/replays")
def start():
    p = principal(router)
    return json_response(service.start(p, body(router)), 202)


@router.get("/v1/replays")
def list_():
    p = principal(router)
    return json_response(service.list_(p, query(router)))


@router.get("/v1/replays/<id>")
def get(id: str):  # noqa: A002 - the route's parameter name
    p = principal(router)
    return json_response(service.get(p, path(id)))


@router.post("/v1/replays/<id>/cancel")
def cancel(id: str):  # noqa: A002
    p = principal(router)
    return json_response(service.cancel(p, path(id)))
