"""infra/local/moto_serial.py's keep-alive (``KeepAliveHandler``): the local stack's moto answered
every AWS call with ``Connection: close`` (werkzeug's development server), so each call cost a
new TCP connection and a server thread. Served here in-process by werkzeug's threaded server
around a plain WSGI application (moto itself is not needed for what the handler does)."""
from __future__ import annotations

import http.client
import io
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


def _count(target, query="", auth=""):
    """One request through :class:`Serialised` around an app that answers ``{}``; its write counts."""
    s = Serialised(lambda environ, start_response: [b"{}"])
    body = b'{"TableName": "t", "Item": {"pk": {"S": "a"}}}'
    environ = {"REQUEST_METHOD": "POST", "PATH_INFO": "/", "QUERY_STRING": query,
               "HTTP_X_AMZ_TARGET": target, "wsgi.input": io.BytesIO(body), "CONTENT_LENGTH": str(len(body))}
    if auth:
        environ["HTTP_AUTHORIZATION"] = auth
    s(environ, lambda *a: None)
    return s.writes, s.tables


AUTH = ("AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/dynamodb/aws4_request, "
        "SignedHeaders=host, Signature=0")


@pytest.mark.parametrize("target,query", [
    # moto runs the query string's Action before X-Amz-Target's (moto.core.responses._get_action)
    ("DynamoDB_20120810.GetItem", "Action=PutItem"),
    # moto routes by the signature's service; the target's prefix only needs an "_" and a version
    ("dynamodb_20120810.PutItem", ""),
])
def test_a_write_moto_runs_is_counted_whatever_the_target_says(target, query):
    """A write the count missed is never read by the stream pump's gate (streams.py: a mapping whose
    table's count did not move since its shards were read to their end reads nothing, the forced
    idle pass included): its record would never be delivered."""
    assert _count(target, query, AUTH) == (1, {"t": 1})


def test_reads_and_other_services_are_not_counted():
    assert _count("DynamoDB_20120810.GetItem", "", AUTH)[0] == 0
    assert _count("DynamoDBStreams_20120810.GetRecords", "", AUTH)[0] == 0
    assert _count("AmazonSQS.SendMessage", "")[0] == 0
    assert _count("DynamoDB_20120810.PutItem", "")[0] == 1


def limited(environ, start_response):
    """What the gateway does with a body (infra/local/gateway.py): one declared over its limit is
    refused unread (413); otherwise werkzeug's reader reads it (a body ending before its
    Content-Length raises ClientDisconnected: not answered 200)."""
    from werkzeug.wrappers import Request, Response

    req = Request(environ)
    if req.content_length is not None and req.content_length > 1000:
        return Response("too large", status=413)(environ, start_response)
    return Response(req.get_data())(environ, start_response)


@pytest.fixture()
def limited_server():
    srv = make_server("127.0.0.1", 0, limited, threaded=True, request_handler=KeepAliveHandler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv
    srv.shutdown()
    srv.server_close()


def raw(srv, data: bytes, half_close: bool = False) -> bytes:
    with socket.create_connection(("127.0.0.1", srv.server_port), timeout=20) as s:
        s.sendall(data)
        if half_close:
            s.shutdown(socket.SHUT_WR)
        out = b""
        while b"\r\n\r\n" not in out and (chunk := s.recv(65536)):
            out += chunk
        return out


def test_a_body_declared_over_the_applications_limit_is_refused_unread(limited_server):
    """Before: the handler read Content-Length bytes into memory before the application could
    refuse them (2**62: an allocation that fails, the connection dropped unanswered; 8 GB: read
    whole, the gateway's 10 MiB limit bypassed)."""
    out = raw(limited_server, b"POST /big HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\nab" % 2**62)
    assert out.startswith(b"HTTP/1.1 413")
    assert b"Connection: close" in out  # the unread body is not taken for the next request


def test_a_body_shorter_than_its_content_length_is_not_answered_as_complete(limited_server):
    """Before: the handler set CONTENT_LENGTH to what arrived, so a truncated request (3 of 10
    bytes, then the client's half close) was handled as a whole 3-byte request."""
    out = raw(limited_server, b"POST /short HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc", half_close=True)
    assert out and not out.startswith(b"HTTP/1.1 200")



def test_a_chunked_body_over_the_buffer_reaches_the_application_whole(limited_server, monkeypatch):
    from infra.local import keepalive

    monkeypatch.setattr(keepalive, "MAX_BUFFERED", 4, raising=False)
    conn = http.client.HTTPConnection("127.0.0.1", limited_server.server_port, timeout=20)
    r, b = ask(conn, "PUT", "/chunked", body=iter([b"ab", b"cdef", b"gh"]),
               headers={"Transfer-Encoding": "chunked"}, encode_chunked=True)
    assert (r.status, b) == (200, b"abcdefgh")
    assert r.getheader("Connection") == "close"
