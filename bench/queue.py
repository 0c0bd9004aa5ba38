"""Queue benchmark: produce / pull / ack throughput on the local stack, DynamoDB calls and request
units per message, dollars per million messages, next to Amazon SQS.

What runs (all on this machine, in this process except moto's server):
- moto's server as a child process with the tables of ``template.yaml``;
- lakeq's real gateway and handlers (``infra.local.gateway``) on a loopback port, called over
  HTTP by client threads;
- every DynamoDB call the handlers make is counted through botocore event hooks (``before-parameter-build``
  / ``after-call`` registered on every client botocore creates), and converted to request units
  from the items' sizes (moto reports no sizes): writes 1 WRU per KB of each item, 2x in a
  transaction; strongly consistent reads 1 RRU per 4 KB of the items read (Query: of their sum),
  eventually consistent half; UpdateItem on our small records counts 1 WRU (our updated items
  are all < 1 KB: queue and offset records);
- the baseline, side by side: the same number of messages through SQS on the same moto server
  (SendMessageBatch / ReceiveMessage / DeleteMessageBatch, batches of up to 10) with the same client
  loop as lakeq's (an empty answer sleeps 10 ms; a thread stops once every message is in), for
  throughput; and SQS's price, both by the formula (3 requests a batch) and as run (its requests
  counted, empty receives included, as lakeq's empty pulls are);
- the Lambda share through the function URLs from each handler invocation's measured thread CPU
  (:class:`HandlerCpu`, :func:`lambda_dollars`: CPU x 1,769 / MB below 1,769 MB + an assumed wait per
  store call), at several memory sizes and at template.yaml's; and what each empty pull cost.

    python bench/queue.py [--quick] [--plan 1:200,10:1000]
"""
from __future__ import annotations

import sys
from pathlib import Path

# this file is named like the standard library's ``queue``: keep its folder off the import path
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import argparse
import itertools
import math
import os
import platform
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "layers" / "core"), str(ROOT / "layers" / "matcher")]

# Prices: us-east-1 list prices as published by AWS (DynamoDB on-demand after the 2024-11-01 price
# cut; SQS standard; API Gateway HTTP API first tier; Lambda arm64). Not re-checked online from this
# machine (no internet): see docs/benchmarks.md for the date we wrote them down.
PRICE_WRU = 0.625 / 1e6
PRICE_RRU = 0.125 / 1e6
PRICE_SQS_REQUEST = 0.40 / 1e6
PRICE_HTTP_API_REQUEST = 1.00 / 1e6
PRICE_LAMBDA_REQUEST = 0.20 / 1e6
PRICE_LAMBDA_GBS_ARM = 0.0000133334
LAMBDA_MB, LAMBDA_MS_ESTIMATE = 512, 40  # per invocation, an estimate (not measured on AWS)
# The Lambda share from the run's own handler CPU (issue 33 item 2): each ProduceFunction /
# ConsumeFunction invocation's thread CPU in this process (``time.thread_time`` around the handler:
# powertools, auth, json, botocore's side of each DynamoDB call; not the bench meter's sizing of the
# items, METER_CPU, taken out; not moto's, a separate process), billed on Lambda as CPU × 1,769 / MB
# when the function has less than the one vCPU Lambda gives 1,769 MB (AWS: CPU in proportion to
# memory), plus the store calls' wait, DDB_CALL_MS each (an assumption: single-digit-ms DynamoDB
# latency in-region; not measured here), rounded up to the millisecond. This machine's x86 core is
# taken as fast as a Graviton vCPU.
VCPU_MB = 1769
DDB_CALL_MS = 4.0
MEMORY_SIZES = (128, 256, 512, 1024)


def template_memory(logical_id: str) -> int:
    """The function's MemorySize in template.yaml (its own, else the Globals')."""
    from infra.local import template as tpl

    t = tpl.load_template()
    own = (t["Resources"][logical_id].get("Properties") or {}).get("MemorySize")
    return int(own or t.get("Globals", {}).get("Function", {}).get("MemorySize") or 128)


def lambda_dollars(cpu_s: float, calls: float, mb: int) -> float:
    """One invocation's Lambda price (request + duration, arm64) at ``mb`` MB for ``cpu_s`` seconds
    of handler CPU (one full core) and ``calls`` store calls (see DDB_CALL_MS)."""
    ms = math.ceil(cpu_s * 1000 * max(1.0, VCPU_MB / mb) + calls * DDB_CALL_MS)
    return PRICE_LAMBDA_REQUEST + mb / 1024 * ms / 1000 * PRICE_LAMBDA_GBS_ARM


class HandlerCpu:
    """Thread CPU seconds and invocations per function, measured around each handler call."""

    def __init__(self):
        self.lock = threading.Lock()
        self.cpu: Counter = Counter()
        self.n: Counter = Counter()

    def reset(self):
        with self.lock:
            self.cpu.clear()
            self.n.clear()

    def snapshot(self):
        with self.lock:
            return Counter(self.cpu), Counter(self.n)

    def install(self) -> None:
        import contextlib

        from infra.local.handlers import HandlerCache

        original = HandlerCache.instance
        meter = self

        @contextlib.contextmanager
        def instance(cache, spec):
            with original(cache, spec) as fn:
                def timed(event, context):
                    t0, m0 = time.thread_time(), getattr(METER_CPU, "s", 0.0)
                    try:
                        return fn(event, context)
                    finally:
                        dt = time.thread_time() - t0 - (getattr(METER_CPU, "s", 0.0) - m0)
                        with meter.lock:
                            meter.cpu[spec.logical_id] += dt
                            meter.n[spec.logical_id] += 1
                yield timed

        HandlerCache.instance = instance


HANDLER_CPU = HandlerCpu()
FINAL_ACK = "acks"  # how a consumer thread settles the batch it holds once every message is in (--final-ack)
METER_CPU = threading.local()  # the serving thread's CPU seconds in Meter.after (the bench's, not lakeq's)

import base64 as _b64
import random as _random

_rng = _random.Random(1)
# 100-character bodies of random text: compression gains nothing on them (a repeated letter would
# flatter the segment compression)
BODY = _b64.b64encode(bytes(_rng.getrandbits(8) for _ in range(75))).decode()


# --- DynamoDB item sizes and request units ---------------------------------------------------------
def attr_size(v: dict) -> int:
    (t, x), = v.items()
    if t == "S":
        return len(x.encode("utf-8"))
    if t == "N":
        digits = str(x).lstrip("-").replace(".", "").strip("0")
        return (len(digits) + 1) // 2 + 1
    if t == "B":
        return len(x)
    if t in ("BOOL", "NULL"):
        return 1
    if t in ("SS", "NS", "BS"):
        return sum(attr_size({t[0]: e}) for e in x)
    if t == "L":
        return 3 + sum(1 + attr_size(e) for e in x)
    if t == "M":
        return 3 + sum(len(k.encode()) + 1 + attr_size(e) for k, e in x.items())
    return 0


def item_size(item: dict | None) -> int:
    return sum(len(k.encode("utf-8")) + attr_size(v) for k, v in (item or {}).items())


class Meter:
    """Counts DynamoDB/S3 calls and request units through botocore event hooks."""

    def __init__(self):
        self.lock = threading.Lock()
        self.reset()

    def reset(self):
        with self.lock:
            self.calls: Counter = Counter()
            self.wru = 0.0
            self.rru = 0.0
            self.by_op: Counter = Counter()  # "op WRU" / "op RRU" -> request units, per operation

    def snapshot(self):
        with self.lock:
            return Counter(self.calls), self.wru, self.rru

    def units_snapshot(self) -> Counter:
        with self.lock:
            return Counter(self.by_op)

    def before(self, params, model, context, **_):
        # before-parameter-build: ``params`` are the API parameters (before-call only sees the
        # serialised HTTP request); ``context`` is the same dict after-call receives
        context["lakeq_params"] = params

    def after(self, http_response, parsed, model, context, **_):
        # the meter's own CPU (sizing every item of every call) is the benchmark's, not lakeq's: kept
        # apart (METER_CPU) and taken out of the handlers' measured CPU (HandlerCpu)
        c0 = time.thread_time()
        try:
            self._count(parsed, model, context)
        finally:
            METER_CPU.s = getattr(METER_CPU, "s", 0.0) + time.thread_time() - c0

    def _count(self, parsed, model, context):
        op = model.name
        service = model.service_model.service_name
        if service == "dynamodbstreams":  # the stream pump's reads: free for a Lambda trigger
            return
        wru, rru = self.units(service, op, context.get("lakeq_params") or {}, parsed)
        with self.lock:
            self.calls[f"{service}.{op}"] += 1
            self.wru += wru
            self.rru += rru
            if wru:
                self.by_op[f"{op} WRU"] += wru
            if rru:
                self.by_op[f"{op} RRU"] += rru

    @staticmethod
    def units(service: str, op: str, params: dict, parsed: dict) -> tuple[float, float]:
        """(WRU, RRU) of one call, from the items' sizes (see the module docstring)."""
        wru = rru = 0.0
        if service == "dynamodb":
            consistent = 1.0 if params.get("ConsistentRead") else 0.5
            if op == "PutItem":
                wru = math.ceil(max(1, item_size(params.get("Item"))) / 1024)
            elif op in ("UpdateItem", "DeleteItem"):
                wru = 1
            elif op == "TransactWriteItems":
                for it in params.get("TransactItems", []):
                    if "Put" in it:
                        wru += 2 * math.ceil(max(1, item_size(it["Put"]["Item"])) / 1024)
                    elif "Update" in it or "Delete" in it:
                        wru += 2
                    elif "ConditionCheck" in it:
                        rru += 2
            elif op == "GetItem":
                rru = consistent * max(1, math.ceil(item_size(parsed.get("Item")) / 4096))
            elif op in ("Query", "Scan"):
                total = sum(item_size(i) for i in parsed.get("Items", []))
                rru = consistent * max(1, math.ceil(total / 4096))
            elif op == "BatchGetItem":
                for table, req in params.get("RequestItems", {}).items():
                    c = 1.0 if req.get("ConsistentRead") else 0.5
                    found = parsed.get("Responses", {}).get(table, [])
                    rru += c * sum(max(1, math.ceil(item_size(i) / 4096)) for i in found)
                    rru += c * (len(req.get("Keys", [])) - len(found))
        return wru, rru


def install_hooks(meter: Meter) -> None:
    import botocore.session

    original = botocore.session.Session.create_client

    def create_client(self, *args, **kwargs):
        client = original(self, *args, **kwargs)
        client.meta.events.register("before-parameter-build.*", meter.before)
        client.meta.events.register("after-call.*", meter.after)
        return client

    botocore.session.Session.create_client = create_client


class PerRequest:
    """WSGI middleware, inside ``Serialised`` (one handler invocation at a time): the meter's WRU and
    RRU spent by each request that names itself with an ``X-Bench-Id`` header (the client reads
    them back, to tell the cost of pulls that came back empty from the rest)."""

    def __init__(self, app, meter: Meter):
        from infra.local.moto_serial import read_body

        self.app, self.meter, self.read_body = app, meter, read_body
        self.spent: dict[str, tuple[float, float]] = {}

    def __call__(self, environ, start_response):
        rid = environ.get("HTTP_X_BENCH_ID")
        _, w0, r0 = self.meter.snapshot()
        data = self.read_body(self.app(environ, start_response))
        if rid:
            _, w1, r1 = self.meter.snapshot()
            self.spent[rid] = (w1 - w0, r1 - r0)
        return [data]


# --- the stack ------------------------------------------------------------------------------------
class MainThreadOnly:
    """``sys.stdout`` for the bench: what the main thread prints (the report) goes through; what the
    handlers print on the server's threads — powertools' EMF document at the end of each invocation,
    as on Lambda — is dropped. (With POWERTOOLS_METRICS_DISABLED, the benches' setting before
    2026-12-07, powertools never flushed: each invocation's metrics and dimension sets piled up in
    the process, every ``add_dimensions`` validated the whole pile and every 100th value printed a
    document of all of them — CPU no Lambda invocation spends; and no invocation paid the flush a
    Lambda invocation does.)"""

    def __init__(self, real):
        self.real = real

    def write(self, s):
        if threading.current_thread() is not threading.main_thread() or s.startswith('{"_aws"'):
            return len(s)  # (the head mover's documents when a drain runs it on the main thread)
        return self.real.write(s)

    def __getattr__(self, name):
        return getattr(self.real, name)


def start_stack(meter: Meter | None = None, wrap=None):
    """moto's server + lakeq's gateway on loopback ports; ``meter``: count each request's units
    (:class:`PerRequest`); ``wrap``: a WSGI middleware put around the gateway, inside the
    one-invocation-at-a-time lock."""
    from infra.local import template as tpl
    from infra.local.__main__ import free_port, start_moto, wait_for_moto

    port = free_port()
    moto = start_moto(port, os.path.join("/tmp", f"lakeq-bench-moto-{port}.log"))
    url = f"http://127.0.0.1:{port}"
    wait_for_moto(moto, url)
    os.environ.update({"AWS_ENDPOINT_URL": url, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1",
                       "LAKEQ_ADMIN_KEY": "bench-admin", "POWERTOOLS_METRICS_DISABLED": "false",
                       "POWERTOOLS_DEV": "false",
                       "POWERTOOLS_LOG_LEVEL": "WARNING", "POWERTOOLS_TRACE_DISABLED": "true"})
    template = tpl.load_template()
    ctx = tpl.make_context(template, tpl.LOCAL_STACK)
    os.environ.update(tpl.environment(ctx))
    if not isinstance(sys.stdout, MainThreadOnly):
        sys.stdout = MainThreadOnly(sys.stdout)
    import boto3
    from werkzeug.serving import make_server

    from infra.local.gateway import Gateway

    tpl.create_tables(boto3.client("dynamodb"), ctx)
    import logging

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    gateway = Gateway(template, stack_name=tpl.LOCAL_STACK)
    gateway.preload()
    # powertools keeps the current event in a class attribute (one invocation per container, as in
    # Lambda): in this one process, handler invocations run one at a time
    from infra.local.moto_serial import Serialised

    global PER_REQUEST
    app = gateway
    if meter is not None:
        app = PER_REQUEST = PerRequest(gateway, meter)
    serial = Serialised(wrap(app) if wrap else app)
    server = make_server("127.0.0.1", 0, serial, threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    global HEADS
    HEADS = heads_pump(template, serial.lock)
    return moto, server, f"http://127.0.0.1:{server.server_port}"


PER_REQUEST: PerRequest | None = None
HEADS = None  # the SegmentsTable stream's head mover (HeadsFunction), as the local stack pumps it
HEADS_HOOK = None  # called with True / False around each of its invocations (bench/sqs_endpoint.py labels them)


def heads_pump(template, lock):
    """The head mover (issue 16 item 3: each queue's ``max_offset`` is moved by the SegmentsTable
    stream's consumer, not by the producer) on a stream pump thread with the template's batch size
    and window, as on the local stack; its invocations take the gateway's one-at-a-time lock. Its
    DynamoDB writes are counted with the produce figures (the run drains it before reading them)."""
    import importlib.util

    from infra.local import template as tpl
    from infra.local.streams import StreamPump

    spec = importlib.util.spec_from_file_location("bench_heads_app", ROOT / "functions" / "heads" / "app.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]

    def handler(event, context):
        with lock:
            if HEADS_HOOK is not None:
                HEADS_HOOK(True)
            try:
                return mod.lambda_handler(event, context)
            finally:
                if HEADS_HOOK is not None:
                    HEADS_HOOK(False)

    pump = StreamPump(template, stack_name=tpl.LOCAL_STACK, handlers={"HeadsFunction": handler})
    pump.mappings = [m for m in pump.mappings if m.spec.logical_id == "HeadsFunction"]
    return pump.start()


# --- workloads ------------------------------------------------------------------------------------
def lakeq_run(base: str, meter: Meter, batch: int, total: int, threads: int, queues: int, tag: str):
    import requests

    admin = {"Authorization": "Bearer bench-admin"}
    topic = f"bench{tag}"
    requests.post(f"{base}/v1/topics", json={"name": topic, "queues": queues}, headers=admin).raise_for_status()
    prod = requests.post(f"{base}/v1/clients", json={"name": f"p{tag}", "role": "producer", "topics": [topic]},
                         headers=admin).json()["api_key"]
    cons = requests.post(f"{base}/v1/clients", json={"name": f"c{tag}", "role": "consumer", "topics": [topic]},
                         headers=admin).json()["api_key"]
    local = threading.local()

    def session():
        if not hasattr(local, "s"):
            local.s = requests.Session()
        return local.s

    # warm the per-container caches (key -> client) so the figures are steady-state
    session().get(f"{base}/v1/topics/{topic}/messages", params={"group": f"c{tag}"},
                  headers={"Authorization": f"Bearer {cons}"})
    session().post(f"{base}/v1/topics/{topic}/messages", json={"producer": f"p{tag}", "messages": [{"body": "w"}]},
                   headers={"Authorization": f"Bearer {prod}"}).raise_for_status()
    total_produced = total + 1

    def produce(i):
        r = session().post(f"{base}/v1/topics/{topic}/messages",
                           json={"producer": f"p{tag}", "messages": [{"body": BODY} for j in range(batch)]},
                           headers={"Authorization": f"Bearer {prod}"})
        r.raise_for_status()

    meter.reset()
    HANDLER_CPU.reset()
    t0 = time.perf_counter()
    with ThreadPoolExecutor(threads) as ex:
        list(ex.map(produce, range(total // batch)))
    t_prod = time.perf_counter() - t0
    prod_cpu = HANDLER_CPU.snapshot()
    if HEADS is not None:  # the head mover's last batches: its writes belong to the produce figures
        assert HEADS.drain(60)[0], "the head mover did not catch up"
    prod_stats = meter.snapshot()
    prod_units = meter.units_snapshot()

    consumed = Counter()
    lock = threading.Lock()
    pulls = Counter()
    empty_units = [0.0, 0.0]  # WRU, RRU of the pulls that came back empty

    def consume(i):
        receipt = None
        hdr = {"Authorization": f"Bearer {cons}"}
        for k in itertools.count():
            # stop once every message is in, as sqs_run's receivers do (they look before each receive);
            # a batch still held is acknowledged alone (POST /v1/acks: SQS's last DeleteMessageBatch),
            # unless --final-ack pull (before 2026-12-07: a pull with ack= that found nothing)
            with lock:
                done = len(consumed) >= total_produced
            if done and (receipt is None or FINAL_ACK == "acks"):
                if receipt is not None:
                    rid = f"{tag}-{i}-{k}"
                    r = session().post(f"{base}/v1/acks", json={"group": f"c{tag}", "receipt": receipt},
                                       headers={**hdr, "X-Bench-Id": rid})
                    r.raise_for_status()
                    PER_REQUEST.spent.pop(rid, None)  # type: ignore[union-attr]
                    with lock:
                        pulls["final acks"] += 1
                return
            params = {"group": f"c{tag}", "max": batch}
            if receipt:
                params["ack"] = receipt
            rid = f"{tag}-{i}-{k}"
            r = session().get(f"{base}/v1/topics/{topic}/messages", params=params, headers={**hdr, "X-Bench-Id": rid})
            r.raise_for_status()
            body = r.json()
            spent = PER_REQUEST.spent.pop(rid, (0.0, 0.0))  # type: ignore[union-attr]
            with lock:
                pulls["pulls"] += 1
                pulls["with ack"] += receipt is not None
                pulls["empty"] += not body["messages"]
                pulls["empty_ack"] += not body["messages"] and receipt is not None
                if not body["messages"]:
                    empty_units[0] += spent[0]
                    empty_units[1] += spent[1]
            receipt = body["receipt"]
            with lock:
                for m in body["messages"]:
                    consumed[(m["queue"], m["offset"])] += 1
                done = len(consumed) >= total_produced
            if not body["messages"] and (done or not receipt):
                if done:
                    return
                time.sleep(0.01)

    meter.reset()
    HANDLER_CPU.reset()
    t0 = time.perf_counter()
    with ThreadPoolExecutor(threads) as ex:
        list(ex.map(consume, range(threads)))
    t_cons = time.perf_counter() - t0
    cons_cpu = HANDLER_CPU.snapshot()
    cons_stats = meter.snapshot()
    cons_units = meter.units_snapshot()
    assert len(consumed) == total_produced, "lost messages"
    assert max(consumed.values()) == 1, "a message was delivered twice"
    lakeq_run.detail = (prod_units, cons_units, pulls, tuple(empty_units))  # type: ignore[attr-defined]
    lakeq_run.cpu = (prod_cpu, cons_cpu)  # type: ignore[attr-defined]
    return t_prod, prod_stats, t_cons, cons_stats


def start_sqs_server():
    """moto's own server (requests on concurrent threads), SQS only, for the baseline."""
    import subprocess

    from infra.local.__main__ import free_port, wait_for_moto

    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "AWS_ENDPOINT_URL"}
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    url = f"http://127.0.0.1:{port}"
    wait_for_moto(proc, url)
    return proc, url


def sqs_run(sqs_url: str, batch: int, total: int, threads: int, tag: str) -> tuple[float, float]:
    """The same messages through SQS with the same client loop as :func:`lakeq_run`'s (a receive that
    came back empty sleeps 10 ms and tries again, until every message is in); each request is counted
    (``sqs_run.requests``: send / receive / empty receive / delete calls) so SQS's dollars can be its
    requests as made, empty receives included, as lakeq's count its empty pulls."""
    import boto3

    sqs = boto3.client("sqs", endpoint_url=sqs_url)
    url = sqs.create_queue(QueueName=f"bench{tag}")["QueueUrl"]
    chunk = min(batch, 10)
    requests = Counter()

    def send(i):
        for c in range(0, batch, chunk):
            sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": str(j), "MessageBody": BODY}
                                                          for j in range(min(chunk, batch - c))])
            with lock:
                requests["send"] += 1

    lock = threading.Lock()
    t0 = time.perf_counter()
    with ThreadPoolExecutor(threads) as ex:
        list(ex.map(send, range(total // batch)))
    t_send = time.perf_counter() - t0
    got = Counter()

    def recv(_):
        while True:
            with lock:
                if sum(got.values()) >= total:
                    return
            r = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=chunk, VisibilityTimeout=30)
            msgs = r.get("Messages", [])
            with lock:
                requests["receive"] += 1
                requests["empty"] += not msgs
            if msgs:
                sqs.delete_message_batch(QueueUrl=url, Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
                                                                for i, m in enumerate(msgs)])
                with lock:
                    requests["delete"] += 1
                    got.update(m["MessageId"] for m in msgs)
            else:
                time.sleep(0.01)

    t0 = time.perf_counter()
    with ThreadPoolExecutor(threads) as ex:
        list(ex.map(recv, range(threads)))
    sqs_run.requests = requests  # type: ignore[attr-defined]
    return t_send, time.perf_counter() - t0


def sqs_price_per_million(batch: int) -> float:
    reqs_per_msg = 3 * math.ceil(batch / 10) / batch  # send + receive + delete, 10 a call at most
    return reqs_per_msg * PRICE_SQS_REQUEST * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="small runs, under a minute")
    ap.add_argument("--plan", help="batch:messages,... instead of the default runs (e.g. 1:200,10:1000)")
    ap.add_argument("--final-ack", choices=("acks", "pull"), default="acks",
                    help="a consumer thread's batch held when every message is in: acknowledged alone on "
                         "POST /v1/acks (default, as SQS's receivers delete their last batch and stop), or by "
                         "one more pull with ack= (the loop before 2026-12-07)")
    ap.add_argument("--ab", type=int, default=0, metavar="N",
                    help="side by side in this one process: each step of the plan N times, lakeq's run without "
                         "the leaner empty pulls (old: lakeq.consume.reader.LEAN_EMPTIES off, the code before "
                         "2026-12-08 cost33f) then with them (new), alternating; one SQS run per pair")
    args = ap.parse_args()
    global FINAL_ACK
    FINAL_ACK = args.final_ack
    import faulthandler
    faulthandler.dump_traceback_later((150 if args.quick else 900) * max(1, 2 * args.ab), exit=True)  # a hung run ends with its stacks
    # batch 100 at 2,000 (not 6,000): the SQS baseline's sends on moto slow down with the queue's
    # length, and 6,000 did not finish within the 900-s limit even on an idle machine (2026-11-25)
    plan = [(1, 40), (10, 200), (100, 400)] if args.quick else [(1, 400), (10, 2000), (100, 2000)]
    if args.plan:
        plan = [tuple(int(x) for x in part.split(":")) for part in args.plan.split(",")]  # type: ignore[misc]
    threads, queues = 4, 4
    meter = Meter()
    install_hooks(meter)
    HANDLER_CPU.install()
    moto, server, base = start_stack(meter)
    sqs_proc, sqs_url = start_sqs_server()
    print(f"# machine: {platform.machine()}, {os.cpu_count()} cpus, Python {platform.python_version()}, "
          f"{platform.platform()}")
    print(f"# lakeq on the local stack (moto server, ~8 ms a call) vs SQS on the same moto server; "
          f"{threads} client threads, topic of {queues} queues, 100-byte random bodies without keys (one queue per request, as an SQS batch)")
    rows = []
    details = []
    cpus = []
    sqs_reqs = []
    labels = []  # each row's first column: the batch, and with --ab the variant and round
    steps = [(batch, total, "", "") for batch, total in plan]
    if args.ab:
        steps = [(batch, total, variant, str(k)) for k in range(args.ab) for batch, total in plan
                 for variant in ("old", "new")]
    from lakeq.consume import reader as _reader
    try:
        sqs_done: dict = {}
        for batch, total, variant, k in steps:
            print(f"# running batch {batch} ({total} messages) {variant}{k}...", file=sys.stderr, flush=True)
            if variant:
                _reader.LEAN_EMPTIES = variant == "new"
            t_prod, (pc, pw, pr), t_cons, (cc, cw, cr) = lakeq_run(base, meter, batch, total, threads, queues,
                                                                   f"{batch}{variant}{k}")
            details.append((batch, total, *lakeq_run.detail))  # type: ignore[attr-defined]
            cpus.append(lakeq_run.cpu)  # type: ignore[attr-defined]
            if (batch, total, k) not in sqs_done:
                sqs_done[(batch, total, k)] = (*sqs_run(sqs_url, batch, total, threads, f"{batch}{k}"),
                                               sqs_run.requests)  # type: ignore[attr-defined]
            s_send, s_recv, reqs = sqs_done[(batch, total, k)]
            sqs_reqs.append(reqs)
            n = total
            rows.append((batch, n, t_prod, pc, pw, pr, t_cons, cc, cw, cr, s_send, s_recv))
            labels.append(f"{batch}{' ' + variant + k if variant else ''}")
    finally:
        _reader.LEAN_EMPTIES = True
        if HEADS is not None:
            HEADS.stop(timeout=5)
        server.shutdown()
        moto.terminate()
        sqs_proc.terminate()
    print()
    print("## throughput (messages/s)")
    print(f"{'batch':>9} {'msgs':>6} {'lakeq produce':>14} {'sqs send':>9} {'ratio':>6} {'lakeq pull+ack':>15} "
          f"{'sqs recv+del':>13} {'ratio':>6}")
    for lab, (batch, n, tp, pc, pw, pr, tc, cc, cw, cr, ss, sr) in zip(labels, rows):
        print(f"{lab:>9} {n:>6} {n / tp:>14.0f} {n / ss:>9.0f} {ss / tp:>6.2f} {n / tc:>15.0f} {n / sr:>13.0f} "
              f"{sr / tc:>6.2f}")
    print()
    print("## DynamoDB calls and request units per message (steady state: key/client caches warm)")
    print(f"{'batch':>9} {'route':>10} {'calls/msg':>9} {'WRU/msg':>8} {'RRU/msg':>8}  calls")
    for lab, (batch, n, tp, pc, pw, pr, tc, cc, cw, cr, ss, sr) in zip(labels, rows):
        for name, c, w, r in (("produce", pc, pw, pr), ("pull+ack", cc, cw, cr)):
            detail = ", ".join(f"{k.split('.')[1]} {v}" for k, v in sorted(c.items()))
            print(f"{lab:>9} {name:>10} {sum(c.values()) / n:>9.3f} {w / n:>8.3f} {r / n:>8.3f}  {detail}")
    print()
    print("## request units per batch, by operation (pulls: all pull requests of the run, with a piggybacked ack, empty)")
    for lab, (batch, n, pu, cu, pulls, (ew, er)) in zip(labels, details):
        for name, u in (("produce", pu), ("pull+ack", cu)):
            detail = ", ".join(f"{k} {v * batch / n:.2f}" for k, v in sorted(u.items()))
            print(f"{lab:>9} {name:>10}  {detail}")
        e = max(1, pulls["empty"])
        print(f"{lab:>9} {'pulls':>10}  {pulls['pulls']} for {n // batch} batches ({pulls['with ack']} with ack=, "
              f"{pulls['empty']} empty: {er / e:.2f} RRU + {ew / e:.2f} WRU each, {pulls['empty_ack']} of them with ack=; "
              f"{pulls['final acks']} last batches acknowledged on POST /v1/acks)")
    print()
    print("## dollars per million messages (produce + pull + ack), us-east-1 list prices")
    print(f"{'batch':>9} {'lakeq DynamoDB':>15} {'lakeq all-in*':>14} {'via URLs*':>10} {'SQS':>8} "
          f"{'DynamoDB/SQS':>13} {'all-in/SQS':>11} {'URLs/SQS':>9} {'w/o empty pulls**':>18} {'/SQS':>6}")
    for lab, ((batch, n, tp, pc, pw, pr, tc, cc, cw, cr, ss, sr), (*_, (ew, er))) in zip(labels, zip(rows, details)):
        ddb = ((pw + cw) * PRICE_WRU + (pr + cr) * PRICE_RRU) / n * 1e6
        busy = ((pw + cw - ew) * PRICE_WRU + (pr + cr - er) * PRICE_RRU) / n * 1e6
        # produce: 1 HTTP request per batch; pull: 1 per batch (the ack rides on the next pull)
        reqs = 2 / batch
        per_invocation = PRICE_LAMBDA_REQUEST + LAMBDA_MB / 1024 * LAMBDA_MS_ESTIMATE / 1000 * PRICE_LAMBDA_GBS_ARM
        urls = ddb + reqs * per_invocation * 1e6  # ProduceFunctionUrl / ConsumeFunctionUrl: no gateway fee
        allin = urls + reqs * PRICE_HTTP_API_REQUEST * 1e6
        sqs = sqs_price_per_million(batch)
        print(f"{lab:>9} {ddb:>15.3f} {allin:>14.3f} {urls:>10.3f} {sqs:>8.3f} {ddb / sqs:>13.2f} "
              f"{allin / sqs:>11.2f} {urls / sqs:>9.2f} {busy:>18.3f} {busy / sqs:>6.2f}")
    print("* all-in adds API Gateway HTTP API and Lambda requests (2 per batch) and an estimated "
          f"{LAMBDA_MS_ESTIMATE} ms x {LAMBDA_MB} MB arm64 per invocation; via URLs: the same through the "
          "functions' URLs (ProduceFunctionUrl, ConsumeFunctionUrl), without API Gateway's request fee")
    print()
    print("## the Lambda share through the function URLs, from the handlers' measured CPU (every invocation of the "
          f"run, empty pulls included; CPU x {VCPU_MB}/MB below {VCPU_MB} MB + {DDB_CALL_MS:g} ms a store call)")
    mem_p, mem_c = template_memory("ProduceFunction"), template_memory("ConsumeFunction")
    urls_at_template = []
    print(f"{'batch':>9} {'produce CPU ms/inv':>18} {'pull CPU ms/inv':>16} {'calls/inv p/c':>14} "
          + " ".join(f"{f'URLs@{mb}/SQS':>13}" for mb in MEMORY_SIZES)
          + f" {'URLs@template ' + str(mem_p) + '/' + str(mem_c):>24} {'/SQS':>6} {'Lambda/SQS':>10}")
    for lab, ((batch, n, tp, pc, pw, pr, tc, cc, cw, cr, ss, sr), ((pcpu, pn), (ccpu, cn))) in zip(labels, zip(rows, cpus)):
        ddb = ((pw + cw) * PRICE_WRU + (pr + cr) * PRICE_RRU) / n * 1e6
        sqs = sqs_price_per_million(batch)
        np_, nc_ = pn["ProduceFunction"], cn["ConsumeFunction"]
        p_cpu, c_cpu = pcpu["ProduceFunction"] / max(1, np_), ccpu["ConsumeFunction"] / max(1, nc_)
        p_calls, c_calls = sum(pc.values()) / max(1, np_), sum(cc.values()) / max(1, nc_)

        def lam(mbp, mbc):
            return (np_ * lambda_dollars(p_cpu, p_calls, mbp) + nc_ * lambda_dollars(c_cpu, c_calls, mbc)) / n * 1e6

        at = [(ddb + lam(mb, mb)) / sqs for mb in MEMORY_SIZES]
        tmpl = ddb + lam(mem_p, mem_c)
        urls_at_template.append(tmpl)
        print(f"{lab:>9} {p_cpu * 1000:>18.2f} {c_cpu * 1000:>16.2f} {f'{p_calls:.1f}/{c_calls:.1f}':>14} "
              + " ".join(f"{x:>13.2f}" for x in at)
              + f" {tmpl:>24.3f} {tmpl / sqs:>6.2f} {lam(mem_p, mem_c) / sqs:>10.2f}")
    print("** the DynamoDB cost without the pulls that came back empty (threads waiting at the end of a run for "
          "the last batches others hold; their number depends on timing), as SQS's price above counts no empty "
          "receive")
    print()
    print("## both sides as run: SQS's requests counted in its run (the same client loop: an empty answer sleeps "
          "10 ms and tries again until every message is in), empty receives included, as lakeq's empty pulls are")
    print(f"{'batch':>9} {'SQS send/recv/empty/del':>24} {'SQS $/M as run':>14} {'3 a batch':>9} "
          f"{'lakeq pulls (empty) + acks':>26} {'DynamoDB/SQS as run':>19} {'URLs@template/SQS as run':>24} "
          f"{'both w/o empties: DynamoDB/SQS':>30}")
    for lab, ((batch, n, tp, pc, pw, pr, tc, cc, cw, cr, ss, sr), (*_, pulls, (ew, er)), req, tmpl) in zip(labels, zip(
            rows, details, sqs_reqs, urls_at_template)):
        ddb = ((pw + cw) * PRICE_WRU + (pr + cr) * PRICE_RRU) / n * 1e6
        busy = ((pw + cw - ew) * PRICE_WRU + (pr + cr - er) * PRICE_RRU) / n * 1e6
        made = req["send"] + req["receive"] + req["delete"]
        sqs_run_price = made * PRICE_SQS_REQUEST / n * 1e6
        sqs_busy = (made - req["empty"]) * PRICE_SQS_REQUEST / n * 1e6
        counts = f"{req['send']}/{req['receive']}/{req['empty']}/{req['delete']}"
        lakeq_pulls = f"{pulls['pulls']} ({pulls['empty']}) + {pulls['final acks']}"
        print(f"{lab:>9} {counts:>24} {sqs_run_price:>14.3f} {sqs_price_per_million(batch):>9.3f} {lakeq_pulls:>26} "
              f"{ddb / sqs_run_price:>19.2f} {tmpl / sqs_run_price:>24.2f} {busy / sqs_busy:>30.2f}")


if __name__ == "__main__":
    main()
