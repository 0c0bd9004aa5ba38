"""Push endpoints' use cases behind the routes (issue 17): register, show, pause, resume, rotate the
signing secret, delete — of a subscription's endpoint (``/v1/subscriptions/{id}/push``) and of a
consumer group's (``/v1/groups/{group}/push``). The deliverer is :mod:`lakeq.push.delivery` (what
PushFunction loads; this module is not).

Check order (API.md): 401 → 400 (syntax) → 404 (named things) → 403 (the key may not act) → state.
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass, is_dataclass, replace

from lakeq.admin.auth import Principal, authorize, client_or_404, topic_or_404
from lakeq.common import clock
from lakeq.common.errors import BadRequest, Conflict, Forbidden, NotFound, below_limit
from lakeq.common.names import check_name, is_name
from lakeq.contract import push as contract
from lakeq.contract import validation as v
from lakeq.push import transport
from lakeq.push.delivery import allow_loopback
from lakeq.push.delivery import secrets_of as _secrets
from lakeq.store.push import GroupPushRepo, PushRepo

log = logging.getLogger("lakeq.push.service")
ROTATE_KEEP_MAX_MS, ROTATE_KEEP_DEFAULT_MS = 7 * 86_400_000, 86_400_000
# push endpoints one client may have: its subscriptions' and its own as a consumer group (paused
# ones count); a PushFunction run serves each client's with at most delivery.PER_CLIENT_WORKERS threads
MAX_ENDPOINTS_PER_CLIENT = 20


@dataclass(frozen=True)
class Kind:
    """What owns an endpoint: a subscription (``PushRepo``) or a consumer group (``GroupPushRepo``)."""

    what: str                 # "subscription" / "group": the view's key and the messages' wording
    repo: type[PushRepo]
    group: bool


SUBSCRIPTION = Kind("subscription", PushRepo, False)
GROUP = Kind("group", GroupPushRepo, True)


def _owner(k: Kind, p: Principal, name: str, need_push: bool = True):
    """The subscription / group item, in API.md's order: 404, 403, then 404 without an endpoint."""
    if k.group:
        item = client_or_404(name, "consumer")  # 404 (the cached item: who may act; the repo reads it fresh)
        if not p.may_act_as(item.name):
            raise Forbidden(f"this key may not act for '{item.name}'")
        item = k.repo.get(name)
        if item is None or item.role != "consumer":
            raise NotFound(f"consumer group '{name}' does not exist")
    else:
        item = k.repo.get(name) if is_name(name) else None
        if item is None:
            raise NotFound(f"subscription '{name}' does not exist")
        if not p.may_act_as(item.subscriber):
            raise Forbidden(f"this key may not act for '{item.subscriber}'")
    if need_push and item.push is None:
        raise NotFound(f"{k.what} '{name}' has no push endpoint")
    return item


def _as_written(item, **changes):
    """``item`` as the write just made left it, for the answer: a group's record (frozen) copied
    with ``changes``, a subscription item changed in memory (nothing is written back from either)."""
    if is_dataclass(item):
        return replace(item, **changes)
    for name, value in changes.items():
        setattr(item, name, value)
    return item


def _key(k: Kind, item) -> str:
    return item.name if k.group else item.id


def _new_secret() -> str:
    return contract.new_secret()


def view(s, now: int | None = None, k: Kind = SUBSCRIPTION) -> dict:
    now = clock.now() if now is None else now
    settings = json.loads(s.push)
    last = json.loads(s.push_state) if s.push_state else {}
    return {k.what: _key(k, s), **settings, "paused": bool(s.push_paused),
            "secrets": [{"created_at": x["created_at"], "expires_at": x.get("expires_at")}
                        for x in _secrets(s.push_secrets, now)],
            "state": {"last_status": last.get("last_status"), "last_attempt_at": last.get("last_attempt_at"),
                      "next_attempt_at": last.get("next_attempt_at"), "failures": int(s.push_failures or 0),
                      "delivered": int(s.push_delivered or 0), "dead_lettered": int(s.push_dead_lettered or 0)}}


def _check(k: Kind, name: str) -> None:
    check_name(name, "group" if k.group else "subscription id")


def put(p: Principal, sub_id: str, raw: str | None, k: Kind = SUBSCRIPTION) -> tuple[dict, int]:
    """``PUT /v1/subscriptions/{id}/push`` / ``PUT /v1/groups/{group}/push``: register (201, with the
    signing secret, shown only here) or replace the settings (200; the secrets, pause and state are
    kept). A group's names its ``topic`` (404 when missing, 403 when the group is not granted it);
    a broadcasting group has no push endpoint (400: each instance has its own offsets). Of two
    concurrent first registrations one wins (its 201 shows the stored secret); the other answers
    409 ``push_registered`` and changes nothing."""
    _check(k, sub_id)
    settings = contract.push_settings(v.json_body(raw), allow_loopback(), group=k.group)
    if k.group:  # every 404 before any 403 (the topic, as a pull checks it first, then the group)
        topic_or_404(settings["topic"])
    s = _owner(k, p, sub_id, need_push=False)
    if k.group:
        authorize(p, s, settings["topic"])
        if s.mode == "broadcasting":
            raise BadRequest("a broadcasting group has no push endpoint (each instance keeps its own offsets); "
                             "use a clustering group")
    # the name lookup only once the key may act for the endpoint (a lookup is no syntax check: a key
    # without the subscription must not learn how a name resolves, nor make this function wait on it)
    refusal = transport.check_host(settings["url"], allow_loopback())
    if refusal is not None:
        raise BadRequest(f"'url': {refusal}")
    encoded = contract.encode(settings)
    owner = s.name if k.group else s.subscriber
    if s.push is None:
        _below_limit(owner)
    # not backoff.cas: a lost write means the endpoint changed or went, and the next read decides (404, 409
    # or the new state) — a rare race between requests about one endpoint: 5 rounds, no wait
    for _ in range(5):  # a group's write is conditioned on the settings read: read again when they changed
        now = clock.now()
        new = s.push is None
        secret = _new_secret() if new else None
        stored = json.dumps([{"secret": secret, "created_at": now, "expires_at": None}]) if new else None
        if k.repo.put(sub_id, encoded, stored, s.push, bool(s.push_paused), owner=owner,
                      limit=MAX_ENDPOINTS_PER_CLIENT):
            break
        s = _owner(k, p, sub_id, need_push=False)
        if new and s.push is not None:  # a concurrent first registration wrote its secret first
            raise Conflict(f"the {k.what}'s push endpoint was registered by a concurrent request; GET it, "
                           "PUT again to replace its settings, or rotate its secret", code="push_registered")
        if new:  # the count is the registration's condition: another registration took the last place
            _below_limit(owner)
    else:
        raise Conflict("the endpoint changed meanwhile; retry")  # pragma: no cover
    s = _as_written(s, push=encoded, **({} if not new else {
        "push_secrets": stored, "push_paused": False, "push_state": None, "push_failures": None,
        "push_delivered": None, "push_dead_lettered": None}))
    out = view(s, now, k)
    if new:
        out["secret"] = secret
    return out, 201 if new else 200


def _below_limit(owner: str) -> None:
    """409 ``too_many_push_endpoints`` when ``owner`` has its most endpoints. The registration's
    transaction checks the same count on the client item, so concurrent registrations cannot pass
    the limit together; this read gives the answer its reason. 404 when ``owner`` is gone (the
    registration's condition needs its item)."""
    below_limit(PushRepo.endpoints_of(owner), MAX_ENDPOINTS_PER_CLIENT, f"consumer group '{owner}' does not exist",
                f"'{owner}' has {MAX_ENDPOINTS_PER_CLIENT} push endpoints, the most a client may have; "
                "delete one first", "too_many_push_endpoints")


def get(p: Principal, sub_id: str, k: Kind = SUBSCRIPTION) -> dict:
    _check(k, sub_id)
    return view(_owner(k, p, sub_id), None, k)


def delete(p: Principal, sub_id: str, k: Kind = SUBSCRIPTION) -> None:
    _check(k, sub_id)
    for _ in range(5):  # False: gone (the next read answers 404) or, for a group, changed meanwhile (not cas: see put)
        s = _owner(k, p, sub_id)
        if k.repo.remove(sub_id, s.push, owner=s.name if k.group else s.subscriber):
            return
    raise Conflict("the endpoint changed meanwhile; retry")  # pragma: no cover


def pause(p: Principal, sub_id: str, paused: bool, k: Kind = SUBSCRIPTION) -> dict:
    """Pause / resume; a group's endpoint leaves / rejoins its topic's registry in the same transaction."""
    _check(k, sub_id)
    for _ in range(5):  # a lost write: changed or gone, the next read decides (not cas: see put)
        s = _owner(k, p, sub_id)
        if k.repo.set_paused(sub_id, paused, s.push):
            return view(_as_written(s, push_paused=paused), None, k)
    raise Conflict("the endpoint changed meanwhile; retry")  # pragma: no cover


def rotate(p: Principal, sub_id: str, raw: str | None, k: Kind = SUBSCRIPTION) -> dict:
    """``POST …/push/secret`` ``{"previous_valid_ms"}`` (0–7 days, default 1 day):
    a new secret (shown only here) signs from now on; the newest previous one stays valid (and
    signs too) for ``previous_valid_ms``; older ones end."""
    _check(k, sub_id)
    body = v.json_body(raw or "{}")
    if set(body) - {"previous_valid_ms"}:
        raise BadRequest("a rotation takes only 'previous_valid_ms'")
    keep = body.get("previous_valid_ms", ROTATE_KEEP_DEFAULT_MS)
    if isinstance(keep, bool) or not isinstance(keep, int) or not 0 <= keep <= ROTATE_KEEP_MAX_MS:
        raise BadRequest(f"'previous_valid_ms' must be an integer from 0 to {ROTATE_KEEP_MAX_MS}")
    for _ in range(5):  # a lost write: changed or gone, the next read decides (not cas: see put)
        s = _owner(k, p, sub_id)
        now = clock.now()
        old = _secrets(s.push_secrets, now)
        prev = [] if not old or keep == 0 else [{**old[0], "expires_at": min(now + keep, old[0].get("expires_at")
                                                                              or now + keep)}]
        secret = _new_secret()
        new = json.dumps([{"secret": secret, "created_at": now, "expires_at": None}] + prev)
        if k.repo.set_secrets(sub_id, s.push_secrets, new):
            return {**view(_as_written(s, push_secrets=new), now, k), "secret": secret}
    raise Conflict("the endpoint's secrets changed meanwhile; retry")  # pragma: no cover
