"""How far one queue and one topic go (issue 33 item 3): contention of concurrent producers on a
queue's head, measured on the local stack, and the ceiling it implies on DynamoDB.

An append to a lakeq queue is a conditional write at the queue's head (``LogRepo.append``: a
PutItem of the next segment, ``attribute_not_exists``; a transaction when the messages carry ids).
Concurrent producers of one queue race for the head: one wins a round, the others' writes fail
their condition (and are billed: DynamoDB charges a failed conditional write like a write), read the
head again and retry (``lakeq.store.append.append_at_head``, ``backoff.cas``: up to 40 rounds, then
503 ``busy``). What this measures, per workload (N producer threads calling the produce use case
itself, ``lakeq.produce.service.produce``, concurrently, against moto's server, which serves one
request at a time as DynamoDB is atomic per item — ``infra.local.moto_serial``):

- rounds per append (conditional writes sent per append that landed), head reads per append,
  requests answered 503;
- the segment item's size (its write units), from the bytes the use case wrote.

The ceiling on DynamoDB (printed, arithmetic in docs/benchmarks.md): one queue's appends are
serial (each round is a head read then a write; only one writer wins a round), so a queue does at
most ``1 / (t_read + t_write)`` appends a second, and its partition at most 1,000 WCU a second, of
which each append spends ``rounds × WCU``. The DynamoDB latencies used are assumptions (AWS's
"single-digit milliseconds"; not measurable here), stated as such.

    python bench/ceiling.py [--quick]
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
        with self.lock:
            self.ops[op] += 1
            if err in ("ConditionalCheckFailedException", "TransactionCanceledException"):
                self.ops[op + " lost"] += 1
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


def run(counts: Counts, name: str, queues: int, producers: int, requests: int, batch: int, ids: bool) -> dict:
    from lakeq.admin import service as admin
    from lakeq.admin.auth import Principal
    from lakeq.common.errors import Unavailable
    from lakeq.produce.service import produce

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
    t0 = time.perf_counter()
    with ThreadPoolExecutor(producers) as ex:
        list(ex.map(one, range(requests)))
    wall = time.perf_counter() - t0
    ops = Counter(counts.ops)
    write_op = "TransactWriteItems" if ids else "PutItem"
    sent, lost = ops[write_op], ops[write_op + " lost"]
    landed = sent - lost
    seg = sorted(counts.seg_bytes)
    return {"name": name, "queues": queues, "producers": producers, "batch": batch, "ids": ids,
            "appends": landed, "rounds": sent / max(1, landed), "lost_per_append": lost / max(1, landed),
            "head_reads": ops["Query"] / max(1, landed), "busy": busy["503"], "wall_s": wall,
            "appends_s_local": landed / wall,
            "segment_bytes": seg[len(seg) // 2] if seg else None}


def ceiling(r: dict) -> dict:
    """Messages a second one queue (and a topic of 64) can take on DynamoDB at the measured rounds."""
    wcu = max(1, math.ceil((r["segment_bytes"] or 1) / WCU_KB)) * (2 if r["ids"] else 1)
    t_round = (T_READ_MS + (T_TRANSACT_MS if r["ids"] else T_WRITE_MS)) / 1000
    by_latency = 1 / t_round  # appends a second: rounds are serial, one winner each
    by_wcu = PARTITION_WCU_S / (wcu * r["rounds"])
    per_queue = min(by_latency, by_wcu) * r["batch"]
    return {"wcu_per_write": wcu, "appends_s_latency": by_latency, "appends_s_wcu": by_wcu,
            "queue_msgs_s": per_queue, "topic64_msgs_s": per_queue * QUEUES_MAX}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer producers and requests (under a minute)")
    args = ap.parse_args()
    counts = Counts()
    _local.bench_queue().install_hooks(counts)  # the queue bench's botocore hooks, with these counts
    moto = start()
    reqs = 60 if args.quick else 300
    plan = [(1, n, 1, False) for n in ((1, 4) if args.quick else (1, 2, 4, 8, 16))]
    plan += [(1, 4, 10, False), (1, 4, 1, True)]
    plan += [(64, n, 1, False) for n in ((16,) if args.quick else (16, 64))]
    print(f"# bench/ceiling.py {'--quick ' if args.quick else ''}· {platform.machine()} · {os.cpu_count()} CPUs · "
          f"python {platform.python_version()} · load {os.getloadavg()[0]:.1f}")
    print("| queues | producers | batch | ids | appends | rounds / append | lost / append | head reads / append "
          "| 503s | local appends/s (all queues) | segment bytes | WCU / write | DynamoDB msgs/s per queue "
          "| … per 64-queue topic |")
    print("|---" * 14 + "|")
    try:
        for k, (queues, producers, batch, ids) in enumerate(plan):
            r = run(counts, f"ceil{k}", queues, producers, reqs, batch, ids)
            c = ceiling(r)
            print(f"| {queues} | {producers} | {batch} | {'yes' if ids else 'no'} | {r['appends']} | "
                  f"{r['rounds']:.2f} | {r['lost_per_append']:.2f} | {r['head_reads']:.2f} | {r['busy']} | "
                  f"{r['appends_s_local']:.0f} | {r['segment_bytes']} | {c['wcu_per_write']} | "
                  f"{c['queue_msgs_s']:,.0f} | {c['topic64_msgs_s']:,.0f} |", flush=True)
    finally:
        moto.terminate()
    print(f"\nassumed DynamoDB latencies: head read {T_READ_MS} ms, PutItem {T_WRITE_MS} ms, transaction "
          f"{T_TRANSACT_MS} ms; partition {PARTITION_WCU_S} WCU/s; a failed conditional write is billed")


if __name__ == "__main__":
    main()
