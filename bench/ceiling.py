"""How far one queue and one topic go (issue 33 item 3): contention of concurrent producers on a
queue's head, measured on the local stack, and the ceiling it implies on DynamoDB.

An append to a lakeq queue is a conditional write at the queue's head (``LogRepo.append``: a
PutItem of the next segment, ``attribute_not_exists``; a transaction when the messages carry ids).
Concurrent producers of one queue race for the head: one wins a round, the others' writes fail
their condition (and are billed: DynamoDB charges a failed conditional write like a write) and retry
(``lakeq.store.append.append_at_head``, ``backoff.cas``: up to 40 rounds, then 503 ``busy``).
Each cell runs the chosen loops side by side (``--loops``, :data:`LOOPS`): *old*, the loop before
issue 33 item 3 (a lost round waits the backoff, then reads the head fresh: the queue item's
GetItem and the newest segment's Query); *learn* (a lost put without ids gets the winner's segment
back, ``ReturnValuesOnConditionCheckFailure``, and its write's first lost round writes at its end
at once: no read, no wait; a later lost round waits and reads fresh as *old*); *new* (*learn*, and
that fresh read is the chain's consistent Query alone when it reaches the end the last lost put
returned: ``lakeq.store.append.KNOWN_END_READ``). The older loops are the new code with
``lakeq.store.append.LEARN_HEAD`` / ``KNOWN_END_READ`` off. What this measures, per workload (N
producer threads calling the produce use case itself, ``lakeq.produce.service.produce``,
concurrently, against moto's server, which serves one request at a time as DynamoDB is atomic per
item — ``infra.local.moto_serial``):

- rounds per append (conditional writes sent per append that landed), head reads per append (the
  newest segment's Query, the queue item's GetItem), every store call per append, backoff waits per
  append, requests answered 503, the client process's CPU per append (moto runs in its own);
- per landed put, the head reads its producer made since its previous put (0: its base came back
  from its lost put), which the model turns into the time between head moves;
- the segment item's size as DynamoDB bills it (its write units).

The ceiling on DynamoDB (printed, arithmetic in docs/benchmarks.md): one queue's appends are
serial (one writer wins a round, and the next put can land only once its writer knows the new
head), so a queue does at most ``1 / (reads × t_read + t_write)`` appends a second (``reads``: the
measured head reads before a landed put; 0 when every landed put is at a learned base: the bound
``1 / t_write``), and its partition at most 1,000 WCU a second, of which each append spends
``rounds × WCU``. The DynamoDB latencies used are assumptions (AWS's
"single-digit milliseconds"; not measurable here), stated as such.

    python bench/ceiling.py [--quick] [--loops learn,new] [--producers N ...]
"""
from __future__ import annotations

import _local  # noqa: I001  (the script's folder is first on sys.path; in_process then drops it)

_local.in_process()

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from collections import Counter  # noqa: E402
from concurrent.futures import ThreadPoolExecutor  # noqa: E402

BODY = "x" * 100  # bodies of 100 bytes (the queue bench's size)
WCU_KB = 1024
PARTITION_WCU_S = 1000  # DynamoDB: per partition (a partition key never exceeds it)
# assumed DynamoDB latencies in the same region (not measured: no AWS from this machine)
T_READ_MS, T_WRITE_MS, T_TRANSACT_MS = 5.0, 8.0, 15.0
QUEUES_MAX = 64
LOOPS = {
    "old": "the loop before issue 33 item 3: after a lost round a wait, then a fresh head read",
    "learn": "a lost put learns the head and its write's first lost round goes again at once; a later "
             "round waits and reads the head fresh (the queue item's GetItem, then the chain's Query)",
    "new": "learn, and a later round's fresh read is the chain's consistent Query alone when it "
           "reaches the end its last lost put returned (lakeq.store.append.KNOWN_END_READ)",
}


class Counts:
    """The store calls of the run (``bench/queue.py``'s botocore hooks on every client call them):
    per operation, sent and failed on a condition; the bytes of each segment put."""

    def __init__(self):
        self.lock = threading.Lock()
        self.ops: Counter = Counter()
        self.seg_bytes: list[int] = []
        self.mine = threading.local()  # per producer thread (botocore calls the hooks in the caller's)

    def before(self, params, model, context, **_):
        context["bench_params"] = params

    def after(self, http_response, parsed, model, context, **_):
        op = model.name
        err = (parsed.get("Error") or {}).get("Code") if isinstance(parsed, dict) else None
        params = context.get("bench_params") or {}
        table = params.get("TableName", "").lower()
        with self.lock:
            self.ops[op] += 1
            self.ops["calls"] += 1
            if err in ("ConditionalCheckFailedException", "TransactionCanceledException"):
                self.ops[op + " lost"] += 1
            if (op == "Query" and "segments" in table) or (op == "GetItem" and table.endswith("queues")):
                self.ops["head reads"] += 1  # the newest segment's Query, the queue item's GetItem
                self.mine.reads = getattr(self.mine, "reads", 0) + 1
            if (op == "PutItem" and "segments" in table) or op == "TransactWriteItems":
                # an append's write: how many head reads this producer made since its last one (0: its
                # base came back from its lost put); the head moves after a landed one's reads and write
                reads, self.mine.reads = getattr(self.mine, "reads", 0), 0
                if not err:
                    self.ops["landed learned" if not reads else "landed read"] += 1
                    self.ops["landed reads"] += reads
            if op == "PutItem" and "segments" in table and not err:
                self.seg_bytes.append(item_size(params.get("Item") or {}))


def item_size(item: dict) -> int:
    """A DynamoDB item's size as billed (AWS, "Item sizes and formats"): per attribute its name's
    UTF-8 bytes plus its value's: a string its UTF-8 bytes, a binary its raw bytes (the wire's
    base64 decoded), a number (significant digits / 2) + 1 bytes, a boolean or null 1 byte.

    >>> item_size({"pq": {"S": "t#0"}, "base": {"N": "1234"}, "z": {"BOOL": False}, "d": {"B": b"ab"}})
    17
    """
    import base64

    size = 0
    for name, value in item.items():
        size += len(name.encode("utf-8"))
        (kind, v), = value.items()
        if kind == "S":
            size += len(v.encode("utf-8"))
        elif kind == "B":
            size += len(v) if isinstance(v, (bytes, bytearray)) else len(base64.b64decode(v))
        elif kind == "N":
            digits = v.lstrip("-").replace(".", "").strip("0") or "0"
            size += (len(digits) + 1) // 2 + 1
        else:  # BOOL, NULL
            size += 1
    return size


def start() -> object:
    from infra.local import template as tpl
    from infra.local.__main__ import free_port, start_moto, wait_for_moto

    port = free_port()
    moto = start_moto(port, os.path.join("/tmp", f"lakeq-bench-ceiling-{port}.log"))
    url = f"http://127.0.0.1:{port}"
    wait_for_moto(moto, url)
    os.environ["AWS_ENDPOINT_URL"] = url
    import boto3

    template = tpl.load_template()
    tpl.create_tables(boto3.client("dynamodb"), tpl.make_context(template, tpl.LOCAL_STACK))
    return moto


def run(counts: Counts, name: str, queues: int, producers: int, requests: int, batch: int, ids: bool,
        loop: str) -> dict:
    """One cell: ``requests`` produce requests by ``producers`` threads with append loop ``loop``
    (:data:`LOOPS`); ``learn`` below: the append loop
    learns the head from a lost put (issue 33 item 3), else the loop before it (a wait, then a fresh
    head read: ``lakeq.store.append.LEARN_HEAD`` False)."""
    from lakeq.admin import service as admin
    from lakeq.admin.auth import Principal
    from lakeq.common import backoff
    from lakeq.common.errors import Unavailable
    from lakeq.produce.service import produce
    from lakeq.store import append

    learn = loop != "old"
    append.LEARN_HEAD = learn
    append.KNOWN_END_READ = loop == "new"

    root = Principal(admin=True)
    admin.create_topic(root, json.dumps({"name": name, "queues": queues}))
    admin.create_client(root, json.dumps({"name": f"p-{name}", "role": "producer", "topics": [name]}))
    busy = Counter()

    def one(i: int) -> None:
        msgs = [{"body": BODY, **({"id": f"{name}-{i}-{j}"} if ids else {})} for j in range(batch)]
        raw = json.dumps({"producer": f"p-{name}", "messages": msgs})
        for _ in range(100):  # a 503 is retried with the same ids, as the API tells clients
            try:
                produce(root, name, raw)
                return
            except Unavailable:
                busy["503"] += 1

    with counts.lock:
        counts.ops.clear()
        counts.seg_bytes.clear()
    waits = Counter()
    real_sleep = backoff.sleep

    def sleep(*a, **k):
        with counts.lock:
            waits["n"] += 1
        real_sleep(*a, **k)
    backoff.sleep = sleep
    t0 = time.perf_counter()
    c0 = time.process_time()
    try:
        with ThreadPoolExecutor(producers) as ex:
            list(ex.map(one, range(requests)))
    finally:
        backoff.sleep = real_sleep
    wall = time.perf_counter() - t0
    cpu = time.process_time() - c0
    ops = Counter(counts.ops)
    write_op = "TransactWriteItems" if ids else "PutItem"
    sent, lost = ops[write_op], ops[write_op + " lost"]
    landed = sent - lost
    seg = sorted(counts.seg_bytes)
    per = max(1, landed)
    return {"name": name, "queues": queues, "producers": producers, "batch": batch, "ids": ids, "learn": learn,
            "loop": loop,             "appends": landed, "rounds": sent / per, "lost_per_append": lost / per,
            "head_reads": ops["head reads"] / per, "calls": ops["calls"] / per, "waits": waits["n"] / per,
            "learned": ops["landed learned"] / max(1, ops["landed learned"] + ops["landed read"]),
            "reads_before_landed": ops["landed reads"] / max(1, ops["landed learned"] + ops["landed read"]),
            "busy": busy["503"], "wall_s": wall, "cpu_s": cpu, "appends_s_local": landed / wall,
            "segment_bytes": seg[len(seg) // 2] if seg else None}


def ceiling(r: dict) -> dict:
    """Messages a second one queue (and a topic of 64) can take on DynamoDB at the measured rounds.

    A queue's appends are serial: the head moves once a landed put, and the next put can land only
    once its writer knows the new head. A put whose base came back from its writer's lost put
    (``learned``, the new loop's at-once round) follows the head move by one write; a put whose
    base was read (every put of the old loop, a write's first and later rounds in the new one, a
    transaction's every round) by its reads and a write: a first round's one read (the newest
    segment's Query), a later round's two (the queue item's GetItem, then the consistent Query).
    Backoff waits are left out: an upper bound. ``mix``: at the measured reads before each landed
    put; ``bound``: every landed put at a learned base (the best the new loop can do: 1 / t_write),
    or one read a put (the old loop, as the model had it before). The partition bounds a queue at
    1,000 WCU a second over ``rounds × WCU`` an append. Per queue the lower of the two terms."""
    wcu = max(1, math.ceil((r["segment_bytes"] or 1) / WCU_KB)) * (2 if r["ids"] else 1)
    t_write = (T_TRANSACT_MS if r["ids"] else T_WRITE_MS) / 1000
    t_read = T_READ_MS / 1000
    mix = 1 / (r["reads_before_landed"] * t_read + t_write)  # the reads of a landed put: 0, 1 or 2
    bound = 1 / (t_write if r["learn"] and not r["ids"] else t_read + t_write)
    by_wcu = PARTITION_WCU_S / (wcu * r["rounds"])
    out = {"wcu_per_write": wcu, "appends_s_latency": bound, "appends_s_mix": mix, "appends_s_wcu": by_wcu,
           "binds": "WCU" if by_wcu < mix else "latency"}
    for k, v in (("mix", mix), ("bound", bound)):
        out[f"queue_msgs_s_{k}"] = min(v, by_wcu) * r["batch"]
        out[f"topic64_msgs_s_{k}"] = out[f"queue_msgs_s_{k}"] * QUEUES_MAX
    out["queue_msgs_s"], out["topic64_msgs_s"] = out["queue_msgs_s_bound"], out["topic64_msgs_s_bound"]
    return out


TARGET_TOPIC_MSGS_S = 10_000


def needs(per_queue_msgs_s: float) -> str:
    """What the 10,000-a-second target asks of a topic whose queues each take ``per_queue_msgs_s``:
    the queues, or at 64 queues the round time (one message an append) or the messages an append.

    >>> needs(125.0)
    '80 queues, or at 64 queues a 6.4-ms round or 1.25 messages an append'
    """
    per = TARGET_TOPIC_MSGS_S / QUEUES_MAX
    return (f"{math.ceil(TARGET_TOPIC_MSGS_S / per_queue_msgs_s)} queues, or at {QUEUES_MAX} queues a "
            f"{1000 / per:.1f}-ms round or {per / per_queue_msgs_s:.2f} messages an append")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer producers and requests (under a minute)")
    ap.add_argument("--loops", default="learn,new",
                    help="the append loops to run side by side, of "
                    + ", ".join(f"{k} ({v})" for k, v in LOOPS.items()))
    ap.add_argument("--at-once", type=int, default=None,
                    help="the new loop's lost rounds retried without a wait (lakeq.store.append.AT_ONCE_LOSSES)")
    ap.add_argument("--producers", type=int, nargs="*", help="only these producer counts on one queue (batch 1)")
    ap.add_argument("--cells", nargs="*", help="only these cells, each queues:producers:batch:ids|no (64:64:1:no)")
    args = ap.parse_args()
    from lakeq.store import append

    if args.at_once is not None:
        append.AT_ONCE_LOSSES = args.at_once
    counts = Counts()
    _local.bench_queue().install_hooks(counts)  # the queue bench's botocore hooks, with these counts
    moto = start()
    reqs = 40 if args.quick else 300
    plan = [(1, n, 1, False) for n in ((1, 4, 16) if args.quick else (1, 2, 4, 8, 16))]
    plan += [(1, 4, 10, False)] + ([] if args.quick else [(1, 4, 1, True)])
    plan += [(64, n, 1, False) for n in ((64,) if args.quick else (16, 64))]
    if args.producers:
        plan = [(1, n, 1, False) for n in args.producers]
    if args.cells:
        plan = [(int(q), int(n), int(b), i == "ids") for q, n, b, i in (c.split(":") for c in args.cells)]
    loops = args.loops.split(",")
    assert all(x in LOOPS for x in loops), f"--loops: some of {', '.join(LOOPS)}"
    print(f"# bench/ceiling.py {'--quick ' if args.quick else ''}· {platform.machine()} · {os.cpu_count()} CPUs · "
          f"python {platform.python_version()} · load {os.getloadavg()[0]:.1f} · {reqs} requests a cell; "
          f"AT_ONCE_LOSSES {append.AT_ONCE_LOSSES}; loops: " + "; ".join(f"{k} = {LOOPS[k]}" for k in loops))
    print("| queues | producers | batch | ids | loop | appends | rounds / append | lost / append | head reads / append "
          "| store calls / append | waits / append | 503s | local appends/s | CPU ms / append | segment bytes "
          "| WCU / write | landed at a learned head | reads before a landed put | binds "
          "| DynamoDB msgs/s per queue: mix / bound | … per 64-queue topic: mix / bound |")
    print("|---" * 21 + "|")
    single: dict[bool, list] = {}
    try:
        run(counts, "warm", 1, 2, 10, 1, False, True)  # botocore's clients and models made, not in a cell
        for k, (queues, producers, batch, ids) in enumerate(plan):
            for loop in loops:
                r = run(counts, f"ceil{k}{loop[0]}", queues, producers, reqs, batch, ids, loop)
                c = ceiling(r)
                print(f"| {queues} | {producers} | {batch} | {'yes' if ids else 'no'} | {loop} | "
                      f"{r['appends']} | {r['rounds']:.2f} | {r['lost_per_append']:.2f} | {r['head_reads']:.2f} | "
                      f"{r['calls']:.2f} | {r['waits']:.2f} | {r['busy']} | {r['appends_s_local']:.0f} | "
                      f"{1000 * r['cpu_s'] / max(1, r['appends']):.0f} | {r['segment_bytes']} | "
                      f"{c['wcu_per_write']} | {r['learned']:.2f} | {r['reads_before_landed']:.2f} | {c['binds']} | "
                      f"{c['queue_msgs_s_mix']:,.0f} / {c['queue_msgs_s_bound']:,.0f} | "
                      f"{c['topic64_msgs_s_mix']:,.0f} / {c['topic64_msgs_s_bound']:,.0f} |", flush=True)
                if batch == 1 and not ids:
                    single.setdefault(loop, []).append((queues, producers, c))
    finally:
        moto.terminate()
    print(f"\nassumed DynamoDB latencies: head read {T_READ_MS} ms, PutItem {T_WRITE_MS} ms, transaction "
          f"{T_TRANSACT_MS} ms; partition {PARTITION_WCU_S} WCU/s; a failed conditional write is billed; "
          f"time between head moves: the measured reads before a landed put × read + write (mix), "
          f"write alone for learn / new, read + write for old (bound); "
          f"load at the end {os.getloadavg()[0]:.1f}")
    for loop, cells in single.items():
        # the busiest one-queue cell: every queue of a topic at its ceiling is a queue that busy
        q, n, c = max((x for x in cells if x[0] == 1), key=lambda x: x[1], default=cells[-1])
        print(f"single messages, {loop} loop, at {n} producers on {q} queue(s): "
              f"{c['queue_msgs_s_mix']:,.0f} a second a queue (mix) → {c['topic64_msgs_s_mix']:,.0f} a 64-queue "
              f"topic; {TARGET_TOPIC_MSGS_S:,} needs {needs(c['queue_msgs_s_mix'])} (bound "
              f"{c['queue_msgs_s_bound']:,.0f}: {needs(c['queue_msgs_s_bound'])}); {c['binds']} binds "
              f"(partition: {c['appends_s_wcu']:,.0f} appends a second at {c['wcu_per_write']} WCU)")


if __name__ == "__main__":
    main()
