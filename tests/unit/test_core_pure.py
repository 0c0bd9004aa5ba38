"""Pure core: receipts, queue selection, ack rule, segments, names — hypothesis against simple references."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakeq.common import names
from lakeq.common.errors import BadRequest
from lakeq.log import receipts, selection
from lakeq.log import segments as seg

topic_seg = st.text(alphabet="abcXYZ019._-", min_size=1, max_size=8)
topics = st.lists(topic_seg, min_size=1, max_size=4).map("/".join)


# --- receipts ---------------------------------------------------------------------------------
@given(broker=st.text(alphabet="abc-_.0123456789", min_size=1, max_size=20), topic=topics,
       queue=st.integers(0, 63), offset=st.integers(0, 2**62), n=st.integers(1, 1000), ts=st.integers(0, 2**62))
def test_receipt_round_trip(broker, topic, queue, offset, n, ts):
    r = receipts.Receipt(broker, receipts.topic_queue_field(topic, queue), offset, offset + n, ts)
    back = receipts.parse(str(r))
    assert back == r
    assert back.topic_queue == (topic, queue)
    assert back.subscription is None


@given(sub=st.text(alphabet="abcdef0123456789-", min_size=1, max_size=40))
def test_subscription_receipt_round_trip(sub):
    r = receipts.Receipt("b", receipts.subscription_field(sub), 0, 1, 5)
    assert receipts.parse(str(r)).subscription == sub
    with pytest.raises(BadRequest):
        _ = receipts.parse(str(r)).topic_queue


@pytest.mark.parametrize("bad", [None, 5, "", "a:b:c", "b:t@0:1:1:5", "b:t@0:2:1:5", "b:t@0:x:2:5",
                                 "b:t@0:-1:2:5", ":t@0:1:2:5", "b:t:1:2:5", "b:t@0:1:2:5:6", "b:t@x:1:2:5",
                                 "b:t@0:١:2:5", "b:" + "t" * 300 + "@0:1:2:5"])
def test_malformed_receipts_are_400(bad):
    with pytest.raises(BadRequest):
        receipts.parse(bad)


@given(st.text(max_size=60))
def test_parse_never_crashes(text):
    try:
        r = receipts.parse(text)
    except BadRequest:
        return
    assert str(r) == text


# --- selection --------------------------------------------------------------------------------
views = st.builds(
    lambda q, lo, span, committed, lock_ts, lock_until, last: selection.QueueView(
        q, lo, lo + span, committed, lock_ts, lock_until, last),
    q=st.integers(0, 63), lo=st.integers(0, 50), span=st.integers(0, 50),
    committed=st.none() | st.integers(0, 120), lock_ts=st.integers(0, 100), lock_until=st.integers(0, 200),
    last=st.integers(0, 100),
)


@given(vs=st.lists(views, max_size=12, unique_by=lambda v: v.queue), now=st.integers(0, 200),
       allowed=st.none() | st.sets(st.integers(0, 63)))
def test_candidates_match_reference(vs, now, allowed):
    got = selection.candidates(vs, now, allowed)

    def start(v):
        return v.min_offset if v.committed is None else max(v.committed, v.min_offset)

    ref = [v for v in vs if v.max_offset - start(v) > 0 and v.lock_until <= now
           and (allowed is None or v.queue in allowed)]
    assert sorted(got, key=lambda v: v.queue) == sorted(ref, key=lambda v: v.queue)
    # order: most backlog first, then consumed longest ago
    for a, b in zip(got, got[1:]):
        ka = (-(a.max_offset - start(a)), a.last_consumed_at, a.queue)
        kb = (-(b.max_offset - start(b)), b.last_consumed_at, b.queue)
        assert ka < kb


def test_candidates_prefers_backlog_then_oldest_consumption():
    a = selection.QueueView(0, 0, 10, 5, last_consumed_at=1)  # backlog 5
    b = selection.QueueView(1, 0, 10, 2, last_consumed_at=9)  # backlog 8
    c = selection.QueueView(2, 0, 10, 2, last_consumed_at=3)  # backlog 8, consumed longer ago
    locked = selection.QueueView(3, 0, 50, 0, lock_ts=1, lock_until=1000)
    expired = selection.QueueView(4, 0, 3, 0, lock_ts=1, lock_until=50)
    empty = selection.QueueView(5, 0, 4, 4)
    got = [v.queue for v in selection.candidates([a, b, c, locked, expired, empty], now=100)]
    assert got == [2, 1, 0, 4]


@given(now=st.integers(0, 2**50), prev=st.integers(0, 2**50))
def test_lock_timestamps_strictly_increase(now, prev):
    assert selection.next_lock_ts(now, prev) > prev
    assert selection.next_lock_ts(now, prev) >= now


@given(lock_ts=st.integers(0, 9), committed=st.integers(0, 9), rts=st.integers(0, 9), roff=st.integers(0, 9))
def test_ack_rule(lock_ts, committed, rts, roff):
    assert selection.may_ack(lock_ts, committed, rts, roff) == (lock_ts == rts and committed == roff)


# --- segments ---------------------------------------------------------------------------------
tags_st = st.lists(st.text(alphabet="ABCDEFhot", min_size=1, max_size=3), max_size=5, unique=True)
msgs_st = st.lists(st.builds(
    seg.Message, id=st.uuids().map(str), body=st.text(max_size=300), key=st.none() | st.text(max_size=5),
    tags=tags_st, properties=st.dictionaries(st.text(min_size=1, max_size=4),
                                             st.integers() | st.text(max_size=4) | st.booleans(), max_size=3),
    produced_at=st.integers(0, 2**41)), min_size=1, max_size=30)


@given(msgs=msgs_st, base=st.integers(0, 10**9), start_off=st.integers(0, 40), limit=st.integers(1, 40),
       wanted=st.none() | st.lists(st.text(alphabet="ABCDEFhot", min_size=1, max_size=3), min_size=1, max_size=3))
@settings(max_examples=200)
def test_segment_read_matches_reference(msgs, base, start_off, limit, wanted):
    s = seg.encode(msgs, base)
    assert (s.base, s.count, s.end) == (base, len(msgs), base + len(msgs))
    start = base + min(start_off, len(msgs))
    got = list(seg.read(s, start, limit, wanted))
    expect_offsets = list(range(start, min(base + len(msgs), start + limit)))
    assert [o for o, _ in got] == expect_offsets  # every offset examined, in order, no hole
    for off, m in got:
        src = msgs[off - base]
        delivered = wanted is None or any(t in src.tags for t in wanted)
        if delivered:  # the bitmap never drops a true match
            assert m is not None and m["body"] == src.body and m["id"] == src.id and m["offset"] == off
            assert m["tags"] == src.tags and m["properties"] == src.properties and m["key"] == src.key
        else:  # and exact re-check never lets a false positive through
            assert m is None


def test_split_respects_limit():
    msgs = [seg.Message(id=str(i), body="x" * 1000) for i in range(50)]
    runs = seg.split(msgs, limit=5000)
    assert [m for r in runs for m in r] == msgs
    assert all(sum(m.encoded_size() for m in r) <= 5000 for r in runs)
    big = [seg.Message(id="big", body="y" * 9000)]
    assert seg.split(big, limit=5000) == [big]


def test_large_segments_are_compressed():
    s = seg.encode([seg.Message(id="a", body="z" * 10_000)], 0)
    assert s.compressed and len(s.data) < 1000
    assert next(seg.read(s, 0, 1))[1]["body"] == "z" * 10_000


# --- names ------------------------------------------------------------------------------------
def test_topic_names_and_hierarchy():
    assert names.is_topic("quotes/sh") and names.is_topic("a.b-c_d")
    for bad in ("", "/a", "a/", "a//b", "a b", "a:b", "a@b", "~a", "x" * 201, 5, None):
        assert not names.is_topic(bad)
    assert names.ancestors("a/b/c") == ["a/b/c", "a/b", "a"]
    assert names.parent_of("a") is None
    assert names.covers("quotes", "quotes/sh/star") and names.covers("quotes", "quotes")
    assert not names.covers("quotes", "quotesx") and not names.covers("quotes/sh", "quotes")


@given(st.text(max_size=210))
def test_name_rule(text):
    import re
    assert names.is_name(text) == bool(re.fullmatch(r"[A-Za-z0-9._-]{1,200}", text))
