"""HTTP glue shared by every function: the resolver factory, error mapping, request helpers.

Errors are mapped in one place: :class:`~lakeq.errors.ApiError` → its status and API.md's body;
anything unexpected → 500 ``internal_error`` (logged with its traceback). Unknown routes → 404.
"""
from __future__ import annotations

import json
from urllib.parse import unquote

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response

from .errors import ApiError, BadRequest
from .service import Principal, authenticate

logger = Logger(service="lakeq", child=True)

JSON = "application/json"


def error_response(status: int, code: str, message: str) -> Response:
    return Response(status_code=status, content_type=JSON,
                    body=json.dumps({"error": {"code": code, "message": message}}))


def json_response(body: object, status: int = 200) -> Response:
    if status == 204:
        return Response(status_code=204, content_type=JSON, body="")
    return Response(status_code=status, content_type=JSON, body=json.dumps(body))


def make_app(*routers) -> APIGatewayHttpResolver:
    app = APIGatewayHttpResolver()
    for r in routers:
        app.include_router(r)

    @app.exception_handler(ApiError)
    def _api_error(e: ApiError) -> Response:
        return error_response(e.status, e.code, e.message)

    @app.not_found
    def _not_found(_e) -> Response:
        return error_response(404, "not_found", "no such route")

    @app.exception_handler(Exception)
    def _unexpected(e: Exception) -> Response:
        logger.exception("unhandled error")
        return error_response(500, "internal_error", "internal error")

    return app


def principal(router) -> Principal:
    return authenticate((router.current_event.headers or {}).get("authorization"))


def body(router) -> str | None:
    ev = router.current_event
    try:
        return ev.decoded_body if ev.is_base64_encoded else ev.body
    except (ValueError, UnicodeDecodeError):
        raise BadRequest("request body is not valid UTF-8") from None


def query(router) -> dict:
    """Query parameters; a repeated parameter is a 400 (API Gateway joins them with commas)."""
    return dict(router.current_event.query_string_parameters or {})


def path(value: str) -> str:
    return unquote(value)
