"""HTTP glue shared by every function: the router and resolver factory, authentication, error mapping,
request helpers.

Authentication is one middleware on every resolver (:func:`make_app`): before a route runs, it turns the
``Authorization`` header into the caller (401 otherwise, API.md's body) and puts it in the request
context, where the route reads it as ``router.caller``; then a repeated query parameter is a 400
(API.md's order: 401 before 400). A route answers without a key only when it is marked
:func:`public`; a request that matches no route is a 404 with or without a key.

One resolver may resolve several requests at once (threads of one process: the in-process test
harness, ``tests/handlers.py``, the local stack's ``--in-process`` mode; Lambda never does): powertools
keeps the request's event on ``BaseRouter``, one per process, and its routing context on the resolver,
so :class:`LakeqResolver` keeps both per request instead (:data:`_resolving`), and :func:`make_app`
builds each route's middleware stack before the first request (powertools builds it on a route's first
call, and two first calls at once stacked their frames into each other).

Errors are mapped in one place, :func:`lakeq.common.errors.http_error`: an :class:`~lakeq.common.errors.ApiError`
→ its status and API.md's body; anything else (an internal :class:`~lakeq.common.errors.LakeqError` or an
unexpected exception) → 500 ``internal_error`` (logged with its traceback). Unknown routes → 404.
"""
from __future__ import annotations

import re
from contextvars import ContextVar
from typing import Any, Callable, TypeVar
from urllib.parse import quote, unquote, unquote_plus

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response
from aws_lambda_powertools.event_handler.api_gateway import BaseRouter
from aws_lambda_powertools.event_handler.router import APIGatewayHttpRouter

from lakeq.admin.auth import Principal, authenticate
from lakeq.common.contextual import PerContext
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


F = TypeVar("F", bound=Callable)
CALLER = "caller"  # the request context's key for the authenticated Principal


class _Resolving:
    """The request this thread (this context) is resolving: its event (powertools' proxy event),
    Lambda context and routing context (the route, its arguments, the caller)."""

    __slots__ = ("event", "lambda_context", "context")

    def __init__(self, lambda_context: Any, context: dict):
        self.event: Any = None
        self.lambda_context = lambda_context
        self.context = context


# The request being resolved, per thread: read by every LakeqResolver and Router of this module, so a
# router included in a second resolver (a function module loaded twice, as the tests do; powertools'
# ``router.context`` and ``router.current_event`` go to the resolver that included it last) still
# reads the request its own thread resolves.
_resolving: ContextVar[_Resolving | None] = ContextVar("lakeq_resolving", default=None)



def public(func: F) -> F:
    """Mark a route that answers without a key (health, the OpenAPI description, the console's page):
    ``@router.get(...)`` above ``@public``. Every other route authenticates its caller first."""
    func.lakeq_public = True  # type: ignore[attr-defined]
    return func


def template(rule: str) -> str:
    """A route rule as powertools names the matched route (``app.request.route``): ``<x>`` → ``{x}``.

    >>> template("/v1/topics/<topic>/messages")
    '/v1/topics/{topic}/messages'
    """
    return re.sub(r"<(.*?)>", r"{\1}", rule)


class Router(APIGatewayHttpRouter):
    """The routers of lakeq's functions: a powertools router that records each route's (method, rule)
    and whether it is :func:`public`, so :func:`make_app`'s middleware knows which requests to
    authenticate, and hands a route its authenticated caller (:attr:`caller`)."""

    def __init__(self) -> None:
        super().__init__()
        self.routes: dict[tuple[str, str], bool] = {}  # (METHOD, /path/{param}) -> public

    def route(self, rule, method, *args, **kwargs):
        register = super().route(rule, method, *args, **kwargs)
        methods = (method,) if isinstance(method, str) else tuple(method)

        def record(func):
            for m in methods:
                self.routes[(m.upper(), template(rule))] = bool(getattr(func, "lakeq_public", False))
            return register(func)
        return record

    @property
    def caller(self) -> Principal:
        """The request's authenticated caller, put in the request context by the resolver's middleware
        (a :func:`public` route has none: a KeyError, i.e. a 500, not an unauthenticated answer)."""
        r = _resolving.get()
        return (r.context if r is not None else {})[CALLER]


def authenticating(routes: dict[tuple[str, str], bool]):
    """The middleware every resolver uses: for a request that matched one of ``routes`` (an unmatched
    request goes on to the 404 untouched), authenticate the caller unless the route is public (401),
    keep it in the request context, then refuse a repeated query parameter (400)."""
    def authenticate_caller(app, next_middleware):
        req = app.request
        known = routes.get((req.method, req.route))
        if known is None:
            return next_middleware(app)
        if not known:
            app.append_context(**{CALLER: authenticate((req.headers or {}).get("authorization"))})
        check_query(app)
        return next_middleware(app)
    return authenticate_caller


_PARAM = re.compile(r"\{([^}/]+?)\+?\}")


def routed_path(event: dict) -> str | None:
    """The request's path rebuilt from the route API Gateway matched (``routeKey``) and its
    ``pathParameters``, each value one percent-encoded segment; None when the event names no route
    with parameters (a function URL's ``$default``, a direct invocation).

    API Gateway's HTTP API hands the function ``rawPath`` percent-DECODED (live captures: ``/a%2Fb``
    arrives as ``/a/b``, ``%252F`` decoded twice), so a child topic's ``quotes%2Fsh`` would reach the
    resolver as two segments and match no route; the route and its parameters say what matched. A
    parameter decoded only once (``quotes%2Fsh``) is decoded again: names hold no ``%``.

    >>> routed_path({"routeKey": "POST /v1/topics/{topic}/messages", "rawPath": "/v1/topics/quotes/sh/messages",
    ...              "pathParameters": {"topic": "quotes/sh"}})
    '/v1/topics/quotes%2Fsh/messages'
    >>> routed_path({"routeKey": "GET /v1/topics/{topic}", "pathParameters": {"topic": "quotes%2Fsh"}})
    '/v1/topics/quotes%2Fsh'
    >>> routed_path({"routeKey": "$default", "rawPath": "/v1/topics/a%2Fb/messages"}) is None
    True
    """
    route, params = event.get("routeKey") or "", event.get("pathParameters")
    method, _, template_ = route.partition(" ")
    if not params or not isinstance(params, dict) or not template_.startswith("/") or "{" not in template_:
        return None

    names = _PARAM.findall(template_)
    if any(not isinstance(params.get(n), str) for n in names):
        return None  # the parameters are not the route's: route on rawPath, as without them

    def segment(m: re.Match) -> str:
        value = params[m.group(1)]
        return quote(unquote(value) if "%" in value else value, safe="")
    path_ = _PARAM.sub(segment, template_)
    stage = ((event.get("requestContext") or {}).get("stage")) or "$default"
    return path_ if stage == "$default" else f"/{stage}{path_}"


class LakeqResolver(APIGatewayHttpResolver):
    """powertools' HTTP API resolver, routing on :func:`routed_path` when API Gateway names the
    route it matched (its ``rawPath`` is decoded: see there), on ``rawPath`` otherwise.

    Its request state is the request's own (:data:`_resolving`), not the process's: powertools'
    ``resolve`` puts the event on ``BaseRouter`` (a class attribute) and the route, its arguments and
    the caller in the resolver's ``context`` dict, which a second request resolved meanwhile by
    another thread replaced (its event: this request then read the other's body, headers and query)
    or cleared (its caller: a 500). Lambda runs one request per execution environment at a time, so
    on AWS nothing changes; in one process with threads (tests/handlers.py's ``Api``, the local
    stack's ``--in-process`` mode) each request now reads its own (flake35)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._base_context: dict = {}
        super().__init__(*args, **kwargs)

    # each the request's own while one is resolved; outside a request, powertools' class attributes
    # on BaseRouter (the event, the Lambda context) and the resolver's own routing context
    current_event = PerContext(_resolving, "event", "current_event", home=lambda _: BaseRouter)
    lambda_context = PerContext(_resolving, "lambda_context", home=lambda _: BaseRouter)
    context = PerContext(_resolving, "context", "_base_context")

    def _to_proxy_event(self, event):
        # powertools' resolve assigns the event it makes here to ``BaseRouter.current_event`` (the
        # process's); the request's own copy is the one this resolver reads
        proxy = super()._to_proxy_event(event)
        r = _resolving.get()
        if r is not None:
            r.event = proxy
        return proxy

    def resolve(self, event, context):
        if isinstance(event, dict):
            rebuilt = routed_path(event)
            if rebuilt is not None and rebuilt != event.get("rawPath"):
                event = {**event, "rawPath": rebuilt}
        token = _resolving.set(_Resolving(context, dict(self._base_context)))
        try:
            return super().resolve(event, context)
        finally:
            _resolving.reset(token)

    def build_middleware_stacks(self) -> None:
        """Build every route's middleware stack now. powertools builds a route's on its first call,
        unguarded: a second first call in another thread meanwhile wrapped the half-built stack again
        (a request that skipped the authentication, and the route's stack broken for good: two
        adapters, a 500 every call)."""
        for route in [*self._static_routes, *self._dynamic_routes]:
            if not route._middleware_stack_built:
                route._build_middleware_stack(router_middlewares=self._router_middlewares, app=self)


def make_app(*routers: Router) -> LakeqResolver:
    app = LakeqResolver(serializer=dumps)
    routes: dict[tuple[str, str], bool] = {}
    for r in routers:
        if not isinstance(r, Router):  # its routes would not be known to the middleware
            raise TypeError(f"{r!r} is not a lakeq.api.http.Router")
        app.include_router(r)
        routes.update(r.routes)
    app.use(middlewares=[authenticating(routes)])

    @app.not_found
    def _not_found(_e) -> Response:
        return error_response(404, "not_found", "no such route")

    @app.exception_handler(Exception)
    def _error(e: Exception) -> Response:
        if not isinstance(e, ApiError):
            logger.exception("unhandled error")
        return error_response(*http_error(e))

    app.build_middleware_stacks()  # (after app.use: a stack holds the middlewares known when it is built)
    return app


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
    """Query parameters (a repeated one was refused with a 400 by :func:`make_app`'s middleware:
    API Gateway joins them with commas)."""
    return dict(router.current_event.query_string_parameters or {})


def path(value: str) -> str:
    return unquote(value)
