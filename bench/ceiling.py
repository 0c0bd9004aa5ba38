"""How far one queue and one topic go (issue 33 item 3): contention of concurrent producers on a
queue's head, measured on the local stack, and the ceiling it implies on DynamoDB.

An append to a lakeq queue is a conditional write at the queue's head (``LogRepo.append``: a
PutItem of the next segment, ``attribute_not_exists``; a transaction when the messages carry ids).
Concurrent producers of one queue race for the head: one wins a round, the others' writes fail
their condition (and are billed: DynamoDB charges a failed conditional write like a write) and retry
(``lakeq.store.append.append_at_head``, ``backoff.cas``: up to 40 rounds, then 503 ``busy``). Each
cell runs both loops side by side: *old*, the loop before issue 33 item 3 (a lost round waits the
backoff, then reads the head fresh: the queue item's GetItem and the newest segment's Query), and
*new* (a lost put without ids gets the winner's segment back, ``ReturnValuesOnConditionCheckFailure``,
and writes at its end at once: no read, no wait); the old loop is the new code with
``lakeq.store.append.LEARN_HEAD`` off (its put still asks for the item, and ignores it). What this
measures, per workload (N producer threads calling the produce use case
itself, ``lakeq.produce.service.produce``, concurrently, against moto's server, which serves one
request at a time as DynamoDB is atomic per item — ``infra.local.moto_serial``):

- rounds per append (conditional writes sent per append that landed), head reads per append (the
  newest segment's Query, the queue item's GetItem), every store call per append, backoff waits per
  append, requests answered 503, the client process's CPU per append (moto runs in its own);
- the segment item's size (its write units), from the bytes the use case wrote.

The ceiling on DynamoDB (printed, arithmetic in docs/benchmarks.md): one queue's appends are
serial (only one writer wins a round; old: a round is a head read then a write, new: one write), so
a queue does at most ``1 / (t_read + t_write)`` (old) or ``1 / t_write`` (new) appends a second, and
its partition at most 1,000 WCU a second, of which each append spends ``rounds × WCU``.
The DynamoDB latencies used are assumptions (AWS's
"single-digit milliseconds"; not measurable here), stated as such.

    python bench/ceiling.py [--quick] [--only old|new]
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


class Counts:
    """The store calls of the run (``bench/queue.py``'s botocore hooks on every client call them):
    per operation, sent and failed on a condition; the bytes of each segment put."""

    def __init__(self):
        self.lock = threading.Lock()
        self.ops: Counter = Counter()
        self.seg_bytes: list[int] = []

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
            if op == "PutItem" and "segments" in params.get("TableName", "").lower() and not err:
                item = params.get("Item") or {}
                self.seg_bytes.append(sum(len(k) + len(str(v)) for k, v in item.items()))


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
        learn: bool) -> dict:
    """One cell: ``requests`` produce requests by ``producers`` threads; ``learn``: the append loop
    learns the head from a lost put (issue 33 item 3), else the loop before it (a wait, then a fresh
    head read: ``lakeq.store.append.LEARN_HEAD`` False)."""
    from lakeq.admin import service as admin
    from lakeq.admin.auth import Principal
    from lakeq.common import backoff
    from lakeq.common.errors import Unavailable
    from lakeq.produce.service import produce
    from lakeq.store import append

    append.LEARN_HEAD = learn

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
            "appends": landed, "rounds": sent / per, "lost_per_append": lost / per,
            "head_reads": ops["head reads"] / per, "calls": ops["calls"] / per, "waits": waits["n"] / per,
            "busy": busy["503"], "wall_s": wall, "cpu_s": cpu, "appends_s_local": landed / wall,
            "segment_bytes": seg[len(seg) // 2] if seg else None}


def ceiling(r: dict) -> dict:
    """Messages a second one queue (and a topic of 64) can take on DynamoDB at the measured rounds.

    A queue's appends are serial: the head moves once a round. Before (``learn`` False) a round on a
    contended head is a head read then a write (the wait between them left out); with a lost put
    learning the head (the hot path: no ids), a loser writes again at once, so a round is one write.
    A transaction (ids) still reads the head: its round is unchanged."""
    wcu = max(1, math.ceil((r["segment_bytes"] or 1) / WCU_KB)) * (2 if r["ids"] else 1)
    t_write = T_TRANSACT_MS if r["ids"] else T_WRITE_MS
    t_round = (t_write if r["learn"] and not r["ids"] else T_READ_MS + t_write) / 1000
    by_latency = 1 / t_round  # appends a second: rounds are serial, one winner each
    by_wcu = PARTITION_WCU_S / (wcu * r["rounds"])
    per_queue = min(by_latency, by_wcu) * r["batch"]
    return {"wcu_per_write": wcu, "appends_s_latency": by_latency, "appends_s_wcu": by_wcu,
            "queue_msgs_s": per_queue, "topic64_msgs_s": per_queue * QUEUES_MAX}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer producers and requests (under a minute)")
    ap.add_argument("--only", choices=("old", "new"), help="one loop only (default: both, side by side)")
    ap.add_argument("--at-once", type=int, default=None,
                    help="the new loop's lost rounds retried without a wait (lakeq.store.append.AT_ONCE_LOSSES)")
    ap.add_argument("--producers", type=int, nargs="*", help="only these producer counts on one queue (batch 1)")
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
    loops = [learn for learn in (False, True) if args.only is None or args.only == ("new" if learn else "old")]
    print(f"# bench/ceiling.py {'--quick ' if args.quick else ''}· {platform.machine()} · {os.cpu_count()} CPUs · "
          f"python {platform.python_version()} · load {os.getloadavg()[0]:.1f} · {reqs} requests a cell; "
          "old = the loop before issue 33 item 3 (wait, fresh head read), new = a lost put learns the head "
          f"(its first {append.AT_ONCE_LOSSES} lost round(s) of a write at once, later ones after the wait)")
    print("| queues | producers | batch | ids | loop | appends | rounds / append | lost / append | head reads / append "
          "| store calls / append | waits / append | 503s | local appends/s | CPU ms / append | segment bytes "
          "| WCU / write | DynamoDB msgs/s per queue | … per 64-queue topic |")
    print("|---" * 18 + "|")
    try:
        run(counts, "warm", 1, 2, 10, 1, False, True)  # botocore's clients and models made, not in a cell
        for k, (queues, producers, batch, ids) in enumerate(plan):
            for learn in loops:
                r = run(counts, f"ceil{k}{'n' if learn else 'o'}", queues, producers, reqs, batch, ids, learn)
                c = ceiling(r)
                print(f"| {queues} | {producers} | {batch} | {'yes' if ids else 'no'} | {'new' if learn else 'old'} | "
                      f"{r['appends']} | {r['rounds']:.2f} | {r['lost_per_append']:.2f} | {r['head_reads']:.2f} | "
                      f"{r['calls']:.2f} | {r['waits']:.2f} | {r['busy']} | {r['appends_s_local']:.0f} | "
                      f"{1000 * r['cpu_s'] / max(1, r['appends']):.0f} | {r['segment_bytes']} | "
                      f"{c['wcu_per_write']} | {c['queue_msgs_s']:,.0f} | {c['topic64_msgs_s']:,.0f} |", flush=True)
    finally:
        moto.terminate()
    print(f"\nassumed DynamoDB latencies: head read {T_READ_MS} ms, PutItem {T_WRITE_MS} ms, transaction "
          f"{T_TRANSACT_MS} ms; partition {PARTITION_WCU_S} WCU/s; a failed conditional write is billed; "
          f"a round: old = head read + write, new = one write (no ids), head read + transaction (ids); "
          f"load at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
