"""The cost of push delivery (issue 17 item 6, in part): DynamoDB request units per pushed message,
COUNTED, next to draining the same subscription list by pulls (with the ack piggybacked on the
next pull) in the same process, and dollars per million pushed messages.

What runs (all in this process): moto in-process (``mock_aws``) with the tables of
``template.yaml``; lakeq's real handlers (``tests/handlers.py`` ``Api``) for setup, produce and the
baseline pulls; the fan-out through the stream pump (not counted); the push deliverer
(``lakeq.push.delivery.deliver``) with a poster that answers 200 at once (no network). Every
DynamoDB call is counted with ``bench/queue.py``'s ``Meter`` (request units from the items'
sizes; moto is not size-aware). Two subscriptions get the same messages: one is pushed, the other
pulled. Not measured here: the Lambda's duration. ``--latency``: see :func:`latency`.

Prices: DynamoDB on-demand and Lambda requests as ``bench/queue.py``; the others are list prices
looked up on 2026-11-25 (sources in docs/benchmarks.md; SNS's from a third-party summary): SNS
HTTP/S deliveries $0.60 per million, Google Pub/Sub $40 per TiB with a 1,000-byte minimum per
push request, Upstash QStash $1 per 100,000 messages (pay as you go).

A second table: a consumer group's endpoint (:func:`run_group`) next to a group pulling the same
topic.

    python bench/push.py [--quick]            # units per message (moto in-process)
    python bench/push.py --latency [--quick]  # produce -> endpoint latency on the local stack
    python bench/push.py --fairness [--quick] # a healthy endpoint behind 100 dead ones (fair vs baseline)
"""
from __future__ import annotations

import argparse
import os
import platform
import time

import _local  # noqa: E402  (bench/_local.py: this folder is still on sys.path here)

_local.in_process()
ROOT = _local.ROOT

from infra.local import template as tpl  # noqa: E402

bq = _local.bench_queue()

PRICE_SNS_HTTP = 0.60        # $ per million HTTP/S notifications
PRICE_PUBSUB_PER_M = 40.0 / 1024 ** 4 * 1000 * 1e6  # $40/TiB at the 1,000-byte minimum, per million
PRICE_QSTASH_PER_M = 1.0 * 10  # $1 per 100,000 messages


def setup():
    import boto3
    from moto import mock_aws

    mock = mock_aws()
    mock.start()
    template = tpl.load_template()
    tpl.create_tables(boto3.client("dynamodb", region_name="us-east-1"), template, tpl.LOCAL_STACK)
    tpl.create_queues(boto3.client("sqs", region_name="us-east-1"), template, tpl.LOCAL_STACK)
    return mock


def run(n: int, batch: int, meter) -> dict:
    import boto3

    from infra.local.streams import StreamPump
    from lakeq.push import delivery as push
    from tests.handlers import Api, load_function

    api = Api()
    tag = f"b{batch}"
    assert api.call("POST", "/v1/topics", {"name": f"t{tag}", "queues": 1})[0] == 201
    feed = api.call("POST", "/v1/clients", {"name": f"feed{tag}", "role": "producer", "topics": [f"t{tag}"]})[1]
    cons = api.call("POST", "/v1/clients", {"name": f"hook{tag}", "role": "consumer", "topics": [f"t{tag}"]})[1]
    subs = [api.call("POST", "/v1/subscriptions", {"subscriber": f"hook{tag}", "topic": f"t{tag}"},
                     key=cons["api_key"])[1]["id"] for _ in range(2)]
    pushed, pulled = subs
    assert api.call("PUT", f"/v1/subscriptions/{pushed}/push", {"url": "https://hooks.example.com/x",
                                                                "batch_size": batch})[0] == 201
    body = "x" * 200
    for i in range(0, n, 100):
        s, b = api.call("POST", f"/v1/topics/t{tag}/messages", {
            "producer": f"feed{tag}", "messages": [{"body": body, "key": str(j)} for j in range(i, min(i + 100, n))]},
            key=feed["api_key"])
        assert s == 200, b
    pump = StreamPump(stack_name=tpl.LOCAL_STACK, dynamodb_client=boto3.client("dynamodb"),
                      streams_client_=boto3.client("dynamodbstreams"),
                      handlers={"FanoutFunction": load_function("FanoutFunction")})
    pump.mappings = [m for m in pump.mappings if m.spec.logical_id == "FanoutFunction"]
    assert pump.drain(120)[0]

    got = {"n": 0}

    def poster(url, headers, data, timeout_s):
        got["n"] += data.count(b'"body"')
        return 200, b""
    # push: one deliver() per batch, as a stream-triggered invocation per new segment would at worst
    meter.reset()
    t0 = time.perf_counter()
    batches = 0
    while True:
        d = push.deliver(pushed, poster, max_batches=1)
        if not d.batches:
            break
        batches += d.batches
    push_s = time.perf_counter() - t0
    _calls, wru, rru = meter.snapshot()
    push_units = (wru, rru)
    assert got["n"] == n, got
    # baseline: the other list drained by pulls of the same batch size, acks piggybacked
    meter.reset()
    receipt, seen = None, 0
    while True:
        q = {"max": batch, **({"ack": receipt} if receipt else {})}
        s, b = api.call("GET", f"/v1/subscriptions/{pulled}/messages", query=q, key=cons["api_key"])
        assert s == 200, b
        if not b["messages"]:
            break
        seen += len(b["messages"])
        receipt = b["receipt"]
    assert seen == n
    _calls, wru, rru = meter.snapshot()
    return {"batch": batch, "n": n, "batches": batches, "push": push_units, "pull": (wru, rru), "push_s": push_s}


def run_group(n: int, batch: int, meter) -> dict:
    """A consumer group's endpoint (``lakeq.push.delivery.deliver_group``, ``max_in_flight`` 1, one
    run over the whole backlog, as a scheduled run does: its lease and its reads of the group and
    topic items are paid once per run) next to a second group draining the same topic by pulls of
    the same batch size with the ack piggybacked. Topic of 1 queue; no fan-out involved."""
    from lakeq.push import delivery as push
    from tests.handlers import Api

    api = Api()
    tag = f"g{batch}"
    assert api.call("POST", "/v1/topics", {"name": f"t{tag}", "queues": 1})[0] == 201
    feed = api.call("POST", "/v1/clients", {"name": f"feed{tag}", "role": "producer", "topics": [f"t{tag}"]})[1]
    keys = {}
    for g in ("pushed", "pulled"):
        s, c = api.call("POST", "/v1/clients", {"name": f"{g}{tag}", "role": "consumer", "topics": [f"t{tag}"]})
        assert s == 201, c
        keys[g] = c["api_key"]
    pulled_key = keys["pulled"]
    assert api.call("PUT", f"/v1/groups/pushed{tag}/push", {"url": "https://hooks.example.com/x", "topic": f"t{tag}",
                                                            "batch_size": batch})[0] == 201
    for i in range(0, n, 100):
        s, b = api.call("POST", f"/v1/topics/t{tag}/messages", {
            "producer": f"feed{tag}",
            "messages": [{"body": "x" * 200, "key": str(j)} for j in range(i, min(i + 100, n))]},
            key=feed["api_key"])
        assert s == 200, b
    got = {"n": 0}

    def poster(url, headers, data, timeout_s):
        got["n"] += data.count(b'"body"')
        return 200, b""
    meter.reset()
    d = push.deliver_group(f"pushed{tag}", poster, budget_s=600)
    _calls, wru, rru = meter.snapshot()
    push_units = (wru, rru)
    assert got["n"] == n and d.delivered == n, (got, d)
    meter.reset()
    receipt, seen = None, 0
    while True:
        q = {"group": f"pulled{tag}", "max": batch, **({"ack": receipt} if receipt else {})}
        s, b = api.call("GET", f"/v1/topics/t{tag}/messages", query=q, key=pulled_key)
        assert s == 200, b
        if not b["messages"]:
            break
        seen += len(b["messages"])
        receipt = b["receipt"]
    assert seen == n
    _calls, wru, rru = meter.snapshot()
    return {"batch": batch, "n": n, "batches": d.batches, "push": push_units, "pull": (wru, rru)}


def latency(n: int) -> None:
    """Produce → endpoint latency on the local stack (``python -m infra.local`` in a subprocess: the
    stream pump runs FanoutFunction and PushFunction from template.yaml), next to produce → a
    long-polling pull (``wait_ms`` 20000, ``max`` 1) of a second subscription with the same
    messages, in the same run: one message at a time, 300 ms apart."""
    import json
    import statistics
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    import requests

    from tests.e2e.conftest import start_stack

    arrived: dict[str, float] = {}
    group_arrived: dict[str, float] = {}

    class H(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            now = time.monotonic()
            into = group_arrived if self.path == "/g" else arrived
            for m in json.loads(body)["messages"]:
                into.setdefault(m["body"], now)
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *a):
            pass
    server = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    st = start_stack(admin_key="bench-admin")
    try:
        adm = {"Authorization": "Bearer bench-admin"}

        def post(path, body, headers=adm):
            r = requests.post(st.url + path, json=body, headers=headers, timeout=30)
            assert r.status_code in (200, 201), r.text
            return r.json()
        post("/v1/topics", {"name": "lat", "queues": 1})
        feed = post("/v1/clients", {"name": "feed", "role": "producer", "topics": ["lat"]})["api_key"]
        hook = post("/v1/clients", {"name": "hook", "role": "consumer", "topics": ["lat"]})["api_key"]
        hk = {"Authorization": f"Bearer {hook}"}
        pushed = post("/v1/subscriptions", {"subscriber": "hook", "topic": "lat"}, hk)["id"]
        pulled = post("/v1/subscriptions", {"subscriber": "hook", "topic": "lat"}, hk)["id"]
        r = requests.put(f"{st.url}/v1/subscriptions/{pushed}/push", headers=hk, timeout=30,
                         json={"url": f"http://127.0.0.1:{server.server_port}/h", "batch_size": 10})
        assert r.status_code == 201, r.text
        # a consumer group's endpoint on the same topic (stream-triggered since h/push3; the
        # stack's schedule fires every minute, so a schedule-only trigger would show up to 60 s)
        gkey = post("/v1/clients", {"name": "gpush", "role": "consumer", "topics": ["lat"]})["api_key"]
        r = requests.put(f"{st.url}/v1/groups/gpush/push", headers={"Authorization": f"Bearer {gkey}"},
                         timeout=30, json={"url": f"http://127.0.0.1:{server.server_port}/g", "topic": "lat",
                                           "batch_size": 10})
        assert r.status_code == 201, r.text
        pulled_at: dict[str, float] = {}
        stop = threading.Event()

        def puller():
            receipt = None
            while not stop.is_set():
                q = {"max": 1, "wait_ms": 2000, **({"ack": receipt} if receipt else {})}
                b = requests.get(f"{st.url}/v1/subscriptions/{pulled}/messages", params=q, headers=hk,
                                 timeout=30).json()
                now = time.monotonic()
                for m in b.get("messages") or []:
                    pulled_at.setdefault(m["body"], now)
                receipt = b.get("receipt") or None
        t = threading.Thread(target=puller, daemon=True)
        t.start()
        sent: dict[str, float] = {}
        for i in range(n):
            body = f"lat-{i}"
            sent[body] = time.monotonic()
            post("/v1/topics/lat/messages", {"producer": "feed", "messages": [{"body": body}]},
                 {"Authorization": f"Bearer {feed}"})
            time.sleep(0.3)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (len(arrived) < n or len(pulled_at) < n or len(group_arrived) < n):
            time.sleep(0.2)
        stop.set()
        push_ms = sorted((arrived[b] - sent[b]) * 1000 for b in sent if b in arrived)
        pull_ms = sorted((pulled_at[b] - sent[b]) * 1000 for b in sent if b in pulled_at)
        group_ms = sorted((group_arrived[b] - sent[b]) * 1000 for b in sent if b in group_arrived)

        def pct(xs, q):
            return xs[min(len(xs) - 1, int(q * len(xs)))]
        print(f"# produce -> receiver latency on the local stack, {n} messages 300 ms apart "
              f"(pushed {len(push_ms)}, pulled {len(pull_ms)}, pushed to the group {len(group_ms)})")
        print(f"{'':>22} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8}")
        print(f"{'push (PushFunction)':>22} {statistics.median(push_ms):>8.0f} {pct(push_ms, .95):>8.0f} "
              f"{push_ms[-1]:>8.0f}")
        print(f"{'long-poll pull':>22} {statistics.median(pull_ms):>8.0f} {pct(pull_ms, .95):>8.0f} "
              f"{pull_ms[-1]:>8.0f}")
        if group_ms:
            print(f"{'group push':>22} {statistics.median(group_ms):>8.0f} {pct(group_ms, .95):>8.0f} "
                  f"{group_ms[-1]:>8.0f}")
        print(f"push/pull p50: {statistics.median(push_ms) / statistics.median(pull_ms):.2f}x")
    finally:
        server.shutdown()
        st.stop()


def fairness(quick: bool) -> None:
    """Issue 30 item 6: one tenant cannot starve another's push delivery. ``HOSTILE_CLIENTS``
    clients with the per-client cap of endpoints each (100 endpoints that never answer: the poster
    sleeps the request's whole timeout, then fails it as a timeout) and one healthy client's
    endpoint (answers 200 at once), all with a message to push, in one PushFunction run
    (``deliver_all``), as the function runs them: fair (round-robin by client, per-client cap,
    run deadline) and the baseline (the plain pool in registration order, the code before) in the
    same process. Measured: when the healthy endpoint got its request after the run started, the
    run's length, how many dead endpoints the run skipped (left for the next run)."""
    import threading

    import boto3

    from infra.local.streams import StreamPump
    from lakeq.push import delivery as push
    from lakeq.push import service as push_service
    from tests.handlers import Api, load_function

    per_client = push_service.MAX_ENDPOINTS_PER_CLIENT
    hostile_clients = max(1, 100 // per_client)
    timeout_ms = 300 if quick else 10_000  # (--quick: under a minute; the bound is the same: the first wave)
    remaining_ms = 60_000  # template.yaml's PushFunction Timeout
    t_setup = time.monotonic()
    api = Api()
    assert api.call("POST", "/v1/topics", {"name": "fair", "queues": 1})[0] == 201
    feed = api.call("POST", "/v1/clients", {"name": "fairfeed", "role": "producer", "topics": ["fair"]})[1]
    subs, healthy = [], None
    for c in [f"hostile{i}" for i in range(hostile_clients)] + ["healthy"]:
        key = api.call("POST", "/v1/clients", {"name": c, "role": "consumer", "topics": ["fair"]})[1]["api_key"]
        for j in range(1 if c == "healthy" else per_client):
            sid = api.call("POST", "/v1/subscriptions", {"subscriber": c, "topic": "fair"}, key=key)[1]["id"]
            url = "https://ok.example.com/x" if c == "healthy" else f"https://dead.example.com/{c}/{j}"
            s, b = api.call("PUT", f"/v1/subscriptions/{sid}/push", {"url": url, "timeout_ms": timeout_ms}, key=key)
            assert s == 201, b
            if c == "healthy":
                healthy = sid
            else:
                subs.append(sid)
    pump = StreamPump(stack_name=tpl.LOCAL_STACK, dynamodb_client=boto3.client("dynamodb"),
                      streams_client_=boto3.client("dynamodbstreams"),
                      handlers={"FanoutFunction": load_function("FanoutFunction")})
    pump.mappings = [m for m in pump.mappings if m.spec.logical_id == "FanoutFunction"]

    def one_run(fair: bool) -> dict:
        assert api.call("POST", "/v1/topics/fair/messages", {"producer": "fairfeed", "messages": [{"body": "x"}]},
                        key=feed["api_key"])[0] == 200
        assert pump.drain(120)[0]
        seen: dict = {}
        lock = threading.Lock()
        t0 = time.monotonic()

        def poster(url, headers, data, timeout_s):
            with lock:
                seen["started"] = seen.get("started", 0) + 1
            if url.startswith("https://ok."):
                with lock:
                    seen.setdefault("healthy_s", time.monotonic() - t0)
                    seen.setdefault("healthy_rank", seen["started"])  # its place among the requests started
                return 200, b""
            time.sleep(timeout_s)  # never answers: the request's whole timeout
            with lock:
                seen.setdefault("first_dead_end_s", time.monotonic() - t0)
            return None, b""
        out = push.deliver_all(subs + [healthy], poster, remaining_ms=remaining_ms, fair=fair)
        run_s = time.monotonic() - t0
        return {"healthy_s": seen.get("healthy_s"), "healthy_rank": seen.get("healthy_rank"), "run_s": run_s,
                "first_dead_end_s": seen.get("first_dead_end_s"),
                "skipped": sum(d.skipped for d in out.values()),
                "dead_tried": sum(d.batches for k, d in out.items() if k != healthy)}

    setup_s = time.monotonic() - t_setup
    rows = {"baseline (FIFO pool)": one_run(False), "fair (issue 30)": one_run(True)}
    print(f"# set-up (topics, clients, {len(subs) + 1} subscriptions and endpoints, stream pump): {setup_s:.1f} s")
    print(f"# push fairness: {hostile_clients} clients x {per_client} never-answering endpoints "
          f"(timeout_ms {timeout_ms}) + 1 healthy client's endpoint, one run of {push.WORKERS} workers "
          f"(function timeout {remaining_ms // 1000} s); machine: {platform.machine()}, {os.cpu_count()} cores")
    print(f"{'scheduler':<22} {'healthy latency s':>17} {'1st dead ends s':>15} {'run s':>7} {'dead tried':>10} "
          f"{'skipped':>8}")
    for label, r in rows.items():
        h = "never" if r["healthy_s"] is None else f"{r['healthy_s']:.2f}"
        print(f"{label:<22} {h:>17} {r['first_dead_end_s'] or 0:>15.2f} {r['run_s']:>7.1f} {r['dead_tried']:>10} "
              f"{r['skipped']:>8}")
    fair = rows["fair (issue 30)"]
    ok = fair["healthy_rank"] is not None and fair["healthy_rank"] <= push.WORKERS and \
        fair["run_s"] < remaining_ms / 1000
    print(f"healthy request's place among the requests started: fair {fair['healthy_rank']}, "
          f"baseline {rows['baseline (FIFO pool)']['healthy_rank']}")
    print(f"bound: the healthy endpoint's request starts in the run's first wave (among the first {push.WORKERS} "
          "requests started), whatever the number of dead endpoints, and the run ends within the function's "
          f"timeout: {'holds' if ok else 'VIOLATED'}")


def dollars(units: tuple[float, float], n: int) -> float:
    wru, rru = units
    return (wru * bq.PRICE_WRU + rru * bq.PRICE_RRU) / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--latency", action="store_true", help="produce -> endpoint latency on the local stack")
    ap.add_argument("--fairness", action="store_true",
                    help="a healthy endpoint behind 100 never-answering ones of other clients, fair vs baseline")
    args = ap.parse_args()
    if args.latency:
        latency(20 if args.quick else 50)
        return
    if args.fairness:
        mock = setup()
        try:
            fairness(args.quick)
        finally:
            mock.stop()
        return
    n = 100 if args.quick else 500
    meter = bq.Meter()
    bq.install_hooks(meter)
    mock = setup()
    try:
        rows = [run(n, b, meter) for b in (1, 10)]
        group_rows = [run_group(n, b, meter) for b in (1, 10)]
    finally:
        mock.stop()
    print(f"# push delivery cost (issue 17), {n} messages of 200 B per run; machine: {platform.machine()}, "
          f"{os.cpu_count()} cores")
    print(f"{'batch':>5} {'push WRU/msg':>12} {'RRU/msg':>8} {'pull WRU/msg':>12} {'RRU/msg':>8} "
          f"{'push $/M':>9} {'pull $/M':>9} {'push/pull':>9} {'+Lambda req $/M':>15}")
    for label, rs in (("subscription", rows), ("consumer group", group_rows)):
        print(f"# {label}")
        table(rs)
    print(f"next to: SNS HTTP/S ${PRICE_SNS_HTTP:.2f}/M, Pub/Sub push ${PRICE_PUBSUB_PER_M:.3f}/M (1 KB minimum), "
          f"QStash ${PRICE_QSTASH_PER_M:.2f}/M (list prices, sources in docs/benchmarks.md; lakeq's figure is "
          "DynamoDB, plus one Lambda request per batch at most; Lambda duration and the fan-out's own cost "
          "not included)")


def table(rows: list) -> None:
    for r in rows:
        pw, pr = (u / r["n"] for u in r["push"])
        lw, lr = (u / r["n"] for u in r["pull"])
        dp, dl = dollars(r["push"], r["n"]), dollars(r["pull"], r["n"])
        lam = bq.PRICE_LAMBDA_REQUEST * 1e6 * r["batches"] / r["n"]
        print(f"{r['batch']:>5} {pw:>12.2f} {pr:>8.2f} {lw:>12.2f} {lr:>8.2f} {dp:>9.3f} {dl:>9.3f} "
              f"{dp / dl:>8.2f}x {dp + lam:>15.3f}")


if __name__ == "__main__":
    main()
