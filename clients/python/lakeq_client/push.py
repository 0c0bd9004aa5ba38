"""Verifying lakeq's push requests (webhooks) in a receiver: :func:`verify_push` (lakeq's own
``X-Lakeq-Signature``) and :func:`verify_webhook` (Standard Webhooks' ``webhook-id``,
``webhook-timestamp``, ``webhook-signature``: what the ``standardwebhooks`` libraries, in any
language, also verify). Both answer True or False and never raise, whatever the headers hold.

A push request carries ``X-Lakeq-Signature: t=<unix seconds>,v1=<hex>[,v1=<hex>]``, each ``v1`` the
hex HMAC-SHA256 of ``b"<t>." + body`` under one of the endpoint's valid secrets (the whole
``whsec_…`` string is the key; two signatures while a rotation's previous secret lives), and
``webhook-signature: v1,<base64>[ v1,<base64>]``, each the base64 HMAC-SHA256 of
``b"<webhook-id>.<webhook-timestamp>." + body`` under the secret's key (the base64 after
``whsec_``). Verify the raw body bytes as received.

>>> import hashlib, hmac
>>> body = b'{"messages":[]}'
>>> sig = hmac.new(b"whsec_x", b"100." + body, hashlib.sha256).hexdigest()
>>> verify_push({"x-lakeq-signature": f"t=100,v1={sig}"}, body, "whsec_x", now=100)
True
>>> verify_push({"X-Lakeq-Signature": f"t=100,v1={sig}"}, body + b" ", "whsec_x", now=100)
False
>>> verify_push({"X-Lakeq-Signature": "t=1e9,v1=zz,v1=\\u00e9"}, body, "whsec_x", now=100)
False
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import time
from typing import Mapping

SIGNATURE_HEADER = "X-Lakeq-Signature"
MAX_HEADER_CHARS = 8192           # a longer signature header is not lakeq's
_TS = re.compile(r"[0-9]{1,15}\Z")  # ASCII digits only (str.isdigit also admits '²', '١', …)
_HEX = re.compile(r"[0-9a-fA-F]{64}\Z")
_B64_SIG = re.compile(r"v1,([A-Za-z0-9+/]{43}=)\Z")


def _header(headers: Mapping[str, str], name: str) -> str | None:
    """The header's value, its name matched without regard to case; None when absent or not text."""
    try:
        items = list(headers.items())
    except Exception:  # noqa: BLE001 - not a mapping: no header
        return None
    for k, v in items:
        if isinstance(k, str) and k.lower() == name:
            if isinstance(v, bytes):
                try:
                    v = v.decode("ascii")
                except UnicodeDecodeError:
                    return None
            return v if isinstance(v, str) and len(v) <= MAX_HEADER_CHARS else None
    return None


def _raw(body) -> bytes | None:
    if isinstance(body, str):
        try:
            return body.encode("utf-8")
        except UnicodeEncodeError:
            return None
    if isinstance(body, (bytes, bytearray, memoryview)):
        return bytes(body)
    return None


def _fresh(ts: str, tolerance_s: int, now: float | None) -> bool:
    if not _TS.match(ts):
        return False
    return abs((time.time() if now is None else now) - int(ts)) <= tolerance_s


def verify_push(headers: Mapping[str, str], body: bytes | str, secret: str, tolerance_s: int = 300,
                now: float | None = None) -> bool:
    """Whether a push request is lakeq's: its ``X-Lakeq-Signature`` header (looked up without regard
    to case) carries a ``v1`` signature of ``body`` under ``secret`` and a timestamp within
    ``tolerance_s`` seconds of ``now`` (default: the current time), so an old request replayed
    later is refused. Comparisons are constant-time. False — never an exception — for anything
    else: a missing, malformed or forged header, a stale timestamp, a body or secret of the wrong
    type."""
    value, raw = _header(headers, SIGNATURE_HEADER.lower()), _raw(body)
    if not value or raw is None or not isinstance(secret, str):
        return False
    ts, sigs = None, []
    for part in value.split(","):
        k, _, v = part.strip().partition("=")
        if k == "t":
            ts = v
        elif k == "v1" and _HEX.match(v):
            sigs.append(v.lower())
    if ts is None or not sigs or not _fresh(ts, tolerance_s, now):
        return False
    try:
        key = secret.encode("utf-8")
    except UnicodeEncodeError:
        return False
    want = hmac.new(key, ts.encode("ascii") + b"." + raw, hashlib.sha256).hexdigest()
    return any(hmac.compare_digest(want, s) for s in sigs)


def webhook_key(secret: str) -> bytes | None:
    """The HMAC key a ``whsec_…`` secret names (the base64 after the prefix, standard or URL-safe
    alphabet, padding optional); None when it is not base64."""
    rest = secret[6:] if secret.startswith("whsec_") else secret
    rest = rest.rstrip("=").replace("+", "-").replace("/", "_")
    try:
        key = base64.urlsafe_b64decode(rest + "=" * (-len(rest) % 4))
    except (binascii.Error, ValueError):
        return None
    return key or None


def verify_webhook(headers: Mapping[str, str], body: bytes | str, secret: str, tolerance_s: int = 300,
                   now: float | None = None) -> bool:
    """Whether a push request verifies as Standard Webhooks defines it: ``webhook-signature`` holds a
    ``v1,<base64>`` HMAC-SHA256 of ``"<webhook-id>.<webhook-timestamp>.<body>"`` under ``secret``'s
    key, ``webhook-timestamp`` within ``tolerance_s`` of ``now``. Never raises (False instead).
    (The ``standardwebhooks`` package's ``Webhook(secret).verify(body, headers)`` checks the same
    and raises on a mismatch.)"""
    msg_id, ts, sig = (_header(headers, h) for h in ("webhook-id", "webhook-timestamp", "webhook-signature"))
    raw = _raw(body)
    if not msg_id or not ts or not sig or raw is None or not isinstance(secret, str):
        return False
    key = webhook_key(secret)
    if key is None or not _fresh(ts, tolerance_s, now):
        return False
    try:
        content = f"{msg_id}.{ts}.".encode("utf-8") + raw
    except UnicodeEncodeError:
        return False
    want = base64.b64encode(hmac.new(key, content, hashlib.sha256).digest()).decode("ascii")
    got = [m.group(1) for m in (_B64_SIG.match(s) for s in sig.split(" ")) if m]
    return any(hmac.compare_digest(want, g) for g in got)
