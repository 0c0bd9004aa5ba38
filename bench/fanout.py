"""Fan-out index rebuild benchmark (SPEC §3 delivery): how long a FanoutFunction container takes to
rebuild its cached ``SubscriptionIndex`` after the subscriptions' version moved.

Measures the in-process part of :meth:`lakeq.fanout.worker.Matcher.load` — JSON-decode each stored
subscription's conditions and ``add`` it — over stored-item stand-ins at 1k, 10k and 100k
subscriptions (a stock-quote workload: two stock codes per subscription, a few percent with range /
prefix / anything-but / tags), plus the time to plan one 100-record stream batch of 10 messages each
against the 100k index. The Scan that feeds the rebuild is not measured here (moto is not DynamoDB);
``docs/design.md`` estimates it from item size. Baselines, side by side: the rebuild against only
JSON-decoding the same items (the floor of any rebuild), the plan against only decoding the
batch's message headers (reading without matching).

``--workload heldout`` (issue 33): the held-out-style dense workload of ``bench/matcher.py``
(``Adversary``: six fields, 0-3 levels, ~9 % of the subscriptions match each message) instead of the
stock quotes; the index is warmed on 1,000 messages first (it learns from traffic), then one batch
of 100 records x 10 messages is planned and, side by side on the same messages, only matched
(``Matcher.match``, the plan's matching step) and only decoded: the matching's share of the plan.

``--workload churn``: a batch after one subscription change, the full rebuild against the in-place
update (:meth:`lakeq.fanout.worker.Matcher.apply`), side by side (see :func:`churn`).

    python bench/fanout.py [--quick] [--workload quotes|heldout|hostile|churn]
"""
from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
_ROOT = os.path.dirname(_HERE)
sys.path[:0] = [os.path.join(_ROOT, "layers", "core"), os.path.join(_ROOT, "layers", "matcher")]

import argparse  # noqa: E402
import base64  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from types import SimpleNamespace  # noqa: E402

from lakeq.fanout import worker as fanout  # noqa: E402
from lakeq.log import segments as seg  # noqa: E402


def subscriptions(n: int, rnd: random.Random) -> list[SimpleNamespace]:
    codes = [f"{i:06d}" for i in range(max(1000, n // 2))]
    out = []
    for i in range(n):
        levels = [{"field": "type", "values": [rnd.choice("AB")]},
                  {"field": "stock_code", "values": rnd.sample(codes, 2)}]
        r = rnd.random()
        if r < 0.03:
            levels.append({"field": "price", "range": [rnd.randint(0, 50), rnd.randint(50, 100)]})
        elif r < 0.05:
            levels = [{"field": "stock_code", "prefix": rnd.choice(codes)[:4]}]
        elif r < 0.06:
            levels.append({"field": "board", "anything_but": ["st"]})
        tags = ["hot"] if rnd.random() < 0.02 else None
        out.append(SimpleNamespace(id=f"{i:032x}", topic=rnd.choice(["quotes", "quotes/sh", "quotes/sz"]),
                                   conditions=json.dumps(levels, separators=(",", ":")), tags=tags, created_at=0))
    return out


def batch(rnd: random.Random, n_codes: int, records: int = 100, per: int = 10, draw=None,
          log: str = "quotes/sh") -> dict:
    """``draw``: ``() -> (properties, tags)`` for each message (default: a stock quote)."""
    recs = []
    for r in range(records):
        msgs = []
        for i in range(per):
            props, tags = draw() if draw else ({"type": rnd.choice("AB"), "stock_code": f"{rnd.randrange(n_codes):06d}",
                                                "price": rnd.randint(0, 100)}, [])
            msgs.append(seg.Message(id=f"m{r}-{i}", body="x" * 64, key=None, tags=tags, properties=props,
                                    produced_at=1))
        s = seg.encode(msgs, r * per)
        img = {"pq": {"S": f"{log}#0"}, "base": {"N": str(s.base)}, "count": {"N": str(s.count)},
               "idx": {"B": base64.b64encode(s.idx).decode()}, "data": {"B": base64.b64encode(s.data).decode()},
               "z": {"BOOL": s.compressed}}
        recs.append({"eventName": "INSERT", "dynamodb": {"NewImage": img, "SequenceNumber": str(r)}})
    return {"Records": recs}


def decode_subscriptions(subs) -> int:
    """The baseline of a rebuild: only JSON-decode each stored subscription's conditions (the floor
    any rebuild pays), no index."""
    return sum(len(json.loads(s.conditions or "[]")) for s in subs)


def decode_batch(records: list[dict]) -> int:
    """The baseline of a plan: only decode every message header of the batch's segments (reading
    without matching)."""
    n = 0
    for r in records:
        img = r["dynamodb"]["NewImage"]
        sg = seg.Segment(int(img["base"]["N"]), int(img["count"]["N"]), base64.b64decode(img["idx"]["B"]),
                         base64.b64decode(img["data"]["B"]), bool(img["z"]["BOOL"]))
        n += sum(1 for _ in seg.all_headers(sg))
    return n


def heldout(sizes: list[int]) -> None:
    """The matching's share of a plan on the held-out-style dense workload (see the module doc)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_matcher", os.path.join(_HERE, "matcher.py"))
    bm = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bm)
    adv = bm.ADVERSARIES["heldout"]
    for n in sizes:
        rnd = random.Random(7)
        subs, _ = adv.subscriptions(n, rnd)
        # each with the start a subscription made today records (its topic's queue heads; issue 33:
        # without one, every id takes the rule before starts, produced_at against created_at)
        stored = [SimpleNamespace(id=sid, topic=topic, conditions=json.dumps(levels), tags=tags, created_at=0,
                                  starts='{"t/a/x":[0]}') for sid, topic, levels, tags in subs]
        m = fanout.Matcher()
        t0 = time.thread_time()
        m.load(stored)
        load_ms = (time.thread_time() - t0) * 1000
        t0 = time.thread_time()
        for topic, props, tags in adv.messages(1_000, None, rnd):  # warm-up: the index learns from traffic
            m.index.match(topic, props, tags)
        warm_ms = (time.thread_time() - t0) * 1000
        msgs = adv.messages(1_000, None, rnd)
        it = iter(msgs)
        ev = batch(rnd, 0, draw=lambda: next(it)[1:], log="t/a/x")
        plans, matches, decodes = [], [], []
        for _ in range(5):  # alternating, best of 5 (thread CPU: a shared machine)
            t0 = time.thread_time()
            pending = fanout.plan(ev["Records"], m).pending
            plans.append(time.thread_time() - t0)
            t0 = time.thread_time()
            got = 0
            for props, tags in ((p, t) for _, p, t in msgs):
                got += len(m.match("t/a/x", {"properties": props, "tags": tags, "produced_at": 1, "offset": 1}))
            matches.append(time.thread_time() - t0)
            t0 = time.thread_time()
            decode_batch(ev["Records"])
            decodes.append(time.thread_time() - t0)
        listed = sum(len(g.messages) for gs in pending.values() for g in gs)
        pl, ma, de = min(plans) * 1e3, min(matches) * 1e3, min(decodes) * 1e3
        print(f"heldout {n:>7} subscriptions: rebuild {load_ms:.0f} ms CPU, warm-up 1,000 messages "
              f"{warm_ms:.0f} ms CPU; plan 100 records x 10 messages {pl:.1f} ms CPU "
              f"({pl / len(msgs) * 1000:.0f} µs/msg); matching alone {ma:.1f} ms "
              f"(= {ma / pl:.0%} of the plan); decoding alone {de:.1f} ms; {got / len(msgs):.0f} matches/msg, "
              f"{listed} list entries for {len(pending)} subscriptions")


def hostile(rounds: int = 5) -> None:
    """One client's 100 subscriptions (its cap) on topic ``t`` that never match, each with starts near
    MAX_STARTS_BYTES (13,000 descendant logs), beside one that matches: thread CPU of the first match
    of three logs under ``t`` after a rebuild (review_b: parsing every covering start cost 1-2 s)."""
    big = json.dumps({f"t/c{i}": [1000] for i in range(13_000)} | {"t/a": [1000]})
    subs = [SimpleNamespace(id="m", topic="t", conditions="[]", tags=None, parked=None, created_at=0,
                            starts='{"t/a":[2]}')]
    subs += [SimpleNamespace(id=f"n{i}", topic="t", conditions=json.dumps([{"field": "x", "range": [100, 101]}]),
                             tags=None, parked=None, created_at=0, starts=big) for i in range(100)]
    out = []
    for _ in range(rounds):
        m = fanout.Matcher()
        m.load(subs)
        t0 = time.thread_time()
        for log in ("t/a", "t/c1", "t/c2"):
            m.match(log, {"properties": {"x": 5}, "produced_at": 1, "offset": 3}, 0)
        out.append((time.thread_time() - t0) * 1000)
    print(f"hostile: 100 never-matching subscriptions, {len(big):,} B of starts each: first match of 3 logs "
          f"after a rebuild {', '.join(f'{x:.1f}' for x in out)} ms CPU")


def churn(sizes: list[int], rounds: int = 6) -> None:
    """A batch after one subscription change (a create, then its delete, alternating: a hostile key's
    churn), side by side in one process on the same changes and batch: the full rebuild
    (``Matcher.load`` of every subscription, what every container did) against the in-place update
    (``Matcher.apply`` of the changed one), each followed by planning one 100 x 10 batch (the per-log
    bounds walked again after a rebuild). Thread CPU, alternating rounds, median. The store calls are
    not measured here: tests/integration/test_fanout_incremental.py counts them (GetItem +
    BatchGetItem of the changed one, against GetItem + the paginated Scan)."""
    for n in sizes:
        rnd = random.Random(11)
        subs = subscriptions(n, rnd)
        extra = subscriptions(rounds, random.Random(12))
        for i, s in enumerate(extra):
            s.id = f"c{i:031x}"
        ev = batch(rnd, max(1000, n // 2))
        full, inc = fanout.Matcher(), fanout.Matcher()
        full.load(subs)
        inc.load(subs)
        fanout.plan(ev["Records"], full)
        fanout.plan(ev["Records"], inc)
        live = {s.id: s for s in subs}
        t = {"full": [], "full+plan": [], "inc": [], "inc+plan": []}
        for r in range(rounds * 2):
            s = extra[r // 2]
            if r % 2 == 0:
                live[s.id] = s
            else:
                del live[s.id]
            for kind in (("full", "inc") if r % 2 == 0 else ("inc", "full")):
                t0 = time.thread_time()
                if kind == "full":
                    full.load(list(live.values()))
                    m = full
                else:
                    inc.apply({s.id}, [s] if s.id in live else [])
                    m = inc
                t1 = time.thread_time()
                pending = fanout.plan(ev["Records"], m).pending
                t2 = time.thread_time()
                t[kind].append(t1 - t0)
                t[kind + "+plan"].append(t2 - t0)
            assert sorted(full.created) == sorted(inc.created)
        med = {k: statistics.median(v) * 1000 for k, v in t.items()}
        matched = sum(len(g.messages) for gs in pending.values() for g in gs)
        print(f"churn {n:>7} subscriptions, a batch after one change ({rounds * 2} changes, median): "
              f"full rebuild {med['full']:.1f} ms CPU, +plan {med['full+plan']:.1f} ms; in place "
              f"{med['inc']:.3f} ms CPU, +plan {med['inc+plan']:.1f} ms → refresh {med['full'] / med['inc']:,.0f}x, "
              f"batch {med['full+plan'] / med['inc+plan']:.1f}x less CPU; {matched} list entries")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="1k and 10k only")
    ap.add_argument("--workload", choices=["quotes", "heldout", "hostile", "churn"], default="quotes")
    args = ap.parse_args()
    rnd = random.Random(7)
    sizes = [1_000, 10_000] if args.quick else [1_000, 10_000, 100_000]
    print(f"python {sys.version.split()[0]}")
    if args.workload == "hostile":
        hostile()
        return
    if args.workload == "heldout":
        heldout(sizes)
        return
    if args.workload == "churn":
        churn(sizes[1:])
        return
    for n in sizes:
        subs = subscriptions(n, rnd)
        times = []
        for _ in range(3 if n < 100_000 else 2):
            m = fanout.Matcher()
            t0 = time.perf_counter()
            m.load(subs)
            times.append(time.perf_counter() - t0)
        base = []
        for _ in range(3):
            t0 = time.perf_counter()
            decode_subscriptions(subs)
            base.append(time.perf_counter() - t0)
        ev = batch(rnd, max(1000, n // 2))
        t0 = time.perf_counter()
        decode_batch(ev["Records"])
        decode_ms = (time.perf_counter() - t0) * 1000
        t0 = time.perf_counter()
        pending = fanout.plan(ev["Records"], m).pending  # plan() returns a Plan (per subscription: its groups)
        plan_ms = (time.perf_counter() - t0) * 1000
        matched = sum(len(g.messages) for gs in pending.values() for g in gs)
        rb, bl = statistics.median(times), statistics.median(base)
        print(f"{n:>7} subscriptions: rebuild {rb * 1000:8.1f} ms ({rb / n * 1e6:5.1f} us/subscription; "
              f"baseline JSON decode only {bl * 1000:.1f} ms → {rb / bl:.1f}x); plan 100 records x 10 messages: "
              f"{plan_ms:6.1f} ms (baseline decode only {decode_ms:.1f} ms → {plan_ms / decode_ms:.1f}x), "
              f"{matched} list entries for {len(pending)} subscriptions")


if __name__ == "__main__":
    main()
