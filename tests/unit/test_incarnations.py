"""Topic incarnations (issue 14 item 1, lakeq.common.names.log_name): a log name never collides with another
topic's or incarnation's, the topic and incarnation come back out of it, and receipts carry it."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lakeq.common import names
from lakeq.common.errors import BadRequest
from lakeq.lake.archive import parse_owner
from lakeq.log import receipts
from lakeq.log.fanout_plan import parked_view
from lakeq.store.models import queue_key

topic_seg = st.text(alphabet="abcXYZ019._-", min_size=1, max_size=8)
topics = st.lists(topic_seg, min_size=1, max_size=4).map("/".join)
incs = st.integers(0, 10**6)


@given(topic=topics, inc=incs)
def test_log_name_round_trip(topic, inc):
    log = names.log_name(topic, inc)
    assert names.split_log(log) == (topic, inc)
    assert names.topic_of_log(log) == topic
    assert names.is_log_name(log)
    assert (log == topic) == (inc == 0)  # incarnation 0 keeps the topic's own keys
    assert not names.is_topic(log) or inc == 0  # a later incarnation's log name is no topic name


@given(a=topics, i=incs, b=topics, j=incs)
def test_log_names_are_distinct(a, i, b, j):
    assert (names.log_name(a, i) == names.log_name(b, j)) == ((a, i) == (b, j))
    # the keys derived from them too (queue / segment / delayed pq, offsets owners)
    for q in (0, 3):
        assert (queue_key(names.log_name(a, i), q) == queue_key(names.log_name(b, j), q)) == ((a, i) == (b, j))


def test_no_name_can_hold_the_separator():
    assert not names.is_topic("a!1") and not names.is_name("a!1")
    assert names.LOG_SEP not in names.TOPIC_RULE


@given(topic=topics, inc=incs, q=st.integers(0, 63))
def test_receipts_carry_the_incarnation(topic, inc, q):
    r = receipts.parse(str(receipts.Receipt("b", receipts.topic_queue_field(names.log_name(topic, inc), q), 0, 1, 5)))
    assert r.topic_queue == (topic, q) and r.log == names.log_name(topic, inc)


@pytest.mark.parametrize("bad", ["b:t!0@0:0:1:5", "b:t!01@0:0:1:5", "b:t!@0:0:1:5", "b:!2@0:0:1:5", "b:t!x@0:0:1:5",
                                 "b:t!2!3@0:0:1:5"])
def test_malformed_incarnation_in_a_receipt_is_400(bad):
    with pytest.raises(BadRequest):
        receipts.parse(bad)


def test_readers_of_keys_recover_the_topic_name():
    assert parse_owner("g|risk|quotes/sh!3")["topic"] == "quotes/sh"
    assert parse_owner("b|risk|c1|quotes!2")["topic"] == "quotes"
    assert parse_owner("g|risk|quotes")["topic"] == "quotes"
    assert parked_view('{"quotes!2#1": {"from": 4}}')[0]["topic"] == "quotes"
