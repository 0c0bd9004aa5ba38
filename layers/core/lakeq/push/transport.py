"""The push request on the wire (issue 30.1, 30.2): one POST to a tenant's URL that can reach only a
public address and never outlives its timeout.

- **Addresses** (:func:`addresses`): the URL's host, if an address, and every address its name
  resolves to must be allowed (:func:`lakeq.contract.netaddr.allowed`: public unicast, or loopback
  on the local stack); one refused address refuses the request. The connection then goes to one
  of those checked addresses itself (the IP is pinned; ``Host`` and TLS SNI / certificate checks
  keep the URL's host name), so a DNS answer that changes between the check and the connect
  (rebinding) is never connected to. Redirects are not followed (a 3xx is a failed attempt).
- **Deadline** (:func:`post`): ``timeout_s`` bounds the whole request — the name lookup (run in a
  worker thread, abandoned at the deadline), the connect, the TLS handshake (non-blocking, polled
  up to the deadline), sending, and reading the status, headers and body: every socket operation
  gets the time left as its timeout, recomputed before each one, so an endpoint that trickles
  its answer byte by byte is cut at the deadline, not after ``timeout_s`` per byte.
- **Answer**: at most ``max_bytes + 1`` bytes of a 2xx body are read (one more than the bound,
  so the caller can tell a cut answer from a whole one).

Written on :mod:`http.client` (standard library) rather than urllib3 (which is in the runtime only
as botocore's dependency): urllib3's ``Timeout(total=…)`` bounds the connect and each socket read,
not the sum of many trickled reads, so the per-operation deadline would have to be added around it
all the same, and a pinned-IP connect with the URL's host for SNI and the ``Host`` header is a
short subclass of :class:`http.client.HTTPConnection` either way.
"""
from __future__ import annotations

import http.client
import io
import logging
import select
import socket
import ssl
import threading
import time
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from urllib.parse import urlsplit

from lakeq.common.errors import LakeqError
from lakeq.contract import netaddr
from lakeq.contract.push import ascii_host

log = logging.getLogger("lakeq.push.transport")

# A refused send's outcome is a failed attempt with no HTTP status: the same as an address that
# never answered, so the endpoint's state tells a tenant nothing about what listens there.
REGISTRATION_LOOKUP_S = 2.0  # a registration's name lookup waits at most this long
# Name lookups: one daemon thread per (host, port) being looked up, shared by every send that asks
# for the same name while it runs (single flight). No fixed pool: a lookup abandoned at its
# request's deadline (a name whose servers never answer) holds its own thread until the system
# resolver gives up, never a slot another tenant's lookup waits for; and the threads alive at once
# are bounded by the distinct names being looked up (endpoints per client are bounded).
_lookups: dict[tuple[str, int], Future] = {}
_lookups_lock = threading.Lock()


def _lookup(host: str, port: int) -> Future:
    key = (host, port)
    with _lookups_lock:
        fut = _lookups.get(key)
        if fut is not None:
            return fut
        fut = _lookups[key] = Future()

    def run() -> None:
        try:
            fut.set_result(socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM, socket.IPPROTO_TCP))
        except BaseException as e:  # noqa: BLE001 - handed to every waiter
            fut.set_exception(e)
        finally:
            with _lookups_lock:
                if _lookups.get(key) is fut:
                    del _lookups[key]

    threading.Thread(target=run, name=f"push-dns-{host}", daemon=True).start()
    return fut


class Refused(LakeqError):  # noqa: N818 - an outcome: the URL's host is or resolves to a refused address
    pass


class Deadline(LakeqError, TimeoutError):
    pass


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise Deadline("the push request's timeout passed")
    return left


def resolve(host: str, port: int, deadline: float) -> list[tuple[int, tuple]]:
    """``host``'s addresses as ``(family, sockaddr)`` (getaddrinfo, TCP), within the deadline."""
    fut = _lookup(host, port)
    try:
        infos = fut.result(timeout=_left(deadline))
    except FutureTimeout:
        raise Deadline("the name lookup outlived the push request's timeout") from None
    return list(dict.fromkeys((fam, sa[:2] if fam == socket.AF_INET else sa) for fam, _t, _p, _c, sa in infos))


def addresses(host: str, port: int, loopback: bool, deadline: float,
              resolver=None) -> list[tuple[int, tuple]]:
    """The addresses to connect to for ``host`` (an ASCII host: :func:`ascii_host`), every one of
    them allowed; :class:`Refused` when the host is, or any of its addresses is, not allowed."""
    refusal = netaddr.host_refusal(host, loopback)
    if refusal is not None:
        raise Refused(refusal)
    found = (resolver or resolve)(host, port, deadline)
    if not found or any(not netaddr.allowed(sa[0], loopback) for _f, sa in found):
        raise Refused(netaddr.REFUSED)
    return found


def check_host(url: str, loopback: bool, timeout_s: float = REGISTRATION_LOOKUP_S, resolver=None) -> str | None:
    """At registration: why ``url``'s host may not be pushed to (it is, or its name resolves to, a
    refused address), or None (allowed, or the name does not resolve yet: every send checks again).
    ``url`` has passed :func:`lakeq.contract.push.check_url`."""
    parts = urlsplit(url)
    host = ascii_host(parts.hostname or "")
    try:
        addresses(host, parts.port or (443 if parts.scheme == "https" else 80), loopback,
                  time.monotonic() + timeout_s, resolver)
    except Refused as e:
        return str(e)
    except (OSError, UnicodeError):  # no answer (yet): not refused here; each send resolves and checks
        return None
    return None


class _DeadlineIO(io.RawIOBase):
    """A socket's reading side whose every read waits at most until the deadline."""

    def __init__(self, sock, deadline: float):
        self.sock, self.deadline = sock, deadline

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        self.sock.settimeout(_left(self.deadline))
        return self.sock.recv_into(b)


class _Sock:
    """What :class:`http.client.HTTPResponse` takes: ``makefile`` over :class:`_DeadlineIO`."""

    def __init__(self, sock, deadline: float):
        self.sock, self.deadline = sock, deadline

    def makefile(self, mode: str, *a, **kw):
        return io.BufferedReader(_DeadlineIO(self.sock, self.deadline))


class PinnedConnection(http.client.HTTPConnection):
    """An HTTP(S) connection to checked addresses (``addrs``) for ``host`` (``Host`` header, SNI
    and certificate name), every operation bounded by ``deadline``."""

    def __init__(self, host: str, port: int, addrs: list, deadline: float, tls: ssl.SSLContext | None):
        super().__init__(host, port)
        self.addrs, self.deadline, self.tls = addrs, deadline, tls
        self.response_class = self._response

    def _response(self, sock, *a, **kw):
        return http.client.HTTPResponse(_Sock(sock, self.deadline), *a, **kw)

    def connect(self):
        err: OSError | None = None
        for family, sa in self.addrs:
            s = socket.socket(family, socket.SOCK_STREAM)
            try:
                s.settimeout(_left(self.deadline))
                s.connect(sa)
                break
            except OSError as e:
                s.close()
                err = e
        else:
            raise err or OSError("no address to connect to")
        try:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.sock = self._handshake(s) if self.tls is not None else s
        except BaseException:
            s.close()
            raise

    def _handshake(self, raw: socket.socket) -> ssl.SSLSocket:
        t = self.tls.wrap_socket(raw, server_hostname=self.host, do_handshake_on_connect=False)
        t.settimeout(0.0)
        while True:
            try:
                t.do_handshake()
                break
            except ssl.SSLWantReadError:
                ready = select.select([t], [], [], _left(self.deadline))[0]
            except ssl.SSLWantWriteError:
                ready = select.select([], [t], [], _left(self.deadline))[1]
            if not ready:
                raise Deadline("the TLS handshake outlived the push request's timeout")
        return t

    def send(self, data):
        if self.sock is None:  # (connected here, not in http.client's send: the timeout below must apply)
            self.connect()
        self.sock.settimeout(_left(self.deadline))  # the handshake left a TLS socket non-blocking
        super().send(data)


_tls = ssl.create_default_context()


def post(url: str, headers: dict, body: bytes, timeout_s: float, max_bytes: int, loopback: bool = False,
         resolver=None) -> tuple[int | None, bytes]:
    """POST ``body`` to ``url``: (the HTTP status, at most ``max_bytes + 1`` bytes of a 2xx answer's
    body), or (None, b"") for a refused address, a timeout or a connection error (logged, with
    which). ``loopback``: the local stack's allowance (loopback addresses too); ``resolver``: how to
    look a name up (default :func:`resolve`, looked up at call time)."""
    deadline = time.monotonic() + timeout_s
    conn = None
    try:
        parts = urlsplit(url)
        host = ascii_host(parts.hostname or "")
        tls = _tls if parts.scheme == "https" else None
        port = parts.port or (443 if tls is not None else 80)
        if tls is None and not loopback:
            raise Refused("plain http")
        addrs = addresses(host, port, loopback, deadline, resolver)
        if tls is None and not all(netaddr.allowed(sa[0], True) and not netaddr.public(sa[0]) for _f, sa in addrs):
            raise Refused("plain http to a non-loopback address")
        conn = PinnedConnection(host, port, addrs, deadline, tls)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        conn.request("POST", path, body=body, headers=headers)
        r = conn.getresponse()
        if not 200 <= r.status < 300:
            return r.status, b""
        got = b""
        while len(got) <= max_bytes:
            chunk = r.read(max_bytes + 1 - len(got))
            if not chunk:
                break
            got += chunk
        return r.status, got
    except Refused as e:
        log.warning("push refused: the URL's host is not allowed", extra={"url": url, "reason": str(e)})
        return None, b""
    except (OSError, http.client.HTTPException, ValueError, UnicodeError) as e:  # timeouts, refused, reset, DNS
        log.info("push failed to connect: %r", e, extra={"url": url, "error": repr(e)})
        return None, b""
    finally:
        if conn is not None:
            conn.close()
