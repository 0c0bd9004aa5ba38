"""Use cases of the consumer-group membership routes (API.md "Consumer group membership").

Check order (API.md): 401 (key) → 400 (path names, body syntax) → 404 (group not a registered
consumer, a topic missing, the member unknown or expired → ``unknown_member``) → 403 (the key is
neither the group's nor the admin key; a topic not granted to the group) → state-dependent answers
(409 ``stale_generation``, a generation newer than the group's → 400). The state machine is
:mod:`lakeq.rebalance.state`; storage and retries are :mod:`lakeq.store.groups`.
"""
from __future__ import annotations

from lakeq.admin.auth import Principal, authorize, client_or_404
from lakeq.common.errors import BadRequest, Forbidden, NotFound
from lakeq.common.names import check_name
from lakeq.contract.validation import json_body
from lakeq.rebalance import state as g
from lakeq.store import groups as group_store
from lakeq.store.groups import GroupRepo, expand_topics, servable
from lakeq.store.records import Client

MAX_TOPICS = 100  # topics a join may ask for
MAX_MEMBER_TOPICS = group_store.MAX_MEMBER_TOPICS  # once parents are expanded to their descendants


def _syntax(check, *args):
    """Run one of the state machine's own validators (the same rules the transitions apply); its
    errors are ApiErrors already."""
    return check(*args)


def _member_or_403(p: Principal, client: Client, member_id: str) -> None:
    """A key that may not act for the group: 404 if the member is unknown (404 comes before 403),
    else 403. Nothing is written for such a key."""
    if p.may_act_as(client.name):
        return
    servable(client.name, member_id)  # g.UnknownMember (404) first
    raise Forbidden(f"this key may not act for group '{client.name}'")


def _group(p: Principal, group: str) -> Client:
    return client_or_404(group, "consumer")


def join(p: Principal, group: str, raw: str | None) -> dict:
    check_name(group, "group")
    body = json_body(raw)
    member_id = body.get("member_id")
    if member_id is not None:
        _syntax(g._check_member_id, member_id)
    topics = _syntax(g._check_topics, body.get("topics"))
    if len(topics) > MAX_TOPICS:
        raise BadRequest(f"topics must list at most {MAX_TOPICS} topics")
    owned = _syntax(g._check_queues, body.get("owned"))
    timeout = _syntax(g._check_timeout, body.get("session_timeout_ms"))
    client = _group(p, group)
    existing = group_store.queue_counts(topics)  # one consistent BatchGetItem, not one GetItem each
    for t in topics:
        if t not in existing:
            raise NotFound(f"topic '{t}' does not exist")
    for t in topics:
        authorize(p, client, t)
    expanded = expand_topics(topics)
    if len(expanded) > MAX_MEMBER_TOPICS:
        raise BadRequest(f"topics cover {len(expanded)} topics with their descendants; "
                         f"a member may subscribe to at most {MAX_MEMBER_TOPICS}")

    def step(st, now, counts):
        return g.join(st, member_id, expanded, owned, timeout, now, counts)

    def check(new):
        if len(new.members) > group_store.MAX_MEMBERS:
            raise group_store.GroupFull(
                f"group '{group}' has {group_store.MAX_MEMBERS} members, the most a group may have")

    return GroupRepo.apply(group, step, extra_topics=expanded, subscribe=(member_id, topics),
                           actor=member_id, check=check)


def heartbeat(p: Principal, group: str, member_id: str, raw: str | None) -> dict:
    check_name(group, "group")
    check_name(member_id, "member_id")
    body = json_body(raw)
    generation = _syntax(g._check_generation, body.get("generation"))
    owned = None if body.get("owned") is None else _syntax(g._check_queues, body.get("owned"))
    client = _group(p, group)
    _member_or_403(p, client, member_id)
    return GroupRepo.apply(group, lambda st, now, counts: g.heartbeat(st, member_id, generation, owned, now, counts),
                           actor=member_id)


def sync(p: Principal, group: str, member_id: str, raw: str | None) -> dict:
    check_name(group, "group")
    check_name(member_id, "member_id")
    generation = _syntax(g._check_generation, json_body(raw).get("generation"))
    client = _group(p, group)
    _member_or_403(p, client, member_id)
    return GroupRepo.apply(group, lambda st, now, counts: g.sync(st, member_id, generation, now, counts),
                           actor=member_id)


def leave(p: Principal, group: str, member_id: str) -> None:
    check_name(group, "group")
    check_name(member_id, "member_id")
    client = _group(p, group)
    _member_or_403(p, client, member_id)
    GroupRepo.apply(group, lambda st, now, counts: g.leave(st, member_id, now, counts), actor=member_id)


def describe(p: Principal, group: str) -> dict:
    """Expires silent members first (a request to the group), then describes it."""
    check_name(group, "group")
    client = _group(p, group)
    if not p.may_act_as(client.name):
        raise Forbidden(f"this key may not act for group '{client.name}'")

    def step(st, now, counts):
        new, _ = g.expire(st, now, counts)
        return new, g.describe(new)

    return GroupRepo.apply(group, step)
