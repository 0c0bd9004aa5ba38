"""Queue assignors for server-side consumer-group rebalance (SPEC §4). Pure: no AWS, no I/O.

A queue is a ``(topic, queue_number)`` tuple. An assignor receives

* ``members``: ``{member_id: Subscription(topics, owned)}`` — the topics each member subscribes to and
  the queues it currently has (the sticky assignor keeps them where it can; range and round-robin
  ignore them, as in Kafka);
* ``queue_counts``: ``{topic: n}`` — topic ``t`` has queues ``0 .. n-1``;
* ``weights`` (optional, sticky only): ``{(topic, queue): load}`` computed by the data-lake job.
  Without weights "balanced" means balanced by queue count; with weights, by summed load.

and returns ``{member_id: sorted list of (topic, queue)}`` with an entry for every member. Every queue
of a topic that at least one member subscribes to is assigned to exactly one member subscribed to its
topic; queues of topics nobody subscribes to are left out. Results are deterministic: ties are broken
by sorted member id and by sorted queue.

Balance (Kafka's StickyAssignor definition, generalised to loads): an assignment is balanced when no
single queue can be moved from its member ``A`` to another member ``B`` subscribed to its topic so that
``load(B) + w(q) < load(A)``. With unit weights this is "``|A| - |B| <= 1`` whenever ``B`` could take
one of ``A``'s queues"; when all members subscribe to the same topics it means queue counts differ
by at most one.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

Queue = tuple[str, int]
Assignment = dict[str, list[Queue]]

__all__ = [
    "ASSIGNORS",
    "Assignment",
    "Queue",
    "Subscription",
    "assign",
    "imbalance",
    "is_balanced",
    "moved_queues",
    "range_assignor",
    "round_robin",
    "sticky",
    "validate_assignment",
]


@dataclass(frozen=True)
class Subscription:
    """What the assignor knows about one member: subscribed topics and currently owned queues."""

    topics: frozenset[str]
    owned: tuple[Queue, ...] = field(default=())

    def __init__(self, topics: Iterable[str], owned: Iterable[Queue] = ()):  # noqa: D107
        object.__setattr__(self, "topics", frozenset(topics))
        object.__setattr__(self, "owned", tuple((str(t), int(q)) for t, q in owned))


# --------------------------------------------------------------------------------------------- helpers
def _universe(members: Mapping[str, Subscription], queue_counts: Mapping[str, int]):
    """Sorted member ids, {topic: sorted subscribed member ids} for topics with queues, sorted queues.

    Members with the same topic set are handled together: O(M log M + S·T + T·M) for S distinct sets."""
    mids = sorted(members)
    by_set: dict[frozenset, list[str]] = defaultdict(list)
    for m in mids:
        by_set[members[m].topics].append(m)
    eligible: dict[str, list[str]] = {}
    for topics, ms in by_set.items():
        for t in topics:
            if queue_counts.get(t, 0) > 0:
                eligible.setdefault(t, []).extend(ms)
    if len(by_set) > 1:
        for subs in eligible.values():
            subs.sort()
    queues = [(t, i) for t in sorted(eligible) for i in range(int(queue_counts[t]))]
    return mids, eligible, queues


def _empty(mids: Iterable[str]) -> Assignment:
    return {m: [] for m in mids}


def _finish(result: Mapping[str, list[Queue]]) -> Assignment:
    return {m: sorted(qs) for m, qs in sorted(result.items())}


def _valid_current(members, queue_counts, mids) -> tuple[Assignment, dict[Queue, str]]:
    """Keep each member's owned queues that still exist and that it still subscribes to.

    A queue claimed by two members stays with the first in member-id order. O(sum owned · log)."""
    cur: Assignment = _empty(mids)
    owner: dict[Queue, str] = {}
    for m in mids:
        sub = members[m]
        for q in sorted(set(sub.owned)):
            t, i = q
            if t in sub.topics and 0 <= i < queue_counts.get(t, 0) and q not in owner:
                owner[q] = m
                cur[m].append(q)
    return cur, owner


# --------------------------------------------------------------------------------------------- range
def range_assignor(
    members: Mapping[str, Subscription],
    queue_counts: Mapping[str, int],
    weights: Mapping[Queue, float] | None = None,
) -> Assignment:
    """Kafka's RangeAssignor: per topic, the subscribed members in sorted order each take a contiguous
    range of ``n // c`` queues, the first ``n % c`` members one more. Ignores owned queues and weights.

    Complexity: O(M log M + T·M + N) for M members, T topics, N queues."""
    mids, eligible, _ = _universe(members, queue_counts)
    out = _empty(mids)
    for t, subs in eligible.items():
        n, c = int(queue_counts[t]), len(subs)
        per, extra = divmod(n, c)
        start = 0
        for i, m in enumerate(subs):
            size = per + (1 if i < extra else 0)
            if size:
                out[m].extend((t, j) for j in range(start, start + size))
                start += size
    return _finish(out)


# --------------------------------------------------------------------------------------- round-robin
def round_robin(
    members: Mapping[str, Subscription],
    queue_counts: Mapping[str, int],
    weights: Mapping[Queue, float] | None = None,
) -> Assignment:
    """Kafka's RoundRobinAssignor: all queues in (topic, queue) order are dealt to the sorted members
    in a circle, skipping members not subscribed to the queue's topic. Ignores owned queues and weights.

    Complexity: O(N + M log M) when every member subscribes to every topic, O(N·M) in the worst case."""
    mids, _, queues = _universe(members, queue_counts)
    out = _empty(mids)
    if not mids:
        return out
    pos = 0
    for q in queues:
        while q[0] not in members[mids[pos]].topics:
            pos = (pos + 1) % len(mids)
        out[mids[pos]].append(q)
        pos = (pos + 1) % len(mids)
    return _finish(out)


# -------------------------------------------------------------------------------------------- sticky
def sticky(
    members: Mapping[str, Subscription],
    queue_counts: Mapping[str, int],
    weights: Mapping[Queue, float] | None = None,
) -> Assignment:
    """Sticky assignor: as balanced as possible first, as little movement as possible second.

    1. Keep every owned queue that still exists and that its member still subscribes to.
    2. Without weights and with every member subscribing to the same topics (the usual case) the
       result is exact: counts differ by at most one, the ``N % M`` members owning the most queues
       get the larger quota, each member keeps its lowest queues up to its quota, and the freed and
       unowned queues go, in queue order, to the member with the fewest queues (ties: member id).
       The number of queues that change owner is then the minimum any balanced assignment needs:
       ``sum(max(0, owned_i - quota_i))``. O(N log M + M log M).
    3. Otherwise (weights, or members subscribing to different topics): unowned queues are placed
       heaviest first, those with the fewest candidate members first, on the least-loaded subscribed
       member; then single-queue moves from a member to a less loaded member subscribed to the same
       topic are made while they strictly reduce the pair's maximum load (preferring queues that had
       no owner before, then the move that best evens the pair), until no such move exists: the
       result is balanced in the sense of the module docstring. Each move strictly lowers the sum of
       squared loads, so this terminates. O((N + K)·T_m·log M) for K moves, T_m topics per member,
       plus one O(N) check per pass.

    Weights: queues missing from ``weights`` get the mean of the given weights (1.0 if none);
    weights must be >= 0 (zero is treated as a tiny positive load)."""
    mids, eligible, queues = _universe(members, queue_counts)
    if not mids:
        return {}
    cur, owner = _valid_current(members, queue_counts, mids)
    unowned = [q for q in queues if q not in owner]
    live = frozenset(eligible)
    sets = {live & topics for topics in {members[m].topics for m in mids}}
    if weights is None and len(sets) == 1:
        return _sticky_uniform(mids, cur, unowned, len(queues))
    return _sticky_general(members, mids, eligible, queues, cur, unowned, _weights(queues, weights))


def _weights(queues: list[Queue], weights: Mapping[Queue, float] | None) -> dict[Queue, float]:
    if weights is None:
        return {q: 1.0 for q in queues}
    given = [float(w) for w in weights.values()]
    if any(w < 0 or w != w for w in given):
        raise ValueError("queue weights must be non-negative numbers")
    positive = [w for w in given if w > 0]
    mean = sum(given) / len(given) if given and sum(given) > 0 else 1.0
    tiny = (min(positive) if positive else 1.0) * 1e-6
    out = {}
    for q in queues:
        w = float(weights.get(q, mean))
        out[q] = w if w > 0 else tiny
    return out


def _sticky_uniform(mids: list[str], cur: Assignment, unowned: list[Queue], n: int) -> Assignment:
    base, extra = divmod(n, len(mids))
    order = sorted(mids, key=lambda m: (-len(cur[m]), m))
    quota = {m: base + (1 if i < extra else 0) for i, m in enumerate(order)}
    out: Assignment = {}
    pool = list(unowned)
    for m in mids:
        out[m] = cur[m][: quota[m]]
        pool.extend(cur[m][quota[m]:])
    pool.sort()
    heap = [(len(out[m]), m) for m in mids if len(out[m]) < quota[m]]
    heapq.heapify(heap)
    for q in pool:
        size, m = heapq.heappop(heap)
        out[m].append(q)
        if size + 1 < quota[m]:
            heapq.heappush(heap, (size + 1, m))
    return _finish(out)


class _LoadIndex:
    """Per-topic min-heaps of (load, count, member) with lazy invalidation."""

    def __init__(self, members, eligible, load, count):
        self.members, self.load, self.count = members, load, count
        self.heaps: dict[str, list] = {t: [(load[m], count[m], m) for m in subs] for t, subs in eligible.items()}
        for h in self.heaps.values():
            heapq.heapify(h)

    def update(self, m: str, delta: float, dcount: int) -> None:
        self.load[m] += delta
        self.count[m] += dcount
        entry = (self.load[m], self.count[m], m)
        for t in self.members[m].topics:
            h = self.heaps.get(t)
            if h is not None:
                heapq.heappush(h, entry)
                if len(h) > 8 * len(self.load) + 64:  # keep stale entries bounded
                    self.heaps[t] = h = [(self.load[x], self.count[x], x) for x in {e[2] for e in h}]
                    heapq.heapify(h)

    def least(self, t: str) -> str:
        h = self.heaps[t]
        while True:
            load, count, m = h[0]
            if load == self.load[m] and count == self.count[m]:
                return m
            heapq.heappop(h)


def _sticky_general(members, mids, eligible, queues, cur, unowned, w) -> Assignment:
    owned_before = {q: m for m in mids for q in cur[m]}
    holding: dict[str, dict[str, set[Queue]]] = {m: defaultdict(set) for m in mids}
    load = {m: 0.0 for m in mids}
    count = {m: 0 for m in mids}
    for m in mids:
        for q in cur[m]:
            holding[m][q[0]].add(q)
            load[m] += w[q]
            count[m] += 1
    index = _LoadIndex(members, eligible, load, count)
    total = sum(w.values()) or 1.0
    eps = 1e-9 * total

    for q in sorted(unowned, key=lambda q: (len(eligible[q[0]]), -w[q], q)):
        m = index.least(q[0])
        holding[m][q[0]].add(q)
        index.update(m, w[q], 1)

    max_moves = 50 * len(queues) + 1000
    moves = 0
    improved = True
    while improved and moves < max_moves:
        improved = False
        for a in sorted(mids, key=lambda m: (-load[m], m)):
            again = True
            while again and moves < max_moves:
                again = False
                for t in sorted(holding[a]):
                    qs = holding[a][t]
                    if not qs:
                        continue
                    b = index.least(t)
                    if b == a:
                        continue
                    gap = load[a] - load[b]
                    best = None
                    for q in qs:
                        wq = w[q]
                        if wq < gap - eps:
                            key = (owned_before.get(q) == a, abs(gap / 2 - wq), q)
                            if best is None or key < best[0]:
                                best = (key, q)
                    if best is None:
                        continue
                    q = best[1]
                    qs.discard(q)
                    holding[b][t].add(q)
                    index.update(a, -w[q], -1)
                    index.update(b, w[q], 1)
                    moves += 1
                    improved = again = True
                    break
    return _finish({m: [q for qs in holding[m].values() for q in qs] for m in mids})


# ------------------------------------------------------------------------------------------ registry
ASSIGNORS = {"sticky": sticky, "range": range_assignor, "round_robin": round_robin}


def assign(
    name: str,
    members: Mapping[str, Subscription],
    queue_counts: Mapping[str, int],
    weights: Mapping[Queue, float] | None = None,
) -> Assignment:
    """Run the assignor called ``name`` (``sticky``, ``range`` or ``round_robin``)."""
    try:
        fn = ASSIGNORS[name]
    except KeyError:
        raise ValueError(f"unknown assignor {name!r}; use one of {sorted(ASSIGNORS)}") from None
    return fn(members, queue_counts, weights)


# ------------------------------------------------------------------------------------------ analysis
def validate_assignment(
    assignment: Mapping[str, Iterable[Queue]],
    members: Mapping[str, Subscription],
    queue_counts: Mapping[str, int],
) -> list[str]:
    """Problems with an assignment (empty list = valid): unknown members, queues assigned twice, to a
    non-subscriber, or not at all, non-existent queues. O(N + M)."""
    problems = []
    _, eligible, queues = _universe(members, queue_counts)
    seen: dict[Queue, str] = {}
    for m, qs in assignment.items():
        if m not in members:
            problems.append(f"unknown member {m}")
            continue
        for q in qs:
            t, i = q
            if not (0 <= i < queue_counts.get(t, 0)):
                problems.append(f"{m}: no such queue {q}")
            elif t not in members[m].topics:
                problems.append(f"{m}: not subscribed to {t}")
            if q in seen:
                problems.append(f"{q} assigned to {seen[q]} and {m}")
            seen[q] = m
    problems.extend(f"{q} unassigned" for q in queues if q not in seen)
    return problems


def moved_queues(before: Mapping[str, Iterable[Queue]], after: Mapping[str, Iterable[Queue]]) -> set[Queue]:
    """Queues that had an owner before and have a different owner (or none) after. O(N)."""
    owner_after = {q: m for m, qs in after.items() for q in qs}
    return {q for m, qs in before.items() for q in qs if owner_after.get(q) != m}


def _loads(assignment, weights):
    if weights is None:
        return {m: float(len(qs)) for m, qs in assignment.items()}
    return {m: float(sum(weights.get(q, 0.0) for q in qs)) for m, qs in assignment.items()}


def imbalance(assignment: Mapping[str, Iterable[Queue]], weights: Mapping[Queue, float] | None = None) -> float:
    """max - min of the members' queue counts (or loads with ``weights``); 0 for no members. O(N)."""
    loads = _loads({m: list(qs) for m, qs in assignment.items()}, weights)
    return max(loads.values()) - min(loads.values()) if loads else 0.0


def is_balanced(
    assignment: Mapping[str, Iterable[Queue]],
    members: Mapping[str, Subscription],
    weights: Mapping[Queue, float] | None = None,
    tolerance: float = 1e-9,
) -> bool:
    """True when no single queue move to a subscribed member strictly lowers the pair's max load.

    ``weights`` must be the effective weights (use unit weights = ``None`` for count balance).
    O(N·M) in the worst case (per topic only the least-loaded subscriber is checked)."""
    assignment = {m: list(qs) for m, qs in assignment.items()}
    loads = _loads(assignment, weights)
    least: dict[str, float] = {}
    for m, sub in members.items():
        for t in sub.topics:
            least[t] = min(least.get(t, float("inf")), loads.get(m, 0.0))
    total = sum(loads.values()) or 1.0
    for m, qs in assignment.items():
        for q in qs:
            wq = 1.0 if weights is None else weights.get(q, 0.0)
            if least.get(q[0], float("inf")) + wq < loads[m] - tolerance * total:
                return False
    return True
