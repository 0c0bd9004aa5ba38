"""Wake-ups over lakeq's WebSocket API (docs/api.md "WebSocket wake-ups"): wait without a long poll.

:class:`Waker` keeps ONE WebSocket connection open, watches a topic as a group (or a subscription),
and sets an event whenever the server says the watched log moved; :class:`lakeq_client.Consumer`
with ``wake_url`` then pulls with ``wait_ms=0`` instead of holding a long poll (a Lambda) open.
Wake-ups are hints: the consumer also pulls every ``fallback_s`` seconds, so a lost wake-up costs
that much latency at most, never a message. The waker reconnects by itself (API Gateway closes a
connection after 2 hours, or after 10 idle minutes: it sends ``{"action": "ping"}`` every
``keepalive_s``), and asks for a pull after each (re)connection, since wake-ups sent while it was
away are lost.

:class:`WebSocket` is a minimal RFC 6455 client over the standard library (``ws://`` and
``wss://``; text messages; ping/pong/close): the client depends on ``requests`` only.
"""
from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import select
import socket
import ssl
import struct
import threading
import time
from typing import Any, Callable, Mapping
from urllib.parse import urlsplit

log = logging.getLogger("lakeq_client.ws")

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
OP_TEXT, OP_CLOSE, OP_PING, OP_PONG = 0x1, 0x8, 0x9, 0xA


class WebSocketError(ConnectionError):
    """The handshake was refused (``status``: the HTTP status, e.g. 401) or the connection broke."""

    def __init__(self, message: str, status: int | None = None, body: str = ""):
        super().__init__(message)
        self.status, self.body = status, body


class WebSocket:
    """One client connection. ``recv(timeout)`` → the next text message, or ``None`` on timeout."""

    def __init__(self, url: str, headers: Mapping[str, str] | None = None,
                 subprotocols: list[str] | None = None, timeout: float = 10.0):
        u = urlsplit(url)
        if u.scheme not in ("ws", "wss"):
            raise ValueError(f"not a WebSocket URL: {url}")
        port = u.port or (443 if u.scheme == "wss" else 80)
        sock = socket.create_connection((u.hostname, port), timeout=timeout)
        if u.scheme == "wss":
            sock = ssl.create_default_context().wrap_socket(sock, server_hostname=u.hostname)
        self.sock, self.buf, self.closed = sock, b"", False
        self._send_lock = threading.Lock()
        key = base64.b64encode(os.urandom(16)).decode()
        lines = [f"GET {u.path or '/'}{'?' + u.query if u.query else ''} HTTP/1.1",
                 f"Host: {u.hostname}:{port}", "Upgrade: websocket", "Connection: Upgrade",
                 f"Sec-WebSocket-Key: {key}", "Sec-WebSocket-Version: 13"]
        if subprotocols:
            lines.append(f"Sec-WebSocket-Protocol: {', '.join(subprotocols)}")
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = sock.recv(4096)
            if not chunk:
                raise WebSocketError("connection closed during the handshake")
            head += chunk
        head, _, self.buf = head.partition(b"\r\n\r\n")
        status_line, *hlines = head.decode("latin-1").split("\r\n")
        status = int(status_line.split(" ")[1])
        hdrs = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in hlines)}
        if status != 101:
            body = self.buf.decode("utf-8", "replace")
            sock.close()
            raise WebSocketError(f"handshake refused: {status} {body}", status, body)
        want = base64.b64encode(hashlib.sha1((key + GUID).encode()).digest()).decode()
        if hdrs.get("sec-websocket-accept") != want:
            sock.close()
            raise WebSocketError("bad Sec-WebSocket-Accept in the handshake")
        self.subprotocol = hdrs.get("sec-websocket-protocol")
        sock.settimeout(None)

    def _send(self, opcode: int, payload: bytes) -> None:
        mask = os.urandom(4)
        n = len(payload)
        head = bytes([0x80 | opcode])
        if n < 126:
            head += bytes([0x80 | n])
        elif n < 65536:
            head += bytes([0x80 | 126]) + struct.pack("!H", n)
        else:
            head += bytes([0x80 | 127]) + struct.pack("!Q", n)
        data = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        with self._send_lock:
            self.sock.sendall(head + mask + data)

    def send(self, text: str) -> None:
        self._send(OP_TEXT, text.encode())

    def _read(self, n: int) -> bytes:
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise WebSocketError("connection closed")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def recv(self, timeout: float | None = None) -> str | None:
        parts: list[bytes] = []
        while True:
            if not self.buf and not parts and timeout is not None:
                r, _, _ = select.select([self.sock], [], [], timeout)
                if not r and not (isinstance(self.sock, ssl.SSLSocket) and self.sock.pending()):
                    return None
            b0, b1 = self._read(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack("!H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack("!Q", self._read(8))[0]
            mask = self._read(4) if b1 & 0x80 else None
            payload = self._read(n) if n else b""
            if mask:
                payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
            op = b0 & 0x0F
            if op == OP_PING:
                self._send(OP_PONG, payload)
                continue
            if op == OP_PONG:
                continue
            if op == OP_CLOSE:
                self.closed = True
                code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else 1005
                try:
                    self._send(OP_CLOSE, payload[:2])
                except OSError:
                    pass
                raise WebSocketError(f"closed by the server ({code} {payload[2:].decode('utf-8', 'replace')})")
            parts.append(payload)
            if b0 & 0x80:
                return b"".join(parts).decode("utf-8", "replace")

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            try:
                self._send(OP_CLOSE, struct.pack("!H", 1000))
            except OSError:
                pass
        try:
            self.sock.close()
        except OSError:
            pass


class Waker:
    """One WebSocket connection watching ``watch`` (``{"topic", "group"}`` or
    ``{"subscription"}``); :meth:`wait` returns True as soon as a wake-up (or a reconnection)
    asks for a pull, False after ``timeout``. Runs a daemon thread; :meth:`close` stops it."""

    def __init__(self, url: str, key: str, watch: Mapping[str, str], *, keepalive_s: float = 540.0,
                 reconnect_max_s: float = 30.0, header_auth: bool = True,
                 connect: Callable[..., WebSocket] = WebSocket):
        self.url, self.key, self.watch = url, key, dict(watch)
        self.keepalive_s, self.reconnect_max_s = keepalive_s, reconnect_max_s
        self.header_auth, self._connect = header_auth, connect
        self.event = threading.Event()
        self.ready = threading.Event()  # set while the watch is registered
        self.error: Exception | None = None  # the last refusal (handshake or watch), if any
        self.stats = {"connects": 0, "watches": 0, "pings": 0, "wakes": 0, "errors": 0}
        self._stop = threading.Event()
        self._ws: WebSocket | None = None
        self._thread = threading.Thread(target=self._run, name="lakeq-waker", daemon=True)
        self._thread.start()

    @property
    def _mine(self) -> tuple[str, str]:
        if "subscription" in self.watch:
            return "subscriptions", self.watch["subscription"]
        return "topics", self.watch["topic"]

    def arm(self) -> None:
        """Forget wake-ups seen so far (call before a pull: one arriving during it is kept)."""
        self.event.clear()

    def wait(self, timeout: float) -> bool:
        return self.event.wait(timeout)

    def close(self) -> None:
        self._stop.set()
        ws = self._ws
        if ws is not None:
            ws.close()
        self._thread.join(5)

    def _open(self) -> WebSocket:
        if self.header_auth:
            return self._connect(self.url, headers={"Authorization": f"Bearer {self.key}"})
        return self._connect(self.url, subprotocols=["lakeq.v1", f"lakeq.key.{self.key}"])

    def _run(self) -> None:
        delay = 0.5
        while not self._stop.is_set():
            try:
                self._ws = ws = self._open()
                self.stats["connects"] += 1
                ws.send(json.dumps({"action": "watch", **self.watch}))
                self.stats["watches"] += 1
                last_ping = time.monotonic()
                while not self._stop.is_set():
                    msg = ws.recv(timeout=1.0)
                    if msg is None:
                        if time.monotonic() - last_ping >= self.keepalive_s:
                            ws.send('{"action":"ping"}')
                            self.stats["pings"] += 1
                            last_ping = time.monotonic()
                        continue
                    self._on_message(msg)
                    delay = 0.5
            except Exception as e:  # noqa: BLE001 - reconnect after a pause
                if self._stop.is_set():
                    break
                self.stats["errors"] += 1
                self.ready.clear()
                self.event.set()  # wake-ups may be lost while away: pull once
                if isinstance(e, WebSocketError) and e.status is not None and 400 <= e.status < 500:
                    self.error = e
                    delay = self.reconnect_max_s  # a refused key: do not hammer
                log.info("wake-up connection lost (%s); reconnecting in %.1fs", e, delay)
                self._stop.wait(delay)
                delay = min(self.reconnect_max_s, delay * 2)
            finally:
                if self._ws is not None:
                    self._ws.close()
                    self._ws = None

    def _on_message(self, text: str) -> None:
        try:
            msg = json.loads(text)
        except ValueError:
            return
        kind = msg.get("type") if isinstance(msg, dict) else None
        if kind == "wake":
            field, name = self._mine
            if name in (msg.get(field) or []):
                self.stats["wakes"] += 1
                self.event.set()
        elif kind == "watching":
            self.error = None
            self.ready.set()
            self.event.set()  # anything produced before the watch was registered: pull once
        elif kind == "error":
            self.error = WebSocketError(f"watch refused: {msg.get('error')}", msg.get("status"), text)
            self.event.set()  # the pull will report the same refusal


def consumer_watch(group: str | None, topic: str | None, subscription: str | None) -> dict[str, Any]:
    """The ``watch`` message's fields for a consumer's log."""
    if subscription is not None:
        return {"subscription": subscription}
    return {"topic": topic, "group": group}
