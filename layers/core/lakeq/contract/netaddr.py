"""Which network addresses a push endpoint may reach (issue 30.1), pure: the standard
:mod:`ipaddress` module's classification, applied to every address a push URL's host is or
resolves to (:mod:`lakeq.push.transport` resolves, checks every address, and connects to the
checked address itself).

An address is **public** (allowed) when :mod:`ipaddress` calls it global and it is neither
multicast nor reserved; for IPv6 also not site-local, and any IPv4 address it embeds (6to4) must
be public too. So loopback, link-local (169.254/16: the instance metadata service; fe80::/10),
private (10/8, 172.16/12, 192.168/16, fc00::/7), shared (100.64/10), unspecified (0.0.0.0, ::),
benchmarking, documentation, multicast, reserved (240/4, the broadcast address), IPv4-mapped
(::ffff:0:0/96), IPv4-compatible (::/96), NAT64 (64:ff9b::/96, 64:ff9b:1::/48) and Teredo forms
are refused. The local stack's allowance (``LAKEQ_PUSH_ALLOW_HTTP_LOOPBACK=1``, set by
``infra.local`` only) admits loopback addresses (127/8, ::1) as well, and nothing else.

A host that *looks* like an IPv4 number (its last label is decimal digits or ``0x``-hex, as the
WHATWG URL standard reads it: ``2130706433``, ``0x7f.1``, ``017700000001``, ``127.1``) must be
written in dotted-decimal form; other spellings are refused, whatever address they name, so no
resolver can read them differently from this check.

>>> [public(a) for a in ("93.184.216.34", "2606:4700::1", "169.254.169.254", "::ffff:8.8.8.8")]
[True, True, False, False]
>>> allowed("127.0.0.1", loopback=True), allowed("127.0.0.1", loopback=False), allowed("10.0.0.1", loopback=True)
(True, False, False)
"""
from __future__ import annotations

import ipaddress
import re

REFUSED = "the address is not allowed for a push endpoint (not a public unicast address)"
_NUMERIC_LABEL = re.compile(r"(?:[0-9]+|0[xX][0-9a-fA-F]*)\Z")


def _ip(address) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    if isinstance(address, (ipaddress.IPv4Address, ipaddress.IPv6Address)):
        return address
    try:
        return ipaddress.ip_address(str(address).split("%", 1)[0])  # (a scope id names no other address)
    except ValueError:
        return None


def public(address) -> bool:
    """Whether ``address`` (an IP address or its text) is a public unicast address.

    >>> [public(a) for a in ("8.8.8.8", "100.64.0.1", "224.0.0.1", "0.0.0.0", "255.255.255.255",
    ...                      "::1", "fe80::1", "fc00::1", "fec0::1", "ff02::1", "::7f00:1", "64:ff9b::808:808",
    ...                      "2002:7f00:1::", "2002:808:808::", "2001::1", "not an address")]
    [True, False, False, False, False, False, False, False, False, False, False, False, False, True, False, False]
    """
    ip = _ip(address)
    if ip is None or not ip.is_global or ip.is_multicast or ip.is_reserved:
        return False
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.is_site_local or ip.ipv4_mapped is not None or ip.teredo is not None:
            return False
        if ip in _NAT64 or ip in _NAT64_LOCAL or int(ip) >> 32 == 0:  # NAT64, IPv4-compatible ::/96
            return False
        if ip.sixtofour is not None and not public(ip.sixtofour):
            return False
    return True


_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")


def allowed(address, loopback: bool) -> bool:
    """Whether a push may connect to ``address``: a public one, or (``loopback``: the local
    stack's allowance) a loopback one."""
    if public(address):
        return True
    ip = _ip(address)
    return bool(loopback and ip is not None and ip.is_loopback)


def literal(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address a URL's host names literally (None: a host name, to be resolved); ValueError
    for an IPv4 number not in dotted-decimal form.

    >>> literal("127.0.0.1"), literal("::1"), literal("example.com")
    (IPv4Address('127.0.0.1'), IPv6Address('::1'), None)
    >>> for h in ("2130706433", "0x7f.1", "017700000001", "127.1", "127.000.0.1", "1.2.3.0x4", "example.0x1"):
    ...     try:
    ...         literal(h)
    ...     except ValueError:
    ...         pass
    ...     else:
    ...         print("accepted", h)
    """
    ip = _ip(host)
    if ip is not None:
        return ip
    labels = host.rstrip(".").split(".")
    if labels and _NUMERIC_LABEL.match(labels[-1]):
        raise ValueError(f"'{host}' reads as an IPv4 address: write it in dotted-decimal form")
    return None


def host_refusal(host: str, loopback: bool) -> str | None:
    """Why a URL's literal host may not be pushed to (None: allowed, or a name to resolve).

    >>> host_refusal("169.254.169.254", False) == REFUSED, host_refusal("hooks.example.com", False)
    (True, None)
    >>> host_refusal("0x7f.1", False)
    "'0x7f.1' reads as an IPv4 address: write it in dotted-decimal form"
    """
    try:
        ip = literal(host)
    except ValueError as e:
        return str(e)
    if ip is not None and not allowed(ip, loopback):
        return REFUSED
    return None
