"""Subscription matcher benchmark (SPEC §3): SubscriptionIndex vs a linear scan of moto's SNS
filter-policy matcher, same subscriptions and messages, match sets cross-checked.

For each size (1k, 10k, 100k subscriptions) it generates a stock-quote workload whose matches per
message stay about the same at every size (each stock code has ~2 subscriptions; a few percent
use prefix / range / anything-but / exists / tags), then reports:

* build time (= the time to rebuild an index of that many subscriptions with ``add``),
* memory per subscription (tracemalloc, a second build),
* messages per second, p50 / p99 per message, mean matches per message, for the index,
* the same for the baseline on a subset of the messages: every subscription whose topic covers the
  message's is converted to an SNS filter policy and ``moto.sns.utils.FilterPolicyMatcher(...)
  .matches(...)`` is called once per such subscription per message (MessageAttributes scope; tags
  become a ``String.Array`` attribute ``__tags``). Any difference in match sets aborts the run.

    python bench/matcher.py [--quick] [--seed N]
"""
from __future__ import annotations

import os
import sys

# bench/ holds scripts named like stdlib modules (bench/queue.py): keep it off the import path.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

import argparse
import gc
import json
import platform
import random
import statistics
import time
import tracemalloc

sys.path[:0] = [os.path.join(_HERE, "..", "layers", "matcher")]

from matcher import SubscriptionIndex  # noqa: E402

try:
    from moto.sns.utils import FilterPolicyMatcher  # noqa: E402
except ImportError:  # pragma: no cover
    sys.exit("moto is required: pip install 'moto[server]' (see pyproject.toml [local])")

TOPICS = ["quotes", "quotes", "quotes/sh", "quotes/sz"]
PUB_TOPICS = ["quotes/sh", "quotes/sz", "quotes/sh/star"]
TAGS = ["hot", "warm", "cold", "l2"]


def gen_subscriptions(n: int, rng: random.Random) -> tuple[list, list[str]]:
    """n subscriptions over n // 2 stock codes (six digits, sparse in the code space)."""
    codes = [f"{c:06d}" for c in rng.sample(range(1_000_000), max(1, n // 2))]
    subs = []
    for i in range(n):
        code = rng.choice(codes)
        r = rng.random()
        conds: list[dict] = [{"field": "type", "values": ["A"] if rng.random() < 0.7 else ["A", "B"]}]
        if r < 0.05:  # a prefix covering ~10 codes of the full space
            conds = [{"field": "stock_code", "prefix": code[:5]}]
        else:
            conds.append({"field": "stock_code", "values": [code]})
            if r < 0.15:
                lo = rng.randint(0, 90)
                conds.append({"field": "price", "range": [lo, lo + rng.randint(1, 30)]})
            elif r < 0.20:
                conds[0] = {"field": "type", "anything_but": ["B"]}
            elif r < 0.25:
                conds.append({"field": "volume", "exists": True})
        if rng.random() < 0.5:
            conds.reverse()  # field order in the request does not matter
        tags = rng.sample(TAGS, rng.randint(1, 2)) if rng.random() < 0.10 else None
        subs.append((f"sub-{i}", rng.choice(TOPICS), conds, tags))
    return subs, codes


def gen_messages(m: int, codes: list[str], rng: random.Random) -> list:
    msgs = []
    for _ in range(m):
        props = {"type": "A" if rng.random() < 0.8 else "B", "stock_code": rng.choice(codes),
                 "price": round(rng.uniform(0, 120), 2)}
        if rng.random() < 0.5:
            props["volume"] = rng.randint(1, 10_000)
        tags = rng.sample(TAGS, rng.randint(0, 2))
        msgs.append((rng.choice(PUB_TOPICS), props, tags))
    return msgs


def to_policy(conds: list[dict], tags) -> dict:
    policy: dict = {}
    for level in conds:
        f = level["field"]
        if "values" in level:
            rule = list(level["values"])
        elif "range" in level:
            lo, hi = level["range"]
            rule = [{"numeric": [">=", lo, "<=", hi]}]
        elif "prefix" in level:
            rule = [{"prefix": level["prefix"]}]
        elif "anything_but" in level:
            rule = [{"anything-but": list(level["anything_but"])}]
        else:
            rule = [{"exists": level["exists"]}]
        assert f not in policy, "bench subscriptions use each field once"
        policy[f] = rule
    if tags:
        policy["__tags"] = list(tags)
    return policy


def to_attributes(props: dict, tags) -> dict:
    attrs = {}
    for f, v in props.items():
        if isinstance(v, str):
            attrs[f] = {"Type": "String", "Value": v}
        else:
            attrs[f] = {"Type": "Number", "Value": str(v)}
    if tags:
        attrs["__tags"] = {"Type": "String.Array", "Value": json.dumps(tags)}
    return attrs


def covers(sub_topic: str, pub: str) -> bool:
    return pub == sub_topic or pub.startswith(sub_topic + "/")


def pct(sorted_ns: list[int], q: float) -> float:
    return sorted_ns[min(len(sorted_ns) - 1, int(q * len(sorted_ns)))] / 1000.0


def build(subs) -> SubscriptionIndex:
    idx = SubscriptionIndex()
    add = idx.add
    for sid, topic, conds, tags in subs:
        add(sid, topic, conds, tags)
    return idx


def run_size(n: int, n_msgs: int, n_base: int, mem: bool, rng: random.Random, check: bool) -> dict:
    subs, codes = gen_subscriptions(n, rng)
    msgs = gen_messages(n_msgs, codes, rng)

    gc.collect()
    t0 = time.perf_counter()
    idx = build(subs)
    build_s = time.perf_counter() - t0
    if check:
        idx._check()

    mem_per_sub = float("nan")
    if mem:  # a second build under tracemalloc (slower, so not the timed one)
        del idx
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        idx = build(subs)
        after = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        mem_per_sub = (after - before) / n

    times: list[int] = []
    counts: list[int] = []
    results = []
    match = idx.match
    pc = time.perf_counter_ns
    gc.collect()
    gc.disable()
    t_all = pc()
    for topic, props, tags in msgs:
        t = pc()
        r = match(topic, props, tags)
        times.append(pc() - t)
        counts.append(len(r))
        results.append(r)
    total_ns = pc() - t_all
    gc.enable()

    # baseline: moto's SNS filter-policy matcher, one call per (covering) subscription per message
    matchers = [(sid, topic, FilterPolicyMatcher(to_policy(conds, tags), "MessageAttributes"))
                for sid, topic, conds, tags in subs]
    base_ns: list[int] = []
    idx_ns_same: list[int] = []
    for j in range(n_base):
        topic, props, tags = msgs[j]
        attrs = to_attributes(props, tags)
        t = pc()
        got = {sid for sid, st, fpm in matchers if covers(st, topic) and fpm.matches(attrs, "")}
        base_ns.append(pc() - t)
        idx_ns_same.append(times[j])
        mine = set(results[j])
        if got != mine:
            print(f"MISMATCH at n={n} message {msgs[j]!r}:\n  index only: {sorted(mine - got)[:10]}"
                  f"\n  moto only: {sorted(got - mine)[:10]}", file=sys.stderr)
            sys.exit(2)

    s = sorted(times)
    by_count: dict[int, list[int]] = {}
    for c, t in zip(counts, times):
        by_count.setdefault(c, []).append(t)
    return {
        "n": n,
        "msgs": n_msgs,
        "build_s": build_s,
        "mem_per_sub": mem_per_sub,
        "msgs_per_s": n_msgs / (total_ns / 1e9),
        "p50_us": pct(s, 0.50),
        "p99_us": pct(s, 0.99),
        "mean_us": total_ns / n_msgs / 1000.0,
        "mean_matches": statistics.fmean(counts),
        "p50_by_count": {c: statistics.median(v) / 1000.0 for c, v in sorted(by_count.items()) if len(v) >= 20},
        "base_msgs": n_base,
        "base_mean_us": statistics.fmean(base_ns) / 1000.0 if base_ns else float("nan"),
        "idx_mean_us_same": statistics.fmean(idx_ns_same) / 1000.0 if idx_ns_same else float("nan"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer messages and baseline messages (< 1 min)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--check", action="store_true", help="also run idx._check() after each build")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    if args.quick:
        plan = [(1_000, 3_000, 50, True), (10_000, 3_000, 10, True), (100_000, 3_000, 1, False)]
    else:
        plan = [(1_000, 50_000, 500, True), (10_000, 50_000, 50, True), (100_000, 50_000, 10, True)]

    print(f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs; "
          f"mode={'quick' if args.quick else 'full'} seed={args.seed}")
    print("plan (subscriptions, index messages, moto baseline messages, tracemalloc):", plan)
    rows = [run_size(n, m, b, mem, rng, args.check) for n, m, b, mem in plan]

    print()
    print("| subscriptions | build (= rebuild) s | bytes/sub | index msg/s | p50 µs | p99 µs | matches/msg "
          "| moto msgs | moto µs/msg | index µs/msg (same msgs) | speed-up |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        speed = r["base_mean_us"] / r["idx_mean_us_same"]
        print(f"| {r['n']:,} | {r['build_s']:.2f} | {'-' if r['mem_per_sub'] != r['mem_per_sub'] else format(r['mem_per_sub'], '.0f')} | {r['msgs_per_s']:,.0f} "
              f"| {r['p50_us']:.1f} | {r['p99_us']:.1f} | {r['mean_matches']:.2f} | {r['base_msgs']} "
              f"| {r['base_mean_us']:,.0f} | {r['idx_mean_us_same']:.1f} | {speed:,.0f}x |")
    print()
    print("p50 µs per message by number of matches (buckets with >= 20 messages):")
    counts = sorted(set().union(*(r["p50_by_count"] for r in rows)))
    for c in counts:
        cells = [f"{r['p50_by_count'][c]:.1f}" if c in r["p50_by_count"] else "-" for r in rows]
        print(f"  {c} matches: " + "  ".join(f"{r['n']:>7,}: {cell:>6}" for r, cell in zip(rows, cells)))
    first, last = rows[0], rows[-1]
    print(f"\np50 {last['n']:,} / p50 {first['n']:,}: {last['p50_us'] / first['p50_us']:.2f}x "
          f"(target <= 3x at equal matches); mean matches {first['mean_matches']:.2f} vs {last['mean_matches']:.2f}")
    print(f"rebuild of {last['n']:,} subscriptions (add each): {last['build_s']:.2f} s")
    print("all baseline match sets equal to the index's: yes")


if __name__ == "__main__":
    main()
