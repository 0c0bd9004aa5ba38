"""A local stand-in for API Gateway WebSocket APIs and their management API (issue 16 wake-ups).

It serves the ``AWS::ApiGatewayV2::Api`` of ``template.yaml`` whose ``ProtocolType`` is
``WEBSOCKET`` with the functions its routes' integrations name, on its own port:

- ``GET /<stage>`` with ``Upgrade: websocket`` → the ``$connect`` route's function gets API
  Gateway's ``CONNECT`` event (headers, query string, ``requestContext.connectionId``…); a non-2xx
  answer refuses the handshake with that status and body; a 2xx answer's ``Sec-WebSocket-Protocol``
  header is the subprotocol selected;
- each text message → the route its ``RouteSelectionExpression`` (``$request.body.<field>``)
  selects, else ``$default`` (none: API Gateway's ``{"message": "Forbidden"}`` answer); a route with
  a route response sends the function's ``body`` back on the connection;
- the connection closing (either side, the 10-minute idle timeout, the 2-hour maximum) → the
  ``$disconnect`` route's function gets the ``DISCONNECT`` event;
- the management API on the same port: ``POST|GET|DELETE /<stage>/@connections/<id>``
  (PostToConnection, GetConnection, DeleteConnection); an unknown connection is 410
  ``GoneException``, as API Gateway answers. boto3's ``apigatewaymanagementapi`` client talks to it
  (the stack sets ``AWS_ENDPOINT_URL_APIGATEWAYMANAGEMENTAPI`` for the functions);
- ``POST /_local/ws/drop?count=N`` (local only): the next N PostToConnection calls answer 200 but
  deliver nothing — lost wake-ups, for tests of the client's fallback (``count=0`` stops dropping).

Why not a library: the venv has no WebSocket server (``websockets`` is not installed; werkzeug
has none). RFC 6455 for this purpose is small — the handshake, text/close/ping/pong frames,
client-to-server masking, no extensions, no fragmentation of what it sends — and it is here
(:func:`read_frame`, :func:`frame`), about 60 lines.
"""
from __future__ import annotations

import base64
import hashlib
import json
import logging
import select
import socket
import socketserver
import struct
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Mapping
from urllib.parse import parse_qsl, unquote, urlsplit

from . import interceptor
from . import template as tpl_mod
from .handlers import HandlerCache, LambdaContext

log = logging.getLogger("lakeq.local.websocket")

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
OP_CONT, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA
MAX_MESSAGE = 128 * 1024  # API Gateway: 128 KB per message (32-KB frames)
IDLE_TIMEOUT_S = 600.0  # API Gateway closes a connection idle for 10 minutes
MAX_CONNECTION_S = 7200.0  # ... and any connection after 2 hours
DROP_PATH = "/_local/ws/drop"


# ------------------------------------------------------------------------------ RFC 6455 frames
def accept_key(key: str) -> str:
    """``Sec-WebSocket-Accept`` for a client's ``Sec-WebSocket-Key`` (RFC 6455 §1.3's example).

    >>> accept_key("dGhlIHNhbXBsZSBub25jZQ==")
    's3pPLMBiTxaQ9kYGzzhZRbK+xOo='
    """
    return base64.b64encode(hashlib.sha1((key + GUID).encode()).digest()).decode()


def frame(opcode: int, payload: bytes, mask: bytes | None = None) -> bytes:
    """One final frame; ``mask`` (4 bytes) for a client's frames, none for a server's."""
    n = len(payload)
    head = bytes([0x80 | opcode])
    m = 0x80 if mask else 0
    if n < 126:
        head += bytes([m | n])
    elif n < 65536:
        head += bytes([m | 126]) + struct.pack("!H", n)
    else:
        head += bytes([m | 127]) + struct.pack("!Q", n)
    if mask:
        payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        return head + mask + payload
    return head + payload


def _read_exact(f: Any, n: int) -> bytes:
    data = f.read(n)
    if data is None or len(data) < n:
        raise ConnectionError("connection closed")
    return data


def read_frame(f: Any) -> tuple[bool, int, bytes]:
    """``(fin, opcode, payload)`` of the next frame on file ``f`` (unmasked if it was masked)."""
    b0, b1 = _read_exact(f, 2)
    n = b1 & 0x7F
    if n == 126:
        n = struct.unpack("!H", _read_exact(f, 2))[0]
    elif n == 127:
        n = struct.unpack("!Q", _read_exact(f, 8))[0]
    if n > MAX_MESSAGE:
        raise ValueError(f"frame of {n} bytes is over {MAX_MESSAGE}")
    mask = _read_exact(f, 4) if b1 & 0x80 else None
    payload = _read_exact(f, n) if n else b""
    if mask:
        payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return bool(b0 & 0x80), b0 & 0x0F, payload


def read_message(f: Any, on_control) -> tuple[int, bytes]:
    """The next whole message (fragments joined); control frames go to ``on_control(op, data)``."""
    parts: list[bytes] = []
    first_op = None
    while True:
        fin, op, payload = read_frame(f)
        if op >= 0x8:
            if on_control(op, payload):
                return op, payload
            continue
        if first_op is None:
            first_op = op
        parts.append(payload)
        if sum(map(len, parts)) > MAX_MESSAGE:
            raise ValueError("message over 128 KB")
        if fin:
            return first_op, b"".join(parts)


# ------------------------------------------------------------------------------ the template
@dataclass
class WsApi:
    logical_id: str
    selection: str  # the body field that selects a route ($request.body.action -> "action")
    stage: str
    routes: dict[str, tpl_mod.FunctionSpec] = field(default_factory=dict)
    responds: set[str] = field(default_factory=set)  # route keys with a route response


def websocket_apis(template: Any, stack_name: str = tpl_mod.LOCAL_STACK,
                   ctx: tpl_mod.Context | None = None) -> list[WsApi]:
    """The template's WebSocket APIs with their routes → function specs."""
    ctx = ctx or tpl_mod.make_context(template, stack_name)
    res = ctx.resources
    specs = tpl_mod.functions(ctx)
    out = []
    for lid, r in tpl_mod.resources_of_type(ctx.template, "AWS::ApiGatewayV2::Api").items():
        props = r.get("Properties") or {}
        if props.get("ProtocolType") != "WEBSOCKET":
            continue
        expr = str(props.get("RouteSelectionExpression") or "$request.body.action")
        api = WsApi(lid, expr.rpartition(".")[2], "ws")

        def _api_of(p: Mapping) -> str | None:
            ref = p.get("ApiId")
            return ref.get("Ref") if isinstance(ref, Mapping) else None

        for sr in tpl_mod.resources_of_type(ctx.template, "AWS::ApiGatewayV2::Stage").values():
            sp = sr.get("Properties") or {}
            if _api_of(sp) == lid:
                api.stage = str(tpl_mod.resolve(sp.get("StageName"), ctx))
        route_keys: dict[str, str] = {}
        for rlid, rr in tpl_mod.resources_of_type(ctx.template, "AWS::ApiGatewayV2::Route").items():
            rp = rr.get("Properties") or {}
            if _api_of(rp) != lid:
                continue
            key = str(rp.get("RouteKey"))
            route_keys[rlid] = key
            target = tpl_mod.resolve(rp.get("Target"), ctx) or ""
            integ_lid = next((i for i in res if str(target).endswith("/" + ctx.physical_name(i))
                              and res[i].get("Type") == "AWS::ApiGatewayV2::Integration"), None)
            if integ_lid is None:
                log.warning("%s: route %s has no integration known locally", lid, key)
                continue
            uri = str(tpl_mod.resolve((res[integ_lid].get("Properties") or {}).get("IntegrationUri"), ctx))
            spec = next((s for s in specs if f":function:{s.function_name}/" in uri), None)
            if spec is None:
                log.warning("%s: route %s's integration names no function of the template", lid, key)
                continue
            api.routes[key] = spec
        for rr in tpl_mod.resources_of_type(ctx.template, "AWS::ApiGatewayV2::RouteResponse").values():
            rp = rr.get("Properties") or {}
            rid = rp.get("RouteId")
            if _api_of(rp) == lid and isinstance(rid, Mapping) and rid.get("Ref") in route_keys:
                api.responds.add(route_keys[rid["Ref"]])
        out.append(api)
    return out


# ------------------------------------------------------------------------------ the server
@dataclass
class Connection:
    id: str
    sock: socket.socket
    connected_at: float
    source_ip: str
    last_active: float
    lock: threading.Lock = field(default_factory=threading.Lock)

    def send(self, opcode: int, data: bytes) -> None:
        with self.lock:
            self.sock.sendall(frame(opcode, data))


class WebSocketGateway:
    """The WebSocket API and its management API on ``host:port`` (0: any free port)."""

    def __init__(self, template: Any = None, *, stack_name: str = tpl_mod.LOCAL_STACK,
                 handler_cache: HandlerCache | None = None, host: str = "127.0.0.1", port: int = 0,
                 idle_timeout_s: float = IDLE_TIMEOUT_S, max_connection_s: float = MAX_CONNECTION_S):
        self.template = tpl_mod.load_template(template)
        self.ctx = tpl_mod.make_context(self.template, stack_name)
        apis = websocket_apis(self.template, ctx=self.ctx)
        self.api = apis[0] if apis else None
        self.handlers = handler_cache or HandlerCache()
        self.idle_timeout_s = idle_timeout_s
        self.max_connection_s = max_connection_s
        self.connections: dict[str, Connection] = {}
        self.lock = threading.Lock()
        self.drop_posts = 0
        self.posted = 0
        gw = self

        class _Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:  # noqa: D102
                gw._handle(self)

        class _Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.server = _Server((host, port), _Handler)
        self.host, self.port = self.server.server_address[:2]
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"ws://{self.host}:{self.port}/{self.api.stage if self.api else 'ws'}"

    @property
    def management_url(self) -> str:
        return f"http://{self.host}:{self.port}/{self.api.stage if self.api else 'ws'}"

    def start(self) -> "WebSocketGateway":
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="lakeq-websocket", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        with self.lock:
            conns = list(self.connections.values())
        for c in conns:
            try:
                c.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    # ----- one TCP connection: an HTTP request (management API) or a WebSocket
    def _handle(self, h: socketserver.StreamRequestHandler) -> None:
        line = h.rfile.readline(65537).decode("latin-1").strip()
        if not line:
            return
        method, target, _ = (line.split(" ", 2) + ["", ""])[:3]
        headers: dict[str, str] = {}
        while True:
            hl = h.rfile.readline(65537).decode("latin-1")
            if hl in ("\r\n", "\n", ""):
                break
            k, _, v = hl.partition(":")
            k = k.strip().lower()
            headers[k] = f"{headers[k]},{v.strip()}" if k in headers else v.strip()
        if headers.get("upgrade", "").lower() == "websocket":
            self._websocket(h, target, headers)
        else:
            self._management(h, method.upper(), target, headers)

    @staticmethod
    def _respond(h, status: int, body: bytes = b"", headers: Mapping[str, str] | None = None) -> None:
        reason = {200: "OK", 204: "No Content", 400: "Bad Request", 403: "Forbidden", 404: "Not Found",
                  410: "Gone", 500: "Internal Server Error"}.get(status, "Status")
        out = [f"HTTP/1.1 {status} {reason}", f"Content-Length: {len(body)}", "Connection: close"]
        out += [f"{k}: {v}" for k, v in (headers or {}).items()]
        h.wfile.write(("\r\n".join(out) + "\r\n\r\n").encode("latin-1") + body)
        h.wfile.flush()

    def _management(self, h, method: str, target: str, headers: Mapping[str, str]) -> None:
        parts = urlsplit(target)
        length = int(headers.get("content-length") or 0)
        body = h.rfile.read(length) if length else b""
        if parts.path == DROP_PATH and method == "POST":
            n = int(dict(parse_qsl(parts.query)).get("count", "1"))
            with self.lock:
                self.drop_posts = max(0, n)
            return self._respond(h, 200, json.dumps({"drop_posts": self.drop_posts}).encode(),
                                 {"Content-Type": "application/json"})
        marker = "/@connections/"
        if marker not in parts.path:
            return self._respond(h, 404, b'{"message":"Not Found"}', {"Content-Type": "application/json"})
        conn_id = unquote(parts.path.split(marker, 1)[1])
        with self.lock:
            conn = self.connections.get(conn_id)
        if conn is None:
            return self._respond(h, 410, b'{"message":null}', {"Content-Type": "application/json",
                                                               "x-amzn-ErrorType": "GoneException"})
        if method == "POST":
            with self.lock:
                drop = self.drop_posts > 0
                if drop:
                    self.drop_posts -= 1
                self.posted += 1
            if not drop:
                try:
                    conn.send(OP_TEXT, body)
                except OSError:
                    return self._respond(h, 410, b'{"message":null}', {"x-amzn-ErrorType": "GoneException"})
            return self._respond(h, 200)
        if method == "GET":
            info = {"ConnectedAt": _iso(conn.connected_at), "LastActiveAt": _iso(conn.last_active),
                    "Identity": {"SourceIp": conn.source_ip, "UserAgent": ""}}
            return self._respond(h, 200, json.dumps(info).encode(), {"Content-Type": "application/json"})
        if method == "DELETE":
            try:
                conn.send(OP_CLOSE, struct.pack("!H", 1000))
                conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return self._respond(h, 204)
        return self._respond(h, 403, b'{"message":"Forbidden"}', {"Content-Type": "application/json"})

    # ----- the WebSocket side
    def _event(self, route: str, conn_id: str, event_type: str, source_ip: str, **extra: Any) -> dict:
        now = time.time()
        rc = {"routeKey": route, "eventType": event_type, "connectionId": conn_id,
              "messageDirection": "IN", "stage": self.api.stage if self.api else "ws",
              "apiId": tpl_mod.LOCAL_API_ID, "domainName": f"{self.host}:{self.port}",
              "requestId": str(uuid.uuid4()), "extendedRequestId": str(uuid.uuid4()),
              "requestTimeEpoch": int(now * 1000), "connectedAt": int(now * 1000),
              "identity": {"sourceIp": source_ip}}
        rc.update(extra.pop("rc", {}))
        ev = {"requestContext": rc, "isBase64Encoded": False}
        ev.update(extra)
        return ev

    def _invoke(self, route: str, event: dict) -> dict | None:
        spec = self.api.routes.get(route) if self.api else None
        if spec is None:
            return None
        ctx = LambdaContext(spec, self.ctx.region, self.ctx.account_id, event["requestContext"]["requestId"])
        with self.handlers.instance(spec) as handler, interceptor.acting_as(spec.logical_id):
            result = handler(event, ctx)
        return result if isinstance(result, dict) else {"statusCode": 200, "body": result}

    def _websocket(self, h, target: str, headers: Mapping[str, str]) -> None:
        source_ip = h.client_address[0]
        conn_id = base64.b64encode(uuid.uuid4().bytes[:12]).decode()  # API Gateway's look: "L0SM9cOFvHcCIhw="
        parts = urlsplit(target)
        qs = dict(parse_qsl(parts.query)) or None
        orig_headers = {k.title(): v for k, v in headers.items()}
        ev = self._event("$connect", conn_id, "CONNECT", source_ip, headers=orig_headers,
                         multiValueHeaders={k: [v] for k, v in orig_headers.items()},
                         queryStringParameters=qs)
        try:
            result = self._invoke("$connect", ev) or {"statusCode": 200}
        except Exception:  # noqa: BLE001
            log.exception("$connect failed")
            result = {"statusCode": 500, "body": '{"message": "Internal server error"}'}
        status = int(result.get("statusCode") or 200)
        if not 200 <= status < 300:
            body = result.get("body") or ""
            return self._respond(h, status, body.encode() if isinstance(body, str) else body,
                                 {"Content-Type": "application/json"})
        out_headers = {"Upgrade": "websocket", "Connection": "Upgrade",
                       "Sec-WebSocket-Accept": accept_key(headers.get("sec-websocket-key", ""))}
        proto = (result.get("headers") or {}).get("Sec-WebSocket-Protocol")
        if proto:
            out_headers["Sec-WebSocket-Protocol"] = proto
        lines = ["HTTP/1.1 101 Switching Protocols"] + [f"{k}: {v}" for k, v in out_headers.items()]
        h.wfile.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        h.wfile.flush()
        now = time.monotonic()
        conn = Connection(conn_id, h.connection, time.time(), source_ip, time.time())
        with self.lock:
            self.connections[conn_id] = conn
        status_code, reason = 1005, ""
        try:
            h.connection.settimeout(None)
            status_code, reason = self._loop(SockReader(h.connection), conn, now)
        except (ConnectionError, OSError, ValueError) as e:
            status_code, reason = 1006, str(e)
        finally:
            with self.lock:
                self.connections.pop(conn_id, None)
            try:
                self._invoke("$disconnect", self._event("$disconnect", conn_id, "DISCONNECT", source_ip,
                                                        rc={"disconnectStatusCode": status_code,
                                                            "disconnectReason": reason}))
            except Exception:  # noqa: BLE001
                log.exception("$disconnect failed")

    def _loop(self, reader: "SockReader", conn: Connection, started: float) -> tuple[int, str]:
        closing: list[tuple[int, str]] = []

        def control(op: int, data: bytes) -> bool:
            if op == OP_PING:
                conn.send(OP_PONG, data)
                return False
            if op == OP_CLOSE:
                code = struct.unpack("!H", data[:2])[0] if len(data) >= 2 else 1005
                closing.append((code, data[2:].decode("utf-8", "replace")))
                try:
                    conn.send(OP_CLOSE, data[:2])
                except OSError:
                    pass
                return True
            return False

        last = time.monotonic()
        while True:
            if time.monotonic() - started > self.max_connection_s:
                conn.send(OP_CLOSE, struct.pack("!H", 1001) + b"Going away")
                return 1001, "Going away (maximum connection duration)"
            if not reader.wait(min(1.0, self.idle_timeout_s)):
                if time.monotonic() - last > self.idle_timeout_s:
                    conn.send(OP_CLOSE, struct.pack("!H", 1001) + b"Going away")
                    return 1001, "Going away (idle)"
                continue
            op, data = read_message(reader, control)
            if closing:
                return closing[0]
            last = time.monotonic()
            conn.last_active = time.time()
            self._message(conn, data.decode("utf-8", "replace"))

    def _message(self, conn: Connection, text: str) -> None:
        route = "$default"
        try:
            msg = json.loads(text)
            sel = msg.get(self.api.selection) if isinstance(msg, dict) and self.api else None
            if isinstance(sel, str) and sel in self.api.routes:
                route = sel
        except ValueError:
            pass
        if self.api is None or route not in self.api.routes:
            conn.send(OP_TEXT, json.dumps({"message": "Forbidden", "connectionId": conn.id,
                                           "requestId": str(uuid.uuid4())}).encode())
            return
        ev = self._event(route, conn.id, "MESSAGE", conn.source_ip, body=text,
                         rc={"messageId": str(uuid.uuid4())})
        try:
            result = self._invoke(route, ev) or {}
        except Exception:  # noqa: BLE001
            log.exception("route %s failed", route)
            conn.send(OP_TEXT, json.dumps({"message": "Internal server error", "connectionId": conn.id}).encode())
            return
        body = result.get("body")
        if route in self.api.responds and body:
            conn.send(OP_TEXT, body.encode() if isinstance(body, str) else body)


class SockReader:
    """Reads a socket with its own buffer (a ``makefile`` reader is unusable after one timeout);
    :meth:`wait` is the idle check between frames, reads block."""

    def __init__(self, sock: socket.socket):
        self.sock, self.buf = sock, b""

    def wait(self, timeout: float) -> bool:
        if self.buf:
            return True
        r, _, _ = select.select([self.sock], [], [], timeout)
        return bool(r)

    def read(self, n: int) -> bytes:
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("connection closed")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(t))
