"""Delayed delivery, the pure part (issue 9): validation of ``delay_ms``, DelayedTable's sort key, and
the planning of delayed produces and of promotions into transactions within DynamoDB's limits."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakeq.common.errors import BadRequest
from lakeq.contract import validation as v
from lakeq.log import segments as seg
from lakeq.log.delay_plan import (
    MAX_DELAY_MS,
    Delayed,
    decode_message,
    delayed_item_bytes,
    delete_key_bytes,
    due_count,
    due_key,
    encode_message,
    next_due_after,
    plan_delayed,
    promotion_extra,
)
from lakeq.log.produce_plan import (
    QUEUE_ITEM_BYTES,
    TRANSACT_BYTES,
    TRANSACT_ITEMS,
    dedup_item_bytes,
    plan_parts,
    pq,
    segment_item_bytes,
)


def _req(**m):
    return {"producer": "feed", "messages": [{"body": "x", **m}]}


def test_delay_ms_validation():
    assert v.produce(_req()).messages[0].delay_ms == 0
    assert v.produce(_req(delay_ms=None)).messages[0].delay_ms == 0
    assert v.produce(_req(delay_ms=0)).messages[0].delay_ms == 0
    assert v.produce(_req(delay_ms=1)).messages[0].delay_ms == 1
    assert v.produce(_req(delay_ms=MAX_DELAY_MS)).messages[0].delay_ms == 900_000
    assert v.MAX_DELAY_MS == MAX_DELAY_MS == 900_000
    for bad in (-1, 900_001, 1.5, "10", True, [], {}):
        with pytest.raises(BadRequest, match=r"messages\[0\]: 'delay_ms' must be an integer from 0 to 900000"):
            v.produce(_req(delay_ms=bad))


ids = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=20)


@given(st.lists(st.tuples(st.integers(0, 10 ** 13 - 1), ids), min_size=2, max_size=30))
def test_due_key_orders_as_due_then_id(pairs):
    """Sort keys (as DynamoDB compares strings: UTF-8 bytes) order as (deliver_at, id) does (ids
    compared by their UTF-8 bytes, which is code point order)."""
    by_key = sorted(pairs, key=lambda p: due_key(*p).encode("utf-8"))
    assert [(d, i.encode("utf-8")) for d, i in by_key] == sorted((d, i.encode("utf-8")) for d, i in pairs)


def test_due_key_bounds_a_due_query():
    """``due < due_key(now + 1, "")`` selects exactly the messages due at ``now``."""
    now = 1_800_000_000_000
    upto = due_key(now + 1, "")
    assert due_key(now, "\U0010ffff" * 3) < upto
    assert due_key(now + 1, "") <= due_key(now + 1, "a")
    assert not due_key(now + 1, "a") < upto


@given(st.text(max_size=50), st.one_of(st.none(), st.text(max_size=5)),
       st.lists(st.text(min_size=1, max_size=5), max_size=3),
       st.dictionaries(st.text(min_size=1, max_size=5), st.one_of(st.integers(), st.booleans(), st.text(max_size=5)),
                       max_size=3), st.integers(0, 2 ** 45))
def test_message_round_trip(body, key, tags, props, at):
    m = seg.Message(id="i", body=body, key=key, tags=tags, properties=props, produced_at=at)
    assert decode_message(encode_message(m)) == m


def _sizes(topic, q, part):
    p = pq(topic, q)
    items = 1 + sum(1 + (1 if d.cid else 0) for d in part)
    size = QUEUE_ITEM_BYTES + sum(delayed_item_bytes(p, d.message)
                                  + (dedup_item_bytes(topic, d.message.id) if d.cid else 0) for d in part)
    return items, size


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 120_000), st.booleans(), st.integers(1, 900_000)), min_size=1, max_size=100))
def test_plan_delayed_within_limits_and_in_order(specs):
    msgs = [Delayed(i, seg.Message(id=f"m{i}", body="b" * n), cid, d) for i, (n, cid, d) in enumerate(specs)]
    parts = plan_delayed("t/x", 3, msgs)
    assert [d for p in parts for d in p] == msgs  # every message once, in request order
    for p in parts:
        assert p
        items, size = _sizes("t/x", 3, p)
        assert items <= TRANSACT_ITEMS and size <= TRANSACT_BYTES


def test_plan_delayed_cuts_at_the_item_limit():
    plain = [Delayed(i, seg.Message(id=str(i), body="x"), False, 1) for i in range(100)]
    assert [len(p) for p in plan_delayed("t", 0, plain)] == [99, 1]  # 1 queue update + 99 puts
    cid = [Delayed(i, seg.Message(id=str(i), body="x"), True, 1) for i in range(100)]
    assert [len(p) for p in plan_delayed("t", 0, cid)] == [49, 49, 2]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 150_000), st.booleans()), min_size=1, max_size=98))
def test_promotion_parts_within_limits(specs):
    """A promotion's first part (what one transaction carries): head move, segments, a dedup put
    per client id and a delete per message, within 100 items and the byte budget; messages in order."""
    items = [(i, seg.Message(id=f"d{i}", body="z" * n), cid) for i, (n, cid) in enumerate(specs)]
    parts = plan_parts("t", 0, items, 7, extra=promotion_extra("t", 0))
    placed = [i for _, pl in parts for i, _ in pl]
    assert placed == list(range(len(items)))
    off = 7
    for part, pl in parts:
        n = len(pl)
        assert [o for _, o in pl] == list(range(off, off + n))
        off += n
        cids = sum(1 for i, _ in pl if items[i][2])
        assert len(part.dedup) == cids
        assert 1 + len(part.segments) + cids + n <= TRANSACT_ITEMS
        size = QUEUE_ITEM_BYTES + sum(segment_item_bytes(pq("t", 0), s) for s in part.segments) \
            + sum((dedup_item_bytes("t", items[i][1].id) if items[i][2] else 0)
                  + delete_key_bytes(pq("t", 0), items[i][1].id) for i, _ in pl)
        assert size <= TRANSACT_BYTES


def test_promotion_part_sizes():
    plain = [(i, seg.Message(id=str(i), body="x"), False) for i in range(98)]
    assert [len(pl) for _, pl in plan_parts("t", 0, plain, 0, extra=promotion_extra("t", 0))] == [98]
    cid = [(i, seg.Message(id=str(i), body="x"), True) for i in range(98)]
    assert [len(pl) for _, pl in plan_parts("t", 0, cid, 0, extra=promotion_extra("t", 0))] == [49, 49]
    # without extra, plan_parts is as before (produce)
    assert [len(pl) for _, pl in plan_parts("t", 0, cid, 0)] == [98]  # 1 + 1 segment + 98 ids
    assert [len(pl) for _, pl in plan_parts("t", 0, plain, 0)] == [98]


def test_next_due_and_due_count():
    assert next_due_after([1, 2, 3], 1, False) == 2
    assert next_due_after([1], 1, True) is None
    with pytest.raises(ValueError):
        next_due_after([1], 1, False)
    assert due_count([1, 2, 3], 0) == 0
    assert due_count([1, 2, 3], 3) == 3
