"""HTTP/1.1 keep-alive for the local stack's werkzeug servers (moto's, ``infra/local/moto_serial.py``,
and the gateway's, ``infra/local/__main__.py``).

Measured side by side (moto_serial, the same 1,200 DynamoDB calls from one boto3 client, four
rounds alternating, load 3-5): moto's CPU 2.1-2.7 ms a call with keep-alive vs 3.4-4.5 without, the
caller's 1.2-1.6 vs 1.7-2.3 ms, wall 3.3-4.4 vs 5.4-7.8 ms (docs/benchmarks.md, "The suite's time").
"""
from __future__ import annotations

import io
import socket

# A body is read into memory before the application runs only up to this size (over it, or of a
# length that cannot be read, the application reads the socket as werkzeug hands it and the
# connection closes after the answer, as werkzeug's server does): the gateway refuses a body over
# 10 MiB by its Content-Length without reading it, and a Content-Length of 2**62 must not be an
# allocation. DynamoDB's largest request is 16 MB; an S3 object over it only costs its connection.
MAX_BUFFERED = 16 * 1024 * 1024


class _Chained(io.RawIOBase):
    """What was read of a dechunked body, then the rest of it."""

    def __init__(self, head: bytes, rest) -> None:
        self._head, self._rest = io.BytesIO(head), rest

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        n = self._head.readinto(buf)
        return n if n else self._rest.readinto(buf)


def buffer_body(environ) -> bool:
    """The body read whole into ``environ["wsgi.input"]`` (True), or left to the application
    (False: over :data:`MAX_BUFFERED`, a Content-Length that is not a length, or a body shorter
    than its Content-Length, which the application's reader then sees end early, as it would)."""
    stream = environ["wsgi.input"]
    if environ.get("wsgi.input_terminated"):
        got = bytearray()
        while len(got) <= MAX_BUFFERED:
            data = stream.read(MAX_BUFFERED + 1 - len(got))
            if not data:
                break
            got += data
        if len(got) > MAX_BUFFERED:
            environ["wsgi.input"] = _Chained(bytes(got), stream)
            return False
        body = bytes(got)
    else:
        try:
            n = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            return False
        if n < 0 or n > MAX_BUFFERED:
            return False
        body = stream.read(n) if n else b""
        if len(body) < n:
            environ["wsgi.input"] = io.BytesIO(body)  # CONTENT_LENGTH left as declared
            return False
    environ["wsgi.input"] = io.BytesIO(body)
    environ.pop("wsgi.input_terminated", None)
    environ["CONTENT_LENGTH"] = str(len(body))
    return True


class _Drained:
    """What werkzeug's drain after an answer reads (:class:`KeepAlive`): nothing."""

    @staticmethod
    def read(*_):
        return b""


class KeepAlive:
    """Mixed into a werkzeug request handler: HTTP/1.1 keep-alive. werkzeug's development server
    answers every request with ``Connection: close`` and, after the answer, reads whatever else the
    socket holds (http.server cannot tell a body the application left unread from the next
    request), so each call cost a new TCP connection, an ``accept`` and a new thread in the server
    and a new connection in the caller's pool. Here the request's body is read whole into memory
    before the application runs (``CONTENT_LENGTH`` bytes, or to the end of a chunked one), so the
    stream holds nothing of it whatever the application reads; werkzeug's drain reads from
    :class:`_Drained` (the next request, when it came meanwhile, stays in the socket for the next
    round of ``handle``); and the close is dropped unless the client asked for it (``Connection:
    close``), spoke HTTP/1.0, or the answer is an error http.server sends itself. A body over
    :data:`MAX_BUFFERED`, or not read whole, is left to the application as werkzeug hands it, and
    the connection then closes after the answer (werkzeug's own way)."""

    def setup(self):
        super().setup()
        # an answer goes out in two writes (headers, body): without this, a kept-alive connection
        # waits for the caller's delayed ACK (~40 ms) before the second (Nagle's algorithm)
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def make_environ(self):
        environ = super().make_environ()
        self._kept = buffer_body(environ)
        return environ

    _answering = False  # inside run_wsgi (an error http.server sends itself keeps its close)
    _kept = False  # this request's body was read whole (make_environ): the connection may stay

    def run_wsgi(self):
        real = self.rfile
        self._answering, self._kept = True, False
        try:
            return super().run_wsgi()
        finally:
            self._answering = False
            self.rfile = real

    def send_response(self, code, message=None):
        if self._answering and self._kept:  # the body is read (make_environ): werkzeug's drain
            self.rfile = _Drained  # after this answer reads nothing
        super().send_response(code, message)

    def send_header(self, keyword, value):
        if self._answering and self._kept and keyword.lower() == "connection" and value.lower() == "close" \
                and self.request_version == "HTTP/1.1" and (self.headers.get("Connection") or "").lower() != "close":
            return
        super().send_header(keyword, value)
