"""SubscriptionIndex against subscriptions it was not tuned for (issue 16 item 6): distractors that
can never match — numeric ranges far above every value, a selective prefix under a broad ``values``
level, ``exists: true`` on fields no message carries, ``exists: false`` on fields every message
carries, values of the wrong JSON type, ranges on string fields, tags no message carries,
anything-but lists that exclude nothing — mixed with ordinary random subscriptions, in unlucky add
orders, with the index re-ordering itself from the traffic (``reorder``) in between.

Exactness is checked against a linear scan written from API.md alone; the work a message costs is
checked by counting visited nodes (``idx._visits``), not by timing: adding subscriptions that never
match must not make a message visit more nodes.
"""
from __future__ import annotations

import copy
import pickle
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import matcher.index as index_mod
from matcher import SubscriptionIndex
from tests.matcher_reference import answer, reference

# ------------------------------------------------------------------ the workload
KINDS = ["k0", "k1", "k2", "k3", "k4", "k5"]
ZONES = ["z0", "z1", "z2", "z3"]
TAGS = ["t0", "t1", "t2", "t3"]
FIELDS = ["kind", "tier", "code", "px", "zone"]


def message(rng: random.Random) -> tuple:
    props = {"kind": rng.choice(KINDS), "tier": rng.randint(0, 9), "code": f"{rng.randint(0, 9999):04d}",
             "px": rng.randint(0, 1000) / 4}
    if rng.random() < 0.6:
        props["zone"] = rng.choice(ZONES)
    return rng.choice(["m/a", "m/a/x", "m/b"]), props, rng.sample(TAGS, rng.randint(0, 2))


def ordinary(rng: random.Random) -> tuple:
    levels = []
    for f in rng.sample(FIELDS, rng.randint(0, 3)):
        r = rng.random()
        if f == "kind":
            levels.append({"field": f, "values": rng.sample(KINDS, rng.randint(1, 3))} if r < 0.6
                          else {"field": f, "anything_but": rng.sample(KINDS, 1)})
        elif f == "tier":
            lo = rng.randint(0, 9)
            levels.append({"field": f, "range": [lo, lo + rng.randint(0, 3)]} if r < 0.5
                          else {"field": f, "values": rng.sample(range(10), rng.randint(1, 3))})
        elif f == "code":
            levels.append({"field": f, "prefix": str(rng.randint(0, 9))})
        elif f == "px":
            lo = rng.randint(0, 240)
            levels.append({"field": f, "range": [lo, lo + rng.choice([1, 10, 50])]})
        else:
            levels.append({"field": f, "exists": r < 0.7} if r < 0.4 else {"field": f, "values": [rng.choice(ZONES)]})
    tags = rng.sample(TAGS, rng.randint(1, 2)) if rng.random() < 0.3 else None
    return rng.choice(["m", "m", "m/a", "m/b"]), levels, tags


def broad(rng: random.Random, used: set) -> dict | None:
    choices = [
        {"field": "kind", "values": rng.sample(KINDS, rng.randint(3, 5))},
        {"field": "tier", "values": rng.sample(range(10), rng.randint(4, 8))},
        {"field": "kind", "anything_but": [f"nope{rng.randint(0, 99)}"]},  # excludes nothing
        {"field": "px", "range": [0, rng.randint(200, 900)]},
        {"field": "code", "exists": True},
    ]
    rng.shuffle(choices)
    for c in choices:
        if c["field"] not in used:
            return c
    return None


NEVER = {
    "range_far_above": lambda rng, i: ({"field": rng.choice(["px", "tier"]),
                                        "range": [10 ** 6 + rng.randint(0, 10 ** 5), 10 ** 9]}, None),
    "prefix_never": lambda rng, i: ({"field": rng.choice(["code", "zone"]),
                                     "prefix": rng.choice("XYQ") + str(rng.randint(0, 9))}, None),
    "exists_absent": lambda rng, i: ({"field": f"ghost{i % 300}", "exists": True}, None),
    "absent_present": lambda rng, i: ({"field": rng.choice(["kind", "tier", "code"]), "exists": False}, None),
    "wrong_type": lambda rng, i: ({"field": "tier", "values": [str(rng.randint(0, 9))]}, None),
    "range_on_string": lambda rng, i: ({"field": "code", "range": [0, 9999]}, None),
    "tags_never": lambda rng, i: (None, [f"never{rng.randint(0, 9)}"]),
}


def distractor(rng: random.Random, i: int, kinds=None) -> tuple:
    never, tags = NEVER[rng.choice(kinds or list(NEVER))](rng, i)
    levels = [] if never is None else [never]
    for _ in range(rng.choice([1, 1, 2])):  # under one or two broad levels
        b = broad(rng, {lv["field"] for lv in levels})
        if b is not None:
            levels.append(b)
    rng.shuffle(levels)
    return rng.choice(["m", "m/a"]), levels, tags


def build(subs: dict, order) -> SubscriptionIndex:
    idx = SubscriptionIndex()
    for sid in order:
        topic, levels, tags = subs[sid]
        idx.add(sid, topic, copy.deepcopy(levels), tags=tags)
    return idx


# ------------------------------------------------------------------ distractors never match
@pytest.mark.parametrize("kind", list(NEVER))
def test_distractor_kind_never_matches(kind):
    rng = random.Random(kind)
    subs = {f"d{i}": distractor(rng, i, [kind]) for i in range(300)}
    idx = build(subs, list(subs))
    for _ in range(100):
        topic, props, tags = message(rng)
        assert answer(idx, topic, props, tags) == set() == reference(subs, topic, props, tags)


# ------------------------------------------------------------------ exact, seeded, with re-orders
@pytest.mark.parametrize("seed", range(3))
def test_mixed_workload_exact_through_reorders_and_churn(seed, monkeypatch):
    monkeypatch.setattr(index_mod, "_MIN_SAMPLE", 8)
    monkeypatch.setattr(index_mod, "_MIN_WASTE", 50)
    rng = random.Random(seed)
    subs = {}
    for i in range(1500):
        subs[f"s{i}"] = distractor(rng, i) if rng.random() < 0.6 else ordinary(rng)
    order = list(subs)
    rng.shuffle(order)  # distractors before and after the real ones
    idx = build(subs, order)
    idx._check()
    for step in range(400):
        topic, props, tags = message(rng)
        assert answer(idx, topic, props, tags) == reference(subs, topic, props, tags), (topic, props, tags)
        if step % 10 == 0:  # churn between re-orders: replace, remove, add
            sid = rng.choice(list(subs))
            if rng.random() < 0.5:
                idx.remove(sid)
                del subs[sid]
            else:
                subs[sid] = distractor(rng, step) if rng.random() < 0.5 else ordinary(rng)
                idx.add(sid, *subs[sid][:2], tags=subs[sid][2])
        if step % 100 == 0:
            idx._check()
    assert idx._reorders >= 1, "the test meant to exercise re-ordering"
    idx._check()
    assert len(idx) == len(subs)


def test_reordered_index_survives_copy_and_pickle():
    rng = random.Random(9)
    subs = {f"s{i}": distractor(rng, i) if i % 2 else ordinary(rng) for i in range(400)}
    idx = build(subs, list(subs))
    for _ in range(64):
        idx.match(*message(rng))
    idx.reorder()
    for other in (copy.deepcopy(idx), pickle.loads(pickle.dumps(idx))):
        other._check()
        for _ in range(50):
            topic, props, tags = message(rng)
            assert answer(other, topic, props, tags) == reference(subs, topic, props, tags)


# ------------------------------------------------------------------ hypothesis
value_st = st.one_of(st.sampled_from(KINDS + ZONES + ["", "X1", "01", "9"]), st.integers(-3, 12),
                     st.sampled_from([0.5, 2.5, 1e6, 1e9, True, False, "3", "7"]))
field_st = st.sampled_from(FIELDS + ["ghost", "ghost1"])
level_st = st.one_of(
    st.builds(lambda f, v: {"field": f, "values": v}, field_st, st.lists(value_st, min_size=1, max_size=5)),
    st.builds(lambda f, v: {"field": f, "anything_but": v}, field_st, st.lists(value_st, min_size=1, max_size=3)),
    st.builds(lambda f, a, b: {"field": f, "range": sorted([a, b])}, field_st,
              st.sampled_from([0, 0.5, 2, 9, 100, 10 ** 6, 10 ** 9]), st.sampled_from([0, 3, 250, 10 ** 6, 2e9])),
    st.builds(lambda f, p: {"field": f, "prefix": p}, field_st, st.sampled_from(["", "k", "z1", "0", "9", "X", "Q1"])),
    st.builds(lambda f, e: {"field": f, "exists": e}, field_st, st.booleans()),
)
sub_st = st.tuples(st.sampled_from(["m", "m/a", "m/b", "m/a/x"]),
                   st.lists(level_st, max_size=3),
                   st.one_of(st.none(), st.lists(st.sampled_from(TAGS + ["never"]), max_size=3)))
message_st = st.tuples(st.sampled_from(["m/a", "m/a/x", "m/b", "m", "mx"]),
                       st.dictionaries(field_st, value_st, max_size=6),
                       st.lists(st.sampled_from(TAGS + ["other"]), max_size=3))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(subs=st.lists(sub_st, min_size=1, max_size=40), messages=st.lists(message_st, min_size=1, max_size=10),
       learn=st.lists(message_st, max_size=6), data=st.data())
def test_hypothesis_against_linear_scan_before_and_after_reorder(subs, messages, learn, data):
    table = {f"s{i}": s for i, s in enumerate(subs)}
    order = data.draw(st.permutations(list(table)))  # unlucky add orders
    idx = build(table, order)
    idx._check()
    for topic, props, tags in messages:
        assert answer(idx, topic, props, tags) == reference(table, topic, props, tags)
    for m in learn:  # traffic the order is learned from (possibly nothing)
        idx.match(*m)
    idx.reorder()
    idx._check()
    for topic, props, tags in messages:
        assert answer(idx, topic, props, tags) == reference(table, topic, props, tags)
    drop = data.draw(st.lists(st.sampled_from(list(table)), unique=True, max_size=len(table)))
    for sid in drop:  # removals after a re-order
        idx.remove(sid)
        del table[sid]
    idx._check()
    for topic, props, tags in messages:
        assert answer(idx, topic, props, tags) == reference(table, topic, props, tags)


# ------------------------------------------------------------------ work does not grow with n
def mean_visits(idx: SubscriptionIndex, msgs) -> float:
    total = 0
    for m in msgs:
        idx.match(*m)
        total += idx._visits
    return total / len(msgs)


@pytest.mark.parametrize("kinds", [["range_far_above", "prefix_never", "exists_absent"], None],
                         ids=["issue-kinds", "all-kinds"])
def test_never_matching_subscriptions_add_no_visits(kinds):
    """The same 600 ordinary subscriptions and messages, with 0 and with 12 000 distractors: once
    the index has seen some traffic, a message visits (almost) no more nodes and matches the same."""
    base_rng = random.Random(4)
    base = {f"s{i}": ordinary(base_rng) for i in range(600)}
    rng = random.Random(5)
    more = dict(base, **{f"d{i}": distractor(rng, i, kinds) for i in range(12_000)})
    msgs = [message(random.Random(j)) for j in range(150)]
    warm = [message(random.Random(10_000 + j)) for j in range(300)]
    result = {}
    for name, subs in (("base", base), ("more", more)):
        order = list(subs)
        random.Random(6).shuffle(order)
        idx = build(subs, order)
        for m in warm:
            idx.match(*m)
        result[name] = mean_visits(idx, msgs)
        for topic, props, tags in msgs[:40]:
            assert answer(idx, topic, props, tags) == reference(base, topic, props, tags)
    assert result["more"] <= 1.5 * result["base"] + 5, result


def test_issue_prefix_and_exists_distractors_need_no_traffic():
    """A selective prefix under a broad values level and ``exists: true`` on absent fields are
    ordered right before any message is seen (the bounded kinds go first)."""
    base_rng = random.Random(4)
    base = {f"s{i}": ordinary(base_rng) for i in range(600)}
    rng = random.Random(5)
    more = dict(base, **{f"d{i}": distractor(rng, i, ["prefix_never", "exists_absent"]) for i in range(12_000)})
    msgs = [message(random.Random(j)) for j in range(100)]
    visits = {}
    for name, subs in (("base", base), ("more", more)):
        idx = build(subs, list(subs))
        total = 0
        for m in msgs:
            idx.match(*m)
            total += idx._visits
        assert idx._reorders == 0
        visits[name] = total / len(msgs)
    assert visits["more"] <= 1.2 * visits["base"] + 5, visits


def test_range_window_exact_near_float_precision():
    """Width-class windows compute ``x - 2**e``: near 1e17 or 2**53 that rounds; ranges with int
    and float bounds must still be found exactly."""
    rng = random.Random(1)
    for _ in range(150):
        idx = SubscriptionIndex()
        subs = {}
        base = rng.choice([0, 1e17, 10 ** 17, 2 ** 53, 1e300, -1e17, 0.1])
        for i in range(30):
            lo = base + rng.choice([-3, -1, 0, 1, 2, 0.5, -16, 16, 10 ** 20 if isinstance(base, int) else 1e3])
            hi = max(lo, lo + rng.choice([0, 1, 2, 0.25, 8, 17, 1e6]))
            subs[i] = (lo, hi)
            idx.add(i, "t", [{"field": "x", "range": [lo, hi]}])
        idx._check()
        for _ in range(15):
            x = base + rng.choice([-3, -1, 0, 1, 2, 0.5, 8, 16, 1e3, -1e3])
            if rng.random() < 0.5 and abs(x) < 1e308:
                x = float(x)
            assert set(idx.match("t", {"x": x})) == {i for i, (lo, hi) in subs.items() if lo <= x <= hi}, (base, x)
