"""The stored form of a consumer group's header (pure: no AWS imports).

A :class:`lakeq.rebalance.state.GroupState` plus each member's topics *as asked* (``subs``) is encoded as
one compact JSON document (``"v": 2``):

* ``topics`` — every topic name the group refers to, once (sorted); everything else refers to a
  topic by its index in this list;
* ``sets`` — the distinct topic sets of the members (expanded topics and asked topics), once each:
  a thousand members subscribing to the same parent with a hundred long children store those
  names once, not a thousand times;
* ``members`` — one small object per member: ``member_id``, ``t`` (index of its expanded topic
  set), ``a`` (index of its asked set), ``s`` (state), ``owned`` / ``held`` / ``target``
  (``{"<topic index>": [queue ids]}``), ``generation`` (last sent), ``lh`` (last heartbeat known
  to the header), ``to`` (session timeout), ``sd`` (sync deadline), ``j`` (joined at);
* ``queue_counts`` (``[[topic index, count]]``), ``plan`` (:meth:`Plan.to_dict`), ``generation``,
  ``assignor``, ``last_rebalance_at``, ``last_rebalance_reason``, ``group``.

:func:`pack` returns the JSON text when it is small (``<= COMPRESS_ABOVE`` bytes, readable in the
table and its stream), else zlib-compressed bytes. :func:`unpack` reads either, and also the
version-1 form (``state`` = ``GroupState.to_dict`` JSON + a ``subscriptions`` JSON map) that one item
per group held before, so stored groups carry over.
"""
from __future__ import annotations

import json
import zlib
from collections.abc import Iterable, Mapping
from typing import Any

from lakeq.rebalance import state as g

VERSION = 2
COMPRESS_ABOVE = 16 * 1024
_STATE = {g.STABLE: "s", g.PREPARING: "p", g.AWAITING: "a"}
_STATE_BACK = {v: k for k, v in _STATE.items()}


def _qenc(qs: Iterable[tuple[str, int]], idx: Mapping[str, int]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for t, i in sorted(set(qs)):
        out.setdefault(str(idx[t]), []).append(int(i))
    return out


def _qdec(d: Mapping[str, Iterable[int]] | None, names: list[str]) -> list[tuple[str, int]]:
    return sorted((names[int(t)], int(i)) for t, ids in (d or {}).items() for i in ids)


def encode(st: g.GroupState, subs: Mapping[str, Iterable[str]]) -> dict:
    """``(state, asked topics per member)`` → the v2 document (JSON-serialisable)."""
    names: set[str] = set(st.queue_counts)
    for m in st.members.values():
        names.update(m.topics)
        names.update(subs.get(m.member_id) or ())
        names.update(t for t, _ in m.owned)
        names.update(t for t, _ in m.held)
        names.update(t for t, _ in m.target)
    topics = sorted(names)
    idx = {t: i for i, t in enumerate(topics)}
    sets: list[list[int]] = []
    set_idx: dict[tuple[int, ...], int] = {}

    def set_of(ts: Iterable[str] | None) -> int | None:
        if ts is None:
            return None
        key = tuple(sorted({idx[t] for t in ts}))
        if key not in set_idx:
            set_idx[key] = len(sets)
            sets.append(list(key))
        return set_idx[key]

    members = []
    for mid in sorted(st.members):
        m = st.members[mid]
        members.append({
            "member_id": mid, "t": set_of(m.topics), "a": set_of(subs.get(mid)), "s": _STATE[m.state],
            "owned": _qenc(m.owned, idx), "held": _qenc(m.held, idx), "target": _qenc(m.target, idx),
            "generation": m.generation, "lh": m.last_heartbeat, "to": m.session_timeout_ms,
            "sd": m.sync_deadline, "j": m.joined_at,
        })
    return {
        "v": VERSION, "group": st.group, "generation": st.generation, "assignor": st.assignor,
        "topics": topics, "sets": sets, "members": members,
        "queue_counts": [[idx[t], int(n)] for t, n in sorted(st.queue_counts.items())],
        "plan": None if st.plan is None else st.plan.to_dict(),
        "last_rebalance_at": st.last_rebalance_at, "last_rebalance_reason": st.last_rebalance_reason,
    }


def decode(d: Mapping[str, Any]) -> tuple[g.GroupState, dict[str, list[str]]]:
    """The v2 document → ``(state, asked topics per member)``."""
    names = list(d.get("topics") or [])
    sets = [[names[i] for i in s] for s in d.get("sets") or []]
    members: dict[str, g.Member] = {}
    subs: dict[str, list[str]] = {}
    for e in d.get("members") or []:
        mid = e["member_id"]
        members[mid] = g.Member(
            member_id=mid, topics=sorted(sets[e["t"]]), state=_STATE_BACK[e["s"]],
            owned=_qdec(e.get("owned"), names), held=_qdec(e.get("held"), names),
            target=_qdec(e.get("target"), names), generation=int(e.get("generation", 0)),
            last_heartbeat=int(e.get("lh", 0)), session_timeout_ms=int(e.get("to", g.DEFAULT_SESSION_TIMEOUT_MS)),
            sync_deadline=None if e.get("sd") is None else int(e["sd"]), joined_at=int(e.get("j", 0)))
        if e.get("a") is not None:
            subs[mid] = list(sets[e["a"]])
    st = g.GroupState(
        group=d["group"], generation=int(d.get("generation", 0)), assignor=d.get("assignor", "sticky"),
        members=members, queue_counts={names[i]: int(n) for i, n in d.get("queue_counts") or []},
        plan=None if d.get("plan") is None else g.Plan.from_dict(d["plan"]),
        last_rebalance_at=d.get("last_rebalance_at"), last_rebalance_reason=d.get("last_rebalance_reason"))
    return st, subs


def dumps(st: g.GroupState, subs: Mapping[str, Iterable[str]]) -> str:
    return json.dumps(encode(st, subs), separators=(",", ":"), sort_keys=True)


def pack(st: g.GroupState, subs: Mapping[str, Iterable[str]]) -> tuple[str | None, bytes | None]:
    """``(json text, None)`` when at most :data:`COMPRESS_ABOVE` bytes, else ``(None, zlib bytes)``."""
    text = dumps(st, subs)
    if len(text) <= COMPRESS_ABOVE:
        return text, None
    return None, zlib.compress(text.encode("utf-8"), 6)


def unpack(state: str | None, state_z: bytes | str | None, subscriptions: str | None = None,
           group: str | None = None) -> tuple[g.GroupState, dict[str, list[str]]]:
    """Read a stored header: v2 JSON text, v2 compressed bytes (or their base64 text, as a stream
    record carries them), or the version-1 ``GroupState.to_dict`` JSON + ``subscriptions``."""
    if state_z:
        if isinstance(state_z, str):
            import base64
            state_z = base64.b64decode(state_z)
        state = zlib.decompress(state_z).decode("utf-8")
    if not state:
        if group is None:
            raise ValueError("an empty group header")
        return g.new_group(group), {}
    d = json.loads(state)
    if d.get("v") == VERSION:
        return decode(d)
    return g.GroupState.from_dict(d), json.loads(subscriptions or "{}")


def legacy_dict(state: str | None, state_z: bytes | str | None, subscriptions: str | None = None) -> dict | None:
    """The ``GroupState.to_dict`` view of a stored header (for the stream's readers), or None."""
    try:
        st, _ = unpack(state, state_z, subscriptions)
    except (ValueError, KeyError, TypeError, IndexError, zlib.error):
        return None
    return st.to_dict()
