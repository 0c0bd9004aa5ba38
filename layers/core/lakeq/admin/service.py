"""Admin use cases behind the HTTP routes: topics (create, list, grow), clients (create, patch) and
their API keys (list, issue, revoke).

Check order (API.md): 401 → 400 (syntax) → 404 (named things) → 403 (the key may not act) →
state-dependent answers (400/409/413). Handlers parse nothing themselves beyond handing over the
raw body and parameters.
"""
from __future__ import annotations

import json
import secrets

from lakeq.admin.auth import (
    Principal,
    admin_client,
    change_key_set,
    forget_client,
    forget_key,
    hash_key,
    require_admin,
    topic_or_404,
)
from lakeq.common import clock as _clock
from lakeq.common.backoff import RETRY, Retry, cas
from lakeq.common.errors import BadRequest, Conflict, NotFound, Unavailable
from lakeq.common.names import check_name, check_topic, covers, parent_of
from lakeq.contract import validation as v
from lakeq.store.catalog import ClientRepo, TopicRepo, inc_of
from lakeq.store.records import Client, Topic
from lakeq.store.writes import TransactionFailed

MAX_KEYS = 10  # live keys per client (rotation: issue the new one, move clients over, revoke)


# --- topics and clients ---------------------------------------------------------------------
def topic_view(t: Topic) -> dict:
    return {"name": t.name, "queues": int(t.queues), "parent": t.parent}


def create_topic(p: Principal, raw: str | None) -> dict:
    name, queues = v.create_topic(v.json_body(raw))
    require_admin(p)
    parent = parent_of(name)
    if parent is not None and TopicRepo.get(parent) is None:
        raise NotFound(f"parent topic '{parent}' does not exist")
    try:
        TopicRepo.create(name, queues, parent, _clock.now())
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
    queues = v.grow_topic(v.json_body(raw))
    t = topic_or_404(name)
    require_admin(p)

    def attempt(n: int) -> dict | Retry:
        cur = t if n == 0 else topic_or_404(name)  # a concurrent PATCH moved the count: decide again
        old = int(cur.queues)
        if queues <= old:
            raise BadRequest(f"queues can only grow: topic '{name}' has {old}; ask for {old + 1}-{v.QUEUES_MAX}")
        try:
            TopicRepo.grow(name, old, queues, inc_of(cur))
            return {"name": name, "queues": queues, "parent": cur.parent}
        except TransactionFailed as e:
            if not e.failed(0):
                raise
        return RETRY
    def exhausted():
        topic_or_404(name)  # (read after the last lost round too: gone is 404, not 503)
        raise Unavailable("the topic is too contended; retry")
    return cas(attempt, on_exhausted=exhausted)


def client_view(c: Client) -> dict:
    out = {"name": c.name, "role": c.role, "topics": list(c.topics)}
    if c.role == "consumer":
        out["mode"] = c.mode
        out["visibility_timeout_ms"] = int(c.visibility_timeout_ms)
        if c.max_deliveries is not None:  # issue 9: shown when set
            out["max_deliveries"] = int(c.max_deliveries)
        if c.dead_letter_topic is not None:
            out["dead_letter_topic"] = c.dead_letter_topic
        if c.alarms_muted:  # left out of the deployment's alarms (PATCH {"alarms": false})
            out["alarms"] = False
    return out


def create_client(p: Principal, raw: str | None) -> dict:
    req = v.create_client(v.json_body(raw))
    require_admin(p)
    for t in req.topics:
        if TopicRepo.get(t) is None:
            raise NotFound(f"topic '{t}' does not exist")
    if req.dead_letter_topic is not None and TopicRepo.get(req.dead_letter_topic) is None:
        raise NotFound(f"dead-letter topic '{req.dead_letter_topic}' does not exist")
    if req.role == "consumer":
        _no_loop(req.topics, req.dead_letter_topic)
    key = "lq_" + secrets.token_urlsafe(32)
    key_hash = hash_key(key)
    client = Client(req.name, role=req.role, topics=req.topics, mode=req.mode,
                    visibility_timeout_ms=req.visibility_timeout_ms, key_hash=key_hash,
                    created_at=_clock.now(), max_deliveries=req.max_deliveries,
                    dead_letter_topic=req.dead_letter_topic,
                    key_map=json.dumps({key_id_of(key_hash): key_hash}), key_version=1)
    try:
        ClientRepo.create(client)
    except TransactionFailed as e:
        if e.failed(0):
            raise Conflict(f"client '{req.name}' exists", code="client_exists") from None
        raise
    return {**client_view(client), "api_key": key, "key_id": key_id_of(client.key_hash)}


def _no_loop(topics: list[str], dlt: str | None) -> None:
    """400 when a consumer's dead-letter topic is one of (or under) the topics it consumes: its
    dead letters would come back to it (issue 30.4)."""
    for t in topics:
        if dlt is not None and covers(t, dlt):
            raise BadRequest(f"dead-letter topic '{dlt}' is consumed as '{t}': its dead letters would loop back")


def patch_client(p: Principal, name: str, raw: str | None) -> dict:
    """``PATCH /v1/clients/{name}`` (admin, issue 9): a consumer's ``max_deliveries`` and/or
    ``dead_letter_topic`` (null clears). 400 → 404 (client, topic) → 403; one conditional
    UpdateItem (the client exists and is a consumer). Other containers see the change within
    :data:`lakeq.admin.auth.CLIENT_CACHE_TTL_S`."""
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
        raise BadRequest(f"client '{name}' is a {c.role}: 'max_deliveries', 'dead_letter_topic' and 'alarms' "
                         "are for consumers")
    _no_loop(list(c.topics), dlt)
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


def _live_keys(c: Client) -> dict[str, str]:
    if c.key_map is None:
        return {key_id_of(c.key_hash): c.key_hash}
    return dict(json.loads(c.key_map))


def _client_for_keys(name: str, p: Principal, key_id: str | None = None) -> Client:
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

    def attempt(c: Client, version: int | None) -> dict:
        live = _live_keys(c)
        if len(live) >= MAX_KEYS:
            raise Conflict(f"client '{name}' has {len(live)} live keys (at most {MAX_KEYS}); revoke one first",
                           code="too_many_keys")
        live[key_id_of(h)] = h
        ClientRepo.set_keys(c, version, json.dumps(live),
                            add=(h, key_id_of(h), _clock.now()))
        return {"name": c.name, "key_id": key_id_of(h), "api_key": key}

    return change_key_set(name, c, attempt)


def revoke_key(p: Principal, name: str, key_id: str) -> None:
    """``DELETE /v1/clients/{name}/keys/{key_id}`` (admin) → 204; unknown or already revoked key
    → 404. The key item goes in the same transaction as the key set, so the next lookup of that
    key (consistent) fails: 401 at once here, within KEY_CACHE_TTL_S in other warm containers."""
    if not (isinstance(key_id, str) and len(key_id) == 16 and all(ch in "0123456789abcdef" for ch in key_id)):
        raise BadRequest("'key_id' must be 16 lowercase hex digits")
    c = _client_for_keys(name, p, key_id)

    def attempt(c: Client, version: int | None) -> None:
        live = _live_keys(c)
        h = live.pop(key_id, None)
        if h is None:
            raise NotFound(f"client '{name}' has no live key '{key_id}'")
        ClientRepo.set_keys(c, version, json.dumps(live), remove=h)
        forget_key(h)

    change_key_set(name, c, attempt)
