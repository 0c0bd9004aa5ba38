"""Push endpoint routes of a subscription and of a consumer group (SubscriptionsFunction): register or replace, show,
delete, pause, resume, rotate the signing secret (use cases in lakeq.push.service)."""
from __future__ import annotations

from lakeq.api.http import Router, body, json_response, path
from lakeq.push import service as push

push_router = Router()


@push_router.put("/v1/subscriptions/<id>/push")
def put(id: str):  # noqa: A002 - the route's parameter name
    p = push_router.caller
    out, status = push.put(p, path(id), body(push_router))
    return json_response(out, status)


@push_router.get("/v1/subscriptions/<id>/push")
def get(id: str):  # noqa: A002
    p = push_router.caller
    return json_response(push.get(p, path(id)))


@push_router.delete("/v1/subscriptions/<id>/push")
def delete(id: str):  # noqa: A002
    p = push_router.caller
    push.delete(p, path(id))
    return json_response(None, 204)


@push_router.post("/v1/subscriptions/<id>/push/pause")
def pause(id: str):  # noqa: A002
    p = push_router.caller
    return json_response(push.pause(p, path(id), True))


@push_router.post("/v1/subscriptions/<id>/push/resume")
def resume(id: str):  # noqa: A002
    p = push_router.caller
    return json_response(push.pause(p, path(id), False))


@push_router.post("/v1/subscriptions/<id>/push/secret")
def rotate(id: str):  # noqa: A002
    p = push_router.caller
    return json_response(push.rotate(p, path(id), body(push_router)))


# --- a consumer group's endpoint (admin or the group's key) ------------------------------------------
@push_router.put("/v1/groups/<group>/push")
def put_group(group: str):
    p = push_router.caller
    out, status = push.put(p, path(group), body(push_router), push.GROUP)
    return json_response(out, status)


@push_router.get("/v1/groups/<group>/push")
def get_group(group: str):
    p = push_router.caller
    return json_response(push.get(p, path(group), push.GROUP))


@push_router.delete("/v1/groups/<group>/push")
def delete_group(group: str):
    p = push_router.caller
    push.delete(p, path(group), push.GROUP)
    return json_response(None, 204)


@push_router.post("/v1/groups/<group>/push/pause")
def pause_group(group: str):
    p = push_router.caller
    return json_response(push.pause(p, path(group), True, push.GROUP))


@push_router.post("/v1/groups/<group>/push/resume")
def resume_group(group: str):
    p = push_router.caller
    return json_response(push.pause(p, path(group), False, push.GROUP))


@push_router.post("/v1/groups/<group>/push/secret")
def rotate_group(group: str):
    p = push_router.caller
    return json_response(push.rotate(p, path(group), body(push_router), push.GROUP))
