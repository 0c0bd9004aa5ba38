"""Issue 30.1, 30.2, 30.5: the push request on the wire (lakeq.push.delivery.http_poster over
lakeq.push.transport) and the address rule (lakeq.contract.netaddr) — against real sockets on
loopback: no internal address is reached (literal, in any spelling, or by a name that resolves to
one, also when the name's answer changes after the check), no redirect is followed, the whole
request ends near its timeout whatever pace the endpoint answers at, and an answer longer than the
bound is returned cut (one byte over) for the deliverer to fail."""
from __future__ import annotations

import ipaddress
import socket
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakeq.common.errors import BadRequest
from lakeq.contract import netaddr
from lakeq.contract import push as P
from lakeq.push import delivery, transport


class Server:
    """A raw TCP endpoint on 127.0.0.1: ``answer(conn, request_bytes)`` writes what it likes."""

    def __init__(self, answer):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.requests: list[bytes] = []
        self.connections = 0  # accepted, whatever was sent on them
        self.answer = answer
        self.stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn):
        with conn:
            data = b""
            conn.settimeout(5)
            try:
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                head, _, rest = data.partition(b"\r\n\r\n")
                n = next((int(x.split(b":")[1]) for x in head.split(b"\r\n") if x.lower().startswith(b"content-length")),
                         0)
                while len(rest) < n:
                    rest += conn.recv(65536)
                self.requests.append(head + b"\r\n\r\n" + rest)
                self.answer(conn, data)
            except OSError:
                pass

    def close(self):
        self.stop.set()
        self.sock.close()


def ok(conn, _req):
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")


@pytest.fixture
def local(monkeypatch):
    monkeypatch.setenv(delivery.ENV_LOOPBACK, "1")


@pytest.fixture
def server():
    made = []

    def make(answer=ok):
        made.append(Server(answer))
        return made[-1]
    yield make
    for s in made:
        s.close()


# --- 30.1: which addresses -----------------------------------------------------------------------------
NOT_PUBLIC = ["127.0.0.1", "127.255.0.9", "10.0.0.5", "172.16.3.4", "192.168.1.1", "169.254.169.254", "100.64.0.1",
              "0.0.0.0", "224.0.0.1", "239.1.2.3", "240.0.0.1", "255.255.255.255", "192.0.2.1", "198.18.0.1",
              "::1", "::", "fe80::1", "fc00::1", "fd12::3", "fec0::1", "ff02::1", "2001:db8::1",
              "::ffff:169.254.169.254", "::ffff:127.0.0.1", "::ffff:8.8.8.8", "::7f00:1", "64:ff9b::a9fe:a9fe",
              "64:ff9b:1::1", "2002:7f00:1::1", "2002:a9fe:a9fe::", "2001:0:4136:e378:8000:63bf:3fff:fdd2"]


@pytest.mark.parametrize("addr", NOT_PUBLIC)
def test_an_internal_address_is_refused_at_registration(addr):
    host = f"[{addr}]" if ":" in addr else addr
    for local_flag in (False, True):
        allowed_here = local_flag and ipaddress.ip_address(addr).is_loopback
        for scheme in ("https", "http"):
            url = f"{scheme}://{host}:9001/x"
            if allowed_here:
                assert P.check_url(url, local_flag) == url  # the local stack's allowance: loopback only
            else:
                with pytest.raises(BadRequest):
                    P.check_url(url, local_flag)


def _spellings(ip: ipaddress.IPv4Address) -> list[str]:
    n = int(ip)
    b = ip.packed
    return [str(n), hex(n), "0" + oct(n)[2:], f"{b[0]}.{(n & 0xFFFFFF)}", f"{b[0]}.{b[1]}.{n & 0xFFFF}",
            ".".join(hex(x) for x in b), ".".join("0" + oct(x)[2:] for x in b), f"{b[0]}.{b[1]}.{b[2]}.{b[3]}.",
            f"[::ffff:{ip}]", f"[::ffff:{b[0] * 256 + b[1]:x}:{b[2] * 256 + b[3]:x}]"]


INTERNAL_V4 = [ipaddress.ip_network(n) for n in ("127.0.0.0/8", "10.0.0.0/8", "169.254.0.0/16", "100.64.0.0/10",
                                                  "172.16.0.0/12", "192.168.0.0/16", "0.0.0.0/8", "224.0.0.0/4",
                                                  "240.0.0.0/4")]


@settings(max_examples=300, deadline=None)
@given(net=st.sampled_from(INTERNAL_V4), k=st.integers(0, 2**32), pick=st.integers(0, 9))
def test_every_spelling_of_an_internal_ipv4_address_is_refused(net, k, pick):
    ip = net[k % net.num_addresses]
    host = _spellings(ip)[pick]
    with pytest.raises(BadRequest):
        P.check_url(f"https://{host}/x", False)
    if not ip.is_loopback:  # the local allowance admits plain loopback only
        with pytest.raises(BadRequest):
            P.check_url(f"https://{host}/x", True)


@pytest.mark.parametrize("url", ["https://2130706433/", "https://0x7f.1/", "https://017700000001/", "https://127.1/",
                                 "https://0x7f000001/", "https://127.0.1/", "https://[::ffff:7f00:1]/"])
def test_the_issues_numeric_spellings_are_refused_even_on_the_local_stack(url):
    with pytest.raises(BadRequest):
        P.check_url(url, True)


def fake_resolver(*answers):
    """Answers each lookup with the next address list (the last one repeats); counts lookups."""
    calls = []

    def resolve(host, port, deadline):
        calls.append(host)
        addrs = answers[min(len(calls), len(answers)) - 1]
        return [(socket.AF_INET6 if ":" in a else socket.AF_INET, (a, port)) for a in addrs]
    resolve.calls = calls
    return resolve


@pytest.mark.parametrize("addrs", [["169.254.169.254"], ["10.0.0.5"], ["93.184.216.34", "127.0.0.1"], ["::1"],
                                   ["::ffff:169.254.169.254"], ["fd00::1", "2606:4700::1"]])
def test_a_name_that_resolves_to_an_internal_address_is_refused(addrs):
    url = "https://hooks.example.com/x"
    assert transport.check_host(url, False, resolver=fake_resolver(addrs)) == netaddr.REFUSED
    assert transport.post(url, {}, b"{}", 1.0, 10, resolver=fake_resolver(addrs)) == (None, b"")


def test_a_name_that_does_not_resolve_is_not_refused_at_registration():
    def nxdomain(host, port, deadline):
        raise socket.gaierror(-2, "Name or service not known")
    assert transport.check_host("https://hooks.example.com/x", False, resolver=nxdomain) is None


def test_registration_refuses_a_name_resolving_inside(monkeypatch):
    """The route's check (transport.check_host, which lakeq.push.service.put calls after its 404/403
    checks: tests/integration/test_review_issue30.py) resolves the name: localhost is loopback."""
    monkeypatch.delenv(delivery.ENV_LOOPBACK, raising=False)
    assert transport.check_host("https://localhost:9001/x", False) == netaddr.REFUSED


def test_a_send_to_loopback_without_the_local_flag_never_reaches_it(server, monkeypatch):
    monkeypatch.delenv(delivery.ENV_LOOPBACK, raising=False)
    s = server()
    for url in (f"http://127.0.0.1:{s.port}/x", f"https://127.0.0.1:{s.port}/x", f"http://localhost:{s.port}/x",
                f"http://2130706433:{s.port}/x", f"http://[::ffff:127.0.0.1]:{s.port}/x"):
        assert delivery.http_poster(url, {}, b"{}", 1.0) == (None, b"")
    time.sleep(0.2)
    assert s.requests == [] and s.connections == 0


def test_the_connection_goes_to_the_checked_address_not_a_second_lookup(server, local):
    """DNS rebinding: the name's first answer is checked (loopback, allowed on the local stack), a
    second lookup would answer the metadata address; the request reaches the checked address, with
    the URL's host in ``Host``, after exactly one lookup."""
    s = server()
    resolve = fake_resolver(["127.0.0.1"], ["169.254.169.254"])
    status, _ = transport.post(f"http://rebind.test:{s.port}/hook?a=1", {"X-A": "1"}, b"{}", 2.0, 10, loopback=True,
                               resolver=resolve)
    assert status == 200 and len(resolve.calls) == 1
    head = s.requests[0].split(b"\r\n")
    assert head[0] == b"POST /hook?a=1 HTTP/1.1" and f"Host: rebind.test:{s.port}".encode() in head


def test_a_redirect_is_not_followed(server, local):
    target = server()
    s = server(lambda c, _r: c.sendall(f"HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:{target.port}/in\r\n"
                                       "Content-Length: 0\r\n\r\n".encode()))
    assert delivery.http_poster(f"http://127.0.0.1:{s.port}/x", {}, b"{}", 2.0)[0] == 302
    time.sleep(0.2)
    assert target.requests == [] and target.connections == 0


# --- 30.2: the whole request within its timeout --------------------------------------------------------
def trickle(head_first: bool):
    def answer(conn, _req):
        out = b"HTTP/1.1 200 OK\r\nContent-Length: 40\r\n\r\n" + b" " * 40
        if not head_first:
            for i in range(len(out)):
                conn.sendall(out[i:i + 1])
                time.sleep(0.2)
        else:
            conn.sendall(out[:30])
            for i in range(30, len(out)):
                conn.sendall(out[i:i + 1])
                time.sleep(0.2)
    return answer


@pytest.mark.parametrize("head_first", [False, True])
def test_a_trickling_answer_is_cut_at_the_timeout(server, local, head_first):
    """One byte every 0.2 s (status line and headers, or the body): a 1-s request ends near 1 s
    (asserted generously), as a failed attempt (no status, or an answer the deliverer fails)."""
    s = server(trickle(head_first))
    t0 = time.monotonic()
    status, body = delivery.http_poster(f"http://127.0.0.1:{s.port}/x", {}, b"{}", 1.0)
    took = time.monotonic() - t0
    assert took < 3.0, took
    assert status is None and body == b""


def test_an_endpoint_that_never_answers_is_cut_at_the_timeout(server, local):
    s = server(lambda c, _r: time.sleep(6))
    t0 = time.monotonic()
    assert delivery.http_poster(f"http://127.0.0.1:{s.port}/x", {}, b"{}", 0.5) == (None, b"")
    assert time.monotonic() - t0 < 3.0


def test_a_tls_handshake_that_stalls_is_cut_at_the_timeout(server):
    """An https endpoint that accepts and says nothing (the handshake never completes)."""
    s = server(lambda c, _r: time.sleep(6))
    t0 = time.monotonic()
    assert transport.post(f"https://127.0.0.1:{s.port}/x", {}, b"{}", 0.5, 10, loopback=True) == (None, b"")
    assert time.monotonic() - t0 < 3.0


def test_a_slow_name_lookup_counts_against_the_timeout(monkeypatch):
    def slow(*a, **kw):
        time.sleep(3)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.216.34", 443))]
    monkeypatch.setattr(socket, "getaddrinfo", slow)
    t0 = time.monotonic()
    assert delivery.http_poster("https://hooks.example.com/x", {}, b"{}", 0.5) == (None, b"")
    assert time.monotonic() - t0 < 2.5


# --- 30.5: the answer's bound ----------------------------------------------------------------------------
def test_an_answer_over_the_bound_comes_back_one_byte_over(server, local):
    big = b'{"release": [' + b",".join(str(i).encode() for i in range(80)) + b"]}"
    big += b" " * (delivery.MAX_RESPONSE_BYTES + 1000 - len(big))
    s = server(lambda c, _r: c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(big) + big))
    status, body = delivery.http_poster(f"http://127.0.0.1:{s.port}/x", {}, b"{}", 2.0)
    assert status == 200 and len(body) == delivery.MAX_RESPONSE_BYTES + 1
    assert P.response_outcomes(body, 80) is P.FAILED


def test_an_answer_within_the_bound_is_whole(server, local):
    s = server(lambda c, _r: c.sendall(b'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n'
                                       b'5\r\n{"rel\r\n10\r\nease": [1, 0]}  \r\n0\r\n\r\n'))
    status, body = delivery.http_poster(f"http://127.0.0.1:{s.port}/x", {}, b"{}", 2.0)
    assert status == 200 and P.response_outcomes(body, 2).release == {0, 1}


def test_plain_http_only_to_loopback_even_on_the_local_stack(monkeypatch):
    made = []
    monkeypatch.setattr(transport, "PinnedConnection", lambda *a, **kw: made.append(a) or 1 / 0)
    resolve = fake_resolver(["93.184.216.34"])
    for flag in (True, False):
        assert transport.post("http://hooks.example.com/x", {}, b"{}", 1.0, 10, loopback=flag, resolver=resolve) == \
            (None, b"")
    assert made == []  # refused before any connection


# --- TLS: the pinned connection verifies the URL's host name --------------------------------------------
def _self_signed(tmp_path, name: str):
    """A self-signed certificate for ``name`` (cryptography, a moto dependency): (cert path, key path)."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    c, k = tmp_path / "cert.pem", tmp_path / "key.pem"
    c.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    k.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption()))
    return str(c), str(k)


def test_https_to_the_pinned_address_checks_the_certificate_against_the_urls_host(tmp_path, monkeypatch):
    """A TLS endpoint on 127.0.0.1 with a certificate for hooks.test: the request to
    https://hooks.test (resolved to 127.0.0.1) verifies (SNI and name check on hooks.test) and reads
    the answer; the same certificate under another name fails (no status)."""
    import ssl
    cert, key = _self_signed(tmp_path, "hooks.test")
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(cert, key)
    seen_sni = []
    server_ctx.sni_callback = lambda sock, name, ctx: seen_sni.append(name)

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    port = srv.getsockname()[1]

    def serve():
        while True:
            try:
                raw, _ = srv.accept()
            except OSError:
                return
            try:
                with server_ctx.wrap_socket(raw, server_side=True) as c:
                    c.settimeout(5)
                    data = b""
                    while b"\r\n\r\n" not in data:
                        data += c.recv(65536)
                    c.sendall(b'HTTP/1.1 200 OK\r\nContent-Length: 16\r\n\r\n{"release": [0]}')
                    while c.recv(1024):  # until the client closes (closing first may reset the answer)
                        pass
            except (OSError, ssl.SSLError):
                pass
    threading.Thread(target=serve, daemon=True).start()
    client_ctx = ssl.create_default_context(cafile=cert)
    monkeypatch.setattr(transport, "_tls", client_ctx)
    try:
        status, body = transport.post(f"https://hooks.test:{port}/x", {}, b"{}", 3.0, 100, loopback=True,
                                      resolver=fake_resolver(["127.0.0.1"]))
        assert status == 200 and body == b'{"release": [0]}' and seen_sni == ["hooks.test"]
        assert transport.post(f"https://other.test:{port}/x", {}, b"{}", 3.0, 100, loopback=True,
                              resolver=fake_resolver(["127.0.0.1"])) == (None, b"")
    finally:
        srv.close()
