"""WebSocket wake-ups end to end on the local stack: a waiting consumer (Consumer(wake_url=...)) is
woken for each new message without a long poll (long before its 60-s fallback pull); a wake-up lost
on purpose still delivers by the client's fallback pull; a refused key or watch stores nothing.

How soon after its produce a woken consumer has the message is a latency, which depends on the
machine's load: its bound (within 1 s) is measured by ``bench/idle.py`` ("produce -> delivery",
the WebSocket wake-up row); these tests keep limits that no loaded run reaches."""
from __future__ import annotations

import json
import re
import threading
import time
import uuid

import pytest
import requests
from lakeq_client import Consumer
from lakeq_client.ws import WebSocket, WebSocketError

pytestmark = pytest.mark.e2e


@pytest.fixture
def wake(stack):
    stack.printed("WebSocket wake-ups: ws://")
    m = re.search(r"WebSocket wake-ups: (ws://\S+)", stack.output)
    assert m, stack.output
    url = m.group(1)
    mgmt = url.replace("ws://", "http://").rsplit("/", 1)[0]
    tag = uuid.uuid4().hex[:8]
    s = requests.Session()
    s.headers["Authorization"] = f"Bearer {stack.admin_key}"
    topic = f"w{tag}"
    assert s.post(f"{stack.url}/v1/topics", json={"name": topic, "queues": 4}).status_code == 201
    prod = s.post(f"{stack.url}/v1/clients", json={"name": f"p{tag}", "role": "producer", "topics": [topic]}).json()
    cons = s.post(f"{stack.url}/v1/clients", json={"name": f"g{tag}", "role": "consumer", "topics": [topic]}).json()
    yield {"url": url, "mgmt": mgmt, "api": stack.url, "topic": topic, "pkey": prod["api_key"],
           "producer": prod["name"], "group": cons["name"], "ckey": cons["api_key"], "admin": s}
    requests.post(f"{mgmt}/_local/ws/drop", params={"count": 0}, timeout=5)


def _consume(cons, got, stop):
    for b in cons.batches(stop):
        now = time.monotonic()
        for m in b.messages:
            got[m["body"]] = now
        b.settle()


def _produce(w, body):
    r = requests.post(f"{w['api']}/v1/topics/{w['topic']}/messages", json={"producer": w["producer"],
                      "messages": [{"body": body}]}, headers={"Authorization": f"Bearer {w['pkey']}"}, timeout=30)
    assert r.status_code == 200, r.text


def _await(got, key, timeout):
    deadline = time.monotonic() + timeout
    while key not in got and time.monotonic() < deadline:
        time.sleep(0.01)
    return key in got


def test_a_waiting_consumer_is_woken_for_each_new_message(wake):
    """Each produce, made while the consumer waits, brings it a wake-up (and the message, long
    before its 60-s fallback pull).

    The notifier reads SegmentsTable's stream: it posts ONE wake-up per connection per stream
    batch, however many produces the batch holds (``lakeq.wake.plan.coalesce``), and a consumer
    that pulls anyway (its first pull, the pull after each batch) gets a message without waiting
    for its wake-up. So the test counts wake-ups per produce, not at the last delivery: before
    each produce the previous one's wake-up has arrived (its stream batch is done: the next
    produce is in a later batch), and after it one more wake-up must arrive. Counting only at the
    end failed on a loaded machine: the notifier's cold first invocation (8 s) took the warm-up's,
    m0's and m1's records in one batch (one wake-up for three produces) while the consumer's own
    pulls delivered warm-up and m0 — every message on time, 4 wake-ups for 6 produces."""
    cons = Consumer(wake["api"], wake["ckey"], group=wake["group"], topic=wake["topic"], wake_url=wake["url"],
                    fallback_s=60)
    got: dict[str, float] = {}
    stop = threading.Event()
    t = threading.Thread(target=_consume, args=(cons, got, stop), daemon=True)
    try:
        assert cons.waker.ready.wait(60), cons.waker.error
        t.start()
        _produce(wake, "warm-up")  # warm workers (the notifier's, the pull's)
        assert _await(got, "warm-up", 45)
        assert _await_wakes(cons, 1, 45), "no wake-up for the warm-up in 45 s"
        lat = []
        for i in range(5):
            before = cons.waker.stats["wakes"]
            sent = time.monotonic()
            _produce(wake, f"m{i}")
            # well inside the 60-s fallback: a wake-up delivered it (the 1-s bound: bench/idle.py)
            assert _await(got, f"m{i}", 45), f"m{i} not delivered in 45 s (fallback is 60 s)"
            lat.append(got[f"m{i}"] - sent)
            assert _await_wakes(cons, before + 1, 45), f"no wake-up for m{i} in 45 s"
        print("\nwake e2e: s from produce to delivery:", [round(x, 3) for x in lat], cons.waker.stats)
        assert cons.waker.stats["errors"] == 0 and cons.waker.stats["connects"] == 1  # no reconnection pull
    finally:
        stop.set()
        cons.waker.close()
        t.join(10)


def _await_wakes(cons, n, timeout):
    deadline = time.monotonic() + timeout
    while cons.waker.stats["wakes"] < n and time.monotonic() < deadline:
        time.sleep(0.01)
    return cons.waker.stats["wakes"] >= n


def test_a_dropped_wake_up_still_delivers_by_the_fallback(wake):
    cons = Consumer(wake["api"], wake["ckey"], group=wake["group"], topic=wake["topic"], wake_url=wake["url"],
                    fallback_s=3)
    got: dict[str, float] = {}
    stop = threading.Event()
    t = threading.Thread(target=_consume, args=(cons, got, stop), daemon=True)
    try:
        assert cons.waker.ready.wait(60), cons.waker.error
        t.start()
        time.sleep(0.5)  # the first pull (after the watch) is done: the consumer waits (if not, it
        # delivers the message itself, still without a wake-up)
        assert requests.post(f"{wake['mgmt']}/_local/ws/drop", params={"count": 1000}, timeout=5).ok
        wakes = cons.waker.stats["wakes"]
        _produce(wake, "lost-wake")
        assert _await(got, "lost-wake", 60), "not delivered by the fallback pull (every 3 s)"
        assert cons.waker.stats["wakes"] == wakes  # no wake-up arrived: the fallback pull delivered it
    finally:
        stop.set()
        cons.waker.close()
        t.join(10)


def test_refused_key_and_refused_watch(wake):
    with pytest.raises(WebSocketError) as e:
        WebSocket(wake["url"], headers={"Authorization": "Bearer lq_wrong"})
    assert e.value.status == 401 and json.loads(e.value.body)["error"]["code"] == "unauthorized"
    # the browser form of the key works; the producer's key may not watch as the group
    ws = WebSocket(wake["url"], subprotocols=["lakeq.v1", f"lakeq.key.{wake['pkey']}"])
    try:
        assert ws.subprotocol == "lakeq.v1"
        ws.send(json.dumps({"action": "watch", "topic": wake["topic"], "group": wake["group"]}))
        reply = json.loads(ws.recv(timeout=30))
        assert (reply["type"], reply["status"], reply["error"]["code"]) == ("error", 403, "forbidden")
        ws.send('{"action":"ping"}')
        assert json.loads(ws.recv(timeout=30)) == {"type": "pong"}
        assert _connection_items(wake, wake["producer"]) == 1  # stored at $connect (the refused watch: nothing)
    finally:
        ws.close()
    deadline = time.monotonic() + 60  # the local gateway sends $disconnect: the item goes
    while _connection_items(wake, wake["producer"]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _connection_items(wake, wake["producer"]) == 0


def _connection_items(wake, client):
    """WatchersTable's items of ``client``'s connections, read from the stack's moto."""
    import boto3

    info = requests.get(f"{wake['api']}/_local/info", timeout=10).json()
    ddb = boto3.client("dynamodb", endpoint_url=info["aws_endpoint_url"], region_name=info["region"],
                       aws_access_key_id="testing", aws_secret_access_key="testing")
    items = ddb.scan(TableName=info["environment"]["WATCHERS_TABLE"], ConsistentRead=True)["Items"]
    return sum(1 for i in items if i.get("client", {}).get("S") == client)


def test_cli_follows_on_wake_ups(wake):
    """`lakeq tail <topic> --group g --follow --wake-url <url>` waits on the WebSocket (its fallback,
    60 s, is far beyond this test's bound) and prints the message produced meanwhile."""
    import os
    import subprocess
    import sys

    import lakeq_client

    env = dict(os.environ, LAKEQ_URL=wake["api"], LAKEQ_KEY=wake["ckey"],
               PYTHONPATH=os.pathsep.join([os.path.dirname(os.path.dirname(lakeq_client.__file__)),
                                           os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen([sys.executable, "-m", "lakeq_client.cli", "tail", wake["topic"], "--group",
                             wake["group"], "--follow", "--count", "1", "--wake-url", wake["url"]],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        time.sleep(3)  # connected, watching, first pull done: the CLI waits
        assert proc.poll() is None, proc.stderr.read()
        _produce(wake, "via-cli")
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert [json.loads(line)["body"] for line in out.splitlines()] == ["via-cli"]
