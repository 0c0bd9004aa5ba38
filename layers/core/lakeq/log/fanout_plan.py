"""Fan-out planning: decode the SegmentsTable stream's records, match their messages, group them
per subscription and source segment, cut the groups into transactions, read park entries. Pure
(no AWS imports): :mod:`lakeq.fanout.worker` runs the plans against the store.
"""
from __future__ import annotations

import base64
import gc
import json
import logging
from collections import namedtuple
from dataclasses import dataclass, field
from itertools import repeat
from typing import Protocol

from lakeq.common.names import is_list, queue_key, split_queue_key, topic_of_log
from lakeq.log import segments as seg

log = logging.getLogger("lakeq.fanout.worker")

CHUNK_GROUPS = 40  # source segments per transaction: 1 + segments + groups <= 100 items
CHUNK_BYTES = 1_500_000  # raw message bytes per transaction (DynamoDB: 4 MB per transaction)
_tuple_new = tuple.__new__


class Matches(Protocol):
    """What the planner needs of the subscription index (:class:`lakeq.fanout.worker.Matcher`)."""

    def match(self, source: str, msg: dict, queue: int = 0) -> list[str]: ...  # source: a log name


@dataclass
class ListMessage(seg.Message):
    """A list entry: the source message plus where it was published."""

    topic: str = ""
    queue: int = 0
    source_offset: int = 0

    def header(self) -> bytes:
        h = {"id": self.id, "key": self.key, "tags": self.tags, "properties": self.properties,
             "produced_at": self.produced_at, "topic": self.topic, "queue": self.queue,
             "source_offset": self.source_offset}
        # a dead-lettered copy keeps its origin (issue 9), a body in the lake bucket its claim
        # (issue 18.2), a traced message its trace header (issue 34)
        h = self.optional(h)
        return json.dumps(h, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


class Group(namedtuple("_Group", "key record messages")):
    """The messages of one source segment kept for one subscription: ``key`` its dedup id
    (``<topic>@<queue>:<segment base>``), ``record`` the index of the stream record in the batch,
    ``messages`` the kept :class:`ListMessage` (a new list when not given).

    A tuple, so the plan can make the thousands of one segment in C (``tuple.__new__`` over
    ``zip``, see :func:`group_messages`); a dataclass's ``__init__`` per subscription and segment
    was ~1/5 of the plan at ~900 matches a message."""

    __slots__ = ()

    def __new__(cls, key: str, record: int, messages: list[ListMessage] | None = None) -> "Group":
        return tuple.__new__(cls, (key, record, [] if messages is None else messages))


def parse_parked(raw: str | None) -> dict[str, dict]:
    if not raw:
        return {}
    try:
        d = json.loads(raw)
    except ValueError:
        return {}
    return d if isinstance(d, dict) else {}


def parked_view(raw: str | None) -> list[dict]:
    """A subscription's park entries as the API shows them (``GET /v1/subscriptions``)."""
    out = []
    for pq, e in sorted(parse_parked(raw).items()):
        log, q = split_queue_key(pq)
        out.append({"topic": topic_of_log(log), "queue": int(q), "from_offset": int(e.get("from", 0)),
                    "reason": str(e.get("reason", "")), "since": int(e.get("since", 0)),
                    "attempts": int(e.get("attempts", 0))})
    return out


def _b(attr: dict) -> bytes:
    v = attr["B"]
    return v if isinstance(v, (bytes, bytearray)) else base64.b64decode(v)


def decode_record(record: dict) -> tuple[str, int, seg.Segment] | None:
    """A stream record → (source log, queue, segment), or None when it is not a new topic segment. The
    log is the topic's log name (lakeq.common.names.log_name: the topic name, or ``<topic>!<incarnation>``
    for a topic created again after a deletion): keys (group keys, park entries) use it, so two
    incarnations never share them; matching and the list's messages use the topic name."""
    if record.get("eventName") != "INSERT":
        return None
    img = (record.get("dynamodb") or {}).get("NewImage") or {}
    pq = img.get("pq", {}).get("S")
    if not pq or is_list(pq):
        return None
    topic, q = split_queue_key(pq)
    z = img.get("z", {}).get("BOOL", False)
    s = seg.Segment(int(img["base"]["N"]), int(img["count"]["N"]), _b(img["idx"]), _b(img["data"]), bool(z))
    return topic, int(q), s


@dataclass
class Plan:
    """What a batch holds: per subscription its groups in record order; per source queue the
    records (index, segment base) it has; where the first poison record is (None: none)."""

    pending: dict[str, list[Group]] = field(default_factory=dict)
    queues: dict[str, list[tuple[int, int]]] = field(default_factory=dict)  # "<topic>#<q>" -> [(i, base)]
    poison: int | None = None
    error: str = ""


def group_messages(topic: str, q: int, s: seg.Segment, m: Matches, record: int,
                   only: str | None = None) -> dict[str, Group]:
    """The messages of one source segment kept per matching subscription (or just ``only``).
    Each (subscription, message) pair is one list append; a subscription's :class:`Group` is made
    once per segment, at the end (at ~900 matches a message, making it on first sight was most of
    the plan's time after the match)."""
    per_sub: dict[str, list[ListMessage]] = {}
    get = per_sub.get
    log, topic = topic, topic_of_log(topic)  # ``topic`` here is the source's log name
    for msg in seg.all_headers(s):
        sids = m.match(log, msg, q)
        if only is not None:
            sids = [x for x in sids if x == only]
        if not sids:
            continue
        lm = ListMessage(id=msg["id"], body=msg["body"], key=msg.get("key"), tags=msg.get("tags") or [],
                         properties=msg.get("properties") or {}, produced_at=msg["produced_at"],
                         topic=topic, queue=q, source_offset=msg["offset"], dead_letter=msg.get("dead_letter"),
                         claim=msg.get("claim"), trace=msg.get("trace"), visible_at=msg.get("visible_at"))
        for sid in sids:  # (faster on 3.11 than draining map(list.append, ...) in C: measured)
            kept = get(sid)
            if kept is None:
                per_sub[sid] = [lm]
            else:
                kept.append(lm)
    key = f"{log}@{q}:{s.base}"
    return dict(zip(per_sub, map(_tuple_new, repeat(Group), zip(repeat(key), repeat(record), per_sub.values()))))


def plan(records: list[dict], m: Matches) -> Plan:
    """Match every message of the batch up to the first record that cannot be decoded or matched.

    The cyclic garbage collector is paused meanwhile: a batch makes a list entry per (subscription,
    message) and a group per (subscription, segment) — ~480,000 objects for 100 segments at 10k
    dense subscriptions — whose allocations triggered collections over the whole heap, the index's
    nodes included: about half of the plan's time (bench/fanout.py --workload heldout: 1,700 ms
    with, 850-940 without, load ~9). What it makes holds no reference cycles; refcounting frees
    it, and collection resumes afterwards."""
    was = gc.isenabled()
    gc.disable()
    try:
        return _plan(records, m)
    finally:
        if was:
            gc.enable()


def _plan(records: list[dict], m: Matches) -> Plan:
    out = Plan()
    for i, r in enumerate(records):
        try:
            decoded = decode_record(r)
            if decoded is None:
                continue
            topic, q, s = decoded
            per_sub = group_messages(topic, q, s, m, i)
        except Exception as e:  # noqa: BLE001 - a malformed record must not stop the others
            log.exception("poison record %s (index %d): not fanned out",
                          (r.get("dynamodb") or {}).get("SequenceNumber"), i)
            out.poison, out.error = i, f"{type(e).__name__}: {e}"
            break
        out.queues.setdefault(queue_key(topic, q), []).append((i, s.base))
        pending = out.pending
        get = pending.get
        for sid, g in per_sub.items():
            gs = get(sid)
            if gs is None:
                pending[sid] = [g]
            else:
                gs.append(g)
    return out


def _chunk(groups: list[Group]) -> list[Group]:
    out: list[Group] = []
    size = 0
    for g in groups:
        gs = sum(x.encoded_size() for x in g.messages)
        if out and (len(out) >= CHUNK_GROUPS or size + gs > CHUNK_BYTES):
            break
        out.append(g)
        size += gs
    return out


def _source_pq(group_key: str) -> str:
    """``<topic>@<queue>:<base>`` → ``<topic>#<queue>``."""
    tq, _, _ = group_key.rpartition(":")
    topic, _, q = tq.rpartition("@")
    return queue_key(topic, q)


def _source_base(group_key: str) -> int:
    return int(group_key.rpartition(":")[2])
