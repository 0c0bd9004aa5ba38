"""The Python client's waiting mode (lakeq_client.ws.Waker, Consumer(wake_url=...)) against fakes."""
from __future__ import annotations

import json
import queue
import threading
import time

from lakeq_client import Consumer
from lakeq_client.ws import Waker, WebSocketError


class FakeWs:
    """A scripted server side: messages put in ``inbox`` are received; sent ones are recorded."""

    instances: list["FakeWs"] = []

    def __init__(self, url, headers=None, subprotocols=None):
        self.url, self.headers, self.subprotocols = url, headers, subprotocols
        self.inbox: queue.Queue = queue.Queue()
        self.sent: list[dict] = []
        self.closed = False
        FakeWs.instances.append(self)

    def send(self, text):
        msg = json.loads(text)
        self.sent.append(msg)
        if msg["action"] == "watch":
            self.inbox.put(json.dumps({"type": "watching", **{k: v for k, v in msg.items() if k != "action"}}))

    def recv(self, timeout=None):
        try:
            m = self.inbox.get(timeout=timeout)
        except queue.Empty:
            return None
        if isinstance(m, Exception):
            raise m
        return m

    def close(self):
        self.closed = True


def _waker(**kw):
    FakeWs.instances = []
    return Waker("ws://x/ws", "k1", {"topic": "t", "group": "g"}, connect=FakeWs, **kw)


def test_waker_watches_and_wakes_only_for_its_topic():
    w = _waker()
    try:
        assert w.ready.wait(30)
        ws = FakeWs.instances[0]
        assert ws.headers == {"Authorization": "Bearer k1"}
        assert ws.sent == [{"action": "watch", "topic": "t", "group": "g"}]
        assert w.wait(30)  # after the watch: one pull for what came before it
        w.arm()
        ws.inbox.put(json.dumps({"type": "wake", "topics": ["other"], "subscriptions": []}))
        assert not w.wait(0.5)
        ws.inbox.put(json.dumps({"type": "wake", "topics": ["other", "t"], "subscriptions": []}))
        assert w.wait(30) and w.stats["wakes"] == 1
    finally:
        w.close()


def test_waker_reconnects_and_asks_for_a_pull_after_a_drop():
    w = _waker()
    try:
        assert w.ready.wait(30)
        w.arm()
        FakeWs.instances[0].inbox.put(WebSocketError("closed by the server (1001 Going away)"))
        assert w.wait(30)  # lost connection: pull once (wake-ups may have been lost)
        deadline = time.monotonic() + 30
        while len(FakeWs.instances) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(FakeWs.instances) == 2 and FakeWs.instances[1].sent[0]["action"] == "watch"
        assert w.stats["connects"] == 2
    finally:
        w.close()


def test_waker_keepalive_pings():
    w = _waker(keepalive_s=0.2)
    try:
        assert w.ready.wait(30)
        deadline = time.monotonic() + 30  # the keep-alive thread's first ping, however slowly it runs
        while not w.stats["pings"] and time.monotonic() < deadline:
            time.sleep(0.02)
        assert {"action": "ping"} in FakeWs.instances[0].sent and w.stats["pings"] >= 1
    finally:
        w.close()


def test_browser_form_when_asked():
    FakeWs.instances = []
    w = Waker("ws://x/ws", "k1", {"subscription": "s1"}, connect=FakeWs, header_auth=False)
    try:
        assert w.ready.wait(30)
        assert FakeWs.instances[0].subprotocols == ["lakeq.v1", "lakeq.key.k1"]
        assert FakeWs.instances[0].sent == [{"action": "watch", "subscription": "s1"}]
    finally:
        w.close()


class FakeConn:
    key = "k1"

    def __init__(self, answers):
        self.answers, self.calls = answers, []

    def call(self, method, path, params=None, **kw):
        self.calls.append(dict(params or {}))
        return self.answers.pop(0) if self.answers else {"messages": []}


def _woken_pull(c, wakes: int, pause: float):
    """``c.wait_pull()`` on a thread while ``wakes`` wake-ups arrive, the k-th ``pause`` s after the
    k-th pull began (the waker is armed before each pull: a wake-up sent earlier would be folded into
    the previous one, as a loaded machine's slow thread made happen). Returns (its batch or None,
    seconds from the last wake-up to its return)."""
    assert c.waker.ready.wait(30)
    done = []
    th = threading.Thread(target=lambda: done.append(c.wait_pull()))
    th.start()
    for k in range(1, wakes + 1):
        deadline = time.monotonic() + 30
        while len(c.conn.calls) < k and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(pause)
        started = time.monotonic()
        FakeWs.instances[-1].inbox.put(json.dumps({"type": "wake", "topics": ["t"], "subscriptions": []}))
    th.join(30)
    return (done[0] if done else None), time.monotonic() - started


def test_wait_pull_pulls_with_wait_ms_0_and_again_when_woken():
    conn = FakeConn([{"messages": []}, {"messages": [{"body": "x", "offset": 0}], "receipt": "r"}])
    c = Consumer(connection=conn, group="g", topic="t", fallback_s=30)
    c.waker = w = _waker()
    try:
        b, after = _woken_pull(c, 1, 0.5)
        assert b is not None and b.messages == [{"body": "x", "offset": 0}]
        assert after < 20  # woken, not the 30-s fallback (however loaded the machine)
        assert all(p["wait_ms"] == 0 for p in conn.calls) and len(conn.calls) >= 2
    finally:
        w.close()


def _unwoken(conn, fallback_s):
    """A waiting consumer whose WebSocket is refused (no wake-up ever comes: only its timer), armed."""
    c = Consumer(connection=conn, group="g", topic="t", fallback_s=fallback_s)
    c.waker = w = Waker("ws://x/ws", "k1", {"topic": "t", "group": "g"},
                        connect=lambda *a, **k: (_ for _ in ()).throw(WebSocketError("refused", 401)),
                        reconnect_max_s=60)
    deadline = time.monotonic() + 30  # the refused connection, however slowly its thread runs
    while w.error is None and time.monotonic() < deadline:
        time.sleep(0.01)
    w.arm()
    return c, w


def test_wait_pull_falls_back_to_a_timer_without_wake_ups():
    conn = FakeConn([{"messages": []}, {"messages": []}, {"messages": [{"body": "y", "offset": 1}], "receipt": "r"}])
    c, w = _unwoken(conn, 0.3)
    try:
        t0 = time.monotonic()
        b = c.wait_pull()
        assert b.messages == [{"body": "y", "offset": 1}] and time.monotonic() - t0 >= 0.3
        assert w.error is not None and w.error.status == 401
    finally:
        w.close()


def test_fallback_pulls_trust_the_hints_but_one_in_five_and_woken_pulls_probe():
    """The first pull and every pull after a wake-up probe the chains; a fallback pull (the timer,
    no wake-up) sends ``probe=false`` except every FALLBACK_PROBE_EVERY-th since the last wake-up."""
    from lakeq_client.client import FALLBACK_PROBE_EVERY

    n = 2 * FALLBACK_PROBE_EVERY + 1
    conn = FakeConn([{"messages": []}] * n + [{"messages": [{"body": "z", "offset": 2}], "receipt": "r"}])
    c, w = _unwoken(conn, 0.01)
    try:
        assert c.wait_pull().messages == [{"body": "z", "offset": 2}]
        probes = ["probe" not in p for p in conn.calls]
        assert probes[0]  # the first pull
        # then fallbacks 1..n: a probe at every FALLBACK_PROBE_EVERY-th
        assert probes[1:] == [k % FALLBACK_PROBE_EVERY == 0 for k in range(1, n + 1)]
        assert all(p.get("probe", "false") == "false" for p in conn.calls)
    finally:
        w.close()
    # a wake-up: the next pull probes, and the count of fallbacks starts again
    conn = FakeConn([{"messages": []}, {"messages": []}, {"messages": [{"body": "w", "offset": 3}], "receipt": "r"}])
    c = Consumer(connection=conn, group="g", topic="t", fallback_s=30)
    c._fallbacks = 3
    c.waker = w = _waker()
    try:
        b, _ = _woken_pull(c, 2, 0.3)
        assert b is not None and b.messages == [{"body": "w", "offset": 3}]
        assert all("probe" not in p for p in conn.calls) and c._fallbacks == 0
    finally:
        w.close()
