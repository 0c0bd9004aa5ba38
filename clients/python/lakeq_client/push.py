"""Verifying lakeq's push requests (webhooks) in a receiver: :func:`verify_push`.

A push request carries ``X-Lakeq-Signature: t=<unix seconds>,v1=<hex>[,v1=<hex>]``, each ``v1`` the
hex HMAC-SHA256 of ``b"<t>." + body`` under one of the endpoint's valid secrets (two while a
rotation's previous secret lives). Verify the raw body bytes as received.

>>> import hashlib, hmac
>>> body = b'{"messages":[]}'
>>> sig = hmac.new(b"whsec_x", b"100." + body, hashlib.sha256).hexdigest()
>>> verify_push({"x-lakeq-signature": f"t=100,v1={sig}"}, body, "whsec_x", now=100)
True
>>> verify_push({"X-Lakeq-Signature": f"t=100,v1={sig}"}, body + b" ", "whsec_x", now=100)
False
"""
from __future__ import annotations

import hashlib
import hmac
import time
from typing import Mapping

SIGNATURE_HEADER = "X-Lakeq-Signature"


def verify_push(headers: Mapping[str, str], body: bytes | str, secret: str, tolerance_s: int = 300,
                now: float | None = None) -> bool:
    """Whether a push request is lakeq's: its ``X-Lakeq-Signature`` header (looked up without regard
    to case) carries a ``v1`` signature of ``body`` under ``secret`` and a timestamp within
    ``tolerance_s`` seconds of ``now`` (default: the current time), so an old request replayed
    later is refused. Comparisons are constant-time."""
    value = next((v for k, v in headers.items() if k.lower() == SIGNATURE_HEADER.lower()), None)
    if not value:
        return False
    ts, sigs = None, []
    for part in value.split(","):
        k, _, v = part.strip().partition("=")
        if k == "t" and v.isdigit():
            ts = int(v)
        elif k == "v1" and v:
            sigs.append(v)
    if ts is None or abs((time.time() if now is None else now) - ts) > tolerance_s:
        return False
    raw = body.encode("utf-8") if isinstance(body, str) else bytes(body)
    want = hmac.new(secret.encode("utf-8"), str(ts).encode("ascii") + b"." + raw, hashlib.sha256).hexdigest()
    return any(hmac.compare_digest(want, s) for s in sigs)
