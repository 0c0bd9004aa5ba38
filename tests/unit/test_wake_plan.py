"""WebSocket wake-ups, the pure rules (lakeq.wake_plan): watch keys, coalescing, the messages."""
from __future__ import annotations

import doctest
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lakeq.common import names
from lakeq.wake import plan
from lakeq.common.errors import BadRequest, Unauthorized

seg = st.text(alphabet="abcXYZ019._-", min_size=1, max_size=6)
topics = st.lists(seg, min_size=1, max_size=3).map("/".join)


def test_doctests():
    assert doctest.testmod(plan).failed == 0


@given(topic=topics, inc=st.integers(0, 50), queue=st.integers(0, 63))
def test_a_segment_wakes_its_topic_in_every_incarnation(topic, inc, queue):
    pq = f"{names.log_name(topic, inc)}#{queue}"
    assert plan.watch_key_of_segment(pq) == topic


@given(sub=st.text(alphabet="abcdef0123456789", min_size=1, max_size=32), queue=st.integers(0, 3))
def test_a_list_segment_wakes_its_subscription(sub, queue):
    assert plan.watch_key_of_segment(f"~{sub}#{queue}") == f"~{sub}"
    assert plan.Watch(subscription=sub).key == f"~{sub}"


def _rec(pq, event="INSERT"):
    return {"eventName": event, "dynamodb": {"Keys": {"pq": {"S": pq}, "base": {"N": "0"}}}}


def test_woken_keys_once_each_in_order_inserts_only():
    recs = [_rec("b#1"), _rec("a#0"), _rec("b#0"), _rec("a!2#3"), _rec("c#0", "REMOVE"), _rec("~s#0"),
            {"eventName": "INSERT", "dynamodb": {}}]
    assert plan.woken_keys(recs) == ["b", "a", "~s"]


pairs = st.lists(st.tuples(st.sampled_from(["a", "b", "~s", "q/r"]), st.sampled_from(["c1", "c2", "c3"])))


@given(pairs)
def test_coalesce_is_one_entry_per_connection_with_its_keys_once(ps):
    out = plan.coalesce(ps)
    # reference: a set per connection
    ref: dict[str, set] = {}
    for k, c in ps:
        ref.setdefault(c, set()).add(k)
    assert {c: set(ks) for c, ks in out.items()} == ref
    assert all(len(ks) == len(set(ks)) for ks in out.values())
    for c, ks in out.items():  # first-seen order
        assert ks == list(dict.fromkeys(k for k, c2 in ps if c2 == c))


@given(st.lists(st.sampled_from(["a", "b/c", "~s1", "~s2"]), unique=True, min_size=1))
def test_wake_message_names_topics_and_subscriptions(keys):
    m = json.loads(plan.wake_message(keys))
    assert m["type"] == "wake"
    assert m["topics"] == [k for k in keys if not k.startswith("~")]
    assert m["subscriptions"] == [k[1:] for k in keys if k.startswith("~")]
    assert len(plan.wake_message(keys)) < 200  # far below one 32-KB billed message


def test_parse_watch():
    assert plan.parse_watch('{"action":"watch","topic":"a/b","group":"g"}') == plan.Watch("a/b", "g")
    assert plan.parse_watch('{"action":"watch","subscription":"s1"}') == plan.Watch(subscription="s1")
    for bad in ("", "[]", "nope", '{"action":"watch"}', '{"action":"watch","topic":"a"}',
                '{"action":"watch","topic":"a//b","group":"g"}', '{"action":"watch","topic":"a","group":"g","x":1}',
                '{"action":"watch","subscription":"s","topic":"a"}', '{"action":"watch","subscription":"a/b"}'):
        with pytest.raises(BadRequest):
            plan.parse_watch(bad)


def test_key_from_request():
    assert plan.key_from_request({"Authorization": "Bearer k"}) == ("Bearer k", None)
    got = plan.key_from_request({"Sec-WebSocket-Protocol": "lakeq.v1,lakeq.key.lq_a-b_c"})
    assert got == ("Bearer lq_a-b_c", "lakeq.v1")
    for bad in ({}, None, {"sec-websocket-protocol": "lakeq.key.k"},  # lakeq.v1 not offered
                {"sec-websocket-protocol": "lakeq.v1"}, {"sec-websocket-protocol": "lakeq.v1, lakeq.key."},
                {"sec-websocket-protocol": "lakeq.v1, lakeq.key.a, lakeq.key.b"}):
        with pytest.raises(Unauthorized):
            plan.key_from_request(bad)


def test_keys_are_disjoint():
    assert plan.connection_key("x") != plan.watcher_key("x")
    assert plan.connection_key("x").startswith("c|") and plan.watcher_key("x").startswith("w|")
