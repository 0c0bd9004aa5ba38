"""Peek routes (PeekFunction, a read-only role): a topic queue's messages, a group's and a
subscription's unsettled messages (:mod:`lakeq.peek.service`)."""
from __future__ import annotations

from lakeq.api.http import Router, json_response, path, query
from lakeq.peek import service

router = Router()


@router.get("/v1/topics/<topic>/queues/<queue>/messages")
def queue_messages(topic: str, queue: str):
    p = router.caller
    return json_response(service.queue_messages(p, path(topic), path(queue), query(router)))


@router.get("/v1/groups/<group>/pending")
def group_pending(group: str):
    p = router.caller
    return json_response(service.group_pending(p, path(group), query(router)))


@router.get("/v1/subscriptions/<id>/pending")
def subscription_pending(id: str):  # noqa: A002 - the route's parameter name
    p = router.caller
    return json_response(service.subscription_pending(p, path(id), query(router)))
