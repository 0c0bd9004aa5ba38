"""Issue 8 item 8 (e): a subscription gets the messages produced after it was created, decided
without comparing clocks of different Lambda hosts (lakeq.store.subscriptions.Start)."""
from __future__ import annotations

import pytest

from lakeq.common import clock
from lakeq.store.subscriptions import SubscriptionModel

H = 3_600_000
T0 = 1_800_000_000_000


# moto: these tests read DynamoDB Streams (the stream pump, the fan-out, the archiver), which the memory store has not
pytestmark = [pytest.mark.moto, pytest.mark.usefixtures("fresh_matcher")]


def at(monkeypatch, ms):
    """The clock of the host serving the next requests."""
    monkeypatch.setattr(clock, "now", lambda: ms)


def produce(api, key, topic, bodies):
    s, b = api.call("POST", f"/v1/topics/{topic.replace('/', '%2F')}/messages",
                    {"producer": "feed", "messages": [{"body": x, "key": x} for x in bodies]}, key=key)
    assert s == 200, b
    return b["results"]


def drain(api, sid, key):
    got, receipt = [], None
    while True:
        s, b = api.call("GET", f"/v1/subscriptions/{sid}/messages",
                        query={"max": 100, **({"ack": receipt} if receipt else {})}, key=key)
        assert s == 200, b
        if not b["messages"]:
            return got
        got += [m["body"] for m in b["messages"]]
        receipt = b["receipt"]


def handler(logical_id):
    from tests.handlers import load_function
    return load_function(logical_id)


def test_start_is_clock_free(api, setup, aws, monkeypatch):
    from infra.local.streams import StreamPump
    k = setup["feed"]
    # produced before the subscription by a host whose clock is an hour AHEAD
    at(monkeypatch, T0 + H)
    produce(api, k, "quotes", [f"before-{i}" for i in range(6)])
    produce(api, k, "quotes/sh", ["before-sh"])
    # the subscription, created on a host at T0
    at(monkeypatch, T0)
    s, sub = api.call("POST", "/v1/subscriptions", {"subscriber": "risk", "topic": "quotes"}, key=setup["risk"])
    assert s == 201 and sub["created_at"] == T0
    # produced after it by a host whose clock is an hour BEHIND; to a queue that had messages, to
    # queues that had none, to a child topic created afterwards and to a queue added afterwards
    at(monkeypatch, T0 - H)
    after = [f"after-{i}" for i in range(8)]
    produce(api, k, "quotes", after[:4])
    produce(api, k, "quotes/sh", after[4:5])
    assert api.call("POST", "/v1/topics", {"name": "quotes/new", "queues": 1})[0] == 201
    produce(api, k, "quotes/new", after[5:6])
    assert api.call("PATCH", "/v1/topics/quotes%2Fsh", {"queues": 8})[0] == 200
    produce(api, k, "quotes/sh", after[6:8])

    pump = StreamPump(stack_name="lakeq-local", dynamodb_client=aws["dynamodb"], streams_client_=aws["dynamodbstreams"],
                      handlers={"FanoutFunction": handler("FanoutFunction")})  # this process's lakeq
    pump.mappings = [m for m in pump.mappings if m.spec.logical_id == "FanoutFunction"]
    assert pump.drain(30)[0]
    assert sorted(drain(api, sub["id"], setup["risk"])) == sorted(after)
    stored = SubscriptionModel.get(sub["id"])
    assert stored.starts and "quotes" in stored.starts


def test_start_pure_rule():
    from lakeq.store.subscriptions import Start
    s = Start({"t": [3, 0, 5]})
    assert not s.delivers("t", 0, {"offset": 2, "produced_at": 10 ** 15})
    assert s.delivers("t", 0, {"offset": 3, "produced_at": 0})
    assert s.delivers("t", 1, {"offset": 0, "produced_at": 0})
    assert s.delivers("t", 3, {"offset": 0, "produced_at": 0})  # a queue added later
    assert s.delivers("t/child", 0, {"offset": 0, "produced_at": 0})  # a topic without messages then
    legacy = Start(None, created_at=100)
    assert legacy.delivers("t", 0, {"offset": 0, "produced_at": 101})
    assert not legacy.delivers("t", 0, {"offset": 99, "produced_at": 100})
