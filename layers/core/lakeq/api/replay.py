"""Replay routes (ReplayFunction): start, show, list and cancel replays (:mod:`lakeq.replay.service`)."""
from __future__ import annotations

from lakeq.api.http import Router, body, json_response, path, query
from lakeq.replay import service

router = Router()


@router.post("/v1/replays")
def start():
    p = router.caller
    return json_response(service.start(p, body(router)), 202)


@router.get("/v1/replays")
def list_():
    p = router.caller
    return json_response(service.list_(p, query(router)))


@router.get("/v1/replays/<id>")
def get(id: str):  # noqa: A002 - the route's parameter name
    p = router.caller
    return json_response(service.get(p, path(id)))


@router.post("/v1/replays/<id>/cancel")
def cancel(id: str):  # noqa: A002
    p = router.caller
    return json_response(service.cancel(p, path(id)))
