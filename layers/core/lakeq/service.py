"""Use cases behind the HTTP routes: authenticate, check, call the pure core and the repositories.

Check order (API.md): 401 → 400 (syntax) → 404 (named things) → 403 (the key may not act) →
state-dependent answers (400/409/413). Handlers parse nothing themselves beyond handing over the
raw body and parameters.
"""
from __future__ import annotations

import json
import random
import secrets
import uuid
from typing import Callable

from . import clock as _clock
from . import delayed as _delayed
from . import segments as seg
from . import settling
from . import validation as v
from .append import Contended, append_at_head
from .auth import (  # noqa: F401
    KEY_CACHE_MAX,
    KEY_CACHE_TTL_S,
    Principal,
    admin_client,
    authenticate,
    authorize,
    clear_caches,
    client_or_404,
    forget_client,
    forget_key,
    hash_key,
    require_admin,
    topic_or_404,
)
from .errors import ApiError, BadRequest, Conflict, NotFound, PayloadTooLarge, StaleReceipt, Unavailable
from .logread import SCAN_FACTOR, TopicLog, broker, consume, topic_reader  # noqa: F401
from .logread import views as _views
from .models import ClientModel, KeyModel, TopicModel, log_of
from .names import check_name, check_topic, parent_of, topic_of_log
from .produce_plan import plan_parts as _plan_parts  # noqa: F401
from .produce_plan import queue_for_key
from .receipts import Receipt
from .receipts import parse as parse_receipt
from .repos import ClientRepo, LogRepo, OffsetRepo, TopicRepo, TransactionFailed, inc_of
from .selection import lock_until
from .settlement import Outcomes

APPEND_ATTEMPTS = 40
MAX_KEYS = 10  # live keys per client (rotation: issue the new one, move clients over, revoke)


def clock() -> int:
    """Now in ms: :func:`lakeq.clock.now` (the one clock; patch that, not this)."""
    return _clock.now()


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
        if e.failed(0):
            raise Conflict(f"topic '{name}' exists", code="topic_exists") from None
        if e.failed(1):
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
            TopicRepo.grow(name, old, queues, inc_of(t))
            return {"name": name, "queues": queues, "parent": t.parent}
        except TransactionFailed as e:
            if not e.failed(0):
                raise
        t = topic_or_404(name)  # a concurrent PATCH moved the count: decide again
    raise Unavailable("the topic is too contended; retry")


def client_view(c: ClientModel) -> dict:
    out = {"name": c.name, "role": c.role, "topics": list(c.topics)}
    if c.role == "consumer":
        out["mode"] = c.mode
        out["visibility_timeout_ms"] = int(c.visibility_timeout_ms)
        if c.max_deliveries is not None:  # issue 9: shown when set
            out["max_deliveries"] = int(c.max_deliveries)
        if c.dead_letter_topic is not None:
            out["dead_letter_topic"] = c.dead_letter_topic
    return out


def create_client(p: Principal, raw: str | None) -> dict:
    req = v.create_client(v.json_body(raw))
    require_admin(p)
    for t in req.topics:
        if TopicRepo.get(t) is None:
            raise NotFound(f"topic '{t}' does not exist")
    if req.dead_letter_topic is not None and TopicRepo.get(req.dead_letter_topic) is None:
        raise NotFound(f"dead-letter topic '{req.dead_letter_topic}' does not exist")
    key = "lq_" + secrets.token_urlsafe(32)
    client = ClientModel(req.name, role=req.role, topics=req.topics, mode=req.mode,
                         visibility_timeout_ms=req.visibility_timeout_ms, key_hash=hash_key(key), created_at=clock(),
                         max_deliveries=req.max_deliveries, dead_letter_topic=req.dead_letter_topic)
    client.key_map = json.dumps({key_id_of(client.key_hash): client.key_hash})
    client.key_version = 1
    try:
        ClientRepo.create(client)
    except TransactionFailed as e:
        if e.failed(0):
            raise Conflict(f"client '{req.name}' exists", code="client_exists") from None
        raise
    return {**client_view(client), "api_key": key, "key_id": key_id_of(client.key_hash)}


def patch_client(p: Principal, name: str, raw: str | None) -> dict:
    """``PATCH /v1/clients/{name}`` (admin, issue 9): a consumer's ``max_deliveries`` and/or
    ``dead_letter_topic`` (null clears). 400 → 404 (client, topic) → 403; one conditional
    UpdateItem (the client exists and is a consumer). Other containers see the change within
    :data:`lakeq.auth.CLIENT_CACHE_TTL_S`."""
    check_name(name, "client name")
    changes = v.patch_client(v.json_body(raw))
    c = ClientRepo.get(name)
    if c is None:
        raise NotFound(f"client '{name}' does not exist")
    dlt = changes.get("dead_letter_topic")
    if dlt is not None and TopicRepo.get(dlt) is None:
        raise NotFound(f"dead-letter topic '{dlt}' does not exist")
    require_admin(p)
    if c.role != "consumer":
        raise BadRequest(f"client '{name}' is a {c.role}: 'max_deliveries' and 'dead_letter_topic' are for consumers")
    updated = ClientRepo.set_settings(name, changes)
    if updated is None:
        raise NotFound(f"client '{name}' does not exist")
    forget_client(name)
    return client_view(updated)


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
    return admin_client(p, name, key_id, _live_keys, "key")


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
            if not e.failed(0):
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
            forget_key(h)
            return
        except TransactionFailed as e:
            if not e.failed(0):
                raise
        c = ClientRepo.get(name)
        if c is None:
            raise NotFound(f"client '{name}' does not exist")
    raise Unavailable("the client's keys are too contended; retry")


# --- produce --------------------------------------------------------------------------------
def produce(p: Principal, topic: str, raw: str | None, reserved_ok: bool = False) -> dict:
    """``reserved_ok``: the properties may use reserved names (only the SQS endpoint's own sends)."""
    check_topic(topic)
    req = v.produce(v.json_body(raw), reserved_ok)
    t = topic_or_404(topic)
    producer = client_or_404(req.producer, "producer")
    authorize(p, producer, topic)
    reason = req.too_large(len(raw.encode("utf-8")) if raw else 0)
    if reason:
        raise PayloadTooLarge(reason)

    now = clock()
    n_queues = int(t.queues)
    log = log_of(t)  # the keys of this incarnation of the topic (lakeq.names.log_name)
    results: list[dict | None] = [None] * len(req.messages)
    known = _delayed.known_results(log, [m.id for m in req.messages if m.id])  # delayed ids too
    first_index: dict[str, int] = {}
    copies: list[tuple[int, int]] = []
    pending: dict[int, list[tuple[int, seg.Message, bool]]] = {}
    delayed: dict[int, list[_delayed.Delayed]] = {}  # delay_ms > 0: kept until due (lakeq.delayed)
    spread = random.randrange(n_queues)
    for i, m in enumerate(req.messages):
        if m.id is not None:
            if m.id in known:
                results[i] = dict(known[m.id])
                continue
            if m.id in first_index:
                copies.append((i, first_index[m.id]))
                continue
            first_index[m.id] = i
        q = queue_for_key(m.key, n_queues) if m.key is not None else spread
        msg = seg.Message(id=m.id or str(uuid.uuid4()), body=m.body, key=m.key, tags=m.tags,
                          properties=m.properties, produced_at=now)
        if m.delay_ms:
            delayed.setdefault(q, []).append(_delayed.Delayed(i, msg, m.id is not None, now + m.delay_ms))
        else:
            pending.setdefault(q, []).append((i, msg, m.id is not None))
    for q, items in sorted(pending.items()):
        _append_queue(log, q, items, results, now)
    for q, ditems in sorted(delayed.items()):
        _delayed.produce_delayed(log, q, ditems, results, now)
    for i, j in copies:
        results[i] = dict(results[j])  # type: ignore[arg-type]
    return {"results": results}


def _append_queue(topic: str, q: int, items: list[tuple[int, seg.Message, bool]], results: list, now: int) -> None:
    """Append ``items`` to queue ``q`` of log ``topic`` (a topic's log name) write by write
    (``_plan_parts``) with :func:`lakeq.append.append_at_head`; ids another request recorded
    meanwhile are answered with that request's result."""
    offsets: dict[int, int] = {}

    def plan(left: list, base: int) -> tuple:
        part, placed = _plan_parts(topic, q, left, base)[0]
        offsets.update(placed)
        return part, len(placed)

    def written(done: list, _part) -> None:
        for i, m, _ in done:
            results[i] = {"id": m.id, "queue": q, "offset": offsets[i]}

    def recorded(left: list, dup_ids: list[str]) -> list:
        found = _delayed.known_results(topic, dup_ids)  # (a delayed one: offset null, deliver_at)
        keep = []
        for i, m, cid in left:
            if cid and m.id in found:
                results[i] = dict(found[m.id])
            else:
                keep.append((i, m, cid))
        return keep

    try:
        if not append_at_head(topic, q, items, now, plan, written, recorded):
            raise NotFound(f"queue {q} of topic '{topic_of_log(topic)}' does not exist")
    except Contended:
        raise Unavailable("the queue is too contended; retry the request with the same message ids") from None


# --- pull / ack -----------------------------------------------------------------------------
MemberQueues = Callable[[ClientModel, str, str], "set[int]"]


def _group_member_queues(group: ClientModel, member_id: str, topic: str) -> set[int]:
    """The member's servable queues of ``topic`` (404 ``unknown_member``); reads, never writes."""
    from .group_store import member_queues as served
    return served(group, member_id, topic)


member_queues: MemberQueues = _group_member_queues


def read_batch(topic: str, queue: int, start: int, limit: int, tags: list[str] | None,
               max_offset: int) -> tuple[list[dict], int]:
    """A topic queue's batch from ``start`` (:func:`lakeq.logread.topic_reader`)."""
    return topic_reader(topic, tags)(queue, start, limit, max_offset)


def _instance(group: ClientModel, client_id: str | None) -> str | None:
    """Whose offsets a request uses: its ``client_id`` in broadcasting mode (400 without one),
    None in clustering mode (the group's own)."""
    if group.mode != "broadcasting":
        return None
    if client_id is None:
        raise BadRequest("client_id is required for a broadcasting group")
    return client_id


STALE = "the receipt is stale: the queue was locked again, acknowledged or reset since"


def _group_receipt(p: Principal, group: ClientModel, client_id: str | None, receipt: Receipt,
                   use: str, known: TopicModel | None = None) -> tuple[str, int, str]:
    """The checks every use of a group's receipt makes (ack, visibility), in API.md's order:
    not a subscription's (400), its topic exists (404), the key may act (403), the instance (400).
    Returns (topic, queue, offsets owner); 409 ``stale_receipt`` for another broker's receipt.
    ``known``: a topic item this request already read (a pull's), used when it is the receipt's."""
    if receipt.subscription is not None:
        raise BadRequest(f"this receipt is for a subscription; {use} it with 'subscription'")
    topic, q = receipt.topic_queue
    t = known if known is not None and known.name == topic else TopicRepo.get(topic)
    if t is None:
        raise NotFound(f"topic '{topic}' of the receipt does not exist")
    authorize(p, group, topic)
    owner = OffsetRepo.owner(group.name, log_of(t), _instance(group, client_id))
    if receipt.broker != broker() or receipt.log != log_of(t):  # (a receipt of a deleted incarnation)
        raise StaleReceipt(STALE)
    return topic, q, owner


def _ack_group(p: Principal, group: ClientModel, client_id: str | None, receipt: Receipt,
               outcomes: Outcomes = Outcomes()) -> dict:
    """Settle a group's receipt (:func:`lakeq.settling.settle`): the whole batch (one UpdateItem
    in the common case) or the offsets ``outcomes`` names."""
    topic, q, owner = _group_receipt(p, group, client_id, receipt, "acknowledge")
    out = settling.settle(owner, q, receipt, outcomes, settling.policy_of(group), topic_reader(receipt.log, None),
                          clock(), STALE)
    return {"topic": topic, "queue": q, **out}


def ack(p: Principal, raw: str | None,
        subscription_ack: Callable[..., dict] | None = None) -> dict:
    """``POST /v1/acks``: a group's receipt here; a subscription's goes to ``subscription_ack``
    (:func:`lakeq.subscriptions.ack`, passed in by the route: this module does not import it).
    With ``"acks": [...]`` a batch: ``{"results": [...]}`` in order, each entry's body or error."""
    body = v.json_body(raw)
    if "acks" in body:
        return _ack_batch(p, v.ack_batch(body), subscription_ack)
    req = v.ack(body)
    receipt = parse_receipt(req.receipt)
    return _ack_one(p, req, receipt, subscription_ack)


def _ack_one(p: Principal, req: v.AckIn, receipt: Receipt, subscription_ack) -> dict:
    if req.subscription is not None:
        if subscription_ack is None:
            raise BadRequest("subscription receipts are acknowledged on the consume routes")
        return subscription_ack(p, req.subscription, receipt, req.outcomes)
    group = client_or_404(req.group, "consumer")  # type: ignore[arg-type]
    return _ack_group(p, group, req.client_id, receipt, req.outcomes)


def _ack_batch(p: Principal, req: v.AckBatchIn, subscription_ack) -> dict:
    """Each entry on its own: a refused entry (4xx) is answered with its error and changes
    nothing; the others go on. The consumer named by the envelope must exist (404 for all)."""
    if req.group is not None:
        client_or_404(req.group, "consumer")
    results: list[dict] = []
    for e in req.entries:
        if isinstance(e, ApiError):
            results.append(e.body())
            continue
        try:
            results.append(_ack_one(p, e, parse_receipt(e.receipt), subscription_ack))
        except ApiError as err:
            if err.status >= 500:
                raise
            results.append(err.body())
    return {"results": results}


def _visibility_group(p: Principal, group: ClientModel, client_id: str | None, receipt: Receipt,
                      visibility_ms: int) -> dict:
    topic, q, owner = _group_receipt(p, group, client_id, receipt, "name")
    now = clock()
    until = lock_until(now, visibility_ms)
    if not settling.visibility(owner, q, receipt, until, now):
        raise StaleReceipt(STALE)
    return {"topic": topic, "queue": q, "locked_until": until}


def visibility(p: Principal, raw: str | None,
               subscription_visibility: Callable[[Principal, str, Receipt, int], dict] | None = None) -> dict:
    """``POST /v1/visibility``: extend or end (0) a receipt's lock; checks as :func:`ack`. A
    subscription's receipt goes to ``subscription_visibility`` (:func:`lakeq.subscriptions.visibility`)."""
    req = v.visibility(v.json_body(raw))
    receipt = parse_receipt(req.ack.receipt)
    if req.ack.subscription is not None:
        if subscription_visibility is None:
            raise BadRequest("subscription receipts are handled on the consume routes")
        return subscription_visibility(p, req.ack.subscription, receipt, req.visibility_timeout_ms)
    group = client_or_404(req.ack.group, "consumer")  # type: ignore[arg-type]
    return _visibility_group(p, group, req.ack.client_id, receipt, req.visibility_timeout_ms)


def pull(p: Principal, topic: str, params: dict) -> dict:
    check_topic(topic)
    req = v.pull(params)
    ack_receipt = parse_receipt(req.ack) if req.ack is not None else None
    t = topic_or_404(topic)
    group = client_or_404(req.group, "consumer")
    allowed = member_queues(group, req.member_id, topic) if req.member_id is not None else None
    authorize(p, group, topic)
    client_id = _instance(group, req.client_id)
    log = log_of(t)
    owner = OffsetRepo.owner(group.name, log, client_id)
    policy = settling.policy_of(group)
    folded = None
    if ack_receipt is not None:
        # the receipt's checks (the pull's topic item serves them when it is the receipt's topic)
        _, q, ack_owner = _group_receipt(p, group, client_id, ack_receipt, "acknowledge", known=t)

        def ack_alone() -> dict:
            return settling.settle(ack_owner, q, ack_receipt, Outcomes(), policy,
                                   topic_reader(ack_receipt.log, None), clock(), STALE)

        if ack_owner == owner and ack_receipt.log == log and not req.tags and (allowed is None or q in allowed):
            folded = (ack_receipt, q, ack_alone)  # the ack goes into this pull's lock write (logread.fold)
        else:
            ack_alone()
    meta = {"group": group.name, "client_id": client_id, "topic": topic}
    lock_owner = req.member_id or client_id or "-"
    return consume(TopicLog(log, owner, meta, int(t.queues), lock_owner),
                   req.visibility_timeout_ms or int(group.visibility_timeout_ms), req, allowed,
                   policy=policy, folded=folded)


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
    owner = OffsetRepo.owner(group.name, log_of(t), _instance(group, client_id))
    now = clock()
    queues = []
    recs = OffsetRepo.records(owner)
    for view in sorted(_views(log_of(t), owner, int(t.queues), recs=recs), key=lambda x: x.queue):
        r = recs.get(view.queue)  # lock_owner: the member_id / client_id holding the lock, "-" for none
        queues.append({"queue": view.queue, "min_offset": view.min_offset, "max_offset": view.max_offset,
                       "committed_offset": view.start,
                       "locked_until": view.lock_until if view.locked(now) else 0,
                       "lock_owner": r.lock_owner if r is not None and view.locked(now) else None,
                       "backlog": view.backlog, "dead_lettered": view.dead_lettered})
    return {"group": group.name, "topic": topic, "backlog": sum(q["backlog"] for q in queues), "queues": queues}


def reset_offset(p: Principal, group_name: str, raw: str | None) -> dict:
    check_name(group_name, "group")
    req = v.reset_offset(v.json_body(raw))
    t = topic_or_404(req.topic)
    group = client_or_404(group_name, "consumer")
    require_admin(p)
    client_id = _instance(group, req.client_id)
    if req.queue >= int(t.queues):
        raise BadRequest(f"topic '{req.topic}' has queues 0-{int(t.queues) - 1}")
    meta = LogRepo.queue(log_of(t), req.queue)
    lo, hi = int(meta.min_offset), int(meta.max_offset)  # type: ignore[union-attr]
    if not lo <= req.offset <= hi:
        raise BadRequest(f"offset must be within [{lo}, {hi}] for queue {req.queue}")
    owner = OffsetRepo.owner(group.name, log_of(t), client_id)
    OffsetRepo.reset(owner, req.queue, req.offset, {"group": group.name, "client_id": client_id, "topic": req.topic},
                     clock())
    return {"group": group.name, "topic": req.topic, "queue": req.queue, "committed_offset": req.offset}
