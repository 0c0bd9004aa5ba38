"""Handlers on in-process moto: every route of the queue, with events built from events/ samples."""
from __future__ import annotations

import threading
import time

import pytest

from lakeq.store.models import KeyModel, QueueModel, SegmentModel
from tests.handlers import ADMIN, sample

T = "/v1/topics/quotes%2Fsh/messages"


def produce(api, key, msgs, topic_path=T, producer="feed"):
    return api.call("POST", topic_path, {"producer": producer, "messages": msgs}, key=key)


def pull(api, key, **q):
    q.setdefault("group", "risk")
    return api.call("GET", q.pop("path", T), query=q, key=key)


def state(topic="quotes/sh"):
    """Everything stored for a topic's log (to assert that rejected requests change nothing)."""
    queues = sorted((q for q in QueueModel.scan(consistent_read=True) if q.topic == topic), key=lambda q: q.queue)
    return ([(q.queue, q.max_offset) for q in queues],
            sum(1 for q in queues for _ in SegmentModel.query(f"{topic}#{int(q.queue)}")))


# --- the events/ samples themselves ---------------------------------------------------------------
def test_sample_events_drive_the_handlers(api):
    for name, status in [("health.json", 200), ("topics_create.json", 201), ("topics_create_child.json", 201),
                         ("topics_list.json", 200), ("clients_create_producer.json", 201),
                         ("clients_create_consumer.json", 201)]:
        assert api.invoke(sample(name))[0] == status, name
    s, b = api.invoke(sample("produce.json"))  # admin key may act for any producer
    assert s == 200 and [r["id"] for r in b["results"]][0] == "m-1"
    s, b = api.invoke(sample("pull.json"))
    assert s == 200 and len(b["messages"]) >= 1
    assert api.invoke(sample("offsets_get.json"))[0] == 200
    assert api.invoke(sample("ack.json"))[0] == 409  # the sample receipt is not the live one
    assert api.invoke(sample("offsets_reset.json"))[0] == 200
    assert api.invoke(sample("pull_tags.json"))[0] == 200


# --- topics and clients ---------------------------------------------------------------------------
def test_topics(api):
    assert api.call("POST", "/v1/topics", {"name": "quotes"}) == (201, {"name": "quotes", "queues": 4, "parent": None})
    assert api.call("POST", "/v1/topics", {"name": "quotes/sh", "queues": 2}) == (
        201, {"name": "quotes/sh", "queues": 2, "parent": "quotes"})
    s, b = api.call("POST", "/v1/topics", {"name": "quotes"})
    assert s == 409 and b["error"]["code"] == "topic_exists"
    s, b = api.call("POST", "/v1/topics", {"name": "nope/child"})
    assert s == 404 and b["error"]["code"] == "not_found"
    for bad in [{"name": "a b"}, {"name": ""}, {}, {"name": "x", "queues": 0}, {"name": "x", "queues": 65},
                {"name": "x", "queues": "4"}, {"name": "x", "queues": True}, {"name": "a//b"}]:
        s, b = api.call("POST", "/v1/topics", bad)
        assert s == 400 and b["error"]["code"] == "bad_request", bad
    assert api.call("POST", "/v1/topics", raw_body="{not json")[0] == 400
    assert api.call("POST", "/v1/topics", raw_body="[1]")[0] == 400
    assert api.call("GET", "/v1/topics")[1] == {"topics": [{"name": "quotes", "queues": 4, "parent": None},
                                                          {"name": "quotes/sh", "queues": 2, "parent": "quotes"}]}


def test_auth_order_and_admin_only(api, setup):
    s, b = api.call("POST", "/v1/topics", {"name": "x"}, key=None)
    assert s == 401 and b == {"error": {"code": "unauthorized", "message": b["error"]["message"]}}
    assert api.call("POST", "/v1/topics", {"name": "x"}, key="wrong")[0] == 401
    assert api.call("POST", "/v1/topics", raw_body="{bad", key="wrong")[0] == 401  # 401 before 400
    assert api.call("POST", "/v1/topics", raw_body="{bad", key=setup["feed"])[0] == 400  # 400 before 403
    assert api.call("POST", "/v1/topics", {"name": "x"}, key=setup["feed"])[0] == 403
    assert api.call("GET", "/v1/topics", key=setup["risk"])[0] == 403
    assert api.call("POST", "/v1/clients", {"name": "c", "role": "producer", "topics": ["quotes"]},
                    key=setup["risk"])[0] == 403
    assert api.call("GET", "/v1/topics")[1]["topics"][0]["name"] == "quotes"  # nothing was created


def test_clients(api):
    api.call("POST", "/v1/topics", {"name": "quotes"})
    s, b = api.call("POST", "/v1/clients", {"name": "feed", "role": "producer", "topics": ["quotes"]})
    assert s == 201 and b["name"] == "feed" and b["role"] == "producer" and b["topics"] == ["quotes"]
    assert b["api_key"].startswith("lq_") and len(b["api_key"]) > 30
    stored = list(KeyModel.scan())
    assert len(stored) == 1 and stored[0].key_hash != b["api_key"] and b["api_key"] not in stored[0].key_hash
    s, b = api.call("POST", "/v1/clients", {"name": "feed", "role": "producer", "topics": ["quotes"]})
    assert s == 409 and b["error"]["code"] == "client_exists"
    s, b = api.call("POST", "/v1/clients", {"name": "g", "role": "consumer", "topics": ["quotes"], "mode": "broadcasting"})
    assert s == 201 and b["mode"] == "broadcasting" and b["visibility_timeout_ms"] == 30000
    assert api.call("POST", "/v1/clients", {"name": "h", "role": "consumer", "topics": ["nope"]})[0] == 404
    for bad in [{"name": "h", "role": "admin", "topics": ["quotes"]}, {"name": "h", "role": "consumer"},
                {"name": "h", "role": "consumer", "topics": []}, {"name": "h", "role": "consumer", "topics": "quotes"},
                {"name": "h", "role": "consumer", "topics": ["quotes"], "mode": "fanout"},
                {"name": "h", "role": "consumer", "topics": ["quotes"], "visibility_timeout_ms": 10},
                {"name": "h h", "role": "consumer", "topics": ["quotes"]}]:
        assert api.call("POST", "/v1/clients", bad)[0] == 400, bad
    assert len(list(KeyModel.scan())) == 2


# --- produce --------------------------------------------------------------------------------------
def test_produce_order_keys_offsets(api, setup):
    msgs = [{"body": f"b{i}", "key": f"k{i % 3}"} for i in range(30)]
    s, b = produce(api, setup["feed"], msgs)
    assert s == 200 and len(b["results"]) == 30
    by_key: dict[str, set] = {}
    per_queue: dict[int, list] = {}
    for m, r in zip(msgs, b["results"]):
        by_key.setdefault(m["key"], set()).add(r["queue"])
        per_queue.setdefault(r["queue"], []).append(r["offset"])
    assert all(len(qs) == 1 for qs in by_key.values())  # same key, same queue
    for offs in per_queue.values():  # contiguous from 0, in request order
        assert offs == list(range(len(offs)))
    s, b2 = produce(api, setup["feed"], msgs[:3])
    nxt = {q: len(offs) for q, offs in per_queue.items()}
    for r in b2["results"]:  # the next offsets of each queue, still contiguous
        assert r["offset"] == nxt.get(r["queue"], 0)
        nxt[r["queue"]] = r["offset"] + 1


def test_produce_is_idempotent_by_id(api, setup):
    msgs = [{"id": "a", "body": "1"}, {"id": "b", "body": "2", "key": "x"}, {"body": "3"}]
    s, first = produce(api, setup["feed"], msgs)
    assert s == 200
    before = state()
    s, again = produce(api, setup["feed"], msgs[:2])
    assert again["results"] == first["results"][:2]
    assert state() == before  # not stored again
    s, mixed = produce(api, setup["feed"], [{"id": "a", "body": "1"}, {"id": "c", "body": "4"}, {"id": "c", "body": "4"}])
    assert mixed["results"][0] == first["results"][0]
    assert mixed["results"][1] == mixed["results"][2]  # a repeated id inside one request lands once
    assert sum(n for _, n in state()[0]) == sum(n for _, n in before[0]) + 1


def test_produce_concurrent_retries_never_duplicate(api, setup):
    msgs = [{"id": f"m{i}", "body": str(i), "key": "k"} for i in range(20)]
    outs = []

    def go():
        outs.append(produce(api, setup["feed"], msgs))

    threads = [threading.Thread(target=go) for _ in range(4)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert all(s == 200 for s, _ in outs)
    assert all(b["results"] == outs[0][1]["results"] for _, b in outs)
    assert sum(n for _, n in state()[0]) == 20


def test_produce_bad_input_changes_nothing(api, setup):
    before = state()
    big = "x" * (1024 * 1024 + 1)  # 1 MiB + 1 (issue 18.2; 256 KiB + 1 before)
    cases = [
        ({"producer": "feed", "messages": []}, 400),
        ({"producer": "feed", "messages": [{"body": "x"}] * 101}, 400),
        ({"producer": "feed", "messages": [{"body": 5}]}, 400),
        ({"producer": "feed", "messages": [{}]}, 400),
        ({"producer": "feed", "messages": [{"body": "x", "tags": [f"t{i}" for i in range(17)]}]}, 400),
        ({"producer": "feed", "messages": [{"body": "x", "properties": {"a": {"b": 1}}}]}, 400),
        ({"producer": "feed", "messages": [{"body": "x", "properties": {"a": [1]}}]}, 400),
        ({"producer": "feed", "messages": [{"body": "x", "properties": {"a": None}}]}, 400),
        ({"producer": "feed", "messages": [{"body": "x", "id": ""}]}, 400),
        ({"producer": "feed", "messages": "x"}, 400),
        ({"messages": [{"body": "x"}]}, 400),
        ({"producer": "feed", "messages": [{"body": "ok"}, {"body": big}]}, 413),
        ({"producer": "nobody", "messages": [{"body": "x"}]}, 404),
        ({"producer": "risk", "messages": [{"body": "x"}]}, 404),
    ]
    for body, status in cases:
        s, b = api.call("POST", T, body, key=setup["feed"])
        assert s == status and set(b) == {"error"}, (body if len(str(body)) < 300 else "big", s, b)
    assert api.call("POST", T, raw_body="nope", key=setup["feed"])[0] == 400
    assert api.call("POST", "/v1/topics/nope/messages", {"producer": "feed", "messages": [{"body": "x"}]},
                    key=setup["feed"])[0] == 404
    assert api.call("POST", "/v1/topics/a%2F%2Fb/messages", {"producer": "feed", "messages": [{"body": "x"}]},
                    key=setup["feed"])[0] == 400
    assert produce(api, setup["risk"], [{"body": "x"}])[0] == 403  # a consumer's key
    assert state() == before


def test_produce_grants(api, setup):
    api.call("POST", "/v1/topics", {"name": "other"})
    s, c = api.call("POST", "/v1/clients", {"name": "shonly", "role": "producer", "topics": ["quotes/sh"]})
    k = c["api_key"]
    assert produce(api, k, [{"body": "x"}], producer="shonly")[0] == 200
    assert produce(api, k, [{"body": "x"}], topic_path="/v1/topics/quotes/messages", producer="shonly")[0] == 403
    assert produce(api, k, [{"body": "x"}], topic_path="/v1/topics/other/messages", producer="shonly")[0] == 403
    assert produce(api, setup["feed"], [{"body": "x"}], producer="shonly")[0] == 403  # not feed's name
    assert produce(api, ADMIN, [{"body": "x"}], producer="shonly")[0] == 200


def test_large_batch_spans_segments(api, setup):
    body = "y" * 200_000
    s, b = produce(api, setup["feed"], [{"body": body, "key": "k"} for _ in range(5)])
    assert s == 200 and [r["offset"] for r in b["results"]] == [0, 1, 2, 3, 4]
    got = []
    while True:
        s, p = pull(api, setup["risk"], max=100)
        if not p["messages"]:
            break
        got += p["messages"]
        assert api.call("POST", "/v1/acks", {"group": "risk", "receipt": p["receipt"]}, key=setup["risk"])[0] == 200
    assert [m["offset"] for m in got] == [0, 1, 2, 3, 4] and all(m["body"] == body for m in got)


# --- pull and ack ---------------------------------------------------------------------------------
def test_pull_lock_ack_cycle(api, setup):
    assert pull(api, setup["risk"]) == (200, {"messages": [], "receipt": None})
    produce(api, setup["feed"], [{"body": f"{i}", "key": "k", "tags": ["A"], "properties": {"n": i}} for i in range(5)])
    s, b = pull(api, setup["risk"], max=2)
    assert s == 200 and [m["body"] for m in b["messages"]] == ["0", "1"]
    m = b["messages"][0]
    assert set(m) == {"id", "topic", "queue", "offset", "body", "key", "tags", "properties", "produced_at",
                      "deliveries"}  # issue 9: deliveries (1 the first time)
    assert m["topic"] == "quotes/sh" and m["tags"] == ["A"] and m["properties"] == {"n": 0}
    broker, queue, off, nxt, ts = b["receipt"].split(":")
    assert broker == "lakeq-local" and queue == f"quotes/sh@{m['queue']}" and (off, nxt) == ("0", "2")
    assert pull(api, setup["risk"])[1]["messages"] == []  # the only queue with messages is locked
    s, a = api.call("POST", "/v1/acks", {"group": "risk", "receipt": b["receipt"]}, key=setup["risk"])
    assert s == 200 and a["committed_offset"] == 2 and a["queue"] == m["queue"]
    # a retried ack that already succeeded (lost response) answers the same again (idempotent)
    assert api.call("POST", "/v1/acks", {"group": "risk", "receipt": b["receipt"]}, key=setup["risk"]) == (s, a)
    s, b2 = pull(api, setup["risk"], max=10)
    assert [x["offset"] for x in b2["messages"]] == [2, 3, 4]
    s, b3 = pull(api, setup["risk"], ack=b2["receipt"])  # piggybacked ack, then nothing left
    assert s == 200 and b3 == {"messages": [], "receipt": None}
    assert pull(api, setup["risk"], ack=b2["receipt"]) == (200, b3)  # retried: the ack already succeeded
    stale = b2["receipt"].rsplit(":", 1)[0] + ":" + str(int(b2["receipt"].rsplit(":", 1)[1]) - 1)
    s, e = pull(api, setup["risk"], ack=stale)  # a failing piggybacked ack serves nothing
    assert s == 409 and e["error"]["code"] == "stale_receipt"
    s, off = api.call("GET", "/v1/groups/risk/offsets", query={"topic": "quotes/sh"}, key=setup["risk"])
    assert s == 200 and off["backlog"] == 0 and off["topic"] == "quotes/sh"
    q = next(x for x in off["queues"] if x["queue"] == m["queue"])
    assert q == {"queue": m["queue"], "min_offset": 0, "max_offset": 5, "committed_offset": 5, "locked_until": 0,
                 "lock_owner": None, "backlog": 0, "dead_lettered": 0}  # issue 9: dead_lettered per queue


def test_lock_expiry_redelivers_and_fences_the_late_ack(api, setup):
    produce(api, setup["feed"], [{"body": "x", "key": "k"}])
    s, first = pull(api, setup["risk"])
    assert len(first["messages"]) == 1
    time.sleep(1.1)  # risk's visibility timeout is 1000 ms: the crashed consumer only delayed the batch
    s, second = pull(api, setup["risk"])
    assert [m["id"] for m in second["messages"]] == [first["messages"][0]["id"]]
    assert api.call("POST", "/v1/acks", {"group": "risk", "receipt": first["receipt"]}, key=setup["risk"])[0] == 409
    assert api.call("POST", "/v1/acks", {"group": "risk", "receipt": second["receipt"]}, key=setup["risk"])[0] == 200


def test_ack_after_expiry_without_relock_succeeds(api, setup):
    produce(api, setup["feed"], [{"body": "x", "key": "k"}])
    s, first = pull(api, setup["risk"])
    time.sleep(1.1)
    assert api.call("POST", "/v1/acks", {"group": "risk", "receipt": first["receipt"]}, key=setup["risk"])[0] == 200
    assert pull(api, setup["risk"])[1]["messages"] == []


def test_tag_filter_and_skip_only_pulls(api, setup):
    produce(api, setup["feed"], [{"body": str(i), "key": "k", "tags": [["A"], ["B"], ["C", "A"], []][i % 4]}
                                 for i in range(8)])
    s, b = pull(api, setup["risk"], tags="A||Z", max=100)
    assert [m["body"] for m in b["messages"]] == ["0", "2", "4", "6"]
    assert all("A" in m["tags"] for m in b["messages"])
    api.call("POST", "/v1/acks", {"group": "risk", "receipt": b["receipt"]}, key=setup["risk"])
    produce(api, setup["feed"], [{"body": "nomatch", "key": "k", "tags": ["B"]} for _ in range(3)])
    assert pull(api, setup["risk"], tags="A")[1] == {"messages": [], "receipt": None}
    s, off = api.call("GET", "/v1/groups/risk/offsets", query={"topic": "quotes/sh"}, key=setup["risk"])
    assert off["backlog"] == 0  # the skipped messages were moved past


def test_broadcasting(api, setup):
    s, g = api.call("POST", "/v1/clients", {"name": "bc", "role": "consumer", "topics": ["quotes"],
                                            "mode": "broadcasting"})
    k = g["api_key"]
    produce(api, setup["feed"], [{"body": str(i), "key": "k"} for i in range(3)])
    s, e = pull(api, k, group="bc")
    assert s == 400 and e["error"]["code"] == "bad_request"
    for client in ("c1", "c2"):
        s, b = pull(api, k, group="bc", client_id=client)
        assert [m["body"] for m in b["messages"]] == ["0", "1", "2"]
        assert api.call("POST", "/v1/acks", {"group": "bc", "receipt": b["receipt"]}, key=k)[0] == 400
        assert api.call("POST", "/v1/acks", {"group": "bc", "client_id": "other", "receipt": b["receipt"]},
                        key=k)[0] == 409
        assert api.call("POST", "/v1/acks", {"group": "bc", "client_id": client, "receipt": b["receipt"]},
                        key=k)[0] == 200
    assert api.call("GET", "/v1/groups/bc/offsets", query={"topic": "quotes/sh"}, key=k)[0] == 400
    s, o = api.call("GET", "/v1/groups/bc/offsets", query={"topic": "quotes/sh", "client_id": "c1"}, key=k)
    assert o["backlog"] == 0
    s, o = api.call("GET", "/v1/groups/bc/offsets", query={"topic": "quotes/sh", "client_id": "c3"}, key=k)
    assert o["backlog"] == 3


def test_long_poll_wakes_on_produce(api, setup, monkeypatch):
    """The produce comes while the pull waits: it is sent once the long poll first sleeps. (Sent at
    a fixed 0.6 s, on a loaded machine it overlapped the pull's own start, and the two in-process
    invocations, one Lambda container each on AWS, mixed their events: the pull answered 400.)"""
    from lakeq.consume import reader

    waiting = threading.Event()
    real_sleep = time.sleep

    class ReaderTime:  # the reader's own ``time``: its sleeps say the poll is waiting
        def __getattr__(self, name):
            return getattr(time, name)

        @staticmethod
        def sleep(s):
            waiting.set()
            real_sleep(s)
    monkeypatch.setattr(reader, "time", ReaderTime())

    def later():
        assert waiting.wait(60)
        real_sleep(0.6)
        produce(api, setup["feed"], [{"body": "late", "key": "k"}])

    th = threading.Thread(target=later)
    th.start()
    t0 = time.monotonic()
    s, b = pull(api, setup["risk"], wait_ms=20000)
    took = time.monotonic() - t0
    th.join(60)
    # woken by the produce, not answered at the poll's end (20 s), however loaded the machine
    assert [m["body"] for m in b["messages"]] == ["late"] and 0.5 < took < 19, (s, b)
    t0 = time.monotonic()
    assert pull(api, setup["risk"], wait_ms=300)[1]["messages"] == []
    assert time.monotonic() - t0 >= 0.3


def test_pull_bad_input(api, setup):
    produce(api, setup["feed"], [{"body": "x", "key": "k"}])
    for q, status in [({"max": "0"}, 400), ({"max": "101"}, 400), ({"max": "x"}, 400), ({"wait_ms": "20001"}, 400),
                      ({"wait_ms": "-1"}, 400), ({"tags": ""}, 400), ({"ack": "garbage"}, 400),
                      ({"group": "a b"}, 400), ({"group": "nobody"}, 404), ({"group": "feed"}, 404),
                      ({"member_id": "m1"}, 404)]:
        s, b = pull(api, setup["risk"], **q)
        assert s == status and "error" in b, (q, s, b)
    assert api.call("GET", T, key=setup["risk"])[0] == 400  # no group
    assert pull(api, setup["risk"], path="/v1/topics/nope/messages")[0] == 404
    assert pull(api, setup["feed"])[0] == 403  # a producer's key
    s, other = api.call("POST", "/v1/clients", {"name": "other", "role": "consumer", "topics": ["quotes"]})
    assert pull(api, other["api_key"])[0] == 403  # another group's key
    s, b = pull(api, setup["risk"])
    assert len(b["messages"]) == 1  # nothing above consumed or locked anything


def test_ack_bad_input(api, setup):
    produce(api, setup["feed"], [{"body": "x", "key": "k"}])
    s, b = pull(api, setup["risk"])
    r = b["receipt"]
    broker, q, off, nxt, ts = r.split(":")
    for body, status in [({"receipt": r}, 400), ({"group": "risk"}, 400), ({"group": "risk", "receipt": "x"}, 400),
                         ({"group": "risk", "subscription": "s", "receipt": r}, 400),
                         ({"group": "nobody", "receipt": r}, 404),
                         ({"group": "risk", "receipt": f"{broker}:nope@0:{off}:{nxt}:{ts}"}, 404),
                         ({"group": "risk", "receipt": f"{broker}:{q}:{off}:{int(nxt) + 5}:{ts}"}, 409),
                         ({"group": "risk", "receipt": f"other:{q}:{off}:{nxt}:{ts}"}, 409),
                         ({"group": "risk", "receipt": f"{broker}:{q}:{off}:{nxt}:{int(ts) - 1}"}, 409)]:
        s, e = api.call("POST", "/v1/acks", body, key=setup["risk"])
        assert s == status and "error" in e, (body, s, e)
    assert api.call("POST", "/v1/acks", {"group": "risk", "receipt": r}, key=setup["feed"])[0] == 403
    assert api.call("POST", "/v1/acks", {"group": "risk", "receipt": r}, key=setup["risk"])[0] == 200


def test_offsets_reset(api, setup):
    produce(api, setup["feed"], [{"body": str(i), "key": "k"} for i in range(4)])
    s, b = pull(api, setup["risk"], max=100)
    q = b["messages"][0]["queue"]
    api.call("POST", "/v1/acks", {"group": "risk", "receipt": b["receipt"]}, key=setup["risk"])
    s, b = pull(api, setup["risk"])
    assert b["messages"] == []
    for body, status in [({"topic": "quotes/sh", "queue": q, "offset": 5}, 400),
                         ({"topic": "quotes/sh", "queue": 7, "offset": 0}, 400),
                         ({"topic": "quotes/sh", "queue": q}, 400), ({"topic": "nope", "queue": 0, "offset": 0}, 404)]:
        assert api.call("PUT", "/v1/groups/risk/offsets", body)[0] == status, body
    assert api.call("PUT", "/v1/groups/nobody/offsets", {"topic": "quotes/sh", "queue": q, "offset": 1})[0] == 404
    assert api.call("PUT", "/v1/groups/risk/offsets", {"topic": "quotes/sh", "queue": q, "offset": 1},
                    key=setup["risk"])[0] == 403
    s, r = api.call("PUT", "/v1/groups/risk/offsets", {"topic": "quotes/sh", "queue": q, "offset": 1})
    assert s == 200 and r["committed_offset"] == 1
    s, b = pull(api, setup["risk"], max=100)
    assert [m["body"] for m in b["messages"]] == ["1", "2", "3"]  # re-consumption
    api.call("PUT", "/v1/groups/risk/offsets", {"topic": "quotes/sh", "queue": q, "offset": 3})
    assert api.call("POST", "/v1/acks", {"group": "risk", "receipt": b["receipt"]}, key=setup["risk"])[0] == 409
    s, o = api.call("GET", "/v1/groups/risk/offsets", query={"topic": "quotes/sh"}, key=setup["risk"])
    assert o["backlog"] == 1
    assert api.call("GET", "/v1/groups/risk/offsets", key=setup["risk"])[0] == 400
    assert api.call("GET", "/v1/groups/risk/offsets", query={"topic": "nope"}, key=setup["risk"])[0] == 404


def test_lagging_head_after_a_producer_crash(api, setup):
    """The queue item's ``max_offset`` lags the chain (issue 16 item 3: the stream's head mover moves
    it, here it never ran): the producer's head comes from the newest segment, the log stays
    contiguous (no hole, no overlap) and a pull reads everything."""
    from lakeq.log import segments as seg
    from lakeq.log.produce_plan import Append
    from lakeq.store.models import QueueModel, SegmentModel
    from lakeq.store.queue_log import LogRepo

    s, b = produce(api, setup["feed"], [{"body": "a", "key": "k"}])
    q = b["results"][0]["queue"]
    crashed = seg.encode([seg.Message(id="lost-update", body="b")], 1)
    SegmentModel(f"quotes/sh#{q}", 1, end=2, count=1, idx=crashed.idx, data=crashed.data, z=crashed.compressed,
                 produced_at=1).save()  # the segment landed, the queue item was never moved
    assert int(QueueModel.get(f"quotes/sh#{q}").max_offset) == 0  # nothing moved it: no head mover here
    assert LogRepo.head("quotes/sh", q) == 2 and LogRepo.head("quotes/sh", q, fresh=True) == 2
    s, b = produce(api, setup["feed"], [{"body": "c", "key": "k"}, {"body": "d", "key": "k"}])
    assert [r["offset"] for r in b["results"]] == [2, 3]
    s, p = pull(api, setup["risk"], max=10)
    assert [m["body"] for m in p["messages"]] == ["a", "b", "c", "d"]
    assert [m["offset"] for m in p["messages"]] == [0, 1, 2, 3]
    with pytest.raises(Exception):  # a put at an occupied base is refused
        LogRepo.append("quotes/sh", q, 1, Append([seg.encode([seg.Message(id="x", body="x")], 1)], []), 5)
