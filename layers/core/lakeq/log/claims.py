"""Claim checks: where a message's body is kept when it is too big for a segment item (issue 18.2). Pure.

A segment is one DynamoDB item (<= 400 KB), so a message up to 1 MiB cannot live in it. A message
whose stored form would exceed :data:`INLINE_BYTES` (what a segment kept inline before, so every
message that fitted then is stored exactly as then) keeps its body as an object in the lake bucket
under :data:`PREFIX`; its segment entry keeps the header and a *claim* instead of the body::

    {"key": "bodies/<32 hex>/<sha-256 hex>", "size": <body bytes, UTF-8>, "sha256": "<hex>"}

The object holds the body's UTF-8 bytes. Its key is derived from the log, the message id and the
body's digest (:func:`object_key`), so a retried produce of the same message writes the same object
again instead of another one. The object is put *before* the segment write: a crash in between
leaves an object nothing references, removed by the bucket's lifecycle rule on :data:`PREFIX`
(``template.yaml``); never a segment naming a missing object. Copies of the message (fan-out list
entries, delayed items, dead-letter copies) copy the claim, not the body. A read checks the bytes
it gets against ``size`` and ``sha256`` (:func:`verify`): a mismatch is :class:`ClaimMismatch`,
never a wrong body.
"""
from __future__ import annotations

import hashlib

from lakeq.common.errors import LakeqError

PREFIX = "bodies/"
# a message whose stored form (header + body, :meth:`lakeq.log.segments.Message.encoded_size` minus
# the index entry) is over this goes by claim check: the old per-message limit (300 KiB: body, id,
# key, tags and properties as compact JSON, UTF-8) plus the ~100 bytes the server adds
INLINE_BYTES = 300 * 1024 + 100


class ClaimMismatch(LakeqError):
    """The object a claim names is not the body it was made for (size or digest differ)."""


class ClaimMissing(LakeqError):
    """The object a claim names is gone (removed by the bucket's lifecycle, or by hand)."""


def digest(data: bytes) -> str:
    """SHA-256 hex of ``data``.

    >>> digest(b"")[:8]
    'e3b0c442'
    """
    return hashlib.sha256(data).hexdigest()


def needs_claim(stored_bytes: int) -> bool:
    """Whether a message whose stored form takes ``stored_bytes`` goes by claim check.

    >>> needs_claim(INLINE_BYTES), needs_claim(INLINE_BYTES + 1)
    (False, True)
    """
    return stored_bytes > INLINE_BYTES


def object_key(log: str, message_id: str, body_digest: str) -> str:
    """The object's key: :data:`PREFIX`, a hash of (log, message id), the body's digest. The same
    message produced again (a client's retry) gets the same key; two messages never share one.

    >>> k = object_key("quotes/sh", "m-1", digest(b"x"))
    >>> k.startswith("bodies/") and k == object_key("quotes/sh", "m-1", digest(b"x"))
    True
    >>> k != object_key("quotes/sh", "m-2", digest(b"x")) and k != object_key("quotes/sh!1", "m-1", digest(b"x"))
    True
    """
    who = hashlib.sha256(f"{log}\x00{message_id}".encode("utf-8")).hexdigest()[:32]
    return f"{PREFIX}{who}/{body_digest}"


def make(log: str, message_id: str, data: bytes) -> dict:
    """The claim of body bytes ``data`` for message ``message_id`` of ``log``.

    >>> c = make("t", "a", b"hello")
    >>> sorted(c), c["size"]
    (['key', 'sha256', 'size'], 5)
    """
    d = digest(data)
    return {"key": object_key(log, message_id, d), "size": len(data), "sha256": d}


def is_claim(value: object) -> bool:
    """A well-formed claim record.

    >>> is_claim(make("t", "a", b"x")), is_claim({"key": "bodies/x"}), is_claim(None)
    (True, False, False)
    """
    return (isinstance(value, dict) and isinstance(value.get("key"), str) and value["key"].startswith(PREFIX)
            and isinstance(value.get("size"), int) and not isinstance(value.get("size"), bool)
            and isinstance(value.get("sha256"), str) and len(value["sha256"]) == 64)


def verify(claim: dict, data: bytes) -> str:
    """The body ``data`` holds, after checking it against ``claim``; :class:`ClaimMismatch` otherwise.

    >>> verify(make("t", "a", "é".encode()), "é".encode())
    'é'
    >>> verify(make("t", "a", b"x"), b"y")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    lakeq.log.claims.ClaimMismatch: body object bodies/... does not match its claim (1 bytes, sha256 2d711642...)
    """
    if len(data) != claim["size"] or digest(data) != claim["sha256"]:
        raise ClaimMismatch(f"body object {claim['key']} does not match its claim "
                            f"({claim['size']} bytes, sha256 {claim['sha256'][:8]}...; got {len(data)} bytes)")
    return data.decode("utf-8")
