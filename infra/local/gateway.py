"""A local stand-in for API Gateway HTTP API (payload format 2.0), as a werkzeug WSGI app.

It serves the ``HttpApi`` routes of ``template.yaml`` with the functions' own handlers:

- routes are matched on the RAW request path, segment by segment (werkzeug's ``PATH_INFO`` has
  ``%2F`` already decoded, which would split ``quotes%2Fsh``). A ``{topic}`` (or greedy
  ``{name+}``) parameter also accepts several unencoded segments (``/v1/topics/quotes/sh/messages``
  → ``topic = "quotes/sh"``); ``rawPath`` handed to the handler is percent-decoded, as API Gateway
  hands it (``/v1/topics/quotes/sh/messages``; the route is in ``routeKey`` and ``pathParameters``).
  Routes with more literal segments win.
- unmatched path → 404 ``not_found``; a known path with another method → 405
  ``method_not_allowed``; a body over 10 MiB (API Gateway's limit) or an event over Lambda's 6 MB
  invocation request → 413 ``payload_too_large`` (plus API Gateway's ``"message": "Request Entity
  Too Large"``); a handler exception → 500 ``internal_error`` (logged with its traceback); a
  handler result over Lambda's 6 MB response limit → 500 ``{"message": "Internal Server Error"}``,
  what API Gateway answers when the integration fails (limits: ``infra/local/aws_rules.py``).
  Otherwise errors use the API's shape ``{"error": {"code", "message"}}``.
- ``POST /_local/streams/drain[?timeout=30]`` (local only, not in the template) runs the streams
  pumps (both: the batching-window one and the latency-bound one) until every stream is caught up
  and no invocation they started still runs → ``{"drained": bool, "records": n}``.
- ``GET /_local/info`` (local only) → ``{"aws_endpoint_url", "region", "stack_name", "environment"}``:
  the moto endpoint and the functions' resolved environment (table and bucket names), for local
  batch jobs (``make jobs``) that read the stack's lake and tables directly.
- ``GET /_local/schedules`` (local only) → ``{"schedules": [...]}``: the template's schedules (EventBridge
  rules, Glue triggers) with their runs; ``POST /_local/schedules/run[?name=…]`` fires them now
  (all, or those of one function / trigger / job) → ``{"runs": [{"name", "ok", ...}]}``
  (``infra/local/schedules.py``).
- ``GET /_local/metrics[?name=…&namespace=…]`` (local only) → ``{"series": [{"namespace", "name",
  "unit", "dimensions", "points": [{"minute", "sum", "count", "max", "last"}]}]}``: the EMF metrics the
  functions printed, per minute over the last hour, as CloudWatch would hold them (``infra/local/emf.py``;
  each document is also put into moto's CloudWatch, where ``GetMetricData`` reads it).
- ``POST /_local/glue`` (local only): Glue's JSON 1.1 API (``StartJobRun``, ``GetJobRun``,
  ``GetJobRuns``) for the template's Glue jobs; the stack points every function's Glue client here
  (``AWS_ENDPOINT_URL_GLUE``), so a ``StartJobRun`` runs the job (``infra/local/glue.py``).
"""
from __future__ import annotations

import base64
import json
import logging
import os
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Mapping
from urllib.parse import quote, unquote, urlsplit

from werkzeug.wrappers import Request, Response

from . import aws_rules, interceptor
from . import template as tpl_mod
from .handlers import HandlerCache, LambdaContext, add_to_sys_path
from .template import FunctionSpec

log = logging.getLogger("lakeq.local.gateway")
access_log = logging.getLogger("lakeq.local.access")

MAX_BODY = 10 * 1024 * 1024  # API Gateway's payload limit
MULTI_SEGMENT_PARAMS = frozenset({"topic"})
DRAIN_PATH = "/_local/streams/drain"
INFO_PATH = "/_local/info"
SCHEDULES_PATH = "/_local/schedules"
SCHEDULES_RUN_PATH = "/_local/schedules/run"
MOTO_RESET_PATH = "/moto-api/reset"  # moto's server mode, around each test (--sqs-any-signature only)
METRICS_PATH = "/_local/metrics"  # the functions' EMF metrics, per minute (infra/local/emf.py)
GLUE_PATH = "/_local/glue"  # the functions' Glue endpoint (AWS_ENDPOINT_URL_GLUE; infra/local/glue.py)

_TEXT_TYPES = (
    "text/", "application/json", "application/xml", "application/javascript",
    "application/x-www-form-urlencoded", "application/yaml", "application/x-yaml",
    "application/problem+json", "+json", "+xml",
)


def error_response(status: int, code: str, message: str, **extra: Any) -> Response:
    body = {"error": {"code": code, "message": message}}
    body.update(extra)
    return Response(json.dumps(body), status=status, mimetype="application/json")


# ----------------------------------------------------------------------------------- route table


@dataclass(frozen=True)
class Route:
    method: str  # GET, POST… or ANY
    path: str  # template path, e.g. /v1/topics/{topic}/messages
    spec: FunctionSpec
    segments: tuple[tuple[str, str], ...]  # ("lit", text) | ("param", name) | ("greedy", name)

    @property
    def route_key(self) -> str:
        return f"{self.method} {self.path}"

    @property
    def literal_count(self) -> int:
        return sum(1 for kind, _ in self.segments if kind == "lit")

    @classmethod
    def build(cls, method: str, path: str, spec: FunctionSpec) -> "Route":
        segs = []
        for part in path.strip("/").split("/") if path.strip("/") else []:
            if part.startswith("{") and part.endswith("}"):
                name = part[1:-1]
                if name.endswith("+"):
                    segs.append(("greedy", name[:-1]))
                elif name in MULTI_SEGMENT_PARAMS:
                    segs.append(("multi", name))
                else:
                    segs.append(("param", name))
            else:
                segs.append(("lit", part))
        return cls(method.upper(), path, spec, tuple(segs))

    def match(self, raw_segments: list[str]) -> tuple[dict[str, list[str]], int] | None:
        """``({param: [raw segments]}, extra segments consumed)`` or None."""
        return _match(self.segments, raw_segments, 0, 0, {})


def _match(pattern, raw, i, j, acc):
    if i == len(pattern):
        return (dict(acc), 0) if j == len(raw) else None
    kind, text = pattern[i]
    if kind == "lit":
        if j < len(raw) and unquote(raw[j]) == text:
            return _match(pattern, raw, i + 1, j + 1, acc)
        return None
    if kind == "param":
        if j < len(raw) and raw[j] != "":
            acc[text] = [raw[j]]
            out = _match(pattern, raw, i + 1, j + 1, acc)
            acc.pop(text, None)
            return out
        return None
    # multi / greedy: one or more segments, fewest first
    rest = len(pattern) - i - 1
    for k in range(1, len(raw) - j - rest + 1):
        chunk = raw[j:j + k]
        if any(s == "" for s in chunk):
            break
        acc[text] = chunk
        out = _match(pattern, raw, i + 1, j + k, acc)
        acc.pop(text, None)
        if out is not None:
            return out[0], out[1] + k - 1
    return None


class RouteTable:
    def __init__(self, specs: list[FunctionSpec]):
        self.routes = [Route.build(m, p, s) for s in specs for m, p in s.http_routes]

    def find(self, method: str, raw_segments: list[str]):
        """``(route, params, allowed_methods)``; route None when nothing matches this method."""
        candidates = []
        for r in self.routes:
            m = r.match(raw_segments)
            if m is not None:
                candidates.append((r, m[0], m[1]))
        if not candidates:
            return None, {}, set()
        # a route made only of parameters (the SQS queue URL, POST /{account}/{queue}) matches any
        # path of its length: it never makes a path "known" for a 405 (API Gateway answers 404)
        allowed = {r.method for r, _, _ in candidates if r.literal_count or not r.segments}
        usable = [c for c in candidates if c[0].method in (method, "ANY")]
        if not usable:
            return None, {}, allowed
        # exact literal routes first, then more literals, then fewer multi-segment captures,
        # then an exact method over ANY
        usable.sort(key=lambda c: (-c[0].literal_count, c[2], c[0].method == "ANY"))
        route, params, _ = usable[0]
        return route, params, allowed


# --------------------------------------------------------------------------------------- gateway


class Gateway:
    """WSGI app: API Gateway HTTP API (payload v2.0) in front of the template's functions.

    ``template`` is a path, YAML text, dict or :class:`~infra.local.template.Template`; handlers are
    imported lazily from their ``CodeUri`` (layers' directories on ``sys.path``). ``pump`` (a
    :class:`~infra.local.streams.StreamPump`) enables the drain route.
    """

    def __init__(
        self,
        template: Any = None,
        *,
        stack_name: str = tpl_mod.LOCAL_STACK,
        parameters: Mapping[str, Any] | None = None,
        pump: Any = None,
        max_body: int = MAX_BODY,
        region: str | None = None,
        handler_cache: HandlerCache | None = None,
        scheduler: Any = None,
        glue: Any = None,
        reset: Callable[[], Any] | None = None,
    ):
        self.template = tpl_mod.load_template(template)
        self.ctx = tpl_mod.make_context(self.template, stack_name, parameters, region=region)
        self.specs = tpl_mod.functions(self.ctx)
        self.routes = RouteTable(self.specs)
        self.pump = pump
        self.scheduler = scheduler
        self.glue = glue  # infra.local.glue.LocalGlue: Glue's job-run API under /_local/glue
        # infra.local.reset.LocalReset: moto's POST /moto-api/reset, in --sqs-any-signature mode only
        self.reset = reset
        self._reset_lock = threading.Lock()
        self.max_body = max_body
        self.handlers = handler_cache or HandlerCache()
        add_to_sys_path(tpl_mod.layer_dirs(self.template))

    # WSGI entry point
    def __call__(self, environ: dict, start_response: Callable) -> Any:
        started = time.perf_counter()
        request = Request(environ)
        try:
            response = self.dispatch(request)
        except Exception:  # pragma: no cover - dispatch already guards handlers
            log.exception("gateway failure")
            response = error_response(500, "internal_error", "internal error")
        ms = (time.perf_counter() - started) * 1000
        access_log.info("%s %s %s %.1fms", request.method, _raw_uri(environ).split("?")[0],
                        response.status_code, ms)
        return response(environ, start_response)

    def preload(self) -> None:
        """Import every handler now, logging (not raising) failures."""
        specs = [s for s in self.specs if s.http_routes]
        if hasattr(self.handlers, "preload"):
            self.handlers.preload(specs)
            return
        for spec in specs:
            try:
                self.handlers.get(spec)
            except Exception as exc:  # noqa: BLE001
                log.warning("cannot load %s yet: %s", spec.logical_id, exc)

    # --- SQS conformance runs (--sqs-any-signature only; docs/api.md "SQS conformance") ---------------
    def _conformance_aid(self, request: Request, raw_path: str) -> Response | None:
        """What moto's own test suite asks of the endpoint it runs against in server mode, besides SQS:
        ``POST /moto-api/reset`` (before each test) returns the stack to its just-started state before
        answering (:class:`infra.local.reset.LocalReset`; without one the path is an SQS queue's, and
        moto ignores the unsigned request's 403); STS ``GetCallerIdentity`` (its ``account_id``
        fixture) answers the stack's account. None: not one of them."""
        if raw_path == MOTO_RESET_PATH and self.reset is not None:
            with self._reset_lock:
                done = self.reset()
            return Response(json.dumps({"status": "ok", **(done or {})}), mimetype="application/json")
        if raw_path == "/" and "sts" in (request.headers.get("Authorization") or "").split("/")[3:4] \
                and request.form.get("Action") == "GetCallerIdentity":
            a = self.ctx.account_id
            body = (f'<GetCallerIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">'
                    f"<GetCallerIdentityResult><Arn>arn:aws:sts::{a}:user/moto</Arn><UserId>AKIAIOSFODNN7EXAMPLE"
                    f"</UserId><Account>{a}</Account></GetCallerIdentityResult><ResponseMetadata><RequestId>"
                    f"{uuid.uuid4()}</RequestId></ResponseMetadata></GetCallerIdentityResponse>")
            return Response(body, mimetype="text/xml")
        return None

    def dispatch(self, request: Request) -> Response:
        raw_uri = _raw_uri(request.environ)
        raw_path = raw_uri.split("?", 1)[0] or "/"
        method = request.method.upper()

        if raw_path == DRAIN_PATH and self.pump is not None:
            if method != "POST":
                return error_response(405, "method_not_allowed", f"{method} not allowed on {raw_path}")
            timeout = float(request.args.get("timeout", 30))
            drained, records = self.pump.drain(timeout)
            return Response(json.dumps({"drained": drained, "records": records}),
                            mimetype="application/json")

        if raw_path in (SCHEDULES_PATH, SCHEDULES_RUN_PATH) and self.scheduler is not None:
            want = "GET" if raw_path == SCHEDULES_PATH else "POST"
            if method != want:
                return error_response(405, "method_not_allowed", f"{method} not allowed on {raw_path}")
            if raw_path == SCHEDULES_PATH:
                return Response(json.dumps({"schedules": self.scheduler.describe()}), mimetype="application/json")
            name = request.args.get("name") or None
            if name and not self.scheduler.matching(name):
                return error_response(404, "not_found", f"no schedule named {name}")
            return Response(json.dumps({"runs": self.scheduler.run_now(name)}, default=str),
                            mimetype="application/json")

        if os.environ.get("LAKEQ_SQS_ANY_SIGNATURE") == "1" and method == "POST":
            aid = self._conformance_aid(request, raw_path)
            if aid is not None:
                return aid

        if self.glue is not None and (raw_path == GLUE_PATH or raw_path.startswith(GLUE_PATH + "/")):
            return self.glue.handle(request)

        if raw_path == METRICS_PATH and method == "GET":
            from .emf import COLLECTED
            q = request.args
            return Response(json.dumps({"series": COLLECTED.series(q.get("name") or None, q.get("namespace") or None)}),
                            mimetype="application/json")

        if raw_path == INFO_PATH and method == "GET":
            env = tpl_mod.environment(self.ctx)
            env.pop("LAKEQ_ADMIN_KEY_SHA256", None)
            return Response(json.dumps({"aws_endpoint_url": os.environ.get("AWS_ENDPOINT_URL"),
                                        "region": self.ctx.region, "stack_name": self.ctx.stack_name,
                                        "environment": env}), mimetype="application/json")

        raw_segments = raw_path.strip("/").split("/") if raw_path.strip("/") else []
        route, params, allowed = self.routes.find(method, raw_segments)
        if route is None:
            if allowed:
                resp = error_response(405, "method_not_allowed",
                                      f"{method} is not allowed on {unquote(raw_path)}")
                resp.headers["Allow"] = ", ".join(sorted(allowed))
                return resp
            return error_response(404, "not_found", f"no route for {method} {unquote(raw_path)}")

        length = request.content_length
        if length is not None and length > self.max_body:
            return Response(json.dumps(aws_rules.too_large_body(f"request body over {self.max_body} bytes")),
                            status=413, mimetype="application/json")
        body = request.stream.read(self.max_body + 1) if length is None else request.get_data()
        if len(body) > self.max_body:
            return Response(json.dumps(aws_rules.too_large_body(f"request body over {self.max_body} bytes")),
                            status=413, mimetype="application/json")

        event = self.build_event(request, route, params, raw_segments, body)
        too_large = aws_rules.request_too_large(None, event)  # Lambda's 6 MB invocation request
        if too_large:
            log.warning("%s: %s", event["routeKey"], too_large)
            return Response(json.dumps(aws_rules.too_large_body(too_large)), status=413,
                            mimetype="application/json")
        context = LambdaContext(route.spec, self.ctx.region, self.ctx.account_id,
                                event["requestContext"]["requestId"])
        try:
            # in-process handlers act as their function (IAM, infra/local/aws_rules.py); a worker
            # process acts as its function by itself
            with self.handlers.instance(route.spec) as handler, \
                    interceptor.acting_as(route.spec.logical_id):
                result = handler(event, context)
        except Exception as exc:
            trace = getattr(exc, "trace", "")
            if trace:  # raised in a worker process: its traceback tells what happened
                log.error("%s failed on %s: %s\n%s", route.spec.logical_id, event["routeKey"],
                          exc, trace)
            else:
                log.exception("%s failed on %s", route.spec.logical_id, event["routeKey"])
            return error_response(500, "internal_error", "the function failed; see the stack's log")
        too_large = aws_rules.response_too_large(result)
        if too_large:  # Lambda refuses the response: API Gateway answers its own 500
            log.error("%s on %s: %s", route.spec.logical_id, event["routeKey"], too_large)
            return Response(json.dumps(aws_rules.GATEWAY_INTERNAL_ERROR), status=500,
                            mimetype="application/json")
        try:
            return to_response(result)
        except Exception:
            log.exception("%s returned an invalid response: %r", route.spec.logical_id, result)
            return error_response(500, "internal_error", "the function returned an invalid response")

    # -------------------------------------------------------------------------------- the event
    def build_event(self, request: Request, route: Route, params: dict[str, list[str]],
                    raw_segments: list[str], body: bytes) -> dict[str, Any]:
        environ = request.environ
        # rawPath: each parameter's value as ONE percent-encoded segment
        out_segments: list[str] = []
        idx = 0
        path_params: dict[str, str] = {}
        for kind, text in route.segments:
            if kind == "lit":
                out_segments.append(raw_segments[idx])
                idx += 1
            else:
                chunk = params[text]
                idx += len(chunk)
                value = "/".join(unquote(s) for s in chunk)
                path_params[text] = value
                out_segments.append(chunk[0] if len(chunk) == 1 else quote(value, safe=""))
        # API Gateway's HTTP API hands the function the path percent-DECODED (``rawPath`` and
        # ``requestContext.http.path``; live captures: ``/a%2Fb`` arrives as ``/a/b``): so does this
        # stand-in, so the handlers' routing on ``routeKey`` + ``pathParameters``
        # (lakeq.api.http.routed_path) is what every local request exercises
        raw_path = unquote("/" + "/".join(out_segments))

        headers: dict[str, str] = {}
        for key, value in request.headers.items():
            k = key.lower()
            headers[k] = f"{headers[k]},{value}" if k in headers else value
        cookies = [c.strip() for c in headers.pop("cookie", "").split(";") if c.strip()]

        raw_qs = environ.get("QUERY_STRING", "")
        if isinstance(raw_qs, str):
            raw_qs = raw_qs.encode("latin-1").decode("utf-8", "replace")
        qsp: dict[str, str] = {}
        for key in request.args.keys():
            qsp[key] = ",".join(request.args.getlist(key))

        now = time.time()
        request_id = str(uuid.uuid4())
        host = headers.get("host", f"{environ.get('SERVER_NAME', '127.0.0.1')}:{environ.get('SERVER_PORT', '')}")
        http_ctx = {
            "method": request.method.upper(),
            "path": raw_path,
            "protocol": environ.get("SERVER_PROTOCOL", "HTTP/1.1"),
            "sourceIp": request.remote_addr or "127.0.0.1",
            "userAgent": headers.get("user-agent", ""),
        }
        event: dict[str, Any] = {
            "version": "2.0",
            "routeKey": route.route_key,
            "rawPath": raw_path,
            "rawQueryString": raw_qs,
            "headers": headers,
            "requestContext": {
                "accountId": self.ctx.account_id,
                "apiId": tpl_mod.LOCAL_API_ID,
                "domainName": host,
                "domainPrefix": host.split(".")[0].split(":")[0],
                "http": http_ctx,
                "requestId": request_id,
                "routeKey": route.route_key,
                "stage": "$default",
                "time": time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime(now)),
                "timeEpoch": int(now * 1000),
            },
            "isBase64Encoded": False,
        }
        if cookies:
            event["cookies"] = cookies
        if qsp:
            event["queryStringParameters"] = qsp
        if path_params:
            event["pathParameters"] = path_params
        if body:
            ctype = (headers.get("content-type") or "").lower()
            text = None
            if not ctype or any(t in ctype for t in _TEXT_TYPES):
                try:
                    text = body.decode("utf-8")
                except UnicodeDecodeError:
                    text = None
            if text is not None:
                event["body"] = text
            else:
                event["body"] = base64.b64encode(body).decode("ascii")
                event["isBase64Encoded"] = True
        return event


def _raw_uri(environ: Mapping[str, Any]) -> str:
    raw = environ.get("RAW_URI") or environ.get("REQUEST_URI")
    if raw:
        if isinstance(raw, str):
            raw = raw.encode("latin-1").decode("utf-8", "replace")
        if raw.startswith(("http://", "https://")):
            parts = urlsplit(raw)
            raw = parts.path + (f"?{parts.query}" if parts.query else "")
        return raw
    path = environ.get("PATH_INFO", "/").encode("latin-1").decode("utf-8", "replace")
    qs = environ.get("QUERY_STRING", "")
    return quote(path, safe="/:@!$&'()*+,;=-._~") + (f"?{qs}" if qs else "")


def to_response(result: Any) -> Response:
    """Map a Lambda proxy result (payload v2.0) to a werkzeug Response."""
    if isinstance(result, (str, bytes)) or not isinstance(result, Mapping) or "statusCode" not in result:
        # API Gateway's inference for payload v2.0: anything else is a 200 JSON body
        body = result if isinstance(result, str) else json.dumps(result)
        return Response(body, status=200, mimetype="application/json")
    status = int(result["statusCode"])
    body = result.get("body")
    if body is None:
        data = b""
    elif result.get("isBase64Encoded"):
        data = base64.b64decode(body)
    else:
        data = body.encode("utf-8") if isinstance(body, str) else body
    resp = Response(data, status=status)
    resp.headers.pop("Content-Type", None)
    for k, v in (result.get("headers") or {}).items():
        resp.headers[k] = str(v)
    for k, values in (result.get("multiValueHeaders") or {}).items():
        resp.headers.pop(k, None)
        for v in values:
            resp.headers.add(k, str(v))
    for c in result.get("cookies") or []:
        resp.headers.add("Set-Cookie", c)
    if "Content-Type" not in resp.headers and data:
        resp.headers["Content-Type"] = "application/json"
    return resp


def make_app(template: Any = None, **kwargs: Any) -> Gateway:
    return Gateway(template, **kwargs)


def access_log_to_stderr() -> None:
    if not access_log.handlers:
        h = logging.StreamHandler()
        h.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S"))
        access_log.addHandler(h)
        access_log.setLevel(logging.INFO)
        access_log.propagate = False


__all__ = ["Gateway", "make_app", "to_response", "error_response", "MAX_BODY", "DRAIN_PATH",
           "access_log_to_stderr"]

if os.environ.get("LAKEQ_GATEWAY_DEBUG"):  # pragma: no cover
    logging.basicConfig(level=logging.DEBUG)
