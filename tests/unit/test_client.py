"""The Python client (clients/python) against a fake transport: retries with backoff + jitter only
for calls safe to repeat, typed API errors, producer batching (100 messages / 3,000,000 request bytes
/ linger) with stable auto ids, piggybacked settles, and the group member loop's reactions."""
from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from lakeq_client import (
    Admin,
    ApiError,
    Connection,
    Consumer,
    GroupMember,
    Producer,
    Response,
    RetryPolicy,
    Subscriptions,
    TransportError,
)
from lakeq_client.cli import table

URL = "http://lakeq.test"


@dataclass
class Call:
    method: str
    path: str
    params: dict
    body: Any
    size: int
    headers: dict
    timeout: tuple


@dataclass
class Fake:
    """A transport answering with ``handler(call)`` → ``(status, json[, headers])`` or raising."""

    handler: Callable[[Call], Any]
    calls: list[Call] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def send(self, method, url, *, params, body, headers, timeout):
        assert url.startswith(URL)
        c = Call(method, url[len(URL):], dict(params or {}), json.loads(body) if body else None,
                 len(body or b""), dict(headers), timeout)
        with self.lock:
            self.calls.append(c)
        r = self.handler(c)
        status, payload, *rest = r
        return Response(status, rest[0] if rest else {},
                        b"" if payload is None else json.dumps(payload).encode())


def conn(handler, **kw) -> tuple[Connection, Fake, list[float]]:
    fake, sleeps = Fake(handler), []
    kw.setdefault("retry", RetryPolicy(max_attempts=5, base_delay=0.1, max_delay=2.0))
    return Connection(url=URL, key="k1", transport=fake, sleep=sleeps.append,
                      rng=random.Random(7), **kw), fake, sleeps


def err(status, code, message="m"):
    return (status, {"error": {"code": code, "message": message}})


def script(*answers):
    """Answers in turn (an Exception instance is raised)."""
    it = iter(answers)

    def handler(call):
        a = next(it)
        if isinstance(a, Exception):
            raise a
        return a
    return handler


# ------------------------------------------------------------------------------ retries / errors

def test_idempotent_get_retried_on_5xx_then_succeeds_with_key_and_backoff():
    c, fake, sleeps = conn(script(err(503, "unavailable"), err(500, "internal"),
                                  (200, {"topics": []})))
    assert Admin(connection=c).list_topics() == []
    assert len(fake.calls) == 3
    assert all(x.headers["Authorization"] == "Bearer k1" for x in fake.calls)
    assert len(sleeps) == 2 and 0 <= sleeps[0] <= 0.1 and 0 <= sleeps[1] <= 0.2


def test_429_retried_and_retry_after_is_a_lower_bound():
    c, fake, sleeps = conn(script((429, {"error": {"code": "throttled", "message": "slow"}},
                                   {"Retry-After": "1.5"}), (200, {"status": "ok"})))
    assert Admin(connection=c).health() == {"status": "ok"}
    assert len(fake.calls) == 2 and sleeps[0] >= 1.5


def test_connection_errors_retried_up_to_max_attempts_then_raised():
    c, fake, sleeps = conn(script(*[TransportError("refused")] * 5))
    with pytest.raises(TransportError):
        Admin(connection=c).describe_group("risk")
    assert len(fake.calls) == 5 and len(sleeps) == 4


def test_non_idempotent_calls_are_sent_once():
    c, fake, sleeps = conn(script(err(503, "unavailable")))
    with pytest.raises(ApiError) as e:
        Admin(connection=c).create_topic("quotes", 4)
    assert len(fake.calls) == 1 and sleeps == [] and e.value.status == 503
    c, fake, _ = conn(script(TransportError("reset")))
    with pytest.raises(TransportError):
        Subscriptions(connection=c).create("risk", "quotes", [{"field": "t", "values": ["A"]}])
    assert len(fake.calls) == 1


def test_client_errors_are_typed_and_not_retried():
    c, fake, sleeps = conn(script(err(409, "stale_receipt", "lock moved on")))
    with pytest.raises(ApiError) as e:
        Consumer(group="risk", topic="quotes", connection=c).ack("b:0:0:3:17")
    assert (e.value.status, e.value.code, e.value.message) == (409, "stale_receipt", "lock moved on")
    assert e.value.body == {"error": {"code": "stale_receipt", "message": "lock moved on"}}
    assert len(fake.calls) == 1 and sleeps == [] and not e.value.retryable


def test_error_body_that_is_not_json_still_raises_api_error():
    fake = Fake(lambda call: None)
    fake.send = lambda *a, **k: Response(502, {}, b"<html>Bad Gateway</html>")  # type: ignore
    c = Connection(url=URL, transport=fake, sleep=lambda s: None,
                   retry=RetryPolicy(max_attempts=2))
    with pytest.raises(ApiError) as e:
        Admin(connection=c).list_topics()
    assert e.value.status == 502 and e.value.code == "http_error" and "Bad Gateway" in e.value.message


def test_backoff_is_exponential_capped_and_jittered():
    p = RetryPolicy(max_attempts=10, base_delay=0.1, max_delay=1.0)
    rng = random.Random(1)
    for retry, cap in [(1, 0.1), (2, 0.2), (3, 0.4), (4, 0.8), (5, 1.0), (9, 1.0)]:
        ds = [p.delay(retry, rng) for _ in range(400)]
        assert all(0 <= d <= cap for d in ds)
        assert max(ds) > 0.9 * cap and min(ds) < 0.1 * cap  # spread over [0, cap]: jitter
    assert p.delay(1, rng, retry_after=3.0) == 1.0  # Retry-After capped at max_delay


def test_long_poll_extends_the_read_timeout_and_topic_slash_is_encoded():
    c, fake, _ = conn(lambda call: (200, {"messages": [], "receipt": None}), timeout=(2.0, 10.0))
    Consumer(group="risk", topic="quotes/sh", connection=c, wait_ms=5000).pull()
    call = fake.calls[0]
    assert call.path == "/v1/topics/quotes%2Fsh/messages"
    assert call.timeout == (2.0, 15.0)
    assert call.params == {"group": "risk", "max": "32", "wait_ms": "5000"}


# --------------------------------------------------------------------------------------- producer

def produce_ok(call):
    return (200, {"results": [{"id": m["id"], "queue": 0, "offset": i}
                              for i, m in enumerate(call.body["messages"])]})


def test_producer_flushes_every_100_messages_with_unique_auto_ids():
    c, fake, _ = conn(produce_ok)
    p = Producer(producer="feed", connection=c, linger=0)
    futs = [p.send("quotes", f"b{i}", key=str(i % 3)) for i in range(250)]
    assert [len(x.body["messages"]) for x in fake.calls] == [100, 100]  # sent as they filled
    p.close()
    assert [len(x.body["messages"]) for x in fake.calls] == [100, 100, 50]
    ids = [m["id"] for x in fake.calls for m in x.body["messages"]]
    assert len(set(ids)) == 250
    assert [f.result()["id"] for f in futs] == ids  # each future gets its own message's result
    assert [m["body"] for x in fake.calls for m in x.body["messages"]] == [f"b{i}" for i in range(250)]
    assert all(x.body["producer"] == "feed" for x in fake.calls)


def test_producer_keeps_each_request_within_the_byte_limit_counting_utf8():
    c, fake, _ = conn(produce_ok)
    body = "é" * 20_000  # 40,000 UTF-8 bytes (ASCII-escaped JSON would be 120,000)
    with Producer(producer="feed", connection=c, linger=0) as p:
        for _ in range(160):
            p.send("quotes", body)
    sizes = [x.size for x in fake.calls]
    counts = [len(x.body["messages"]) for x in fake.calls]
    assert sum(counts) == 160 and all(s <= 3_000_000 for s in sizes)
    per = sizes[0] / counts[0]
    assert counts[0] < 100 and sizes[0] + per > 3_000_000  # cut by bytes, and as late as possible


def test_producer_small_byte_limit_splits_exactly():
    c, fake, _ = conn(produce_ok)
    with Producer(producer="p", connection=c, linger=0, max_bytes=500) as p:
        for i in range(10):
            p.send("t", "x" * 80, id=f"id{i}")
    sizes = [x.size for x in fake.calls]
    assert all(s <= 500 for s in sizes) and sum(len(x.body["messages"]) for x in fake.calls) == 10
    one = len(json.dumps({"id": "id0", "body": "x" * 80}, separators=(",", ":")))
    assert all(s + one + 1 > 500 for s in sizes[:-1])


@pytest.mark.parametrize("slack, per_request", [(0, 3), (-1, 2)])
def test_producer_byte_limit_is_exact_to_the_byte(slack, per_request):
    env = len(json.dumps({"producer": "p", "messages": []}, separators=(",", ":")))
    one = len(json.dumps({"id": "id0", "body": "x" * 50}, separators=(",", ":")))
    limit = env + 3 * one + 2 + slack  # three messages and their two commas, +slack
    c, fake, _ = conn(produce_ok)
    with Producer(producer="p", connection=c, linger=0, max_bytes=limit) as p:
        for i in range(6):
            p.send("t", "x" * 50, id=f"id{i}")
    assert [len(x.body["messages"]) for x in fake.calls] == [per_request] * (6 // per_request)
    assert max(x.size for x in fake.calls) <= limit


def test_retried_batch_carries_the_same_ids():
    c, fake, sleeps = conn(script(err(503, "unavailable"), TransportError("reset"),
                                  (200, {"results": [{"id": "x", "queue": 0, "offset": 0}] * 3})))
    with Producer(producer="feed", connection=c, linger=0) as p:
        f = p.send("quotes", "a")
        p.send("quotes", "b", id="mine")
        p.send("quotes", "c")
    assert len(fake.calls) == 3 and len(sleeps) == 2
    assert fake.calls[0].body == fake.calls[1].body == fake.calls[2].body
    ids = [m["id"] for m in fake.calls[0].body["messages"]]
    assert ids[1] == "mine" and ids[0] and ids[2] and len(set(ids)) == 3
    assert f.result()["queue"] == 0


def test_producer_linger_sends_a_partial_batch_by_itself():
    c, fake, _ = conn(produce_ok)
    p = Producer(producer="feed", connection=c, linger=0.05)
    try:
        with p._cond:  # the linger thread waits for the three sends, however slow the machine
            futs = [p.send("quotes", str(i)) for i in range(3)]
        assert [f.result(timeout=5)["offset"] for f in futs] == [0, 1, 2]
        assert len(fake.calls) == 1 and len(fake.calls[0].body["messages"]) == 3
    finally:
        p.close()
    assert len(fake.calls) == 1


def test_batch_error_reaches_every_future_and_flush():
    c, fake, _ = conn(script(err(413, "payload_too_large", "body too big")))
    p = Producer(producer="feed", connection=c, linger=0)
    futs = [p.send("quotes", "x") for _ in range(2)]
    with pytest.raises(ApiError) as e:
        p.flush()
    assert e.value.code == "payload_too_large"
    assert all(isinstance(f.exception(), ApiError) for f in futs) and len(fake.calls) == 1


# --------------------------------------------------------------------------------------- consumer

def test_settle_piggybacks_on_next_pull_and_close_sends_the_last():
    receipts = iter(["r1", "r2"])

    def handler(call):
        if call.method == "GET":
            return (200, {"messages": [{"id": "m"}], "receipt": next(receipts)})
        return (200, {"queue": 0, "committed_offset": 1})
    c, fake, _ = conn(handler)
    cons = Consumer(group="risk", topic="quotes", client_id="c1", connection=c, wait_ms=0)
    cons.pull().settle()
    cons.pull().settle()
    cons.close()
    assert "ack" not in fake.calls[0].params and fake.calls[1].params["ack"] == "r1"
    assert fake.calls[1].params["client_id"] == "c1"
    assert (fake.calls[2].method, fake.calls[2].path, fake.calls[2].body) == (
        "POST", "/v1/acks", {"group": "risk", "receipt": "r2", "client_id": "c1"})
    assert len(fake.calls) == 3


def test_pending_settle_kept_when_pull_got_no_answer_dropped_when_refused():
    answers = iter([TransportError("x")] * 2 + [err(409, "stale_receipt"),
                                               (200, {"messages": [], "receipt": None})])

    def handler(call):
        a = next(answers)
        if isinstance(a, Exception):
            raise a
        return a
    c, fake, _ = conn(handler, retry=RetryPolicy(max_attempts=2))
    cons = Consumer(group="risk", topic="quotes", connection=c, wait_ms=0)
    cons._pending = "r1"
    with pytest.raises(TransportError):
        cons.pull()
    with pytest.raises(ApiError):
        cons.pull()  # carries r1 again; refused → dropped
    cons.pull()
    assert [x.params.get("ack") for x in fake.calls] == ["r1", "r1", "r1", None]


def test_subscription_pull_and_ack_paths():
    def handler(call):
        if call.method == "GET":
            return (200, {"messages": [{"id": "m"}], "receipt": "s:0:0:1:5"})
        return (200, {"queue": 0, "committed_offset": 1})
    c, fake, _ = conn(handler)
    sub = Subscriptions(connection=c).get("sub-1")
    b = sub.pull(max=5)
    b.ack()
    assert fake.calls[0].path == "/v1/subscriptions/sub-1/messages"
    assert fake.calls[0].params == {"max": "5", "wait_ms": "0"}
    assert fake.calls[1].body == {"subscription": "sub-1", "receipt": "s:0:0:1:5"}


def test_renew_posts_visibility_retried_like_acks_and_stale_is_not_retried():
    answers = iter([(200, {"messages": [{"id": "m"}], "receipt": "r1"}), err(503, "unavailable"),
                    TransportError("x"), (200, {"topic": "quotes", "queue": 0, "locked_until": 42}),
                    (200, {"topic": "quotes", "queue": 0, "locked_until": 0}), err(409, "stale_receipt")])

    def handler(call):
        a = next(answers)
        if isinstance(a, Exception):
            raise a
        return a
    c, fake, sleeps = conn(handler)
    cons = Consumer(group="risk", topic="quotes", client_id="c1", connection=c, wait_ms=0)
    b = cons.pull()
    assert b.renew(60_000) == {"topic": "quotes", "queue": 0, "locked_until": 42}
    assert [(x.method, x.path) for x in fake.calls[1:]] == [("POST", "/v1/visibility")] * 3
    assert all(x.body == {"group": "risk", "client_id": "c1", "receipt": "r1", "visibility_timeout_ms": 60_000}
               for x in fake.calls[1:])
    assert len(sleeps) == 2  # two retries
    assert cons.renew("r1", 0)["locked_until"] == 0
    assert fake.calls[-1].body["visibility_timeout_ms"] == 0
    n = len(fake.calls)
    with pytest.raises(ApiError) as e:
        cons.renew(b, 1000)
    assert e.value.code == "stale_receipt" and len(fake.calls) == n + 1  # a 4xx is not retried
    assert cons.renew(type(b)([], None, cons), 1000) is None and len(fake.calls) == n + 1
    sub = Subscriptions(connection=conn(lambda call: (200, {"queue": 0, "locked_until": 9}))[0]).get("s1")
    fake2 = sub.conn.transport
    sub.consumer().renew("s:0:0:1:5", 5)
    assert fake2.calls[0].body == {"subscription": "s1", "receipt": "s:0:0:1:5", "visibility_timeout_ms": 5}


# ----------------------------------------------------------------------------------- group member

class FakeGroup:
    """Scripted heartbeat answers; records joins/syncs/leave."""

    def __init__(self, heartbeats):
        self.heartbeats = list(heartbeats)
        self.gen = 0
        self.joins: list[dict] = []

    def __call__(self, call):
        p = call.path
        if call.method == "POST" and p == "/v1/groups/risk/members":
            self.gen += 1
            self.joins.append(call.body)
            return (200, {"member_id": call.body["member_id"], "generation": self.gen,
                          "state": "awaiting_sync", "heartbeat_interval_ms": 20,
                          "session_timeout_ms": 60})
        if p.endswith("/heartbeat"):
            h = self.heartbeats.pop(0) if self.heartbeats else "none"
            if isinstance(h, tuple):
                return h
            return (200, {"generation": self.gen, "action": h})
        if p.endswith("/sync"):
            assert call.body == {"generation": self.gen}
            return (200, {"generation": self.gen,
                          "assignment": [{"topic": "quotes", "queue": self.gen % 4}]})
        if call.method == "DELETE":
            return (204, None)
        if call.method == "GET":
            return (200, {"messages": [], "receipt": None})
        raise AssertionError(call)


def test_member_loop_syncs_rejoins_with_owned_and_joins_again_when_removed():
    g = FakeGroup(["sync", "none", err(409, "stale_generation"), "sync", "rejoin", "sync",
                   err(404, "unknown_member"), "sync"])
    c, fake, _ = conn(g)
    m = GroupMember(group="risk", topics=["quotes"], member_id="m1", connection=c)
    m._join()
    assert m.step() == "sync" and m.assignment == [{"topic": "quotes", "queue": 1}]
    assert m.step() == "none"
    assert m.step() == "rejoin"  # 409: join again with what the last sync gave
    assert g.joins[-1]["owned"] == [{"topic": "quotes", "queue": 1}] and m.generation == 2
    assert m.step() == "sync" and m.assignment == [{"topic": "quotes", "queue": 2}]
    assert m.step() == "rejoin" and g.joins[-1]["owned"] == [{"topic": "quotes", "queue": 2}]
    assert m.step() == "sync"
    assert m.step() == "join" and g.joins[-1]["owned"] == [] and m.assignment == []
    assert m.step() == "sync" and m.assignment == [{"topic": "quotes", "queue": 0}]
    hb = [x for x in fake.calls if x.path.endswith("/heartbeat")]
    assert hb[1].body == {"generation": 1, "owned": [{"topic": "quotes", "queue": 1}]}
    m.close()
    assert fake.calls[-1].method == "DELETE" and fake.calls[-1].path == "/v1/groups/risk/members/m1"


def test_member_thread_gets_assignment_pulls_with_member_id_and_leaves():
    g = FakeGroup(["sync"])
    c, fake, _ = conn(g)
    with GroupMember(group="risk", topics=["quotes"], member_id="m1", connection=c,
                     wait_ms=0) as m:
        assert m.wait_for_assignment(30) == [{"topic": "quotes", "queue": 1}]
        m.pull()
        deadline = time.monotonic() + 30  # a few heartbeats at 20 ms: however slowly the thread is run
        while m.actions.count("none") < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
    pulls = [x for x in fake.calls if x.method == "GET"]
    assert pulls[0].params["member_id"] == "m1" and pulls[0].path == "/v1/topics/quotes/messages"
    assert m.actions[0] == "sync" and m.actions.count("none") >= 2
    assert fake.calls[-1].method == "DELETE"


def test_member_stops_on_a_client_error_and_pull_raises_it():
    g = FakeGroup([err(403, "forbidden")])
    c, _, _ = conn(g)
    m = GroupMember(group="risk", topics=["quotes"], member_id="m1", connection=c)
    m.start()
    with pytest.raises(ApiError):
        m.wait_for_assignment(30)
    with pytest.raises(ApiError):
        m.pull()
    m.close()


def test_table():
    assert table([["a", 1]], ["name", "n"]).splitlines() == ["name  n", "----  -", "a     1"]


def test_per_message_outcomes_and_client_settings():
    def handler(call):
        if call.method == "GET":
            return (200, {"messages": [{"id": "a", "offset": 4}, {"id": "b", "offset": 5}], "receipt": "r9"})
        return (200, {"topic": "quotes", "queue": 0, "committed_offset": 5, "unsettled": []})
    c, fake, _ = conn(handler)
    cons = Consumer(group="risk", topic="quotes", connection=c, wait_ms=0)
    b = cons.pull()
    b.accept(4)
    b.release(5)
    b.reject(5)
    cons.ack(b, accept=[4], reject=[5])
    assert [x.body for x in fake.calls[1:]] == [
        {"group": "risk", "receipt": "r9", "accept": [4]}, {"group": "risk", "receipt": "r9", "release": [5]},
        {"group": "risk", "receipt": "r9", "reject": [5]},
        {"group": "risk", "receipt": "r9", "accept": [4], "reject": [5]}]
    assert all((x.method, x.path) == ("POST", "/v1/acks") for x in fake.calls[1:])
    c2, fake2, _ = conn(lambda call: (200, {"name": "risk", "max_deliveries": 3}))
    Admin(connection=c2).update_client("risk", max_deliveries=3, dead_letter_topic=None)
    assert (fake2.calls[0].method, fake2.calls[0].path, fake2.calls[0].body) == (
        "PATCH", "/v1/clients/risk", {"max_deliveries": 3, "dead_letter_topic": None})
