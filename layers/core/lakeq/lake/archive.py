"""The data lake's raw log layout (SPEC §5): DynamoDB-stream records → rows → gzipped JSON Lines
objects. Pure (the archiver writes them with :func:`lakeq.store.lake.put_objects`), so the archiver,
the jobs, the tests and the benchmark share one definition of the layout.

Layout (Hive-partitioned, one object per stream batch and partition, never one per message)::

    raw/kind=<messages|bodies|offsets|members>/dt=YYYY-MM-DD/hour=HH/<shard>-<first seq>-<last seq>.jsonl.gz

* ``<shard>``: Lambda's DynamoDB event carries no shard id, but one invocation's batch comes from one
  shard of one stream, and sequence numbers are unique within a stream; ``<shard>`` is the table's
  kind plus a short hash of the stream ARN, so ``(shard, first, last)`` names the batch. A batch
  that is redelivered (a retry after an error) gets the same keys and the same bytes (gzip ``mtime``
  0, rows in stream order) and so overwrites its object instead of adding one.
* every row carries ``seq`` (the record's stream sequence number): the jobs drop duplicate rows
  by it (messages by ``topic, queue, offset``), which also covers a batch redelivered with other
  boundaries.
* the partition (``dt``, ``hour``, UTC) is the row's own event time: ``produced_at`` for messages,
  ``at`` for offsets and members. A batch spanning an hour boundary becomes one object per hour.

Row schemas (JSON, times epoch ms) — ``kind=messages``: ``topic, inc, queue, offset, id, key, size``
(body bytes), ``tags, properties, produced_at, seq`` (no body) and, on a dead-lettered copy
only, ``dead_letter`` (``topic, queue, offset, id, group, deliveries, reason, at``: its origin and
cause, since 2026-12-07); ``kind=bodies`` (issue 18.1, replay): ``topic, inc, queue, offset, id,
key, tags, properties, body, seq, produced_at`` — the same messages' bodies with their metadata
(since 2026-11-28: a replay reads this kind alone), in a parallel dataset partitioned by the
same ``produced_at`` hour and named by the same batch (``bodies-<hash>-…``), so the metadata jobs
never read a body and the replay job reads the bodies of the hours it replays only;
``kind=offsets``: ``group, client_id, subscription, topic, inc, queue, committed_offset, prev_committed_offset, lock_ts,
lock_until, last_consumed_at, event`` (``INSERT``/``MODIFY``/``REMOVE``), ``change``
(``commit``/``lock``/``reset``/``other``), ``at, seq``, and what the write did to the messages
(:func:`settlement_of`, the delivery ledger): ``settled`` (``[{lo, hi, outcome, reason, deliveries}]``),
``delivered`` (the offsets a new lock delivered), ``start_offset`` (the record's first position, on
its ``INSERT``); rows archived before 2026-12-07 have none of the three; ``kind=members``: ``group, generation,
member_id, change`` (``joined``/``left``/``changed``), ``state, topics, assignment``
(``["topic#queue", …]``), ``at, seq``.

``inc`` is the topic's incarnation (``lakeq.common.names.split_log``: 0 for a topic never deleted, n
for the n-th made again after an SQS ``DeleteQueue``): a re-created topic starts its offsets at 0
again, so a message is ``(topic, inc, queue, offset)``. Rows written before ``inc`` existed have
none; the jobs read a missing ``inc`` as 0.
"""
from __future__ import annotations

import base64
import datetime as dt
import gzip
import hashlib
import io
import json
from collections.abc import Iterable, Mapping
from typing import Any

from lakeq.common.names import QUEUE_SEP, is_list, queue_key, split_log, split_queue_key
from lakeq.log import segments as seg

RAW = "raw"
KINDS = ("messages", "bodies", "offsets", "members")


# ------------------------------------------------------------------------------ stream attributes
def attr(v: Mapping[str, Any]) -> Any:
    """A DynamoDB AttributeValue in Lambda's JSON form (binary = base64 text) → Python."""
    (t, x), = v.items()
    if t == "S":
        return x
    if t == "N":
        return int(x) if x.lstrip("-").isdigit() else float(x)
    if t == "B":
        return base64.b64decode(x) if isinstance(x, str) else bytes(x)
    if t == "BOOL":
        return bool(x)
    if t == "NULL":
        return None
    if t == "M":
        return {k: attr(y) for k, y in x.items()}
    if t == "L":
        return [attr(y) for y in x]
    if t == "SS":
        return list(x)
    if t == "NS":
        return [int(n) if n.lstrip("-").isdigit() else float(n) for n in x]
    if t == "BS":
        return [base64.b64decode(b) for b in x]
    raise ValueError(f"unknown attribute type {t}")


def image(record: Mapping[str, Any], which: str) -> dict | None:
    img = (record.get("dynamodb") or {}).get(which)
    return None if img is None else {k: attr(v) for k, v in img.items()}


def seq_of(record: Mapping[str, Any]) -> str:
    return str((record.get("dynamodb") or {}).get("SequenceNumber", ""))


def approx_ms(record: Mapping[str, Any]) -> int:
    t = (record.get("dynamodb") or {}).get("ApproximateCreationDateTime") or 0
    return int(float(t) * 1000)


def table_of(stream_arn: str) -> str:
    """``arn:aws:dynamodb:r:a:table/<name>/stream/<label>`` → ``<name>``."""
    part = stream_arn.split(":table/", 1)[-1]
    return part.split("/stream/", 1)[0]


# ------------------------------------------------------------------------------ rows per kind
def message_rows(record: Mapping[str, Any]) -> list[dict]:
    """A segment item (INSERT, NEW_IMAGE) → one row per message, without bodies."""
    return message_and_body_rows(record)[0]


def body_row(row: Mapping[str, Any], body: str, claim: Mapping[str, Any] | None = None) -> dict:
    """The ``kind=bodies`` row of a message row: its key, its metadata (``id, key, tags,
    properties``: a replay then reads this kind alone, without joining the messages — rows archived
    before 2026-11-28 have none), its body as the segment holds it and the record's ``seq``. A body
    kept in the lake bucket by the claim check (issue 18.2) is an empty ``body`` and its ``claim``
    (``key``, ``size``, ``sha256``: where the replay's copier finds it, or what a copy names); other
    rows have no ``claim``.

    >>> r = {"topic": "t", "queue": 0, "offset": 3, "seq": "9", "produced_at": 1}
    >>> body_row(r, "", {"key": "bodies/a/b", "size": 5, "sha256": "x"})["claim"]["key"]
    'bodies/a/b'
    >>> "claim" in body_row(r, "hi")
    False
    """
    out = {"topic": row["topic"], "inc": int(row.get("inc") or 0), "queue": row["queue"], "offset": row["offset"],
           "id": row.get("id"), "key": row.get("key"), "tags": row.get("tags") or [],
           "properties": row.get("properties") or {},
           "body": body, "seq": row["seq"], "produced_at": row["produced_at"]}
    if claim is not None:
        out["claim"] = dict(claim)
    return out


def message_and_body_rows(record: Mapping[str, Any]) -> tuple[list[dict], list[dict]]:
    """A segment item → its message rows and its body rows (one decode of the segment)."""
    if record.get("eventName") == "REMOVE":
        return [], []  # TTL expiry of a segment: the lake keeps what was produced
    item = image(record, "NewImage")
    if not item or "pq" not in item or QUEUE_SEP not in str(item["pq"]):
        return [], []
    log, q = split_queue_key(str(item["pq"]))
    if not q.isdigit() or is_list(log):
        return [], []  # a subscription's list (``~<id>#0``) holds copies, not produced messages
    topic, inc = split_log(log)  # (a topic made again after a deletion: its log name is ``<topic>!<inc>``)
    s = seg.Segment(int(item["base"]), int(item["count"]), bytes(item["idx"]), bytes(item["data"]),
                    bool(item.get("z", False)))
    sq = seq_of(record)
    rows, bodies = [], []
    for m in seg.all_headers(s):
        rows.append({
            "topic": topic, "inc": inc, "queue": int(q), "offset": m["offset"], "id": m.get("id"),
            "key": m.get("key"), "size": _body_size(m), "tags": m.get("tags") or [],
            "properties": m.get("properties") or {},
            "produced_at": int(m.get("produced_at") or item.get("produced_at") or 0),
            "seq": sq,
        })
        if isinstance(m.get("dead_letter"), dict):  # a dead-lettered copy: its origin and cause
            rows[-1]["dead_letter"] = _dead_letter(m["dead_letter"])
        bodies.append(body_row(rows[-1], m["body"], m.get("claim")))
    return rows, bodies


DEAD_LETTER_FIELDS = ("topic", "queue", "offset", "id", "group", "deliveries", "reason", "at")


def _dead_letter(d: Mapping[str, Any]) -> dict:
    """A dead-lettered copy's ``dead_letter`` header (:func:`lakeq.consume.settle.dead_letter_copy`)
    as its row's ``dead_letter``: where it came from (``topic, queue, offset, id``), whose consumer
    (``group``), why (``reason``: ``rejected`` or ``max_deliveries``), after how many
    ``deliveries``, and when (``at``).

    >>> _dead_letter({"topic": "t", "queue": 1, "offset": 5, "reason": "rejected", "extra": 1})["offset"]
    5
    """
    return {k: d.get(k) for k in DEAD_LETTER_FIELDS}


def _body_size(m: dict) -> int:
    """A message's body bytes: its claim's ``size`` when the body is in the lake bucket (issue 18.2;
    the segment then holds an empty body), else the UTF-8 body's.

    >>> _body_size({"body": "é"}), _body_size({"body": "", "claim": {"size": 1048576}})
    (2, 1048576)
    """
    claim = m.get("claim")
    return int(claim["size"]) if isinstance(claim, dict) else len(m["body"].encode("utf-8"))


def parse_owner(owner: str) -> dict:
    """``g|group|log``, ``b|group|client_id|log`` or ``s|sub_id`` → fields (``topic`` and ``inc``, the
    incarnation, from the log name).

    >>> parse_owner("g|billing|jobs!2")["topic"], parse_owner("g|billing|jobs!2")["inc"]
    ('jobs', 2)
    >>> parse_owner("b|fan|c1|jobs")["inc"], parse_owner("s|s1")["inc"]
    (0, None)
    """
    parts = owner.split("|")
    if parts[0] == "g" and len(parts) >= 3:
        topic, inc = split_log("|".join(parts[2:]))
        return {"group": parts[1], "client_id": None, "subscription": None, "topic": topic, "inc": inc}
    if parts[0] == "b" and len(parts) >= 4:
        topic, inc = split_log("|".join(parts[3:]))
        return {"group": parts[1], "client_id": parts[2], "subscription": None, "topic": topic, "inc": inc}
    if parts[0] == "s" and len(parts) >= 2:
        return {"group": None, "client_id": None, "subscription": "|".join(parts[1:]), "topic": None, "inc": None}
    return {"group": None, "client_id": None, "subscription": None, "topic": None, "inc": None}


def _num(d: Mapping | None, k: str) -> int | None:
    if not d or d.get(k) is None:
        return None
    return int(d[k])


def offset_rows(record: Mapping[str, Any]) -> list[dict]:
    """An offset record change (NEW_AND_OLD_IMAGES) → one row: the state after the change."""
    new, old = image(record, "NewImage"), image(record, "OldImage")
    cur = new or old
    if not cur or "owner" not in cur:
        return []
    who = parse_owner(str(cur["owner"]))
    if who["topic"] is None and cur.get("topic"):
        who["topic"], who["inc"] = split_log(str(cur["topic"]))
    committed, prev = _num(new, "committed_offset"), _num(old, "committed_offset")
    lock_ts, prev_lock = _num(new, "lock_ts"), _num(old, "lock_ts")
    if new is None:
        change = "other"
    elif committed != prev and lock_ts == prev_lock:
        change = "commit"
    elif lock_ts != prev_lock and (new.get("lock_until") or 0) > 0:
        change = "lock"
    elif lock_ts != prev_lock:
        change = "reset"
    else:
        change = "commit" if committed != prev else "other"
    at = _num(new, "updated_at") or approx_ms(record)
    settled, delivered, start = settlement_of(old, new)
    return [{
        **who, "queue": int(cur["queue"]), "committed_offset": committed, "prev_committed_offset": prev,
        "lock_ts": lock_ts, "lock_until": _num(new, "lock_until"),
        "last_consumed_at": _num(new, "last_consumed_at"), "event": record.get("eventName"),
        "change": change, "at": at, "seq": seq_of(record),
        "settled": settled, "delivered": delivered, "start_offset": start,
    }]


# ------------------------------------------------------------------------------ the delivery ledger's events
ACCEPTED, DEAD_LETTERED, EXPIRED, SKIPPED, REOPENED = "accepted", "dead_lettered", "expired", "skipped", "reopened"


def _state(img: Mapping | None):
    """An offsets record's image → its settlement state (:func:`lakeq.log.settlement.from_record`),
    None without a committed offset."""
    from lakeq.log import settlement as S

    if not img or img.get("committed_offset") is None:
        return None
    return S.from_record(int(img["committed_offset"]), int(img.get("lock_ts") or 0), int(img.get("lock_until") or 0),
                         _num(img, "lock_next"), img.get("settle"), int(img.get("dead_lettered") or 0))


def _runs(spans: list[tuple[int, int]], outcome: str) -> list[dict]:
    """``[lo, hi)`` spans → ``{lo, hi, outcome}`` entries, touching spans joined (in order)."""
    out: list[dict] = []
    for lo, hi in sorted(spans):
        if out and out[-1]["hi"] == lo:
            out[-1]["hi"] = hi
        elif hi > lo:
            out.append({"lo": lo, "hi": hi, "outcome": outcome, "reason": None, "deliveries": None})
    return out


def _gaps(lo: int, hi: int, holes: set[int]) -> list[tuple[int, int]]:
    """``[lo, hi)`` without ``holes``, as spans. O(holes): a reset may skip millions of offsets."""
    out, at = [], lo
    for h in sorted(x for x in holes if lo <= x < hi):
        if h > at:
            out.append((at, h))
        at = h + 1
    if hi > at:
        out.append((at, hi))
    return out


def settlement_of(old: Mapping | None, new: Mapping | None) -> tuple[list[dict], list[int], int | None]:
    """What one write of an offsets record did to its messages (the delivery ledger, issue 32.4),
    from the record's two images (the settlement state of :mod:`lakeq.log.settlement` before and
    after): ``(settled, delivered, start_offset)``.

    * ``settled``: ``{lo, hi, outcome, reason, deliveries}`` — the offsets ``[lo, hi)`` this write
      settled (or reopened), ``outcome``: ``dead_lettered`` (one offset; ``reason`` ``rejected`` or
      ``max_deliveries`` and its ``deliveries``: it left ``due`` and the record's dead-letter count
      grew), ``expired`` (left ``due`` uncounted: below the log's retained offsets; or pending ones
      a new lock's pull dropped below the log's first offset — unless the write folded a
      piggybacked ack of the previous lock, a new ``acks`` entry: those are accepted; or pending
      ones that left in any other write that was not a settle of their lock's batch: a pull that
      only moved the frontier past the log's first offset),
      ``skipped`` (passed over by a reset of the committed offset), ``reopened`` (settled before,
      unsettled again by a reset back),
      ``accepted`` (every other offset that became settled: acknowledged, or passed over by the
      consumer's tag filter — it then has no delivery);
    * ``delivered``: the offsets a new lock delivered (its batch), ``[]`` otherwise;
    * ``start_offset``: the record's first position when this write made it (``INSERT``), else None
      (offsets a first pull passed over without a delivery, filtered out, are before it).

    >>> from lakeq.log import settlement as S
    >>> img = lambda s: {"committed_offset": s.committed, "lock_ts": s.lock_ts, "lock_until": s.lock_until,
    ...                  "lock_next": s.lock_next, "settle": S.to_settle(s), "dead_lettered": s.dead_lettered}
    >>> a = S.lock(S.State(4), 7, 100, [], [4, 5, 6], 8)            # offset 7 skipped by a filter
    >>> settlement_of(None, img(a))[1:], [(r["lo"], r["hi"]) for r in settlement_of(None, img(a))[0]]
    (([4, 5, 6], 4), [(7, 8)])
    >>> b = S.settle(a, 7, 4, 8, accept=[4], reject=[6]).state
    >>> settlement_of(img(a), img(b))[0][0]["lo"], settlement_of(img(a), img(b))[1]
    (4, [])
    >>> c = S.dead_lettered(b, [6])
    >>> settlement_of(img(b), img(c))[0]
    [{'lo': 6, 'hi': 7, 'outcome': 'dead_lettered', 'reason': 'rejected', 'deliveries': 1}]
    """
    from lakeq.log import settlement as S

    n = _state(new)
    if n is None:
        return [], [], None
    o = _state(old)
    start = None
    if o is None:  # the record's first write: nothing before its first position was the consumer's
        start = min([n.lock_from, n.committed, *n.batch])  # (a first pull's filtered offsets before it: unseen)
        o = S.State(start)
    lock_moved = n.lock_ts != o.lock_ts
    # a reset (OffsetRepo.reset) moves the lock on and leaves nothing pending; an expired lock
    # ended by a pull's upkeep moves it on too, but its messages stay pending or due
    reset = lock_moved and n.lock_until == 0 and not n.pend and not n.due
    delivered = sorted(n.batch) if lock_moved and n.lock_until > 0 and n.held else []
    before, after = set(o.pend) | set(o.due), set(n.pend) | set(n.due)
    fresh = _gaps(o.frontier, n.frontier, after)  # (pending and due offsets are all below the frontier)
    singles = sorted(x for x in before if x not in after and x < n.frontier)
    if reset:  # everything it passed over, due ones too (their copies were never written)
        out = _runs([(x, x + 1) for x in singles] + fresh, SKIPPED)
        out += _runs(_gaps(n.frontier, o.frontier, before), REOPENED)
        out.sort(key=lambda r: (r["lo"], r["outcome"]))
        return out, delivered, start
    left_due = [x for x in singles if x in o.due]
    was_pending = [(x, x + 1) for x in singles if x not in o.due]
    counted = max(0, n.dead_lettered - o.dead_lettered)
    gone = left_due[:max(0, len(left_due) - counted)]  # gone ones are below the log's first offset: the lowest
    out = _runs([(x, x + 1) for x in gone], EXPIRED)
    for x in left_due[len(gone):]:
        reason, times = o.due[x]
        out.append({"lo": x, "hi": x + 1, "outcome": DEAD_LETTERED, "reason": reason, "deliveries": int(times)})
    if lock_moved and n.lock_until > 0:
        # a new lock's pull: pending offsets it settled were the previous lock's, acknowledged by a
        # piggybacked ack folded into this write (lakeq.consume.reader.fold: a new entry in
        # ``acks``), else dropped below the log's first offset (retention)
        folded = bool(set(new.get("acks") or ()) - set((old or {}).get("acks") or ()))
        acked = [sp for sp in was_pending if folded and sp[0] in o.held]
    else:
        # a settle accepts only offsets of its lock's batch and never moves the frontier; a pending
        # offset that leaves otherwise (a pull that only moves the frontier: settlement.advance of a
        # state floored at the log's first offset) was dropped below it by retention, unacknowledged
        moved = n.frontier != o.frontier
        acked = [sp for sp in was_pending if not moved and sp[0] in o.batch]
    kept = set(acked)
    out += (_runs(acked + fresh, ACCEPTED) + _runs([sp for sp in was_pending if sp not in kept], EXPIRED))
    out.sort(key=lambda r: (r["lo"], r["outcome"]))
    return out, delivered, start


def _group_state(img: Mapping | None) -> dict | None:
    """The group header's state as ``GroupState.to_dict``: the compact form of
    :mod:`lakeq.rebalance.codec` (``state`` JSON text or ``state_z`` zlib bytes), or a version-1 JSON
    state, whatever the attribute is called."""
    if not img:
        return None
    if img.get("state_z") or (isinstance(img.get("state"), str) and img["state"].startswith('{"')
                              and '"v":2' in img["state"]):
        from lakeq.rebalance.codec import legacy_dict
        return legacy_dict(img.get("state"), img.get("state_z"))
    for v in img.values():
        if isinstance(v, str) and v.startswith("{") and '"members"' in v:
            try:
                d = json.loads(v)
            except ValueError:
                continue
            if isinstance(d, dict) and "members" in d:
                return d
    if "members" in img and isinstance(img["members"], list):
        return dict(img)
    return None


def _wire_queues(d: Mapping | None) -> list[str]:
    return sorted(queue_key(t, int(i)) for t, ids in (d or {}).items() for i in ids)


def member_rows(record: Mapping[str, Any]) -> list[dict]:
    """A group item change → one row per member that joined, left, or changed state/assignment."""
    new, old = _group_state(image(record, "NewImage")), _group_state(image(record, "OldImage"))
    cur = new or old
    if cur is None:
        return []
    at = 0
    for img in (image(record, "NewImage"), image(record, "OldImage")):
        if img and isinstance(img.get("updated_at"), int):
            at = img["updated_at"]
            break
    at = at or approx_ms(record) or int(cur.get("last_rebalance_at") or 0)
    before = {m["member_id"]: m for m in (old or {}).get("members", [])}
    after = {m["member_id"]: m for m in (new or {}).get("members", [])}
    rows = []
    for mid in sorted(set(before) | set(after)):
        b, a = before.get(mid), after.get(mid)
        m = a or b
        if b is None:
            change = "joined"
        elif a is None:
            change = "left"
        elif (b.get("state"), b.get("target"), b.get("topics")) != (a.get("state"), a.get("target"), a.get("topics")):
            change = "changed"
        else:
            continue
        rows.append({
            "group": cur.get("group"), "generation": int((new or old or {}).get("generation") or 0),
            "member_id": mid, "change": change, "state": None if a is None else a.get("state"),
            "topics": list(m.get("topics") or []), "assignment": [] if a is None else _wire_queues(a.get("target")),
            "at": at, "seq": seq_of(record),
        })
    return rows


# ------------------------------------------------------------------------------ objects
def shard_label(kind: str, stream_arn: str) -> str:
    return f"{kind}-{hashlib.sha1(stream_arn.encode('utf-8')).hexdigest()[:12]}"


def partition(ms: int) -> tuple[str, str]:
    t = dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc)
    return t.strftime("%Y-%m-%d"), t.strftime("%H")


def object_key(kind: str, day: str, hour: str, shard: str, first_seq: str, last_seq: str) -> str:
    return f"{RAW}/kind={kind}/dt={day}/hour={hour}/{shard}-{first_seq}-{last_seq}.jsonl.gz"


def encode_rows(rows: Iterable[Mapping[str, Any]]) -> bytes:
    """JSON Lines, gzip level 6, ``mtime=0``: the same rows always give the same bytes."""
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", compresslevel=6, mtime=0) as gz:
        for r in rows:
            gz.write(json.dumps(r, separators=(",", ":"), ensure_ascii=False, sort_keys=True).encode("utf-8"))
            gz.write(b"\n")
    return buf.getvalue()


def decode_rows(blob: bytes) -> list[dict]:
    return [json.loads(line) for line in gzip.decompress(blob).splitlines() if line.strip()]


def time_of(kind: str, row: Mapping[str, Any]) -> int:
    return int(row["produced_at"] if kind in ("messages", "bodies") else row["at"])


def objects(kind: str, stream_arn: str, rows: list[dict]) -> dict[str, bytes]:
    """Rows of one stream batch (in stream order) → ``{key: gzipped JSONL}``, one per partition.
    O(rows)."""
    shard = shard_label(kind, stream_arn)
    parts: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        parts.setdefault(partition(time_of(kind, r)), []).append(r)
    out = {}
    for (day, hour), rs in sorted(parts.items()):
        out[object_key(kind, day, hour, shard, rs[0]["seq"], rs[-1]["seq"])] = encode_rows(rs)
    return out


EXTRACT = {"offsets": offset_rows, "members": member_rows}


def record_rows(record: Mapping[str, Any], kinds_by_table: Mapping[str, str]) -> list[tuple[str, str, list[dict]]]:
    """One stream record → ``[(kind, stream ARN, rows)]`` (a segment gives two: ``messages`` and
    ``bodies``), ``[]`` for a table not archived. Raises on a record that cannot be read (a poison
    record: see :func:`split_batch`)."""
    arn = record.get("eventSourceARN") or ""
    kind = kinds_by_table.get(table_of(arn))
    if kind is None:
        return []
    if kind == "messages":
        rows, bodies = message_and_body_rows(record)
        return [("messages", arn, rows), ("bodies", arn, bodies)]
    return [(kind, arn, EXTRACT[kind](record))]


def split_batch(records: list[Mapping[str, Any]], kinds_by_table: Mapping[str, str]
                ) -> tuple[dict[str, bytes], int | None, str]:
    """The objects for the records before the first one that cannot be read, that record's index
    (None when all are fine) and the error. Records after a poison record are not archived in
    this invocation: a shard's rows stay in order, and the retry starts at the poison record."""
    per: list[tuple[str, str, list[dict]]] = []
    bad, error = None, ""
    for i, r in enumerate(records):
        try:
            per.extend(record_rows(r, kinds_by_table))
        except Exception as e:  # noqa: BLE001 - one malformed record must not stop the others
            bad, error = i, f"{type(e).__name__}: {e}"
            break
    return _objects_of(per), bad, error


def batch_objects(records: list[Mapping[str, Any]], kinds_by_table: Mapping[str, str]) -> dict[str, bytes]:
    """A Lambda DynamoDB-stream batch → the objects to put. ``kinds_by_table``: table name → kind.
    Records of unknown tables are ignored."""
    return _objects_of([x for r in records for x in record_rows(r, kinds_by_table)])


def _objects_of(per_record: list[tuple[str, str, list[dict]]]) -> dict[str, bytes]:
    rows: dict[tuple[str, str], list[dict]] = {}
    for kind, arn, rs in per_record:
        rows.setdefault((kind, arn), []).extend(rs)
    out: dict[str, bytes] = {}
    for (kind, arn), rs in rows.items():
        if rs:
            out.update(objects(kind, arn, rs))
    return out

