"""The cost of waiting (issue 16): one consumer that long-polls an empty topic around the clock,
priced per month from COUNTED store calls and invocation durations, next to SQS and Pub/Sub.

What runs (all in this process): moto in-process (``mock_aws``) with the tables of
``template.yaml``; lakeq's real Lambda handlers called with API Gateway events (``tests/handlers.py``
``Api``; the SQS endpoint through boto3's real ``sqs`` client wired into the SqsFunction handler,
``tests/integration/sqs_harness.py``, whose SigV4 seam maps the access key id to a principal: the
signature check and its key derivation are not exercised). Every DynamoDB call is counted with the
botocore hooks of ``bench/queue.py`` (``Meter``); request units come from the items' sizes
(moto is not size-aware): strongly consistent reads 1 RRU per 4 KB, eventually consistent 0.5,
BatchGetItem per item, Query on the sum of the items returned.

The clock: ``lakeq.common.clock.now`` is a fake clock, and the long poll's ``time.sleep``
(``lakeq.consume.reader.time``) advances it instead of sleeping, so a 20-s poll runs in a fraction of a
second with exactly the rounds the code schedules in 20 s (50, 100, 200, 400, then 500 ms apart).
On AWS each round also takes the store calls' own latency (a few ms), so a real 20-s poll makes
at most as many rounds as counted here: the figures are an upper bound on rounds by that margin
(≈ 1 %). A poll's billed Lambda duration is the fake time it waited (the handler returns at the
deadline), at the function's MemorySize and architecture from ``template.yaml``.

A consumer-month is 30 days of back-to-back polls (2,592,000 s / the poll's duration).

The WebSocket consumer (issue 16 item 2, ``lakeq_client.Consumer(wake_url=...)``): no Lambda waits;
its month is priced from what it does while idle — connection-minutes, one keep-alive
``{"action":"ping"}`` (message in, ``pong`` out, one WakeFunction invocation) every ``keepalive_s``,
a reconnection every 2 hours (API Gateway's maximum: ``$connect``, ``watch``, ``$disconnect``
invocations and one catch-up pull), and a fallback pull with ``wait_ms=0`` every ``fallback_s``
(as the client makes them: one in ``FALLBACK_PROBE_EVERY`` probes the queues' chains, the others
trust the head hints, ``probe=false``; both kinds measured).
Each of those is run here on moto through the real handlers and its DynamoDB calls counted; its
billed duration is its measured wall time in this process (moto in-process included, so an upper
bound for the store calls' share), rounded up to the next ms. API Gateway WebSocket prices:
$1.00 per million messages (32-KB units, both directions), $0.25 per million connection-minutes.

    python bench/idle.py [--quick]
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time
import types
from collections import Counter
from pathlib import Path

import _local  # noqa: E402  (bench/_local.py: this folder is still on sys.path here)

_local.in_process(Path(__file__).resolve().parents[1] / "clients" / "python")
ROOT = _local.ROOT

from lakeq_client.client import FALLBACK_PROBE_EVERY  # noqa: E402  (the client's fallback pulls)

from infra.local import template as tpl  # noqa: E402

bq = _local.bench_queue()
PRICE_WRU, PRICE_RRU = bq.PRICE_WRU, bq.PRICE_RRU
PRICE_SQS_REQUEST = bq.PRICE_SQS_REQUEST            # $0.40 per million (first 1M free ignored)
PRICE_HTTP_API_REQUEST = bq.PRICE_HTTP_API_REQUEST  # $1.00 per million
PRICE_LAMBDA_REQUEST = bq.PRICE_LAMBDA_REQUEST      # $0.20 per million
PRICE_LAMBDA_GBS = {"arm64": bq.PRICE_LAMBDA_GBS_ARM}  # template.yaml's functions are all arm64
# Google Cloud Pub/Sub (https://cloud.google.com/pubsub/pricing, as we know it; not re-read from this
# machine): message delivery throughput $40 per TiB, first 10 GiB a month free (ignored here), and a
# minimum of 1,000 bytes billed per publish, push or pull request (our reading of that page). Assumption: an empty unary
# Pull that waits is billed that 1 KB minimum (upper bound); a StreamingPull stream that delivers
# nothing bills no throughput (lower bound: $0).
PRICE_WS_MESSAGE = 1.00 / 1e6  # API Gateway WebSocket: per message (32-KB units), in or out
PRICE_WS_CONNECTION_MINUTE = 0.25 / 1e6
PRICE_PUBSUB_TIB = 40.0
PUBSUB_MIN_BYTES = 1000
MONTH_S = 30 * 86400
WAIT_MS = 20_000


def function_config(logical_id: str) -> tuple[int, str]:
    """(MemorySize MB, architecture) of a function in template.yaml (Globals when not set)."""
    import yaml

    class Loader(yaml.SafeLoader):
        pass
    Loader.add_multi_constructor("!", lambda loader, suffix, node: None)
    doc = yaml.load((ROOT / "template.yaml").read_text(), Loader=Loader)
    glob = doc["Globals"]["Function"]
    props = doc["Resources"][logical_id]["Properties"]
    mem = int(props.get("MemorySize") or glob["MemorySize"])
    arch = (props.get("Architectures") or glob.get("Architectures") or ["x86_64"])[0]
    return mem, arch


class FakeClock:
    def __init__(self, t: int = 1_800_000_000_000):
        self.t = t

    def __call__(self) -> int:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += max(1, int(round(s * 1000)))
        self.sleeps += 1

    sleeps = 0


def setup_aws():
    """moto with template.yaml's tables, buckets, queues and secrets (as tests/conftest.py's ``aws``)."""
    import boto3
    from moto import mock_aws

    mock = mock_aws()
    mock.start()
    template = tpl.load_template()
    tpl.create_tables(boto3.client("dynamodb", region_name="us-east-1"), template, tpl.LOCAL_STACK)
    tpl.create_secrets(boto3.client("secretsmanager", region_name="us-east-1"), template, tpl.LOCAL_STACK)
    tpl.create_buckets(boto3.client("s3", region_name="us-east-1"), template, tpl.LOCAL_STACK)
    tpl.create_queues(boto3.client("sqs", region_name="us-east-1"), template, tpl.LOCAL_STACK)
    return mock


def measure(meter, clock: FakeClock, polls: int, poll) -> dict:
    """``polls`` idle long polls through ``poll()`` (which must return no message): counted calls,
    request units, fake time waited, wall time, sleeps (= rounds - 1) per poll."""
    meter.reset()
    t_fake, s0, w0 = clock.t, clock.sleeps, time.perf_counter()
    for _ in range(polls):
        got = poll()
        assert not got, f"an idle poll returned messages: {got!r}"
    wall = time.perf_counter() - w0
    calls, wru, rru = meter.snapshot()
    ddb = Counter({k.split(".", 1)[1]: v for k, v in calls.items() if k.startswith("dynamodb.")})
    other = Counter({k: v for k, v in calls.items() if not k.startswith("dynamodb.") and not k.startswith("sqs.")})
    return {"polls": polls, "ddb": ddb, "other": other, "wru": wru / polls, "rru": rru / polls,
            "wait_ms": (clock.t - t_fake) / polls, "rounds": (clock.sleeps - s0) / polls + 1,
            "wall_ms": wall * 1000 / polls}


def price_month(r: dict, mem_mb: int, arch: str) -> dict:
    polls = MONTH_S * 1000 / r["wait_ms"]
    ddb = polls * (r["rru"] * PRICE_RRU + r["wru"] * PRICE_WRU)
    gbs = mem_mb / 1024 * r["wait_ms"] / 1000
    duration = polls * gbs * PRICE_LAMBDA_GBS[arch]
    requests = polls * (PRICE_LAMBDA_REQUEST + PRICE_HTTP_API_REQUEST)
    sqs_polls = MONTH_S / 20  # one ReceiveMessage (WaitTimeSeconds=20) per 20 s
    sqs = sqs_polls * PRICE_SQS_REQUEST
    pubsub = sqs_polls * PUBSUB_MIN_BYTES / 2 ** 40 * PRICE_PUBSUB_TIB
    total = ddb + duration + requests
    return {"polls": polls, "ddb": ddb, "duration": duration, "requests": requests, "total": total,
            "gbs": gbs, "sqs": sqs, "pubsub": pubsub, "x_sqs": total / sqs}


# --- the WebSocket consumer (issue 16 item 2) -----------------------------------------------------
def measure_ws(meter, api, key: str, topic: str, group: str, reps: int) -> dict:
    """The idle WebSocket consumer's parts, each run ``reps`` times through the real handlers:
    a connection's lifecycle ($connect, watch, $disconnect), a keep-alive ping, a fallback pull
    (wait_ms=0, nothing to serve). Counted DynamoDB calls / RRU / WRU and wall ms per part."""
    import json as _json

    from tests.handlers import Context, load_function

    ws = load_function("WakeFunction")

    def route(name, conn, body=None, headers=None):
        ev = {"requestContext": {"routeKey": name, "connectionId": conn}, "isBase64Encoded": False}
        if headers is not None:
            ev["headers"] = headers
        if body is not None:
            ev["body"] = _json.dumps(body)
        r = ws(ev, Context())
        assert r["statusCode"] == 200, r
        return r

    def part(fn) -> dict:
        meter.reset()
        walls = []
        for i in range(reps):
            t0 = time.perf_counter()
            fn(i)
            walls.append((time.perf_counter() - t0) * 1000)
        calls, wru, rru = meter.snapshot()
        ddb = Counter({k.split(".", 1)[1]: v / reps for k, v in calls.items() if k.startswith("dynamodb.")})
        return {"ddb": ddb, "rru": rru / reps, "wru": wru / reps, "wall_ms": sorted(walls)[len(walls) // 2]}

    hdr = {"Authorization": f"Bearer {key}"}
    route("$connect", "warm", headers=hdr)  # warm the container's caches (key, topic, client)
    route("watch", "warm", body={"action": "watch", "topic": topic, "group": group})
    route("$disconnect", "warm")
    out = {
        "connect": part(lambda i: route("$connect", f"c{i}", headers=hdr)),
        "watch": part(lambda i: route("watch", f"c{i}", body={"action": "watch", "topic": topic, "group": group})),
        "disconnect": part(lambda i: route("$disconnect", f"c{i}")),
        "ping": part(lambda i: route("ping", "p", body={"action": "ping"})),
    }

    # the notifier, per stream batch that touches the watched topic (one watcher: the connection
    # c0 above watches it); posts go to a counting stand-in for the management API
    nf = load_function("NotifyFunction")
    posted = []
    nf.module._post = lambda conn, data: posted.append((conn, data)) or "ok"
    route("$connect", "n0", headers=hdr)
    route("watch", "n0", body={"action": "watch", "topic": topic, "group": group})
    recs = {"Records": [{"eventName": "INSERT", "dynamodb": {"Keys": {"pq": {"S": f"{topic}#{q}"},
                                                                      "base": {"N": "0"}}}} for q in range(4)]}
    out["notify"] = part(lambda i: nf(recs, Context()))
    out["notify"]["posts"] = len(posted) / reps
    out["notify"]["bytes"] = max(len(d) for _, d in posted)

    def fallback(i, probe=True):
        q = {"group": group, "wait_ms": 0} if probe else {"group": group, "wait_ms": 0, "probe": "false"}
        s, b = api.call("GET", f"/v1/topics/{topic}/messages", query=q, key=key)
        assert s == 200 and not b["messages"], (s, b)
    fallback(0)
    out["pull"] = part(fallback)
    # the client's fallback pulls trust the head hints but one in FALLBACK_PROBE_EVERY (probe=false)
    out["pull hints"] = part(lambda i: fallback(i, probe=False))
    return out


def price_ws(parts: dict, mem_mb: int, arch: str, fallback_s: float, keepalive_s: float,
             connection_s: float = 7200.0) -> dict:
    """One WebSocket-waiting consumer-month from the measured parts (see the docstring)."""
    gb = mem_mb / 1024

    def lam(p, n):  # n invocations of part p: DynamoDB + Lambda request + duration (ms, rounded up)
        ddb = n * (p["rru"] * PRICE_RRU + p["wru"] * PRICE_WRU)
        dur = n * gb * (int(p["wall_ms"]) + 1) / 1000 * PRICE_LAMBDA_GBS[arch]
        return ddb, n * PRICE_LAMBDA_REQUEST, dur

    connects = MONTH_S / connection_s
    pings = MONTH_S / keepalive_s
    timer = MONTH_S / fallback_s
    # the timer's pulls, one in FALLBACK_PROBE_EVERY probing (the client's wait_pull), plus one
    # catch-up pull per (re)connection, probing
    probing = timer / FALLBACK_PROBE_EVERY + connects
    hinted = timer - timer / FALLBACK_PROBE_EVERY
    pulls = probing + hinted
    rows = {}
    for name, p, n in (("connect", parts["connect"], connects), ("watch", parts["watch"], connects),
                       ("disconnect", parts["disconnect"], connects), ("ping", parts["ping"], pings)):
        rows[name] = lam(p, n)
    ddb, lreq, dur = (a + b for a, b in zip(lam(parts["pull"], probing), lam(parts["pull hints"], hinted)))
    rows["pull"] = (ddb, lreq + pulls * PRICE_HTTP_API_REQUEST, dur)
    # WebSocket messages: ping + pong, watch + its answer; connection-minutes
    ws_msgs = 2 * pings + 2 * connects
    ws = ws_msgs * PRICE_WS_MESSAGE + MONTH_S / 60 * PRICE_WS_CONNECTION_MINUTE
    ddb = sum(r[0] for r in rows.values())
    requests = sum(r[1] for r in rows.values())
    duration = sum(r[2] for r in rows.values())
    total = ddb + requests + duration + ws
    sqs = MONTH_S / 20 * PRICE_SQS_REQUEST
    return {"ddb": ddb, "requests": requests, "duration": duration, "ws": ws, "total": total, "sqs": sqs,
            "x_sqs": total / sqs, "pulls": pulls, "pings": pings, "connects": connects, "ws_msgs": ws_msgs,
            "pull_share": sum(rows["pull"]) / total}


# --- latency from produce to delivery for a waiting consumer -------------------------------------
def start_local_stack(admin_key: str):
    """``python -m infra.local --port <free port> --ws-port <free port>`` as tests/e2e/conftest.py's
    start_stack does; returns (process, HTTP URL, WebSocket URL)."""
    import subprocess

    import requests

    from infra.local.__main__ import free_port

    port, ws_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("AWS_ENDPOINT_URL", "AWS_PROFILE")}
    env.update({"LAKEQ_ADMIN_KEY": admin_key, "LAKEQ_PORT": str(port), "PYTHONUNBUFFERED": "1"})
    log = open(f"/tmp/lakeq-bench-idle-stack-{port}.log", "w")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "clients" / "python"), env.get("PYTHONPATH", "")])
    proc = subprocess.Popen([sys.executable, "-m", "infra.local", "--port", str(port), "--ws-port", str(ws_port)],
                            cwd=ROOT, env=env,
                            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        try:
            if requests.get(f"{url}/v1/health", timeout=5).status_code == 200:
                return proc, url, f"ws://127.0.0.1:{ws_port}/ws"
        except requests.RequestException:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.terminate()
            raise RuntimeError(f"the local stack did not start: see {log.name}")
        time.sleep(0.2)


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, int(round(q / 100 * len(xs) + 0.5)) - 1))]


def latency_run(n: int, produce, receive, seed: int) -> tuple[list[float], list[float]]:
    """One consumer thread long-polls (``receive()`` -> list of bodies) while this thread sends ``n``
    messages one at a time (``produce(body)``) at random intervals of 0.2-1.0 s; latency = from
    just before the produce request to the moment the poll returning it came back. A first message
    (not counted) warms both sides. Returns (latencies, the produce requests' own durations), ms."""
    import random
    import threading

    rng = random.Random(seed)
    sent: dict[str, float] = {}
    got: dict[str, float] = {}
    took: list[float] = []
    stop = time.monotonic() + 30 + 2 * n

    def consumer():
        while len(got) < n + 1 and time.monotonic() < stop:
            for body in receive():
                got.setdefault(body, time.perf_counter())
    t = threading.Thread(target=consumer, daemon=True)
    t.start()
    for i in range(n + 1):
        time.sleep(rng.uniform(0.2, 1.0) if i else 1.0)
        body = f"m{i}"
        sent[body] = time.perf_counter()
        produce(body)
        if i:
            took.append((time.perf_counter() - sent[body]) * 1000)
    t.join(timeout=max(1.0, stop - time.monotonic()))
    missing = [b for b in sent if b not in got]
    assert not missing, f"not delivered: {missing}"
    return [(got[b] - sent[b]) * 1000 for b in sent if b != "m0"], took


def delayed_run(url: str, hdr: dict, n: int, seed: int) -> dict:
    """Delayed delivery (``delay_ms``) to a waiting consumer — the latency bound that
    ``tests/e2e/test_delayed_e2e.py`` leaves to this bench (the test keeps "never before
    ``deliver_at``" and a generous limit): one consumer long-polls ``wait_ms=20000`` a topic of its
    own while one producer sends single messages with a random delay of 0.5-3 s at random
    intervals of 0.2-1.0 s; lateness = the wall-clock ms at which the consumer's response carrying a
    message came back minus that message's ``deliver_at`` (the stack runs on this machine's clock).
    Bound: within 1 s after ``deliver_at``, never before it."""
    import random
    import threading

    import requests

    rng = random.Random(seed)
    requests.post(f"{url}/v1/topics", json={"name": "dly", "queues": 4}, headers=hdr).raise_for_status()
    prod = requests.post(f"{url}/v1/clients", json={"name": "dp", "role": "producer", "topics": ["dly"]},
                         headers=hdr).json()["api_key"]
    cons = requests.post(f"{url}/v1/clients", json={"name": "dc", "role": "consumer", "topics": ["dly"]},
                         headers=hdr).json()["api_key"]
    ps, cs = requests.Session(), requests.Session()
    due: dict[str, int] = {}
    got: dict[str, float] = {}
    stop = time.monotonic() + 60 + 3 * n

    def consumer():
        receipt = None
        while len(got) < n and time.monotonic() < stop:
            q = {"group": "dc", "wait_ms": 20000, "max": 10, **({"ack": receipt} if receipt else {})}
            r = cs.get(f"{url}/v1/topics/dly/messages", params=q, headers={"Authorization": f"Bearer {cons}"},
                       timeout=40)
            at = time.time() * 1000
            r.raise_for_status()
            b = r.json()
            receipt = b["receipt"]
            for m in b["messages"]:
                got.setdefault(m["id"], at)
    t = threading.Thread(target=consumer, daemon=True)
    t.start()
    time.sleep(1.0)  # the consumer is waiting before the first message
    for i in range(n):
        time.sleep(rng.uniform(0.2, 1.0))
        r = ps.post(f"{url}/v1/topics/dly/messages", headers={"Authorization": f"Bearer {prod}"}, timeout=30,
                    json={"producer": "dp", "messages": [{"id": f"d{i}", "body": "x",
                                                          "delay_ms": rng.randint(500, 3000)}]})
        r.raise_for_status()
        (res,) = r.json()["results"]
        due[res["id"]] = res["deliver_at"]
    t.join(timeout=max(1.0, stop - time.monotonic()))
    missing = [m for m in due if m not in got]
    assert not missing, f"not delivered: {missing}"
    late = [got[m] - due[m] for m in due]
    return {"late": late, "early": sum(1 for x in late if x < 0), "within_1s": sum(1 for x in late if 0 <= x <= 1000)}


def latency(n: int):
    import boto3
    import requests

    admin = "bench-idle-admin"
    proc, url, ws_url = start_local_stack(admin)
    sqs_proc, sqs_url = bq.start_sqs_server()
    try:
        hdr = {"Authorization": f"Bearer {admin}"}
        requests.post(f"{url}/v1/topics", json={"name": "lat", "queues": 4}, headers=hdr).raise_for_status()
        prod = requests.post(f"{url}/v1/clients", json={"name": "lp", "role": "producer", "topics": ["lat"]},
                             headers=hdr).json()["api_key"]
        cons = requests.post(f"{url}/v1/clients", json={"name": "lc", "role": "consumer", "topics": ["lat"]},
                             headers=hdr).json()["api_key"]
        ps, cs = requests.Session(), requests.Session()
        receipt = [None]

        def produce(body):
            ps.post(f"{url}/v1/topics/lat/messages", json={"producer": "lp", "messages": [{"body": body}]},
                    headers={"Authorization": f"Bearer {prod}"}, timeout=30).raise_for_status()

        def receive():
            q = {"group": "lc", "wait_ms": 20000, "max": 10}
            if receipt[0]:
                q["ack"] = receipt[0]
            r = cs.get(f"{url}/v1/topics/lat/messages", params=q, headers={"Authorization": f"Bearer {cons}"},
                       timeout=40)
            r.raise_for_status()
            b = r.json()
            receipt[0] = b["receipt"]
            return [m["body"] for m in b["messages"]]
        lq = latency_run(n, produce, receive, seed=1)
        dl = delayed_run(url, hdr, n, seed=1)

        # the same, waiting on WebSocket wake-ups (a second group: same topic, its own offsets)
        from lakeq_client import Consumer

        wkey = requests.post(f"{url}/v1/clients", json={"name": "lw", "role": "consumer", "topics": ["lat"]},
                             headers=hdr).json()["api_key"]
        wc = Consumer(url, wkey, group="lw", topic="lat", wake_url=ws_url, max=10, fallback_s=60)
        assert wc.waker.ready.wait(60), wc.waker.error
        while True:  # the group starts at the topic's beginning: take the long-poll run's messages
            b = wc.pull(wait_ms=0)
            if not b.messages:
                break
            wc.ack(b)

        def ws_receive():
            b = wc.wait_pull(max=10)
            b.settle()
            return [m["body"] for m in b.messages]
        lw = latency_run(n, produce, ws_receive, seed=1)
        wc.waker.close()

        sqs = boto3.client("sqs", endpoint_url=sqs_url, region_name="us-east-1")
        sqs_recv = boto3.client("sqs", endpoint_url=sqs_url, region_name="us-east-1",
                                config=__import__("botocore.config").config.Config(read_timeout=40))
        qurl = sqs.create_queue(QueueName="lat")["QueueUrl"]

        def sqs_produce(body):
            sqs.send_message(QueueUrl=qurl, MessageBody=body)

        def sqs_receive():
            msgs = sqs_recv.receive_message(QueueUrl=qurl, MaxNumberOfMessages=10,
                                            WaitTimeSeconds=20).get("Messages", [])
            if msgs:
                sqs_recv.delete_message_batch(QueueUrl=qurl, Entries=[
                    {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(msgs)])
            return [m["Body"] for m in msgs]
        sq = latency_run(n, sqs_produce, sqs_receive, seed=1)
    finally:
        proc.terminate()
        sqs_proc.terminate()
        for p in (proc, sqs_proc):
            try:
                p.wait(timeout=20)
            except Exception:
                p.kill()
    return lq, sq, lw, dl


def print_latency(lq, lq_prod, sq, sq_prod, lw, lw_prod) -> None:
    """The produce -> delivery table; for the long poll also each sample's time from the produce's
    answer (issue 33's bound: every message within 1 s of it)."""
    print()
    print(f"## produce -> delivery for a waiting consumer (ms; {len(lq)} messages each side, one at a time "
          "at random 0.2-1.0 s intervals; local stack vs SQS on moto's server; under 100 samples p99 = the max)")
    print(f"{'':<30} {'p50':>7} {'p99':>7} {'max':>7} {'mean':>7} {'produce req p50':>16}")
    for name, xs, ps in (("lakeq pull wait_ms=20000", lq, lq_prod), ("lakeq WebSocket wake-up", lw, lw_prod),
                         ("SQS-on-moto WaitTimeSeconds=20", sq, sq_prod)):
        print(f"{name:<30} {pct(xs, 50):>7.0f} {pct(xs, 99):>7.0f} {max(xs):>7.0f} {sum(xs) / len(xs):>7.0f} "
              f"{pct(ps, 50):>16.0f}")
    for name, xs in (("ratio long poll / SQS-on-moto", lq), ("ratio WebSocket / SQS-on-moto", lw)):
        print(f"{name:<30} {pct(xs, 50) / pct(sq, 50):>7.2f} {pct(xs, 99) / pct(sq, 99):>7.2f} "
              f"{max(xs) / max(sq):>7.2f} {sum(xs) / sum(sq):>7.2f}")
    print(f"WebSocket wake-ups within 1 s: {sum(1 for x in lw if x <= 1000)} of {len(lw)}")
    ans = [x - p for x, p in zip(lq, lq_prod)]  # (same order: one produce request per sample)
    print(f"long poll within 1 s: {sum(1 for x in lq if x <= 1000)} of {len(lq)} from before the produce request, "
          f"{sum(1 for x in ans if x <= 1000)} of {len(ans)} from its answer (p50 / max from the answer: "
          f"{pct(ans, 50):.0f} / {max(ans):.0f} ms)")
    print("long poll samples, ms from before the produce request (in order): "
          + " ".join(f"{x:.0f}" for x in lq))


def print_delayed(dl: dict) -> None:
    xs = dl["late"]
    print()
    print(f"## delayed delivery to a waiting consumer (ms after deliver_at; {len(xs)} messages, delay_ms 500-3000, "
          "one long-polling consumer wait_ms=20000; bound: never before deliver_at, within 1 s after)")
    print(f"{'':<30} {'min':>7} {'p50':>7} {'p99':>7} {'max':>7}")
    print(f"{'lakeq delay_ms, long poll':<30} {min(xs):>7.0f} {pct(xs, 50):>7.0f} {pct(xs, 99):>7.0f} {max(xs):>7.0f}")
    print(f"delayed messages before deliver_at: {dl['early']} of {len(xs)} (must be 0); "
          f"within 1 s after: {dl['within_1s']} of {len(xs)}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer polls per scenario (under a minute)")
    ap.add_argument("--samples", type=int, default=None,
                    help="latency samples a side (default: 10 with --quick, else 60)")
    ap.add_argument("--latency-only", action="store_true",
                    help="only the latency parts (local stack and SQS on moto's server), nothing counted")
    args = ap.parse_args()
    polls = 1 if args.quick else 10
    if args.latency_only:
        (lq, lq_prod), (sq, sq_prod), (lw, lw_prod), dl = latency(args.samples or (10 if args.quick else 60))
        print_latency(lq, lq_prod, sq, sq_prod, lw, lw_prod)
        print_delayed(dl)
        return

    meter = bq.Meter()
    bq.install_hooks(meter)  # before any botocore client exists
    mock = setup_aws()
    from lakeq.admin import auth as lq_auth
    from lakeq.common import clock as lakeq_clock
    from lakeq.consume import reader as logread
    from lakeq.sqs import handler as sqs_service
    from lakeq.sqs import keys as sqs_keys

    lq_auth.clear_caches()
    sqs_keys.clear_caches()
    clock = FakeClock()
    lakeq_clock.now = clock
    logread.time = types.SimpleNamespace(sleep=clock.sleep)  # the long poll's only sleep
    from tests.handlers import Api
    from tests.integration.sqs_harness import Harness, fake_auth

    sqs_service.authenticate_request = fake_auth
    api = Api()

    def ok(status_body, want=(200, 201)):
        s, b = status_body
        assert s in want, (s, b)
        return b

    scenarios = []
    keys = {}
    for n in (4, 64):
        ok(api.call("POST", "/v1/topics", {"name": f"idle{n}", "queues": n}))
        key = keys[n] = ok(api.call("POST", "/v1/clients", {"name": f"c{n}", "role": "consumer",
                                                            "topics": [f"idle{n}"]}))["api_key"]

        def pull(n=n, key=key, wait=WAIT_MS):
            return ok(api.call("GET", f"/v1/topics/idle{n}/messages", query={"group": f"c{n}", "wait_ms": wait},
                               key=key))["messages"]
        scenarios.append((f"native pull, topic of {n} queues", "ConsumeFunction", pull))

    # a member of a consumer group spread over 16 members (4 of the 64 queues each): its poll reads
    # its own queues' items only (issue 16; before, every queue item of the topic)
    gkey = ok(api.call("POST", "/v1/clients", {"name": "g64", "role": "consumer", "topics": ["idle64"]}))["api_key"]
    members = [f"m{i}" for i in range(16)]

    def mpull(wait=WAIT_MS):
        if wait == 0 and not getattr(mpull, "joined", False):  # the warm-up: the members join, then sync
            for m in members:
                ok(api.call("POST", "/v1/groups/g64/members",
                            {"member_id": m, "topics": ["idle64"], "session_timeout_ms": 300_000}, key=gkey))
            gen = ok(api.call("GET", "/v1/groups/g64", key=gkey))["generation"]
            for m in members:
                ok(api.call("POST", f"/v1/groups/g64/members/{m}/sync", {"generation": gen}, key=gkey))
            mpull.joined = True
        return ok(api.call("GET", "/v1/topics/idle64/messages",
                           query={"group": "g64", "member_id": members[0], "wait_ms": wait}, key=gkey))["messages"]
    scenarios.append(("group member (4 of 64 queues, 16 members)", "ConsumeFunction", mpull))

    ok(api.call("POST", "/v1/topics", {"name": "idleb", "queues": 4}))
    bkey = ok(api.call("POST", "/v1/clients", {"name": "b4", "role": "consumer", "topics": ["idleb"],
                                               "mode": "broadcasting"}))["api_key"]

    def bpull(wait=WAIT_MS):
        return ok(api.call("GET", "/v1/topics/idleb/messages",
                           query={"group": "b4", "client_id": "c1", "wait_ms": wait}, key=bkey))["messages"]
    scenarios.append(("broadcasting client, topic of 4 queues", "ConsumeFunction", bpull))

    ok(api.call("POST", "/v1/topics", {"name": "idles", "queues": 4}))
    skey = ok(api.call("POST", "/v1/clients", {"name": "s4", "role": "consumer", "topics": ["idles"]}))["api_key"]
    sid = ok(api.call("POST", "/v1/subscriptions", {"subscriber": "s4", "topic": "idles",
                                                    "conditions": [{"field": "type", "values": ["A"]}]},
                      key=skey))["id"]

    def spull(wait=WAIT_MS):
        return ok(api.call("GET", f"/v1/subscriptions/{sid}/messages", query={"wait_ms": wait}, key=skey))["messages"]
    scenarios.append(("subscription list", "SubscriptionsFunction", spull))

    harness = Harness()
    sqs = harness.client("admin")
    qurl = sqs.create_queue(QueueName="idlesqs")["QueueUrl"]

    def rpull(wait=WAIT_MS):
        return sqs.receive_message(QueueUrl=qurl, MaxNumberOfMessages=10,
                                   WaitTimeSeconds=wait // 1000).get("Messages", [])
    # CreateQueue makes a lakeq topic of sqs_service.LAKEQ_QUEUES (4) queues
    scenarios.append(("SQS endpoint ReceiveMessage WaitTimeSeconds=20", "SqsFunction", rpull))

    print(f"# machine: {platform.machine()}, {os.cpu_count()} cpus, Python {platform.python_version()}, "
          f"{platform.platform()}")
    print(f"# {polls} idle polls per scenario, wait 20 s each on a fake clock (see the docstring); moto in-process")
    rows = []
    for name, fn, poll in scenarios:
        print(f"# running: {name}...", file=sys.stderr, flush=True)
        poll(wait=0)  # warm: the container's caches (key -> client, topic) as on a warm Lambda
        r = measure(meter, clock, polls, poll)
        mem, arch = function_config(fn)
        rows.append((name, fn, mem, arch, r, price_month(r, mem, arch)))
    print("# running: the WebSocket consumer's parts...", file=sys.stderr, flush=True)
    ws_rows = []
    for n in (4, 64):
        parts = measure_ws(meter, api, keys[n], f"idle{n}", f"c{n}", reps=3 if args.quick else 20)
        ws_rows.append((n, parts))
    mock.stop()
    print("# running: latency on the local stack and SQS-on-moto...", file=sys.stderr, flush=True)
    (lq, lq_prod), (sq, sq_prod), (lw, lw_prod), dl = latency(args.samples or (10 if args.quick else 60))

    print()
    print("## per 20-s idle poll (counted)")
    print(f"{'scenario':<48} {'rounds':>6} {'calls':>6} {'RRU':>7} {'WRU':>5} {'GB-s':>6} {'wall ms':>8}  calls")
    for name, fn, mem, arch, r, p in rows:
        detail = ", ".join(f"{k} {v / r['polls']:g}" for k, v in sorted(r["ddb"].items()))
        if r["other"]:
            detail += "; " + ", ".join(f"{k} {v / r['polls']:g}" for k, v in sorted(r["other"].items()))
        print(f"{name:<48} {r['rounds']:>6.1f} {sum(r['ddb'].values()) / r['polls']:>6.1f} {r['rru']:>7.1f} "
              f"{r['wru']:>5.1f} {p['gbs']:>6.2f} {r['wall_ms']:>8.0f}  {detail}")
    print()
    print("## $ per idle consumer-month (30 days of back-to-back 20-s polls), us-east-1 list prices")
    print(f"{'scenario':<48} {'fn MB':>6} {'DynamoDB':>9} {'Lambda GB-s':>11} {'requests':>9} {'total':>8} "
          f"{'SQS':>7} {'x SQS':>7} {'Pub/Sub':>12} {'x floor':>8}")
    for name, fn, mem, arch, r, p in rows:
        print(f"{name:<48} {mem:>4}{arch[:2]:>2} {p['ddb']:>9.3f} {p['duration']:>11.3f} {p['requests']:>9.3f} "
              f"{p['total']:>8.2f} {p['sqs']:>7.4f} {p['x_sqs']:>7.0f} {'0 - ' + format(p['pubsub'], '.4f'):>12} "
              f"{p['total'] / p['duration']:>8.3f}")
    print("* requests: API Gateway HTTP API ($1.00/M) + Lambda ($0.20/M), one each per poll; "
          "SQS: one ReceiveMessage per 20 s at $0.40/M; Pub/Sub: 0 (StreamingPull) to the 1 KB minimum "
          "per empty unary pull every 20 s at $40/TiB (assumption, see the source); x floor: the total over "
          "the Lambda-duration floor (a function of that memory waiting the whole month; issue 33's bar: <= 1.1)")
    print()
    print("## the WebSocket-waiting consumer (issue 16 item 2): its parts, counted (per invocation)")
    print(f"{'topic':<10} {'part':<11} {'DynamoDB calls':<40} {'RRU':>6} {'WRU':>5} {'wall ms':>8}")
    for n, parts in ws_rows:
        for name, p in parts.items():
            detail = ", ".join(f"{k} {v:g}" for k, v in sorted(p["ddb"].items())) or "-"
            if name == "notify":
                detail += f"; posts {p['posts']:g} of {p['bytes']} B"
            print(f"{n:>2} queues  {name:<11} {detail:<40} {p['rru']:>6.2f} {p['wru']:>5.2f} {p['wall_ms']:>8.1f}")
    print()
    print("## $ per idle WebSocket consumer-month (connection-minutes, keep-alives, reconnects every 2 h, "
          "fallback pulls), us-east-1 list prices; WakeFunction / ConsumeFunction as in template.yaml")
    print(f"{'topic':<9} {'fallback':>8} {'keepalive':>9} {'pulls':>7} {'WS msgs':>8} {'DynamoDB':>9} "
          f"{'requests':>9} {'GB-s $':>8} {'WS $':>7} {'total':>8} {'x SQS':>6} {'pulls %':>7}")
    mem, arch = function_config("ConsumeFunction")
    for n, parts in ws_rows:
        for fb, ka in ((60, 540), (20, 540), (300, 540)):
            p = price_ws(parts, mem, arch, fb, ka)
            print(f"{n:>2} queues {fb:>7}s {ka:>8}s {p['pulls']:>7.0f} {p['ws_msgs']:>8.0f} {p['ddb']:>9.4f} "
                  f"{p['requests']:>9.4f} {p['duration']:>8.4f} {p['ws']:>7.4f} {p['total']:>8.4f} "
                  f"{p['x_sqs']:>6.2f} {p['pull_share'] * 100:>6.0f}%")
    print("* requests: Lambda ($0.20/M) for every invocation, API Gateway HTTP API ($1.00/M) for the pulls; "
          "WS $: messages ($1.00/M) + connection-minutes ($0.25/M); SQS = one ReceiveMessage per 20 s")
    print_latency(lq, lq_prod, sq, sq_prod, lw, lw_prod)
    print_delayed(dl)


if __name__ == "__main__":
    main()
