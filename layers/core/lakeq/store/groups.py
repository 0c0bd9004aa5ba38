"""Consumer-group state in DynamoDB: a *header* item per group (``GroupsTable``) and one small
*liveness* item per member (``GroupMembersTable``); read → pure transition → conditional write(s).

**Header** (:class:`~lakeq.store.models.GroupModel`): the group's :class:`~lakeq.rebalance.state.GroupState` and each
member's topics as asked, in the compact form of :mod:`lakeq.rebalance.codec` (topic names once, distinct
topic sets once, one small object per member; zlib-compressed above 16 KB). Written only
conditionally on the ``version`` read (pynamodb ``VersionAttribute``), so every generation is
produced by exactly one successful write: two assignments for one generation cannot both be stored.
The header also records each member's ``last_heartbeat`` and last generation sent *as of the last
header write* (its lease).

**Liveness** (:class:`~lakeq.store.models.GroupMemberModel`, ``group`` + ``member``): the member's newest
heartbeat ``lh`` and newest generation sent ``gen``, written conditionally on its own version ``v``.
A member's effective values are the larger of the header's and its item's. A request whose
transition changes nothing but the acting member's liveness (the common heartbeat, a repeated sync)
writes only this ~60-byte item; anything else (a join, a rebalance, a state change, an expiry)
rewrites the header.

Every request is one *attempt*: GetItem the header (consistent); GetItem the acting member's item;
if some member looks silent by the header's lease (``now - lh > session timeout``), Query all the
group's liveness items (consistent) before deciding anything, and write the header back even if
nothing else changed (a lease renewal: the next one is due about two thirds of a session timeout
later, whatever the group's size). A member removed from the header has its liveness item deleted
in the same ``TransactWriteItems`` as the header write (the first 99; conditional on the item's
version as read, so a heartbeat that landed after the read cancels the removal and the attempt
re-runs on fresh data); further deletes follow the transaction (orphans are harmless: only members
in the header count, and the TTL clears them). A conflict on any conditional write re-runs the
whole attempt with exponential backoff and full jitter, at most ``ATTEMPTS`` times (then 503
``busy``). A pull (:func:`member_queues`) only reads.

A transition that raises a :class:`~lakeq.rebalance.state.GroupError` carrying ``.state`` (the state after
housekeeping — e.g. expired members removed) still has that state written, then is raised.

Limits (checked before anything is written): ``MAX_MEMBERS`` members per group (409
``group_full``), ``lakeq.groups.service`` caps topics per member, and a header whose stored form
would exceed ``MAX_HEADER_BYTES`` (well below DynamoDB's 400 KB item limit) is refused with 409
``group_too_large``.

Topic queue counts (``topic_queue_counts`` of the transitions) are read from ``TopicsTable`` with one
consistent ``BatchGetItem`` over the topics the members subscribe to (plus the joining member's),
so a queue count grown by ``PATCH /v1/topics/{topic}`` is seen by the next request. A member's topics
are stored *expanded*: a subscription to ``quotes`` is ``quotes`` and every descendant topic that
existed at (re-)join time (:func:`expand_topics`: a ``Scan`` of ``TopicsTable`` filtered by
``begins_with(name, "quotes/")`` — it reads the whole table, about ``size / 4 KB`` read units, see
``docs/design.md``). A child topic created later reaches the group at the member's next re-join or
at the next sweep (:func:`sweep`, once a minute), which re-expands what each member asked for.
"""
from __future__ import annotations

import copy
import json
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from pynamodb.exceptions import DeleteError, DoesNotExist, PutError

from lakeq.common import backoff
from lakeq.common import clock as _clock
from lakeq.common.errors import ApiError, LakeqError, NotFound, Unavailable, counted
from lakeq.rebalance import codec
from lakeq.rebalance import state as g
from lakeq.store.models import GroupMemberModel, GroupModel, TopicModel
from lakeq.store.queue_log import batch_get_models
from lakeq.store.writes import CONDITION_FAILED, TransactionFailed, conditional_failed, transact

log = logging.getLogger("lakeq.store.groups")

# the bound of the one compare-and-set loop (lakeq.common.backoff.cas) here, not CAS_ATTEMPTS: a round is a
# whole group request (the header, up to 350 KB, a liveness Query, a BatchGetItem of queue counts and a
# transaction), waiting up to 5-200 ms between rounds; 12 rounds wait at most 1.3 s in all
ATTEMPTS = 12
BACKOFF_BASE_S = 0.005
BACKOFF_CAP_S = 0.2
MAX_MEMBERS = 1000
MAX_MEMBER_TOPICS = 1000  # a member's topics, expanded to descendants (group_service checks joins)
MAX_HEADER_BYTES = 350_000  # the stored state; DynamoDB's item limit is 400 KB
TRANSACT_DELETES = 99  # + the header: DynamoDB's 100 items per transaction
LIVENESS_TTL_S = 7 * 24 * 3600

Transition = Callable[[g.GroupState, int, Mapping[str, int]], "tuple[g.GroupState, dict]"]



class GroupFull(ApiError):
    status, code = 409, "group_full"


class GroupTooLarge(ApiError):
    status, code = 409, "group_too_large"


# ------------------------------------------------------------------------------------------ topics
def queue_counts(topics: Iterable[str]) -> dict[str, int]:
    """``{topic: queues}`` for the existing ones of ``topics``: one consistent BatchGetItem (per 100)."""
    names = sorted(set(topics))
    out: dict[str, int] = {}
    for i in range(0, len(names), 100):
        for t in batch_get_models(TopicModel, names[i:i + 100], consistent=True):
            if t.deleted_at is None:  # (a tombstone: the topic was deleted)
                out[t.name] = int(t.queues)
    return out


def children(topic: str) -> list[str]:
    """Every descendant of ``topic``: a Scan of TopicsTable filtered by ``begins_with(name, topic/)``.
    The filter does not reduce the read units: the whole table is read (``size / 4 KB`` RRU,
    eventually consistent: half that). Fine for a topics table of a few thousand items."""
    return sorted(t.name for t in TopicModel.scan(TopicModel.name.startswith(topic + "/")
                                                  & TopicModel.deleted_at.does_not_exist()))


def expand_topics(topics: Iterable[str], all_topics: Iterable[str] | None = None) -> list[str]:
    """Each topic plus its descendants (a subscription to a parent covers its children)."""
    out = set()
    topics = list(topics)
    names = None if all_topics is None else sorted(all_topics)
    if names is None and len(topics) > 1:  # one Scan for all (a Scan costs the whole table anyway)
        names = sorted(t.name for t in TopicModel.scan(TopicModel.deleted_at.does_not_exist(),
                                                       attributes_to_get=["name"]))
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
class WriteLost(LakeqError):
    """A conditional write lost against a concurrent one."""


def _encode(st: g.GroupState) -> str:
    return json.dumps(st.to_dict(), separators=(",", ":"), sort_keys=True)


def _member_core(m: g.Member) -> tuple:
    return (m.topics, m.state, m.owned, m.held, m.target, m.session_timeout_ms, m.sync_deadline, m.joined_at)


def _same_core(a: g.GroupState, subs_a: Mapping[str, list[str]], b: g.GroupState,
               subs_b: Mapping[str, list[str]]) -> bool:
    """Whether ``a`` and ``b`` store the same header apart from the liveness fields (last heartbeat,
    last generation sent). Lists are compared as they are (the transitions keep them sorted): a
    false "different" only costs a header write."""
    if (a.group, a.generation, a.assignor, a.queue_counts, a.last_rebalance_at, a.last_rebalance_reason) != (
            b.group, b.generation, b.assignor, b.queue_counts, b.last_rebalance_at, b.last_rebalance_reason):
        return False
    if (a.plan is None) != (b.plan is None) or (a.plan is not None and a.plan.to_dict() != b.plan.to_dict()):
        return False
    if a.members.keys() != b.members.keys():
        return False
    if any(_member_core(m) != _member_core(b.members[mid]) for mid, m in a.members.items()):
        return False
    return all(sorted(subs_a.get(mid) or ()) == sorted(subs_b.get(mid) or ()) for mid in a.members)


def _liveness(m: g.Member) -> tuple[int, int]:
    return m.last_heartbeat, m.generation


def _silent(st: g.GroupState, now: int) -> bool:
    return any(now - m.last_heartbeat > m.session_timeout_ms for m in st.members.values())


@dataclass
class View:
    """One read of a group: the header as stored, the liveness items read (``None``: read, absent),
    and the effective state (header merged with those items)."""

    group: str
    header: GroupModel | None
    stored: g.GroupState
    subs: dict[str, list[str]]
    items: dict[str, GroupMemberModel | None] = field(default_factory=dict)
    queried: bool = False
    state: g.GroupState | None = None


class GroupRepo:
    @staticmethod
    def get(group: str) -> GroupModel | None:
        try:
            return GroupModel.get(group, consistent_read=True)
        except DoesNotExist:
            return None

    @staticmethod
    def get_member(group: str, member_id: str) -> GroupMemberModel | None:
        try:
            return GroupMemberModel.get(group, member_id, consistent_read=True)
        except DoesNotExist:
            return None

    @staticmethod
    def decode(group: str, item: GroupModel | None) -> tuple[g.GroupState, dict[str, list[str]]]:
        if item is None:
            return g.new_group(group), {}
        return codec.unpack(item.state, item.state_z, item.subscriptions, group)

    @classmethod
    def read(cls, group: str, now: int, actor: str | None = None, full: bool = False) -> View:
        """Header, the actor's liveness item, and every liveness item if a member looks silent
        (or ``full``)."""
        header = cls.get(group)
        stored, subs = cls.decode(group, header)
        v = View(group, header, stored, subs)
        if actor is not None and actor in stored.members:
            v.items[actor] = cls.get_member(group, actor)
        if full or _silent(stored, now):
            v.items = {mid: None for mid in stored.members}
            for it in GroupMemberModel.query(group, consistent_read=True):
                if it.member in v.items:
                    v.items[it.member] = it
            v.queried = True
        # the transitions never mutate their input: share what the items do not change
        st = copy.copy(stored)
        st.members = dict(stored.members)
        for mid, it in v.items.items():
            m = st.members.get(mid)
            if it is None or m is None:
                continue
            lh, gen = max(m.last_heartbeat, int(it.lh or 0)), max(m.generation, int(it.gen or 0))
            if (lh, gen) != (m.last_heartbeat, m.generation):
                m = st.members[mid] = copy.copy(m)
                m.last_heartbeat, m.generation = lh, gen
        v.state = st
        return v

    @classmethod
    def load(cls, group: str, now: int | None = None) -> g.GroupState:
        """The effective state: the header merged with every liveness item (a Query; not used on
        the request path, where only the items needed are read)."""
        return cls.read(group, _clock.now() if now is None else now, full=True).state

    @classmethod
    def save(cls, v: View, st: g.GroupState, subs: Mapping[str, Iterable[str]], now: int) -> None:
        """Write what changed between ``v`` and ``st``: the header (conditional on its version, in a
        transaction with the deletes of removed members' liveness items) when anything but liveness
        changed or a silent-looking member's lease must be renewed; else the changed liveness items
        (each conditional on its version)."""
        subs = {m: sorted(ts) for m, ts in subs.items() if m in st.members}
        renew = v.queried and any(
            mid in v.stored.members and _liveness(m) != _liveness(v.stored.members[mid])
            for mid, m in st.members.items())
        if renew or not _same_core(st, subs, v.stored, v.subs):
            cls._write_header(v, st, subs, now)
            return
        for mid, m in sorted(st.members.items()):
            if _liveness(m) == _liveness(v.state.members[mid]):
                continue
            old = v.items[mid] if mid in v.items else GroupRepo.get_member(v.group, mid)
            if old is not None:
                m = g.Member(mid, [], last_heartbeat=max(m.last_heartbeat, int(old.lh or 0)),
                             generation=max(m.generation, int(old.gen or 0)))
            item = GroupMemberModel(v.group, mid, lh=m.last_heartbeat, gen=m.generation,
                                    expires_at=datetime.fromtimestamp(now // 1000 + LIVENESS_TTL_S, timezone.utc))
            if old is not None:
                item.v = old.v
            try:
                item.save()
            except PutError as e:
                if conditional_failed(e):
                    raise WriteLost() from None
                raise

    @staticmethod
    def _header_item(v: View, st: g.GroupState, subs: Mapping[str, Iterable[str]], now: int) -> GroupModel:
        text, z = codec.pack(st, subs)
        size = len(text.encode("utf-8")) if text is not None else len(z)
        if size > MAX_HEADER_BYTES:
            raise GroupTooLarge(
                f"group '{v.group}' would need {size} bytes of state (at most {MAX_HEADER_BYTES}): "
                "fewer members or fewer distinct topics per member")
        item = v.header if v.header is not None else GroupModel(v.group)
        item.state, item.state_z, item.subscriptions = text, z, None
        item.generation = st.generation
        item.members = len(st.members)
        item.updated_at = now
        return item

    @classmethod
    def _write_header(cls, v: View, st: g.GroupState, subs: Mapping[str, Iterable[str]], now: int) -> None:
        item = cls._header_item(v, st, subs, now)
        removed = sorted(set(v.stored.members) - set(st.members))
        deletes = []
        for mid in removed:
            d = GroupMemberModel(v.group, mid)
            if mid in v.items:  # read (or read absent): delete only if untouched since
                old = v.items[mid]
                if old is not None:
                    d.v = old.v
                deletes.append((d, True))
            else:  # removed without a liveness read (leave / missed deadline): no heartbeat saves it
                deletes.append((d, False))
        first, rest = deletes[:TRANSACT_DELETES], deletes[TRANSACT_DELETES:]
        try:
            if not first:
                item.save()
            else:
                def build(t):
                    for d, conditional in first:
                        t.delete(d, add_version_condition=conditional)
                    t.save(item)
                transact(build)
        except PutError as e:
            if conditional_failed(e):
                raise WriteLost() from None
            raise
        except TransactionFailed as e:
            if any(r in (CONDITION_FAILED, "TransactionConflict") for r in e.reasons):
                raise WriteLost() from None
            raise
        for d, conditional in rest:  # best effort: an orphan item is ignored, and its TTL clears it
            try:
                d.delete(add_version_condition=conditional)
            except DeleteError:
                pass

    @classmethod
    def apply(cls, group: str, transition: Transition, extra_topics: Iterable[str] = (),
              subscribe: tuple[str, list[str]] | None = None, attempts: int = ATTEMPTS,
              actor: str | None = None, check: Callable[[g.GroupState], None] | None = None) -> dict:
        """Run one request: read, ``transition(state, now_ms, counts)``, conditional write(s); retry
        the whole attempt on a conflict (bounded, exponential backoff with full jitter). A GroupError
        carrying ``.state`` has that state saved, then is re-raised (it is an ApiError).
        ``subscribe`` = (member id or None for the response's ``member_id``, requested topics);
        ``actor`` = the member acting (its liveness item is read); ``check(new_state)`` may raise an
        ApiError to refuse the result (nothing written)."""
        extra = list(extra_topics)

        def attempt(_n: int):
            now = _clock.now()
            v = cls.read(group, now, actor)
            counts = queue_counts(_member_topics(v.state) | set(extra))
            try:
                new, resp = transition(v.state, now, counts)
            except g.GroupError as e:
                if e.state is not None:
                    try:
                        cls.save(v, e.state, v.subs, now)
                    except WriteLost:
                        return backoff.RETRY
                raise
            subs = v.subs
            if subscribe is not None:
                mid = subscribe[0] or resp.get("member_id")
                subs = {**subs, mid: sorted(subscribe[1])}
            if check is not None:
                check(new)
            try:
                cls.save(v, new, subs, now)
            except WriteLost:
                return backoff.RETRY
            return resp
        return backoff.cas(attempt, attempts, _busy, BACKOFF_BASE_S, BACKOFF_CAP_S)


def _busy():
    raise Unavailable("the group is too contended; retry the request")


# ------------------------------------------------------------------------------------ member pulls
def servable(group: str, member_id: str, now: int | None = None) -> list[g.Queue]:
    """The member's servable queues (reads only: the header, and the member's liveness item only
    when the header's lease says it is silent). Unknown or expired member → ``g.UnknownMember``."""
    now = _clock.now() if now is None else now
    st, _ = GroupRepo.decode(group, GroupRepo.get(group))
    m = st.members.get(member_id)
    if m is not None and now - m.last_heartbeat > m.session_timeout_ms:
        it = GroupRepo.get_member(group, member_id)
        if it is not None:
            m.last_heartbeat = max(m.last_heartbeat, int(it.lh or 0))
    return g.servable_queues(st, member_id, now)


def member_queues(group: Any, member_id: str, topic: str) -> set[int]:
    """``service.pull`` with ``member_id``: the member's servable queues of ``topic`` (no write: a
    pull is no sign of life). Unknown or expired member → 404 ``unknown_member``."""
    try:
        qs = servable(group.name, member_id)
    except g.UnknownMember as e:
        raise NotFound(e.message, code="unknown_member") from None
    return {i for t, i in qs if t == topic}


# ------------------------------------------------------------------------------------------- sweep
def sweep(now_ms: int | None = None, max_member_topics: int = MAX_MEMBER_TOPICS) -> dict:
    """The scheduled expiry: for every group header (a Scan of GroupsTable: its whole size in RRU,
    eventually consistent), expire silent members (reading liveness items only for groups where a
    member looks silent) and re-expand each member's requested topics against the current topics
    (one Scan of TopicsTable per sweep), then write back conditionally (retrying that group on a
    conflict) when anything changed. A group whose write is refused by a limit is skipped (counted
    in ``refused``); one whose sweep raises (a store error) is logged and counted in ``errors``, and
    the groups after it are still swept. Returns counts for the log."""
    all_topics = {t.name: int(t.queues) for t in TopicModel.scan() if t.deleted_at is None}
    stats = {"groups": 0, "expired": 0, "changed": 0}
    for header in GroupModel.scan():
        stats["groups"] += 1
        with counted(stats, log, "sweeping consumer group %s failed; the next sweep tries again", header.group):
            _sweep_group(header.group, now_ms, all_topics, max_member_topics, stats)
    return stats


def _sweep_group(group: str, now_ms: int | None, all_topics: dict[str, int], max_member_topics: int,
                 stats: dict) -> None:
    """:func:`sweep`'s work on one group, its counts added to ``stats``."""
    def attempt(_n: int) -> None | backoff.Retry:
        now = now_ms if now_ms is not None else _clock.now()
        v = GroupRepo.read(group, now)
        if v.header is None:
            return None
        st, resp = g.expire(v.state, now, all_topics)
        expired = len(resp["expired"])
        for mid, asked in sorted(v.subs.items()):
            if mid in st.members:
                topics = expand_topics(asked, all_topics)
                if len(topics) > max_member_topics:
                    continue  # grown past the cap: the member keeps its topics until it re-joins
                if topics != st.members[mid].topics:
                    st, _ = g.topics_changed(st, mid, topics, now, all_topics)
        if _encode(st) == _encode(v.state) and not v.queried:
            return None
        try:
            GroupRepo.save(v, st, v.subs, now)
        except WriteLost:
            return backoff.RETRY
        except ApiError:
            stats["refused"] = stats.get("refused", 0) + 1
            return None
        stats["expired"] += expired
        if _encode(st) != _encode(v.state):
            stats["changed"] += 1
        return None
    backoff.cas(attempt, ATTEMPTS, lambda: None, BACKOFF_BASE_S, BACKOFF_CAP_S)  # the next sweep tries again
