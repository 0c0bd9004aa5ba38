"""Consumer-group storage: item sizes and request units per join / heartbeat at 10, 100, 1,000
members (in-process moto, tables from template.yaml; units computed from the items' sizes as
DynamoDB bills them on demand: reads per 4 KB, consistent; writes per 1 KB; transactional ×2).

    python bench/group_storage.py [--quick]     (--quick: 10 and 100 members only)

Each group: n-1 stable members written through the repository, each on the same 3 topics of 64
queues (60-character names); then the n-th member joins over the service (a full rebalance), syncs,
and heartbeats. "one item per group" is the size the previous layout (``GroupState.to_dict`` JSON +
subscriptions in one item) would have for the same state.
"""
from __future__ import annotations

import json
import math
import os
import random
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# bench/queue.py would shadow the standard library's ``queue`` (urllib3 imports it)
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]
sys.path[:0] = [str(ROOT), str(ROOT / "layers" / "core"), str(ROOT / "layers" / "matcher")]
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ["AWS_ACCOUNT_ID_ENDPOINT_MODE"] = "disabled"

from infra.local import template as tpl  # noqa: E402

os.environ.update(tpl.environment(tpl.load_template(), tpl.LOCAL_STACK))

import boto3  # noqa: E402
from moto import mock_aws  # noqa: E402

from infra.local import interceptor  # noqa: E402


def _vsize(v: dict) -> int:
    (t, x), = v.items()
    if t == "S":
        return len(x.encode("utf-8"))
    if t == "N":
        return (len(str(x).lstrip("-").replace(".", "").lstrip("0")) + 1) // 2 + 1
    if t == "B":
        return len(x)
    if t in ("L",):
        return 3 + sum(1 + _vsize(e) for e in x)
    if t in ("M",):
        return 3 + sum(len(k) + 1 + _vsize(e) for k, e in x.items())
    if t in ("SS", "NS", "BS"):
        return sum(_vsize({t[0]: e}) for e in x)
    return 1


def size(item: dict) -> int:
    return sum(len(k.encode("utf-8")) + _vsize(v) for k, v in item.items())


class Units:
    def __init__(self):
        self.rru = 0.0
        self.wru = 0
        self.writes: list[tuple[str, int]] = []

    def before(self, call):
        p = call.params
        if call.operation == "PutItem":
            s = size(p["Item"])
            self.wru += math.ceil(s / 1024)
            self.writes.append((p["TableName"].split("-")[-1], s))
        elif call.operation == "TransactWriteItems":
            for it in p["TransactItems"]:
                if "Put" in it:
                    s = size(it["Put"]["Item"])
                    self.writes.append(("txn:" + it["Put"]["TableName"].split("-")[-1], s))
                    self.wru += 2 * math.ceil(s / 1024)
                else:
                    self.wru += 2
        elif call.operation == "DeleteItem":
            self.wru += 1

    def after(self, call, response):
        op = call.operation
        if op == "GetItem" and "Item" in response:
            self.rru += math.ceil(size(response["Item"]) / 4096)
        elif op == "GetItem":
            self.rru += 1
        elif op == "Query":
            self.rru += max(1, math.ceil(sum(size(i) for i in response.get("Items", [])) / 4096))
        elif op == "BatchGetItem":
            for items in response.get("Responses", {}).values():
                self.rru += sum(math.ceil(size(i) / 4096) for i in items)
        elif op == "Scan":
            self.rru += max(1, math.ceil(sum(size(i) for i in response.get("Items", [])) / 4096)) / 2
        return response


def measure(n: int) -> dict:
    from lakeq.admin import auth as lq_auth
    from lakeq.common import clock
    from lakeq.consume import service
    from lakeq.groups import service as group_service
    from lakeq.rebalance import state as g
    from lakeq.store import groups as group_store
    from lakeq.store.models import ClientModel, GroupModel, TopicModel

    names = [f"{'t' * 60}{i}" for i in range(3)]
    for t in names:
        TopicModel(t, queues=64, created_at=1).save()
    ClientModel("big", role="consumer", topics=names, key_hash="0" * 64, created_at=1).save()
    lq_auth.clear_caches()
    now = 1_800_000_000_000
    clock.now = lambda: now
    st = g.new_group("big")
    rnd = random.Random(n)
    mids = [uuid.UUID(int=rnd.getrandbits(128)).hex for _ in range(n - 1)]  # as the server picks them
    for mid in mids:
        st.members[mid] = g.Member(mid, sorted(names), state=g.AWAITING, last_heartbeat=now - rnd.randint(0, 15_000),
                                   joined_at=now - rnd.randint(0, 10**7), sync_deadline=now + 45_000)
    st, _ = g.force_rebalance(st, now, {t: 64 for t in names}, "seed")
    for m in st.members.values():
        m.owned, m.held, m.state, m.sync_deadline, m.generation = list(m.target), list(m.target), g.STABLE, None, st.generation
    view = group_store.View("big", None, g.new_group("big"), {})
    group_store.GroupRepo._write_header(view, st, {m: names for m in mids}, now)
    p = service.Principal(admin=True)
    out = {"members": n}
    last = uuid.UUID(int=rnd.getrandbits(128)).hex

    def run(label, fn):
        u = Units()
        t0 = time.perf_counter()
        with interceptor.hooked(u), interceptor.acting_as("GroupsFunction"):
            r = fn()
        out[label] = {"rru": u.rru, "wru": u.wru, "writes": u.writes, "ms": round((time.perf_counter() - t0) * 1000)}
        return r

    from lakeq.store.models import GroupMemberModel
    gen = st.generation
    # every header lease lapsed (45 s after the seed) while everyone heartbeated into its liveness
    # item: the next request reads them all and renews the leases (one header write)
    now += 45_001
    clock.now = lambda: now
    for m in mids:
        GroupMemberModel("big", m, lh=now - rnd.randint(0, 15_000), gen=gen).save()
    run("heartbeat_renewing_leases", lambda: group_service.heartbeat(p, "big", mids[0], json.dumps({"generation": gen})))
    r = run("join", lambda: group_service.join(p, "big", json.dumps({"member_id": last, "topics": names})))
    gen = r["generation"]
    hdr = GroupModel.get("big", consistent_read=True)
    out["header_bytes"] = len(hdr.state.encode()) if hdr.state else len(hdr.state_z)
    out["header_compressed"] = hdr.state is None
    run("sync", lambda: group_service.sync(p, "big", last, json.dumps({"generation": gen})))
    now += 1000
    clock.now = lambda: now
    run("heartbeat", lambda: group_service.heartbeat(p, "big", last, json.dumps({"generation": gen})))
    state = group_store.GroupRepo.load("big")
    old = len(json.dumps(state.to_dict(), separators=(",", ":"), sort_keys=True)) + \
        len(json.dumps({m: names for m in state.members}, separators=(",", ":")))
    out["one_item_per_group_bytes"] = old
    return out


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="10 and 100 members only")
    args = ap.parse_args()
    rows = []
    for n in (10, 100) if args.quick else (10, 100, 1000):
        with mock_aws():
            tpl.create_tables(boto3.client("dynamodb", region_name="us-east-1"), tpl.load_template(), tpl.LOCAL_STACK)
            rows.append(measure(n))
    print(json.dumps([{k: v for k, v in r.items()} for r in rows], indent=None))
    print()
    print("| members | header item | old single item (baseline) | header / old | join RRU/WRU | sync RRU/WRU | heartbeat RRU/WRU (write) "
          "| lease-renewing heartbeat RRU/WRU |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        hb = r["heartbeat"]
        print(f"| {r['members']} | {r['header_bytes']:,} B{' (zlib)' if r['header_compressed'] else ''} "
              f"| {r['one_item_per_group_bytes']:,} B | {r['header_bytes'] / r['one_item_per_group_bytes']:.3f}× "
              f"| {r['join']['rru']:g} / {r['join']['wru']} "
              f"| {r['sync']['rru']:g} / {r['sync']['wru']} "
              f"| {hb['rru']:g} / {hb['wru']} ({', '.join(f'{t} {s} B' for t, s in hb['writes'])}) "
              f"| {r['heartbeat_renewing_leases']['rru']:g} / {r['heartbeat_renewing_leases']['wru']} |")


if __name__ == "__main__":
    main()
