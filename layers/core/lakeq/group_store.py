"""Consumer-group state in DynamoDB (``GroupsTable``): read → pure transition → conditional write.

Every request to a group is one *attempt loop*: read the group item (strongly consistent), apply one
transition of :mod:`lakeq.groups` to the decoded :class:`~lakeq.groups.GroupState`, and put the new
state back conditionally on the ``version`` read (pynamodb ``VersionAttribute``: ``version = n`` →
``n + 1``, or ``attribute_not_exists`` for a new item). A conflict (another request wrote first)
re-runs the whole attempt on the fresh item, with exponential backoff and full jitter, at most
``ATTEMPTS`` times (then 503 ``busy``). So concurrent joins and heartbeats never lose an update,
and every generation is produced by exactly one successful write: two assignments for one
generation cannot both be stored.

A transition that raises a :class:`~lakeq.groups.GroupError` carrying ``.state`` (the state after
housekeeping — e.g. expired members removed) still has that state written (same conditional write;
a conflict retries the attempt) before the error is raised, mapped to the API's error.

Topic queue counts (``topic_queue_counts`` of the transitions) are read from ``TopicsTable`` with one
consistent ``BatchGetItem`` over the topics the members subscribe to (plus the joining member's),
so a queue count grown by ``PATCH /v1/topics/{topic}`` is seen by the next request. A member's topics
are stored *expanded*: a subscription to ``quotes`` is ``quotes`` and every descendant topic that
existed at (re-)join time (:func:`expand_topics`: a ``Scan`` of ``TopicsTable`` filtered by
``begins_with(name, "quotes/")`` — it reads the whole table, about ``size / 4 KB`` read units, see
``docs/design.md``). A child topic created later reaches the group at the member's next re-join or
at the next sweep (:func:`sweep`, once a minute), which re-expands what each member asked for.

Costs per request (on-demand, items < 4 KB of topics; the group item is ``g`` KB): read group
``ceil(g/4)`` RRU, read topics ``T`` RRU (T distinct subscribed topics), write ``ceil(g)`` WRU
(a conflict costs one more attempt). Member pulls read the group item only (no write).
"""
from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pynamodb.exceptions import DoesNotExist, PutError

from . import groups as g
from .errors import ApiError, NotFound, Unavailable
from .models import GroupModel, TopicModel

ATTEMPTS = 12
BACKOFF_BASE_S = 0.005
BACKOFF_CAP_S = 0.2

Transition = Callable[[g.GroupState, int, Mapping[str, int]], "tuple[g.GroupState, dict]"]


def _now_ms() -> int:
    return int(time.time() * 1000)


clock: Callable[[], int] = _now_ms


def api_error(e: g.GroupError) -> ApiError:
    return ApiError(e.message, code=e.code, status=e.status)


# ------------------------------------------------------------------------------------------ topics
def queue_counts(topics: Iterable[str]) -> dict[str, int]:
    """``{topic: queues}`` for the existing ones of ``topics``: one consistent BatchGetItem (per 100)."""
    names = sorted(set(topics))
    out: dict[str, int] = {}
    for i in range(0, len(names), 100):
        for t in TopicModel.batch_get(names[i:i + 100], consistent_read=True):
            out[t.name] = int(t.queues)
    return out


def children(topic: str) -> list[str]:
    """Every descendant of ``topic``: a Scan of TopicsTable filtered by ``begins_with(name, topic/)``.
    The filter does not reduce the read units: the whole table is read (``size / 4 KB`` RRU,
    eventually consistent: half that). Fine for a topics table of a few thousand items."""
    return sorted(t.name for t in TopicModel.scan(TopicModel.name.startswith(topic + "/")))


def expand_topics(topics: Iterable[str], all_topics: Iterable[str] | None = None) -> list[str]:
    """Each topic plus its descendants (a subscription to a parent covers its children)."""
    out = set()
    names = None if all_topics is None else sorted(all_topics)
    for t in topics:
        out.add(t)
        if names is None:
            out.update(children(t))
        else:
            out.update(n for n in names if n.startswith(t + "/"))
    return sorted(out)


def _member_topics(st: g.GroupState) -> set[str]:
    return {t for m in st.members.values() for t in m.topics}


# ------------------------------------------------------------------------------------------- store
class Conflict(Exception):
    """The conditional write lost against a concurrent one."""


def _encode(st: g.GroupState) -> str:
    return json.dumps(st.to_dict(), separators=(",", ":"), sort_keys=True)


class GroupRepo:
    @staticmethod
    def get(group: str) -> GroupModel | None:
        try:
            return GroupModel.get(group, consistent_read=True)
        except DoesNotExist:
            return None

    @staticmethod
    def decode(group: str, item: GroupModel | None) -> tuple[g.GroupState, dict[str, list[str]]]:
        if item is None:
            return g.new_group(group), {}
        return g.GroupState.from_dict(json.loads(item.state)), json.loads(item.subscriptions or "{}")

    @staticmethod
    def load(group: str) -> g.GroupState:
        return GroupRepo.decode(group, GroupRepo.get(group))[0]

    @staticmethod
    def save(group: str, item: GroupModel | None, st: g.GroupState, subs: Mapping[str, list[str]],
             now: int) -> None:
        """Conditional put on the version read (``item`` None: the item must not exist yet)."""
        subs = {m: list(ts) for m, ts in sorted(subs.items()) if m in st.members}
        if item is None:
            item = GroupModel(group)
        item.state = _encode(st)
        item.subscriptions = json.dumps(subs, separators=(",", ":"), sort_keys=True)
        item.generation = st.generation
        item.members = len(st.members)
        item.updated_at = now
        try:
            item.save()
        except PutError as e:
            if getattr(e, "cause_response_code", None) == "ConditionalCheckFailedException":
                raise Conflict() from None
            raise

    @classmethod
    def apply(cls, group: str, transition: Transition, extra_topics: Iterable[str] = (),
              subscribe: tuple[str, list[str]] | None = None, attempts: int = ATTEMPTS) -> dict:
        """Run one request: read, ``transition(state, now_ms, counts)``, conditional write; retry the
        whole attempt on a conflict (bounded, exponential backoff with full jitter). A GroupError
        carrying ``.state`` has that state saved, then is raised as the API's error.
        ``subscribe`` = (member id or None for the response's ``member_id``, requested topics)."""
        extra = list(extra_topics)
        for attempt in range(attempts):
            item = cls.get(group)
            state, subs = cls.decode(group, item)
            now = clock()
            counts = queue_counts(_member_topics(state) | set(extra))
            before = _encode(state)
            try:
                new, resp = transition(state, now, counts)
            except g.GroupError as e:
                if e.state is not None and _encode(e.state) != before:
                    try:
                        cls.save(group, item, e.state, subs, now)
                    except Conflict:
                        _backoff(attempt)
                        continue
                raise api_error(e) from None
            if subscribe is not None:
                mid = subscribe[0] or resp.get("member_id")
                subs = {**subs, mid: list(subscribe[1])}
            if _encode(new) != before or subscribe is not None:
                try:
                    cls.save(group, item, new, subs, now)
                except Conflict:
                    _backoff(attempt)
                    continue
            return resp
        raise Unavailable("the group is too contended; retry the request")


def _backoff(attempt: int) -> None:
    time.sleep(random.uniform(0, min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2 ** attempt)))


# ------------------------------------------------------------------------------------ member pulls
def member_queues(group: Any, member_id: str, topic: str) -> set[int]:
    """``service.pull`` with ``member_id``: the member's servable queues of ``topic`` (one consistent
    GetItem, no write: a pull is no sign of life). Unknown or expired member → 404 ``unknown_member``."""
    st = GroupRepo.load(group.name)
    try:
        qs = g.servable_queues(st, member_id, clock())
    except g.UnknownMember as e:
        raise NotFound(e.message, code="unknown_member") from None
    return {i for t, i in qs if t == topic}


# ------------------------------------------------------------------------------------------- sweep
def sweep(now_ms: int | None = None) -> dict:
    """The scheduled expiry: for every group item (a Scan of GroupsTable: its whole size in RRU,
    eventually consistent), expire silent members and re-expand each member's requested topics
    against the current topics (one Scan of TopicsTable per sweep), then write back conditionally
    (retrying that group on a conflict) when anything changed. Returns counts for the log."""
    all_topics = {t.name: int(t.queues) for t in TopicModel.scan()}
    stats = {"groups": 0, "expired": 0, "changed": 0}
    for item in GroupModel.scan():
        stats["groups"] += 1
        group = item.group
        for attempt in range(ATTEMPTS):
            if attempt:
                item = GroupRepo.get(group)
                if item is None:
                    break
            state, subs = GroupRepo.decode(group, item)
            now = now_ms if now_ms is not None else clock()
            before = _encode(state)
            st, resp = g.expire(state, now, all_topics)
            expired = len(resp["expired"])
            for mid, asked in sorted(subs.items()):
                if mid in st.members:
                    topics = expand_topics(asked, all_topics)
                    if topics != st.members[mid].topics:
                        st, _ = g.topics_changed(st, mid, topics, now, all_topics)
            if _encode(st) == before:
                break
            try:
                GroupRepo.save(group, item, st, subs, now)
            except Conflict:
                _backoff(attempt)
                continue
            stats["expired"] += expired
            stats["changed"] += 1
            break
    return stats
