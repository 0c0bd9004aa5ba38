"""Multi-tag bitmap filter (SPEC §2): a 64-bit Bloom filter per message.

Each tag hashes to a 64-bit value ``h(tag)`` with ``K`` bits set (``K`` positions drawn from one
blake2b digest of the tag's UTF-8 bytes, so the value is the same in every process and language).
A message's index entry stores ``B = h(t1) | h(t2) | ...``. A subscription to tag ``x`` passes the
index test when ``B & h(x) == h(x)``. A failed test proves the message lacks the tag; a passing test
may be a false positive, so :func:`matches_any` re-checks the exact tag list before delivery.

False-positive rate for one queried tag with ``n`` tags in the message: ``(1 - e^(-K*n/64))^K``;
``K = 3`` keeps it under 0.5 % up to 4 tags and under 15 % at the 16-tag limit (measured by
``bench/bitmap.py``, recorded in ``docs/benchmarks.md``).
"""
from __future__ import annotations

import hashlib
from functools import lru_cache
from typing import Iterable

K = 3
MASK64 = (1 << 64) - 1


@lru_cache(maxsize=65536)
def tag_hash(tag: str, k: int = K) -> int:
    """Return the 64-bit hash of ``tag`` with at most ``k`` bits set. O(k), cached."""
    digest = hashlib.blake2b(tag.encode("utf-8"), digest_size=16).digest()
    value = 0
    for i in range(k):
        value |= 1 << (digest[i] & 63)
    return value


def tags_bitmap(tags: Iterable[str], k: int = K) -> int:
    """Return ``B``, the OR of the hashes of ``tags`` (0 for no tags). O(len(tags) * k)."""
    bitmap = 0
    for tag in tags:
        bitmap |= tag_hash(tag, k)
    return bitmap


def may_match_any(bitmap: int, wanted: Iterable[str], k: int = K) -> bool:
    """Index test: False proves the message carries none of ``wanted``. O(len(wanted) * k)."""
    for tag in wanted:
        h = tag_hash(tag, k)
        if bitmap & h == h:
            return True
    return False


def matches_any(tags: Iterable[str], wanted: Iterable[str]) -> bool:
    """Exact re-check: True when the message's ``tags`` contain at least one of ``wanted``."""
    wanted_set = set(wanted)
    return any(t in wanted_set for t in tags)
