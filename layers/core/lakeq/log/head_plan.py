"""Where each queue's head is, from SegmentsTable stream records (issue 16 item 3): the pure rule
of the head mover (:mod:`lakeq.produce.heads`).

An append without message ids is one conditional PutItem of its segment and nothing else; the
queue item's ``max_offset`` is moved afterwards by the stream's consumer, one conditional
UpdateItem per queue per stream batch, to the largest segment end the batch shows for that
queue. Only INSERT records of segments put alone count (``h``: an append whose transaction
moved the head itself, a subscription list's for one, needs no write, and a conditional write
that fails is billed as a write); a segment's TTL expiry is a REMOVE; segments are never
modified. Records in any order, twice, or split over batches give the same heads: the result
is a maximum, and the write only ever moves a head forward. Pure: no AWS imports.

>>> def rec(pq, end, at=5, name="INSERT", h=True):
...     img = {"pq": {"S": pq}, "end": {"N": str(end)}, "produced_at": {"N": str(at)}}
...     return {"eventName": name, "dynamodb": {"NewImage": {**img, **({"h": {"BOOL": True}} if h else {})}}}
>>> heads([rec("t!1#0", 3), rec("t!1#1", 1), rec("t!1#0", 2), rec("t!1#0", 9, name="REMOVE"),
...        rec("t!1#1", 7, h=False)])
{'t!1#0': (3, 5), 't!1#1': (1, 5)}
"""
from __future__ import annotations

from typing import Iterable, Mapping


def heads(records: Iterable[Mapping]) -> dict[str, tuple[int, int]]:
    """``pq`` → (the largest segment end among the INSERT records, the latest ``produced_at``
    among them) for each queue the records touch. A record without a segment's image (keys only,
    or not a segment) is skipped."""
    out: dict[str, tuple[int, int]] = {}
    for r in records:
        if r.get("eventName") != "INSERT":
            continue
        img = (r.get("dynamodb") or {}).get("NewImage") or {}
        if not (img.get("h") or {}).get("BOOL"):
            continue
        try:
            pq = img["pq"]["S"]
            end = int(img["end"]["N"])
        except (KeyError, TypeError, ValueError):
            continue
        at = int((img.get("produced_at") or {}).get("N") or 0)
        old = out.get(pq)
        out[pq] = (end, at) if old is None else (max(old[0], end), max(old[1], at))
    return out
