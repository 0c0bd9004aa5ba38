"""Subscriptions on moto: routes (create/list/delete/pull/ack), check order, the fan-out handler fed
with ``events/fanout_segments_stream.json`` and through the real stream pump."""
from __future__ import annotations

import copy
import itertools
import json

import pytest

from lakeq.common import clock
from lakeq.fanout import worker as fanout
from lakeq.store.subscriptions import SubscriptionModel
from tests.handlers import Context, sample

SID = "0123456789abcdef0123456789abcdef"  # the id used in events/subscriptions_*.json
SEED = {"subscriber": "risk", "topic": "quotes",
        "conditions": [{"field": "type", "values": ["A"]}, {"field": "stock_code", "values": ["000000", "111111"]}]}
T_SAMPLE = 1795312800123  # produced_at of the messages in events/fanout_segments_stream.json


pytestmark = pytest.mark.usefixtures("fresh_matcher")


@pytest.fixture
def early_clock(monkeypatch):
    """Subscriptions created 'before' the sample stream's messages were produced."""
    ticks = itertools.count(T_SAMPLE - 1000)
    monkeypatch.setattr(clock, "now", lambda: next(ticks))


def stream_event(*drop_sequence):
    ev = sample("fanout_segments_stream.json")
    return ev


def rows(table):
    return list(table.scan())


def snapshot():
    from lakeq.store.models import DedupModel, OffsetModel, QueueModel, SegmentModel
    return {m.__name__: sorted(json.dumps(i.attribute_values, default=str, sort_keys=True) for i in m.scan())
            for m in (SubscriptionModel, QueueModel, SegmentModel, DedupModel, OffsetModel)}


def create(api, key, body=SEED):
    s, b = api.call("POST", "/v1/subscriptions", body, key=key)
    assert s == 201, b
    return b


def pull(api, sid, key, **q):
    return api.call("GET", f"/v1/subscriptions/{sid}/messages", query=q or None, key=key)


def test_create_list_and_seed_example_through_the_fanout(api, setup, early_clock, fanout_handler):
    sub = create(api, setup["risk"])
    assert set(sub) >= {"id", "subscriber", "topic", "conditions", "tags"}
    assert sub["subscriber"] == "risk" and sub["topic"] == "quotes" and sub["tags"] == []
    assert sub["conditions"] == SEED["conditions"]
    s, b = api.call("GET", "/v1/subscriptions", query={"subscriber": "risk"}, key=setup["risk"])
    assert s == 200 and [x["id"] for x in b["subscriptions"]] == [sub["id"]]

    out = fanout_handler(sample("fanout_segments_stream.json"), Context())
    assert out == {"batchItemFailures": []}
    s, b = pull(api, sub["id"], setup["risk"])
    assert s == 200
    got = [(m["id"], m["topic"], m["queue"], m["offset"]) for m in b["messages"]]
    # quotes/sh#0: m1 (A, 000000) and m4 (A, 111111); quotes#1: m5; quotes/sh#0 @4: m8
    assert got == [("m1", "quotes/sh", 0, 0), ("m4", "quotes/sh", 0, 3), ("m5", "quotes", 1, 0),
                   ("m8", "quotes/sh", 0, 4)]
    m1 = b["messages"][0]
    assert m1["body"] == "quote 1" and m1["tags"] == ["hot"] and m1["properties"]["price"] == 10.5
    assert m1["produced_at"] == T_SAMPLE and m1["key"] == "000000"
    assert b["receipt"].split(":")[1:4] == [f"~{sub['id']}", "0", "4"]  # list offsets

    # locked until acked: nothing more; ack; the list is empty
    assert pull(api, sub["id"], setup["risk"])[1] == {"messages": [], "receipt": None}
    s, a = api.call("POST", "/v1/acks", {"subscription": sub["id"], "receipt": b["receipt"]}, key=setup["risk"])
    assert s == 200 and a["committed_offset"] == 4
    # retried after a lost response: the same answer (idempotent); a receipt never acked is stale
    assert api.call("POST", "/v1/acks", {"subscription": sub["id"], "receipt": b["receipt"]},
                    key=setup["risk"]) == (s, a)
    stale = b["receipt"].replace(":0:4:", ":0:3:")
    s, a = api.call("POST", "/v1/acks", {"subscription": sub["id"], "receipt": stale}, key=setup["risk"])
    assert s == 409 and a["error"]["code"] == "stale_receipt"

    # a redelivered batch adds nothing twice
    before = snapshot()
    assert fanout_handler(sample("fanout_segments_stream.json"), Context()) == {"batchItemFailures": []}
    assert snapshot() == before
    assert pull(api, sub["id"], setup["risk"])[1]["messages"] == []


def test_half_delivered_batch_then_redelivery_completes_without_duplicates(api, setup, early_clock, fanout_handler):
    sub = create(api, setup["risk"])
    ev = sample("fanout_segments_stream.json")
    first = copy.deepcopy(ev)
    first["Records"] = first["Records"][:1]
    fanout_handler(first, Context())
    fanout_handler(ev, Context())
    fanout_handler(ev, Context())
    b = pull(api, sub["id"], setup["risk"])[1]
    assert [m["id"] for m in b["messages"]] == ["m1", "m4", "m5", "m8"]


def test_only_messages_produced_after_creation(api, setup, fanout_handler, monkeypatch):
    """A subscription stored before the clock-free start (no ``starts``) keeps the old rule,
    ``produced_at > created_at``; tests/integration/test_subscription_start.py has the new one."""
    monkeypatch.setattr(clock, "now", lambda c=itertools.count(T_SAMPLE): next(c))
    sub = create(api, setup["risk"])  # created_at == T_SAMPLE: same-millisecond messages excluded
    assert sub["created_at"] == T_SAMPLE
    SubscriptionModel(sub["id"]).update(actions=[SubscriptionModel.starts.remove()])
    fanout_handler(sample("fanout_segments_stream.json"), Context())
    assert pull(api, sub["id"], setup["risk"])[1]["messages"] == []


def test_conditions_kinds_tags_and_hierarchy(api, setup, early_clock, fanout_handler):
    k = setup["risk"]
    subs = {
        "range": create(api, k, {"subscriber": "risk", "topic": "quotes", "conditions": [{"field": "price", "range": [10, 12]}]}),
        "prefix": create(api, k, {"subscriber": "risk", "topic": "quotes/sh", "conditions": [{"field": "stock_code", "prefix": "11"}]}),
        "anything_but": create(api, k, {"subscriber": "risk", "topic": "quotes", "conditions": [{"field": "type", "anything_but": ["A"]}]}),
        "exists_false": create(api, k, {"subscriber": "risk", "topic": "quotes", "conditions": [{"field": "type", "exists": False}]}),
        "exists": create(api, k, {"subscriber": "risk", "topic": "quotes", "conditions": [{"field": "price", "exists": True}]}),
        "tags": create(api, k, {"subscriber": "risk", "topic": "quotes", "tags": ["hot", "cold"]}),
        "all": create(api, k, {"subscriber": "risk", "topic": "quotes"}),
        "child_only": create(api, k, {"subscriber": "risk", "topic": "quotes/sh", "conditions": [{"field": "type", "values": ["A"]}]}),
    }
    fanout_handler(sample("fanout_segments_stream.json"), Context())
    want = {"range": ["m1", "m4", "m8"], "prefix": ["m3", "m4", "m8"], "anything_but": ["m3"],
            "exists_false": ["m6"], "exists": ["m1", "m2", "m3", "m4", "m5", "m8"], "tags": ["m1"],
            "all": ["m1", "m2", "m3", "m4", "m5", "m6", "m8"], "child_only": ["m1", "m2", "m4", "m8"]}
    for name, sub in subs.items():
        got = [m["id"] for m in pull(api, sub["id"], k, max=100)[1]["messages"]]
        assert sorted(got) == want[name], name


def test_unsubscribe_deletes_the_list(api, setup, early_clock, fanout_handler):
    sub = create(api, setup["risk"])
    other = create(api, setup["risk"])
    fanout_handler(sample("fanout_segments_stream.json"), Context())
    b = pull(api, sub["id"], setup["risk"])[1]
    s, _ = api.call("DELETE", f"/v1/subscriptions/{sub['id']}", key=setup["risk"])
    assert s == 204
    from lakeq.store.models import DedupModel, OffsetModel, QueueModel, SegmentModel
    lt = f"~{sub['id']}"
    assert list(SegmentModel.query(f"{lt}#0")) == [] and [q for q in QueueModel.scan() if q.topic == lt] == []
    assert list(OffsetModel.query(f"s|{sub['id']}")) == [] and list(DedupModel.query(lt)) == []
    assert api.call("DELETE", f"/v1/subscriptions/{sub['id']}", key=setup["risk"])[0] == 404
    assert pull(api, sub["id"], setup["risk"])[0] == 404
    s, a = api.call("POST", "/v1/acks", {"subscription": sub["id"], "receipt": b["receipt"]}, key=setup["risk"])
    assert s == 404
    # the fan-out after the delete (stale batch) writes nothing for it; the other keeps its list
    fanout_handler(sample("fanout_segments_stream.json"), Context())
    assert list(SegmentModel.query(f"{lt}#0")) == []
    assert len(pull(api, other["id"], setup["risk"])[1]["messages"]) == 4
    s, b = api.call("GET", "/v1/subscriptions", query={"subscriber": "risk"}, key=setup["risk"])
    assert [x["id"] for x in b["subscriptions"]] == [other["id"]]


def test_fanout_to_a_subscription_deleted_after_the_index_was_built(api, setup, early_clock):
    sub = create(api, setup["risk"])
    m = fanout.Matcher()
    m.refresh()
    s, _ = api.call("DELETE", f"/v1/subscriptions/{sub['id']}", key=setup["risk"])
    assert s == 204
    m.refresh = lambda: False  # stale index: still has the deleted subscription
    assert fanout.handle(sample("fanout_segments_stream.json"), clock.now(), m) == {"batchItemFailures": []}
    from lakeq.store.models import SegmentModel
    assert list(SegmentModel.query(f"~{sub['id']}#0")) == []


@pytest.mark.parametrize("body, status", [
    ({"subscriber": "risk", "topic": "quotes", "conditions": [{"values": ["A"]}]}, 400),  # missing field
    ({"subscriber": "risk", "topic": "quotes", "conditions": [{"field": "p", "range": [5, 1]}]}, 400),
    ({"subscriber": "risk", "topic": "quotes", "conditions": [{"field": "p", "values": []}]}, 400),
    ({"subscriber": "risk", "topic": "quotes", "conditions": {"field": "p"}}, 400),
    ({"subscriber": "risk", "topic": "quotes", "conditions": [{"field": "p", "values": ["A"], "prefix": "x"}]}, 400),
    ({"subscriber": "risk", "topic": "quotes", "tags": "hot"}, 400),
    ({"subscriber": "risk", "topic": "//"}, 400),
    ({"subscriber": "r isk", "topic": "quotes"}, 400),
    ({"topic": "quotes"}, 400),
    ({"subscriber": "risk", "topic": "nope"}, 404),
    ({"subscriber": "nobody", "topic": "quotes"}, 404),
    ({"subscriber": "feed", "topic": "quotes"}, 404),  # a producer is not a subscriber
])
def test_create_rejections_change_nothing(api, setup, body, status):
    before = snapshot()
    s, b = api.call("POST", "/v1/subscriptions", body, key=setup["risk"])
    assert s == status, b
    assert b["error"]["code"] == {400: "bad_request", 404: "not_found"}[status]
    assert snapshot() == before


def test_check_order_and_permissions(api, setup):
    assert api.call("POST", "/v1/subscriptions", {"x": 1}, key=None)[0] == 401
    assert api.call("POST", "/v1/subscriptions", {"x": 1}, key="bogus")[0] == 401
    assert api.call("POST", "/v1/subscriptions", raw_body="{", key=setup["risk"])[0] == 400
    # 400 before 404 before 403
    assert api.call("POST", "/v1/subscriptions", {"subscriber": "nobody", "topic": "q", "conditions": [{}]},
                    key=setup["feed"])[0] == 400
    assert api.call("POST", "/v1/subscriptions", {"subscriber": "nobody", "topic": "quotes"},
                    key=setup["feed"])[0] == 404
    s, b = api.call("POST", "/v1/clients", {"name": "ops", "role": "consumer", "topics": ["quotes/sh"]})
    ops = b["api_key"]
    before = snapshot()
    assert api.call("POST", "/v1/subscriptions", SEED, key=setup["feed"])[0] == 403  # not the subscriber's key
    assert api.call("POST", "/v1/subscriptions", {**SEED, "subscriber": "ops"}, key=ops)[0] == 403  # not granted
    assert snapshot() == before
    assert api.call("POST", "/v1/subscriptions", {**SEED, "subscriber": "ops", "topic": "quotes/sh"}, key=ops)[0] == 201
    assert api.call("POST", "/v1/subscriptions", SEED)[0] == 201  # admin may act for the subscriber
    sub = api.call("POST", "/v1/subscriptions", SEED, key=setup["risk"])[1]
    # list
    assert api.call("GET", "/v1/subscriptions", key=setup["risk"])[0] == 400
    assert api.call("GET", "/v1/subscriptions", query={"subscriber": "nobody"}, key=setup["risk"])[0] == 404
    assert api.call("GET", "/v1/subscriptions", query={"subscriber": "risk"}, key=ops)[0] == 403
    assert len(api.call("GET", "/v1/subscriptions", query={"subscriber": "risk"})[1]["subscriptions"]) == 2
    # pull / delete / ack
    sid = sub["id"]
    assert pull(api, sid, None)[0] == 401
    assert pull(api, sid, setup["risk"], max=0)[0] == 400
    assert pull(api, sid, setup["risk"], wait_ms=20001)[0] == 400
    assert pull(api, sid, setup["risk"], ack="garbage")[0] == 400
    assert pull(api, "f" * 32, setup["risk"])[0] == 404
    assert pull(api, sid, ops)[0] == 403
    assert api.call("DELETE", "/v1/subscriptions/bad%20id", key=setup["risk"])[0] == 400
    assert api.call("DELETE", f"/v1/subscriptions/{'f' * 32}", key=setup["risk"])[0] == 404
    assert api.call("DELETE", f"/v1/subscriptions/{sid}", key=ops)[0] == 403
    r = f"lakeq-local:~{sid}:0:1:5"
    assert api.call("POST", "/v1/acks", {"subscription": sid, "receipt": "x"}, key=setup["risk"])[0] == 400
    assert api.call("POST", "/v1/acks", {"subscription": "f" * 32, "receipt": r}, key=setup["risk"])[0] == 404
    assert api.call("POST", "/v1/acks", {"subscription": sid, "receipt": r}, key=ops)[0] == 403
    assert api.call("POST", "/v1/acks", {"subscription": sid, "receipt": "lakeq-local:quotes@0:0:1:5"},
                    key=setup["risk"])[0] == 400
    s, b = api.call("POST", "/v1/acks", {"subscription": sid, "receipt": r}, key=setup["risk"])
    assert s == 409 and b["error"]["code"] == "stale_receipt"
    # a subscription receipt is not a group's
    assert api.call("POST", "/v1/acks", {"group": "risk", "receipt": r}, key=setup["risk"])[0] == 400


def test_sample_events(api, setup, early_clock, monkeypatch):
    monkeypatch.setattr("uuid.uuid4", lambda: type("U", (), {"hex": SID})())
    s, b = api.invoke(sample("subscriptions_create.json"))
    assert s == 201 and b["id"] == SID
    assert api.invoke(sample("subscriptions_list.json"))[1]["subscriptions"][0]["id"] == SID
    assert api.invoke(sample("subscriptions_pull.json")) == (200, {"messages": [], "receipt": None})
    s, b = api.invoke(sample("ack_subscription.json"))
    assert s == 409 and b["error"]["code"] == "stale_receipt"
    assert api.invoke(sample("subscriptions_delete.json"))[0] == 204
    assert api.invoke(sample("subscriptions_delete.json"))[0] == 404


@pytest.mark.moto  # reads DynamoDB Streams
def test_produce_then_pump_delivers_in_order_per_source_queue(api, setup, aws):
    """Through the real stream pump (template's event source mapping) on in-process moto."""
    from infra.local.streams import StreamPump
    sub = create(api, setup["risk"], {"subscriber": "risk", "topic": "quotes", "conditions": [{"field": "n", "range": [0, 1e9]}]})
    pump = StreamPump(stack_name="lakeq-local", dynamodb_client=aws["dynamodb"], streams_client_=aws["dynamodbstreams"])
    pump.mappings = [m for m in pump.mappings if m.spec.logical_id == "FanoutFunction"]
    assert pump.mappings
    sent = []
    for r in range(6):
        msgs = [{"body": f"b{r}-{i}", "key": f"k{i % 3}", "properties": {"n": r * 10 + i}} for i in range(5)]
        topic = "quotes%2Fsh" if r % 2 else "quotes"
        s, b = api.call("POST", f"/v1/topics/{topic}/messages", {"producer": "feed", "messages": msgs},
                        key=setup["feed"])
        assert s == 200
        sent += [(("quotes/sh" if r % 2 else "quotes"), x["queue"], x["offset"]) for x in b["results"]]
        if r == 3:
            assert pump.drain(20)[0]
    assert pump.drain(20)[0]
    got = []
    receipt = None
    while True:
        q = {"max": 7, **({"ack": receipt} if receipt else {})}
        s, b = pull(api, sub["id"], setup["risk"], **q)
        assert s == 200
        if not b["messages"]:
            break
        got += [(m["topic"], m["queue"], m["offset"]) for m in b["messages"]]
        receipt = b["receipt"]
    assert sorted(got) == sorted(sent) and len(got) == len(set(got))
    by_queue: dict = {}
    for t, q, o in got:
        by_queue.setdefault((t, q), []).append(o)
    assert all(v == sorted(v) for v in by_queue.values())
