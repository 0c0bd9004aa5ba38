"""Use cases behind the HTTP routes: authenticate, check, call the pure core and the repositories.

Check order (API.md): 401 → 400 (syntax) → 404 (named things) → 403 (the key may not act) →
state-dependent answers (400/409/413). Handlers parse nothing themselves beyond handing over the
raw body and parameters.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import random
import secrets
import time
import uuid
import zlib
from dataclasses import dataclass
from typing import Callable

from . import segments as seg
from . import validation as v
from .errors import BadRequest, Conflict, Forbidden, NotFound, PayloadTooLarge, Unauthorized, Unavailable
from .models import ClientModel, KeyModel, TopicModel
from .names import check_name, check_topic, covers, parent_of
from .receipts import Receipt, parse as parse_receipt, topic_queue_field
from .repos import Append, ClientRepo, LogRepo, OffsetRepo, TopicRepo, TransactionFailed, TRANSACT_BYTES, TRANSACT_ITEMS
from .repos import QUEUE_ITEM_BYTES, dedup_item_bytes, segment_item_bytes
from .payload import ByteBudget
from .selection import QueueView, candidates, next_lock_ts

CONDITION_FAILED = "ConditionalCheckFailed"
APPEND_ATTEMPTS = 40
SCAN_FACTOR = 10  # a filtered pull examines at most max * SCAN_FACTOR (>= 1000) offsets per queue
POLL_MIN_MS, POLL_MAX_MS = 50, 500


def now_ms() -> int:
    return int(time.time() * 1000)


clock: Callable[[], int] = now_ms


def broker() -> str:
    return os.environ.get("LAKEQ_BROKER") or "lakeq"


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def _admin_hash() -> str | None:
    h = os.environ.get("LAKEQ_ADMIN_KEY_SHA256")
    if h:
        return h.lower()
    raw = os.environ.get("LAKEQ_ADMIN_KEY")
    return hash_key(raw) if raw else None


# --- small per-container caches ---------------------------------------------------------------
# Clients never change once created (their keys do, but the client cache holds no key). A key
# can be revoked: a container trusts a key it has looked up for KEY_CACHE_TTL_S at most, so a
# revoked key answers 401 everywhere within that bound (at once in the container that revoked it,
# and at once on a cold container: the lookup is strongly consistent).
KEY_CACHE_TTL_S = 5.0
KEY_CACHE_MAX = 10_000
MAX_KEYS = 10  # live keys per client (rotation: issue the new one, move clients over, revoke)
monotonic: Callable[[], float] = time.monotonic
_key_cache: dict[str, tuple[str, float]] = {}  # key hash -> (client name, trusted until, monotonic s)
_client_cache: dict[str, ClientModel] = {}


def clear_caches() -> None:
    _key_cache.clear()
    _client_cache.clear()


@dataclass(frozen=True)
class Principal:
    admin: bool
    client: str | None = None

    def may_act_as(self, name: str) -> bool:
        return self.admin or self.client == name


def authenticate(authorization: str | None) -> Principal:
    """401 unless the header carries the admin key or a key issued to a client."""
    if not authorization:
        raise Unauthorized("missing Authorization: Bearer <key> header")
    scheme, _, key = authorization.strip().partition(" ")
    key = key.strip()
    if scheme.lower() != "bearer" or not key:
        raise Unauthorized("Authorization header must be 'Bearer <key>'")
    h = hash_key(key)
    admin = _admin_hash()
    if admin is not None and hmac.compare_digest(h, admin):
        return Principal(admin=True)
    now = monotonic()
    hit = _key_cache.get(h)
    if hit is not None and hit[1] > now:
        return Principal(admin=False, client=hit[0])
    name = ClientRepo.client_for_key(h)
    if name is None:
        _key_cache.pop(h, None)
        raise Unauthorized("unknown API key")
    if len(_key_cache) >= KEY_CACHE_MAX:
        for k in [k for k, (_, until) in _key_cache.items() if until <= now] or list(_key_cache):
            del _key_cache[k]
    _key_cache[h] = (name, now + KEY_CACHE_TTL_S)
    return Principal(admin=False, client=name)


def require_admin(p: Principal) -> None:
    if not p.admin:
        raise Forbidden("this route takes the admin key")


def topic_or_404(name: str) -> TopicModel:
    t = TopicRepo.get(name)
    if t is None:
        raise NotFound(f"topic '{name}' does not exist")
    return t


def client_or_404(name: str, role: str) -> ClientModel:
    c = _client_cache.get(name)
    if c is None:
        c = ClientRepo.get(name)
        if c is not None:
            _client_cache[name] = c
    if c is None or c.role != role:
        what = "consumer group" if role == "consumer" else "producer"
        raise NotFound(f"{what} '{name}' does not exist")
    return c


def authorize(p: Principal, client: ClientModel, topic: str) -> None:
    if not p.may_act_as(client.name):
        raise Forbidden(f"this key may not act for '{client.name}'")
    if not any(covers(g, topic) for g in client.topics):
        raise Forbidden(f"'{client.name}' is not granted topic '{topic}'")


# --- topics and clients ---------------------------------------------------------------------
def topic_view(t: TopicModel) -> dict:
    return {"name": t.name, "queues": int(t.queues), "parent": t.parent}


def create_topic(p: Principal, raw: str | None) -> dict:
    name, queues = v.create_topic(v.json_body(raw))
    require_admin(p)
    parent = parent_of(name)
    if parent is not None and TopicRepo.get(parent) is None:
        raise NotFound(f"parent topic '{parent}' does not exist")
    try:
        TopicRepo.create(name, queues, parent, clock())
    except TransactionFailed as e:
        if e.reasons and e.reasons[0] == CONDITION_FAILED:
            raise Conflict(f"topic '{name}' exists", code="topic_exists") from None
        if len(e.reasons) > 1 and e.reasons[1] == CONDITION_FAILED:
            raise NotFound(f"parent topic '{parent}' does not exist") from None
        raise
    return {"name": name, "queues": queues, "parent": parent}


def list_topics(p: Principal) -> dict:
    require_admin(p)
    return {"topics": [topic_view(t) for t in TopicRepo.all()]}


def grow_topic(p: Principal, name: str, raw: str | None) -> dict:
    """``PATCH /v1/topics/{topic}`` ``{"queues": n}`` (admin): growth only, ``current < n <= 64``.
    One transaction: the topic's count (conditioned on the count read) and the new queue items.
    Consumer groups notice the new count on their next request and rebalance."""
    check_topic(name)
    queues = v.int_field(v.json_body(raw), "queues", v.QUEUES_MIN, v.QUEUES_MAX, required=True)
    t = topic_or_404(name)
    require_admin(p)
    for _ in range(APPEND_ATTEMPTS):
        old = int(t.queues)
        if queues <= old:
            raise BadRequest(f"queues can only grow: topic '{name}' has {old}; ask for {old + 1}-{v.QUEUES_MAX}")
        try:
            TopicRepo.grow(name, old, queues)
            return {"name": name, "queues": queues, "parent": t.parent}
        except TransactionFailed as e:
            if not e.reasons or e.reasons[0] != CONDITION_FAILED:
                raise
        t = topic_or_404(name)  # a concurrent PATCH moved the count: decide again
    raise Unavailable("the topic is too contended; retry")


def client_view(c: ClientModel) -> dict:
    out = {"name": c.name, "role": c.role, "topics": list(c.topics)}
    if c.role == "consumer":
        out["mode"] = c.mode
        out["visibility_timeout_ms"] = int(c.visibility_timeout_ms)
    return out


def create_client(p: Principal, raw: str | None) -> dict:
    req = v.create_client(v.json_body(raw))
    require_admin(p)
    for t in req.topics:
        if TopicRepo.get(t) is None:
            raise NotFound(f"topic '{t}' does not exist")
    key = "lq_" + secrets.token_urlsafe(32)
    client = ClientModel(req.name, role=req.role, topics=req.topics, mode=req.mode,
                         visibility_timeout_ms=req.visibility_timeout_ms, key_hash=hash_key(key), created_at=clock())
    client.key_map = json.dumps({key_id_of(client.key_hash): client.key_hash})
    client.key_version = 1
    try:
        ClientRepo.create(client)
    except TransactionFailed as e:
        if e.reasons and e.reasons[0] == CONDITION_FAILED:
            raise Conflict(f"client '{req.name}' exists", code="client_exists") from None
        raise
    return {**client_view(client), "api_key": key, "key_id": key_id_of(client.key_hash)}


# --- keys: rotation and revocation (admin) ----------------------------------------------------
def key_id_of(key_hash: str) -> str:
    """A key's public id: the first 16 hex digits of its sha-256 (so a client created before
    rotation existed has an id for its key too). Reveals nothing usable about the key."""
    return key_hash[:16]


def _live_keys(c: ClientModel) -> dict[str, str]:
    if c.key_map is None:
        return {key_id_of(c.key_hash): c.key_hash}
    return dict(json.loads(c.key_map))


def _client_for_keys(name: str, p: Principal, key_id: str | None = None) -> ClientModel:
    """400 (name) → 404 (client, key) → 403 (admin only), as API.md orders them."""
    check_name(name, "client name")
    c = ClientRepo.get(name)
    if c is None:
        raise NotFound(f"client '{name}' does not exist")
    if key_id is not None and key_id not in _live_keys(c):
        raise NotFound(f"client '{name}' has no live key '{key_id}'")
    require_admin(p)
    return c


def list_keys(p: Principal, name: str) -> dict:
    """``GET /v1/clients/{name}/keys`` (admin): the ids of the client's live keys."""
    c = _client_for_keys(name, p)
    return {"name": c.name, "keys": [{"key_id": k} for k in sorted(_live_keys(c))]}


def issue_key(p: Principal, name: str) -> dict:
    """``POST /v1/clients/{name}/keys`` (admin) → 201 ``{"name", "key_id", "api_key"}``: one more
    live key (at most MAX_KEYS, else 409 ``too_many_keys``). Stored as its sha-256 only; the key
    is shown only here. One transaction: the client's key set (CAS on ``key_version``) + the key item."""
    c = _client_for_keys(name, p)
    key = "lq_" + secrets.token_urlsafe(32)
    h = hash_key(key)
    for _ in range(APPEND_ATTEMPTS):
        live = _live_keys(c)
        if len(live) >= MAX_KEYS:
            raise Conflict(f"client '{name}' has {len(live)} live keys (at most {MAX_KEYS}); revoke one first",
                           code="too_many_keys")
        live[key_id_of(h)] = h
        version = None if c.key_version is None else int(c.key_version)
        try:
            ClientRepo.set_keys(c, version, json.dumps(live),
                                add=KeyModel(h, client=c.name, key_id=key_id_of(h), created_at=clock()))
            return {"name": c.name, "key_id": key_id_of(h), "api_key": key}
        except TransactionFailed as e:
            if not e.reasons or e.reasons[0] != CONDITION_FAILED:
                raise
        c = ClientRepo.get(name)  # a concurrent rotation moved the key set: decide again
        if c is None:
            raise NotFound(f"client '{name}' does not exist")
    raise Unavailable("the client's keys are too contended; retry")


def revoke_key(p: Principal, name: str, key_id: str) -> None:
    """``DELETE /v1/clients/{name}/keys/{key_id}`` (admin) → 204; unknown or already revoked key
    → 404. The key item goes in the same transaction as the key set, so the next lookup of that
    key (consistent) fails: 401 at once here, within KEY_CACHE_TTL_S in other warm containers."""
    if not (isinstance(key_id, str) and len(key_id) == 16 and all(ch in "0123456789abcdef" for ch in key_id)):
        raise BadRequest("'key_id' must be 16 lowercase hex digits")
    c = _client_for_keys(name, p, key_id)
    for _ in range(APPEND_ATTEMPTS):
        live = _live_keys(c)
        h = live.pop(key_id, None)
        if h is None:
            raise NotFound(f"client '{name}' has no live key '{key_id}'")
        version = None if c.key_version is None else int(c.key_version)
        try:
            ClientRepo.set_keys(c, version, json.dumps(live), remove=h)
            _key_cache.pop(h, None)
            return
        except TransactionFailed as e:
            if not e.reasons or e.reasons[0] != CONDITION_FAILED:
                raise
        c = ClientRepo.get(name)
        if c is None:
            raise NotFound(f"client '{name}' does not exist")
    raise Unavailable("the client's keys are too contended; retry")


# --- produce --------------------------------------------------------------------------------
def queue_for_key(key: str, queues: int) -> int:
    """Same key, same queue (CRC-32 of the UTF-8 key)."""
    return zlib.crc32(key.encode("utf-8")) % queues


def produce(p: Principal, topic: str, raw: str | None) -> dict:
    check_topic(topic)
    req = v.produce(v.json_body(raw))
    t = topic_or_404(topic)
    producer = client_or_404(req.producer, "producer")
    authorize(p, producer, topic)
    reason = req.too_large(len(raw.encode("utf-8")) if raw else 0)
    if reason:
        raise PayloadTooLarge(reason)

    now = clock()
    n_queues = int(t.queues)
    results: list[dict | None] = [None] * len(req.messages)
    known = LogRepo.dedup_lookup(topic, [m.id for m in req.messages if m.id])
    first_index: dict[str, int] = {}
    copies: list[tuple[int, int]] = []
    pending: dict[int, list[tuple[int, seg.Message, bool]]] = {}
    spread = random.randrange(n_queues)
    for i, m in enumerate(req.messages):
        if m.id is not None:
            if m.id in known:
                q, off = known[m.id]
                results[i] = {"id": m.id, "queue": q, "offset": off}
                continue
            if m.id in first_index:
                copies.append((i, first_index[m.id]))
                continue
            first_index[m.id] = i
        q = queue_for_key(m.key, n_queues) if m.key is not None else spread
        msg = seg.Message(id=m.id or str(uuid.uuid4()), body=m.body, key=m.key, tags=m.tags,
                          properties=m.properties, produced_at=now)
        pending.setdefault(q, []).append((i, msg, m.id is not None))
    for q, items in sorted(pending.items()):
        _append_queue(topic, q, items, results, now)
    for i, j in copies:
        results[i] = dict(results[j])  # type: ignore[arg-type]
    return {"results": results}


def _plan_parts(topic: str, q: int, items: list[tuple[int, seg.Message, bool]],
                base: int) -> list[tuple[Append, list[tuple[int, int]]]]:
    """Cut a queue's messages into writes within DynamoDB's limits: segments of at most
    ``SEGMENT_DATA_LIMIT`` raw bytes (one item each, < 400 KB: every message is bounded by
    ``validation.MAX_MESSAGE_BYTES``), and per write at most ``TRANSACT_ITEMS`` items counting the
    queue item's head move, the segments and one dedup item per client id, and at most
    ``TRANSACT_BYTES`` by item-size upper bounds (issue 8, defect 3: 100 ids into one queue used to
    be a 101-item transaction). Returns, per write in log order, the Append and the
    (request index, offset) of its messages. Pure."""
    pq = LogRepo.pq(topic, q)
    parts: list[tuple[Append, list[tuple[int, int]]]] = []
    # the messages of one write: (request index, message, client id?), cut greedily
    writes: list[list[tuple[int, seg.Message, bool]]] = []
    n_items = n_bytes = seg_bytes = 0
    for it in items:
        _, m, cid = it
        size = m.encoded_size()
        new_segment = not writes or seg_bytes + size > seg.SEGMENT_DATA_LIMIT
        add_items = (1 if new_segment else 0) + (1 if cid else 0)
        add_bytes = size + (segment_item_bytes(pq, EMPTY_SEGMENT) if new_segment else 0) \
            + (dedup_item_bytes(topic, m.id) if cid else 0)
        if not writes or n_items + add_items > TRANSACT_ITEMS or n_bytes + add_bytes > TRANSACT_BYTES:
            writes.append([])
            n_items, n_bytes, seg_bytes, new_segment = 1, QUEUE_ITEM_BYTES, 0, True  # 1: the head move
            add_items = 1 + (1 if cid else 0)
            add_bytes = size + segment_item_bytes(pq, EMPTY_SEGMENT) + (dedup_item_bytes(topic, m.id) if cid else 0)
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


EMPTY_SEGMENT = seg.Segment(0, 0, b"", b"", False)


def _runs(w: list[tuple[int, seg.Message, bool]]):
    """The segments of one write: the same greedy cut as in :func:`_plan_parts`."""
    pos = 0
    for run in seg.split([m for _, m, _ in w]):
        yield w[pos:pos + len(run)]
        pos += len(run)


def _append_queue(topic: str, q: int, items: list[tuple[int, seg.Message, bool]], results: list, now: int) -> None:
    """Append ``items`` to queue ``q`` write by write (``_plan_parts``), at the queue's head.
    A write that loses a race (someone appended at that head first) is planned again at the
    fresh head; ids another request recorded meanwhile are answered with that request's result."""
    attempt = 0
    while items:
        base = LogRepo.head(topic, q, fresh=attempt > 0)
        if base is None:
            raise NotFound(f"queue {q} of topic '{topic}' does not exist")
        parts = _plan_parts(topic, q, items, base)
        part, placed = parts[0]
        try:
            LogRepo.append(topic, q, base, part, now)
        except TransactionFailed as e:
            attempt += 1
            if attempt >= APPEND_ATTEMPTS:
                raise Unavailable("the queue is too contended; retry the request with the same message ids") from None
            first = len(e.reasons) - len(part.dedup)  # the dedup items' reasons come last
            dup_ids = [mid for k, (mid, _) in enumerate(part.dedup)
                       if first + k >= 0 and e.reasons[first + k] == CONDITION_FAILED] if part.dedup else []
            if dup_ids:  # another request recorded these ids meanwhile: answer with its result
                found = LogRepo.dedup_lookup(topic, dup_ids)
                keep = []
                for i, m, cid in items:
                    if cid and m.id in found:
                        fq, fo = found[m.id]
                        results[i] = {"id": m.id, "queue": fq, "offset": fo}
                    else:
                        keep.append((i, m, cid))
                items = keep
            time.sleep(random.uniform(0, min(0.05, 0.002 * 2 ** min(attempt, 6))))
            continue
        done = {i for i, _ in placed}
        ids = {i: m.id for i, m, _ in items}
        for i, off in placed:
            results[i] = {"id": ids[i], "queue": q, "offset": off}
        items = [it for it in items if it[0] not in done]
        attempt = 0


# --- pull / ack -----------------------------------------------------------------------------
MemberQueues = Callable[[ClientModel, str, str], "set[int]"]


def _group_member_queues(group: ClientModel, member_id: str, topic: str) -> set[int]:
    """The member's servable queues of ``topic`` (404 ``unknown_member``); reads, never writes."""
    from .group_store import member_queues as served
    return served(group, member_id, topic)


member_queues: MemberQueues = _group_member_queues


def _views(topic: str, owner: str, n_queues: int | None = None) -> list[QueueView]:
    """Each queue's log offsets and ``owner``'s record: BatchGetItem of the ``n_queues`` queue
    items (a subscription's list ``~<id>`` has one; a topic's count is read when not given) and
    one Query of the owner's records."""
    if n_queues is None:
        n_queues = 1 if topic.startswith("~") else int(topic_or_404(topic).queues)
    metas = LogRepo.queues(topic, n_queues)
    recs = OffsetRepo.records(owner)
    out = []
    for m in metas:
        r = recs.get(int(m.queue))
        if r is None:
            out.append(QueueView(int(m.queue), int(m.min_offset), int(m.max_offset)))
        else:
            out.append(QueueView(int(m.queue), int(m.min_offset), int(m.max_offset), int(r.committed_offset),
                                 int(r.lock_ts), int(r.lock_until), int(r.last_consumed_at), tuple(r.acks or ())))
    return out


def read_batch(topic: str, queue: int, start: int, limit: int, tags: list[str] | None,
               max_offset: int) -> tuple[list[dict], int]:
    """Read from ``start``: up to ``limit`` deliverable messages, contiguous offsets only, and no
    more than fit one Lambda response (:class:`lakeq.payload.ByteBudget`; always at least one).
    Returns (messages, next_offset) where ``next_offset`` is after the last offset examined
    (skipped ones included); when the byte budget cuts the batch, it is right after the last
    message returned, so the lock covers exactly what the response carries.
    ``next_offset == start`` means nothing readable yet."""
    budget = limit if not tags else max(1000, limit * SCAN_FACTOR)
    budget = min(budget, max_offset - start)
    size = ByteBudget()
    out: list[dict] = []
    nxt = start
    for s in LogRepo.read(topic, queue, start, budget):
        if s.base > nxt:  # a gap: stop before it (never deliver n+1 before n)
            break
        for off, msg in seg.read(s, nxt, budget - (nxt - start), tags):
            if msg is not None:
                msg["topic"] = topic
                msg["queue"] = queue
                if not size.take(_message_out(msg)):
                    return out, out[-1]["offset"] + 1
                out.append(msg)
            nxt = off + 1
            if msg is not None and len(out) >= limit:
                return out, nxt
        if nxt - start >= budget:
            break
    return out, nxt


def _message_out(m: dict) -> dict:
    return {k: m.get(k) for k in ("id", "topic", "queue", "offset", "body", "key", "tags", "properties",
                                  "produced_at")}


def _ack_group(p: Principal, group: ClientModel, client_id: str | None, receipt: Receipt) -> dict:
    if receipt.subscription is not None:
        raise BadRequest("this receipt is for a subscription; acknowledge it with 'subscription'")
    topic, q = receipt.topic_queue
    if TopicRepo.get(topic) is None:
        raise NotFound(f"topic '{topic}' of the receipt does not exist")
    authorize(p, group, topic)
    if group.mode == "broadcasting" and client_id is None:
        raise BadRequest("client_id is required for a broadcasting group")
    owner = OffsetRepo.owner(group.name, topic, client_id if group.mode == "broadcasting" else None)
    if receipt.broker != broker() or not OffsetRepo.ack(owner, q, receipt, clock()):
        raise Conflict("the receipt is stale: the queue was locked again, acknowledged or reset since",
                       code="stale_receipt")
    return {"topic": topic, "queue": q, "committed_offset": receipt.next_offset}


def ack(p: Principal, raw: str | None) -> dict:
    req = v.ack(v.json_body(raw))
    receipt = parse_receipt(req.receipt)
    if req.subscription is not None:
        return subscription_ack(p, req.subscription, receipt)
    group = client_or_404(req.group, "consumer")  # type: ignore[arg-type]
    return _ack_group(p, group, req.client_id, receipt)


def subscription_ack(p: Principal, sub_id: str, receipt: Receipt) -> dict:
    from .subscriptions import ack as _subscription_ack  # the subscriptions module owns the lists

    return _subscription_ack(p, sub_id, receipt)


def pull(p: Principal, topic: str, params: dict) -> dict:
    check_topic(topic)
    req = v.pull(params)
    ack_receipt = parse_receipt(req.ack) if req.ack is not None else None
    t = topic_or_404(topic)
    group = client_or_404(req.group, "consumer")
    allowed = member_queues(group, req.member_id, topic) if req.member_id is not None else None
    authorize(p, group, topic)
    if group.mode == "broadcasting" and req.client_id is None:
        raise BadRequest("client_id is required for a broadcasting group")
    client_id = req.client_id if group.mode == "broadcasting" else None
    if ack_receipt is not None:
        _ack_group(p, group, client_id, ack_receipt)
    owner = OffsetRepo.owner(group.name, topic, client_id)
    meta = {"group": group.name, "client_id": client_id, "topic": topic}
    lock_owner = req.member_id or client_id or "-"
    return consume(owner, topic, meta, lambda v_: topic_queue_field(topic, v_.queue),
                   lambda: _views(topic, owner, int(t.queues)), int(group.visibility_timeout_ms), req, allowed,
                   lock_owner)


def consume(owner: str, topic: str, meta: dict, queue_field, load_views, visibility_ms: int,
            req: v.PullRequest, allowed: set[int] | None, lock_owner: str,
            reader=None) -> dict:
    """The pull loop shared by topic queues and subscription lists (SPEC §1): choose, read,
    lock with a conditional write, answer; long-poll until ``wait_ms`` passes."""
    reader = reader or (lambda q, start, lim, mx: read_batch(topic, q, start, lim, req.tags, mx))
    deadline = clock() + req.wait_ms
    poll = POLL_MIN_MS
    while True:
        now = clock()
        progressed = False
        for view in candidates(load_views(), now, allowed):
            msgs, nxt = reader(view.queue, view.start, req.max, view.max_offset)
            if nxt == view.start:
                continue
            if not msgs:  # only skipped messages: move past them ourselves
                progressed |= OffsetRepo.advance(owner, view, nxt, meta, now)
                continue
            ts = next_lock_ts(now, view.lock_ts)
            if not OffsetRepo.lock(owner, view, ts, now + visibility_ms, nxt, lock_owner, meta, now):
                continue
            receipt = Receipt(broker(), queue_field(view), view.start, nxt, ts)
            return {"messages": [_message_out(m) for m in msgs], "receipt": str(receipt)}
        if progressed:
            continue
        remaining = deadline - clock()
        if remaining <= 0:
            return {"messages": [], "receipt": None}
        time.sleep(min(poll, remaining) / 1000)
        poll = min(POLL_MAX_MS, poll * 2)


# --- offsets --------------------------------------------------------------------------------
def offsets(p: Principal, group_name: str, params: dict) -> dict:
    check_name(group_name, "group")
    topic = params.get("topic")
    check_topic(topic)
    client_id = params.get("client_id")
    if client_id is not None:
        check_name(client_id, "client_id")
    t = topic_or_404(topic)
    group = client_or_404(group_name, "consumer")
    authorize(p, group, topic)
    if group.mode == "broadcasting" and client_id is None:
        raise BadRequest("client_id is required for a broadcasting group")
    owner = OffsetRepo.owner(group.name, topic, client_id if group.mode == "broadcasting" else None)
    now = clock()
    queues = []
    for view in sorted(_views(topic, owner, int(t.queues)), key=lambda x: x.queue):
        queues.append({"queue": view.queue, "min_offset": view.min_offset, "max_offset": view.max_offset,
                       "committed_offset": view.start,
                       "locked_until": view.lock_until if view.locked(now) else 0, "backlog": view.backlog})
    return {"group": group.name, "topic": topic, "backlog": sum(q["backlog"] for q in queues), "queues": queues}


def reset_offset(p: Principal, group_name: str, raw: str | None) -> dict:
    check_name(group_name, "group")
    req = v.reset_offset(v.json_body(raw))
    t = topic_or_404(req.topic)
    group = client_or_404(group_name, "consumer")
    require_admin(p)
    if group.mode == "broadcasting" and req.client_id is None:
        raise BadRequest("client_id is required for a broadcasting group")
    if req.queue >= int(t.queues):
        raise BadRequest(f"topic '{req.topic}' has queues 0-{int(t.queues) - 1}")
    meta = LogRepo.queue(req.topic, req.queue)
    lo, hi = int(meta.min_offset), int(meta.max_offset)  # type: ignore[union-attr]
    if not lo <= req.offset <= hi:
        raise BadRequest(f"offset must be within [{lo}, {hi}] for queue {req.queue}")
    client_id = req.client_id if group.mode == "broadcasting" else None
    owner = OffsetRepo.owner(group.name, req.topic, client_id)
    OffsetRepo.reset(owner, req.queue, req.offset, {"group": group.name, "client_id": client_id, "topic": req.topic},
                     clock())
    return {"group": group.name, "topic": req.topic, "queue": req.queue, "committed_offset": req.offset}
