"""Push delivery on moto (issue 17): the endpoint routes (check order, bad input changes nothing) and
the deliverer with a fake poster (success acks, failure retries after the backoff, max_deliveries
and max_attempts dead-letter, a stale lock is safe), and the PushFunction handler as its role
(least privilege) pushing to a real receiver on loopback."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from lakeq.contract import push as contract
from lakeq.push import delivery as push
from lakeq.store.subscriptions import SubscriptionModel
from tests.handlers import ADMIN, Context, load_function

URL = "https://hooks.example.com/lakeq"
# moto: these tests read DynamoDB Streams (the stream pump, the fan-out, the archiver), which the memory store has not
pytestmark = [pytest.mark.moto, pytest.mark.usefixtures("fresh_matcher")]


def produce(api, key, bodies, topic="quotes"):
    s, b = api.call("POST", f"/v1/topics/{topic}/messages",
                    {"producer": "feed", "messages": [{"body": x, "key": "k"} for x in bodies]}, key=key)
    assert s == 200, b
    return b["results"]


def fan_out(aws):
    from infra.local.streams import StreamPump
    pump = StreamPump(stack_name="lakeq-local", dynamodb_client=aws["dynamodb"], streams_client_=aws["dynamodbstreams"],
                      handlers={"FanoutFunction": load_function("FanoutFunction")})
    pump.mappings = [m for m in pump.mappings if m.spec.logical_id == "FanoutFunction"]
    assert pump.drain(30)[0]


def subscribe(api, key, **extra):
    s, sub = api.call("POST", "/v1/subscriptions", {"subscriber": "risk", "topic": "quotes", **extra}, key=key)
    assert s == 201, sub
    return sub["id"]


def left(api, sid, key):
    """What a pull of the list finds (a subscription with an active endpoint refuses pulls: paused
    for the pull, then resumed)."""
    path = f"/v1/subscriptions/{sid}/push"
    assert api.call("POST", path + "/pause", key=key)[0] == 200
    s, b = api.call("GET", f"/v1/subscriptions/{sid}/messages", key=key)
    assert s == 200, b
    assert api.call("POST", path + "/resume", key=key)[0] == 200
    return b["messages"]


def register(api, sid, key, **body):
    s, b = api.call("PUT", f"/v1/subscriptions/{sid}/push", {"url": URL, **body}, key=key)
    assert s == 201, b
    return b


class Poster:
    """A fake endpoint: answers ``statuses`` in turn (then 200), records every request."""

    def __init__(self, *statuses):
        self.statuses = list(statuses)
        self.calls = []

    def __call__(self, url, headers, body, timeout_s):
        self.calls.append((url, headers, body, timeout_s))
        answer = self.statuses.pop(0) if self.statuses else 200
        return answer if isinstance(answer, tuple) else (answer, b"")

    def bodies(self):
        return [[m["body"] for m in json.loads(c[2])["messages"]] for c in self.calls]


# --- routes ------------------------------------------------------------------------------------------
def test_register_show_pause_rotate_delete(api, setup):
    sid = subscribe(api, setup["risk"])
    out = register(api, sid, setup["risk"], headers={"X-Team": "risk"}, batch_size=5,
                   retry={"max_attempts": 4, "backoff_base_ms": 200, "backoff_cap_ms": 1000})
    assert out["secret"].startswith("whsec_") and out["url"] == URL and out["batch_size"] == 5
    assert out["retry"] == {"max_attempts": 4, "backoff_base_ms": 200, "backoff_cap_ms": 1000}
    assert out["paused"] is False and out["headers"] == {"X-Team": "risk"} and len(out["secrets"]) == 1
    s, got = api.call("GET", f"/v1/subscriptions/{sid}/push", key=setup["risk"])
    assert s == 200 and "secret" not in got and got["state"]["failures"] == 0
    assert "whsec_" not in json.dumps(got)
    # replace: 200, the secret kept (not shown)
    s, rep = api.call("PUT", f"/v1/subscriptions/{sid}/push", {"url": URL + "/v2"}, key=setup["risk"])
    assert s == 200 and "secret" not in rep and rep["url"] == URL + "/v2" and rep["batch_size"] == 10
    stored = SubscriptionModel.get(sid)
    assert json.loads(stored.push_secrets)[0]["secret"] == out["secret"]
    # pause / resume
    s, p = api.call("POST", f"/v1/subscriptions/{sid}/push/pause", key=setup["risk"])
    assert s == 200 and p["paused"] is True
    assert push.deliver(sid, Poster()).batches == 0
    s, p = api.call("POST", f"/v1/subscriptions/{sid}/push/resume")
    assert s == 200 and p["paused"] is False  # the admin key may act too
    # rotation: two secrets valid, the new one first
    s, r = api.call("POST", f"/v1/subscriptions/{sid}/push/secret", {"previous_valid_ms": 60_000}, key=setup["risk"])
    assert s == 200 and r["secret"] != out["secret"] and len(r["secrets"]) == 2
    assert r["secrets"][1]["expires_at"] is not None
    # delete: the endpoint goes, the subscription stays
    assert api.call("DELETE", f"/v1/subscriptions/{sid}/push", key=setup["risk"])[0] == 204
    assert api.call("GET", f"/v1/subscriptions/{sid}/push", key=setup["risk"])[0] == 404
    assert api.call("DELETE", f"/v1/subscriptions/{sid}/push", key=setup["risk"])[0] == 404
    assert SubscriptionModel.get(sid).subscriber == "risk"


def _snapshot():
    return sorted(json.dumps(i.attribute_values, default=str, sort_keys=True) for i in SubscriptionModel.scan())


@pytest.mark.parametrize("body", [
    {"url": "http://hooks.example.com/x"},          # plain http
    {"url": "http://127.0.0.1:9/x"},                # loopback http: only on the local stack
    {"url": "ftp://x/"}, {"url": ""}, {"url": 5}, {},
    {"url": URL, "batch_size": 0}, {"url": URL, "batch_size": 101}, {"url": URL, "batch_size": True},
    {"url": URL, "max_in_flight": 2}, {"url": URL, "timeout_ms": 50},
    {"url": URL, "retry": {"max_attempts": 0}},
    {"url": URL, "retry": {"backoff_base_ms": 5000, "backoff_cap_ms": 1000}},
    {"url": URL, "retry": {"jitter": "none"}}, {"url": URL, "headers": {"X-Lakeq-Signature": "forged"}},
    {"url": URL, "headers": {"X-A": "a\r\nb"}}, {"url": URL, "rate": 0}, {"url": URL, "rate": "5"}, {"url": "https://u:p@x.example/"},
])
def test_bad_input_is_400_and_changes_nothing(api, setup, body, monkeypatch):
    monkeypatch.delenv(push.ENV_LOOPBACK, raising=False)
    sid = subscribe(api, setup["risk"])
    before = _snapshot()
    s, b = api.call("PUT", f"/v1/subscriptions/{sid}/push", body, key=setup["risk"])
    assert s == 400 and b["error"]["code"] == "bad_request", b
    assert _snapshot() == before


def test_loopback_http_allowed_only_with_the_local_flag(api, setup, monkeypatch):
    sid = subscribe(api, setup["risk"])
    monkeypatch.setenv(push.ENV_LOOPBACK, "1")
    u = f"/v1/subscriptions/{sid}/push"
    assert api.call("PUT", u, {"url": "http://127.0.0.1:9/x"}, key=setup["risk"])[0] == 201
    assert api.call("PUT", u, {"url": "http://10.0.0.1/x"}, key=setup["risk"])[0] == 400


def test_check_order_401_400_404_403(api, setup):
    sid = subscribe(api, setup["risk"])
    s, other = api.call("POST", "/v1/clients", {"name": "other", "role": "consumer", "topics": ["quotes"]})
    assert s == 201
    u = f"/v1/subscriptions/{sid}/push"
    assert api.call("PUT", u, {"url": URL}, key="nope")[0] == 401
    assert api.call("GET", u, key=None)[0] == 401
    assert api.call("PUT", u, {"url": "x"}, key=other["api_key"])[0] == 400       # 400 before 403
    assert api.call("PUT", "/v1/subscriptions/" + "0" * 32 + "/push", {"url": URL}, key=setup["risk"])[0] == 404
    assert api.call("PUT", u, {"url": URL}, key=other["api_key"])[0] == 403
    assert api.call("GET", u, key=setup["risk"])[0] == 404                          # no endpoint yet
    assert api.call("POST", u + "/pause", key=setup["risk"])[0] == 404
    register(api, sid, setup["risk"])
    for method, path in (("GET", u), ("DELETE", u), ("POST", u + "/pause"), ("POST", u + "/resume"),
                         ("POST", u + "/secret")):
        s, b = api.call(method, path, key=other["api_key"])
        assert s == 403 and b["error"]["code"] == "forbidden", (method, path, b)


# --- delivery ----------------------------------------------------------------------------------------
def test_success_acks_in_order_signed(api, setup, aws, clock):
    sid = subscribe(api, setup["risk"])
    secret = register(api, sid, setup["risk"], batch_size=3, headers={"X-Team": "risk"})["secret"]
    produce(api, setup["feed"], [f"m{i}" for i in range(7)])
    fan_out(aws)
    p = Poster()
    out = push.deliver(sid, p)
    assert out.delivered == 7 and out.batches == 3 and out.failed == 0
    assert p.bodies() == [["m0", "m1", "m2"], ["m3", "m4", "m5"], ["m6"]]
    for url, headers, body, timeout_s in p.calls:
        assert url == URL and timeout_s == 5.0 and headers["X-Team"] == "risk"
        assert contract.verify(headers[contract.SIGNATURE_HEADER], body, secret, clock.t // 1000)
        assert not contract.verify(headers[contract.SIGNATURE_HEADER], body + b" ", secret, clock.t // 1000)
    # acked: nothing left to pull or push
    assert left(api, sid, setup["risk"]) == []
    assert push.deliver(sid, p).batches == 0
    state = api.call("GET", f"/v1/subscriptions/{sid}/push", key=setup["risk"])[1]["state"]
    assert state["last_status"] == 200 and state["delivered"] == 7 and state["failures"] == 0


def test_failure_retries_after_backoff_and_counts_deliveries(api, setup, aws, clock):
    sid = subscribe(api, setup["risk"])
    register(api, sid, setup["risk"], retry={"max_attempts": 10, "backoff_base_ms": 1000, "backoff_cap_ms": 4000})
    produce(api, setup["feed"], ["a", "b"])
    fan_out(aws)
    p = Poster(500, None)  # a 500, then a timeout / connection error, then 200
    out = push.deliver(sid, p)
    assert out.failed == 1 and out.delivered == 0 and out.batches == 1
    state = api.call("GET", f"/v1/subscriptions/{sid}/push", key=setup["risk"])[1]["state"]
    assert state["last_status"] == 500 and state["failures"] == 1
    assert clock.t < state["next_attempt_at"] <= clock.t + 1000
    # lists (and so the console) show the endpoint's summary
    s_, listed = api.call("GET", "/v1/subscriptions", query={"subscriber": "risk"}, key=setup["risk"])
    assert listed["subscriptions"][0]["push"] == {
        "url": URL, "paused": False, "last_status": 500, "last_attempt_at": clock.t,
        "next_attempt_at": state["next_attempt_at"], "failures": 1}
    # not due yet: neither a push nor a pull gets the batch
    assert push.deliver(sid, p).batches == 0
    assert left(api, sid, setup["risk"]) == []
    clock.t = state["next_attempt_at"] + 1
    out = push.deliver(sid, p)
    assert out.failed == 1 and [m["deliveries"] for m in json.loads(p.calls[-1][2])["messages"]] == [2, 2]
    state = api.call("GET", f"/v1/subscriptions/{sid}/push", key=setup["risk"])[1]["state"]
    assert state["last_status"] is None and state["failures"] == 2
    assert state["next_attempt_at"] <= clock.t + 2000
    clock.t = state["next_attempt_at"] + 1
    out = push.deliver(sid, p)
    assert out.delivered == 2 and p.bodies() == [["a", "b"]] * 3
    assert [m["deliveries"] for m in json.loads(p.calls[-1][2])["messages"]] == [3, 3]


def _dead_letters(api, key):
    s, b = api.call("GET", "/v1/topics/dlq/messages", query={"group": "ops", "max": 100}, key=key)
    assert s == 200, b
    return b["messages"]


def test_max_deliveries_dead_letters_as_for_pulls(api, setup, aws, clock, dlq):
    sid = subscribe(api, ADMIN, max_deliveries=2, dead_letter_topic="dlq")  # (the admin grants a dead-letter topic)
    register(api, sid, setup["risk"], retry={"max_attempts": 50, "backoff_base_ms": 100, "backoff_cap_ms": 100})
    produce(api, setup["feed"], ["x"])
    fan_out(aws)
    p = Poster(*[503] * 10)
    for _ in range(5):
        push.deliver(sid, p)
        clock.t += 1000
    assert len(p.calls) == 2  # never past max_deliveries
    dead = _dead_letters(api, dlq)
    assert [(m["body"], m["dead_letter"]["deliveries"]) for m in dead] == [("x", 2)]
    assert push.deliver(sid, p).batches == 0


def test_max_attempts_rejects_the_batch(api, setup, aws, clock, dlq):
    sid = subscribe(api, ADMIN, dead_letter_topic="dlq")
    register(api, sid, setup["risk"], retry={"max_attempts": 3, "backoff_base_ms": 100, "backoff_cap_ms": 100})
    produce(api, setup["feed"], ["y", "z"])
    fan_out(aws)
    p = Poster(*[404] * 10)
    outs = []
    for _ in range(6):
        outs.append(push.deliver(sid, p))
        clock.t += 1000
    assert len(p.calls) == 3 and sum(o.dead_lettered for o in outs) == 2
    dead = _dead_letters(api, dlq)
    assert sorted(m["body"] for m in dead) == ["y", "z"]
    assert {m["dead_letter"]["reason"] for m in dead} == {"rejected"}
    state = api.call("GET", f"/v1/subscriptions/{sid}/push", key=setup["risk"])[1]["state"]
    assert state["dead_lettered"] == 2 and state["failures"] == 3


def test_per_message_outcomes_in_a_2xx_answer(api, setup, aws, clock, dlq):
    sid = subscribe(api, ADMIN, dead_letter_topic="dlq")
    register(api, sid, setup["risk"], batch_size=4, retry={"max_attempts": 5, "backoff_base_ms": 100,
                                                           "backoff_cap_ms": 100})
    produce(api, setup["feed"], ["p0", "p1", "p2", "p3"])
    fan_out(aws)
    # 1: outcomes that name a position out of range: a failed delivery (nothing settled)
    # 2: release p1, reject p3 (p0, p2 accepted); 3: p1 alone, accepted
    p = Poster((200, b'{"release": [7]}'), (200, b'{"release": [1], "reject": [3]}'))
    out = push.deliver(sid, p)
    assert out.failed == 1 and out.delivered == 0
    clock.t += 1000
    out = push.deliver(sid, p)
    assert (out.delivered, out.dead_lettered, out.failed) == (2, 1, 0)
    assert p.bodies()[1] == ["p0", "p1", "p2", "p3"]
    state = api.call("GET", f"/v1/subscriptions/{sid}/push", key=setup["risk"])[1]["state"]
    assert state["next_attempt_at"] is not None and state["failures"] == 0
    assert push.deliver(sid, p).batches == 0  # p1 waits for its backoff
    clock.t += 1000
    out = push.deliver(sid, p)
    assert out.delivered == 1 and p.bodies()[2] == ["p1"]
    assert [m["deliveries"] for m in json.loads(p.calls[2][2])["messages"]] == [3]
    assert [(m["body"], m["dead_letter"]["reason"]) for m in _dead_letters(api, dlq)] == [("p3", "rejected")]
    assert left(api, sid, setup["risk"]) == []
    state = api.call("GET", f"/v1/subscriptions/{sid}/push", key=setup["risk"])[1]["state"]
    assert (state["delivered"], state["dead_lettered"]) == (3, 1)


def test_rate_limit_paces_batches(api, setup, aws, clock):
    sid = subscribe(api, setup["risk"])
    register(api, sid, setup["risk"], batch_size=2, rate=1)  # 2 messages per 2 s
    produce(api, setup["feed"], ["a", "b", "c"])
    fan_out(aws)
    p = Poster()
    t0 = clock.t
    out = push.deliver(sid, p, budget_s=0.3)  # the next slot is 2 s away: not within this run
    assert out.delivered == 2 and p.bodies() == [["a", "b"]]
    assert SubscriptionModel.get(sid).push_send_at == t0 + 2000
    clock.t = t0 + 1999
    assert push.deliver(sid, p, budget_s=0.3).batches == 0
    clock.t = t0 + 2000
    out = push.deliver(sid, p, budget_s=0.3)  # one message: the slot shrinks to 1 s
    assert out.delivered == 1 and p.bodies()[-1] == ["c"]
    assert SubscriptionModel.get(sid).push_send_at == t0 + 3000
    s, b = api.call("GET", f"/v1/subscriptions/{sid}/push", key=setup["risk"])
    assert b["rate"] == 1


def test_a_stale_lock_is_safe(api, setup, aws, clock):
    """The endpoint answers after the batch's lock expired and another delivery took the batch:
    the late 200 acks nothing; the batch is settled by the delivery that holds it."""
    sid = subscribe(api, setup["risk"])
    register(api, sid, setup["risk"], timeout_ms=1000)
    produce(api, setup["feed"], ["s"])
    fan_out(aws)
    inner = Poster()

    def slow(url, headers, body, timeout_s):
        clock.t += 10_000  # past the lock (timeout + margin)
        if len(inner.calls) == 0:
            inner.calls.append(None)
            got = push.deliver(sid, inner)  # another invocation takes the batch over and acks it
            assert got.delivered == 1
        return 200, b""
    out = push.deliver(sid, slow)
    assert out.stale == 1 and out.delivered == 0
    assert left(api, sid, setup["risk"]) == []


def test_stream_records_name_list_subscriptions():
    recs = [{"eventName": "INSERT", "dynamodb": {"Keys": {"pq": {"S": "~abc#0"}, "base": {"N": "0"}}}},
            {"eventName": "INSERT", "dynamodb": {"Keys": {"pq": {"S": "quotes#1"}}}},
            {"eventName": "MODIFY", "dynamodb": {"Keys": {"pq": {"S": "~def#0"}}}},
            {"eventName": "INSERT", "dynamodb": {"Keys": {"pq": {"S": "~abc#0"}}}}]
    assert push.subscriptions_of_records(recs) == ["abc"]


# --- the function, as its role, to a real receiver ---------------------------------------------------
class Receiver:
    def __init__(self, statuses):
        self.statuses, self.got = list(statuses), []
        outer = self

        class H(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                outer.got.append((dict(self.headers), body))
                code = outer.statuses.pop(0) if outer.statuses else 200
                self.send_response(code)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *a):
                pass
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_push_function_as_its_role_to_a_real_receiver(api, setup, aws, clock, monkeypatch, capsys):
    from tests.emf import documents, problems
    monkeypatch.setenv(push.ENV_LOOPBACK, "1")
    rx = Receiver([500])
    try:
        sid = subscribe(api, setup["risk"])
        s, reg = api.call("PUT", f"/v1/subscriptions/{sid}/push", {"url": rx.url}, key=setup["risk"])
        assert s == 201
        produce(api, setup["feed"], ["r1", "r2"])
        fan_out(aws)
        fn = load_function("PushFunction")
        rec = {"eventName": "INSERT", "dynamodb": {"Keys": {"pq": {"S": f"~{sid}#0"}, "base": {"N": "0"}}}}
        capsys.readouterr()
        assert fn({"Records": [rec]}, Context()) == {"batchItemFailures": []}
        assert len(rx.got) == 1 and api.call("GET", f"/v1/subscriptions/{sid}/push")[1]["state"]["last_status"] == 500
        clock.t += 2000
        assert fn({"source": "aws.events", "detail-type": "Scheduled Event"}, Context())["delivered"] == 2
        # per endpoint (issue 34): each run's batches POSTed and failed, under the Endpoint dimension
        per = [d for d in documents(capsys.readouterr().out) if d.get("Endpoint") == sid]
        assert all(problems(d) == [] for d in per)
        assert [(d["PushAttempts"], d["PushFailures"]) for d in per] == [([1.0], [1.0]), ([1.0], [0.0])]
        assert len(rx.got) == 2
        headers, body = rx.got[-1]
        assert contract.verify(headers[contract.SIGNATURE_HEADER], body, reg["secret"], clock.t // 1000)
        assert [m["body"] for m in json.loads(body)["messages"]] == ["r1", "r2"]
    finally:
        rx.close()


def test_push_function_dead_letters_as_its_role(api, setup, aws, clock, monkeypatch, dlq):
    monkeypatch.setenv(push.ENV_LOOPBACK, "1")
    rx = Receiver([500] * 5)
    try:
        sid = subscribe(api, ADMIN, dead_letter_topic="dlq")
        s, _ = api.call("PUT", f"/v1/subscriptions/{sid}/push",
                        {"url": rx.url, "retry": {"max_attempts": 1}}, key=setup["risk"])
        assert s == 201
        produce(api, setup["feed"], ["d1"])
        fan_out(aws)
        fn = load_function("PushFunction")
        out = fn({"source": "aws.events"}, Context())
        assert out == {"endpoints": 1, "delivered": 0, "failed": 1, "dead_lettered": 1}
        assert [m["body"] for m in _dead_letters(api, dlq)] == ["d1"] and len(rx.got) == 1
    finally:
        rx.close()
