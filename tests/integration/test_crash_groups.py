"""Crash injection on the consumer-group write paths (issue 8): join, re-join, heartbeat (nothing
changes / generation moved / expiring another member), sync, leave and the sweep.

For each path the handler is killed right after its k-th store call (``tests.crash.CrashAfter``;
every call whose operation writes, plus seeded read points), then the client retries as docs/guide-groups.md's
member loop does (the same request again; then heartbeat → re-join / sync as told, a 404 → join
again) until the group is stable. Checked after every request and at the end:

- the stored group decodes and every queue is servable (``held ∩ target``, as a pull sees it) to at
  most one member — also while members are mid-way;
- each generation in the GroupsTable stream has exactly one assignment, versions go up one by one;
- at the end nobody is stuck: every member stable, the queues split exactly among the members, each
  member consuming (its last sync) exactly what the server lets it pull.
"""
from __future__ import annotations

import random

import pytest

from infra.local import interceptor
from lakeq.rebalance import state as g
from lakeq.store import groups as group_store
from lakeq.store.models import GroupMemberModel, GroupModel, TopicModel
from tests.crash import CountCalls, CrashAfter, seeded_points
from tests.integration.test_groups_handlers import _history

# moto: these tests read DynamoDB Streams (the stream pump, the fan-out, the archiver), which the memory store has not
pytestmark = pytest.mark.moto

QUEUES = {("quotes", i) for i in range(4)} | {("quotes/sh", i) for i in range(2)}
WRITES = {"PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems", "BatchWriteItem"}
TIMEOUT = 10_000


@pytest.fixture
def clock(clock, monkeypatch):
    """The conftest's fake clock, and no backoff sleeps between retries."""
    monkeypatch.setattr(group_store, "BACKOFF_BASE_S", 0.0)
    return clock


def wire(qs):
    return [{"topic": t, "queue": i} for t, i in sorted(qs)]


class Member:
    """A client running docs/guide-groups.md's member loop."""

    def __init__(self, api, key, mid):
        self.api, self.key, self.mid = api, key, mid
        self.gen = 0
        self.owned: set = set()

    def join(self):
        s, b = self.api.call("POST", "/v1/groups/risk/members",
                             {"member_id": self.mid, "topics": ["quotes"], "owned": wire(self.owned),
                              "session_timeout_ms": TIMEOUT}, key=self.key)
        assert s == 200, b
        self.gen = b["generation"]
        return s, b

    def sync(self):
        s, b = self.api.call("POST", f"/v1/groups/risk/members/{self.mid}/sync", {"generation": self.gen},
                             key=self.key)
        if s == 404:
            self.owned = set()
            return self.join()
        if s == 409:  # stale_generation: a lost response moved this member on; join again
            return self.join()
        assert s == 200, b
        self.gen = b["generation"]
        self.owned = {(q["topic"], q["queue"]) for q in b["assignment"]}
        return s, b

    def heartbeat(self):
        s, b = self.api.call("POST", f"/v1/groups/risk/members/{self.mid}/heartbeat",
                             {"generation": self.gen, "owned": wire(self.owned)}, key=self.key)
        if s == 404:  # removed: join again with nothing
            self.owned = set()
            return self.join()
        if s == 409:  # stale_generation: a lost response moved this member on; join again
            return self.join()
        assert s == 200, b
        self.gen = b["generation"]
        if b["action"] == "rejoin":
            return self.join()
        if b["action"] == "sync":
            return self.sync()
        return s, b

    def leave(self):
        s, b = self.api.call("DELETE", f"/v1/groups/risk/members/{self.mid}", key=self.key)
        assert s in (204, 404), b  # a retried leave whose first try went through: 404
        return s, b


def check_disjoint(now: int) -> g.GroupState:
    """What pulls see (the header merged with the liveness items, as ``group_store.servable`` reads
    them): every queue servable to at most one member, no queue held by two."""
    st = group_store.GroupRepo.load("risk", now)
    seen: dict = {}
    for mid in st.members:
        try:
            qs = g.servable_queues(st, mid, now)
        except g.UnknownMember:
            continue
        for q in qs:
            assert q not in seen, f"{q} servable to {seen[q]} and {mid}"
            seen[q] = mid
    held = [q for m in st.members.values() for q in m.held]
    assert len(held) == len(set(held)), "a queue held by two members"
    return st


def check_stream(aws, start: int) -> int:
    hist = _history(aws)[start:]
    versions = [int(h["version"]["N"]) for h in hist]
    assert all(b == a + 1 for a, b in zip(versions, versions[1:])), versions
    per_gen: dict = {}
    for h in hist:
        st, _ = group_store.GroupRepo.decode("risk", GroupModel.from_raw_data(h))
        per_gen.setdefault(st.generation, set()).add(
            tuple(sorted((mid, tuple(m.target)) for mid, m in st.members.items())))
    assert all(len(v) == 1 for v in per_gen.values()), per_gen
    return start + len(hist)


def settle(members: list[Member], clock, rng: random.Random, rounds: int = 8) -> None:
    """Every live member heartbeats (and follows the action) in a random order until all are stable."""
    for _ in range(rounds):
        clock.t += rng.randint(50, 500)
        for m in rng.sample(members, len(members)):
            m.heartbeat()
            check_disjoint(clock.t)
        st = group_store.GroupRepo.load("risk", clock.t)
        if all(st.members[m.mid].state == g.STABLE for m in members if m.mid in st.members) and \
                {m.mid for m in members} <= set(st.members):
            break


def check_final(members: list[Member], now: int) -> None:
    st = check_disjoint(now)
    assert set(st.members) == {m.mid for m in members}
    assert all(m.state == g.STABLE for m in st.members.values()), {k: m.state for k, m in st.members.items()}
    got = {}
    for m in members:
        served = set(group_store.servable("risk", m.mid, now))
        assert m.owned == served, (m.mid, m.owned, served)  # consumes exactly what it may pull
        for q in served:
            assert q not in got
            got[q] = m.mid
    assert set(got) == QUEUES  # nothing stuck: every queue served by exactly one member


def _tables(call) -> set[str]:
    p = call.params
    if "TableName" in p:
        return {p["TableName"]}
    if "RequestItems" in p:
        return set(p["RequestItems"])
    return {next(iter(it.values()))["TableName"] for it in p.get("TransactItems", [])}


GROUP_TABLES = {GroupModel.Meta.table_name, GroupMemberModel.Meta.table_name, TopicModel.Meta.table_name}


class GroupCalls(CountCalls):
    """Counts only the calls to the groups' and topics' tables (the key and client lookups before
    them are cached for a while, so their number varies from one request to the next; a crash
    after one of them is a crash before the group code ran)."""

    def _counts(self, call) -> bool:
        return CountCalls._counts(self, call) and bool(_tables(call) & GROUP_TABLES)


class GroupCrashAfter(CrashAfter):
    def _counts(self, call) -> bool:
        return CountCalls._counts(self, call) and bool(_tables(call) & GROUP_TABLES)


def reset() -> None:
    for it in list(GroupModel.scan()):
        it.delete(add_version_condition=False)
    for it in list(GroupMemberModel.scan()):
        it.delete(add_version_condition=False)


# ------------------------------------------------------------------------------ the scenarios
def _stable(api, key, clock, rng, names):
    ms = [Member(api, key, n) for n in names]
    for m in ms:
        m.join()
        clock.t += 10
    settle(ms, clock, rng)
    return ms


def scenario(name, api, key, clock, rng):
    """``(members after the operation, the operation, members expected at the end)``."""
    if name == "join":
        ms = _stable(api, key, clock, rng, ["m1", "m2"])
        new = Member(api, key, "m3")
        return ms + [new], new.join, ms + [new]
    if name == "rejoin":
        ms = _stable(api, key, clock, rng, ["m1", "m2"])
        m3 = Member(api, key, "m3")
        m3.join()
        s, b = api.call("POST", "/v1/groups/risk/members/m1/heartbeat", {"generation": ms[0].gen}, key=key)
        ms[0].gen = b["generation"]
        return ms + [m3], ms[0].join, ms + [m3]
    if name == "heartbeat":
        ms = _stable(api, key, clock, rng, ["m1", "m2"])
        clock.t += 100
        return ms, ms[0].heartbeat, ms
    if name == "heartbeat_new_generation":
        ms = _stable(api, key, clock, rng, ["m1", "m2"])
        m3 = Member(api, key, "m3")
        m3.join()
        return ms + [m3], ms[1].heartbeat, ms + [m3]
    if name == "sync":
        ms = _stable(api, key, clock, rng, ["m1", "m2"])
        m3 = Member(api, key, "m3")
        m3.join()
        return ms + [m3], m3.sync, ms + [m3]
    if name == "leave":
        ms = _stable(api, key, clock, rng, ["m1", "m2", "m3"])
        clock.t += 100
        ms[2].heartbeat()  # m3 has a liveness item: the leave deletes it in the transaction
        return ms, ms[2].leave, ms[:2]
    if name in ("expire_on_heartbeat", "sweep"):
        ms = _stable(api, key, clock, rng, ["m1", "m2", "m3"])
        for _ in range(2):  # m3 goes silent; m1 and m2 keep heartbeating (liveness items only)
            clock.t += TIMEOUT // 2
            ms[0].heartbeat()
            ms[1].heartbeat()
        clock.t += 600  # m3 is now silent for longer than its session timeout
        if name == "sweep":
            def op():
                with interceptor.acting_as("GroupsSweepFunction"):
                    return group_store.sweep()
            return ms[:2], op, ms[:2]
        return ms[:2], ms[0].heartbeat, ms[:2]
    raise AssertionError(name)


PATHS = ["join", "rejoin", "heartbeat", "heartbeat_new_generation", "sync", "leave", "expire_on_heartbeat",
         "sweep"]
SEEDS = {"join": [1], "rejoin": [3], "heartbeat": [5], "heartbeat_new_generation": [7], "sync": [8, 9],
         "leave": [10, 11], "expire_on_heartbeat": [12, 13], "sweep": [14, 15]}


@pytest.mark.parametrize("path", PATHS)
def test_crash_after_each_store_call(aws, api, setup, clock, path):
    key = setup["risk"]
    stream = 0
    for seed in SEEDS[path]:
        # an uncrashed run: which calls does the operation make?
        reset()
        _, op, _ = scenario(path, api, key, clock, random.Random(seed))
        with GroupCalls() as c:
            op()
        calls = [x.operation for x in c.calls]
        writes = [i + 1 for i, o in enumerate(calls) if o in WRITES]
        assert writes, calls
        reads = [i + 1 for i, o in enumerate(calls) if o not in WRITES]
        points = sorted(set(writes) | {reads[j - 1] for j in seeded_points(seed, len(reads), 1)})
        stream = len(_history(aws))
        for k in points:
            rng = random.Random(seed)
            reset()
            members, op, final = scenario(path, api, key, clock, rng)
            stream = check_stream(aws, stream)
            with GroupCrashAfter(k) as crash:
                crashed, _ = crash.run(op)
            assert crashed and crash.calls[-1].operation == calls[k - 1], (k, calls)
            check_disjoint(clock.t)
            op()  # the client's retry: the same request again
            check_disjoint(clock.t)
            settle(final, clock, rng)
            check_final(final, clock.t)
            stream = check_stream(aws, stream)


def test_a_heartbeat_between_the_expirer_read_and_write_cancels_the_removal(aws, api, setup, clock):
    """The sweep reads m3's liveness (silent by the sweep's clock), then m3's heartbeat lands (in
    time by the clock of the Lambda serving it, writing only m3's liveness item), then the sweep's transaction (header + delete of
    m3's item conditional on its version) must fail and the retry must keep m3."""
    key = setup["risk"]
    reset()
    ms = _stable(api, key, clock, random.Random(0), ["m1", "m2", "m3"])
    clock.t += 100
    ms[2].heartbeat()  # m3 has a liveness item
    clock.t += TIMEOUT // 2
    ms[0].heartbeat()
    ms[1].heartbeat()
    clock.t += TIMEOUT // 2 + 1  # m3 silent for TIMEOUT + 1 by the sweep's clock
    fired = []

    class Interleave:
        def before(self, call):
            pass

        def after(self, call, response):
            if call.function == "GroupsSweepFunction" and call.operation == "Query" and not fired:
                fired.append(1)
                # the heartbeat's Lambda runs TIMEOUT behind: m3 is in time there, even by the header's
                # lease, so its heartbeat only writes m3's liveness item (a smaller skew makes it
                # renew the header, which the sweep's version condition catches anyway)
                clock.t -= TIMEOUT
                with interceptor.acting_as("GroupsFunction"):
                    s, b = api.call("POST", "/v1/groups/risk/members/m3/heartbeat", {"generation": ms[2].gen},
                                    key=key)
                assert s == 200 and b["action"] == "none", b
                clock.t += TIMEOUT
            return response

    with interceptor.hooked(Interleave()), interceptor.acting_as("GroupsSweepFunction"):
        stats = group_store.sweep()
    assert fired and stats["expired"] == 0
    st = check_disjoint(clock.t)
    assert set(st.members) == {"m1", "m2", "m3"}
