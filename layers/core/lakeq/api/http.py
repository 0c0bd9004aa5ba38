"""HTTP glue shared by every function: the resolver factory, error mapping, request helpers.

Errors are mapped in one place, :func:`lakeq.common.errors.http_error`: an :class:`~lakeq.common.errors.ApiError`
→ its status and API.md's body; anything else (an internal :class:`~lakeq.common.errors.LakeqError` or an
unexpected exception) → 500 ``internal_error`` (logged with its traceback). Unknown routes → 404.
"""
from __future__ import annotations

from urllib.parse import unquote, unquote_plus

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response

from lakeq.admin.auth import Principal, authenticate
from lakeq.common.errors import ApiError, BadRequest, http_error
from lakeq.common.obs import logger
from lakeq.common.payload import dumps

JSON = "application/json"
# Bodies are compact JSON with UTF-8 kept as is (``ensure_ascii=False``): a non-ASCII character
# costs its UTF-8 bytes, not a 6-byte ``\uXXXX`` escape (see :mod:`lakeq.common.payload` for what the
# Lambda runtime adds on top, and the pull's byte budget). The resolver's own serializer (used
# when a route returns a dict) is the same function.


def error_response(status: int, code: str, message: str) -> Response:
    return Response(status_code=status, content_type=JSON,
                    body=dumps({"error": {"code": code, "message": message}}))


def json_response(body: object, status: int = 200) -> Response:
    if status == 204:
        return Response(status_code=204, content_type=JSON, body="")
    return Response(status_code=status, content_type=JSON, body=dumps(body))


def make_app(*routers) -> APIGatewayHttpResolver:
    app = APIGatewayHttpResolver(serializer=dumps)
    for r in routers:
        app.include_router(r)

    @app.not_found
    def _not_found(_e) -> Response:
        return error_response(404, "not_found", "no such route")

    @app.exception_handler(Exception)
    def _error(e: Exception) -> Response:
        if not isinstance(e, ApiError):
            logger.exception("unhandled error")
        return error_response(*http_error(e))

    return app


def principal(router) -> Principal:
    """Authenticate (401), then refuse a repeated query parameter (400): API.md's check order."""
    p = authenticate((router.current_event.headers or {}).get("authorization"))
    check_query(router)
    return p


def repeated_parameters(raw_query: str | None) -> list[str]:
    """The names that occur more than once in a raw query string (percent-decoded names)."""
    seen: set[str] = set()
    out: list[str] = []
    for part in (raw_query or "").split("&"):
        if not part:
            continue
        name = unquote_plus(part.partition("=")[0])
        if name in seen and name not in out:
            out.append(name)
        seen.add(name)
    return out


def check_query(router) -> None:
    """400 when a query parameter is repeated. API Gateway (HTTP API, payload 2.0) joins a repeated
    parameter's values with commas in ``queryStringParameters`` (``tags=A&tags=B`` → ``"A,B"``),
    which no route can tell from one value; ``rawQueryString`` is passed as the client sent it."""
    ev = router.current_event
    raw = ev.get("rawQueryString")
    dup = repeated_parameters(raw)
    if dup:
        raise BadRequest(f"query parameter '{dup[0]}' is given more than once; send each parameter once "
                         "(several tags go in one 'tags' parameter separated by '||')")


def body(router) -> str | None:
    ev = router.current_event
    try:
        return ev.decoded_body if ev.is_base64_encoded else ev.body
    except (ValueError, UnicodeDecodeError):
        raise BadRequest("request body is not valid UTF-8") from None


def query(router) -> dict:
    """Query parameters; a repeated parameter is a 400 (API Gateway joins them with commas)."""
    check_query(router)
    return dict(router.current_event.query_string_parameters or {})


def path(value: str) -> str:
    return unquote(value)
