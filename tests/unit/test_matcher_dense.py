"""SubscriptionIndex on a *dense* workload (issue 8): many subscriptions without conditions, random
conditions of every kind (values with numbers vs strings vs booleans, range, prefix, anything-but,
exists true/false, tags any-of) on a topic hierarchy, ~8 % of the subscriptions matching each
message — checked against a plain linear scan of API.md's semantics, seeded and with hypothesis.

The reference (tests/matcher_reference.py, shared with test_matcher_blocks and
test_matcher_distractors) is written from API.md "Subscriptions" alone: it shares no code with the
index or with tests/unit/test_matcher_index.py.
"""
from __future__ import annotations

import copy
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from matcher import SubscriptionIndex
from tests.matcher_reference import answer, reference

# ------------------------------------------------------------------ the dense distribution
SUB_TOPICS = ["mkt"] * 6 + ["mkt/eq"] * 3 + ["mkt/eq/sh", "mkt/fx", "mkt/eq/sz", "news"]
PUB_TOPICS = ["mkt/eq/sh", "mkt/eq/sh", "mkt/eq/sz", "mkt/eq/sh/star", "mkt/fx/spot", "mkt", "news/x"]
TAGS = ["hot", "warm", "cold", "l1", "l2", "vip"]
TYPES = ["A", "B", "C"]
VENUES = ["XSHG", "XSHE", "XHKG", "BATS"]
# numbers, their strings and booleans side by side: "1" is not 1, true is not 1, 1 is 1.0
LEVELS = [0, 1, 2, 3, 1.0, 2.5, "0", "1", "2", "3", "2.5", True, False]
FIELDS = ["type", "level", "venue", "price", "qty", "opt", "flag"]


def random_level(rng: random.Random, field: str) -> dict:
    kind = rng.randrange(6)
    if kind == 0:
        pool = {"type": TYPES, "venue": VENUES, "flag": [True, False, 1, "true"]}.get(field, LEVELS)
        return {"field": field, "values": rng.sample(pool, rng.randint(1, min(4, len(pool))))}
    if kind == 1:
        pool = {"type": TYPES, "venue": VENUES}.get(field, LEVELS)
        return {"field": field, "anything_but": rng.sample(pool, rng.randint(1, 2))}
    if kind == 2:
        lo = rng.choice([0, 0.5, 1, 2, 10, 50, 100])
        return {"field": field, "range": [lo, lo + rng.choice([0, 0.5, 1, 2, 50, 500])]}
    if kind == 3:
        return {"field": field, "prefix": rng.choice(["", "X", "XS", "XSH", "B", "A", "1", "2."])}
    return {"field": field, "exists": kind == 4}


def dense_subscriptions(rng: random.Random, n: int, codes: list[str]) -> dict:
    subs = {}
    for i in range(n):
        r = rng.random()
        tags = None
        if r < 0.35:  # no condition at all: topic only, or tags only
            levels = []
            if rng.random() < 0.4:
                tags = rng.sample(TAGS, rng.randint(1, 3))
        else:
            # random fields with repeats: two levels on one field happen (and AND)
            levels = [random_level(rng, rng.choice(FIELDS)) for _ in range(rng.randint(1, 3))]
            if r > 0.55:  # anchored on a stock code
                levels.append({"field": "sym", "values": rng.sample(codes, rng.choice([1, 1, 1, 2]))})
            if rng.random() < 0.2:
                tags = rng.sample(TAGS, rng.randint(1, 2))
        subs[f"s{i}"] = (rng.choice(SUB_TOPICS), levels, tags)
    return subs


def dense_message(rng: random.Random, codes: list[str]) -> tuple:
    props = {"sym": rng.choice(codes), "type": rng.choice(TYPES), "level": rng.choice(LEVELS),
             "price": rng.choice([0, 0.5, 1, 2, 10, 50.5, 100, 101, 600, "1", True])}
    for field, p, pool in (("venue", 0.8, VENUES + ["X", "XS", "2.5", ""]), ("qty", 0.6, [0, 1, 2, 500, "2"]),
                           ("opt", 0.5, ["y", 1]), ("flag", 0.5, [True, False, 1, "true"])):
        if rng.random() < p:
            props[field] = rng.choice(pool)
    return rng.choice(PUB_TOPICS), props, rng.sample(TAGS + ["other"], rng.randint(0, 3))


def build(subs: dict, order=None) -> SubscriptionIndex:
    idx = SubscriptionIndex()
    for sid in order or subs:
        topic, levels, tags = subs[sid]
        idx.add(sid, topic, copy.deepcopy(levels), tags=tags)
    return idx


# ------------------------------------------------------------------ seeded
@pytest.mark.parametrize("seed", range(4))
def test_dense_seeded_against_linear_scan(seed):
    rng = random.Random(seed)
    codes = [f"{c:06d}" for c in rng.sample(range(1_000_000), 300)]
    subs = dense_subscriptions(rng, 3000, codes)
    idx = build(subs)
    idx._check()
    total = 0
    for _ in range(120):
        topic, props, tags = dense_message(rng, codes)
        expected = reference(subs, topic, props, tags)
        assert answer(idx, topic, props, tags) == expected, (topic, props, tags)
        total += len(expected)
    assert 0.04 < total / 120 / len(subs) < 0.2, "not the dense workload any more"


@pytest.mark.parametrize("seed", range(2))
def test_dense_with_removals_and_replacements(seed):
    rng = random.Random(100 + seed)
    codes = [f"{c:06d}" for c in rng.sample(range(1_000_000), 100)]
    subs = dense_subscriptions(rng, 1500, codes)
    idx = build(subs)
    for step in range(1500):
        sid = rng.choice(list(subs))
        if rng.random() < 0.5:
            idx.remove(sid)
            del subs[sid]
        else:  # replace with another random subscription under the same id
            subs[sid] = next(iter(dense_subscriptions(rng, 1, codes).values()))
            idx.add(sid, *subs[sid][:2], tags=subs[sid][2])
        if step % 25 == 0:
            topic, props, tags = dense_message(rng, codes)
            assert answer(idx, topic, props, tags) == reference(subs, topic, props, tags)
        if step % 300 == 0:
            idx._check()
    idx._check()
    assert len(idx) == len(subs)


def test_insertion_order_does_not_change_answers():
    """The canonical order of a subscription's levels depends on what was added before it (value
    statistics); the answers must not."""
    rng = random.Random(5)
    codes = [f"{c:06d}" for c in rng.sample(range(1_000_000), 50)]
    subs = dense_subscriptions(rng, 800, codes)
    ids = list(subs)
    shuffled = ids[:]
    rng.shuffle(shuffled)
    a, b, c = build(subs, ids), build(subs, list(reversed(ids))), build(subs, shuffled)
    for _ in range(150):
        topic, props, tags = dense_message(rng, codes)
        expected = reference(subs, topic, props, tags)
        assert answer(a, topic, props, tags) == answer(b, topic, props, tags) == answer(c, topic, props, tags) == expected


def test_selective_level_goes_first():
    """[level in {...}, sym in {code}]: the high-cardinality ``sym`` level is the root edge, so a
    message visits one ``sym`` node instead of every ``level`` value set (bench: dense workload)."""
    rng = random.Random(1)
    subs = {f"s{i}": ("t", [{"field": "level", "values": rng.sample([1, 2, 3, 4, 5, "1", "2"], 3)},
                            {"field": "sym", "values": [f"{i:06d}"]}], None) for i in range(400)}
    idx = build(subs)
    idx._check()
    assert idx.match("t", {}) == []  # files the staged ones (added while ``sym`` looked broad)
    idx._check()
    by_field: dict = {}
    for field, _ in idx._roots["t"].exact:
        by_field[field] = by_field.get(field, 0) + 1
    # only the first subscription or two, added before ``sym`` looked selective, start with ``level``
    assert by_field.get("sym", 0) >= 398 and by_field.get("level", 0) <= 3, by_field
    for i in (0, 7, 399):
        for level in (1, "1", 2, 4):
            props = {"level": level, "sym": f"{i:06d}"}
            assert answer(idx, "t", props, ()) == reference(subs, "t", props, ())


# ------------------------------------------------------------------ hypothesis
codes_st = st.sampled_from(["000001", "000002", "600000"])
value_st = st.sampled_from(LEVELS + ["A", "B", "XSHG", "X"])
level_st = st.one_of(
    st.builds(lambda f, v: {"field": f, "values": v}, st.sampled_from(FIELDS + ["sym"]),
              st.lists(st.one_of(value_st, codes_st), min_size=1, max_size=4)),
    st.builds(lambda f, v: {"field": f, "anything_but": v}, st.sampled_from(FIELDS),
              st.lists(value_st, min_size=1, max_size=3)),
    st.builds(lambda f, a, b: {"field": f, "range": sorted([a, b])}, st.sampled_from(FIELDS),
              st.sampled_from([0, 0.5, 1, 1.0, 2, 2.5, 3]), st.sampled_from([0, 0.5, 1, 2, 2.5, 3])),
    st.builds(lambda f, p: {"field": f, "prefix": p}, st.sampled_from(FIELDS + ["sym"]),
              st.sampled_from(["", "X", "XS", "1", "2.", "00", "6"])),
    st.builds(lambda f, e: {"field": f, "exists": e}, st.sampled_from(FIELDS), st.booleans()),
)
sub_st = st.tuples(
    st.sampled_from(SUB_TOPICS),
    # half the subscriptions have no condition (the dense part)
    st.one_of(st.just([]), st.lists(level_st, min_size=1, max_size=4)),
    st.one_of(st.none(), st.lists(st.sampled_from(TAGS), max_size=3)),
)
message_st = st.tuples(
    st.sampled_from(PUB_TOPICS + ["mkt/eq/sh/star/x", "mktx", "mkt/eqx"]),
    st.dictionaries(st.sampled_from(FIELDS + ["sym"]), st.one_of(value_st, codes_st), max_size=7),
    st.lists(st.sampled_from(TAGS + ["other"]), max_size=4),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(subs=st.lists(sub_st, min_size=1, max_size=60), messages=st.lists(message_st, min_size=1, max_size=12))
def test_dense_hypothesis_against_linear_scan(subs, messages):
    table = {f"s{i}": s for i, s in enumerate(subs)}
    idx = build(table)
    idx._check()
    for topic, props, tags in messages:
        assert answer(idx, topic, props, tags) == reference(table, topic, props, tags)


# ------------------------------------------------------------------ regressions
@pytest.mark.parametrize("how", ["deepcopy", "pickle"])
def test_copied_index_keeps_boolean_semantics(how):
    """A JSON boolean's key was a plain object compared by identity: a deep-copied or unpickled
    index (a cache shipped to another process) held new key objects, so ``values: [true]`` stopped
    matching ``true`` and ``anything_but: [false]`` started matching ``false``."""
    import pickle

    subs = {"yes": ("t", [{"field": "f", "values": [True]}], None),
            "not-false": ("t", [{"field": "g", "anything_but": [False]}], None),
            "one": ("t", [{"field": "f", "values": [1]}], None)}
    idx = build(subs)
    idx = copy.deepcopy(idx) if how == "deepcopy" else pickle.loads(pickle.dumps(idx))
    idx._check()
    for props in ({"f": True, "g": False}, {"f": 1, "g": True}, {"f": False, "g": 0}):
        assert answer(idx, "t", props, ()) == reference(subs, "t", props, ()), props


@pytest.mark.parametrize("level", [
    {"field": "f", "values": [10 ** 400]},
    {"field": "f", "anything_but": [10 ** 400]},
    {"field": "f", "range": [0, 10 ** 400]},
])
def test_huge_integer_condition_is_a_value_not_a_crash(level):
    """JSON integers have no size limit and Python parses them exactly; ``math.isfinite`` on one
    beyond float range raised OverflowError (an API 500) instead of validating."""
    subs = {"s": ("t", [level], None)}
    idx = build(subs)
    for props in ({"f": 10 ** 400}, {"f": 1}, {"f": 1e308}, {}):
        assert answer(idx, "t", props, ()) == reference(subs, "t", props, ()), props
