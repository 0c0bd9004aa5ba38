"""Consumer-group membership: the pure state machine of server-side rebalance (SPEC §4, API.md
"Consumer group membership"). No AWS imports, no I/O, no clock: callers pass ``now_ms``.

One group is one JSON-serialisable :class:`GroupState` (``to_dict`` / ``from_dict``). A request is
*read the state, apply one transition, write it back conditionally on the version read*. Every
transition has the shape ``(state, ..., now_ms, topic_queue_counts) -> (new_state, response)`` and
never mutates its input. ``topic_queue_counts`` must hold the queue count of every topic the
members subscribe to (and of the topics a joining member asks for); a missing topic counts as
zero queues. Topics are taken literally: expand parent topics to their children before calling.

Member fields (per member):

* ``owned``  — the queues handed over at the member's last successful sync (what the client
  believes it owns and reports back on re-join);
* ``held``   — the part of ``owned`` the member has not released yet. A member releases a queue it
  was asked to give up by re-joining (or by leaving / expiring). ``held`` sets are pairwise disjoint;
* ``target`` — the member's assignment computed by the latest rebalance.

Handover rule: ``servable(m) = held(m) ∩ target(m)``. A sync hands over only the target queues no
other member holds; the rest stay *pending*. When a holder releases them, the pending member (if
``stable``) is moved back to ``awaiting_sync`` and its next heartbeat answers ``sync``. So a queue is
never servable to two members at once, and a moving queue reaches its new owner only after the old
owner has released it.

Deadlines: a member asked to re-join (``preparing_rebalance``) or to sync (``awaiting_sync``) must do
so within its session timeout (``sync_deadline``); missing it, like missing heartbeats past the
session timeout, removes the member (its next request gets ``unknown_member``) and rebalances.

Errors are :class:`GroupError` subclasses carrying ``status``/``code`` and, in ``state``, the state
after the housekeeping done before the error (expired members removed): persist it if it differs.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from lakeq.common.errors import ApiError
from lakeq.common.names import NAME_RULE, is_name, is_topic
from lakeq.rebalance.assignors import ASSIGNORS, Queue, Subscription, assign, validate_assignment

STABLE = "stable"
PREPARING = "preparing_rebalance"
AWAITING = "awaiting_sync"
STATES = (STABLE, PREPARING, AWAITING)

DEFAULT_SESSION_TIMEOUT_MS = 45_000
MIN_SESSION_TIMEOUT_MS = 1_000
MAX_SESSION_TIMEOUT_MS = 300_000


__all__ = [
    "AWAITING", "PREPARING", "STABLE", "GroupBadRequest", "GroupError", "GroupState", "Member", "Plan",
    "StaleGeneration", "UnknownMember", "describe", "expire", "force_rebalance", "heartbeat",
    "heartbeat_interval_ms", "join", "leave", "new_group", "servable_queues", "set_plan", "sync",
    "topics_changed",
]


# ------------------------------------------------------------------------------------------- errors
class GroupError(ApiError):
    """Base of the group errors: API errors (``status`` / ``code`` / ``body()``) that also carry
    ``state``, the group's state after the housekeeping done before the error (or None)."""

    status = 400
    code = "bad_request"

    def __init__(self, message: str, state: GroupState | None = None):
        super().__init__(message)
        self.state = state

    def to_body(self) -> dict:
        return self.body()


class GroupBadRequest(GroupError):
    status, code = 400, "bad_request"


class UnknownMember(GroupError):
    status, code = 404, "unknown_member"


class StaleGeneration(GroupError):
    status, code = 409, "stale_generation"


# -------------------------------------------------------------------------------------------- state
def _enc_queues(qs: Iterable[Queue]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for t, i in sorted(set(qs)):
        out.setdefault(t, []).append(i)
    return out


def _dec_queues(d: Mapping[str, Iterable[int]] | None) -> list[Queue]:
    return sorted((t, int(i)) for t, ids in (d or {}).items() for i in ids)


@dataclass
class Member:
    member_id: str
    topics: list[str]
    state: str = AWAITING
    owned: list[Queue] = field(default_factory=list)
    held: list[Queue] = field(default_factory=list)
    target: list[Queue] = field(default_factory=list)
    generation: int = 0  # the group generation last sent to this member
    last_heartbeat: int = 0
    session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS
    sync_deadline: int | None = None  # deadline of the re-join or sync the member was asked for
    joined_at: int = 0

    def to_dict(self) -> dict:
        return {
            "member_id": self.member_id, "topics": list(self.topics), "state": self.state,
            "owned": _enc_queues(self.owned), "held": _enc_queues(self.held),
            "target": _enc_queues(self.target), "generation": self.generation,
            "last_heartbeat": self.last_heartbeat, "session_timeout_ms": self.session_timeout_ms,
            "sync_deadline": self.sync_deadline, "joined_at": self.joined_at,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Member:
        return cls(
            member_id=d["member_id"], topics=sorted(d.get("topics", [])), state=d.get("state", STABLE),
            owned=_dec_queues(d.get("owned")), held=_dec_queues(d.get("held")),
            target=_dec_queues(d.get("target")), generation=int(d.get("generation", 0)),
            last_heartbeat=int(d.get("last_heartbeat", 0)),
            session_timeout_ms=int(d.get("session_timeout_ms", DEFAULT_SESSION_TIMEOUT_MS)),
            sync_deadline=None if d.get("sync_deadline") is None else int(d["sync_deadline"]),
            joined_at=int(d.get("joined_at", 0)),
        )


@dataclass
class Plan:
    """A rebalance plan published from outside (the data-lake job): a full assignment, or queue
    weights for the sticky assignor, or both."""

    published_at: int
    assignment: dict[str, list[Queue]] | None = None
    weights: dict[Queue, float] | None = None
    expected_imbalance: float | None = None
    applied_generation: int | None = None  # the generation whose rebalance applied ``assignment``

    def to_dict(self) -> dict:
        return {
            "published_at": self.published_at,
            "assignment": None if self.assignment is None
            else {m: _enc_queues(qs) for m, qs in sorted(self.assignment.items())},
            "weights": None if self.weights is None
            else [[t, i, w] for (t, i), w in sorted(self.weights.items())],
            "expected_imbalance": self.expected_imbalance,
            "applied_generation": self.applied_generation,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Plan:
        a, w = d.get("assignment"), d.get("weights")
        return cls(
            published_at=int(d.get("published_at", 0)),
            assignment=None if a is None else {m: _dec_queues(qs) for m, qs in a.items()},
            weights=None if w is None else {(t, int(i)): float(x) for t, i, x in w},
            expected_imbalance=None if d.get("expected_imbalance") is None else float(d["expected_imbalance"]),
            applied_generation=None if d.get("applied_generation") is None else int(d["applied_generation"]),
        )


@dataclass
class GroupState:
    group: str
    generation: int = 0
    assignor: str = "sticky"
    members: dict[str, Member] = field(default_factory=dict)
    queue_counts: dict[str, int] = field(default_factory=dict)  # subscribed topics, at last rebalance
    plan: Plan | None = None
    last_rebalance_at: int | None = None
    last_rebalance_reason: str | None = None

    def to_dict(self) -> dict:
        return {
            "group": self.group, "generation": self.generation, "assignor": self.assignor,
            "members": [self.members[m].to_dict() for m in sorted(self.members)],
            "queue_counts": dict(sorted(self.queue_counts.items())),
            "plan": None if self.plan is None else self.plan.to_dict(),
            "last_rebalance_at": self.last_rebalance_at,
            "last_rebalance_reason": self.last_rebalance_reason,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> GroupState:
        members = [Member.from_dict(m) for m in d.get("members", [])]
        return cls(
            group=d["group"], generation=int(d.get("generation", 0)),
            assignor=d.get("assignor", "sticky"),
            members={m.member_id: m for m in members},
            queue_counts={t: int(n) for t, n in (d.get("queue_counts") or {}).items()},
            plan=None if d.get("plan") is None else Plan.from_dict(d["plan"]),
            last_rebalance_at=d.get("last_rebalance_at"),
            last_rebalance_reason=d.get("last_rebalance_reason"),
        )


def new_group(group: str, assignor: str = "sticky") -> GroupState:
    """A registered group that never had members: generation 0, no members."""
    if assignor not in ASSIGNORS:
        raise GroupBadRequest(f"unknown assignor {assignor!r}; use one of {sorted(ASSIGNORS)}")
    return GroupState(group=group, assignor=assignor)


def heartbeat_interval_ms(session_timeout_ms: int) -> int:
    return max(100, session_timeout_ms // 3)


# ------------------------------------------------------------------------------------- validation
def _check_member_id(member_id: Any) -> str:
    if not is_name(member_id):
        raise GroupBadRequest(f"member_id must be {NAME_RULE}")
    return member_id


def _check_topics(topics: Any) -> list[str]:
    if not isinstance(topics, (list, tuple)) or not topics:
        raise GroupBadRequest("topics must be a non-empty list of topic names")
    for t in topics:
        if not is_topic(t):
            raise GroupBadRequest(f"invalid topic name {t!r}")
    return sorted(set(topics))


def _check_queues(owned: Any, what: str = "owned") -> list[Queue]:
    if owned is None:
        return []
    if not isinstance(owned, (list, tuple)):
        raise GroupBadRequest(f"{what} must be a list of {{topic, queue}}")
    out = []
    for item in owned:
        if isinstance(item, Mapping):
            t, i = item.get("topic"), item.get("queue")
        elif isinstance(item, (list, tuple)) and len(item) == 2:
            t, i = item
        else:
            raise GroupBadRequest(f"{what} entries must be {{topic, queue}} objects")
        if not is_topic(t) or isinstance(i, bool) or not isinstance(i, int) or i < 0:
            raise GroupBadRequest(f"invalid {what} entry {item!r}")
        out.append((t, i))
    return sorted(set(out))


def _check_timeout(ms: Any) -> int:
    if ms is None:
        return DEFAULT_SESSION_TIMEOUT_MS
    if isinstance(ms, bool) or not isinstance(ms, int) or not MIN_SESSION_TIMEOUT_MS <= ms <= MAX_SESSION_TIMEOUT_MS:
        raise GroupBadRequest("session_timeout_ms must be an integer in "
                         f"[{MIN_SESSION_TIMEOUT_MS}, {MAX_SESSION_TIMEOUT_MS}]")
    return ms


def _check_generation(generation: Any) -> int:
    if isinstance(generation, bool) or not isinstance(generation, int) or generation < 0:
        raise GroupBadRequest("generation must be a non-negative integer")
    return generation


# -------------------------------------------------------------------------------------- internals
def _wire(qs: Iterable[Queue]) -> list[dict]:
    return [{"topic": t, "queue": i} for t, i in sorted(qs)]


def _dead(m: Member, now: int) -> bool:
    if now - m.last_heartbeat > m.session_timeout_ms:
        return True
    return m.state != STABLE and m.sync_deadline is not None and now > m.sync_deadline


def _relevant_counts(st: GroupState, counts: Mapping[str, int]) -> dict[str, int]:
    topics = {t for ts in {tuple(m.topics) for m in st.members.values()} for t in ts}
    return {t: int(counts.get(t, 0)) for t in sorted(topics)}


def _plan_assignment(st: GroupState, subs: Mapping[str, Subscription], counts: Mapping[str, int]):
    plan = st.plan
    if plan is None or plan.assignment is None or plan.applied_generation is not None:
        return None
    if set(plan.assignment) != set(subs) or validate_assignment(plan.assignment, subs, counts):
        return None
    return {m: sorted(qs) for m, qs in plan.assignment.items()}


def _rebalance(st: GroupState, now: int, counts: Mapping[str, int], reason: str) -> None:
    """New generation; recompute targets from the current targets; disturb only changed members."""
    st.generation += 1
    st.last_rebalance_at, st.last_rebalance_reason = now, reason
    st.queue_counts = _relevant_counts(st, counts)
    topic_sets: dict[tuple, frozenset] = {}
    subs = {}
    for mid, m in st.members.items():
        ts = topic_sets.setdefault(tuple(m.topics), frozenset(m.topics))
        subs[mid] = Subscription(ts, m.target)
    targets = _plan_assignment(st, subs, st.queue_counts)
    if targets is not None:
        st.plan.applied_generation = st.generation
    else:
        weights = st.plan.weights if st.plan is not None else None
        targets = assign(st.assignor, subs, st.queue_counts, weights)
    for mid in sorted(st.members):
        m = st.members[mid]
        new = targets.get(mid, [])
        if set(new) == set(m.target):
            continue  # not disturbed: silently in the new generation
        m.target = sorted(new)
        if m.state == AWAITING and set(m.held) <= set(new):
            continue  # has nothing to give up: its coming sync hands over the new target
        if m.state != PREPARING:
            m.state = PREPARING
            m.sync_deadline = now + m.session_timeout_ms


def _wake(st: GroupState, now: int) -> None:
    """Stable members with pending target queues that nobody holds any more are asked to sync."""
    holder = {q: mid for mid, m in st.members.items() for q in m.held}
    for mid in sorted(st.members):
        m = st.members[mid]
        if m.state == STABLE and any(q not in holder for q in set(m.target) - set(m.held)):
            m.state = AWAITING
            m.sync_deadline = now + m.session_timeout_ms


def _housekeep(st: GroupState, now: int, counts: Mapping[str, int]) -> list[str]:
    removed = [mid for mid in sorted(st.members) if _dead(st.members[mid], now)]
    for mid in removed:
        del st.members[mid]
    reasons = []
    if removed:
        reasons.append("expired " + ",".join(removed))
    if _relevant_counts(st, counts) != st.queue_counts and st.members:
        reasons.append("queue counts changed")
    if reasons:
        _rebalance(st, now, counts, "; ".join(reasons))
    _wake(st, now)
    return removed


def _copy(state: GroupState) -> GroupState:
    """A copy sharing nothing mutable with ``state`` (queues are immutable tuples). O(size)."""
    members = {}
    for mid, m in state.members.items():
        c = copy.copy(m)
        c.topics, c.owned, c.held, c.target = list(m.topics), list(m.owned), list(m.held), list(m.target)
        members[mid] = c
    out = copy.copy(state)
    out.members, out.queue_counts, out.plan = members, dict(state.queue_counts), copy.deepcopy(state.plan)
    return out


def _begin(state: GroupState, now: int, counts: Mapping[str, int]) -> tuple[GroupState, list[str]]:
    if isinstance(now, bool) or not isinstance(now, int):
        raise GroupBadRequest("now_ms must be an integer")
    st = _copy(state)
    return st, _housekeep(st, now, counts)


def _member(st: GroupState, member_id: Any) -> Member:
    m = st.members.get(member_id) if isinstance(member_id, str) else None
    if m is None:
        raise UnknownMember(f"member {member_id!r} is not in group {st.group!r} (join again)", st)
    return m


def _fence(st: GroupState, m: Member, generation: Any) -> None:
    generation = _check_generation(generation)
    if generation < m.generation:
        raise StaleGeneration(
            f"generation {generation} is older than {m.generation}, the last one member {m.member_id!r} received", st)
    if generation > st.generation:
        raise GroupBadRequest(f"generation {generation} is newer than the group's ({st.generation})", st)


def _deadline(m: Member) -> int | None:
    return None if m.state == STABLE else m.sync_deadline


# ------------------------------------------------------------------------------------ transitions
def join(
    state: GroupState,
    member_id: str | None,
    topics: list[str],
    owned: Iterable[Any] | None,
    session_timeout_ms: int | None,
    now_ms: int,
    topic_queue_counts: Mapping[str, int],
    new_member_id: Callable[[], str] = lambda: uuid.uuid4().hex,
) -> tuple[GroupState, dict]:
    """``POST /v1/groups/{group}/members``. New member (``member_id`` None or unknown): added in
    ``awaiting_sync``, rebalance. Known member (re-join): if its topics changed, or the ``owned`` it
    reports is not what the server expects (``held ∩ target ⊆ owned ⊆`` its last sync), the
    rebalance restarts with the new data (a new generation). Then the member releases the queues it
    was asked to give up and becomes ``awaiting_sync`` with a sync deadline."""
    topics = _check_topics(topics)
    owned_q = _check_queues(owned)
    timeout = _check_timeout(session_timeout_ms)
    if member_id is not None:
        _check_member_id(member_id)
    st, _ = _begin(state, now_ms, topic_queue_counts)
    if member_id is None or member_id not in st.members:
        mid = member_id if member_id is not None else _check_member_id(new_member_id())
        st.members[mid] = Member(
            member_id=mid, topics=topics, state=AWAITING, last_heartbeat=now_ms,
            session_timeout_ms=timeout, sync_deadline=now_ms + timeout, joined_at=now_ms)
        _rebalance(st, now_ms, topic_queue_counts, f"join {mid}")
        m = st.members[mid]
    else:
        mid = member_id
        m = st.members[mid]
        m.last_heartbeat, m.session_timeout_ms = now_ms, timeout
        reported = set(owned_q)
        consistent = set(m.held) & set(m.target) <= reported <= set(m.owned)
        if topics != m.topics or not consistent:
            what = "topics changed" if topics != m.topics else "owned queues differ"
            m.topics = topics
            m.held = sorted(set(m.held) & reported)
            _rebalance(st, now_ms, topic_queue_counts, f"re-join {mid}: {what}")
        m.held = sorted(set(m.held) & set(m.target))  # release what it was asked to give up
    m.state = AWAITING
    m.sync_deadline = now_ms + timeout
    _wake(st, now_ms)
    m.generation = st.generation
    return st, {
        "member_id": mid, "generation": st.generation, "state": m.state,
        "heartbeat_interval_ms": heartbeat_interval_ms(timeout), "session_timeout_ms": timeout,
        "sync_deadline_ms": m.sync_deadline,
    }


def heartbeat(
    state: GroupState,
    member_id: str,
    generation: int,
    owned: Iterable[Any] | None,
    now_ms: int,
    topic_queue_counts: Mapping[str, int],
) -> tuple[GroupState, dict]:
    """``POST .../heartbeat``: ``action`` is ``rejoin`` (``preparing_rebalance``), ``sync``
    (``awaiting_sync``) or ``none``. A ``stable`` member reporting ``owned`` different from its last
    sync (e.g. a lost sync response) is asked to sync again."""
    owned_q = None if owned is None else _check_queues(owned)
    _check_generation(generation)
    st, _ = _begin(state, now_ms, topic_queue_counts)
    m = _member(st, member_id)
    _fence(st, m, generation)
    m.last_heartbeat = now_ms
    if m.state == STABLE and owned_q is not None and set(owned_q) != set(m.owned):
        m.state = AWAITING
        m.sync_deadline = now_ms + m.session_timeout_ms
    action = {STABLE: "none", PREPARING: "rejoin", AWAITING: "sync"}[m.state]
    m.generation = st.generation
    return st, {"generation": st.generation, "action": action, "sync_deadline_ms": _deadline(m)}


def sync(
    state: GroupState,
    member_id: str,
    generation: int,
    now_ms: int,
    topic_queue_counts: Mapping[str, int],
) -> tuple[GroupState, dict]:
    """``POST .../sync``: hands over the member's target queues that no other member holds, which
    become its ``owned``; the member is ``stable`` (queues still held by others are handed over by a
    later sync: the member is moved to ``awaiting_sync`` when they are released). A member that must
    re-join first (``preparing_rebalance``) gets its servable queues and stays where it is."""
    _check_generation(generation)
    st, _ = _begin(state, now_ms, topic_queue_counts)
    m = _member(st, member_id)
    _fence(st, m, generation)
    m.last_heartbeat = now_ms
    if m.state == PREPARING:
        assignment = sorted(set(m.held) & set(m.target))
    else:
        others = {q for mid, o in st.members.items() if mid != m.member_id for q in o.held}
        assignment = [q for q in m.target if q not in others]
        m.owned = list(assignment)
        m.held = list(assignment)
        m.state, m.sync_deadline = STABLE, None
    _wake(st, now_ms)
    m.generation = st.generation
    return st, {"generation": st.generation, "assignment": _wire(assignment)}


def leave(
    state: GroupState, member_id: str, now_ms: int, topic_queue_counts: Mapping[str, int]
) -> tuple[GroupState, dict]:
    """``DELETE .../members/{member_id}``: the member and its queues go; the group rebalances."""
    st, _ = _begin(state, now_ms, topic_queue_counts)
    _member(st, member_id)
    del st.members[member_id]
    _rebalance(st, now_ms, topic_queue_counts, f"leave {member_id}")
    _wake(st, now_ms)
    return st, {"generation": st.generation}


def expire(state: GroupState, now_ms: int, topic_queue_counts: Mapping[str, int]) -> tuple[GroupState, dict]:
    """Housekeeping alone (every transition does it first): remove members silent past their session
    timeout or past their re-join/sync deadline, and rebalance if any was removed or a subscribed
    topic's queue count changed. Response ``{"expired": [...], "generation"}``."""
    st, removed = _begin(state, now_ms, topic_queue_counts)
    return st, {"expired": removed, "generation": st.generation}


def topics_changed(
    state: GroupState, member_id: str, topics: list[str], now_ms: int, topic_queue_counts: Mapping[str, int]
) -> tuple[GroupState, dict]:
    """Server-side change of one member's subscribed topics (e.g. a revoked grant); a member
    changing its own subscription re-joins instead. Rebalances when the topics differ."""
    topics = _check_topics(topics)
    st, _ = _begin(state, now_ms, topic_queue_counts)
    m = _member(st, member_id)
    if topics != m.topics:
        m.topics = topics
        _rebalance(st, now_ms, topic_queue_counts, f"topics of {member_id} changed")
        _wake(st, now_ms)
    return st, {"generation": st.generation}


def set_plan(
    state: GroupState,
    now_ms: int,
    assignment: Mapping[str, Iterable[Any]] | None = None,
    weights: Mapping[Queue, float] | None = None,
    expected_imbalance: float | None = None,
) -> tuple[GroupState, dict]:
    """Store an externally computed plan; the next rebalance applies ``assignment`` if it covers
    exactly the members and queues of that moment (once), and uses ``weights`` from then on."""
    if assignment is None and weights is None:
        raise GroupBadRequest("a plan needs an assignment or weights")
    st = _copy(state)
    a = None if assignment is None else {m: _check_queues(qs, "assignment") for m, qs in assignment.items()}
    w = None
    if weights is not None:
        w = {}
        for (t, i), x in weights.items():
            if isinstance(x, bool) or not isinstance(x, (int, float)) or x < 0:
                raise GroupBadRequest(f"invalid weight for {(t, i)}")
            w[(str(t), int(i))] = float(x)
    st.plan = Plan(published_at=now_ms, assignment=a, weights=w, expected_imbalance=expected_imbalance)
    return st, {"published_at": now_ms}


def force_rebalance(
    state: GroupState, now_ms: int, topic_queue_counts: Mapping[str, int], reason: str = "forced"
) -> tuple[GroupState, dict]:
    """Rebalance now (e.g. right after a plan is published). A group without members is unchanged."""
    st, _ = _begin(state, now_ms, topic_queue_counts)
    if st.members:
        _rebalance(st, now_ms, topic_queue_counts, reason)
        _wake(st, now_ms)
    return st, {"generation": st.generation}


# ---------------------------------------------------------------------------------------- queries
def servable_queues(state: GroupState, member_id: str, now_ms: int | None = None) -> list[Queue]:
    """The queues a pull with this ``member_id`` may be served: those of its last successful sync
    that it has not been asked to give up (``held ∩ target``). Unknown member, or (with ``now_ms``)
    a member past its session timeout or deadline → :class:`UnknownMember`."""
    m = state.members.get(member_id) if isinstance(member_id, str) else None
    if m is None or (now_ms is not None and _dead(m, now_ms)):
        raise UnknownMember(f"member {member_id!r} is not in group {state.group!r} (join again)")
    return sorted(set(m.held) & set(m.target))


def describe(state: GroupState) -> dict:
    """``GET /v1/groups/{group}``. ``assignment`` is the member's target assignment of the current
    generation; ``servable`` (extra) what it may consume right now."""
    return {
        "group": state.group,
        "generation": state.generation,
        "assignor": state.assignor,
        "members": [
            {
                "member_id": mid,
                "state": m.state,
                "assignment": _wire(m.target),
                "last_heartbeat": m.last_heartbeat,
                "topics": list(m.topics),
                "servable": _wire(set(m.held) & set(m.target)),
                "generation": m.generation,
                "sync_deadline_ms": _deadline(m),
            }
            for mid, m in sorted(state.members.items())
        ],
        **_plan_view(state),
    }


def _plan_view(state: GroupState) -> dict:
    """``plan`` (extra, only when one was published by the data-lake job): its time, expected
    imbalance and the generation whose rebalance applied it (null while pending)."""
    p = state.plan
    if p is None:
        return {}
    return {"plan": {"published_at": p.published_at, "expected_imbalance": p.expected_imbalance,
                     "applied_generation": p.applied_generation, "has_assignment": p.assignment is not None,
                     "weighted": p.weights is not None}}
