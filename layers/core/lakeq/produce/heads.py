"""The head mover (issue 16 item 3, ``functions/heads``, fed by SegmentsTable's stream): each queue's
``max_offset`` moved to the end of the newest segment a stream batch shows, one conditional
UpdateItem per queue per batch (:meth:`lakeq.store.queue_log.LogRepo.advance_key`: ``max_offset <
end``, so it only moves forward; a batch applied twice or out of order changes nothing).

Producers without ids no longer write the queue item (one PutItem of the segment an append), and
read the head from the newest segment (:meth:`lakeq.store.queue_log.LogRepo.head`); ``max_offset`` is
a hint a stream delay behind, which readers needing the exact head correct from the chain
(docs/design.md, "The producer's head write moved to the stream").
"""
from __future__ import annotations

from typing import Iterable, Mapping

from lakeq.log.head_plan import heads
from lakeq.store.queue_log import LogRepo


def advance(records: Iterable[Mapping]) -> dict:
    """Apply a stream batch: per queue, its head moved forward to the batch's largest segment end.
    Raises the store's errors (the event source mapping retries the batch: safe, see above).
    Returns counts for the log."""
    plan = heads(records)
    moved = 0
    for pq, (end, at) in sorted(plan.items()):
        moved += LogRepo.advance_key(pq, end, at)
    return {"queues": len(plan), "moved": moved}


__all__ = ["advance"]
