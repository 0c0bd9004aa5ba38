"""Who is calling and what they may touch: API keys, the admin key, grants (API.md "Auth").

:func:`authenticate` turns an ``Authorization: Bearer <key>`` header into a :class:`Principal`
(401 otherwise); :func:`require_admin` and :func:`authorize` are the 403 checks; the ``*_or_404``
lookups are the 404 checks every use case makes before its 403 (API.md's order). Keys are stored
as sha-256 hashes only. Both :mod:`lakeq.consume.service` and :mod:`lakeq.subscriptions.service` import this
module (neither imports the other).
"""
from __future__ import annotations

import hashlib
import hmac
import os
import time
from dataclasses import dataclass
from typing import Callable, TypeVar

from lakeq.common.backoff import RETRY, Retry, cas
from lakeq.common.errors import BadRequest, Forbidden, NotFound, Unauthorized, Unavailable
from lakeq.common.names import check_name, covers
from lakeq.store.catalog import ClientRepo, TopicRepo
from lakeq.store.queue_log import LogRepo
from lakeq.store.records import Client, Topic
from lakeq.store.writes import TransactionFailed

# --- small per-container caches ---------------------------------------------------------------
# A client's dead-letter settings can change (PATCH /v1/clients/{name}, issue 9): a container
# trusts a client item it read for CLIENT_CACHE_TTL_S at most (at once in the container that
# patched it). The client cache holds no key. A key can be revoked: a container trusts a key it
# has looked up for KEY_CACHE_TTL_S at most, so a revoked key answers 401 everywhere within that
# bound (at once in the container that revoked it, and at once on a cold container: the lookup is
# strongly consistent).
KEY_CACHE_TTL_S = 5.0
KEY_CACHE_MAX = 10_000
monotonic: Callable[[], float] = time.monotonic
_key_cache: dict[str, tuple[str, float]] = {}  # key hash -> (client name, trusted until, monotonic s)
CLIENT_CACHE_TTL_S = 5.0
# name -> (client, trusted until, monotonic s)
_client_cache: dict[str, tuple[Client, float]] = {}


def clear_caches() -> None:
    _key_cache.clear()
    _client_cache.clear()


def forget_client(name: str) -> None:
    """Read a patched client again on its next use in this container."""
    _client_cache.pop(name, None)


def forget_key(key_hash: str) -> None:
    """Stop trusting a revoked key in this container at once."""
    _key_cache.pop(key_hash, None)


def hash_key(key: str) -> str:
    """The stored form of a key.

    >>> hash_key("local-admin-key")[:16]
    '4ab7b7cd7a009307'
    """
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def _admin_hash() -> str | None:
    h = os.environ.get("LAKEQ_ADMIN_KEY_SHA256")
    if h:
        return h.lower()
    raw = os.environ.get("LAKEQ_ADMIN_KEY")
    return hash_key(raw) if raw else None


@dataclass(frozen=True)
class Principal:
    """The caller: the admin, or the client a key was issued to.

    >>> Principal(admin=False, client="risk").may_act_as("risk"), Principal(admin=True).may_act_as("x")
    (True, True)
    """

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


def topic_or_404(name: str, consistent: bool = True) -> Topic:
    """The topic item (404 when none). ``consistent=False``: read eventually consistently (half the
    units): the native produce, whose appends are keyed by the log name the item names."""
    t = TopicRepo.get(name, consistent)
    if t is None:
        raise NotFound(f"topic '{name}' does not exist")
    return t


def topic_copy_or_404(name: str) -> Topic:
    """:func:`topic_or_404` from the container's copy of the topic item when it is younger than
    ``TOPIC_SEEN_S`` (:meth:`lakeq.store.queue_log.LogRepo.topic`): the native pull."""
    t = LogRepo.topic(name)
    if t is None:
        raise NotFound(f"topic '{name}' does not exist")
    return t


def cached_client(name: str) -> Client | None:
    """The client item, trusted for :data:`CLIENT_CACHE_TTL_S` per container (None: no such client,
    not cached)."""
    now = monotonic()
    hit = _client_cache.get(name)
    c = hit[0] if hit is not None and hit[1] > now else None
    if c is None:
        c = ClientRepo.get(name)
        if c is not None:
            if len(_client_cache) >= KEY_CACHE_MAX:
                _client_cache.clear()
            _client_cache[name] = (c, now + CLIENT_CACHE_TTL_S)
    return c


def client_or_404(name: str, role: str) -> Client:
    c = cached_client(name)
    if c is None or c.role != role:
        what = "consumer group" if role == "consumer" else "producer"
        raise NotFound(f"{what} '{name}' does not exist")
    return c


def admin_client(p: Principal, name: str, item_id: str | None = None,
                 live: Callable[[Client], object] | None = None, what: str = "key") -> Client:
    """The client an admin route about its keys or credentials names, in API.md's order: 400 (the
    name) → 404 (the client; with ``item_id``, one of its ``live(client)`` ids) → 403 (admin only)."""
    check_name(name, "client name")
    c = ClientRepo.get(name)
    if c is None:
        raise NotFound(f"client '{name}' does not exist")
    if item_id is not None and live is not None and item_id not in live(c):  # type: ignore[operator]
        raise NotFound(f"client '{name}' has no live {what} '{item_id}'")
    require_admin(p)
    return c


T = TypeVar("T")


def change_key_set(name: str, c: Client, attempt: Callable[[Client, int | None], T],
                   retry: Callable[[TransactionFailed], bool] = lambda e: e.failed(0)) -> T:
    """Run ``attempt(client, key_version)`` — one transaction conditioned on the client's
    ``key_version`` (compare-and-set of its key set: API keys and SQS credentials share it) — and,
    when it fails in a way ``retry`` accepts (by default: index 0, the client's key set moved
    meanwhile), read the client again and let ``attempt`` decide again. 404 when the client is gone,
    503 after :data:`~lakeq.common.backoff.CAS_ATTEMPTS` contended rounds (the one
    compare-and-set loop, :func:`~lakeq.common.backoff.cas`). ``attempt`` raises the route's own answers
    (404 for a key no longer live, 409 for too many keys) from what it reads."""
    def round_(n: int) -> T | Retry:
        nonlocal c
        if n > 0:
            refreshed = ClientRepo.get(name)  # a concurrent rotation moved the key set: decide again
            if refreshed is None:
                raise NotFound(f"client '{name}' does not exist")
            c = refreshed
        version = None if c.key_version is None else int(c.key_version)
        try:
            return attempt(c, version)
        except TransactionFailed as e:
            if not retry(e):
                raise
        return RETRY
    def exhausted():
        if ClientRepo.get(name) is None:  # (read after the last lost round too: gone is 404, not 503)
            raise NotFound(f"client '{name}' does not exist")
        raise Unavailable("the client's keys are too contended; retry")
    return cas(round_, on_exhausted=exhausted)


def dead_letter_grant(p: Principal, client: Client, serves: list[str], dlt: str | None) -> str | None:
    """Who grants ``dlt`` as the dead-letter topic of something ``client`` consumes from the topics
    ``serves`` (issue 30.4): 400 when a served topic covers it (its dead letters would come back to
    it); the admin key names any other topic (``"admin"``); a client's key only the topic its
    client's own dead-letter setting names — one the admin chose for it; a consumer has no produce
    grant — else 403 (None: the check is made again at each dead-lettering)."""
    if dlt is None:
        return None
    for t in serves:
        if covers(t, dlt):
            raise BadRequest(f"dead-letter topic '{dlt}' is consumed as '{t}': its dead letters would loop back")
    if p.admin:
        return "admin"
    if client.dead_letter_topic != dlt:
        raise Forbidden(f"this key may not write to '{dlt}': a client's key names only the dead-letter topic "
                        "the admin set for it (PATCH /v1/clients), the admin key any topic")
    return None


def authorize(p: Principal, client: Client, topic: str) -> None:
    if not p.may_act_as(client.name):
        raise Forbidden(f"this key may not act for '{client.name}'")
    if not any(covers(g, topic) for g in client.topics):
        raise Forbidden(f"'{client.name}' is not granted topic '{topic}'")
