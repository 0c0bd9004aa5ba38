"""Adversarial review of issue 30 (h/review): defects found in the merged push hardening, each a
test that fails on the merged code. See the review report for severity and context."""
from __future__ import annotations

import socket
import threading
import time

import pytest

from lakeq.contract import push as P
from lakeq.push import transport


# --- 30.6 x 30.2: the name lookups share one process-wide pool of 8 threads ------------------------
def test_one_tenants_never_answering_dns_does_not_time_out_another_tenants_send(monkeypatch):
    """A hostile tenant registers endpoints whose name never resolves (its authoritative server drops
    queries: registration accepts it, check_host's timeout counts as 'not refused'). Each send's
    lookup is abandoned at its deadline while the system resolver goes on for many seconds. With a
    fixed pool of lookup threads (8, as the transport had), eight such abandoned lookups held every
    slot and another tenant's lookup waited behind them until its send failed with Deadline although
    its name answers at once; lookups now run one thread per name being looked up."""
    release = threading.Event()
    real = socket.getaddrinfo

    def fake(host, port, *a, **kw):
        if host.endswith(".blackhole.test"):
            release.wait(30)  # the system resolver's own timeouts: many seconds
            raise socket.gaierror("timed out")
        if host == "victim.test":
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.216.34", port))]
        return real(host, port, *a, **kw)

    monkeypatch.setattr(socket, "getaddrinfo", fake)
    try:
        for i in range(8):  # the hostile tenant's sends, each cut at its 0.1 s timeout
            with pytest.raises(transport.Deadline):
                transport.resolve(f"h{i}.blackhole.test", 443, time.monotonic() + 0.1)
        # the victim's lookup answers instantly, and it has a whole second
        got = transport.resolve("victim.test", 443, time.monotonic() + 1.0)
        assert got == [(socket.AF_INET, ("93.184.216.34", 443))]
    finally:
        release.set()


# --- 30.5: an answer that names outcomes wrongly is a failed attempt, never "accept all" ------------
@pytest.mark.parametrize("raw", [b'{"reject": 0}', b'{"release": 0}', b'{"release": {}}', b'{"reject": false}',
                                 b'{"release": ""}', b'{"release": [0], "release": []}'])
def test_outcomes_of_the_wrong_type_are_not_a_silent_accept(raw):
    """``{"reject": "0"}`` is a failed attempt (the doctest), but ``{"reject": 0}`` — the same mistake
    with a number — and every other falsy non-list (``0``, ``false``, ``""``, ``{}``) reads as "no
    outcomes" (``value.get(k) or []``) and settles the whole batch as accepted: the message the
    endpoint meant to reject or release is never retried. A duplicate key keeps its last value
    (json.loads), silently dropping the first outcome list."""
    assert P.response_outcomes(raw, 3) is P.FAILED


# --- 30.2: the request's first send runs on the handshake's non-blocking socket -------------------
def test_the_first_send_over_tls_waits_for_the_socket_within_the_deadline(tmp_path, monkeypatch):
    """PinnedConnection._handshake leaves the TLS socket non-blocking (settimeout(0.0)), and
    http.client's first ``send`` (the request line and headers) connects inside ``send`` — after
    the override's ``settimeout`` was skipped because ``self.sock`` was still None. So the header
    block goes out through ``sendall`` on a non-blocking socket: when it does not fit the send
    buffer at once (here: 16 headers of 1000 bytes, what the settings allow, and a 4-KiB send
    buffer; an endpoint that reads the request half a second after the handshake), SSLWantWriteError
    fails the attempt at once instead of waiting within the deadline."""
    import logging
    import ssl

    from tests.unit.test_push_net import _self_signed, fake_resolver
    cert, key = _self_signed(tmp_path, "hooks.test")
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(cert, key)
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    port = srv.getsockname()[1]

    def serve():
        try:
            raw, _ = srv.accept()
            with server_ctx.wrap_socket(raw, server_side=True) as c:
                time.sleep(0.5)
                c.settimeout(5)
                data = b""
                while b"\r\n\r\n" not in data:
                    data += c.recv(65536)
                c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
                while c.recv(1024):
                    pass
        except (OSError, ssl.SSLError):
            pass
    threading.Thread(target=serve, daemon=True).start()
    monkeypatch.setattr(transport, "_tls", ssl.create_default_context(cafile=cert))
    real = socket.socket

    class SmallBuffer(real):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            self.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)

    monkeypatch.setattr(transport.socket, "socket", SmallBuffer)
    headers = {f"X-H{i}": "v" * 1000 for i in range(16)}
    P._headers(headers)  # (settings a registration accepts)
    logging.getLogger("lakeq.push.transport").setLevel(logging.INFO)
    try:
        got = transport.post(f"https://hooks.test:{port}/x", headers, b"{}", 5.0, 100, loopback=True,
                             resolver=fake_resolver(["127.0.0.1"]))
        assert got == (200, b"")
    finally:
        srv.close()
