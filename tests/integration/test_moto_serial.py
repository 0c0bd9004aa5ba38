"""infra/local/moto_serial.py's keep-alive (``KeepAliveHandler``): the local stack's moto answered
every AWS call with ``Connection: close`` (werkzeug's development server), so each call cost a
new TCP connection and a server thread. Served here in-process by werkzeug's threaded server
around a plain WSGI application (moto itself is not needed for what the handler does)."""
from __future__ import annotations

import http.client
import json
import socket
import threading

import pytest
from werkzeug.serving import make_server

from infra.local.moto_serial import KeepAliveHandler, Serialised


def app(environ, start_response):
    """Answers what it saw; ``/skip`` leaves the body unread; ``/fail`` raises."""
    path = environ["PATH_INFO"]
    if path == "/fail":
        raise RuntimeError("boom")
    body = b"" if path == "/skip" else environ["wsgi.input"].read()
    sock = environ["werkzeug.socket"]
    out = json.dumps({"path": path, "body": body.decode(), "peer": environ["REMOTE_PORT"],
                      "nodelay": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)}).encode()
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(out)))])
    return [out]


@pytest.fixture()
def server():
    srv = make_server("127.0.0.1", 0, Serialised(app), threaded=True, request_handler=KeepAliveHandler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def ask(conn, method, path, body=None, headers=None, **kw):
    conn.request(method, path, body=body, headers=headers or {}, **kw)
    r = conn.getresponse()
    return r, r.read()


def test_requests_share_one_connection_and_unread_bodies_do_not_leak_into_the_next(server):
    conn = http.client.HTTPConnection("127.0.0.1", server.server_port, timeout=10)
    r1, b1 = ask(conn, "POST", "/a", body=b"x" * 70_000)
    r2, b2 = ask(conn, "POST", "/skip", body=b"GET /evil HTTP/1.1\r\n\r\n")  # left unread by the app
    r3, b3 = ask(conn, "POST", "/c", body=b"three")
    assert [r.status for r in (r1, r2, r3)] == [200, 200, 200]
    got = [json.loads(b) for b in (b1, b2, b3)]
    assert [(g["path"], len(g["body"])) for g in got] == [("/a", 70_000), ("/skip", 0), ("/c", 5)]
    assert got[2]["body"] == "three"
    assert len({g["peer"] for g in got}) == 1  # one connection: the same client port each time
    assert all(g["nodelay"] for g in got)  # no wait on the caller's delayed ACK between headers and body
    assert r3.getheader("Connection") is None


def test_a_chunked_body_is_read_whole_and_the_connection_goes_on(server):
    conn = http.client.HTTPConnection("127.0.0.1", server.server_port, timeout=10)
    r1, b1 = ask(conn, "PUT", "/chunked", body=iter([b"ab", b"cd", b"e"]),
                 headers={"Transfer-Encoding": "chunked"}, encode_chunked=True)
    r2, b2 = ask(conn, "GET", "/next")
    assert json.loads(b1)["body"] == "abcde" and json.loads(b2)["path"] == "/next"
    assert json.loads(b1)["peer"] == json.loads(b2)["peer"]


def test_the_close_is_kept_when_asked_for_and_after_an_error(server):
    conn = http.client.HTTPConnection("127.0.0.1", server.server_port, timeout=10)
    r, _ = ask(conn, "GET", "/x", headers={"Connection": "close"})
    assert r.getheader("Connection") == "close"
    conn = http.client.HTTPConnection("127.0.0.1", server.server_port, timeout=10)
    r, _ = ask(conn, "POST", "/fail", body=b"{}")
    assert r.status == 500
    r, b = ask(conn, "GET", "/after")  # a new connection when the server closed; the same one otherwise
    assert r.status == 200 and json.loads(b)["path"] == "/after"


def test_http_1_0_closes(server):
    with socket.create_connection(("127.0.0.1", server.server_port), timeout=10) as s:
        s.sendall(b"GET /old HTTP/1.0\r\nHost: x\r\n\r\n")
        data = b""
        while chunk := s.recv(65536):  # the server closes after the answer: recv ends
            data += chunk
    assert data.startswith(b"HTTP/1.0 200") or data.startswith(b"HTTP/1.1 200")
    assert b'"path": "/old"' in data
