"""The produce planner and the message size limit (issue 8, defects 3 and 5). Pure: no AWS."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from lakeq.contract import validation as v
from lakeq.log import claims
from lakeq.log import segments as seg
from lakeq.log.produce_plan import TRANSACT_BYTES, TRANSACT_ITEMS, dedup_item_bytes, segment_item_bytes
from lakeq.log.produce_plan import plan_parts as _plan_parts

DDB_ITEM = 400 * 1024
TOPIC = "t/" + "x" * 198  # the longest topic name: the keys are the largest

text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40)
props = st.dictionaries(st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=8),
                        st.one_of(text, st.integers(-10**12, 10**12), st.booleans(),
                                  st.floats(allow_nan=False, allow_infinity=False)), max_size=4)


@st.composite
def message(draw):
    size = draw(st.sampled_from([0, 10, 1000, 60_000, 150_000, 250_000]))
    return v.MessageIn(id=draw(st.one_of(st.none(), text.filter(bool))), body="é" * (size // 2) + draw(text),
                       key=draw(st.one_of(st.none(), text)), tags=draw(st.lists(text.filter(bool), max_size=3)),
                       properties=draw(props))


def _seg_message(m: v.MessageIn, i: int) -> seg.Message:
    return seg.Message(id=m.id or f"{i:036d}", body=m.body, key=m.key, tags=m.tags, properties=m.properties,
                       produced_at=1_700_000_000_000)


@settings(max_examples=60, deadline=None)
@given(message())
def test_stored_size_is_bounded_by_the_counted_size(m):
    """What the limit counts bounds what a segment stores for the message (plus a fixed
    overhead: produced_at, a generated id, the index entry), so every message fits an item."""
    stored = _seg_message(m, 0).encoded_size()
    assert stored <= v.message_bytes(m) + 100
    # what a segment keeps of one message: inline up to claims.INLINE_BYTES, else its metadata
    # (<= MAX_META_BYTES) and a claim (~170 bytes; issue 18.2); + the fan-out's coordinates
    assert claims.INLINE_BYTES + seg.ENTRY.size + 400 <= seg.SEGMENT_DATA_LIMIT
    assert v.MAX_META_BYTES + 100 + 200 + seg.ENTRY.size + 400 <= seg.SEGMENT_DATA_LIMIT
    assert seg.SEGMENT_DATA_LIMIT + segment_item_bytes(TOPIC + "#63", seg.Segment(0, 1, b"", b"", False)) < DDB_ITEM


@settings(max_examples=80, deadline=None)
@given(st.lists(message(), min_size=1, max_size=100), st.integers(0, 10**9), st.booleans())
def test_plan_stays_within_dynamodb_limits(msgs, base, all_ids):
    items = []
    for i, m in enumerate(msgs):
        if all_ids and m.id is None:
            m.id = f"id-{i}"
        items.append((i, _seg_message(m, i), m.id is not None))
    parts = _plan_parts(TOPIC, 63, items, base)
    offset = base
    placed_all = []
    for part, placed in parts:
        assert part.segments[0].base == offset
        n_items = 1 + len(part.segments) + len(part.dedup)  # 1: the queue item's head move
        assert n_items <= TRANSACT_ITEMS
        size = 300 + sum(segment_item_bytes(f"{TOPIC}#63", s) for s in part.segments) \
            + sum(dedup_item_bytes(TOPIC, mid) for mid, _ in part.dedup)
        assert size <= TRANSACT_BYTES < 4 * 1024 * 1024
        for s in part.segments:
            assert s.base == offset and segment_item_bytes(f"{TOPIC}#63", s) < DDB_ITEM
            offset = s.end
        placed_all += placed
        ids = {i: m.id for i, m, cid in items if cid}
        assert sorted(part.dedup) == sorted((ids[i], off) for i, off in placed if i in ids)
    # every message once, in request order, at contiguous offsets from base
    assert placed_all == [(i, base + k) for k, (i, _, _) in enumerate(items)]


def test_hundred_ids_split_into_two_writes():
    items = [(i, seg.Message(id=f"id-{i}", body="x"), True) for i in range(100)]
    parts = _plan_parts("t", 0, items, 0)
    assert [1 + len(p.segments) + len(p.dedup) for p, _ in parts] == [100, 4]
    assert [len(placed) for _, placed in parts] == [98, 2]
