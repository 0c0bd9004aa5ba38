"""The ``{"group": g}`` target's pure rules (issue 18.1; no AWS): a manifest row → the hidden list's
entry, and which copies of a chunk sent again are already in the list.

A list entry is the source message as the lake selected it — its ``id``, ``key``, ``tags``,
``properties``, ``produced_at``, body or claim — plus where it was published (``topic``, ``queue``,
``offset``): a pull of the group shows it as the message it re-delivers (same id and coordinates).
A claim-checked body stays in the lake bucket: the entry carries the claim (a pull fetches it as
for any claimed message), the copier never reads the object.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from lakeq.log.fanout_plan import ListMessage
from lakeq.replay.copier import Copy


def _json(v: Any, empty: Any) -> Any:
    """A manifest column that holds JSON text (``properties``, ``claim``) or the value itself."""
    if v is None or v == "":
        return empty
    return json.loads(v) if isinstance(v, str) else v


def position(c: Copy) -> int:
    """The copy's 0-based position in the manifest order (the copier's ``row["pos"]``)."""
    return int(c.row["pos"])


def entry(c: Copy, topic: str) -> ListMessage:
    """The hidden list's entry for copy ``c`` of a message of ``topic``.

    >>> e = entry(Copy("rp-1-7-x", {"pos": 3, "queue": 1, "offset": 7, "id": "m7", "key": "k", "tags": ["a"],
    ...                             "properties": '{"px":1}', "produced_at": 5, "body": "hi", "claim": None}), "q/s")
    >>> (e.id, e.topic, e.queue, e.source_offset, e.key, e.tags, e.properties, e.body, e.claim)
    ('m7', 'q/s', 1, 7, 'k', ['a'], {'px': 1}, 'hi', None)
    >>> entry(Copy("x", {"pos": 0, "queue": 0, "offset": 0, "id": "b", "body": "",
    ...                  "claim": '{"key":"k","size":9,"sha256":"00"}'}), "t").claim["size"]
    9
    """
    r = c.row
    claim = _json(r.get("claim"), None)
    props = _json(r.get("properties"), {})
    return ListMessage(id=str(r.get("id") or c.id), body="" if claim else str(r.get("body") or ""),
                       key=r.get("key"), tags=list(r.get("tags") or []),
                       properties=props if isinstance(props, dict) else {},
                       produced_at=int(r.get("produced_at") or 0), topic=topic, queue=int(r["queue"]),
                       source_offset=int(r["offset"]), claim=claim)


def fresh(copies: Sequence[Copy], rpos: int) -> list[Copy]:
    """The copies not in the list yet: those at or past ``rpos`` (the position after the last copy
    appended). The copier sends copies in manifest order, so everything below ``rpos`` is in.

    >>> [position(c) for c in fresh([Copy("a", {"pos": 4}), Copy("b", {"pos": 6}), Copy("c", {"pos": 7})], 6)]
    [6, 7]
    """
    return [c for c in copies if position(c) >= rpos]
