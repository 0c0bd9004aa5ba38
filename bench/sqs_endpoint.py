"""SQS endpoint benchmark (issue 16 item 4): send-receive-delete through lakeq's SQS-compatible
endpoint with boto3's real ``sqs`` client, DynamoDB calls and request units per action and per
message, dollars per million messages next to Amazon SQS's price, throughput next to SQS on moto.

What runs (as ``bench/queue.py``, whose stack, meter and prices this reuses):
- moto's server as a child process with ``template.yaml``'s tables and the SQS master secret;
- lakeq's real gateway and handlers in this process on a loopback port (one invocation at a time,
  as one warm Lambda container per function), called by boto3 ``sqs`` clients over HTTP, signed
  with SigV4 by lakeq-issued SQS credentials: a producer client's for the sends, a consumer
  client's for receives and deletes (the least-privilege setup; nothing runs as the admin);
- every DynamoDB call the handlers make is counted through botocore event hooks and converted to
  request units from the items' sizes (``bench/queue.py``'s :class:`Meter`; never moto's
  ConsumedCapacity); a WSGI middleware inside the gateway's lock labels each call with the SQS
  action being served (``X-Amz-Target``), so the figures are per action;
- two workloads on one queue (= a lakeq topic of 4 queues): single messages (SendMessage;
  ReceiveMessage MaxNumberOfMessages=1 then DeleteMessage of its handle) and batches of 10
  (SendMessageBatch of 10; ReceiveMessage 10 then DeleteMessageBatch of what it returned);
  receivers loop receive → delete (a lakeq lock holds one batch per lakeq queue, so in-flight
  messages are bounded by the queue's lakeq queues, not by SQS's 120,000);
- every message body is unique: each is checked received exactly once and none lost (on lakeq;
  moto's own SQS server, whose threads race, sometimes delivers one twice: counted), and after
  the run the queue's approximate counts (visible, in flight) must both be 0 (a delete that did
  nothing would leave one in flight);
- the baseline, side by side in the same run: the same messages, the same calls, through SQS on
  moto's own server, for throughput; and SQS's price (standard queue, $0.40 per million requests,
  64 KB chunks, one request per send / receive / delete call), by the formula (3 a batch) and as
  run (the SQS run's requests counted, its empty receives included, as lakeq's are).

Dollars: DynamoDB from the counted request units (the stream's head mover's writes included);
*all-in* adds, per HTTP request actually made (empty receives included), API Gateway HTTP API +
Lambda requests, and Lambda duration **measured**: each handler invocation is timed in-process
(wall time, an upper bound: moto on this loaded machine answers slower than DynamoDB, and CPU
time of the serving thread), and its duration at a memory size is modelled as the measured wait
plus the CPU stretched by Lambda's vCPU share (one vCPU at 1,769 MB), billed per 1 ms; the head
mover's invocations (``HeadsFunction``, one per stream batch of the template's size and window,
as many as the run made) are priced the same way. *URL* is the same without API Gateway's fee,
as a client pays through ``SqsFunction``'s Lambda function URL (template.yaml ``SqsFunctionUrl``).

    python bench/sqs_endpoint.py [--quick] [--interleaved]
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "layers" / "core"), str(ROOT / "layers" / "matcher")]

import argparse  # noqa: E402
import importlib.util  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from collections import Counter, defaultdict  # noqa: E402
from concurrent.futures import ThreadPoolExecutor  # noqa: E402


def _bench_queue():
    spec = importlib.util.spec_from_file_location("bench_queue", ROOT / "bench" / "queue.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


bq = _bench_queue()
FULL_VCPU_MB = 1769  # Lambda: one full vCPU at 1,769 MB, a proportional share below
MEMORY_SIZES = (128, 256, 512, 1024)
HEADS_MB = 512  # HeadsFunction: the template's global MemorySize


def sqs_function_mb() -> int:
    """SqsFunction's MemorySize in template.yaml (its own, else the Globals')."""
    from infra.local import template as tpl
    t = tpl.load_template()
    props = t["Resources"]["SqsFunction"]["Properties"]
    return int(props.get("MemorySize") or t["Globals"]["Function"]["MemorySize"])


def modelled_ms(wall_ms: float, cpu_ms: float, mb: int) -> float:
    """An invocation's Lambda duration at ``mb`` MB from its in-process wall and CPU time here: the
    waiting (wall - CPU: moto's answers on this loaded machine, an upper bound for DynamoDB's) as
    measured, the CPU stretched by the vCPU share below 1,769 MB (one core here = one Lambda vCPU)."""
    return max(0.0, wall_ms - cpu_ms) + cpu_ms * max(1.0, FULL_VCPU_MB / mb)


def billed_gbs(invocations: list, mb: int) -> float:
    """GB-seconds Lambda bills for ``invocations`` [(wall ms, CPU ms)] at ``mb`` MB (1-ms rounding up)."""
    return sum(math.ceil(modelled_ms(w, c, mb)) for w, c in invocations) / 1000 * mb / 1024


METER_CPU = threading.local()  # the serving thread's CPU seconds in the meter's hooks (not lakeq's)


class ActionMeter(bq.Meter):
    """:class:`bench.queue.Meter` that also files each call under the SQS action being served
    (``label``: set by :class:`Label` while the gateway serves one request at a time)."""

    def reset(self):
        super().reset()
        with self.lock:
            self.label: str | None = None
            self.profiling = False  # profile the invocations of the counted phases only
            self.by: dict[str, dict] = defaultdict(lambda: {"requests": 0, "calls": Counter(), "wru": 0.0,
                                                             "rru": 0.0, "empty": 0, "inv": [], "call_cpu": []})

    def timed(self, label: str, wall_ms: float, cpu_ms: float, call_cpu_ms: float = 0.0) -> None:
        """One invocation of a function, in-process wall and thread-CPU milliseconds (``call_cpu_ms``:
        the part of the CPU spent inside botocore's API calls: serialising, signing, sending, parsing)."""
        with self.lock:
            self.by[label]["inv"].append((wall_ms, cpu_ms))
            self.by[label]["call_cpu"].append(call_cpu_ms)

    def after(self, http_response, parsed, model, context, **_):
        # the meter's own CPU (sizing every item of every call) is the benchmark's, not lakeq's: it
        # is kept apart (METER_CPU) and taken out of the invocations' measured CPU
        c0 = time.thread_time()
        try:
            self._after(http_response, parsed, model, context)
        finally:
            METER_CPU.s = getattr(METER_CPU, "s", 0.0) + time.thread_time() - c0

    def _after(self, http_response, parsed, model, context):
        super().after(http_response, parsed, model, context)
        service, op = model.service_model.service_name, model.name
        if service != "dynamodb":
            return
        wru, rru = self.units(service, op, context.get("lakeq_params") or {}, parsed)
        with self.lock:
            a = self.by[self.label or "?"]
            a["calls"][op] += 1
            a["wru"] += wru
            a["rru"] += rru


def time_handlers(meter: ActionMeter, profile=None) -> None:
    """Times every handler invocation the gateway makes (in-process wall time and the serving
    thread's CPU time, inside the handler: not the gateway's event building), filed under the SQS
    action being served. ``profile``: a ``cProfile.Profile`` that also profiles each invocation
    (invocations are serialised, so one profile object serves them all)."""
    from contextlib import contextmanager

    import botocore.client

    from infra.local.handlers import HandlerCache

    orig = HandlerCache.instance
    in_calls = threading.local()  # the serving thread's CPU seconds inside botocore API calls
    api_call = botocore.client.BaseClient._make_api_call

    def _make_api_call(self, *args, **kwargs):
        c0 = time.thread_time()
        try:
            return api_call(self, *args, **kwargs)
        finally:
            in_calls.cpu = getattr(in_calls, "cpu", 0.0) + time.thread_time() - c0
    botocore.client.BaseClient._make_api_call = _make_api_call

    @contextmanager
    def instance(self, spec):
        with orig(self, spec) as fn:
            def timed(event, context):
                w0, c0, k0 = time.perf_counter(), time.thread_time(), getattr(in_calls, "cpu", 0.0)
                m0 = getattr(METER_CPU, "s", 0.0)
                try:
                    if profile is not None and meter.profiling:
                        return profile.runcall(fn, event, context)
                    return fn(event, context)
                finally:
                    label = meter.label
                    if label is not None:
                        metering = getattr(METER_CPU, "s", 0.0) - m0
                        meter.timed(label, (time.perf_counter() - w0 - metering) * 1000,
                                    (time.thread_time() - c0 - metering) * 1000,
                                    (getattr(in_calls, "cpu", 0.0) - k0 - metering) * 1000)
            yield timed
    HandlerCache.instance = instance


class HeadsTimer:
    """``bench.queue.HEADS_HOOK``: labels the head mover's calls and counts and times its invocations."""

    def __init__(self, meter: ActionMeter):
        self.meter, self.t = meter, None

    def __call__(self, on: bool) -> None:
        if on:
            self.meter.label = HEADS_LABEL
            with self.meter.lock:
                self.meter.by[HEADS_LABEL]["requests"] += 1
            self.t = (time.perf_counter(), time.thread_time(), getattr(METER_CPU, "s", 0.0))
        else:
            w0, c0, m0 = self.t
            metering = getattr(METER_CPU, "s", 0.0) - m0
            self.meter.timed(HEADS_LABEL, (time.perf_counter() - w0 - metering) * 1000,
                             (time.thread_time() - c0 - metering) * 1000)
            self.meter.label = None


HEADS_LABEL = "(HeadsFunction)"


class Label:
    """WSGI middleware: names the SQS action each request is (JSON protocol's ``X-Amz-Target``)."""

    def __init__(self, app, meter: ActionMeter):
        self.app, self.meter = app, meter

    def __call__(self, environ, start_response):
        target = environ.get("HTTP_X_AMZ_TARGET") or ""
        label = target.rsplit(".", 1)[-1] if target else environ.get("PATH_INFO", "?")
        with self.meter.lock:
            self.meter.label = label
            self.meter.by[label]["requests"] += 1
        try:
            body = self.app(environ, start_response)
            try:
                return [b"".join(body)]  # the handler runs inside, labelled
            finally:
                if hasattr(body, "close"):
                    body.close()
        finally:
            self.meter.label = None


def body_of(tag: str, i: int) -> str:
    return f"{tag}-{i:07d}-" + bq.BODY[: 100 - len(tag) - 9]


# --- the workload, the same for both sides -----------------------------------------------------
URLS: dict = {}  # batch -> ($ per million through SqsFunction's URL, the same with no wait), for the table as run
REQUESTS: Counter = Counter()  # requests made per run tag (sends, receives empty or not, deletes): SQS's price as run


def run(send_c, recv_c, url: str, batch: int, total: int, threads: int, tag: str, empty: Counter,
        strict: bool = True, interleaved: bool = False) -> tuple:
    """Send ``total`` messages (``batch`` a call), then receive and delete them all; returns
    (send seconds, receive+delete seconds, messages received twice). Checks: none lost, and with
    ``strict`` each received once (moto's own SQS server is not: its threads race).
    ``interleaved``: each thread sends one request, then receives until it gets messages and deletes
    them, and again (the queue never holds more than a few requests' messages: the receives find
    the queue items' hints behind the sends, the case the container's copy of them does not help);
    the two times are then the same, the whole run's."""
    n_calls = total // batch
    lock = threading.Lock()

    def send(k):
        with lock:
            REQUESTS[tag] += 1
        if batch == 1:
            send_c.send_message(QueueUrl=url, MessageBody=body_of(tag, k))
        else:
            out = send_c.send_message_batch(QueueUrl=url, Entries=[
                {"Id": str(j), "MessageBody": body_of(tag, k * batch + j)} for j in range(batch)])
            assert len(out.get("Successful", [])) == batch and not out.get("Failed"), out
    got: Counter = Counter()
    stop = time.monotonic() + 600  # (moto's own SQS server slows down as a queue grows)

    def receive_delete() -> bool:
        msgs = recv_c.receive_message(QueueUrl=url, MaxNumberOfMessages=batch, VisibilityTimeout=60,
                                      WaitTimeSeconds=0).get("Messages", [])
        with lock:
            REQUESTS[tag] += 1 + bool(msgs)  # the receive, and the delete that follows one with messages
        if not msgs:
            with lock:
                empty[tag] += 1
            time.sleep(0.005)
            return False
        if batch == 1:
            recv_c.delete_message(QueueUrl=url, ReceiptHandle=msgs[0]["ReceiptHandle"])
        else:
            out = recv_c.delete_message_batch(QueueUrl=url, Entries=[
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(msgs)])
            assert len(out.get("Successful", [])) == len(msgs) and not out.get("Failed"), out
        with lock:
            got.update(m["Body"] for m in msgs)
        return True

    def consume(_):
        while time.monotonic() < stop:
            with lock:
                if len(got) >= total:
                    return
            receive_delete()

    def send_receive(i):
        for k in range(i, n_calls, threads):
            send(k)
            while time.monotonic() < stop and not receive_delete():
                pass

    t0 = time.perf_counter()
    if interleaved:
        with ThreadPoolExecutor(threads) as ex:
            list(ex.map(send_receive, range(threads)))
            list(ex.map(consume, range(threads)))  # what a receive left (another thread's batch)
        t_send = t_recv = time.perf_counter() - t0
    else:
        with ThreadPoolExecutor(threads) as ex:
            list(ex.map(send, range(n_calls)))
        t_send = time.perf_counter() - t0
        t0 = time.perf_counter()
        with ThreadPoolExecutor(threads) as ex:
            list(ex.map(consume, range(threads)))
        t_recv = time.perf_counter() - t0
    want = {body_of(tag, i) for i in range(n_calls * batch)}
    assert set(got) == want, f"{tag}: {len(want - set(got))} lost, {len(set(got) - want)} unknown"
    twice = sum(1 for v in got.values() if v > 1)
    assert not (strict and twice), f"{tag}: {twice} messages were received twice"
    return t_send, t_recv, twice


def setup_lakeq(base: str, admin_key: str, queue: str):
    """The queue (CreateQueue as the admin's SQS credential) and the two clients with their SQS
    credentials: (sender sqs client, receiver sqs client, queue URL)."""
    import boto3
    import requests

    hdr = {"Authorization": f"Bearer {admin_key}"}
    admin = requests.get(f"{base}/v1/sqs-credentials/admin", headers=hdr)
    admin.raise_for_status()

    def client(akid, secret):
        return boto3.client("sqs", endpoint_url=base, region_name="us-east-1", aws_access_key_id=akid,
                            aws_secret_access_key=secret)
    a = admin.json()
    url = client(a["access_key_id"], a["secret_access_key"]).create_queue(QueueName=queue)["QueueUrl"]
    out = []
    for role in ("producer", "consumer"):
        name = f"{queue}-{role[0]}"
        requests.post(f"{base}/v1/clients", json={"name": name, "role": role, "topics": [queue]},
                      headers=hdr).raise_for_status()
        c = requests.post(f"{base}/v1/clients/{name}/sqs-credentials", headers=hdr)
        c.raise_for_status()
        out.append(client(c.json()["access_key_id"], c.json()["secret_access_key"]))
    return out[0], out[1], url


def check_empty(base: str, admin_key: str, url: str) -> None:
    import boto3
    import requests

    a = requests.get(f"{base}/v1/sqs-credentials/admin", headers={"Authorization": f"Bearer {admin_key}"}).json()
    c = boto3.client("sqs", endpoint_url=base, region_name="us-east-1", aws_access_key_id=a["access_key_id"],
                     aws_secret_access_key=a["secret_access_key"])
    attrs = c.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    left = (attrs["ApproximateNumberOfMessages"], attrs["ApproximateNumberOfMessagesNotVisible"])
    assert left == ("0", "0"), f"after deleting every message: visible, in flight = {left}"


def sqs_price_per_million(batch: int) -> float:
    return 3 * math.ceil(batch / 10) / batch * bq.PRICE_SQS_REQUEST * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="small runs, under a minute")
    ap.add_argument("--threads", type=int, default=2, help="client threads per phase (default 2)")
    ap.add_argument("--profile", metavar="FILE", help="also profile the handlers' invocations (cProfile stats to FILE; "
                    "the counted single-message phase only; the timings then include the profiler's overhead)")
    ap.add_argument("--interleaved", action="store_true",
                    help="each client thread sends one request, then receives and deletes, and again (the "
                         "queue stays nearly empty; default: send everything, then receive everything)")
    args = ap.parse_args()
    import faulthandler
    faulthandler.dump_traceback_later(170 if args.quick else 900, exit=True)
    plan = [(1, 40), (10, 200)] if args.quick else [(1, 200), (10, 1000)]
    threads = args.threads
    meter = ActionMeter()
    bq.install_hooks(meter)
    profile = None
    if args.profile:
        import cProfile
        profile = cProfile.Profile()
    time_handlers(meter, profile)
    moto, server, base = bq.start_stack(wrap=lambda app: Label(app, meter))
    # the SegmentsTable stream's head mover (issue 16 item 3): its writes and invocations filed
    # under its own label (its stream batches: the template's batch size and window, as pumped here)
    bq.HEADS_HOOK = HeadsTimer(meter)
    sqs_mb = sqs_function_mb()
    import boto3

    from infra.local import template as tpl
    tpl.create_secrets(boto3.client("secretsmanager"), tpl.load_template(), tpl.LOCAL_STACK)
    admin_key = os.environ["LAKEQ_ADMIN_KEY"]
    sqs_proc, sqs_url = bq.start_sqs_server()
    print(f"# machine: {platform.machine()}, {os.cpu_count()} cpus, Python {platform.python_version()}, "
          f"{platform.platform()}")
    print(f"# SQS endpoint on the local stack (moto server, serialised) vs SQS on moto's own server; "
          f"{threads} client threads a phase, one queue (a lakeq topic of 4 queues), 100-byte bodies, "
          "SigV4 with a producer's and a consumer's lakeq SQS credentials; workload: "
          + ("interleaved (each thread: send, receive, delete)" if args.interleaved
             else "backlog (send everything, then receive everything)"))
    rows = []
    try:
        for batch, total in plan:
            tag = f"b{batch}"
            print(f"# running batch {batch} ({total} messages)...", file=sys.stderr, flush=True)
            send_c, recv_c, url = setup_lakeq(base, admin_key, f"sqsbench{batch}")
            empty: Counter = Counter()
            # warm: the containers' caches (credentials, clients, the queue's SQS clients) as a warm Lambda
            run(send_c, recv_c, url, batch, batch, 1, f"w{batch}", empty)
            if bq.HEADS is not None:  # the warm-up's head moves (the mover's first, cold call) before the count
                assert bq.HEADS.drain(60)[0], "the head mover did not catch up"
            meter.reset()
            meter.profiling = batch == 1
            t_send, t_recv, _ = run(send_c, recv_c, url, batch, total, threads, tag, empty,
                                    interleaved=args.interleaved)
            meter.profiling = False
            if bq.HEADS is not None:  # the head mover's last batches belong to this run
                assert bq.HEADS.drain(60)[0], "the head mover did not catch up"
            by = {k: dict(v, calls=Counter(v["calls"]), inv=list(v["inv"]), call_cpu=list(v["call_cpu"]))
                  for k, v in meter.by.items()}
            check_empty(base, admin_key, url)
            s = boto3.client("sqs", endpoint_url=sqs_url, region_name="us-east-1")
            surl = s.create_queue(QueueName=f"sqsbench{batch}")["QueueUrl"]
            run(s, s, surl, batch, batch, 1, f"sw{batch}", Counter(), strict=False)
            s_send, s_recv, s_twice = run(s, s, surl, batch, total, threads, f"s{batch}", empty, strict=False,
                                          interleaved=args.interleaved)
            rows.append((batch, total, by, empty[tag], (empty[f"s{batch}"], s_twice), t_send, t_recv, s_send,
                         s_recv))
    finally:
        if bq.HEADS is not None:
            bq.HEADS.stop(timeout=5)
        server.shutdown()
        moto.terminate()
        sqs_proc.terminate()

    print()
    print("## DynamoDB calls and request units per request, by SQS action (counted; caches warm); the handler's")
    print("## in-process time per invocation (wall: an upper bound, moto on this loaded machine answers slower")
    print("## than DynamoDB; CPU: the serving thread's); (HeadsFunction): per invocation of the stream's head mover")
    print("## (in calls: the part of the CPU inside botocore's API calls — serialising, signing, HTTP, parsing)")
    print(f"{'batch':>5} {'action':<20} {'requests':>8} {'calls/req':>9} {'RRU/req':>8} {'WRU/req':>8} "
          f"{'wall ms':>8} {'CPU ms':>7} {'in calls':>8}  calls per request")
    for batch, n, by, *_ in rows:
        for action, a in sorted(by.items(), key=lambda kv: kv[0]):
            r = max(1, a["requests"])
            detail = ", ".join(f"{k} {v / r:g}" for k, v in sorted(a["calls"].items()))
            inv = a["inv"] or [(0.0, 0.0)]
            wall = sum(w for w, _ in inv) / len(inv)
            cpu = sum(c for _, c in inv) / len(inv)
            in_calls = sum(a.get("call_cpu") or [0.0]) / len(inv)
            print(f"{batch:>5} {action:<20} {a['requests']:>8} {sum(a['calls'].values()) / r:>9.2f} "
                  f"{a['rru'] / r:>8.2f} {a['wru'] / r:>8.2f} {wall:>8.1f} {cpu:>7.1f} {in_calls:>8.1f}  {detail}")
    print()
    print("## Lambda duration per message at each memory size (modelled from the measured wall and CPU: the wait as")
    print("## measured, the CPU stretched by the vCPU share, 1,769 MB = one vCPU; billed rounded up to 1 ms)")
    print(f"{'batch':>5} {'MB':>5} {'SqsFunction ms/req':>18} {'p50 ms':>7} {'max ms':>7} {'GB-s $/M msgs':>13} "
          f"{'HeadsFunction inv/msg':>21} {'its ms':>7}")
    for batch, n, by, *_ in rows:
        sqs_inv = [x for k, a in by.items() if k != HEADS_LABEL for x in a["inv"]]
        h = by.get(HEADS_LABEL, {"inv": [], "requests": 0})
        h_ms = sum(modelled_ms(w, c, HEADS_MB) for w, c in h["inv"]) / max(1, len(h["inv"]))
        for mb in MEMORY_SIZES:
            ms = sorted(modelled_ms(w, c, mb) for w, c in sqs_inv) or [0.0]
            gbs = billed_gbs(sqs_inv, mb) / n * bq.PRICE_LAMBDA_GBS_ARM * 1e6
            mark = " <- template" if mb == sqs_mb else ""
            print(f"{batch:>5} {mb:>5} {sum(ms) / len(ms):>18.1f} {ms[len(ms) // 2]:>7.1f} {ms[-1]:>7.1f} "
                  f"{gbs:>13.3f} {h['requests'] / n:>21.3f} {h_ms:>7.1f}{mark}")
    print()
    print("## per message (send + receive + delete), us-east-1 list prices, $ per million messages")
    print(f"{'batch':>5} {'msgs':>6} {'empty recv':>10} {'calls':>6} {'RRU':>6} {'WRU':>6} {'DynamoDB':>9} "
          f"{'requests':>8} {'heads inv':>9} {'Lambda':>7} {'Lambda lo':>9} {'all-in*':>8} {'URL**':>7} "
          f"{'URL lo':>7} {'SQS':>6} {'DDB/SQS':>8} {'all-in/SQS':>10} {'URL/SQS':>8} {'URL lo/SQS':>10}")
    for batch, n, by, emp, _, *_t in rows:
        calls = sum(sum(a["calls"].values()) for a in by.values()) / n
        rru = sum(a["rru"] for a in by.values()) / n
        wru = sum(a["wru"] for a in by.values()) / n
        reqs = sum(a["requests"] for k, a in by.items() if k != HEADS_LABEL) / n
        h = by.get(HEADS_LABEL, {"inv": [], "requests": 0})
        ddb = (rru * bq.PRICE_RRU + wru * bq.PRICE_WRU) * 1e6
        sqs_inv = [x for k, a in by.items() if k != HEADS_LABEL for x in a["inv"]]

        def lambda_cost(inv, heads_inv):
            # SqsFunction's requests and duration at its template memory size, plus the head
            # mover's invocations (one per stream batch, as many as this run made) at its own
            return (reqs * bq.PRICE_LAMBDA_REQUEST + billed_gbs(inv, sqs_mb) / n * bq.PRICE_LAMBDA_GBS_ARM
                    + h["requests"] / n * bq.PRICE_LAMBDA_REQUEST
                    + billed_gbs(heads_inv, HEADS_MB) / n * bq.PRICE_LAMBDA_GBS_ARM) * 1e6
        lam = lambda_cost(sqs_inv, h["inv"])  # the measured wait (an upper bound)
        lam_lo = lambda_cost([(c, c) for _, c in sqs_inv], [(c, c) for _, c in h["inv"]])  # no wait at all
        url, url_lo = ddb + lam, ddb + lam_lo
        URLS[batch] = (url, url_lo)
        allin = url + reqs * bq.PRICE_HTTP_API_REQUEST * 1e6
        sqs = sqs_price_per_million(batch)
        print(f"{batch:>5} {n:>6} {emp:>10} {calls:>6.2f} {rru:>6.2f} {wru:>6.2f} {ddb:>9.3f} {reqs:>8.2f} "
              f"{h['requests'] / n:>9.3f} {lam:>7.3f} {lam_lo:>9.3f} {allin:>8.3f} {url:>7.3f} {url_lo:>7.3f} "
              f"{sqs:>6.3f} {ddb / sqs:>8.2f} {allin / sqs:>10.2f} {url / sqs:>8.2f} {url_lo / sqs:>10.2f}")
    print(f"* all-in: DynamoDB (the head mover's writes included) + Lambda + API Gateway HTTP API "
          f"${bq.PRICE_HTTP_API_REQUEST * 1e6:.2f}/M per HTTP request. Lambda: SqsFunction's requests "
          f"(${bq.PRICE_LAMBDA_REQUEST * 1e6:.2f}/M) and measured duration at its template's {sqs_mb} MB arm64, and")
    print(f"  HeadsFunction's invocations in this run ('heads inv' per message) at {HEADS_MB} MB; 'Lambda' takes each "
          "invocation's in-process wall time (an upper bound), 'lo' its CPU time alone (no wait for DynamoDB: a")
    print(f"  lower bound). SQS: one request per call at ${bq.PRICE_SQS_REQUEST * 1e6:.2f}/M")
    print("** URL: the same through SqsFunction's Lambda function URL (no API Gateway fee)")
    print()
    print("## both sides as run: SQS's requests counted in its run (the same client loop as lakeq's: sends, receives "
          "empty or not, deletes), as lakeq's empty receives are counted on its side")
    print(f"{'batch':>5} {'SQS requests':>12} {'SQS empty recv':>14} {'SQS $/M as run':>14} {'3 a batch':>9} "
          f"{'lakeq empty recv':>16} {'DDB/SQS as run':>14} {'URL/SQS as run':>14} {'URL lo/SQS as run':>17}")
    for batch, n, by, emp, semp, *_t in rows:
        rru = sum(a["rru"] for a in by.values()) / n
        wru = sum(a["wru"] for a in by.values()) / n
        ddb = (rru * bq.PRICE_RRU + wru * bq.PRICE_WRU) * 1e6
        made = REQUESTS[f"s{batch}"]
        sqs_as_run = made * bq.PRICE_SQS_REQUEST / n * 1e6
        url, url_lo = URLS[batch]
        print(f"{batch:>5} {made:>12} {semp[0]:>14} {sqs_as_run:>14.3f} {sqs_price_per_million(batch):>9.3f} "
              f"{emp:>16} {ddb / sqs_as_run:>14.2f} {url / sqs_as_run:>14.2f} {url_lo / sqs_as_run:>17.2f}")
    print()
    print("## throughput (messages/s), lakeq's SQS endpoint vs SQS on moto (read the ratio)")
    print(f"{'batch':>5} {'msgs':>6} {'lakeq send':>10} {'SQS send':>9} {'ratio':>6} {'lakeq recv+del':>14} "
          f"{'SQS recv+del':>12} {'ratio':>6} {'SQS empty recv':>14} {'SQS twice':>9}")
    for batch, n, by, emp, semp, ts, tr, ss, sr in rows:
        print(f"{batch:>5} {n:>6} {n / ts:>10.0f} {n / ss:>9.0f} {ss / ts:>6.2f} {n / tr:>14.0f} {n / sr:>12.0f} "
              f"{sr / tr:>6.2f} {semp[0]:>14} {semp[1]:>9}")
    if profile is not None:
        profile.dump_stats(args.profile)
        print(f"# handler profile written to {args.profile} (python -m pstats {args.profile})")


if __name__ == "__main__":
    main()
