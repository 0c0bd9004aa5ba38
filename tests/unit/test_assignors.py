"""Assignors: golden examples (Kafka's StickyAssignor javadoc, the seed) and hypothesis properties."""

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lakeq.rebalance.assignors import (
    Subscription as S,
)
from lakeq.rebalance.assignors import (
    assign,
    imbalance,
    is_balanced,
    moved_queues,
    range_assignor,
    round_robin,
    sticky,
    validate_assignment,
)

ALL4 = ["t0", "t1", "t2", "t3"]


def q(name: str):
    """'t1p0' / 't1q0' -> ('t1', 0)."""
    return (name[:2], int(name[3:]))


def qs(*names):
    return sorted(q(n) for n in names)


# ------------------------------------------------------------------------------------- golden tests
def test_kafka_javadoc_example_1_fresh_and_after_c1_leaves():
    counts = {t: 2 for t in ALL4}
    members = {c: S(ALL4) for c in ("C0", "C1", "C2")}
    expected = {
        "C0": qs("t0p0", "t1p1", "t3p0"),
        "C1": qs("t0p1", "t2p0", "t3p1"),
        "C2": qs("t1p0", "t2p1"),
    }
    assert sticky(members, counts) == expected
    assert round_robin(members, counts) == expected

    after = {c: S(ALL4, expected[c]) for c in ("C0", "C2")}
    assert round_robin(after, counts) == {
        "C0": qs("t0p0", "t1p0", "t2p0", "t3p0"),
        "C2": qs("t0p1", "t1p1", "t2p1", "t3p1"),
    }
    assert sticky(after, counts) == {
        "C0": qs("t0p0", "t1p1", "t3p0", "t2p0"),
        "C2": qs("t1p0", "t2p1", "t0p1", "t3p1"),
    }


def test_kafka_javadoc_example_2_fresh_and_after_c0_leaves():
    counts = {"t0": 1, "t1": 2, "t2": 3}
    members = {"C0": S(["t0"]), "C1": S(["t0", "t1"]), "C2": S(["t0", "t1", "t2"])}
    assert round_robin(members, counts) == {
        "C0": qs("t0p0"),
        "C1": qs("t1p0"),
        "C2": qs("t1p1", "t2p0", "t2p1", "t2p2"),
    }
    fresh = sticky(members, counts)
    assert fresh == {"C0": qs("t0p0"), "C1": qs("t1p0", "t1p1"), "C2": qs("t2p0", "t2p1", "t2p2")}

    after = {c: S(members[c].topics, fresh[c]) for c in ("C1", "C2")}
    result = sticky(after, counts)
    assert result == {"C1": qs("t1p0", "t1p1", "t0p0"), "C2": qs("t2p0", "t2p1", "t2p2")}
    assert len(moved_queues({c: fresh[c] for c in after}, result)) == 0  # all 5 preserved


def test_seed_example_c3_joins():
    counts = {"t0": 1, "t1": 2, "t2": 3}
    topics = ["t0", "t1", "t2"]
    before = {
        "c0": qs("t0q0"),
        "c1": qs("t1q0"),
        "c2": qs("t1q1", "t2q0", "t2q1", "t2q2"),
    }
    members = {c: S(topics, before[c]) for c in before} | {"c3": S(topics)}
    result = sticky(members, counts)
    assert validate_assignment(result, members, counts) == []
    assert result["c1"] == before["c1"]  # untouched
    assert sorted(len(v) for v in result.values()) == [1, 1, 2, 2]
    assert set(before["c0"]) <= set(result["c0"])  # c0 keeps t0q0 and gains one
    moved = moved_queues(before, result)
    assert len(moved) == 2 and moved <= set(before["c2"])  # c2 must shrink 4 -> 2: the minimum
    assert len(result["c3"]) == 1
    assert result == {"c0": qs("t0q0", "t2q2"), "c1": qs("t1q0"), "c2": qs("t1q1", "t2q0"), "c3": qs("t2q1")}


def test_range_kafka_example():
    members = {"C0": S(["t0", "t1"]), "C1": S(["t0", "t1"])}
    assert range_assignor(members, {"t0": 3, "t1": 3}) == {
        "C0": qs("t0p0", "t0p1", "t1p0", "t1p1"),
        "C1": qs("t0p2", "t1p2"),
    }


def test_assign_dispatch_and_unknown_name():
    members = {"a": S(["t0"])}
    assert assign("range", members, {"t0": 2}) == {"a": [("t0", 0), ("t0", 1)]}
    with pytest.raises(ValueError):
        assign("nope", members, {"t0": 2})


def test_no_members_and_unsubscribed_topics():
    assert sticky({}, {"t0": 3}) == {}
    assert sticky({"a": S(["zz"])}, {"t0": 3}) == {"a": []}


def test_owned_queue_claimed_twice_stays_with_one():
    members = {"a": S(["t0"], [("t0", 0)]), "b": S(["t0"], [("t0", 0)])}
    out = sticky(members, {"t0": 2})
    assert validate_assignment(out, members, {"t0": 2}) == []
    assert out["a"] == [("t0", 0)]


def test_weights_balance_by_load():
    counts = {"t0": 4}
    weights = {("t0", 0): 10.0, ("t0", 1): 1.0, ("t0", 2): 1.0, ("t0", 3): 1.0}
    members = {"a": S(["t0"]), "b": S(["t0"])}
    out = sticky(members, counts, weights)
    assert out == {"a": [("t0", 0)], "b": [("t0", 1), ("t0", 2), ("t0", 3)]}
    assert imbalance(out, weights) == 7.0
    assert is_balanced(out, members, weights)


def test_weights_must_be_non_negative():
    with pytest.raises(ValueError):
        sticky({"a": S(["t0"])}, {"t0": 1}, {("t0", 0): -1.0})


# ------------------------------------------------------------------------------------- strategies
TOPICS = ["t0", "t1", "t2", "t3"]


@st.composite
def scenarios(draw, uniform=False, max_members=6):
    counts = {t: draw(st.integers(0, 6)) for t in TOPICS}
    n = draw(st.integers(1, max_members))
    mids = [f"m{i}" for i in range(n)]
    all_queues = [(t, i) for t in TOPICS for i in range(counts[t] + 1)]  # includes non-existent queues
    if uniform:
        shared = draw(st.sets(st.sampled_from(TOPICS), min_size=1))
    members = {}
    for m in mids:
        topics = shared if uniform else draw(st.sets(st.sampled_from(TOPICS), min_size=1))
        owned = draw(st.lists(st.sampled_from(all_queues), max_size=8)) if all_queues else []
        members[m] = S(topics, owned)
    return members, counts


def valid_owned(members, counts):
    """The owned queues the sticky assignor can keep (same rule as the implementation)."""
    seen, out = set(), {}
    for m in sorted(members):
        out[m] = []
        for qq in sorted(set(members[m].owned)):
            if qq[0] in members[m].topics and qq[1] < counts.get(qq[0], 0) and qq not in seen:
                seen.add(qq)
                out[m].append(qq)
    return out


SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(scenarios())
def test_every_assignor_assigns_each_queue_once_to_a_subscriber(sc):
    members, counts = sc
    for fn in (sticky, range_assignor, round_robin):
        out = fn(members, counts)
        assert set(out) == set(members)
        assert validate_assignment(out, members, counts) == [], fn.__name__
        assert all(v == sorted(v) for v in out.values())


@SETTINGS
@given(scenarios())
def test_sticky_is_balanced_and_deterministic(sc):
    members, counts = sc
    out = sticky(members, counts)
    assert is_balanced(out, members)
    reordered = dict(reversed(list(members.items())))
    assert sticky(reordered, counts) == out


@SETTINGS
@given(scenarios(uniform=True))
def test_uniform_subscription_counts_differ_by_at_most_one(sc):
    members, counts = sc
    for fn in (sticky, round_robin):
        assert imbalance(fn(members, counts)) <= 1


@SETTINGS
@given(scenarios(uniform=True))
def test_sticky_moves_exactly_the_minimum_needed(sc):
    """Uniform subscriptions: moved == sum(max(0, kept_i - quota_i)), the largest members getting
    the larger quotas — the least any balanced assignment can move."""
    members, counts = sc
    out = sticky(members, counts)
    before = valid_owned(members, counts)
    n = sum(len(v) for v in out.values())
    base, extra = divmod(n, len(members))
    sizes = sorted((len(v) for v in before.values()), reverse=True)
    quotas = [base + 1] * extra + [base] * (len(sizes) - extra)
    assert len(moved_queues(before, out)) == sum(max(0, c - k) for c, k in zip(sizes, quotas))


@settings(max_examples=60, deadline=None)
@given(scenarios(uniform=True, max_members=3))
def test_sticky_minimum_matches_brute_force(sc):
    members, counts = sc
    counts = {t: min(c, 2) for t, c in counts.items()}  # at most 8 queues, 3 members: <= 6561 options
    out = sticky(members, counts)
    before = valid_owned(members, counts)
    mids = sorted(members)
    queues = [x for v in out.values() for x in v]
    best = None
    for owners in itertools.product(mids, repeat=len(queues)):
        cand = {m: [qq for qq, o in zip(queues, owners) if o == m] for m in mids}
        if imbalance(cand) <= 1:
            moves = len(moved_queues(before, cand))
            best = moves if best is None else min(best, moves)
    assert len(moved_queues(before, out)) == best


@SETTINGS
@given(scenarios())
def test_sticky_keeps_a_valid_balanced_assignment_unchanged(sc):
    members, counts = sc
    first = sticky(members, counts)
    again = sticky({m: S(members[m].topics, first[m]) for m in members}, counts)
    assert again == first  # balanced and complete: nothing moves


@SETTINGS
@given(scenarios(), st.data())
def test_sticky_member_leaving_moves_only_its_queues_when_uniform_and_balanced(sc, data):
    members, counts = sc
    first = sticky(members, counts)
    gone = data.draw(st.sampled_from(sorted(members)))
    rest = {m: S(members[m].topics, first[m]) for m in members if m != gone}
    if not rest:
        return
    out = sticky(rest, counts)
    assert validate_assignment(out, rest, counts) == []
    if len({frozenset(s.topics) for s in members.values()}) == 1:
        # queues of the remaining members never move when one member leaves a balanced group
        assert moved_queues({m: first[m] for m in rest}, out) == set()


@SETTINGS
@given(scenarios(), st.data())
def test_weighted_sticky_is_valid_load_balanced_and_sticky(sc, data):
    members, counts = sc
    all_q = [(t, i) for t in TOPICS for i in range(counts[t])]
    weights = {x: data.draw(st.integers(1, 20)) / 2 for x in all_q}
    out = sticky(members, counts, weights)
    assert validate_assignment(out, members, counts) == []
    assert is_balanced(out, members, weights)
    again = sticky({m: S(members[m].topics, out[m]) for m in members}, counts, weights)
    assert again == out
