"""Response encoding and the byte budget of a pull's batch (Lambda's 6 MB response limit). Pure.

A handler's JSON body is a string inside the Lambda response document, which the runtime encodes
once more: on the ``python3.11`` runtime (this template's) the runtime's marshaller uses
``json.dumps``'s default ``ensure_ascii=True`` (only ``python3.12``+ runtimes pass
``ensure_ascii=False``), so every character of the body is escaped a second time: ``"`` and
``\\`` become 2 bytes, then the escape's own backslash doubles; a non-ASCII character becomes
``\\uXXXX`` (6 bytes, 12 for one outside the BMP). Lambda's limit (6 MB, a synchronous invocation's
response payload) applies to that document. :func:`lambda_bytes` measures exactly it; the
response body itself is encoded with ``ensure_ascii=False`` (:func:`dumps`), so a non-ASCII
character costs its UTF-8 bytes on a ``python3.12``+ runtime and through API Gateway to the client,
and 6 (not 7) on ``python3.11``.
"""
from __future__ import annotations

import json
from typing import Callable

LAMBDA_RESPONSE_LIMIT = 6 * 1024 * 1024  # bytes: a synchronous invocation's response payload
ENVELOPE_RESERVE = 16 * 1024  # statusCode, headers, the receipt and the JSON around the messages
BATCH_BYTES = LAMBDA_RESPONSE_LIMIT - ENVELOPE_RESERVE


def dumps(obj: object) -> str:
    """The JSON text of a response body: compact, UTF-8 characters kept as they are."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def lambda_bytes(obj: object) -> int:
    """Bytes ``obj``'s JSON (as :func:`dumps` writes it) takes inside the Lambda response document
    (the runtime's second encoding, ``ensure_ascii=True``: an upper bound for every runtime, and for
    the UTF-8 body API Gateway forwards). O(size)."""
    return len(json.dumps(dumps(obj))) - 2


class ByteBudget:
    """Admits messages into a batch while their encoded size (``measure``, default
    :func:`lambda_bytes`) fits ``limit``; the first message is always admitted. One valid message is
    at most ~4.4 MB even fully escaped (issue 18.2: a 1 MiB body of quotes or backslashes, 4 bytes
    each in the runtime's document, beside the metadata the limits allow;
    ``tests/unit/test_claims.py``), under :data:`BATCH_BYTES`."""

    def __init__(self, limit: int = BATCH_BYTES, measure: "Callable[[dict], int] | None" = None):
        self.left = limit
        self.count = 0
        self.measure = measure or lambda_bytes

    def take(self, message: dict) -> bool:
        size = self.measure(message) + 1  # and the comma before it
        if self.count and size > self.left:
            return False
        self.left -= size
        self.count += 1
        return True
