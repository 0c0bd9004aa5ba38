"""Push delivery end to end (issue 17) over the local stack: a real receiver on loopback (http.server
in a thread) that answers the first request too late (a timeout) and the second with a 500, releases
one message once (per-message outcomes), answers slowly, and fails every batch holding a poison
message. The stack runs PushFunction from template.yaml (SegmentsTable stream + its schedule,
time-compressed with LAKEQ_SCHEDULE_SCALE so rate(1 minute) fires every 2 s).

Checked: every message reaches the endpoint in a 2xx-answered request, every request's signature
verifies with the secret returned at registration, no message is POSTed more than
``max_deliveries`` times, the poison message is dead-lettered after exactly ``max_deliveries``
deliveries, and nothing is left on the list for a pull."""
from __future__ import annotations

import json
import threading
import time
import uuid
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests
import standardwebhooks

from lakeq.contract import push as contract

pytestmark = pytest.mark.e2e
T = 30
MAX_DELIVERIES = 3


class Receiver:
    """Request 1 answers too late (after the endpoint's timeout), request 2 a 500; then any batch
    holding ``poison`` gets a 500, the first batch holding ``release_me`` a 200 that releases it, and
    every other one a slow (200 ms) 200. Records (headers, body, status, released positions)."""

    def __init__(self, poison: str, release_me: str, late_s: float):
        self.got: list[tuple[dict, bytes, int, list[int]]] = []
        self.lock = threading.Lock()
        outer = self

        class H(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                msgs = [m["body"] for m in json.loads(body)["messages"]]
                answer, released = b"", []
                with outer.lock:
                    n = len(outer.got)
                    seen_release = any(release_me in r for r in outer.released_bodies())
                    if n == 0:
                        code, delay = 0, late_s  # a timeout: the answer comes too late
                    elif n == 1 or poison in msgs:
                        code, delay = 500, 0
                    elif release_me in msgs and not seen_release:
                        code, delay, released = 200, 0, [msgs.index(release_me)]
                        answer = json.dumps({"release": released}).encode()
                    else:
                        code, delay = 200, 0.2
                    outer.got.append((dict(self.headers), body, code, released))
                time.sleep(delay)
                try:
                    self.send_response(code or 200)
                    self.send_header("Content-Length", str(len(answer)))
                    self.end_headers()
                    self.wfile.write(answer)
                except OSError:
                    pass  # the pusher gave up waiting

            def log_message(self, *a):
                pass
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def released_bodies(self):
        return [[json.loads(b)["messages"][i]["body"] for i in rel] for _h, b, _c, rel in self.got]

    def accepted(self) -> set[str]:
        return {m["body"] for _h, b, c, rel in self.got if c == 200
                for i, m in enumerate(json.loads(b)["messages"]) if i not in rel}

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def st(start_local_stack):
    stack = start_local_stack(extra_env={"LAKEQ_SCHEDULE_SCALE": "30"})
    yield stack
    code = stack.stop()
    assert code == 0, stack.stderr[-3000:]


def test_push_delivers_everything_signed_retries_and_dead_letters(st):
    rx = Receiver(poison="poison", release_me="m5", late_s=1.5)
    try:
        tag = uuid.uuid4().hex[:6]
        topic, dlq = f"push-{tag}", f"push-dlq-{tag}"
        st.call("POST", "/v1/topics", json={"name": topic, "queues": 2}, status=201)
        st.call("POST", "/v1/topics", json={"name": dlq, "queues": 1}, status=201)
        feed = st.call("POST", "/v1/clients", json={"name": f"feed-{tag}", "role": "producer", "topics": [topic]},
                       status=201)["api_key"]
        sub_key = st.call("POST", "/v1/clients", json={"name": f"hook-{tag}", "role": "consumer",
                                                        "topics": [topic, dlq]}, status=201)["api_key"]
        sub = st.call("POST", "/v1/subscriptions", None, 201, json={  # the admin's key grants the dead-letter topic
            "subscriber": f"hook-{tag}", "topic": topic, "max_deliveries": MAX_DELIVERIES, "dead_letter_topic": dlq})
        reg = st.call("PUT", f"/v1/subscriptions/{sub['id']}/push", sub_key, 201, json={
            "url": rx.url, "batch_size": 4, "timeout_ms": 1000,
            "retry": {"max_attempts": 10, "backoff_base_ms": 200, "backoff_cap_ms": 500}})
        bodies = [f"m{i}" for i in range(12)] + ["poison"] + [f"n{i}" for i in range(5)]
        for i in range(0, len(bodies), 6):
            st.call("POST", f"/v1/topics/{topic}/messages", feed, json={
                "producer": f"feed-{tag}", "messages": [{"body": b, "key": b} for b in bodies[i:i + 6]]})

        want = set(bodies) - {"poison"}
        deadline = time.monotonic() + 90
        dead: list = []
        while time.monotonic() < deadline:
            with rx.lock:
                ok = rx.accepted()
            if ok >= want:
                dead = st.call("GET", f"/v1/topics/{dlq}/messages", sub_key, params={"group": f"hook-{tag}", "max": 10})
                if dead["messages"]:
                    break
            time.sleep(0.5)
        assert ok >= want, f"not delivered: {sorted(want - ok)}; requests: {len(rx.got)}\n{st.stderr[-3000:]}"
        assert [m["body"] for m in dead["messages"]] == ["poison"]
        assert dead["messages"][0]["dead_letter"]["deliveries"] == MAX_DELIVERIES

        with rx.lock:
            got = list(rx.got)
        posts: Counter[str] = Counter()
        wh = standardwebhooks.Webhook(reg["secret"])
        ids: dict[frozenset, set] = {}
        for headers, body, _code, _rel in got:
            assert contract.verify(headers[contract.SIGNATURE_HEADER], body, reg["secret"], int(time.time()), 600)
            wh.verify(body, headers)  # Standard Webhooks (raises on a mismatch)
            ids.setdefault(frozenset(m["id"] for m in json.loads(body)["messages"]), set()).add(headers["webhook-id"])
            assert headers["X-Lakeq-Subscription"] == sub["id"]
            for m in json.loads(body)["messages"]:
                posts[m["body"]] += 1
                assert m["deliveries"] <= MAX_DELIVERIES
        assert max(posts.values()) <= MAX_DELIVERIES and posts["poison"] == MAX_DELIVERIES
        # webhook-id: one per set of messages, the same on every retry of it
        assert all(len(x) == 1 for x in ids.values()) and len({next(iter(x)) for x in ids.values()}) == len(ids)
        assert any(sum(1 for h, b, *_ in got if h["webhook-id"] == next(iter(x))) > 1 for x in ids.values())
        codes = [c for _h, _b, c, _r in got]
        assert codes[:2] == [0, 500] and any(r for _h, _b, _c, r in got)  # a timeout, a 500, a release
        # nothing left for a pull; the endpoint's state tells what happened
        st.call("POST", f"/v1/subscriptions/{sub['id']}/push/pause", sub_key)  # (no pull beside an active push)
        left = st.call("GET", f"/v1/subscriptions/{sub['id']}/messages", sub_key)
        assert left["messages"] == []
        state = st.call("GET", f"/v1/subscriptions/{sub['id']}/push", sub_key)["state"]
        assert state["delivered"] == len(want) and state["dead_lettered"] == 0  # poison: max_deliveries, not a reject
    finally:
        rx.close()


def test_rate_limit_measured_by_the_receiver(st):
    """rate 4 messages/s, batches of 2: over any stretch of arrivals the receiver counts at most
    rate x its length + one batch (+ JITTER_S of delivery jitter: a batch sent on time whose
    predecessor reached the receiver late arrives closer to it, seen 0.36 s apart of 0.5 s at load
    11), and all 16 take at least (16 - 2) / 4 s."""
    JITTER_S = 0.5
    rate, batch, n = 4, 2, 16
    arrivals: list[tuple[float, int]] = []
    lock = threading.Lock()

    class H(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            with lock:
                arrivals.append((time.monotonic(), len(json.loads(body)["messages"])))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *a):
            pass
    server = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        adm = {"Authorization": f"Bearer {st.admin_key}"}
        tag = uuid.uuid4().hex[:6]
        topic = f"rate-{tag}"
        assert requests.post(st.url + "/v1/topics", json={"name": topic, "queues": 1}, headers=adm,
                             timeout=T).status_code == 201
        feed = requests.post(st.url + "/v1/clients", headers=adm, timeout=T, json={
            "name": f"feed-{tag}", "role": "producer", "topics": [topic]}).json()["api_key"]
        requests.post(st.url + "/v1/clients", headers=adm, timeout=T, json={
            "name": f"hook-{tag}", "role": "consumer", "topics": [topic]}).raise_for_status()
        sub = requests.post(st.url + "/v1/subscriptions", headers=adm, timeout=T, json={
            "subscriber": f"hook-{tag}", "topic": topic}).json()
        r = requests.put(f"{st.url}/v1/subscriptions/{sub['id']}/push", headers=adm, timeout=T, json={
            "url": f"http://127.0.0.1:{server.server_port}/h", "batch_size": batch, "rate": rate})
        assert r.status_code == 201, r.text
        requests.post(f"{st.url}/v1/topics/{topic}/messages", headers={"Authorization": f"Bearer {feed}"},
                      timeout=T, json={"producer": f"feed-{tag}",
                                       "messages": [{"body": f"r{i}"} for i in range(n)]}).raise_for_status()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and sum(c for _t, c in arrivals) < n:
            time.sleep(0.2)
        with lock:
            got = sorted(arrivals)
        assert sum(c for _t, c in got) == n, got
        for i in range(len(got)):
            for j in range(i, len(got)):
                count = sum(c for _t, c in got[i:j + 1])
                assert count <= rate * (got[j][0] - got[i][0] + JITTER_S) + batch, (i, j, got)
        assert got[-1][0] - got[0][0] >= (n - batch) / rate - 0.1
    finally:
        server.shutdown()
        server.server_close()


class GroupReceiver:
    """A consumer group's endpoint: holds each request ``hold_s`` and measures how many are in flight
    at once; answers 500 to the first ``fail`` requests, and releases ``release_me`` the first time
    it arrives (a 200 with per-message outcomes). Records (arrival, bodies, keys, status, released)."""

    def __init__(self, hold_s: float, fail: int, release_me: str | None = None):
        self.got: list[tuple[float, list[str], list[str], int, list[int]]] = []
        self.lock = threading.Lock()
        self.now = self.peak = 0
        outer = self

        class H(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                msgs = json.loads(body)["messages"]
                bodies = [m["body"] for m in msgs]
                with outer.lock:
                    outer.now += 1
                    outer.peak = max(outer.peak, outer.now)
                    released_before = any(release_me in [g[1][i] for i in g[4]] for g in outer.got)
                    answer, rel = b"", []
                    if len(outer.got) < fail:
                        code = 500
                    else:
                        code = 200
                        if release_me in bodies and not released_before:
                            rel = [bodies.index(release_me)]
                            answer = json.dumps({"release": rel}).encode()
                    outer.got.append((time.monotonic(), bodies, [m["key"] for m in msgs], code, rel))
                time.sleep(hold_s)
                with outer.lock:
                    outer.now -= 1
                self.send_response(code)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *a):
                pass
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.server.server_port}/group"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def accepted(self) -> list[tuple[str, str]]:
        """(key, body) of every accepted message, in arrival order."""
        return [(k, b) for _t, bodies, keys, c, rel in sorted(self.got) if c == 200
                for i, (b, k) in enumerate(zip(bodies, keys)) if i not in rel]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize("in_flight", [1, 3])
def test_group_push_in_order_per_key_within_the_in_flight_limit(st, in_flight):
    """A consumer group's endpoint (served by PushFunction's schedule, every 2 s here): every message
    accepted exactly as a group consumer would take them; per key, accepted in produce order (one
    lock per queue, a key's messages in one queue); the receiver never sees more than
    ``max_in_flight`` requests at once (and, with 3, more than one: the queues go in parallel);
    the first requests fail (500) and one message is released once (per-message outcome)."""
    rx = GroupReceiver(hold_s=0.3, fail=2, release_me="k1-2")
    try:
        tag = uuid.uuid4().hex[:6]
        topic, group = f"gpush-{tag}", f"grp-{tag}"
        st.call("POST", "/v1/topics", json={"name": topic, "queues": 4}, status=201)
        feed = st.call("POST", "/v1/clients", json={"name": f"feed-{tag}", "role": "producer", "topics": [topic]},
                       status=201)["api_key"]
        gkey = st.call("POST", "/v1/clients", json={"name": group, "role": "consumer", "topics": [topic]},
                       status=201)["api_key"]
        reg = st.call("PUT", f"/v1/groups/{group}/push", gkey, 201, json={
            "url": rx.url, "topic": topic, "batch_size": 2, "max_in_flight": in_flight, "timeout_ms": 10_000,
            "retry": {"max_attempts": 10, "backoff_base_ms": 100, "backoff_cap_ms": 300}})
        keys, per_key = [f"k{i}" for i in range(8)], 4
        msgs = [{"key": k, "body": f"{k}-{j}"} for j in range(per_key) for k in keys]
        st.call("POST", f"/v1/topics/{topic}/messages", feed,
                json={"producer": f"feed-{tag}", "messages": msgs})
        want = {m["body"] for m in msgs}
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            with rx.lock:
                done = {b for _k, b in rx.accepted()} >= want
            if done:
                break
            time.sleep(0.5)
        with rx.lock:
            acc, got, peak = rx.accepted(), list(rx.got), rx.peak
        assert {b for _k, b in acc} >= want, f"missing {sorted(want - {b for _k, b in acc})}\n{st.stderr[-3000:]}"
        assert [c for _t, _b, _k, c, _r in got][:2] == [500, 500] and any(r for *_x, r in got)
        assert peak <= in_flight, peak
        if in_flight > 1:
            assert peak > 1, "the group's queues were never pushed in parallel"
        for k in keys:  # per key: each accepted, in produce order (the released one after its retry)
            seq = [int(b.split("-")[1]) for kk, b in acc if kk == k]
            # delivery is at-least-once (docs/api.md): a request whose answer reached lakeq after its
            # timeout_ms (a loaded machine) is sent again — the same batch, before anything after it —
            # so order is checked on first acceptances, and a repeat is only of the batch last accepted
            first = list(dict.fromkeys(seq))
            assert sorted(first) == list(range(per_key)), (k, seq)
            if k != "k1":
                assert first == list(range(per_key)), (k, seq)
            for i, x in enumerate(seq):
                assert x not in seq[:i] or x >= max(seq[:i]) - 1, (k, seq)
        for _t, bodies, _k, _c, _r in got:
            assert len(bodies) <= 2
        # nothing left for the group's pulls; the endpoint's state counts it all
        left = st.call("GET", f"/v1/topics/{topic}/messages", gkey, params={"group": group, "max": 100})
        assert left["messages"] == []
        # the counter is written after the endpoint's answer and the ack: the receiver can have seen the
        # last batch a moment before the deliverer recorded it (a stream-triggered and a scheduled run)
        until = time.monotonic() + 15
        while True:
            state = st.call("GET", f"/v1/groups/{group}/push", gkey)["state"]
            if state["delivered"] >= len(want) or time.monotonic() > until:
                break
            time.sleep(0.3)
        assert state["delivered"] == len(want) and reg["secret"], state
    finally:
        rx.close()


def test_standard_webhooks_verifies_every_push_through_a_rotation(st):
    """Issue 30.13: a receiver verifying with the standardwebhooks library (PyPI) only: every push
    verifies under the registered secret; after a rotation with the previous secret kept 10 s, a push
    verifies under both the old and the new secret; after those 10 s, under the new one only."""
    got: list[tuple[dict, bytes]] = []
    lock = threading.Lock()

    class H(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            with lock:
                got.append((dict(self.headers), body))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *a):
            pass
    server = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        tag = uuid.uuid4().hex[:6]
        topic = f"swh-{tag}"
        st.call("POST", "/v1/topics", json={"name": topic, "queues": 1}, status=201)
        feed = st.call("POST", "/v1/clients", json={"name": f"feed-{tag}", "role": "producer", "topics": [topic]},
                       status=201)["api_key"]
        key = st.call("POST", "/v1/clients", json={"name": f"hook-{tag}", "role": "consumer", "topics": [topic]},
                      status=201)["api_key"]
        sub = st.call("POST", "/v1/subscriptions", key, 201, json={"subscriber": f"hook-{tag}", "topic": topic})
        path = f"/v1/subscriptions/{sub['id']}/push"
        old = st.call("PUT", path, key, 201, json={"url": f"http://127.0.0.1:{server.server_port}/hook"})["secret"]

        def push_one(body: str) -> tuple[dict, bytes]:
            st.call("POST", f"/v1/topics/{topic}/messages", feed, json={"producer": f"feed-{tag}",
                                                                        "messages": [{"body": body}]})
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                with lock:
                    mine = [(h, b) for h, b in got if [m["body"] for m in json.loads(b)["messages"]] == [body]]
                if mine:
                    return mine[0]
                time.sleep(0.2)
            raise AssertionError(f"{body} not pushed\n{st.stderr[-3000:]}")

        h, b = push_one("before")
        standardwebhooks.Webhook(old).verify(b, h)
        rotated_at = time.monotonic()
        new = st.call("POST", path + "/secret", key, 200, json={"previous_valid_ms": 10000})["secret"]
        h, b = push_one("during")
        if time.monotonic() - rotated_at < 9:  # (a stalled machine may have let the old one expire)
            standardwebhooks.Webhook(old).verify(b, h)
            assert len(h["webhook-signature"].split(" ")) == 2
        standardwebhooks.Webhook(new).verify(b, h)
        time.sleep(max(0.0, rotated_at + 11 - time.monotonic()))
        h, b = push_one("after")
        standardwebhooks.Webhook(new).verify(b, h)
        with pytest.raises(standardwebhooks.webhooks.WebhookVerificationError):
            standardwebhooks.Webhook(old).verify(b, h)
    finally:
        server.shutdown()
        server.server_close()
