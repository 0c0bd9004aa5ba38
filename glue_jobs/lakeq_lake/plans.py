"""Rebalance plans on the driver (pure Python over lakeq's core layer, shipped to Glue as extra
Python files): the load-balanced sticky assignment of a group's current members, and how much
better it is than the count-balanced one."""
from __future__ import annotations

from collections.abc import Mapping

from lakeq.rebalance import assignors as A
from lakeq.rebalance import state as G

Queue = tuple[str, int]


def effective_weights(weights: Mapping[Queue, float], counts: Mapping[str, int]) -> dict[Queue, float]:
    """A weight for every queue of ``counts``; queues without a measured weight get the mean (as the
    assignor does), 1.0 when nothing was measured."""
    known = [w for w in weights.values()]
    mean = sum(known) / len(known) if known else 1.0
    return {(t, i): float(weights.get((t, i), mean)) for t, n in counts.items() for i in range(n)}


def plan(state: G.GroupState, weights: Mapping[Queue, float], counts: Mapping[str, int]) -> dict | None:
    """The plan for ``state``'s current members (``None`` without members): the sticky assignment
    balanced by ``weights`` (kept as close as possible to the members' current targets), its
    ``expected_imbalance`` (max − min member load) and that of the count-based sticky assignment
    under the same loads, and how many queues it moves."""
    if not state.members:
        return None
    topics = sorted({t for m in state.members.values() for t in m.topics})
    counts = {t: int(counts.get(t, state.queue_counts.get(t, 0))) for t in topics}
    subs = {mid: A.Subscription(m.topics, m.target) for mid, m in state.members.items()}
    w = {q: x for q, x in weights.items() if q[0] in counts and q[1] < counts[q[0]]}
    eff = effective_weights(w, counts)
    weighted = A.sticky(subs, counts, eff)
    by_count = A.sticky(subs, counts)
    current = {mid: list(m.target) for mid, m in state.members.items()}
    return {
        "group": state.group,
        "generation": state.generation,
        "members": sorted(state.members),
        "queue_counts": counts,
        "assignment": {mid: [[t, i] for t, i in qs] for mid, qs in sorted(weighted.items())},
        "weights": [[t, i, x] for (t, i), x in sorted(eff.items())],
        "expected_imbalance": A.imbalance(weighted, eff),
        "count_based_imbalance": A.imbalance(by_count, eff),
        "current_imbalance": A.imbalance(current, eff) if any(current.values()) else None,
        "moved_queues": len(A.moved_queues(current, weighted)),
        "valid": not A.validate_assignment(weighted, subs, counts),
    }


def publish(group: str, weights: Mapping[Queue, float], now_ms: int | None = None) -> dict | None:
    """Publish into the group's state through the groups repository (read → ``set_plan`` →
    conditional write, retried on conflicts). The plan is computed inside the transition on the
    state actually written. Returns the plan published (``None``: no members, nothing published)."""
    from lakeq.store.groups import GroupRepo

    out: dict = {}

    def transition(st, now, counts):
        p = plan(st, weights, counts)
        if p is None:
            out.clear()
            return st, {}
        out.clear()
        out.update(p, published_at=now)
        assignment = {m: [tuple(q) for q in qs] for m, qs in p["assignment"].items()}
        eff = {(t, i): x for t, i, x in p["weights"]}
        return G.set_plan(st, now, assignment=assignment, weights=eff,
                          expected_imbalance=p["expected_imbalance"])

    GroupRepo.apply(group, transition)
    return dict(out) or None
