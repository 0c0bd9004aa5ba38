"""lakeq.replay.rules (issue 18.1): the filter is the matcher's, the Spark pre-filter's needles never
drop a matching row, partitions of a range, derived ids, request validation."""
from __future__ import annotations

import datetime as dt
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakeq.common.errors import BadRequest
from lakeq.lake.archive import partition
from lakeq.replay.rules import Filter, copy_id, field_needles, hour_bounds, next_chunk, pace_seconds, parse_request

FIELDS = ["k", "s", 'n"q', "é", "a\u0001b"]
scalar = st.one_of(st.sampled_from(["1", "A", "AB", "é", "x\u0002y", "", "a\"b"]), st.integers(-3, 3),
                   st.sampled_from([1.0, 2.5, True, False]))
value = st.one_of(scalar, st.just(None), st.lists(scalar, max_size=2), st.dictionaries(st.sampled_from(FIELDS), scalar))
field = st.sampled_from(FIELDS)
level = st.one_of(
    st.builds(lambda f, v: {"field": f, "values": v}, field, st.lists(scalar, min_size=1, max_size=3)),
    st.builds(lambda f, a, b: {"field": f, "range": [min(a, b), max(a, b)]}, st.sampled_from(FIELDS),
              st.integers(-3, 3), st.integers(-3, 3)),
    st.builds(lambda f, p: {"field": f, "prefix": p}, field, st.sampled_from(["", "A", "é", "x\u0002"])),
    st.builds(lambda f, v: {"field": f, "anything_but": v}, field, st.lists(scalar, min_size=1, max_size=2)),
    st.builds(lambda f, b: {"field": f, "exists": b}, st.sampled_from(FIELDS), st.booleans()),
)


@settings(max_examples=400, deadline=None)
@given(levels=st.lists(level, max_size=3), tags=st.lists(st.sampled_from(["r", "b"]), max_size=2),
       props=st.dictionaries(st.sampled_from(FIELDS), value, max_size=5),
       msg_tags=st.lists(st.sampled_from(["r", "b", "g"]), max_size=3))
def test_needles_never_drop_a_row_the_matcher_keeps(levels, tags, props, msg_tags):
    f = Filter.of({"conditions": levels, "tags": tags})
    text = json.dumps(props, separators=(",", ":"), ensure_ascii=False, sort_keys=True)  # the archiver's spelling
    if f.json_predicate()(text, msg_tags):
        for needles in field_needles(f):
            assert any(n in text for n in needles), (needles, text)
    # the JSON-text predicate is the matcher on the decoded properties
    assert f.json_predicate()(text, msg_tags) == f.predicate()(props, msg_tags)


def test_filter_is_the_subscription_semantics():
    f = Filter.of({"conditions": [{"field": "k", "values": [1]}], "tags": ["r"]})
    p = f.predicate()
    assert p({"k": 1}, ["r"]) and p({"k": 1.0}, ["r", "x"])
    assert not p({"k": "1"}, ["r"]) and not p({"k": True}, ["r"]) and not p({"k": 1}, ["x"])
    assert Filter.of(None).predicate()({}, []) and Filter.of(None).empty
    with pytest.raises(ValueError, match="conditions"):
        Filter.of({"conditions": [{"field": "k", "bogus": 1}]})


@settings(max_examples=200, deadline=None)
@given(a=st.integers(1_700_000_000_000, 1_800_000_000_000), span=st.integers(1, 5 * 3_600_000))
def test_hour_bounds_cover_exactly_the_partitions_of_the_range(a, span):
    lo, hi = hour_bounds(a, a + span)
    parts = set()
    t = a
    while t < a + span:
        parts.add(" ".join(partition(t)))
        t = (t // 3_600_000 + 1) * 3_600_000
    parts.add(" ".join(partition(a + span - 1)))
    assert lo == min(parts) and hi == max(parts)
    assert dt.datetime.strptime(lo, "%Y-%m-%d %H") <= dt.datetime.strptime(hi, "%Y-%m-%d %H")


def test_copy_ids_are_deterministic_distinct_and_fit_the_id_limit():
    ids = {copy_id(t, q, o) for t in ("a", "a/b", "b" * 200) for q in range(3) for o in range(50)}
    assert len(ids) == 3 * 3 * 50 and copy_id("a", 1, 2) == copy_id("a", 1, 2)
    assert max(len(i) for i in ids) <= 200


def test_parse_request_and_its_400s():
    r = parse_request({"topic": "quotes/sh", "from": 1, "to": 2, "target": {"group": "g1"},
                       "filter": {"tags": ["A"]}, "rate": 50})
    assert (r.topic, r.from_ms, r.to_ms, r.target_group, r.target_topic, r.rate) == ("quotes/sh", 1, 2, "g1", None, 50)
    assert parse_request({"topic": "t", "from": 1, "to": 2, "target": {"topic": "u"}}).rate == 100
    bad = [
        [], {"topic": "t", "from": 2, "to": 1, "target": {"group": "g"}},
        {"topic": "t", "from": 1, "to": 2}, {"topic": "t", "from": 1, "to": 2, "target": {"group": "g", "topic": "u"}},
        {"topic": "t", "from": 1, "to": 2, "target": {"queue": "g"}},
        {"topic": "", "from": 1, "to": 2, "target": {"group": "g"}},
        {"topic": "t", "from": True, "to": 2, "target": {"group": "g"}},
        {"topic": "t", "from": 1, "to": 2, "target": {"group": "g"}, "rate": 0},
        {"topic": "t", "from": 1, "to": 2, "target": {"group": "g"}, "filter": {"conditions": "x"}},
        {"topic": "t", "from": 1, "to": 2, "target": {"group": "g"}, "extra": 1},
        {"topic": "t", "from": 0, "to": 401 * 86_400_000, "target": {"group": "g"}},
    ]
    for b in bad:
        with pytest.raises(BadRequest):
            parse_request(b)


def test_chunks_and_pace():
    assert list(next_chunk(5, 0, 2)) == [0, 1] and list(next_chunk(5, 4, 2)) == [4] and not next_chunk(5, 5, 2)
    assert pace_seconds(10, 10, 0.25) == 0.75 and pace_seconds(10, 10, 2) == 0
