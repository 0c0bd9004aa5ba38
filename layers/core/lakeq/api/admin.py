"""Admin routes: health, topics, clients, offset reset, the OpenAPI description."""
from __future__ import annotations

import os

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.router import APIGatewayHttpRouter

from .. import service
from ..http import body, json_response, path, principal

router = APIGatewayHttpRouter()


@router.get("/v1/health")
def health():
    return json_response({"status": "ok"})


@router.get("/v1/openapi.yaml")
def openapi():
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(here, "openapi.yaml"), encoding="utf-8") as f:
        return Response(status_code=200, content_type="application/yaml", body=f.read())


@router.post("/v1/topics")
def create_topic():
    p = principal(router)
    return json_response(service.create_topic(p, body(router)), 201)


@router.get("/v1/topics")
def list_topics():
    return json_response(service.list_topics(principal(router)))


@router.patch("/v1/topics/<topic>")
def grow_topic(topic: str):
    p = principal(router)
    return json_response(service.grow_topic(p, path(topic), body(router)))


@router.post("/v1/clients")
def create_client():
    p = principal(router)
    return json_response(service.create_client(p, body(router)), 201)


@router.put("/v1/groups/<group>/offsets")
def reset_offset(group: str):
    p = principal(router)
    return json_response(service.reset_offset(p, path(group), body(router)))
