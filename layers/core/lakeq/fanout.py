"""Fan-out (SPEC §3 delivery): new topic segments from SegmentsTable's stream → subscription lists.

Per Lambda batch (records in order per shard, i.e. per source queue):

1. :meth:`Matcher.refresh` reads the subscriptions' version counter (one consistent GetItem) and,
   when it moved, rebuilds the cached :class:`~matcher.SubscriptionIndex` from a consistent Scan.
   A subscription whose create returned before a message was produced is therefore always in the
   index when that message's record is handled (the record is read after the create committed).
2. Every ``INSERT`` of a topic segment (``pq`` not starting with ``~``: list segments never fan out
   again) is decoded; each message is matched, and kept for a subscription when
   ``produced_at > created_at`` of that subscription.
3. Per subscription, the kept messages are appended to its list in record order with
   :meth:`LogRepo.append`: one transaction = list queue item CAS + list segment(s) + one dedup item
   per *source segment* (``<topic>@<queue>:<base>`` under topic ``~<id>``). A redelivered record
   finds its dedup item, that source segment is dropped and the rest retried: nothing is added
   twice, and a source segment's matches land atomically.
4. A failure is reported as ``batchItemFailures`` at the earliest record whose work is not done;
   Lambda retries from there and the dedup items make the repeat harmless.
"""
from __future__ import annotations

import base64
import json
import logging
import random
import time
from dataclasses import dataclass, field

from matcher.index import SubscriptionIndex

from . import segments as seg
from .repos import Append, LogRepo, TransactionFailed
from .subscriptions import SubscriptionRepo, list_topic

log = logging.getLogger("lakeq.fanout")

CONDITION_FAILED = "ConditionalCheckFailed"
APPEND_ATTEMPTS = 40
CHUNK_GROUPS = 40  # source segments per transaction: 1 + segments + groups <= 100 items
CHUNK_BYTES = 1_500_000  # raw message bytes per transaction (DynamoDB: 4 MB per transaction)


@dataclass
class ListMessage(seg.Message):
    """A list entry: the source message plus where it was published."""

    topic: str = ""
    queue: int = 0
    source_offset: int = 0

    def header(self) -> bytes:
        return json.dumps(
            {"id": self.id, "key": self.key, "tags": self.tags, "properties": self.properties,
             "produced_at": self.produced_at, "topic": self.topic, "queue": self.queue,
             "source_offset": self.source_offset},
            separators=(",", ":"), ensure_ascii=False,
        ).encode("utf-8")


@dataclass
class Group:
    """The messages of one source segment kept for one subscription."""

    key: str  # dedup id: <topic>@<queue>:<segment base>
    record: int  # index of the stream record in the batch
    messages: list[ListMessage] = field(default_factory=list)


class Matcher:
    """The per-container index cache: rebuilt when the subscriptions' version moves."""

    def __init__(self) -> None:
        self.version: int | None = None
        self.index = SubscriptionIndex()
        self.created: dict[str, int] = {}
        self.rebuild_ms = 0.0

    def refresh(self) -> bool:
        ver = SubscriptionRepo.version()
        if ver == self.version:
            return False
        t0 = time.perf_counter()
        self.load(SubscriptionRepo.all())
        self.version = ver  # read before the scan: a change during the scan rebuilds again next time
        self.rebuild_ms = (time.perf_counter() - t0) * 1000
        log.info("subscription index rebuilt: version %s, %d subscriptions, %.1f ms",
                 ver, len(self.index), self.rebuild_ms)
        return True

    def load(self, subs) -> None:
        idx = SubscriptionIndex()
        created: dict[str, int] = {}
        for s in subs:
            try:
                idx.add(s.id, s.topic, json.loads(s.conditions or "[]"), list(s.tags or []))
            except (ValueError, TypeError):
                log.exception("subscription %s not indexable; skipped", s.id)
                continue
            created[s.id] = int(s.created_at)
        self.index, self.created = idx, created

    def match(self, topic: str, msg: dict) -> list[str]:
        produced = msg["produced_at"]
        created = self.created
        return [sid for sid in self.index.match(topic, msg.get("properties") or {}, msg.get("tags") or ())
                if produced > created[sid]]


matcher = Matcher()


def _b(attr: dict) -> bytes:
    v = attr["B"]
    return v if isinstance(v, (bytes, bytearray)) else base64.b64decode(v)


def decode_record(record: dict) -> tuple[str, int, seg.Segment] | None:
    """A stream record → (source topic, queue, segment), or None when it is not a new topic segment."""
    if record.get("eventName") != "INSERT":
        return None
    img = (record.get("dynamodb") or {}).get("NewImage") or {}
    pq = img.get("pq", {}).get("S")
    if not pq or pq.startswith("~"):
        return None
    topic, _, q = pq.rpartition("#")
    z = img.get("z", {}).get("BOOL", False)
    s = seg.Segment(int(img["base"]["N"]), int(img["count"]["N"]), _b(img["idx"]), _b(img["data"]), bool(z))
    return topic, int(q), s


def plan(records: list[dict], m: Matcher) -> dict[str, list[Group]]:
    """Match every message of the batch; per subscription, its groups in record order."""
    pending: dict[str, list[Group]] = {}
    for i, r in enumerate(records):
        decoded = decode_record(r)
        if decoded is None:
            continue
        topic, q, s = decoded
        per_sub: dict[str, Group] = {}
        for msg in seg.all_headers(s):
            sids = m.match(topic, msg)
            if not sids:
                continue
            lm = ListMessage(id=msg["id"], body=msg["body"], key=msg.get("key"), tags=msg.get("tags") or [],
                             properties=msg.get("properties") or {}, produced_at=msg["produced_at"],
                             topic=topic, queue=q, source_offset=msg["offset"])
            for sid in sids:
                g = per_sub.get(sid)
                if g is None:
                    g = per_sub[sid] = Group(f"{topic}@{q}:{s.base}", i)
                g.messages.append(lm)
        for sid, g in per_sub.items():
            pending.setdefault(sid, []).append(g)
    return pending


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


def append_groups(sub_id: str, groups: list[Group], now: int) -> int:
    """Append ``groups`` to the subscription's list in order, idempotently. Returns the messages
    actually added (0 for groups already there, or when the subscription was deleted)."""
    lt = list_topic(sub_id)
    added = 0
    attempt = 0
    while groups:
        base = _head(lt, attempt > 0)
        if base is None:  # unsubscribed: the list is gone
            return added
        chunk = _chunk(groups)
        msgs = [x for g in chunk for x in g.messages]
        segments = []
        offset = base
        for run in seg.split(msgs):
            segments.append(seg.encode(run, offset))
            offset += len(run)
        dedup = []
        offset = base
        for g in chunk:
            dedup.append((g.key, offset))
            offset += len(g.messages)
        try:
            LogRepo.append(lt, 0, base, Append(segments, dedup), now)
        except TransactionFailed as e:
            attempt += 1
            if attempt >= APPEND_ATTEMPTS:
                raise
            # reasons: one per item — the segments (after the queue item, in logs that CAS it), then dedup
            first = len(e.reasons) - len(dedup)
            dup = {dedup[k][0] for k in range(len(dedup))
                   if first + k < len(e.reasons) and e.reasons[first + k] == CONDITION_FAILED}
            if dup:
                groups = [g for g in groups if g.key not in dup]
            else:
                time.sleep(random.uniform(0, min(0.05, 0.002 * 2 ** min(attempt, 6))))
            continue
        added += len(msgs)
        groups = groups[len(chunk):]
        attempt = 0
    if added and LogRepo.queue(lt, 0) is None:
        # Unsubscribed while we appended: the delete's purge may have run before our put. Purge
        # again; any put that came later than this read saw no head and wrote nothing.
        SubscriptionRepo.purge_list(sub_id)
        return 0
    return added


def _head(lt: str, fresh: bool) -> int | None:
    """The list's next offset (None when the list does not exist)."""
    head = getattr(LogRepo, "head", None)
    if head is not None:
        return head(lt, 0, fresh=fresh)
    meta = LogRepo.queue(lt, 0)
    return None if meta is None else int(meta.max_offset)


def handle(event: dict, now: int, m: Matcher | None = None) -> dict:
    """The handler's logic; returns ``{"batchItemFailures": [...]}`` (empty when all done)."""
    m = m or matcher
    records = event.get("Records") or []
    try:
        m.refresh()
        pending = plan(records, m)
    except Exception:
        log.exception("fan-out planning failed; the whole batch is retried")
        return {"batchItemFailures": [{"itemIdentifier": records[0]["dynamodb"]["SequenceNumber"]}]
                if records else []}
    failed_at: int | None = None
    for sid, groups in pending.items():
        try:
            append_groups(sid, groups, now)
        except Exception:
            log.exception("appending to subscription %s failed", sid)
            first = groups[0].record
            failed_at = first if failed_at is None else min(failed_at, first)
    if failed_at is None:
        return {"batchItemFailures": []}
    return {"batchItemFailures": [{"itemIdentifier": records[failed_at]["dynamodb"]["SequenceNumber"]}]}
