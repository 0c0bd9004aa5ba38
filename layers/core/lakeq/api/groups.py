"""Consumer-group membership routes: join, heartbeat, sync, leave, describe (API.md)."""
from __future__ import annotations

from lakeq.api.http import Router, body, json_response, path
from lakeq.groups import service as group_service

router = Router()


@router.post("/v1/groups/<group>/members")
def join(group: str):
    p = router.caller
    return json_response(group_service.join(p, path(group), body(router)))


@router.post("/v1/groups/<group>/members/<member_id>/heartbeat")
def heartbeat(group: str, member_id: str):
    p = router.caller
    return json_response(group_service.heartbeat(p, path(group), path(member_id), body(router)))


@router.post("/v1/groups/<group>/members/<member_id>/sync")
def sync(group: str, member_id: str):
    p = router.caller
    return json_response(group_service.sync(p, path(group), path(member_id), body(router)))


@router.delete("/v1/groups/<group>/members/<member_id>")
def leave(group: str, member_id: str):
    p = router.caller
    group_service.leave(p, path(group), path(member_id))
    return json_response(None, 204)


@router.get("/v1/groups/<group>")
def describe(group: str):
    p = router.caller
    return json_response(group_service.describe(p, path(group)))
