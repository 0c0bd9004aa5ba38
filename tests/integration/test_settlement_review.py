"""Settlement edge cases found in review (issue 9): broadcasting clients, tag filters meeting
pending messages, visibility 0 then ack, piggybacked acks, reset while pending."""
from __future__ import annotations

from tests.integration.test_settlement import ACKS, DLQ, T, ack, dlq, offsets, patch, produce, pull  # noqa: F401


def test_broadcasting_clients_settle_and_dead_letter_on_their_own(api, setup, clock, dlq):  # noqa: F811
    s, bc = api.call("POST", "/v1/clients", {"name": "bc", "role": "consumer", "topics": ["quotes"],
                                             "mode": "broadcasting", "visibility_timeout_ms": 1000,
                                             "max_deliveries": 2, "dead_letter_topic": "dlq"})
    assert s == 201, bc
    k = bc["api_key"]
    produce(api, setup["feed"], 3)
    b1 = pull(api, k, group="bc", client_id="c1")
    assert [m["deliveries"] for m in b1["messages"]] == [1, 1, 1]
    s, out = api.call("POST", ACKS, {"group": "bc", "client_id": "c1", "receipt": b1["receipt"], "accept": [0],
                                     "reject": [1], "release": [2]}, key=k)
    assert s == 200 and out["unsettled"] == [] and out["committed_offset"] == 2, out
    b2 = pull(api, k, group="bc", client_id="c2")
    assert [(m["offset"], m["deliveries"]) for m in b2["messages"]] == [(0, 1), (1, 1), (2, 1)]
    b1 = pull(api, k, group="bc", client_id="c1")
    assert [(m["offset"], m["deliveries"]) for m in b1["messages"]] == [(2, 2)]
    s, v = api.call("POST", "/v1/visibility", {"group": "bc", "client_id": "c1", "receipt": b1["receipt"],
                                               "visibility_timeout_ms": 0}, key=k)
    assert s == 200, v
    assert pull(api, k, group="bc", client_id="c1")["messages"] == []  # 2 reached max_deliveries
    s, o = api.call("GET", "/v1/groups/bc/offsets", query={"topic": "quotes/sh", "client_id": "c1"}, key=k)
    assert s == 200 and sum(q["dead_lettered"] for q in o["queues"]) == 2 and o["backlog"] == 0, o
    s, o = api.call("GET", "/v1/groups/bc/offsets", query={"topic": "quotes/sh", "client_id": "c2"}, key=k)
    assert sum(q["dead_lettered"] for q in o["queues"]) == 0 and o["backlog"] == 3, o  # c2's batch: locked
    got = pull(api, dlq, group="dlqc", path=DLQ, max=100)["messages"]
    assert sorted((m["dead_letter"]["offset"], m["dead_letter"]["reason"], m["dead_letter"]["group"])
                  for m in got) == [(1, "rejected", "bc"), (2, "max_deliveries", "bc")]


def test_visibility_zero_then_ack_of_a_partly_settled_batch(api, setup, clock):
    produce(api, setup["feed"], 3)
    b = pull(api, setup["risk"])
    assert ack(api, setup["risk"], b["receipt"], accept=[0])[0] == 200
    s, _ = api.call("POST", "/v1/visibility", {"group": "risk", "receipt": b["receipt"], "visibility_timeout_ms": 0},
                    key=setup["risk"])
    assert s == 200
    b2 = pull(api, setup["risk"])
    assert [(m["offset"], m["deliveries"]) for m in b2["messages"]] == [(1, 2), (2, 2)]
    s, e = ack(api, setup["risk"], b["receipt"], accept=[1])
    assert s == 409 and e["error"]["code"] == "stale_receipt"
    s, out = ack(api, setup["risk"], b2["receipt"])
    assert s == 200 and out["committed_offset"] == 3


def test_piggybacked_ack_settles_the_rest_of_a_partly_settled_batch(api, setup, clock):
    produce(api, setup["feed"], 4)
    b = pull(api, setup["risk"], max=2)
    assert ack(api, setup["risk"], b["receipt"], release=[0])[1]["unsettled"] == [1]
    b2 = pull(api, setup["risk"], ack=b["receipt"])
    assert [(m["offset"], m["deliveries"]) for m in b2["messages"]] == [(0, 2), (2, 1), (3, 1)]


def test_tag_filtered_pull_after_an_expired_lock_is_not_stuck(api, setup, clock):
    """With max_deliveries, after an expiry the next batch is one message alone: a pull whose tag
    filter skips the lowest pending message must still be served the pending ones it matches."""
    assert patch(api, "risk", {"max_deliveries": 5})[0] == 200
    s, _ = api.call("POST", T, {"producer": "feed", "messages": [
        {"body": "a", "key": "k", "tags": ["a"]}, {"body": "b", "key": "k", "tags": ["b"]}]}, key=setup["feed"])
    assert s == 200
    assert len(pull(api, setup["risk"])["messages"]) == 2
    clock.t += 1_000  # expired
    b = pull(api, setup["risk"], tags="b")
    assert [(m["body"], m["deliveries"]) for m in b["messages"]] == [("b", 2)]


def test_reset_while_messages_are_pending(api, setup, clock):
    produce(api, setup["feed"], 3)
    b = pull(api, setup["risk"])
    q = b["messages"][0]["queue"]
    assert ack(api, setup["risk"], b["receipt"], release=[1], accept=[0])[0] == 200
    s, out = api.call("PUT", "/v1/groups/risk/offsets", {"topic": "quotes/sh", "queue": q, "offset": 2})
    assert s == 200, out
    assert ack(api, setup["risk"], b["receipt"], accept=[2])[0] == 409
    b2 = pull(api, setup["risk"])
    assert [m["offset"] for m in b2["messages"]] == [2]


def test_max_deliveries_lowered_while_messages_are_pending(api, setup, clock, dlq):  # noqa: F811
    """A PATCH lowering max_deliveries below the deliveries of a pending (released) message: it is
    dead-lettered at the next pull, not delivered once more than max_deliveries."""
    produce(api, setup["feed"], 2)
    b = pull(api, setup["risk"])
    assert ack(api, setup["risk"], b["receipt"], release=[0], accept=[1])[1]["unsettled"] == []
    assert patch(api, "risk", {"max_deliveries": 1, "dead_letter_topic": "dlq"})[0] == 200
    assert pull(api, setup["risk"])["messages"] == []
    got = pull(api, dlq, group="dlqc", path=DLQ, max=100)["messages"]
    assert [(m["dead_letter"]["offset"], m["dead_letter"]["reason"], m["dead_letter"]["deliveries"]) for m in got] \
        == [(0, "max_deliveries", 1)]
