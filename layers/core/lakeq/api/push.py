"""Push endpoint routes of a subscription (SubscriptionsFunction): register or replace, show,
delete, pause, resume, rotate the signing secret (use cases in lakeq.push.service)."""
from __future__ import annotations

from aws_lambda_powertools.event_handler.router import APIGatewayHttpRouter

from lakeq.api.http import body, json_response, path, principal
from lakeq.push import service as push

push_router = APIGatewayHttpRouter()


@push_router.put("/v1/subscriptions/<id>/push")
def put(id: str):  # noqa: A002 - the route's parameter name
    p = principal(push_router)
    out, status = push.put(p, path(id), body(push_router))
    return json_response(out, status)


@push_router.get("/v1/subscriptions/<id>/push")
def get(id: str):  # noqa: A002
    p = principal(push_router)
    return json_response(push.get(p, path(id)))


@push_router.delete("/v1/subscriptions/<id>/push")
def delete(id: str):  # noqa: A002
    p = principal(push_router)
    push.delete(p, path(id))
    return json_response(None, 204)


@push_router.post("/v1/subscriptions/<id>/push/pause")
def pause(id: str):  # noqa: A002
    p = principal(push_router)
    return json_response(push.pause(p, path(id), True))


@push_router.post("/v1/subscriptions/<id>/push/resume")
def resume(id: str):  # noqa: A002
    p = principal(push_router)
    return json_response(push.pause(p, path(id), False))


@push_router.post("/v1/subscriptions/<id>/push/secret")
def rotate(id: str):  # noqa: A002
    p = principal(push_router)
    return json_response(push.rotate(p, path(id), body(push_router)))
