"""A replay into a consumer group (issue 18.1, the ``{"group": g}`` target: lakeq.replay.group_target,
lakeq.consume.replays, lakeq.store.replay_lists).

The copier (another helper's ReplayFunction) calls ``begin``, ``sink(...)(copies)`` and ``end``; here
the tests call them as it would, with manifest rows as the selection job writes them plus the copier's
``pos``. What is checked: only the target group's pulls see the copies (in order per source queue,
each once, before its topic queues); another group of the topic is untouched (offsets, deliveries,
store calls); a chunk sunk again after a crash appends nothing twice (hypothesis over crash points,
through the copier's own loop); acks, folded acks, release/redelivery, reject and max_deliveries
dead letters, visibility; ``end`` removes the marker (when drained; until then it answers False and
the schedule asks again) and later pulls cost what they did before the replay; members of a group.
"""
from __future__ import annotations

import itertools
import json
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lakeq.admin import auth as lq_auth
from lakeq.consume.replays import replay_reader
from lakeq.replay import group_target as gt
from lakeq.replay.copier import Copy, Progress
from lakeq.replay.copier import run as copier_run
from lakeq.replay.rules import copy_id
from lakeq.store.models import ClientModel, OffsetModel
from lakeq.store.offsets import OffsetRepo
from lakeq.store.replay_lists import ReplayListRepo, replay_log, replay_owner
from tests.crash import CountCalls

T = "quotes/sh"
PATH = "/v1/topics/quotes%2Fsh/messages"
DLQ = "/v1/topics/dlq/messages"
ACKS = "/v1/acks"
_ids = itertools.count(1)


def rows(n: int, start: int = 0, body=lambda pos: f"b{pos}") -> list[dict]:
    """Manifest rows at positions ``start..start+n-1``: queue 0 first, then queue 1 (the manifest's order
    is per queue), source offsets 100 + pos, properties as JSON text (as the job writes them)."""
    out = []
    for pos in range(start, start + n):
        q = pos % 2
        out.append({"pos": pos, "queue": q, "offset": 100 + pos, "id": f"m{pos}", "key": f"k{q}",
                    "tags": ["a"] if pos % 2 else [], "properties": json.dumps({"i": pos}),
                    "produced_at": 1_700_000_000_000 + pos, "body": body(pos), "claim": None})
    return sorted(out, key=lambda r: (r["queue"], r["offset"]))


def ordered(rs: list[dict]) -> list[dict]:
    """``rs`` with positions renumbered in manifest order (per queue, by offset)."""
    return [{**r, "pos": i} for i, r in enumerate(rs)]


def copies(rs: list[dict]) -> list[Copy]:
    return [Copy(copy_id(T, r["queue"], r["offset"]), r) for r in rs if r.get("body") is not None]


def pull(api, key, group="risk", path=PATH, **q):
    s, b = api.call("GET", path, query={"group": group, **q}, key=key)
    assert s == 200, b
    return b


def ack(api, key, receipt, group="risk", **outcomes):
    return api.call("POST", ACKS, {"group": group, "receipt": receipt, **outcomes}, key=key)


def offsets(api, key, group):
    s, b = api.call("GET", f"/v1/groups/{group}/offsets", query={"topic": T}, key=key)
    assert s == 200, b
    return b


def ops(calls) -> Counter:
    return Counter(c.operation for c in calls)


def replays_of(group: str):
    return ClientModel.get(group, consistent_read=True).replays


@pytest.fixture
def two(api, setup):
    """``setup`` plus consumer ``audit`` (also granted quotes) and 4 messages in quotes/sh."""
    s, audit = api.call("POST", "/v1/clients", {"name": "audit", "role": "consumer", "topics": ["quotes"]})
    assert s == 201
    s, b = api.call("POST", PATH, {"producer": "feed", "messages": [{"body": f"t{i}", "key": "k"} for i in range(4)]},
                    key=setup["feed"])
    assert s == 200, b
    return {**setup, "audit": audit["api_key"]}


def start(rid: str, rs: list[dict], chunk: int = 5, group: str = "risk") -> int:
    """begin + the copies sunk chunk by chunk, as the copier does; then the pulls' client caches are
    dropped (as 5 s passing would)."""
    gt.begin(rid, T, group)
    put = gt.sink(rid, T, group)
    added = sum(put(copies(rs[i:i + chunk])) for i in range(0, len(rs), chunk))
    lq_auth.clear_caches()
    return added


def shown(m: dict) -> tuple:
    return (m["id"], m["topic"], m["queue"], m["offset"], m["key"], m["tags"], m["properties"], m["body"],
            m["produced_at"])


def expected(r: dict) -> tuple:
    return (r["id"], T, r["queue"], r["offset"], r["key"], r["tags"], json.loads(r["properties"]), r["body"],
            r["produced_at"])


def test_copies_reach_the_target_group_only_in_order_once(api, two):
    # audit reads part of the topic first: its offsets must not move because of the replay
    b = pull(api, two["audit"], group="audit", max=2)
    assert len(b["messages"]) == 2 and ack(api, two["audit"], b["receipt"], group="audit")[0] == 200
    lq_auth.clear_caches()
    with CountCalls() as c0:
        b = pull(api, two["audit"], group="audit", max=1, wait_ms=0)
    assert [m["body"] for m in b["messages"]] == ["t2"] and ack(api, two["audit"], b["receipt"], group="audit")[0] == 200
    before = offsets(api, two["audit"], "audit")
    rs = ordered(rows(10))
    assert start("rp_a1", rs, chunk=4) == 10
    assert replays_of("risk") == {f"rp_a1|{T}"} and replays_of("audit") is None

    got, receipt = [], None
    while True:  # risk: the replay's copies first (folded acks), then its topic messages
        b = pull(api, two["risk"], max=3, **({"ack": receipt} if receipt else {}))
        if not b["messages"]:
            break
        got += [(b["receipt"].split(":")[1], m) for m in b["messages"]]
        receipt = b["receipt"]
    fields = [q for q, _ in got]
    assert fields == ["~r.rp_a1"] * 10 + [f"{T}@{got[-1][1]['queue']}"] * 4
    assert [shown(m) for _, m in got[:10]] == [expected(r) for r in rs]
    assert all(m["deliveries"] == 1 for _, m in got)
    assert [m["body"] for _, m in got[10:]] == ["t0", "t1", "t2", "t3"]

    # audit: untouched — same offsets, its next pull serves its own topic messages at the same cost
    assert offsets(api, two["audit"], "audit") == before
    lq_auth.clear_caches()
    with CountCalls() as c1:
        b = pull(api, two["audit"], group="audit", max=1, wait_ms=0)
    assert [m["body"] for m in b["messages"]] == ["t3"]
    assert ops(c1.calls) == ops(c0.calls)
    assert not any(r.owner.startswith("g|audit|~") for r in OffsetModel.scan(consistent_read=True))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(1, 14), chunk=st.integers(1, 5), crashes=st.sets(st.integers(0, 12), max_size=4),
       missing=st.sets(st.integers(0, 13), max_size=3))
def test_a_chunk_sunk_again_after_a_crash_appends_nothing_twice(api, setup, n, chunk, crashes, missing):
    rid = f"rp_h{next(_ids)}"
    rs = ordered(rows(n, body=lambda pos: None if pos in missing else f"b{pos}"))
    gt.begin(rid, T, "risk")
    put = gt.sink(rid, T, "risk")
    stored = [Progress(found=n)]
    saves = itertools.count()

    class Crash(Exception):
        pass

    def save(old, new):
        if stored[0] != old:
            return False
        if next(saves) in crashes:  # the copies are in the list, the cursor is not written: a crash
            raise Crash()
        stored[0] = new
        return True

    for _ in range(50):
        try:
            p = copier_run(T, lambda: stored[0], save, lambda a, b: rs[a:b], put, rate=1000, chunk=chunk)
            break
        except Crash:
            continue
    assert p.done
    want = [r for r in rs if r["body"] is not None]
    q = ReplayListRepo.queue(rid)
    assert int(q.max_offset) == len(want)
    got, _ = replay_reader(replay_log(rid), None)(0, 0, 1000, int(q.max_offset))
    assert [(m["id"], m["queue"], m["offset"]) for m in got] == [(r["id"], r["queue"], r["offset"]) for r in want]
    assert p.copied == len(want) and p.failed == n - len(want)


def test_a_sink_split_over_transactions_resumes_after_a_crash(api, setup, monkeypatch):
    big = "x" * 300_000  # 12 copies of 300 kB: more than one transaction (3.5 MB each)
    rs = ordered(rows(12, body=lambda pos: big + str(pos)))
    gt.begin("rp_big", T, "risk")
    put = gt.sink("rp_big", T, "risk")
    real = ReplayListRepo.append
    done = []

    def once(*a, **k):  # the first transaction lands, then the copier dies
        if done:
            raise RuntimeError("crash")
        done.append(real(*a, **k))
        return done[-1]
    monkeypatch.setattr(ReplayListRepo, "append", staticmethod(once))
    with pytest.raises(RuntimeError):
        put(copies(rs))
    first = int(ReplayListRepo.queue("rp_big").max_offset)
    assert 0 < first < 12
    monkeypatch.setattr(ReplayListRepo, "append", staticmethod(real))
    with CountCalls() as c:
        assert put(copies(rs)) == 12 - first  # the rest only
    assert put(copies(rs)) == 0
    got, _ = replay_reader(replay_log("rp_big"), None)(0, 0, 100, 12)
    assert [m["id"] for m in got] == [r["id"] for r in rs]
    del c


def test_ack_release_reject_dead_letters_and_visibility(api, two, clock):
    assert api.call("POST", "/v1/topics", {"name": "dlq", "queues": 1})[0] == 201
    s, dl = api.call("POST", "/v1/clients", {"name": "dlqc", "role": "consumer", "topics": ["dlq"]})
    assert s == 201
    assert api.call("PATCH", "/v1/clients/risk", {"max_deliveries": 2, "dead_letter_topic": "dlq"})[0] == 200
    rs = ordered(rows(4))
    start("rp_s1", rs)
    b = pull(api, two["risk"], max=3)
    r1 = b["receipt"]
    assert r1.split(":")[1:4] == ["~r.rp_s1", "0", "3"]
    s, out = ack(api, two["risk"], r1, accept=[0], release=[1], reject=[2])
    assert s == 200 and out == {"replay": "rp_s1", "queue": 0, "committed_offset": 1, "unsettled": []}
    assert ack(api, two["audit"], r1, group="audit")[0] == 409  # another group's ack settles nothing
    assert ack(api, two["risk"], "lakeq:~r.rp_zz:0:1:5")[0] == 409  # no such list of risk's
    b = pull(api, two["risk"], max=1)  # the released one first, again (list order: m0 m2 | m1 m3)
    assert [(m["id"], m["deliveries"]) for m in b["messages"]] == [("m2", 2)]
    s, v = api.call("POST", "/v1/visibility", {"group": "risk", "receipt": b["receipt"], "visibility_timeout_ms": 0},
                    key=two["risk"])
    assert s == 200 and v["replay"] == "rp_s1"  # ended unsettled at its 2nd delivery: dead-lettered
    b = pull(api, two["risk"], max=3)
    assert [m["id"] for m in b["messages"]] == ["m3"]
    assert ack(api, two["risk"], b["receipt"])[0] == 200
    assert ack(api, two["risk"], b["receipt"])[0] == 200  # a retry
    dead = pull(api, dl["api_key"], group="dlqc", path=DLQ, max=10)["messages"]
    assert sorted((m["dead_letter"]["id"], m["dead_letter"]["reason"], m["dead_letter"]["topic"],
                   m["dead_letter"]["offset"], m["body"]) for m in dead) == [
        ("m1", "rejected", T, 101, "b1"), ("m2", "max_deliveries", T, 102, "b2")]
    rec = OffsetRepo.get(replay_owner("risk", "rp_s1"), 0)
    assert int(rec.committed_offset) == 4 and int(rec.dead_lettered) == 2


def test_folded_ack_of_a_list_is_one_write(api, two):
    start("rp_f1", ordered(rows(6)))
    b1 = pull(api, two["risk"], max=2)
    with CountCalls() as c:
        b2 = pull(api, two["risk"], max=2, ack=b1["receipt"])
    assert [m["id"] for m in b1["messages"]] == ["m0", "m2"]  # (list order: m0 m2 m4 | m1 m3 m5)
    assert [m["id"] for m in b2["messages"]] == ["m4", "m1"]
    o = ops(c.calls)
    assert o["UpdateItem"] == 1 and o["BatchGetItem"] == 0, o
    again = pull(api, two["risk"], max=2, ack=b1["receipt"])  # a retried pull: the list is locked by b2,
    assert again["receipt"].split(":")[1] != "~r.rp_f1"  # so the topic's queues serve it (as another queue would)
    assert ack(api, two["risk"], b2["receipt"])[0] == 200
    b3 = pull(api, two["risk"], max=2, ack=b2["receipt"])  # an ack already written, as a topic's
    assert [m["id"] for m in b3["messages"]] == ["m3", "m5"]


def test_end_removes_the_marker_and_pulls_cost_what_they_did(api, two):
    def drain():
        receipt = None
        for _ in range(20):
            b = pull(api, two["risk"], max=10, **({"ack": receipt} if receipt else {}))
            if not b["messages"]:
                return
            receipt = b["receipt"]

    drain()  # the topic's own messages
    lq_auth.clear_caches()
    with CountCalls() as before:
        assert pull(api, two["risk"], wait_ms=0)["messages"] == []

    # ended while drained: the marker goes at once
    start("rp_e1", ordered(rows(3)))
    drain()
    assert gt.end("rp_e1", T, "risk", cancelled=False) is True
    assert replays_of("risk") is None

    # ended before drained: the marker stays (end says so, and the schedule asks again) until the
    # group settled every entry; pulls never remove it (ConsumeFunction writes no client item)
    start("rp_e2", ordered(rows(3)))
    assert gt.end("rp_e2", T, "risk", cancelled=False) is False
    assert gt.end("rp_e2", T, "risk", cancelled=False) is False  # idempotent
    assert replays_of("risk") == {f"rp_e2|{T}"}
    b = pull(api, two["risk"], max=10)
    assert len(b["messages"]) == 3
    assert gt.end("rp_e2", T, "risk", cancelled=False) is False  # delivered, not settled
    assert pull(api, two["risk"], max=10, ack=b["receipt"])["messages"] == []
    assert replays_of("risk") == {f"rp_e2|{T}"}  # the pull that drained it wrote no client item
    assert gt.end("rp_e2", T, "risk", cancelled=False) is True
    assert replays_of("risk") is None

    lq_auth.clear_caches()
    with CountCalls() as after:
        assert pull(api, two["risk"], wait_ms=0)["messages"] == []
    assert ops(after.calls) == ops(before.calls)

    # cancelled: at once, undelivered copies and all
    start("rp_e3", ordered(rows(3)))
    assert gt.end("rp_e3", T, "risk", cancelled=True) is True
    assert replays_of("risk") is None
    lq_auth.clear_caches()
    assert pull(api, two["risk"], max=10)["messages"] == []


def test_begin_is_idempotent_and_a_group_with_two_replays_reads_the_oldest_first(api, two):
    start("rp_o1", ordered(rows(2)))
    start("rp_o2", ordered(rows(2, start=2)))
    gt.begin("rp_o1", T, "risk")
    assert start("rp_o1", ordered(rows(2))) == 0  # begun and sunk again: nothing new
    lq_auth.clear_caches()
    ids = []
    receipt = None
    for _ in range(4):
        b = pull(api, two["risk"], max=10, **({"ack": receipt} if receipt else {}))
        ids.append([m["id"] for m in b["messages"]])
        receipt = b["receipt"]
    assert ids[:2] == [["m0", "m1"], ["m2", "m3"]]
    assert [x for x in ids[2] if x.startswith("m")] == []


def test_members_of_a_group_share_the_list(api, two):
    k = two["risk"]
    s, a = api.call("POST", "/v1/groups/risk/members", {"topics": ["quotes/sh"], "session_timeout_ms": 60_000}, key=k)
    assert s == 200, a
    ma = a["member_id"]
    assert api.call("POST", f"/v1/groups/risk/members/{ma}/sync", {"generation": 1}, key=k)[0] == 200
    s, b = api.call("POST", "/v1/groups/risk/members", {"member_id": "mb", "topics": ["quotes/sh"]}, key=k)
    assert s == 200, b
    start("rp_m1", ordered(rows(6)))
    b1 = pull(api, k, member_id=ma, max=2)
    b2 = pull(api, k, member_id="mb", max=2)  # the list is locked by ma: mb gets none of its entries
    assert [m["id"] for m in b1["messages"]] == ["m0", "m2"]
    assert all(not m["id"].startswith("m") for m in b2["messages"])
    if b2["receipt"]:
        assert ack(api, k, b2["receipt"])[0] == 200
    assert ack(api, k, b1["receipt"])[0] == 200
    b3 = pull(api, k, member_id="mb", max=10)
    assert [m["id"] for m in b3["messages"]] == ["m4", "m1", "m3", "m5"]
    rec = OffsetRepo.get(replay_owner("risk", "rp_m1"), 0)
    assert rec.lock_owner == "mb"


def test_broadcasting_instances_each_read_the_list(api, two, clock):
    s, bc = api.call("POST", "/v1/clients", {"name": "bc", "role": "consumer", "topics": ["quotes"],
                                             "mode": "broadcasting"})
    assert s == 201
    k = bc["api_key"]
    start("rp_b1", ordered(rows(3)), group="bc")
    for cid in ("i1", "i2"):  # each instance: every copy once, then its own topic messages
        b = pull(api, k, group="bc", client_id=cid, max=10)
        assert [m["id"] for m in b["messages"]] == ["m0", "m2", "m1"]
        b = pull(api, k, group="bc", client_id=cid, max=10, ack=b["receipt"])
        assert [m["body"] for m in b["messages"]] == ["t0", "t1", "t2", "t3"]
        assert ack(api, k, b["receipt"], group="bc", client_id=cid)[0] == 200
    assert gt.end("rp_b1", T, "bc", cancelled=False) is False
    assert replays_of("bc") == {f"rp_b1|{T}"}  # instances are not known: it stays for the list's TTL
    lq_auth.clear_caches()
    assert pull(api, k, group="bc", client_id="i3", max=10)["messages"][0]["id"] == "m0"  # a late instance
    clock.t += 15 * 24 * 3600 * 1000  # past the list's TTL after the end: the schedule's next call removes it
    assert gt.end("rp_b1", T, "bc", cancelled=False) is True
    assert replays_of("bc") is None


def test_a_clustering_group_that_never_settles_the_list_is_released_after_its_ttl(api, two, clock):
    """A group that never pulls its replay's copies: the list cannot drain (its entries expire with
    the list's TTL), so the marker goes, and the replay stops being live, once the TTL has passed
    since the end — not never (the schedule asked every minute for ever before)."""
    start("rp_n1", ordered(rows(3)))
    assert gt.end("rp_n1", T, "risk", cancelled=False) is False
    clock.t += 13 * 24 * 3600 * 1000  # within the TTL: still waiting for the group
    assert gt.end("rp_n1", T, "risk", cancelled=False) is False
    assert replays_of("risk") == {f"rp_n1|{T}"}
    clock.t += 2 * 24 * 3600 * 1000  # past it
    assert gt.end("rp_n1", T, "risk", cancelled=False) is True
    assert replays_of("risk") is None


def test_a_claimed_body_is_copied_to_the_lists_own_object(api, two, aws):
    """A manifest row whose body is in the lake bucket (a claim): the list's entry names its own
    object (copied in the bucket, a new lifetime: the bucket expires bodies/ by age, and a replay may
    copy a message made 399 days ago), so the group still gets the body once the source's object is
    gone. Sunk again (a chunk re-copied after a crash): the same object, nothing new."""
    import os

    from lakeq.log import claims
    from lakeq.store.bodies import BodyStore

    bucket = os.environ["LAKE_BUCKET"]
    data = ("z" * 400_000).encode()
    src = claims.make(T, "m0", data)
    BodyStore.put(src, data)
    rs = ordered(rows(2, body=lambda pos: ""))
    rs[0]["claim"] = json.dumps(src)
    assert start("rp_c1", rs) == 2
    assert start("rp_c1", rs) == 0  # again: nothing new, no second object
    keys = sorted(o["Key"] for o in aws["s3"].list_objects_v2(Bucket=bucket, Prefix=claims.PREFIX)["Contents"])
    assert len(keys) == 2 and src["key"] in keys
    aws["s3"].delete_object(Bucket=bucket, Key=src["key"])  # the source's object expires
    b = pull(api, two["risk"], max=10)
    got = {m["id"]: m["body"] for m in b["messages"] if m["id"].startswith("m")}
    assert got == {"m0": data.decode(), "m1": ""}


def test_a_replay_lists_segments_are_no_subscriptions_to_push():
    from lakeq.push.delivery import subscriptions_of_records
    rec = lambda pq: {"eventName": "INSERT", "dynamodb": {"Keys": {"pq": {"S": pq}}}}  # noqa: E731
    assert subscriptions_of_records([rec("~r.rp_1#0"), rec("~" + "a" * 32 + "#0")]) == ["a" * 32]


def test_a_group_push_endpoint_delivers_the_replay_first_and_acks_it(api, two, clock):
    """A group consuming through its push endpoint gets the replay's copies as a pulling group
    does: the list first (receipt ``~r.<id>``, each copy once, in order per source queue), then the
    topic's own messages; a 2xx settles the list's entries, so the replay's list is drained and the
    schedule may remove the marker. Another group's endpoint of the topic gets none of it."""
    from lakeq.push import delivery as push
    from tests.integration.test_push import Poster

    for key, group in ((two["risk"], "risk"), (two["audit"], "audit")):
        s, b = api.call("PUT", f"/v1/groups/{group}/push", {"url": "https://hooks.example.com/g", "topic": T,
                                                           "batch_size": 4}, key=key)
        assert s == 201, b
    rs = ordered(rows(6))
    start("rp_p1", rs)
    p = Poster()
    out = push.deliver_group("risk", p)
    envs = [json.loads(c[2]) for c in p.calls]
    from_list = [m for e in envs if e["receipt"].split(":")[1] == "~r.rp_p1" for m in e["messages"]]
    assert [m["id"] for m in from_list] == [r["id"] for r in rs]  # each once, in manifest order (per queue)
    assert all(e["receipt"].split(":")[1] == "~r.rp_p1" for e in envs[:2])  # the list went first
    assert sorted(m["body"] for e in envs[2:] for m in e["messages"]) == [f"t{i}" for i in range(4)]
    assert out.delivered == 10 and out.failed == 0
    assert gt.drained("rp_p1", "risk")
    assert gt.end("rp_p1", T, "risk", cancelled=False) is True
    q = Poster()
    push.deliver_group("audit", q)
    assert sorted(m["body"] for c in q.calls for m in json.loads(c[2])["messages"]) == [f"t{i}" for i in range(4)]
