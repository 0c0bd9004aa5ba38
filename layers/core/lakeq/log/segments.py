"""Segment encoding (SPEC §1–2). Pure.

What one produce request puts into one queue is stored as one segment item: a fixed-size index
entry per message (offset is implicit: ``base + i``; position and length of its header and body
in ``data``; the 64-bit tag bitmap) and the concatenated headers and bodies. A pull tests the
bitmap of each index entry and decodes only the messages that pass, as RocketMQ's consume queue
lets a broker filter by tag without reading the commit log.

Index entry layout (little-endian, 20 bytes): ``u32 position, u32 header_length,
u32 body_length, u64 bitmap``. Header = compact JSON ``{"id","key","tags","properties","produced_at"}``;
body = the UTF-8 body (empty when the header has a ``claim``: the body is an object in the lake bucket,
:mod:`lakeq.log.claims`; a reader resolves it). ``data`` is zlib-compressed when that makes it smaller (flag ``z``).
"""
from __future__ import annotations

import json
import struct
import zlib
from dataclasses import dataclass, field
from typing import Iterable, Iterator

from matcher.bitmap import matches_any, may_match_any, tags_bitmap

ENTRY = struct.Struct("<IIIQ")
# bytes of raw data (index entries included) per segment item: DynamoDB items are <= 400 KB, and
# claims.INLINE_BYTES (300 KiB + 100: a bigger body goes to the lake bucket, leaving its header, at most
# validation.MAX_META_BYTES, and a claim) keeps every single message, and a fan-out copy of it (~300
# bytes of source coordinates more), under this
SEGMENT_DATA_LIMIT = 350_000
COMPRESS_OVER = 512


@dataclass
class Message:
    id: str
    body: str
    key: str | None = None
    tags: list[str] = field(default_factory=list)
    properties: dict = field(default_factory=dict)
    produced_at: int = 0
    # a dead-lettered copy's origin (issue 9): {"topic","queue","offset","id","group","deliveries",
    # "reason","at"}; stored in the header only when present
    dead_letter: dict | None = None
    # a body kept in the lake bucket (issue 18.2, lakeq.log.claims): {"key","size","sha256"}; the
    # message's ``body`` is then "" and the header carries the claim
    claim: dict | None = None
    # the producer's X-Ray trace header (issue 34: ``Root=1-…;Parent=…;Sampled=…``), carried to its
    # pulls, pushes and SQS receives; stored in the header only when present
    trace: str | None = None
    # a delayed message's deliver time (its promotion sets it): when it joined its queue, from which
    # the age of the oldest message counts (lakeq.console.summary.oldest_at); header only when present
    visible_at: int | None = None

    def optional(self, h: dict) -> dict:
        """``h`` with the header fields kept only when present (dead letter, claim, trace, visible_at)."""
        if self.dead_letter is not None:
            h["dead_letter"] = self.dead_letter
        if self.claim is not None:
            h["claim"] = self.claim
        if self.trace is not None:
            h["trace"] = self.trace
        if self.visible_at is not None:
            h["visible_at"] = self.visible_at
        return h

    def header(self) -> bytes:
        h = self.optional({"id": self.id, "key": self.key, "tags": self.tags, "properties": self.properties,
                           "produced_at": self.produced_at})
        return json.dumps(h, separators=(",", ":"), ensure_ascii=False).encode("utf-8")

    def encoded_size(self) -> int:
        return len(self.header()) + len(self.body.encode("utf-8")) + ENTRY.size


@dataclass
class Segment:
    base: int
    count: int
    idx: bytes
    data: bytes
    compressed: bool

    @property
    def end(self) -> int:
        return self.base + self.count


def encode(messages: list[Message], base: int) -> Segment:
    """Encode ``messages`` at offsets ``base..base+len-1``. O(total size)."""
    idx = bytearray()
    data = bytearray()
    for m in messages:
        header = m.header()
        body = m.body.encode("utf-8")
        idx += ENTRY.pack(len(data), len(header), len(body), tags_bitmap(m.tags))
        data += header
        data += body
    raw = bytes(data)
    compressed = False
    if len(raw) > COMPRESS_OVER:
        packed = zlib.compress(raw, 1)
        if len(packed) < len(raw):
            raw, compressed = packed, True
    return Segment(base, len(messages), bytes(idx), raw, compressed)


def split(messages: list[Message], limit: int = SEGMENT_DATA_LIMIT) -> list[list[Message]]:
    """Split into runs whose encoded size stays under ``limit`` (a message never exceeds it: the
    produce limits bound it; one that did would get a run of its own). O(n)."""
    runs: list[list[Message]] = []
    size = 0
    for m in messages:
        s = m.encoded_size()
        if runs and size + s <= limit:
            runs[-1].append(m)
            size += s
        else:
            runs.append([m])
            size = s
    return runs


def bitmaps(seg: Segment) -> list[int]:
    return [ENTRY.unpack_from(seg.idx, i * ENTRY.size)[3] for i in range(seg.count)]


def read(seg: Segment, start: int, limit: int, tags: list[str] | None = None) -> Iterator[tuple[int, dict | None]]:
    """Yield ``(offset, message or None)`` from offset ``start`` on, at most ``limit`` offsets.

    With ``tags`` (any-of), an entry whose bitmap fails is yielded as ``None`` without decoding;
    one that passes is decoded and re-checked exactly, also yielding ``None`` on a false
    positive. O(limit) index entries plus the size of the decoded messages.
    """
    data = zlib.decompress(seg.data) if seg.compressed else seg.data
    first = max(start, seg.base) - seg.base
    for i in range(first, min(seg.count, first + limit)):
        pos, hlen, blen, bitmap = ENTRY.unpack_from(seg.idx, i * ENTRY.size)
        if tags and not may_match_any(bitmap, tags):
            yield seg.base + i, None
            continue
        header = json.loads(data[pos:pos + hlen])
        if tags and not matches_any(header["tags"], tags):
            yield seg.base + i, None
            continue
        header["offset"] = seg.base + i
        header["body"] = data[pos + hlen:pos + hlen + blen].decode("utf-8")
        yield seg.base + i, header


def all_headers(seg: Segment) -> Iterable[dict]:
    """Every message of the segment with its offset (for the stream consumers)."""
    for _, msg in read(seg, seg.base, seg.count):
        yield msg  # type: ignore[misc]
