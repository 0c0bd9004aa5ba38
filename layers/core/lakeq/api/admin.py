"""Admin routes: health, topics, clients, offset reset, the OpenAPI description."""
from __future__ import annotations

import os

from aws_lambda_powertools.event_handler import Response

from lakeq import consume
from lakeq.admin import service as admin_service
from lakeq.api.http import Router, body, json_response, path, public
from lakeq.sqs import keys as sqs_keys

router = Router()


@router.get("/v1/health")
@public
def health():
    """Liveness, and where a waiting consumer connects for wake-ups (``wake_url``: the stack's
    ``WakeUrl``; the local stack's own WebSocket port, which it sets in ``LAKEQ_LOCAL_WAKE_URL``)."""
    wake_url = os.environ.get("LAKEQ_LOCAL_WAKE_URL") or os.environ.get("LAKEQ_WAKE_URL")
    return json_response({"status": "ok", **({"wake_url": wake_url} if wake_url else {})})


@router.get("/v1/openapi.yaml")
@public
def openapi():
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(here, "openapi.yaml"), encoding="utf-8") as f:
        return Response(status_code=200, content_type="application/yaml", body=f.read())


@router.post("/v1/topics")
def create_topic():
    p = router.caller
    return json_response(admin_service.create_topic(p, body(router)), 201)


@router.get("/v1/topics")
def list_topics():
    return json_response(admin_service.list_topics(router.caller))


@router.patch("/v1/topics/<topic>")
def grow_topic(topic: str):
    p = router.caller
    return json_response(admin_service.grow_topic(p, path(topic), body(router)))


@router.post("/v1/clients")
def create_client():
    p = router.caller
    return json_response(admin_service.create_client(p, body(router)), 201)


@router.patch("/v1/clients/<name>")
def patch_client(name: str):
    p = router.caller
    return json_response(admin_service.patch_client(p, path(name), body(router)))


@router.put("/v1/groups/<group>/offsets")
def reset_offset(group: str):
    p = router.caller
    return json_response(consume.reset_offset(p, path(group), body(router)))


@router.get("/v1/clients/<name>/keys")
def list_keys(name: str):
    p = router.caller
    return json_response(admin_service.list_keys(p, path(name)))


@router.post("/v1/clients/<name>/keys")
def issue_key(name: str):
    p = router.caller
    return json_response(admin_service.issue_key(p, path(name)), 201)


@router.delete("/v1/clients/<name>/keys/<key_id>")
def revoke_key(name: str, key_id: str):
    p = router.caller
    admin_service.revoke_key(p, path(name), path(key_id))
    return json_response(None, 204)


# --- SQS credentials (issue 9, lakeq.sqs.keys) -------------------------------------------------
@router.get("/v1/clients/<name>/sqs-credentials")
def list_sqs_credentials(name: str):
    p = router.caller
    return json_response(sqs_keys.list_credentials(p, path(name)))


@router.post("/v1/clients/<name>/sqs-credentials")
def issue_sqs_credential(name: str):
    p = router.caller
    return json_response(sqs_keys.issue_credential(p, path(name)), 201)


@router.delete("/v1/clients/<name>/sqs-credentials/<access_key_id>")
def revoke_sqs_credential(name: str, access_key_id: str):
    p = router.caller
    sqs_keys.revoke_credential(p, path(name), path(access_key_id))
    return json_response(None, 204)


@router.get("/v1/sqs-credentials/admin")
def admin_sqs_credential():
    p = router.caller
    return json_response(sqs_keys.admin_credential(p))
