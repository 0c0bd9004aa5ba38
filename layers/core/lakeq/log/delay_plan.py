"""Delayed delivery (``delay_ms``), the pure part: DelayedTable's sort key, how a queue's delayed
messages are cut into produce transactions, what a promotion transaction may carry, and the queue
item's ``next_due`` after a promotion. No AWS imports; :mod:`lakeq.produce.delayed` runs these plans with
:class:`lakeq.store.delayed.DelayedRepo`.
"""
from __future__ import annotations

import json
import struct
import zlib
from dataclasses import dataclass
from typing import Callable

from lakeq.log import segments as seg
from lakeq.log.produce_plan import QUEUE_ITEM_BYTES, TRANSACT_BYTES, TRANSACT_ITEMS, dedup_item_bytes, pq

MAX_DELAY_MS = 900_000  # 15 minutes, as SQS's DelaySeconds
DUE_DIGITS = 13  # epoch milliseconds have 13 digits until the year 2286


def due_key(deliver_at: int, mid: str, seq: int | None = None) -> str:
    """DelayedTable's sort key: due order, then ``seq`` (the message's index in its produce
    request: a request's messages due at the same millisecond keep their order, as a key's or an
    SQS FIFO group's must), then id (string order). Without ``seq``: a Query bound.

    >>> due_key(1_800_000_000_000, "a") < due_key(1_800_000_000_000, "b") < due_key(1_800_000_000_001, "a")
    True
    >>> due_key(5, "x"), due_key(5, "x", 7)
    ('0000000000005#x', '0000000000005007#x')
    >>> due_key(5, "", None) < due_key(5, "b", 0) < due_key(5, "a", 1) < due_key(6, "")
    True
    """
    return f"{deliver_at:0{DUE_DIGITS}d}{'' if seq is None else f'{seq:03d}'}#{mid}"


def id_of_due(due: str) -> str:
    """The message id of a due key (``""`` for a message without one).

    >>> id_of_due(due_key(5, "x")), id_of_due(due_key(5, "a#b", 7)), id_of_due(due_key(5, ""))
    ('x', 'a#b', '')
    """
    return due.split("#", 1)[1]


def encode_message(m: seg.Message) -> bytes:
    """A delayed message as DelayedTable keeps it (binary attribute ``data``): a flag byte (``r``
    raw, ``z`` zlib), then the segment form of one message: u32 header length, the compact JSON
    header (as :meth:`lakeq.log.segments.Message.header`), the UTF-8 body unescaped. So the item's size
    is bounded as a segment's is (``claims.INLINE_BYTES``; a claimed message keeps its claim, not
    its body): a body of quotes, backslashes or control characters costs its UTF-8 bytes, not its
    JSON escapes (issue 14, item 5).

    >>> encode_message(seg.Message(id="a", body='"'))[:1]
    b'r'
    """
    header = m.header()
    raw = struct.pack("<I", len(header)) + header + m.body.encode("utf-8")
    if len(raw) > seg.COMPRESS_OVER:
        packed = zlib.compress(raw, 1)
        if len(packed) < len(raw):
            return b"z" + packed
    return b"r" + raw


def decode_message(data: bytes | str) -> seg.Message:
    """Inverse of :func:`encode_message`; also reads the JSON text items written before it (``msg``).

    >>> m = seg.Message(id="a", body="é\\x00\\"" * 300, key=None, tags=["t"], properties={"n": 1}, produced_at=5)
    >>> decode_message(encode_message(m)) == m
    True
    >>> decode_message('{"id":"a","body":"x","key":null,"tags":[],"properties":{},"produced_at":5}').body
    'x'
    """
    if isinstance(data, str):
        d = json.loads(data)
        body = d["body"]
    else:
        raw = zlib.decompress(data[1:]) if data[:1] == b"z" else bytes(data[1:])
        (hlen,) = struct.unpack_from("<I", raw, 0)
        d = json.loads(raw[4:4 + hlen])
        body = raw[4 + hlen:].decode("utf-8")
    return seg.Message(id=d["id"], body=body, key=d.get("key"), tags=list(d.get("tags") or []),
                       properties=dict(d.get("properties") or {}), produced_at=int(d.get("produced_at") or 0),
                       dead_letter=d.get("dead_letter"), claim=d.get("claim"), trace=d.get("trace"))


def delayed_item_bytes(pq_: str, m: seg.Message) -> int:
    """Upper bound of a DelayedTable item's size as DynamoDB counts it (attribute names + values):
    ``data`` is at most the segment form's bytes (:meth:`lakeq.log.segments.Message.encoded_size`
    counts them plus a 20-byte index entry, more than the 5 bytes of flag and length)."""
    return len(pq_.encode("utf-8")) + DUE_DIGITS + 1 + len(m.id.encode("utf-8")) + m.encoded_size() + 100


def delete_key_bytes(pq_: str, mid: str) -> int:
    """What a delete of a delayed item adds to a transaction's size (its key)."""
    return len(pq_.encode("utf-8")) + DUE_DIGITS + 1 + len(mid.encode("utf-8")) + 20


@dataclass(frozen=True)
class Delayed:
    """One delayed message of a produce request."""

    index: int  # in the request
    message: seg.Message
    cid: bool  # the id is the client's (a dedup item records it)
    deliver_at: int


def plan_delayed(topic: str, q: int, items: list[Delayed]) -> list[list[Delayed]]:
    """Cut a queue's delayed messages into transactions within DynamoDB's limits: the queue item's
    update (``next_due``, ``delayed``, ``dver``), one put per message and one dedup put per
    client id; at most ``TRANSACT_ITEMS`` items and ``TRANSACT_BYTES`` by size bounds each.

    >>> ms = [Delayed(i, seg.Message(id=str(i), body="x"), True, 10) for i in range(60)]
    >>> [len(p) for p in plan_delayed("t", 0, ms)]
    [49, 11]
    """
    pq_ = pq(topic, q)
    parts: list[list[Delayed]] = []
    n_items = n_bytes = 0
    for d in items:
        add_items = 1 + (1 if d.cid else 0)
        add_bytes = delayed_item_bytes(pq_, d.message) + (dedup_item_bytes(topic, d.message.id) if d.cid else 0)
        if not parts or n_items + add_items > TRANSACT_ITEMS or n_bytes + add_bytes > TRANSACT_BYTES:
            parts.append([])
            n_items, n_bytes = 1, QUEUE_ITEM_BYTES
        parts[-1].append(d)
        n_items += add_items
        n_bytes += add_bytes
    return parts


def promotion_extra(topic: str, q: int) -> Callable[[tuple[int, seg.Message, bool]], tuple[int, int]]:
    """For :func:`lakeq.log.produce_plan.plan_parts`: each promoted message also deletes its delayed item."""
    pq_ = pq(topic, q)
    return lambda it: (1, delete_key_bytes(pq_, it[1].id))


def next_due_after(deliver_ats: list[int], promoted: int, complete: bool) -> int | None:
    """The queue's ``next_due`` once the first ``promoted`` of its delayed messages (``deliver_ats``,
    the first ones in due order as a Query returned them) have joined the queue: the next one's
    due time; None when there is none left — known only when the Query returned them all
    (``complete``). A Query that stopped early always returns one more than it promotes.

    >>> next_due_after([5, 7, 9], 2, True), next_due_after([5, 7], 2, True)
    (9, None)
    """
    if promoted < len(deliver_ats):
        return deliver_ats[promoted]
    if not complete:
        raise ValueError("the Query must return one delayed message more than it promotes")
    return None


def due_count(deliver_ats: list[int], now: int) -> int:
    """How many of the first delayed messages (in due order) are due at ``now``.

    >>> due_count([5, 7, 9], 7), due_count([], 7)
    (2, 0)
    """
    n = 0
    for d in deliver_ats:
        if d > now:
            break
        n += 1
    return n
