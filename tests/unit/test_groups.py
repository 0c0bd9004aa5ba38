"""Consumer-group state machine: the seed scenario end to end, errors, triggers, and a hypothesis
random-operation test checking the invariants after every step."""

import json

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from lakeq.rebalance import state as g
from lakeq.rebalance.assignors import Subscription, validate_assignment

COUNTS = {"t0": 1, "t1": 2, "t2": 3}
TOPICS = ["t0", "t1", "t2"]


def qs(*names):
    return sorted((n[:2], int(n[3:])) for n in names)


def wire(*names):
    return [{"topic": t, "queue": i} for t, i in qs(*names)]


def check_invariants(state: g.GroupState, counts=COUNTS):
    holder, serving = {}, {}
    for mid, m in state.members.items():
        assert m.state in g.STATES
        assert set(m.held) <= set(m.owned)
        if m.state != g.PREPARING:
            assert set(m.held) <= set(m.target), mid
        for q in m.held:
            assert q not in holder, f"{q} held by {holder[q]} and {mid}"
            holder[q] = mid
        for q in g.servable_queues(state, mid):
            assert q not in serving, f"{q} servable to {serving[q]} and {mid}"
            serving[q] = mid
    if state.members:
        subs = {mid: Subscription(m.topics) for mid, m in state.members.items()}
        targets = {mid: m.target for mid, m in state.members.items()}
        assert validate_assignment(targets, subs, counts) == []


def seed_state() -> g.GroupState:
    """Three stable members at generation 1, as in the seed."""
    owned = {"c0": qs("t0q0"), "c1": qs("t1q0"), "c2": qs("t1q1", "t2q0", "t2q1", "t2q2")}
    members = [
        g.Member(member_id=m, topics=TOPICS, state=g.STABLE, owned=q, held=q, target=q, generation=1,
                 last_heartbeat=0, session_timeout_ms=10_000).to_dict()
        for m, q in owned.items()
    ]
    d = {"group": "risk", "generation": 1, "assignor": "sticky", "members": members, "queue_counts": COUNTS}
    return g.GroupState.from_dict(json.loads(json.dumps(d)))


def states(st_):
    return {mid: m.state for mid, m in st_.members.items()}


# ----------------------------------------------------------------------------------- seed scenario
def test_seed_scenario_end_to_end():
    s = seed_state()
    check_invariants(s)
    before = {mid: m.target for mid, m in s.members.items()}

    s, r = g.join(s, "c3", TOPICS, [], 10_000, 1_000, COUNTS)
    assert r["generation"] == 2 and r["state"] == g.AWAITING and r["member_id"] == "c3"
    assert states(s) == {"c0": g.PREPARING, "c1": g.STABLE, "c2": g.PREPARING, "c3": g.AWAITING}
    assert s.members["c1"].target == before["c1"]
    # c2 must give up t2q1/t2q2 but can no longer be served them; nobody else is served them yet
    assert g.servable_queues(s, "c2") == qs("t1q1", "t2q0")
    check_invariants(s)

    s, r = g.heartbeat(s, "c1", 1, wire("t1q0"), 1_100, COUNTS)
    assert r == {"generation": 2, "action": "none", "sync_deadline_ms": None}  # silently moved
    s, r = g.heartbeat(s, "c0", 1, wire("t0q0"), 1_100, COUNTS)
    assert r["action"] == "rejoin" and r["generation"] == 2
    s, r = g.heartbeat(s, "c2", 1, wire("t1q1", "t2q0", "t2q1", "t2q2"), 1_100, COUNTS)
    assert r["action"] == "rejoin"
    s, r = g.heartbeat(s, "c3", 2, [], 1_100, COUNTS)
    assert r["action"] == "sync" and r["sync_deadline_ms"] == 11_000

    # c3 syncs before c2 released: it gets nothing yet
    s, r = g.sync(s, "c3", 2, 1_200, COUNTS)
    assert r == {"generation": 2, "assignment": []}
    check_invariants(s)

    s, r = g.join(s, "c2", TOPICS, wire("t1q1", "t2q0", "t2q1", "t2q2"), 10_000, 1_300, COUNTS)
    assert r["generation"] == 2 and r["state"] == g.AWAITING  # no restart
    assert s.members["c3"].state == g.AWAITING  # woken: t2q1 was released
    check_invariants(s)
    s, r = g.heartbeat(s, "c3", 2, [], 1_400, COUNTS)
    assert r["action"] == "sync"
    s, r = g.sync(s, "c3", 2, 1_400, COUNTS)
    assert r["assignment"] == wire("t2q1")
    s, r = g.sync(s, "c2", 2, 1_500, COUNTS)
    assert r["assignment"] == wire("t1q1", "t2q0")
    s, r = g.join(s, "c0", TOPICS, wire("t0q0"), 10_000, 1_600, COUNTS)
    s, r = g.sync(s, "c0", 2, 1_700, COUNTS)
    assert r["assignment"] == wire("t0q0", "t2q2")
    check_invariants(s)

    for mid in ("c0", "c1", "c2", "c3"):
        owned = [{"topic": t, "queue": i} for t, i in s.members[mid].owned]
        s, r = g.heartbeat(s, mid, 2, owned, 2_000, COUNTS)
        assert r["action"] == "none" and r["generation"] == 2
    d = g.describe(s)
    assert d["generation"] == 2 and d["group"] == "risk" and d["assignor"] == "sticky"
    after = {m["member_id"]: m["assignment"] for m in d["members"]}
    assert after == {"c0": wire("t0q0", "t2q2"), "c1": wire("t1q0"), "c2": wire("t1q1", "t2q0"), "c3": wire("t2q1")}
    assert all(m["state"] == g.STABLE for m in d["members"])
    # one queue moved between the existing members (c2 -> c0), c3 got its share (from c2)
    for mid in ("c0", "c1", "c2", "c3"):
        assert g.servable_queues(s, mid) == s.members[mid].target


def test_new_group_describes_generation_zero():
    assert g.describe(g.new_group("risk")) == {"group": "risk", "generation": 0, "assignor": "sticky", "members": []}
    with pytest.raises(g.GroupBadRequest):
        g.new_group("risk", "nope")


def quiesce(s, now, counts=COUNTS, rounds=10):
    """Every member follows its heartbeat's instructions until nothing is left to do."""
    for _ in range(rounds):
        busy = False
        for mid in sorted(s.members):
            m = s.members[mid]
            s, r = g.heartbeat(s, mid, m.generation, [{"topic": t, "queue": i} for t, i in m.owned], now, counts)
            if r["action"] == "rejoin":
                s, _ = g.join(s, mid, m.topics, [{"topic": t, "queue": i} for t, i in m.owned],
                              m.session_timeout_ms, now, counts)
                busy = True
            if s.members[mid].state == g.AWAITING:
                s, _ = g.sync(s, mid, s.members[mid].generation, now, counts)
                busy = True
        if not busy:
            return s
    raise AssertionError("did not quiesce")


def test_leave_rebalances_and_hands_queues_over():
    s = quiesce(seed_state(), 100)
    s, r = g.leave(s, "c2", 200, COUNTS)
    assert r["generation"] == 2 and "c2" not in s.members
    with pytest.raises(g.UnknownMember):
        g.heartbeat(s, "c2", 1, [], 300, COUNTS)
    s = quiesce(s, 300)
    check_invariants(s)
    served = sorted(q for mid in s.members for q in g.servable_queues(s, mid))
    assert served == qs("t0q0", "t1q0", "t1q1", "t2q0", "t2q1", "t2q2")
    assert s.generation == 2


def test_expiry_removes_silent_member_at_first_request():
    s = quiesce(seed_state(), 100)
    s, _ = g.heartbeat(s, "c0", 1, wire("t0q0"), 9_000, COUNTS)
    s, _ = g.heartbeat(s, "c1", 1, wire("t1q0"), 9_000, COUNTS)
    # c2 last heard of at 100 with a 10 s timeout: still there at 10_100, gone at 10_101
    s, r = g.expire(s, 10_100, COUNTS)
    assert r == {"expired": [], "generation": 1}
    s, r = g.heartbeat(s, "c0", 1, wire("t0q0"), 10_101, COUNTS)
    assert "c2" not in s.members and r["generation"] == 2
    with pytest.raises(g.UnknownMember) as e:
        g.sync(s, "c2", 1, 10_102, COUNTS)
    assert e.value.status == 404 and e.value.code == "unknown_member"
    # the error carries the housekeeping state, to be persisted
    s2 = g.new_group("x")
    s2, r = g.join(s2, "a", ["t0"], [], 1_000, 0, COUNTS)
    with pytest.raises(g.UnknownMember) as e:
        g.heartbeat(s2, "a", 1, [], 5_000, COUNTS)
    assert e.value.state is not None and e.value.state.members == {} and e.value.state.generation == 2


def test_zombie_generation_is_fenced():
    s = quiesce(seed_state(), 100)
    s, _ = g.join(s, "c3", TOPICS, [], 10_000, 200, COUNTS)
    s, r = g.heartbeat(s, "c1", 1, wire("t1q0"), 300, COUNTS)  # c1 now received generation 2
    assert r["generation"] == 2
    with pytest.raises(g.StaleGeneration) as e:
        g.heartbeat(s, "c1", 1, wire("t1q0"), 400, COUNTS)
    assert e.value.status == 409 and e.value.code == "stale_generation"
    assert e.value.to_body()["error"]["code"] == "stale_generation"
    with pytest.raises(g.StaleGeneration):
        g.sync(s, "c1", 1, 400, COUNTS)
    with pytest.raises(g.GroupBadRequest):
        g.heartbeat(s, "c1", 7, wire("t1q0"), 400, COUNTS)  # a generation that never existed
    # the zombie's request is no sign of life
    assert s.members["c1"].last_heartbeat == 300


def test_unknown_member_everywhere():
    s = seed_state()
    for call in (lambda: g.heartbeat(s, "zz", 1, [], 10, COUNTS), lambda: g.sync(s, "zz", 1, 10, COUNTS),
                 lambda: g.leave(s, "zz", 10, COUNTS), lambda: g.servable_queues(s, "zz"),
                 lambda: g.topics_changed(s, "zz", ["t0"], 10, COUNTS)):
        with pytest.raises(g.UnknownMember):
            call()


def test_subscription_change_on_rejoin_restarts_the_rebalance():
    s = quiesce(seed_state(), 100)
    s, _ = g.join(s, "c3", TOPICS, [], 10_000, 200, COUNTS)
    assert s.generation == 2 and s.members["c2"].state == g.PREPARING
    # c2 re-joins but now only wants t1: rebalance restarts at generation 3
    s, r = g.join(s, "c2", ["t1"], wire("t1q1", "t2q0", "t2q1", "t2q2"), 10_000, 300, COUNTS)
    assert r["generation"] == 3 and r["state"] == g.AWAITING
    assert all(q[0] == "t1" for q in s.members["c2"].target)
    assert all(q[0] == "t1" for q in g.servable_queues(s, "c2"))
    check_invariants(s)
    s = quiesce(s, 400)
    check_invariants(s)
    assert s.generation == 3
    assert sorted(q for m in s.members.values() for q in m.held) == qs("t0q0", "t1q0", "t1q1", "t2q0", "t2q1", "t2q2")


def test_rejoin_with_unexpected_owned_restarts():
    s = quiesce(seed_state(), 100)
    s, _ = g.join(s, "c3", TOPICS, [], 10_000, 200, COUNTS)
    # c0 lost its state and reports owning nothing: t0q0 is released, rebalance restarts
    s, r = g.join(s, "c0", TOPICS, [], 10_000, 300, COUNTS)
    assert r["generation"] == 3
    check_invariants(s)
    s = quiesce(s, 400)
    check_invariants(s)


def test_rejoin_of_stable_member_with_same_data_is_no_rebalance():
    s = quiesce(seed_state(), 100)
    s, r = g.join(s, "c1", TOPICS, wire("t1q0"), 10_000, 200, COUNTS)
    assert r["generation"] == 1 and r["state"] == g.AWAITING
    s, r = g.sync(s, "c1", 1, 300, COUNTS)
    assert r["assignment"] == wire("t1q0") and s.members["c1"].state == g.STABLE


def test_missed_deadline_removes_member():
    s = quiesce(seed_state(), 100)
    s, _ = g.join(s, "c3", TOPICS, [], 10_000, 200, COUNTS)
    # c0 keeps heartbeating but never re-joins: removed after its deadline (200 + 10_000)
    for now in (3_000, 6_000, 9_000):
        for mid in ("c0", "c1", "c2", "c3"):
            s, _ = g.heartbeat(s, mid, s.members[mid].generation, None, now, COUNTS)
    s, r = g.heartbeat(s, "c1", 2, None, 10_000, COUNTS)
    with pytest.raises(g.UnknownMember):
        g.heartbeat(s, "c0", 2, None, 10_201, COUNTS)
    s, _ = g.heartbeat(s, "c1", 2, None, 10_201, COUNTS)
    assert "c0" not in s.members and "c3" not in s.members  # c3 never synced either
    check_invariants(s)


def test_queue_count_growth_triggers_rebalance():
    s = quiesce(seed_state(), 100)
    grown = dict(COUNTS, t0=3)
    s, r = g.heartbeat(s, "c1", 1, wire("t1q0"), 200, grown)
    assert r["generation"] == 2
    check_invariants(s, grown)
    s = quiesce(s, 300, grown)
    assert sorted(q for m in s.members.values() for q in m.held) == sorted(
        (t, i) for t, n in grown.items() for i in range(n))


def test_topics_changed_server_side():
    s = quiesce(seed_state(), 100)
    s, r = g.topics_changed(s, "c0", ["t0"], 200, COUNTS)
    assert r["generation"] == 2
    s = quiesce(s, 300)
    assert all(q[0] == "t0" for q in s.members["c0"].owned)
    s, r = g.topics_changed(s, "c0", ["t0"], 400, COUNTS)
    assert r["generation"] == 2  # no change, no rebalance


def test_lost_sync_response_recovers_through_heartbeat():
    s = quiesce(seed_state(), 100)
    s, _ = g.join(s, "c3", TOPICS, [], 10_000, 200, COUNTS)
    s = quiesce(s, 300)
    # c0 synced (server: [t0q0, t2q2]) but its client never saw the answer and reports [t0q0]
    s, r = g.heartbeat(s, "c0", 2, wire("t0q0"), 400, COUNTS)
    assert r["action"] == "sync"
    s, r = g.sync(s, "c0", 2, 500, COUNTS)
    assert r["assignment"] == wire("t0q0", "t2q2")


def test_plan_is_applied_when_it_covers_members_and_queues():
    s = quiesce(seed_state(), 100)
    plan = {"c0": wire("t0q0", "t1q0"), "c1": wire("t1q1", "t2q0"), "c2": wire("t2q1", "t2q2")}
    s, _ = g.set_plan(s, 150, assignment=plan, expected_imbalance=0.0)
    s, r = g.force_rebalance(s, 200, COUNTS, "plan")
    assert r["generation"] == 2 and s.plan.applied_generation == 2
    assert {m: s.members[m].target for m in s.members} == {m: qs(*[f"{x['topic']}q{x['queue']}" for x in v]) for m, v in plan.items()}
    s = quiesce(s, 300)
    check_invariants(s)
    # a plan that misses a member is ignored
    s, _ = g.set_plan(s, 400, assignment={"c0": wire("t0q0")})
    s, _ = g.force_rebalance(s, 500, COUNTS)
    assert s.plan.applied_generation is None
    check_invariants(s)


def test_weight_plan_drives_the_sticky_assignor():
    s = g.new_group("w")
    for mid in ("a", "b"):
        s, _ = g.join(s, mid, ["t2"], [], 10_000, 0, COUNTS)
    s = quiesce(s, 10)
    s, _ = g.set_plan(s, 20, weights={("t2", 0): 10.0, ("t2", 1): 1.0, ("t2", 2): 1.0})
    s, _ = g.force_rebalance(s, 30, COUNTS)
    s = quiesce(s, 40)
    loads = sorted(len(m.owned) for m in s.members.values())
    assert loads == [1, 2]
    assert any(m.owned == [("t2", 0)] for m in s.members.values())


def test_state_round_trips_through_json():
    s = quiesce(seed_state(), 100)
    s, _ = g.join(s, "c3", TOPICS, [], 10_000, 200, COUNTS)
    s, _ = g.set_plan(s, 250, weights={("t0", 0): 2.5})
    d = json.loads(json.dumps(s.to_dict()))
    assert g.GroupState.from_dict(d) == s


def test_bad_requests():
    s = g.new_group("b")
    for args in (([], [], 10_000), (["bad topic"], [], 10_000), (["t0"], [], 999), (["t0"], [], 300_001),
                 (["t0"], [{"topic": "t0", "queue": -1}], 10_000), (["t0"], "x", 10_000),
                 (["t0"], [{"topic": "t0", "queue": True}], 10_000)):
        with pytest.raises(g.GroupBadRequest) as e:
            g.join(s, None, *args, 0, COUNTS)
        assert e.value.status == 400 and e.value.code == "bad_request"
    with pytest.raises(g.GroupBadRequest):
        g.join(s, "bad id!", ["t0"], [], None, 0, COUNTS)
    s, r = g.join(s, None, ["t0"], [], None, 0, COUNTS, new_member_id=lambda: "fixed")
    assert r["member_id"] == "fixed" and r["session_timeout_ms"] == 45_000 and r["heartbeat_interval_ms"] == 15_000
    with pytest.raises(g.GroupBadRequest):
        g.heartbeat(s, "fixed", True, [], 1, COUNTS)
    with pytest.raises(g.GroupBadRequest):
        g.sync(s, "fixed", "1", 1, COUNTS)


def test_transitions_do_not_mutate_their_input():
    s = seed_state()
    before = s.to_dict()
    g.join(s, "c3", TOPICS, [], 10_000, 1_000, COUNTS)
    g.leave(s, "c0", 1_000, COUNTS)
    assert s.to_dict() == before


# --------------------------------------------------------------------------- random operations
SESSION = 3_000


class Client:
    def __init__(self, mid, topics):
        self.mid, self.topics, self.generation, self.owned = mid, topics, 0, []


class GroupMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.state = g.new_group("rand")
        self.now = 0
        self.counts = dict(COUNTS)
        self.clients: dict[str, Client] = {}
        self.next_id = 0
        self.last_generation = 0

    # -- plumbing
    def apply(self, fn, *args):
        try:
            self.state, resp = fn(self.state, *args)
            return resp
        except g.GroupError as e:
            if e.state is not None:
                self.state = e.state
            raise

    def act(self, c: Client):
        """One honest client step: heartbeat and do what it says; join again after a 404."""
        owned = [{"topic": t, "queue": i} for t, i in c.owned]
        try:
            r = self.apply(g.heartbeat, c.mid, c.generation, owned, self.now, self.counts)
            c.generation = r["generation"]
            if r["action"] == "rejoin":
                r = self.apply(g.join, c.mid, c.topics, owned, SESSION, self.now, self.counts)
                c.generation = r["generation"]
                r = {"action": "sync"}
            if r["action"] == "sync":
                r = self.apply(g.sync, c.mid, c.generation, self.now, self.counts)
                c.generation, c.owned = r["generation"], [(x["topic"], x["queue"]) for x in r["assignment"]]
            return r.get("action", "synced")
        except g.UnknownMember:
            c.owned = []
            r = self.apply(g.join, c.mid, c.topics, [], SESSION, self.now, self.counts)
            c.generation = r["generation"]
            return "joined"

    # -- rules
    @precondition(lambda self: len(self.clients) < 6)
    @rule(topics=st.sets(st.sampled_from(TOPICS), min_size=1))
    def join_new(self, topics):
        mid = f"m{self.next_id}"
        self.next_id += 1
        c = Client(mid, sorted(topics))
        r = self.apply(g.join, None, c.topics, [], SESSION, self.now, self.counts, lambda: mid)
        c.generation = r["generation"]
        self.clients[mid] = c

    @precondition(lambda self: self.clients)
    @rule(i=st.integers(0, 5))
    def step(self, i):
        self.act(self.pick(i))

    @precondition(lambda self: self.clients)
    @rule(i=st.integers(0, 5))
    def leave(self, i):
        c = self.pick(i)
        del self.clients[c.mid]
        try:
            self.apply(g.leave, c.mid, self.now, self.counts)
        except g.UnknownMember:
            pass

    @precondition(lambda self: self.clients)
    @rule(i=st.integers(0, 5))
    def crash(self, i):
        del self.clients[self.pick(i).mid]  # silent: the server expires it later

    @precondition(lambda self: self.clients)
    @rule(i=st.integers(0, 5), topics=st.sets(st.sampled_from(TOPICS), min_size=1))
    def change_subscription(self, i, topics):
        c = self.pick(i)
        c.topics = sorted(topics)
        try:
            r = self.apply(g.join, c.mid, c.topics, [{"topic": t, "queue": q} for t, q in c.owned],
                           SESSION, self.now, self.counts)
        except g.UnknownMember:  # pragma: no cover - join never raises it
            raise
        c.generation = r["generation"]

    @precondition(lambda self: self.clients)
    @rule(i=st.integers(0, 5))
    def zombie(self, i):
        c = self.pick(i)
        m = self.state.members.get(c.mid)
        if m is None or c.generation == 0:
            return
        with pytest.raises((g.StaleGeneration, g.UnknownMember)):
            self.apply(g.heartbeat, c.mid, c.generation - 1, None, self.now, self.counts)

    @rule(ms=st.sampled_from([10, 500, 1_000, 4_000]))
    def advance(self, ms):
        self.now += ms

    @precondition(lambda self: self.counts["t0"] < 4)
    @rule()
    def grow(self):
        self.counts["t0"] += 1

    @rule()
    def settle(self):
        """Live clients act, time moving slowly (crashed members expire), until nothing is left to do;
        then every queue of a subscribed topic is servable to exactly one member."""
        for _ in range(40):
            self.apply(g.expire, self.now, self.counts)
            actions = [self.act(c) for _, c in sorted(self.clients.items())]
            self.check()
            done = (set(self.state.members) == set(self.clients)
                    and all(a == "none" for a in actions)
                    and all(m.state == g.STABLE and m.held == m.target for m in self.state.members.values()))
            if done:
                break
            self.now += 1_000
        else:
            raise AssertionError("group did not quiesce")
        subscribed = {t for c in self.clients.values() for t in c.topics}
        expected = sorted((t, i) for t in subscribed for i in range(self.counts[t]))
        served = sorted(q for mid in self.state.members for q in g.servable_queues(self.state, mid))
        assert served == expected
        for c in self.clients.values():
            assert sorted(c.owned) == g.servable_queues(self.state, c.mid)

    def pick(self, i) -> Client:
        return self.clients[sorted(self.clients)[i % len(self.clients)]]

    # -- invariants
    @invariant()
    def check(self):
        check_invariants(self.state, self.state.queue_counts)  # counts seen at the last rebalance
        assert self.state.generation >= self.last_generation
        self.last_generation = self.state.generation


GroupMachine.TestCase.settings = settings(
    max_examples=60, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TestGroupMachine = GroupMachine.TestCase
