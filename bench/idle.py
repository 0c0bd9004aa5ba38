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

    python bench/idle.py [--quick]
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import sys
import time
import types
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path[:0] = [str(ROOT), str(ROOT / "layers" / "core"), str(ROOT / "layers" / "matcher")]

for _var in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL",
             "AWS_ENDPOINT_URL_DYNAMODB", "AWS_ENDPOINT_URL_S3"):
    os.environ.pop(_var, None)
os.environ.update({"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                   "AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1",
                   "AWS_ACCOUNT_ID_ENDPOINT_MODE": "disabled", "LAKEQ_ADMIN_KEY": "local-admin-key",
                   "POWERTOOLS_TRACE_DISABLED": "true", "POWERTOOLS_METRICS_DISABLED": "true",
                   "POWERTOOLS_LOG_LEVEL": "WARNING"})

from infra.local import template as tpl  # noqa: E402

os.environ.update(tpl.environment(tpl.load_template(), tpl.LOCAL_STACK))


def _bench_queue():
    """bench/queue.py (named like the standard library's ``queue``): its Meter, prices and hooks."""
    spec = importlib.util.spec_from_file_location("bench_queue", ROOT / "bench" / "queue.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


bq = _bench_queue()
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


# --- latency from produce to delivery for a waiting consumer -------------------------------------
def start_local_stack(admin_key: str):
    """``python -m infra.local --port <free port>`` as tests/e2e/conftest.py's start_stack does."""
    import subprocess

    import requests

    from infra.local.__main__ import free_port

    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("AWS_ENDPOINT_URL", "AWS_PROFILE")}
    env.update({"LAKEQ_ADMIN_KEY": admin_key, "LAKEQ_PORT": str(port), "PYTHONUNBUFFERED": "1"})
    log = open(f"/tmp/lakeq-bench-idle-stack-{port}.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "infra.local", "--port", str(port)], cwd=ROOT, env=env,
                            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        try:
            if requests.get(f"{url}/v1/health", timeout=5).status_code == 200:
                return proc, url
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


def latency(n: int):
    import boto3
    import requests

    admin = "bench-idle-admin"
    proc, url = start_local_stack(admin)
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
    return lq, sq


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer polls per scenario (under a minute)")
    args = ap.parse_args()
    polls = 1 if args.quick else 10

    meter = bq.Meter()
    bq.install_hooks(meter)  # before any botocore client exists
    mock = setup_aws()
    from lakeq.admin import auth as lq_auth
    from lakeq.common import clock as lakeq_clock
    from lakeq.consume import reader as logread
    from lakeq.sqs import keys as sqs_keys
    from lakeq.sqs import service as sqs_service

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
    for n in (4, 64):
        ok(api.call("POST", "/v1/topics", {"name": f"idle{n}", "queues": n}))
        key = ok(api.call("POST", "/v1/clients", {"name": f"c{n}", "role": "consumer",
                                                  "topics": [f"idle{n}"]}))["api_key"]

        def pull(n=n, key=key, wait=WAIT_MS):
            return ok(api.call("GET", f"/v1/topics/idle{n}/messages", query={"group": f"c{n}", "wait_ms": wait},
                               key=key))["messages"]
        scenarios.append((f"native pull, topic of {n} queues", "ConsumeFunction", pull))

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
    mock.stop()
    print("# running: latency on the local stack and SQS-on-moto...", file=sys.stderr, flush=True)
    (lq, lq_prod), (sq, sq_prod) = latency(10 if args.quick else 60)

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
          f"{'SQS':>7} {'x SQS':>7} {'Pub/Sub':>12}")
    for name, fn, mem, arch, r, p in rows:
        print(f"{name:<48} {mem:>4}{arch[:2]:>2} {p['ddb']:>9.3f} {p['duration']:>11.3f} {p['requests']:>9.3f} "
              f"{p['total']:>8.2f} {p['sqs']:>7.4f} {p['x_sqs']:>7.0f} {'0 - ' + format(p['pubsub'], '.4f'):>12}")
    print("* requests: API Gateway HTTP API ($1.00/M) + Lambda ($0.20/M), one each per poll; "
          "SQS: one ReceiveMessage per 20 s at $0.40/M; Pub/Sub: 0 (StreamingPull) to the 1 KB minimum "
          "per empty unary pull every 20 s at $40/TiB (assumption, see the source)")
    print()
    print(f"## produce -> delivery for a waiting consumer (ms; {len(lq)} messages each side, one at a time "
          "at random 0.2-1.0 s intervals; local stack vs SQS on moto's server; under 100 samples p99 = the max)")
    print(f"{'':<30} {'p50':>7} {'p99':>7} {'max':>7} {'mean':>7} {'produce req p50':>16}")
    for name, xs, ps in (("lakeq pull wait_ms=20000", lq, lq_prod), ("SQS-on-moto WaitTimeSeconds=20", sq, sq_prod)):
        print(f"{name:<30} {pct(xs, 50):>7.0f} {pct(xs, 99):>7.0f} {max(xs):>7.0f} {sum(xs) / len(xs):>7.0f} "
              f"{pct(ps, 50):>16.0f}")
    print(f"{'ratio lakeq / SQS-on-moto':<30} {pct(lq, 50) / pct(sq, 50):>7.2f} {pct(lq, 99) / pct(sq, 99):>7.2f} "
          f"{max(lq) / max(sq):>7.2f} {sum(lq) / sum(sq):>7.2f}")


if __name__ == "__main__":
    main()
