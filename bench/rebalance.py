"""Rebalance benchmark: lakeq's sticky assignor and server-side protocol vs kafka-python's assignors.

    .venv/bin/python bench/rebalance.py --quick     # < 1 minute
    .venv/bin/python bench/rebalance.py             # adds 1,000 members x 10,000 queues

Churn: a group starts from a fresh assignment, then members join, leave gracefully and crash
(a crash reaches the assignor like a leave, after the session timeout). For every rebalance and every
assignor we measure

* moved   — queues whose owner was still in the group and that changed owner;
* minimum — the fewest moves any count-balanced assignment needs (uniform subscriptions);
* max-min — balance: largest minus smallest queue count;
* ms      — compute time of the assignor (cooperative-sticky: its two rounds together);
* disturbed — members that have to act: under lakeq's protocol only members whose assignment
  changed (+ the joining member), counted by running lakeq.rebalance.state' transitions; under Kafka's eager
  protocol every member re-joins (and stops consuming) on every rebalance; under Kafka's cooperative
  protocol every member re-joins once per round (two rounds when something moves).

kafka-python (``pip install kafka-python``, benchmark only) is optional: without it only lakeq's
assignors run. Its assignors are client-side (leader) code; they are driven here through a small
adapter that fakes the cluster metadata and the members' JoinGroup metadata.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import sys
import time
from types import SimpleNamespace

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "layers", "core"))

from lakeq.rebalance import state as groups  # noqa: E402
from lakeq.rebalance.assignors import Subscription, imbalance, moved_queues, range_assignor, round_robin, sticky  # noqa: E402

QUEUES_PER_TOPIC = 50


# ----------------------------------------------------------------------------- kafka-python adapter
def kafka_assignors():
    """{name: fn(members, counts, generation) -> assignment} for the kafka-python assignors found."""
    try:
        import kafka
        from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
        from kafka.coordinator.assignors.range import RangePartitionAssignor
        from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
        from kafka.coordinator.assignors.sticky.sticky_assignor import (
            StickyAssignmentExecutor,
            StickyAssignorMemberMetadataV1,
        )
        from kafka.structs import TopicPartition
    except ImportError:
        return {}, None

    def cluster(counts):
        return SimpleNamespace(topics=lambda: set(counts),
                               partitions_for_topic=lambda t: set(range(counts[t])) if t in counts else None)

    def out(result):
        return {m: sorted((tp.topic, tp.partition) for tp in a.partitions()) for m, a in result.items()}

    def simple(cls):
        def run(members, counts, generation):
            ms = [SimpleNamespace(member_id=m, group_instance_id=None,
                                  metadata=SimpleNamespace(topics=sorted(s.topics)))
                  for m, s in sorted(members.items())]
            return out(cls.assign(cluster(counts), ms))
        return run

    def k_sticky(members, counts, generation):
        meta = {m: StickyAssignorMemberMetadataV1(partitions=[TopicPartition(t, q) for t, q in s.owned],
                                                  generation=generation, subscription=sorted(s.topics))
                for m, s in sorted(members.items())}
        ex = StickyAssignmentExecutor(cluster(counts), meta)
        ex.perform_initial_assignment()
        ex.balance()
        return {m: sorted((t, p) for t, ps in ex.get_final_assignment(m) for p in ps) for m in meta}

    def k_coop(members, counts, generation):
        assignor = CooperativeStickyAssignor()

        def round_(owned_by):
            ms = []
            for m, s in sorted(members.items()):
                by_topic = {}
                for t, q in owned_by.get(m, ()):
                    by_topic.setdefault(t, []).append(q)
                owned = [SimpleNamespace(topic=t, partitions=sorted(ps)) for t, ps in sorted(by_topic.items())]
                ms.append(SimpleNamespace(member_id=m, group_instance_id=None, metadata=SimpleNamespace(
                    topics=sorted(s.topics), owned_partitions=owned, generation_id=generation, user_data=b"")))
            return out(assignor.assign(cluster(counts), ms))

        first = round_({m: s.owned for m, s in members.items()})
        if first == {m: sorted(s.owned) for m, s in members.items()} or not any(
                set(first[m]) != set(members[m].owned) for m in members):
            return first, 1
        return round_(first), 2

    return {
        "kafka range": simple(RangePartitionAssignor),
        "kafka round-robin": simple(RoundRobinPartitionAssignor),
        "kafka sticky": k_sticky,
        "kafka coop-sticky": k_coop,
    }, kafka.__version__


# ------------------------------------------------------------------------------------ scenarios
def events_for(n_members, n_events, rng):
    kinds = ["join", "leave", "crash"]
    return [kinds[i % 3] if i < 3 else rng.choice(kinds) for i in range(n_events)]


def min_moves(before, n_queues, members):
    """Fewest moves for a count-balanced assignment (uniform subscriptions)."""
    kept = sorted((len(before.get(m, [])) for m in members), reverse=True)
    base, extra = divmod(n_queues, len(members))
    quotas = [base + 1] * extra + [base] * (len(kept) - extra)
    return sum(max(0, c - k) for c, k in zip(kept, quotas))


def run_scenario(n_members, n_queues, n_events, assignors, seed=7):
    rng = random.Random(seed)
    n_topics = max(1, n_queues // QUEUES_PER_TOPIC)
    counts = {f"t{i:03d}": QUEUES_PER_TOPIC for i in range(n_topics)}
    topics = sorted(counts)
    names = [f"m{i:05d}" for i in range(n_members)]
    events = events_for(n_members, n_events, rng)
    stats = {name: {"moved": [], "min": [], "imb": [], "ms": [], "disturbed": []} for name in assignors}
    for name, fn in assignors.items():
        cur = {m: [] for m in names}
        members = list(names)
        next_id = n_members
        ev_rng = random.Random(seed + 1)
        # initial assignment
        subs = {m: Subscription(topics, []) for m in members}
        cur = call(fn, subs, counts, 1)[0]
        for gen, ev in enumerate(events, start=2):
            if ev == "join":
                new = f"m{next_id:05d}"
                next_id += 1
                members.append(new)
                cur[new] = []
            else:
                gone = ev_rng.choice(members)
                members.remove(gone)
                cur.pop(gone)
            subs = {m: Subscription(topics, cur[m]) for m in members}
            t0 = time.perf_counter()
            after, rounds = call(fn, subs, counts, gen)
            ms = (time.perf_counter() - t0) * 1000
            s = stats[name]
            s["moved"].append(len(moved_queues(cur, after)))
            s["min"].append(min_moves(cur, n_queues, members))
            s["imb"].append(imbalance(after))
            s["ms"].append(ms)
            changed = sum(1 for m in members if set(after[m]) != set(cur[m]))
            if name.startswith("lakeq"):
                s["disturbed"].append(changed)
            elif name == "kafka coop-sticky":
                s["disturbed"].append(len(members) * rounds)
            else:
                s["disturbed"].append(len(members))
            cur = after
    return stats, events


def call(fn, subs, counts, gen):
    res = fn(subs, counts, gen)
    return res if isinstance(res, tuple) else (res, 1)


def protocol_run(n_members, n_queues, n_events, seed=7):
    """The same churn through lakeq.rebalance.state' transitions: members disturbed per rebalance
    (moved to preparing_rebalance, plus the joiner) and the time of one transition."""
    rng = random.Random(seed + 1)
    n_topics = max(1, n_queues // QUEUES_PER_TOPIC)
    counts = {f"t{i:03d}": QUEUES_PER_TOPIC for i in range(n_topics)}
    topics = sorted(counts)
    now = 0
    first = sticky({f"m{i:05d}": Subscription(topics) for i in range(n_members)}, counts)
    st = groups.GroupState(group="bench", generation=1, queue_counts=dict(counts), members={
        m: groups.Member(member_id=m, topics=topics, state=groups.STABLE, owned=list(qs), held=list(qs),
                         target=list(qs), generation=1, session_timeout_ms=300_000)
        for m, qs in first.items()})  # a settled group at generation 1
    disturbed, ms, members, next_id = [], [], [f"m{i:05d}" for i in range(n_members)], n_members
    for ev in events_for(n_members, n_events, random.Random(seed)):
        now += 10
        t0 = time.perf_counter()
        if ev == "join":
            new = f"m{next_id:05d}"
            next_id += 1
            st, _ = groups.join(st, new, topics, [], 300_000, now, counts)
            members.append(new)
            d = 1
        else:
            gone = rng.choice(members)
            members.remove(gone)
            st, _ = groups.leave(st, gone, now, counts)
            d = 0
        ms.append((time.perf_counter() - t0) * 1000)
        d += sum(1 for m in st.members.values() if m.state == groups.PREPARING)
        disturbed.append(d)
        st = settle(st, now, counts)
    return disturbed, ms


def settle(st, now, counts):
    for _ in range(10):
        busy = False
        for mid in sorted(st.members):
            m = st.members[mid]
            if m.state == groups.PREPARING:
                owned = [{"topic": t, "queue": q} for t, q in m.owned]
                st, _ = groups.join(st, mid, m.topics, owned, m.session_timeout_ms, now, counts)
                busy = True
            if st.members[mid].state == groups.AWAITING:
                st, _ = groups.sync(st, mid, st.members[mid].generation, now, counts)
                busy = True
        if not busy:
            return st
    raise RuntimeError("group did not settle")


# ---------------------------------------------------------------------------------------- main
def machine():
    lines = [f"python {platform.python_version()} on {platform.platform()}", f"nproc: {os.cpu_count()}"]
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smaller scenarios, under a minute")
    ap.add_argument("--events", type=int, default=None, help="rebalances per scenario")
    args = ap.parse_args()
    if args.quick:
        sizes, n_events, kafka_limit = [(10, 100), (100, 1_000), (1_000, 10_000)], args.events or 4, 1_000
    else:
        sizes, n_events, kafka_limit = [(10, 100), (100, 1_000), (300, 3_000), (1_000, 10_000)], args.events or 10, 3_000
    kafka, kversion = kafka_assignors()
    print("\n".join(machine()))
    print(f"kafka-python: {kversion or 'not installed (lakeq only)'}")
    print(f"churn: {n_events} rebalances per scenario (join/leave/crash), {QUEUES_PER_TOPIC} queues per topic, "
          "every member subscribed to every topic\n")
    header = (f"{'members x queues':>17} | {'assignor':<18} | {'moved/reb':>9} | {'min/reb':>7} | {'vs lakeq':>8} | "
              f"{'max-min':>7} | {'ms/reb':>8} | {'disturbed/reb':>13} | {'vs lakeq':>8}")
    print(header)
    print("-" * len(header))
    ours = {"lakeq sticky": lambda s, c, g: sticky(s, c),
            "lakeq range": lambda s, c, g: range_assignor(s, c),
            "lakeq round-robin": lambda s, c, g: round_robin(s, c)}
    for n_members, n_queues in sizes:
        chosen = dict(ours)
        # kafka-python's sticky executors take minutes per rebalance at the largest sizes
        skipped = []
        for name, fn in kafka.items():
            if "sticky" not in name or n_queues <= kafka_limit:
                chosen[name] = fn
            else:
                skipped.append(name)
        t_start = time.perf_counter()
        stats, events = run_scenario(n_members, n_queues, n_events, chosen)
        p_disturbed, p_ms = protocol_run(n_members, n_queues, n_events)
        base_moved = statistics.mean(stats["lakeq sticky"]["moved"]) or 1e-9
        base_dist = statistics.mean(p_disturbed) or 1e-9
        for name, s in stats.items():
            moved = statistics.mean(s["moved"])
            dist = statistics.mean(p_disturbed) if name == "lakeq sticky" else statistics.mean(s["disturbed"])
            label = "lakeq sticky+proto" if name == "lakeq sticky" else name
            print(f"{n_members:>7} x {n_queues:<7} | {label:<18} | {moved:>9.1f} | {statistics.mean(s['min']):>7.1f} | "
                  f"{moved / base_moved:>7.1f}x | {max(s['imb']):>7.0f} | {statistics.mean(s['ms']):>8.2f} | "
                  f"{dist:>13.1f} | {dist / base_dist:>7.1f}x")
        print(f"{'':>17} | lakeq groups.join/leave transition: {statistics.mean(p_ms):.1f} ms mean, "
              f"{max(p_ms):.1f} ms max; events {''.join(e[0] for e in events)}; "
              f"scenario {time.perf_counter() - t_start:.1f} s")
        if skipped:
            print(f"{'':>17} | skipped here (too slow, see docs/benchmarks.md): {', '.join(skipped)}")
        print("-" * len(header))
    if not kafka:
        print("kafka-python not installed: pip install kafka-python to compare")


if __name__ == "__main__":
    main()
