"""HTTP/1.1 keep-alive for the local stack's werkzeug servers (moto's, ``infra/local/moto_serial.py``,
and the gateway's, ``infra/local/__main__.py``).

Measured side by side (moto_serial, the same 1,200 DynamoDB calls from one boto3 client, four
rounds alternating, load 3-5): moto's CPU 2.1-2.7 ms a call with keep-alive vs 3.4-4.5 without, the
caller's 1.2-1.6 vs 1.7-2.3 ms, wall 3.3-4.4 vs 5.4-7.8 ms (docs/benchmarks.md, "The suite's time").
"""
from __future__ import annotations

import io
import socket


def read_input(environ) -> bytes:
    """The request's whole body: ``CONTENT_LENGTH`` bytes, or to its end when werkzeug dechunks it."""
    stream = environ["wsgi.input"]
    if environ.get("wsgi.input_terminated"):
        return stream.read()
    n = int(environ.get("CONTENT_LENGTH") or 0)
    return stream.read(n) if n > 0 else b""


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
    close``), spoke HTTP/1.0, or the answer is an error http.server sends itself."""

    def setup(self):
        super().setup()
        # an answer goes out in two writes (headers, body): without this, a kept-alive connection
        # waits for the caller's delayed ACK (~40 ms) before the second (Nagle's algorithm)
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def make_environ(self):
        environ = super().make_environ()
        environ["wsgi.input"] = io.BytesIO(read_input(environ))
        environ.pop("wsgi.input_terminated", None)
        environ["CONTENT_LENGTH"] = str(environ["wsgi.input"].getbuffer().nbytes)
        return environ

    _answering = False  # inside run_wsgi (an error http.server sends itself keeps its close)

    def run_wsgi(self):
        real = self.rfile
        self._answering = True
        try:
            return super().run_wsgi()
        finally:
            self._answering = False
            self.rfile = real

    def send_response(self, code, message=None):
        if self._answering:  # the body is read (make_environ): werkzeug's drain after this answer reads nothing
            self.rfile = _Drained
        super().send_response(code, message)

    def send_header(self, keyword, value):
        if self._answering and keyword.lower() == "connection" and value.lower() == "close" \
                and self.request_version == "HTTP/1.1" and (self.headers.get("Connection") or "").lower() != "close":
            return
        super().send_header(keyword, value)
