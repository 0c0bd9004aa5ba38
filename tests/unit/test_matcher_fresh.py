"""SubscriptionIndex from a fresh build (issue 33 item 4): the subscriptions that qualify for a bit
block are *staged* by ``add`` (in no structure) and filed by the next ``match`` — all at once into
the blocks after a bulk build, never through the trie; into the trie to wait for a block when only a
few were added — and a re-order keeps a block whose membership barely changes (its bits do not
depend on the level order), clearing the bits of the members that leave.

Exactness against the linear reference (tests/matcher_reference.py) and ``_check()`` (which covers
the staged ones: in no other structure, counted in the value statistics) in every state: staged,
filed, after re-orders, through adds, replacements and removals of staged, pending, trie and block
members, and after ``adopt``. The fast path of ``validate_conditions`` is held to its full checks.
"""
from __future__ import annotations

import copy
import random
from types import MappingProxyType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import matcher.index as index_mod
from matcher import SubscriptionIndex
from matcher.index import validate_conditions
from tests.matcher_reference import answer, reference
from tests.unit.test_matcher_adversarial import VARIANTS, draw


def _counting_inserts(monkeypatch) -> list:
    inserted: list = []
    real = index_mod.SubscriptionIndex._insert
    monkeypatch.setattr(index_mod.SubscriptionIndex, "_insert",
                        lambda self, sid, topic, labels: (inserted.append(sid), real(self, sid, topic, labels)))
    return inserted


def test_a_bulk_build_files_its_dense_subscriptions_into_blocks_without_the_trie(monkeypatch):
    subs, msgs = draw("heldout", 11, 2500, 15)
    inserted = _counting_inserts(monkeypatch)
    idx = SubscriptionIndex()
    for sid, (topic, levels, tags) in subs.items():
        idx.add(sid, topic, copy.deepcopy(levels), tags=tags)
    assert len(idx._staged) > 1200 and not idx._inblock and not idx._pending
    assert set(inserted).isdisjoint(idx._staged) and len(idx) == len(subs)
    assert all(sid in idx for sid in subs) and sorted(idx.topics()) == sorted({t for t, _, _ in subs.values()})
    idx._check()
    staged = set(idx._staged)
    assert answer(idx, *msgs[0]) == reference(subs, *msgs[0])
    idx._check()
    assert not idx._staged and not idx._pending and len(idx._inblock) > 1200
    # every block member went straight into its block: none was ever in the trie
    assert set(idx._inblock) <= staged and set(idx._inblock).isdisjoint(inserted)
    for msg in msgs[1:]:
        assert answer(idx, *msg) == reference(subs, *msg)


def test_a_few_adds_wait_in_the_trie_and_join_the_block_with_the_next_rebuild():
    subs, msgs = draw("heldout", 12, 2000, 30)
    idx = SubscriptionIndex()
    for sid, (topic, levels, tags) in subs.items():
        idx.add(sid, topic, copy.deepcopy(levels), tags=tags)
    idx.match(*msgs[0])
    blocks = dict(idx._blocks)
    extra = {f"x{i}": ("t", [{"field": "qty", "range": [0, 10_000]}], None) for i in range(5)}
    for sid, (topic, levels, tags) in extra.items():
        idx.add(sid, topic, levels, tags=tags)
    assert set(idx._staged) == set(extra)
    subs.update(extra)
    assert answer(idx, *msgs[1]) == reference(subs, *msgs[1])
    idx._check()
    # too few for a block rebuild: in the trie, waiting; the blocks untouched
    assert not idx._staged and set(idx._pending) == set(extra) and idx._blocks == blocks
    for msg in msgs[2:]:
        assert answer(idx, *msg) == reference(subs, *msg)


def test_a_reorder_keeps_a_block_whose_members_barely_change(monkeypatch):
    """The second re-order, 30 messages after the first: the rates move a little, so a block loses
    or gains fewer than B >> _KEEP_SHIFT members and is kept (those leaving: dead bits)."""
    monkeypatch.setattr(index_mod, "_MIN_WASTE", 10 ** 9)  # re-orders only where the test asks
    subs, msgs = draw("heldout", 13, 2000, 200)
    idx = SubscriptionIndex()
    for sid, (topic, levels, tags) in subs.items():
        idx.add(sid, topic, copy.deepcopy(levels), tags=tags)
    for msg in msgs[:150]:  # the traffic sample (the answers checked below and in the other tests)
        idx.match(*msg)
    idx.reorder()  # the first learned re-order changes the static blocks a lot: rebuilt
    idx._check()
    for msg in msgs[150:180]:
        idx.match(*msg)
    before = dict(idx._blocks)
    members = {topic: blk.count for topic, blk in before.items()}
    idx.reorder()
    idx._check()
    kept = [t for t, blk in idx._blocks.items() if before.get(t) is blk]
    assert kept, "a block whose members barely change should be kept, not rebuilt"
    for t in kept:  # the members that left are dead bits, not a rebuild
        blk = idx._blocks[t]
        assert blk.count <= members[t] and len(blk.ids) - blk.count == members[t] - blk.count
        for pos, labels in enumerate(blk.labels):
            if labels is not None:
                assert idx._eligible(labels), pos
    assert idx._dead == sum(len(b.ids) - b.count for b in idx._blocks.values())
    for msg in msgs[180:]:
        assert answer(idx, *msg) == reference(subs, *msg)
    idx._check()


@pytest.mark.parametrize("name", VARIANTS)
def test_staged_filed_and_reordered_exact_through_churn(name, monkeypatch):
    """Seeded stress: bulk adds (filed into blocks), trickles (filed into the trie), replacements and
    removals of staged, pending, trie and block members, re-orders (forced and from traffic), an
    adopted rebuild — ``_check()`` and the reference throughout."""
    monkeypatch.setattr(index_mod, "_MIN_SAMPLE", 8)
    monkeypatch.setattr(index_mod, "_MIN_WASTE", 2_000)
    subs, msgs = draw(name, 21, 1100, 170)
    rng = random.Random(name)
    idx = SubscriptionIndex()
    pool = list(subs.items())
    live: dict = {}
    for sid, (topic, levels, tags) in pool[:600]:
        idx.add(sid, topic, copy.deepcopy(levels), tags=tags)
        live[sid] = (topic, levels, tags)
    idx._check()
    for step, msg in enumerate(msgs):
        if step % 40 == 39:  # a bulk of adds (more than the rebuild threshold) or a trickle
            for sid, sub in pool[600 + step: 600 + step + (250 if step % 80 == 39 else 3)]:
                idx.add(sid, sub[0], copy.deepcopy(sub[1]), tags=sub[2])
                live[sid] = sub
        r = rng.random()
        sid = rng.choice(list(live))
        if r < 0.25:  # remove (staged, pending, trie or block member)
            idx.remove(sid)
            del live[sid]
        elif r < 0.5:  # replace with another subscription's levels
            topic, levels, tags = rng.choice(pool)[1]
            idx.add(sid, topic, copy.deepcopy(levels), tags=tags)
            live[sid] = (topic, levels, tags)
        if step % 20 == 0 or step % 40 == 39:
            idx._check()
        if step == 90:
            idx.reorder()
            idx._check()
        if step == 130:  # a rebuild from scratch that keeps what was learned (the fan-out's cache)
            new = SubscriptionIndex()
            new.adopt(idx)
            for s, (topic, levels, tags) in live.items():
                new.add(s, topic, copy.deepcopy(levels), tags=tags)
            new._check()
            idx = new
        assert len(idx) == len(live)
        assert answer(idx, *msg) == reference(live, *msg), (step, msg)
    idx._check()
    assert idx._reorders >= 1


def test_adopted_rebuilds_under_churn_keep_the_rate_memo_bounded_by_what_its_labels_hold():
    """A tenant churning subscriptions with big value sets, each create and delete a rebuild of the
    fan-out's index that adopts what was learned (lakeq.fanout.worker.Matcher.load): the pass-rate
    memo keys every label it rated and outlives the rebuilds until the next re-order, so a bound on
    its entries alone (2**18 labels of up to 64 KiB of conditions each) let a churning tenant fill
    the fan-out's memory with labels of deleted subscriptions. Bound: the values the keys hold."""
    base = [{"field": "x", "range": [0, 10]}]
    idx = SubscriptionIndex()
    idx.add("base", "t", base)
    for i in range(40):
        idx.match("t", {"x": i % 12})
    idx.reorder()
    learned = idx._learned
    assert learned is not None
    for i in range(300):
        new = SubscriptionIndex()
        new.adopt(idx)
        new.add("base", "t", base)
        new.add(f"churn{i}", "t", [{"field": "x", "values": list(range(i * 2000, (i + 1) * 2000))}])
        assert answer(new, "t", {"x": i * 2000 + 1000}, ()) == {f"churn{i}"}
        idx = new
    assert idx._learned is learned  # the premise: one memo across the adopted rebuilds
    held = sum(len(arg) if isinstance(arg, (frozenset, str)) else 1 for _, _, arg in learned.memo)
    assert held <= index_mod._MEMO, held


def test_after_traffic_a_block_takes_no_member_constraining_a_field_few_members_constrain():
    """A hostile tenant's 100 subscriptions (the per-client limit), each 64 levels ``exists: false``
    (the level limit) on fields of its own that no message carries: every level passes every sampled
    message, so once traffic is measured they qualify for the topic's block — and before, each took
    its 64 fields into the block as slots, 6,400 AND-ings of the whole block's bits for every message
    on the topic and its children, whoever subscribed there (heldout 10k: ~313 -> ~1,710 µs a
    message, load ~5; main's index alike). The rule a fresh build keeps (``_common_fields``: a field
    constrained by fewer than max(4, B / 64) members stays out) holds after traffic too."""
    subs, msgs = draw("heldout", 14, 3000, 120)
    hostile = {f"evil{i}": ("t", [{"field": f"z{i}_{j}", "exists": False} for j in range(64)], None)
               for i in range(100)}
    idx = SubscriptionIndex()
    for sid, (topic, levels, tags) in subs.items():
        idx.add(sid, topic, copy.deepcopy(levels), tags=tags)
    for msg in msgs[:60]:
        idx.match(*msg)
    for sid, (topic, levels, tags) in hostile.items():
        idx.add(sid, topic, copy.deepcopy(levels), tags=tags)
    idx.reorder()  # the measured rates: every hostile level passes every sampled message
    assert all(idx._eligible(tuple(index_mod._labels(levels))) for _, levels, _ in hostile.values())
    subs.update(hostile)
    for msg in msgs[60:]:
        assert answer(idx, *msg) == reference(subs, *msg)
    idx._check()
    assert idx._blocks, "the premise: the dense subscriptions are in blocks"
    slots = max(len(blk.fields) for blk in idx._blocks.values())
    assert slots <= 12, {t: len(blk.fields) for t, blk in idx._blocks.items()}
    assert not any(sid in idx._inblock for sid in hostile)


# ------------------------------------------------------------------ validate_conditions' fast path
_scalar = st.one_of(st.text(max_size=3), st.integers(-3, 3), st.floats(allow_nan=True, allow_infinity=True),
                    st.booleans(), st.none(), st.lists(st.integers(), max_size=1))
_arg = st.one_of(_scalar, st.lists(_scalar, max_size=4), st.tuples(_scalar, _scalar))
_level = st.one_of(
    st.dictionaries(st.sampled_from(["field", "values", "range", "prefix", "anything_but", "exists", "x"]),
                    st.one_of(st.sampled_from(["a", "", "b"]), _arg), min_size=1, max_size=3),
    st.builds(lambda f, k, a: {"field": f, k: a}, st.sampled_from(["a", "", 3]),
              st.sampled_from(["values", "range", "prefix", "anything_but", "exists"]), _arg),
)


def _outcome(conditions):
    try:
        return "ok", validate_conditions(conditions)
    except ValueError as e:
        return "error", str(e)


@settings(max_examples=400, deadline=None)
@given(st.lists(_level, max_size=3))
def test_the_fast_path_of_validate_conditions_answers_as_the_full_checks(levels):
    """A plain dict level takes the fast path; the same level behind a read-only mapping the full
    checks: the same normalised copy (values and their JSON types) or the same error."""
    fast = _outcome(levels)
    full = _outcome([MappingProxyType(lv) for lv in levels])
    assert fast[0] == full[0]
    if fast[0] == "error":
        assert fast[1] == full[1]
    else:
        assert repr(fast[1]) == repr(full[1])
        for a, b in zip(fast[1], full[1]):
            for k in a:
                if isinstance(a[k], list):
                    assert [type(x) for x in a[k]] == [type(x) for x in b[k]]
