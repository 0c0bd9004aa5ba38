"""Produce planning: which queue a message goes to and how a queue's messages are cut into
DynamoDB writes within the store's limits. Pure (no AWS imports); :mod:`lakeq.consume.service` runs the
plan with :meth:`lakeq.store.queue_log.LogRepo.append`, which takes the :class:`Append` parts made here.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Callable

from lakeq.common.names import queue_key
from lakeq.log import segments as seg

TRANSACT_ITEMS = 100  # DynamoDB: at most 100 items per TransactWriteItems ...
TRANSACT_BYTES = 3_500_000  # ... and 4 MB in all; we plan with item-size upper bounds under this
QUEUE_ITEM_BYTES = 300  # the queue item's key and the head attributes a transaction updates


pq = queue_key  # a queue's partition key in SegmentsTable: the key grammar's (lakeq.common.names)


def queue_for_key(key: str, queues: int) -> int:
    """Same key, same queue (CRC-32 of the UTF-8 key).

    >>> queue_for_key("000000", 4) == queue_for_key("000000", 4) < 4
    True
    """
    return zlib.crc32(key.encode("utf-8")) % queues


def segment_item_bytes(pq_: str, s: seg.Segment) -> int:
    """Upper bound of a segment item's DynamoDB size (attribute names + values)."""
    return len(pq_.encode("utf-8")) + len(s.idx) + len(s.data) + 120


def dedup_item_bytes(topic: str, mid: str) -> int:
    """Upper bound of a dedup item's DynamoDB size."""
    return len(topic.encode("utf-8")) + len(mid.encode("utf-8")) + 80


@dataclass
class Append:
    """One transaction's worth of a queue append."""

    segments: list[seg.Segment]
    dedup: list[tuple[str, int]]  # (message id, offset)


EMPTY_SEGMENT = seg.Segment(0, 0, b"", b"", False)

Item = tuple[int, seg.Message, bool]  # (request index, message, has a client id?)


def plan_parts(topic: str, q: int, items: list[Item], base: int,
               extra: Callable[[Item], tuple[int, int]] | None = None) -> list[tuple[Append, list[tuple[int, int]]]]:
    """Cut a queue's messages into writes within DynamoDB's limits: segments of at most
    ``SEGMENT_DATA_LIMIT`` raw bytes (one item each, < 400 KB: every message's stored form is bounded by
    ``claims.INLINE_BYTES``; a bigger body is in the lake bucket, its header
    ``validation.MAX_META_BYTES``), and per write at most ``TRANSACT_ITEMS`` items counting the
    queue item's head move, the segments and one dedup item per client id, and at most
    ``TRANSACT_BYTES`` by item-size upper bounds (issue 8, defect 3: 100 ids into one queue used to
    be a 101-item transaction). Returns, per write in log order, the Append and the
    (request index, offset) of its messages. ``extra(item)``: (items, bytes) more that the item
    costs in its write (a promotion deletes each message's delayed item in the same transaction).

    >>> m = seg.Message(id="a", body="x", key=None, tags=[], properties={}, produced_at=0)
    >>> [(len(a.segments), a.dedup, placed) for a, placed in plan_parts("t", 0, [(0, m, True)], 7)]
    [(1, [('a', 7)], [(0, 7)])]
    """
    pq_ = pq(topic, q)
    parts: list[tuple[Append, list[tuple[int, int]]]] = []
    # the messages of one write: (request index, message, client id?), cut greedily
    writes: list[list[Item]] = []
    n_items = n_bytes = seg_bytes = 0
    for it in items:
        _, m, cid = it
        size = m.encoded_size()
        new_segment = not writes or seg_bytes + size > seg.SEGMENT_DATA_LIMIT
        x_items, x_bytes = extra(it) if extra is not None else (0, 0)
        add_items = (1 if new_segment else 0) + (1 if cid else 0) + x_items
        add_bytes = size + (segment_item_bytes(pq_, EMPTY_SEGMENT) if new_segment else 0) \
            + (dedup_item_bytes(topic, m.id) if cid else 0) + x_bytes
        if not writes or n_items + add_items > TRANSACT_ITEMS or n_bytes + add_bytes > TRANSACT_BYTES:
            writes.append([])
            n_items, n_bytes, seg_bytes, new_segment = 1, QUEUE_ITEM_BYTES, 0, True  # 1: the head move
            add_items = 1 + (1 if cid else 0) + x_items
            add_bytes = size + segment_item_bytes(pq_, EMPTY_SEGMENT) + (dedup_item_bytes(topic, m.id) if cid else 0) \
                + x_bytes
        writes[-1].append(it)
        n_items += add_items
        n_bytes += add_bytes
        seg_bytes = size if new_segment else seg_bytes + size
    offset = base
    for w in writes:
        part = Append([], [])
        placed: list[tuple[int, int]] = []
        for run in _runs(w):
            s = seg.encode([m for _, m, _ in run], offset)
            part.segments.append(s)
            part.dedup.extend((m.id, offset + k) for k, (_, m, cid) in enumerate(run) if cid)
            placed.extend((i, offset + k) for k, (i, _, _) in enumerate(run))
            offset = s.end
        parts.append((part, placed))
    return parts


def _runs(w: list[Item]):
    """The segments of one write: the same greedy cut as in :func:`plan_parts`."""
    pos = 0
    for run in seg.split([m for _, m, _ in w]):
        yield w[pos:pos + len(run)]
        pos += len(run)
