"""Peek (issue 18.3) on moto: a topic queue's messages, a group's and a subscription's unsettled
messages, paged by offset; auth and check order; and that a peek writes nothing (every table
scanned before and after, and PeekFunction's role may only read)."""
from __future__ import annotations

import json

import pytest

from lakeq.store.models import (
    ClientModel,
    DedupModel,
    OffsetModel,
    QueueModel,
    SegmentModel,
    TopicModel,
)
from lakeq.store.subscriptions import SubscriptionModel
from tests.handlers import Context, load_function

T = "quotes%2Fsh"


def produce(api, key, n, start=0, topic=T):
    msgs = [{"id": f"m{i}", "body": f"b{i}", "key": "k", "tags": ["t"], "properties": {"n": i}}
            for i in range(start, start + n)]
    s, b = api.call("POST", f"/v1/topics/{topic}/messages", {"producer": "feed", "messages": msgs}, key=key)
    assert s == 200, b
    return b


def snapshot():
    """Every item of every table a peek could touch (consistent scans)."""
    return {m.__name__: sorted(json.dumps(i.attribute_values, default=str, sort_keys=True)
                               for i in m.scan(consistent_read=True))
            for m in (TopicModel, ClientModel, QueueModel, SegmentModel, DedupModel, OffsetModel, SubscriptionModel)}


def peek_queue(api, q, key=None, topic=T, **params):
    return api.call("GET", f"/v1/topics/{topic}/queues/{q}/messages", query=params or None,
                    **({"key": key} if key else {}))


@pytest.fixture
def queue(api, setup):
    """Five messages m0..m4 in one queue of quotes/sh; that queue's number."""
    return produce(api, setup["feed"], 5)["results"][0]["queue"]


def test_queue_peek_pages_by_offset(api, setup, queue):
    s, p1 = peek_queue(api, queue, limit=2)
    assert s == 200, p1
    assert (p1["topic"], p1["queue"], p1["min_offset"], p1["max_offset"]) == ("quotes/sh", queue, 0, 5)
    assert [m["id"] for m in p1["messages"]] == ["m0", "m1"] and p1["next"] == 2
    m = p1["messages"][0]
    assert list(m) == ["id", "topic", "queue", "offset", "body", "key", "tags", "properties", "produced_at"]
    assert (m["offset"], m["body"], m["tags"], m["properties"]) == (0, "b0", ["t"], {"n": 0})
    _, p2 = peek_queue(api, queue, limit=2, **{"from": p1["next"]})
    _, p3 = peek_queue(api, queue, limit=2, **{"from": p2["next"]})
    assert [m["id"] for m in p2["messages"]] == ["m2", "m3"] and p2["next"] == 4
    assert [m["id"] for m in p3["messages"]] == ["m4"] and p3["next"] is None
    _, past = peek_queue(api, queue, **{"from": 99})
    assert past["messages"] == [] and past["next"] is None
    _, default = peek_queue(api, queue)
    assert len(default["messages"]) == 5 and default["next"] is None


def test_queue_peek_auth_and_errors_change_nothing(api, setup, queue):
    assert api.call("POST", "/v1/topics", {"name": "elsewhere", "queues": 1})[0] == 201
    s, c = api.call("POST", "/v1/clients", {"name": "other", "role": "consumer", "topics": ["elsewhere"]})
    assert s == 201
    before = snapshot()
    assert peek_queue(api, queue, key=setup["risk"])[0] == 200  # a consumer granted the topic
    cases = [
        (peek_queue(api, queue, key="nope"), 401),
        (peek_queue(api, queue, key=setup["feed"]), 403),  # a producer does not read
        (peek_queue(api, queue, key=c["api_key"]), 403),  # a consumer of other topics
        (peek_queue(api, queue, limit=0), 400),
        (peek_queue(api, queue, limit=101), 400),
        (peek_queue(api, queue, **{"from": "-1"}), 400),
        (peek_queue(api, "x"), 400),
        (peek_queue(api, 9), 404),  # quotes/sh has 2 queues
        (peek_queue(api, 0, topic="nosuch"), 404),
        (api.call("GET", f"/v1/topics/{T}/queues/0/messages", query=[("limit", "1"), ("limit", "2")]), 400),
    ]
    for (status, body), want in cases:
        assert status == want, body
        assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}
    assert snapshot() == before


def pending(api, key=None, group="risk", **params):
    return api.call("GET", f"/v1/groups/{group}/pending", query={"topic": "quotes/sh", **params},
                    **({"key": key} if key else {}))


def test_group_pending_shows_states_without_changing_anything(api, setup, queue, clock):
    s, b = api.call("GET", f"/v1/topics/{T}/messages", query={"group": "risk", "max": 2}, key=setup["risk"])
    assert s == 200 and len(b["messages"]) == 2
    before = snapshot()
    s, p = pending(api, setup["risk"])
    assert s == 200, p
    assert p["backlog"] == 5 and p["next"] is None
    got = [(m["offset"], m["state"], m["deliveries"], m["locked_until"]) for m in p["messages"]]
    until = clock.t + 1000  # risk's visibility timeout
    assert got == [(0, "locked", 1, until), (1, "locked", 1, until), (2, "new", 0, 0), (3, "new", 0, 0),
                   (4, "new", 0, 0)]
    assert all(m["queue"] == queue and m["topic"] == "quotes/sh" for m in p["messages"])
    # paging: a cursor "<queue>:<offset>"
    _, a = pending(api, limit=2)
    assert [m["offset"] for m in a["messages"]] == [0, 1] and a["next"] == f"{queue}:2"
    _, b2 = pending(api, limit=2, **{"from": a["next"]})
    assert [m["offset"] for m in b2["messages"]] == [2, 3]
    _, c = pending(api, limit=2, **{"from": b2["next"]})
    assert [m["offset"] for m in c["messages"]] == [4] and c["next"] is None
    # the lock ends: pending, still one delivery
    clock.t += 5000
    _, p = pending(api, queue=queue)
    assert [(m["state"], m["deliveries"]) for m in p["messages"][:2]] == [("pending", 1), ("pending", 1)]
    for q in range(2):  # the other queue: nothing
        if q != queue:
            assert pending(api, queue=q)[1]["messages"] == []
    assert snapshot() == before  # no write: the lock, counts and offsets are as the pull left them
    # and the next pull serves them as the second delivery, as if nobody had looked
    s, b = api.call("GET", f"/v1/topics/{T}/messages", query={"group": "risk", "max": 2}, key=setup["risk"])
    assert [m["deliveries"] for m in b["messages"]] == [2, 2]


def test_group_pending_auth_and_errors(api, setup, queue):
    s, c = api.call("POST", "/v1/clients", {"name": "other", "role": "consumer", "topics": ["quotes"]})
    assert s == 201
    before = snapshot()
    cases = [
        (pending(api, "nope"), 401),
        (pending(api, c["api_key"]), 403),  # another group's key
        (pending(api, setup["feed"]), 403),
        (pending(api, group="nosuch"), 404),
        (api.call("GET", "/v1/groups/risk/pending", query={"topic": "nosuch"}), 404),
        (api.call("GET", "/v1/groups/risk/pending"), 400),  # topic is required
        (pending(api, **{"from": "x"}), 400),
        (pending(api, **{"from": "1"}), 400),
        (pending(api, queue="7"), 404),
        (pending(api, limit="0"), 400),
    ]
    for (status, body), want in cases:
        assert status == want, body
    assert snapshot() == before
    assert pending(api, c["api_key"], group="other")[0] == 200



def fan_out(handler) -> None:
    """Hand every topic segment (not the lists' own) to FanoutFunction's ``handler`` as a stream record."""
    for n, item in enumerate(SegmentModel.scan()):
        if item.pq.startswith("~"):
            continue
        image = item.serialize()
        rec = {"eventID": f"e{n}", "eventName": "INSERT", "eventSource": "aws:dynamodb",
               "dynamodb": {"Keys": {"pq": image["pq"], "base": image["base"]}, "NewImage": image,
                            "SequenceNumber": str(n + 1), "StreamViewType": "NEW_IMAGE"},
               "eventSourceARN": "arn:aws:dynamodb:us-east-1:123456789012:table/x/stream/1"}
        assert handler({"Records": [rec]}, Context()) == {"batchItemFailures": []}

def test_subscription_pending(api, setup, clock):
    s, sub = api.call("POST", "/v1/subscriptions", {"subscriber": "risk", "topic": "quotes"}, key=setup["risk"])
    assert s == 201, sub
    produce(api, setup["feed"], 3)
    fan_out(load_function("FanoutFunction"))
    sid = sub["id"]
    s, b = api.call("GET", f"/v1/subscriptions/{sid}/messages", query={"max": 1}, key=setup["risk"])
    assert s == 200 and len(b["messages"]) == 1
    s, c = api.call("POST", "/v1/clients", {"name": "other", "role": "consumer", "topics": ["quotes"]})
    before = snapshot()
    s, p = api.call("GET", f"/v1/subscriptions/{sid}/pending", query={"limit": 2}, key=setup["risk"])
    assert s == 200, p
    assert p["subscription"] == sid and p["backlog"] == 3
    assert [(m["id"], m["list_offset"], m["state"], m["deliveries"]) for m in p["messages"]] == [
        ("m0", 0, "locked", 1), ("m1", 1, "new", 0)]
    assert p["messages"][0]["topic"] == "quotes/sh" and p["next"] == 2
    s, p2 = api.call("GET", f"/v1/subscriptions/{sid}/pending", query={"from": 2}, key=setup["risk"])
    assert [m["id"] for m in p2["messages"]] == ["m2"] and p2["next"] is None
    assert api.call("GET", f"/v1/subscriptions/{sid}/pending", key=c["api_key"])[0] == 403
    assert api.call("GET", "/v1/subscriptions/0123456789abcdef0123456789abcdef/pending")[0] == 404
    assert api.call("GET", f"/v1/subscriptions/{sid}/pending", query={"from": "x"})[0] == 400
    assert snapshot() == before


def test_the_peek_function_may_not_write(aws):
    """Its role is read-only: a write made as PeekFunction is refused before the store is touched."""
    from infra.local import interceptor
    from lakeq.store.offsets import OffsetRepo
    with interceptor.acting_as("PeekFunction"), pytest.raises(Exception) as e:
        OffsetRepo.reset("g|x|t", 0, 0, {}, 0)
    assert "AccessDenied" in str(e.value) or "not authorized" in str(e.value)


def test_pending_shows_due_what_the_next_pull_dead_letters(api, setup, queue, clock):
    """Issue 30 (8): a message whose deliveries reached ``max_deliveries`` and whose lock ended is
    dead-lettered by the next pull, not served: the peek says ``due`` (it said ``pending``), for
    the limit reached by expiry and for a limit lowered since; the others stay ``pending``."""
    from lakeq.admin import auth as lq_auth
    s, _ = api.call("PATCH", "/v1/clients/risk", {"max_deliveries": 3})
    assert s == 200
    lq_auth.clear_caches()
    s, b = api.call("GET", f"/v1/topics/{T}/messages", query={"group": "risk", "max": 2}, key=setup["risk"])
    assert [m["offset"] for m in b["messages"]] == [0, 1]
    clock.t += 5000  # the lock ends: both are suspects, served alone from here
    for _ in range(2):  # offset 0 alone, twice: its third delivery
        s, b = api.call("GET", f"/v1/topics/{T}/messages", query={"group": "risk", "max": 2}, key=setup["risk"])
        assert [(m["offset"], m["deliveries"]) for m in b["messages"]] == [(0, _ + 2)]
        clock.t += 5000
    before = snapshot()
    _, p = pending(api, queue=queue)
    got = [(m["offset"], m["state"], m["deliveries"]) for m in p["messages"]]
    assert got == [(0, "due", 3), (1, "pending", 1), (2, "new", 0), (3, "new", 0), (4, "new", 0)]
    s, _ = api.call("PATCH", "/v1/clients/risk", {"max_deliveries": 1})  # lowered: offset 1 too
    assert s == 200
    lq_auth.clear_caches()
    before = snapshot()
    _, p = pending(api, queue=queue)
    assert [(m["offset"], m["state"]) for m in p["messages"][:2]] == [(0, "due"), (1, "due")]
    assert snapshot() == before
    # and the next pull does what the peek said: both dead-lettered (dropped: no topic), 2 served
    s, b = api.call("GET", f"/v1/topics/{T}/messages", query={"group": "risk", "max": 1}, key=setup["risk"])
    assert [m["offset"] for m in b["messages"]] == [2]
    s, off = api.call("GET", "/v1/groups/risk/offsets", query={"topic": "quotes/sh"}, key=setup["risk"])
    assert [q["dead_lettered"] for q in off["queues"] if q["queue"] == queue] == [2], off


def test_subscription_pending_shows_due(api, setup, clock, fanout_handler):
    """The same for a subscription's list (its own ``max_deliveries``)."""
    s, sub = api.call("POST", "/v1/subscriptions", {"subscriber": "risk", "topic": "quotes", "max_deliveries": 1},
                      key=setup["risk"])
    assert s == 201, sub
    produce(api, setup["feed"], 2)
    fan_out(fanout_handler)
    sid = sub["id"]
    s, b = api.call("GET", f"/v1/subscriptions/{sid}/messages", query={"max": 1}, key=setup["risk"])
    assert s == 200 and len(b["messages"]) == 1
    _, p = api.call("GET", f"/v1/subscriptions/{sid}/pending", key=setup["risk"])
    assert [m["state"] for m in p["messages"]] == ["locked", "new"]
    clock.t += 60_000
    _, p = api.call("GET", f"/v1/subscriptions/{sid}/pending", key=setup["risk"])
    assert [(m["state"], m["deliveries"]) for m in p["messages"]] == [("due", 1), ("new", 0)]
