"""SubscriptionIndex on the held-out-style workloads of issue 33 and their adversarial variants,
drawn by the generators ``bench/matcher.py`` times (``Adversary``, ``ADVERSARIES``): skewed values,
few and many levels, two levels on one field, many and few matches, never-matching distractors.

Exactness against the linear scan written from API.md (``tests/matcher_reference.py``) in every
state the index passes through: freshly built (the static bit blocks, before any traffic), after a
re-order learned from traffic (the learned blocks), through removals and replacements, after an
``adopt``-ed rebuild. Each generator's premise is checked too, so a variant that drifts from what
it claims to be fails here instead of silently measuring something else.
"""
from __future__ import annotations

import copy
import importlib.util
import os
import random

import pytest

import matcher.index as index_mod
from matcher import SubscriptionIndex
from tests.matcher_reference import answer, reference

_BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "matcher.py")
_spec = importlib.util.spec_from_file_location("bench_matcher_for_tests", _BENCH)
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

VARIANTS = sorted(bench.ADVERSARIES)


def draw(name: str, seed: int, n: int, m: int) -> tuple[dict, list]:
    adv = bench.ADVERSARIES[name]
    rng = random.Random(seed)
    subs, _ = adv.subscriptions(n, rng)
    msgs = adv.messages(m, None, rng)
    return {sid: (topic, levels, tags) for sid, topic, levels, tags in subs}, msgs


def build(subs: dict) -> SubscriptionIndex:
    idx = SubscriptionIndex()
    for sid, (topic, levels, tags) in subs.items():
        idx.add(sid, topic, copy.deepcopy(levels), tags=tags)
    return idx


def rates(subs: dict, msgs: list) -> float:
    return sum(len(reference(subs, *msg)) for msg in msgs) / (len(msgs) * len(subs))


# ------------------------------------------------------------------ premises of the generators
def test_heldout_premise():
    """Six fields, 0-3 levels of the four kinds the issue names, ~30 % with tags, ~8 % matching."""
    subs, msgs = draw("heldout", 1, 3000, 60)
    kinds = {k for _, levels, _ in subs.values() for lv in levels for k in lv if k != "field"}
    assert kinds == {"range", "prefix", "anything_but", "exists"}
    assert {lv["field"] for _, levels, _ in subs.values() for lv in levels} == set(bench.H_FIELDS)
    assert {len(levels) for _, levels, _ in subs.values()} == {0, 1, 2, 3}
    assert all(len(lv["prefix"]) == 1 for _, levels, _ in subs.values() for lv in levels if "prefix" in lv)
    assert 0.25 < sum(1 for _, _, tags in subs.values() if tags) / len(subs) < 0.35
    assert 0.05 < rates(subs, msgs) < 0.13


def test_variant_premises():
    base = rates(*draw("heldout", 2, 2000, 40))
    assert rates(*draw("ho-many-matches", 2, 2000, 40)) > 1.8 * base
    assert rates(*draw("ho-few-matches", 2, 2000, 40)) < 0.5 * base
    subs, msgs = draw("ho-distractors", 2, 2000, 200)
    never = {sid for sid in subs if sid.startswith("hdis-")}
    assert 0.4 < len(never) / len(subs) < 0.6
    for msg in msgs:  # a distractor never matches
        assert not reference(subs, *msg) & never, msg
    subs, _ = draw("ho-repeat-fields", 2, 2000, 1)
    assert sum(1 for _, levels, _ in subs.values() if len({lv["field"] for lv in levels}) < len(levels)) > 200
    subs, _ = draw("ho-many-levels", 2, 2000, 1)
    assert max(len(levels) for _, levels, _ in subs.values()) == 6
    assert sum(1 for _, levels, _ in subs.values() if len(levels) > 3) > 500
    subs, _ = draw("ho-few-levels", 2, 2000, 1)
    assert sum(1 for _, levels, _ in subs.values() if len(levels) <= 1) > 1300
    _, msgs = draw("ho-skew", 2, 10, 400)
    assert sum(1 for _, props, _ in msgs if props["qty"] in (100, 500, 1000)) > 120  # uniform: ~0.1


# ------------------------------------------------------------------ exactness in every state
@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize("name", VARIANTS)
def test_exact_fresh_learned_churned_and_adopted(name, seed, monkeypatch):
    monkeypatch.setattr(index_mod, "_MIN_SAMPLE", 8)
    subs, msgs = draw(name, 100 + seed, 700, 160)
    idx = build(subs)
    for msg in msgs[:40]:  # fresh: the static blocks (formed by the first match)
        assert answer(idx, *msg) == reference(subs, *msg), msg
    idx._check()
    if name != "ho-few-matches":
        assert idx._inblock, "statically broad subscriptions go to blocks before any traffic"
    idx.reorder()  # learned from the 40 messages
    idx._check()
    for msg in msgs[40:80]:
        assert answer(idx, *msg) == reference(subs, *msg), msg
    rng = random.Random(seed)
    adv = bench.ADVERSARIES[name]
    for step in range(150):  # churn: removals, replacements, new ids, matches in between
        sid = rng.choice(sorted(subs))
        if rng.random() < 0.5:
            idx.remove(sid)
            del subs[sid]
        else:
            new_id = sid if rng.random() < 0.5 else f"n{step}"
            _, topic, levels, tags = adv.sub(step, rng)
            subs[new_id] = (topic, levels, tags)
            idx.add(new_id, topic, copy.deepcopy(levels), tags=tags)
        if step % 5 == 0:
            msg = msgs[80 + step // 5]
            assert answer(idx, *msg) == reference(subs, *msg), (step, msg)
    idx._check()
    rebuilt = SubscriptionIndex()
    rebuilt.adopt(idx)
    for sid, (topic, levels, tags) in subs.items():
        rebuilt.add(sid, topic, copy.deepcopy(levels), tags=tags)
    for msg in msgs[110:]:
        assert answer(rebuilt, *msg) == reference(subs, *msg) == answer(idx, *msg), msg
    rebuilt._check()


# ------------------------------------------------------------------ what the representation changes
def test_two_levels_on_one_field_join_a_block():
    """A subscription with a range and an anything-but on one field is as dense as any: it goes to a
    block (the second level in the field's slot 1), before and after traffic, and stays exact."""
    idx = SubscriptionIndex()
    subs = {}
    for i in range(200):
        levels = [{"field": "q", "range": [i % 50, 60 + i % 40]}, {"field": "q", "anything_but": [i % 7 + 55]}]
        subs[f"s{i}"] = ("t", levels, None)
        idx.add(f"s{i}", "t", levels)
    msgs = [("t", {"q": q}, []) for q in range(-2, 105)]
    for msg in msgs:
        assert answer(idx, *msg) == reference(subs, *msg), msg
    assert len(idx._inblock) == 200
    idx.reorder()
    assert len(idx._inblock) == 200, "learned: both levels pass often, so the block keeps them"
    idx._check()
    for msg in msgs:
        assert answer(idx, *msg) == reference(subs, *msg), msg


def test_no_traffic_fields_few_members_constrain_stay_in_the_trie():
    """Before any traffic, 3,000 ``exists: true`` on 3,000 distinct fields would be 3,000 block slots
    (Python steps per message); they stay in the trie, the common-field ones go to the block."""
    idx = SubscriptionIndex()
    subs = {}
    for i in range(3000):
        subs[f"x{i}"] = ("t", [{"field": f"ghost{i}", "exists": True}], None)
    for i in range(600):
        subs[f"c{i}"] = ("t", [{"field": "px", "range": [i % 90, 100]}], None)
    for sid, (topic, levels, tags) in subs.items():
        idx.add(sid, topic, levels, tags=tags)
    msg = ("t", {"px": 50, "ghost7": 1}, [])
    assert answer(idx, *msg) == reference(subs, *msg)
    assert set(idx._inblock) == {f"c{i}" for i in range(600)}
    assert len(idx._blocks["t"].fields) == 1
    idx._check()


def test_reorder_and_block_rebuild_leave_the_collector_as_they_found_it():
    """Re-orders and block rebuilds pause the cyclic garbage collector (half a re-order's time at
    10k was full collections); it must be running again afterwards, and stay off if it was off."""
    import gc

    subs, msgs = draw("heldout", 5, 300, 40)
    assert gc.isenabled()
    idx = build(subs)
    idx.match(*msgs[0])  # the first match forms the static blocks (_rebuild_blocks)
    assert idx._inblock and gc.isenabled()
    idx.reorder()
    assert gc.isenabled()
    gc.disable()
    try:
        idx.reorder()
        assert not gc.isenabled()
    finally:
        gc.enable()
    for msg in msgs:
        assert answer(idx, *msg) == reference(subs, *msg), msg
