"""Consumer groups' push endpoints on moto (issue 17 item 1/2): the routes (who may register, check
order, bad input changes nothing), the deliverer acting as one consumer of the group (its queues'
locks, acks, retries, max_deliveries dead letters as for a group pull), the in-flight limit
(threads and leases; a second run finds every slot held), and PushFunction's schedule as its role."""
from __future__ import annotations

import json
import threading
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor

import pytest

from infra.local import interceptor
from lakeq.admin import auth as lq_auth
from lakeq.contract import push as contract
from lakeq.push import delivery as push
from lakeq.store.models import ClientModel, WatcherModel
from lakeq.store.push import GroupPushRepo
from tests.handlers import Context, load_function, stream_records
from tests.integration.test_push import Poster, Receiver, _dead_letters

URL = "https://hooks.example.com/group"
G = "/v1/groups/risk/push"


def produce(api, key, pairs, topic="quotes"):
    s, b = api.call("POST", f"/v1/topics/{topic}/messages",
                    {"producer": "feed", "messages": [{"body": x, "key": k} for k, x in pairs]}, key=key)
    assert s == 200, b
    return b["results"]


def register(api, key, **body):
    s, b = api.call("PUT", G, {"url": URL, "topic": "quotes", **body}, key=key)
    assert s == 201, b
    return b


def pull_all(api, key):
    s, b = api.call("GET", "/v1/topics/quotes/messages", query={"group": "risk", "max": 100}, key=key)
    assert s == 200, b
    return b["messages"]


def _snapshot():
    return sorted((c.name, c.push, c.push_secrets, c.push_paused) for c in ClientModel.scan())


# --- routes ------------------------------------------------------------------------------------------
def test_register_by_the_group_or_admin_show_pause_rotate_delete(api, setup):
    b = register(api, setup["risk"], max_in_flight=3, batch_size=5)
    assert b["group"] == "risk" and b["topic"] == "quotes" and b["max_in_flight"] == 3 and b["secret"]
    s, again = api.call("PUT", G, {"url": URL, "topic": "quotes", "max_in_flight": 2})  # admin
    assert s == 200 and again["max_in_flight"] == 2 and "secret" not in again
    assert api.call("POST", G + "/pause", key=setup["risk"])[1]["paused"] is True
    # the console's client list summarises it (no extra request per group)
    listed = {c["name"]: c for c in api.call("GET", "/v1/clients")[1]["clients"]}
    assert listed["risk"]["push"] == {"url": URL, "topic": "quotes", "max_in_flight": 2, "paused": True,
                                      "last_status": None, "last_attempt_at": None, "next_attempt_at": None,
                                      "failures": 0, "delivered": 0}
    assert "push" not in listed["feed"]
    assert GroupPushRepo.active_ids() == []
    assert api.call("POST", G + "/resume", key=setup["risk"])[1]["paused"] is False
    rot = api.call("POST", G + "/secret", {"previous_valid_ms": 1000}, key=setup["risk"])[1]
    assert rot["secret"] != b["secret"] and len(rot["secrets"]) == 2
    s, got = api.call("GET", G, key=setup["risk"])
    assert s == 200 and got["state"]["delivered"] == 0 and "secret" not in got
    assert api.call("DELETE", G, key=setup["risk"])[0] == 204
    assert api.call("GET", G, key=setup["risk"])[0] == 404
    assert ClientModel.get("risk").push is None and ClientModel.get("risk").push_leases is None


def test_check_order_and_refusals(api, setup):
    s, other = api.call("POST", "/v1/clients", {"name": "other", "role": "consumer", "topics": ["quotes"]})
    assert s == 201
    assert api.call("POST", "/v1/topics", {"name": "secret", "queues": 1})[0] == 201
    assert api.call("PUT", G, {"url": URL, "topic": "quotes"}, key="nope")[0] == 401
    assert api.call("PUT", G, {"url": URL}, key=other["api_key"])[0] == 400             # 400 before 403
    assert api.call("PUT", "/v1/groups/nobody/push", {"url": URL, "topic": "quotes"})[0] == 404
    assert api.call("PUT", "/v1/groups/feed/push", {"url": URL, "topic": "quotes"})[0] == 404  # a producer
    assert api.call("PUT", G, {"url": URL, "topic": "nosuch"}, key=setup["risk"])[0] == 404
    assert api.call("PUT", G, {"url": URL, "topic": "nosuch"}, key=other["api_key"])[0] == 404  # 404 before 403
    assert api.call("PUT", G, {"url": URL, "topic": "quotes"}, key=other["api_key"])[0] == 403
    assert api.call("PUT", G, {"url": URL, "topic": "secret"}, key=setup["risk"])[0] == 403  # not granted
    assert api.call("GET", G, key=setup["risk"])[0] == 404                                   # no endpoint yet
    s, _ = api.call("POST", "/v1/clients", {"name": "bc", "role": "consumer", "topics": ["quotes"],
                                            "mode": "broadcasting"})
    assert s == 201
    s, b = api.call("PUT", "/v1/groups/bc/push", {"url": URL, "topic": "quotes"})
    assert s == 400 and "broadcasting" in b["error"]["message"]
    register(api, setup["risk"])
    for method, path in (("GET", G), ("DELETE", G), ("POST", G + "/pause"), ("POST", G + "/resume"),
                         ("POST", G + "/secret")):
        assert api.call(method, path, key=other["api_key"])[0] == 403, (method, path)


@pytest.mark.parametrize("body", [
    {"url": URL}, {"url": URL, "topic": ""}, {"url": URL, "topic": 5},
    {"url": URL, "topic": "quotes", "max_in_flight": 0}, {"url": URL, "topic": "quotes", "max_in_flight": 11},
    {"url": URL, "topic": "quotes", "subscription": "x"}, {"url": "http://hooks.example.com/", "topic": "quotes"},
])
def test_bad_input_is_400_and_changes_nothing(api, setup, body):
    before = _snapshot()
    s, b = api.call("PUT", G, body, key=setup["risk"])
    assert s == 400 and b["error"]["code"] == "bad_request", b
    assert _snapshot() == before


def test_a_subscription_endpoint_refuses_parallel_requests_with_a_clear_400(api, setup):
    s, sub = api.call("POST", "/v1/subscriptions", {"subscriber": "risk", "topic": "quotes"}, key=setup["risk"])
    assert s == 201
    s, b = api.call("PUT", f"/v1/subscriptions/{sub['id']}/push", {"url": URL, "max_in_flight": 2}, key=setup["risk"])
    assert s == 400 and "one lock" in b["error"]["message"]


# --- delivery ----------------------------------------------------------------------------------------
def test_group_push_acks_as_a_group_pull_in_order_per_key(api, setup, aws, clock):
    secret = register(api, setup["risk"], batch_size=4)["secret"]
    pairs = [(f"k{i % 5}", f"m{i}") for i in range(20)]
    produce(api, setup["feed"], pairs)
    p = Poster()
    out = push.deliver_group("risk", p)
    assert out.delivered == 20 and out.failed == 0
    per_key = defaultdict(list)
    for url, headers, body, _t in p.calls:
        assert headers["X-Lakeq-Group"] == "risk"
        assert contract.verify(headers[contract.SIGNATURE_HEADER], body, secret, clock.t // 1000)
        env = json.loads(body)
        assert env["group"] == "risk" and env["topic"] == "quotes"
        for m in env["messages"]:
            per_key[m["key"]].append(int(m["body"][1:]))
    assert sorted(x for xs in per_key.values() for x in xs) == list(range(20))  # each once
    assert all(xs == sorted(xs) for xs in per_key.values())                      # in order per key
    assert pull_all(api, setup["risk"]) == []                                     # acked for the group
    assert push.deliver_group("risk", p).batches == 0
    assert api.call("GET", G, key=setup["risk"])[1]["state"]["delivered"] == 20


def test_group_failure_retries_and_dead_letters_with_the_groups_policy(api, setup, aws, clock, dlq):
    s, b = api.call("PATCH", "/v1/clients/risk", {"max_deliveries": 2, "dead_letter_topic": "dlq"})
    assert s == 200, b
    register(api, setup["risk"], retry={"max_attempts": 50, "backoff_base_ms": 100, "backoff_cap_ms": 100})
    produce(api, setup["feed"], [("k", "x")])
    p = Poster(*[503] * 10)
    assert push.deliver_group("risk", p).failed == 1
    assert pull_all(api, setup["risk"]) == []          # locked by the push until its retry
    offsets = api.call("GET", "/v1/groups/risk/offsets", query={"topic": "quotes"}, key=setup["risk"])[1]
    assert [q["lock_owner"] for q in offsets["queues"] if q["locked_until"]] == ["push"]
    for _ in range(4):
        clock.t += 1000
        push.deliver_group("risk", p)
    assert len(p.calls) == 2  # never past the group's max_deliveries
    dead = _dead_letters(api, dlq)
    assert [(m["body"], m["dead_letter"]["deliveries"], m["dead_letter"]["group"]) for m in dead] == [("x", 2, "risk")]


def test_paused_or_deleted_topic_pushes_nothing(api, setup, aws, clock):
    register(api, setup["risk"])
    produce(api, setup["feed"], [("k", "a")])
    api.call("POST", G + "/pause", key=setup["risk"])
    p = Poster()
    assert push.deliver_group("risk", p).batches == 0 and push.sweep(p) == {}
    api.call("POST", G + "/resume", key=setup["risk"])
    assert set(push.sweep(p)) == {"group:risk"} and p.bodies() == [["a"]]
    # the group's grant of the topic revoked after registration: nothing more is pushed
    produce(api, setup["feed"], [("k", "b")])
    ClientModel("risk").update(actions=[ClientModel.topics.set(["other"])])
    assert push.deliver_group("risk", p).batches == 0 and p.bodies() == [["a"]]


@pytest.mark.moto  # reads DynamoDB Streams
def test_a_pause_written_during_a_batch_ends_the_run_after_it(api, setup, aws, clock):
    """A run started before the pause: the pause lands while its first request is in flight (the
    endpoint answers after it); the run posts no other batch, although more are servable, and the
    rest waits for the resume. Before, a run read the pause once, at its start, and went on for its
    whole budget (the e2e stream test saw a message produced after the pause pushed)."""
    for kind in ("group", "subscription"):
        if kind == "group":
            register(api, setup["risk"], batch_size=1)
            path, run = G, lambda p: push.deliver_group("risk", p)
        else:
            from tests.integration.test_push import fan_out, subscribe
            from tests.integration.test_push import register as register_sub
            sid = subscribe(api, setup["risk"])
            register_sub(api, sid, setup["risk"], batch_size=1)
            path, run = f"/v1/subscriptions/{sid}/push", lambda p: push.deliver(sid, p)
        produce(api, setup["feed"], [("k", f"{kind}{i}") for i in range(3)])
        if kind == "subscription":
            fan_out(aws)

        class Pausing(Poster):
            def __call__(self, url, headers, body, timeout_s):
                if not self.calls:  # the pause written while the first request is in flight
                    assert api.call("POST", path + "/pause", key=setup["risk"])[0] == 200
                return super().__call__(url, headers, body, timeout_s)
        p = Pausing()
        out = run(p)
        assert out.batches == 1 and p.bodies() == [[f"{kind}0"]], (kind, p.bodies())
        assert run(p).batches == 0  # paused: nothing
        api.call("POST", path + "/resume", key=setup["risk"])
        assert run(p).delivered == 2 and p.bodies()[1:] == [[f"{kind}1"], [f"{kind}2"]]


class Slow:
    """A poster that holds each request ``hold_s`` and measures how many are in flight at once.

    With ``gate=n`` every request first waits until ``n`` requests have been in flight together
    once (``opened``; the wait ends ``gate_timeout_s`` after the first request in any case), then
    holds ``hold_s``: a pusher that sends ``n`` in parallel reaches a peak of ``n`` however slowly
    its threads start on a loaded machine (without the gate a late thread may find the first
    requests already answered), and one that sends more is seen above ``n`` (each request is still
    held ``hold_s`` after the gate opens)."""

    def __init__(self, hold_s=0.3, gate=None, gate_timeout_s=30.0):
        self.hold_s, self.now, self.peak, self.calls = hold_s, 0, 0, 0
        self.lock = threading.Lock()
        self.gate, self.gate_timeout_s, self.opened, self.give_up_at = gate, gate_timeout_s, threading.Event(), None

    def __call__(self, url, headers, body, timeout_s):
        with self.lock:
            self.now += 1
            self.calls += 1
            self.peak = max(self.peak, self.now)
            if self.gate is not None and self.now >= self.gate:
                self.opened.set()
            if self.give_up_at is None:
                self.give_up_at = time.monotonic() + self.gate_timeout_s
        if self.gate is not None:
            self.opened.wait(max(0.0, self.give_up_at - time.monotonic()))
        time.sleep(self.hold_s)
        with self.lock:
            self.now -= 1
        return 200, b""


def test_max_in_flight_parallel_requests_never_more(api, setup, aws, clock):
    register(api, setup["risk"], max_in_flight=3, batch_size=1)
    produce(api, setup["feed"], [(f"k{i}", f"m{i}") for i in range(24)])  # keys over the 4 queues
    p = Slow(gate=3)  # the first requests wait until 3 are in flight: no race with the threads' start
    out = push.deliver_group("risk", p)
    assert p.opened.is_set() and p.peak == 3  # parallel, never more than max_in_flight
    assert out.delivered == 24 and p.calls == 24
    assert pull_all(api, setup["risk"]) == []


def test_held_leases_stop_a_second_run(api, setup, aws, clock):
    """Another invocation finds every in-flight slot leased: it sends nothing (the limit holds
    across invocations); an expired lease is taken over."""
    register(api, setup["risk"], max_in_flight=2)
    produce(api, setup["feed"], [("k", "a")])
    now = clock.t
    assert GroupPushRepo.lease("risk", 0, now, now + 60_000)
    assert GroupPushRepo.lease("risk", 1, now, now + 60_000)
    assert not GroupPushRepo.lease("risk", 1, now, now + 60_000)
    p = Poster()
    assert push.deliver_group("risk", p).batches == 0 and p.calls == []
    clock.t = now + 60_001
    assert push.deliver_group("risk", p).delivered == 1
    assert ClientModel.get("risk").push_leases.as_dict() == {}  # both taken over, then given back


def test_push_function_schedule_as_its_role_serves_groups(api, setup, aws, clock, monkeypatch):
    monkeypatch.setenv(push.ENV_LOOPBACK, "1")
    rx = Receiver([500])
    try:
        s, reg = api.call("PUT", G, {"url": rx.url, "topic": "quotes", "max_in_flight": 2,
                                     "retry": {"max_attempts": 5, "backoff_base_ms": 100, "backoff_cap_ms": 100}},
                          key=setup["risk"])
        assert s == 201
        produce(api, setup["feed"], [("k", "g1"), ("k", "g2")])
        fn = load_function("PushFunction")
        out = fn({"source": "aws.events"}, Context())
        assert out["failed"] == 1 and len(rx.got) == 1
        clock.t += 2000
        assert fn({"source": "aws.events"}, Context())["delivered"] == 2
        headers, body = rx.got[-1]
        assert contract.verify(headers[contract.SIGNATURE_HEADER], body, reg["secret"], clock.t // 1000)
        assert [m["body"] for m in json.loads(body)["messages"]] == ["g1", "g2"]
        assert pull_all(api, setup["risk"]) == []
    finally:
        rx.close()


def test_two_overlapping_runs_stay_within_max_in_flight(api, setup, aws, clock):
    """Two invocations at once (a schedule delivered twice, or a run outlasting the next tick): the
    leases keep the requests in flight at max_in_flight, and every message is delivered once."""
    register(api, setup["risk"], max_in_flight=2, batch_size=1)
    produce(api, setup["feed"], [(f"k{i}", f"m{i}") for i in range(16)])
    p = Slow(0.2, gate=2)
    with ThreadPoolExecutor(2) as ex:
        runs = [f.result() for f in [ex.submit(push.deliver_group, "risk", p) for _ in range(2)]]
    assert sum(r.delivered for r in runs) == 16 and p.calls == 16
    assert p.opened.is_set() and p.peak == 2


# --- the stream trigger (no sweep) --------------------------------------------------------------------
class Calls:
    """An interceptor hook: every DynamoDB call made, as (operation, table, function)."""

    def __init__(self):
        self.seen = []

    def before(self, call):
        if call.service == "dynamodb":
            self.seen.append((call.operation, call.params.get("TableName"), call.function))

    def after(self, call, response):
        return response

    def on(self, op, table):
        return [c for c in self.seen if c[0] == op and c[1] == table]


def segment_records(aws):
    """Every record of SegmentsTable's stream so far, as the event source mapping hands them over."""
    return stream_records(aws, "segments")


def registry():
    return sorted((r.k, r.c) for r in WatcherModel.scan() if r.k.startswith("p|"))


def test_registry_follows_the_endpoint_put_pause_resume_replace_delete(api, setup):
    assert registry() == []
    register(api, setup["risk"])
    assert registry() == [("p|quotes", "risk")] and WatcherModel.get("p|quotes", "risk").expires_at is None
    assert GroupPushRepo.groups_of_topic("quotes") == ["risk"] and GroupPushRepo.groups_of_topic("other") == []
    assert api.call("POST", f"{G}/pause", key=setup["risk"])[0] == 200
    assert registry() == []
    # replaced while paused: still paused, still out of the registry
    assert api.call("PUT", G, {"url": URL, "topic": "quotes", "batch_size": 3}, key=setup["risk"])[0] == 200
    assert registry() == [] and ClientModel.get("risk").push_paused
    assert api.call("POST", f"{G}/resume", key=setup["risk"])[0] == 200
    assert registry() == [("p|quotes", "risk")]
    # replaced with another topic: the row moves (one transaction with the settings)
    assert api.call("POST", "/v1/topics", {"name": "other", "queues": 1})[0] == 201
    ClientModel("risk").update(actions=[ClientModel.topics.set(["quotes", "other"])])
    assert api.call("PUT", G, {"url": URL, "topic": "other"}, key=setup["risk"])[0] == 200
    assert registry() == [("p|other", "risk")]
    assert api.call("DELETE", G, key=setup["risk"])[0] == 204
    assert registry() == []
    assert api.call("DELETE", G, key=setup["risk"])[0] == 404  # nothing left to delete
    # a refused PUT (403: a topic not granted) writes no row
    assert api.call("PUT", G, {"url": URL, "topic": "dlq"}, key=setup["risk"])[0] in (403, 404)
    assert registry() == []


def test_stream_records_name_topics():
    recs = [{"eventName": "INSERT", "dynamodb": {"Keys": {"pq": {"S": p}}}}
            for p in ("quotes#2", "~abc#0", "quotes!3#0", "a/b#0")]
    assert contract.topics_of_records(recs) == ["quotes", "a/b"]


@pytest.mark.moto  # reads DynamoDB Streams
def test_push_function_stream_trigger_serves_a_group_endpoint_as_its_role(api, setup, aws, clock, monkeypatch):
    """A produce's segment records alone (no schedule run) get the group's messages pushed; a topic
    with no group endpoint costs one registry Query and no delivery attempt; after DELETE, or
    while paused, nothing is pushed."""
    monkeypatch.setenv(push.ENV_LOOPBACK, "1")
    rx = Receiver([])
    calls = Calls()
    watchers = WatcherModel.Meta.table_name
    try:
        s, reg = api.call("PUT", G, {"url": rx.url, "topic": "quotes"}, key=setup["risk"])
        assert s == 201
        fn = load_function("PushFunction")
        produce(api, setup["feed"], [("k", "s1"), ("k", "s2")])
        recs = segment_records(aws)
        topic_recs = [r for r in recs if not r["dynamodb"]["Keys"]["pq"]["S"].startswith("~")]
        assert topic_recs, recs
        with interceptor.hooked(calls):
            assert fn({"Records": recs}, Context()) == {"batchItemFailures": []}
        assert [m["body"] for m in json.loads(rx.got[-1][1])["messages"]] == ["s1", "s2"]
        assert contract.verify(rx.got[-1][0][contract.SIGNATURE_HEADER], rx.got[-1][1], reg["secret"],
                               clock.t // 1000)
        assert len(calls.on("Query", watchers)) == 1 and {c[2] for c in calls.seen} == {"PushFunction"}
        assert pull_all(api, setup["risk"]) == []
        # another topic, nobody's endpoint on it: one registry Query, no delivery attempt
        assert api.call("POST", "/v1/topics", {"name": "other", "queues": 2})[0] == 201
        ClientModel("feed").update(actions=[ClientModel.topics.set(["quotes", "other"])])
        lq_auth.clear_caches()
        produce(api, setup["feed"], [("a", "o1"), ("b", "o2")], topic="other")
        other = [r for r in segment_records(aws) if r["dynamodb"]["Keys"]["pq"]["S"].startswith("other#")]
        assert other
        n, calls.seen = len(rx.got), []
        with interceptor.hooked(calls):
            fn({"Records": other}, Context())
        assert len(rx.got) == n
        assert calls.on("Query", watchers) == [("Query", watchers, "PushFunction")]
        assert not calls.on("GetItem", ClientModel.Meta.table_name)  # no group looked at
        # paused: nothing pushed; resumed: pushed by the next segment's records
        assert api.call("POST", f"{G}/pause", key=setup["risk"])[0] == 200
        seen = len(segment_records(aws))
        produce(api, setup["feed"], [("k", "p1")])
        fresh = segment_records(aws)[seen:]
        assert fresh
        fn({"Records": fresh}, Context())
        assert len(rx.got) == n
        assert api.call("POST", f"{G}/resume", key=setup["risk"])[0] == 200
        fn({"Records": fresh}, Context())
        assert len(rx.got) == n + 1 and [m["body"] for m in json.loads(rx.got[-1][1])["messages"]] == ["p1"]
        # deleted: its row is gone, nothing pushed
        assert api.call("DELETE", G, key=setup["risk"])[0] == 204
        seen = len(segment_records(aws))
        produce(api, setup["feed"], [("k", "d1")])
        fresh = segment_records(aws)[seen:]
        calls.seen = []
        with interceptor.hooked(calls):
            fn({"Records": fresh}, Context())
        assert len(rx.got) == n + 1 and registry() == []
        assert len(calls.on("Query", watchers)) == 1 and not calls.on("GetItem", ClientModel.Meta.table_name)
    finally:
        rx.close()


def test_registry_writes_are_conditioned_on_the_settings_read(api, setup):
    """A route that read settings another request has changed meanwhile writes nothing (neither
    the client item nor a registry row): it reads again. Here the repo is called with stale reads."""
    register(api, setup["risk"])
    cur = ClientModel.get("risk").push
    other = json.dumps({**json.loads(cur), "topic": "quotes/sh"})
    stale = json.dumps({**json.loads(cur), "batch_size": 99})
    assert not GroupPushRepo.put("risk", other, None, current=stale, paused=False)
    assert not GroupPushRepo.put("risk", cur, "[]", current=None)  # "new" although one exists
    assert not GroupPushRepo.set_paused("risk", True, stale)
    assert not GroupPushRepo.remove("risk", stale)
    assert registry() == [("p|quotes", "risk")] and ClientModel.get("risk").push == cur
    assert not ClientModel.get("risk").push_paused
    # a pause read as "not paused" while it is paused: refused too (the row stays out)
    assert GroupPushRepo.set_paused("risk", True, cur) and registry() == []
    assert not GroupPushRepo.put("risk", other, None, current=cur, paused=False)
    assert registry() == []
    # the route itself reads again and succeeds
    ClientModel("risk").update(actions=[ClientModel.topics.set(["quotes", "quotes/sh"])])
    lq_auth.clear_caches()
    s, b = api.call("PUT", G, {"url": URL, "topic": "quotes/sh"}, key=setup["risk"])
    assert s == 200 and b["paused"] is True and registry() == []
    assert api.call("POST", f"{G}/resume", key=setup["risk"])[0] == 200
    assert registry() == [("p|quotes/sh", "risk")]
