"""Consumer groups over HTTP against the local stack (SPEC §4, API.md "Consumer group membership").

Seed layout: topics t0 (1 queue), t1 (2), t2 (3); three members reach a stable assignment (2 queues
each), a fourth joins (sticky: one queue moves, two members are never told anything and end in the
new generation), one leaves, one joins with ``session_timeout_ms`` 1000 and goes silent (removed),
zombies are fenced, member pulls are restricted to the member's servable queues, and at every step
no queue is servable to — or served to — two members at once.
"""
from __future__ import annotations

import time
import uuid

import requests

T = 15


class Client:
    def __init__(self, stack, group, key):
        self.url, self.group, self.h = stack.url, group, {"Authorization": f"Bearer {key}"}

    def call(self, method, path, body=None, params=None):
        r = requests.request(method, self.url + path, json=body, params=params, headers=self.h, timeout=T)
        return r.status_code, (r.json() if r.content else None)

    def describe(self):
        s, b = self.call("GET", f"/v1/groups/{self.group}")
        assert s == 200, b
        return b


class Member:
    def __init__(self, c: Client, mid: str, topics: list[str], timeout_ms: int = 20_000):
        self.c, self.mid, self.topics, self.timeout = c, mid, topics, timeout_ms
        self.gen, self.owned, self.actions = 0, [], []

    def join(self):
        s, b = self.c.call("POST", f"/v1/groups/{self.c.group}/members",
                           {"member_id": self.mid, "topics": self.topics, "owned": self.owned,
                            "session_timeout_ms": self.timeout})
        assert s == 200, b
        assert b["member_id"] == self.mid and b["state"] == "awaiting_sync"
        self.gen = b["generation"]

    def heartbeat(self):
        return self.c.call("POST", f"/v1/groups/{self.c.group}/members/{self.mid}/heartbeat",
                           {"generation": self.gen, "owned": self.owned})

    def step(self) -> str:
        """One turn of the member loop: heartbeat, then re-join or sync when told to."""
        s, b = self.heartbeat()
        assert s == 200, (self.mid, b)
        self.gen = b["generation"]
        self.actions.append(b["action"])
        if b["action"] == "rejoin":
            self.join()
        elif b["action"] == "sync":
            s, r = self.c.call("POST", f"/v1/groups/{self.c.group}/members/{self.mid}/sync", {"generation": self.gen})
            assert s == 200, (self.mid, r)
            self.owned, self.gen = r["assignment"], r["generation"]
        return b["action"]

    def pull(self, topic):
        return self.c.call("GET", f"/v1/topics/{topic}/messages",
                           params={"group": self.c.group, "member_id": self.mid, "max": 5})


def qset(items):
    return {(x["topic"], x["queue"]) for x in items}


def check_exclusive(c: Client, members: list[Member], topics: list[str]):
    """No queue servable to two members; each member's pulls come only from its servable queues."""
    d = c.describe()
    servable = {m["member_id"]: qset(m["servable"]) for m in d["members"]}
    seen = {}
    for mid, qs in servable.items():
        for q in qs:
            assert q not in seen, f"{q} servable to {seen[q]} and {mid}"
            seen[q] = mid
    for m in members:
        if m.mid not in servable:
            continue
        for t in topics:
            s, b = m.pull(t)
            assert s == 200, b
            got = {(x["topic"], x["queue"]) for x in b["messages"]}
            assert got <= servable[m.mid], (m.mid, got, servable[m.mid])
            if b["receipt"]:
                s, _ = c.call("POST", "/v1/acks", {"group": c.group, "receipt": b["receipt"]})
                assert s == 200
    return d


def drive(c, members, topics, rounds=12):
    for _ in range(rounds):
        acts = [m.step() for m in members]
        d = check_exclusive(c, members, topics)
        if all(a == "none" for a in acts) and all(m["state"] == "stable" for m in d["members"]):
            return d
    raise AssertionError(f"no stable assignment after {rounds} rounds: {c.describe()}")


def test_group_membership_end_to_end(stack):
    admin = {"Authorization": f"Bearer {stack.admin_key}"}
    tag = uuid.uuid4().hex[:8]
    topics = [f"g{tag}.t{i}" for i in range(3)]
    for i, t in enumerate(topics):
        r = requests.post(stack.url + "/v1/topics", json={"name": t, "queues": i + 1}, headers=admin, timeout=T)
        assert r.status_code == 201, r.text
    group = f"grp{tag}"
    r = requests.post(stack.url + "/v1/clients", headers=admin, timeout=T,
                      json={"name": group, "role": "consumer", "topics": topics, "visibility_timeout_ms": 1000})
    key = r.json()["api_key"]
    r = requests.post(stack.url + "/v1/clients", headers=admin, timeout=T,
                      json={"name": f"feed{tag}", "role": "producer", "topics": topics})
    pkey = r.json()["api_key"]
    for t in topics:  # messages on every queue
        msgs = [{"body": f"{t}-{k}", "key": f"k{k}"} for k in range(60)]
        r = requests.post(f"{stack.url}/v1/topics/{t}/messages", json={"producer": f"feed{tag}", "messages": msgs},
                          headers={"Authorization": f"Bearer {pkey}"}, timeout=T)
        assert r.status_code == 200, r.text
    c = Client(stack, group, key)
    all_queues = {(t, q) for i, t in enumerate(topics) for q in range(i + 1)}

    d = c.describe()
    assert (d["generation"], d["members"]) == (0, [])

    # --- three members reach a stable assignment -------------------------------------------
    ms = [Member(c, f"c{i}", topics) for i in range(3)]
    for m in ms:
        m.join()
    d = drive(c, ms, topics)
    before = {m["member_id"]: qset(m["assignment"]) for m in d["members"]}
    assert set().union(*before.values()) == all_queues and all(len(v) == 2 for v in before.values())
    gen_before = d["generation"]

    # --- a fourth joins: one queue moves, two members are never told anything ---------------
    c3 = Member(c, "c3", topics)
    c3.join()
    assert c3.gen == gen_before + 1
    for m in ms:
        m.actions = []
    d = drive(c, ms + [c3], topics)
    after = {m["member_id"]: qset(m["assignment"]) for m in d["members"]}
    assert set().union(*after.values()) == all_queues
    moved = [q for mid, qs in before.items() for q in qs - after[mid]]
    assert len(moved) == 1 and after["c3"] == set(moved)
    untouched = [m for m in ms if set(m.actions) == {"none"}]
    assert len(untouched) == 2, {m.mid: m.actions for m in ms}
    assert all(m.gen == d["generation"] == gen_before + 1 for m in untouched)  # moved silently
    assert all(after[m.mid] == before[m.mid] for m in untouched)

    # --- zombies are fenced --------------------------------------------------------------
    zombie = ms[0]
    stale = zombie.gen - 1
    for path in ("heartbeat", "sync"):
        s, b = c.call("POST", f"/v1/groups/{group}/members/{zombie.mid}/{path}", {"generation": stale})
        assert (s, b["error"]["code"]) == (409, "stale_generation")

    # --- one leaves ----------------------------------------------------------------------
    leaver = ms[1]
    s, _ = c.call("DELETE", f"/v1/groups/{group}/members/{leaver.mid}")
    assert s == 204
    s, b = leaver.heartbeat()
    assert (s, b["error"]["code"]) == (404, "unknown_member")
    s, b = leaver.pull(topics[0])
    assert (s, b["error"]["code"]) == (404, "unknown_member")
    rest = [ms[0], ms[2], c3]
    d = drive(c, rest, topics)
    assert {m["member_id"] for m in d["members"]} == {m.mid for m in rest}
    assert set().union(*(qset(m["assignment"]) for m in d["members"])) == all_queues
    gen_stable = d["generation"]

    # --- one goes silent (session_timeout_ms 1000) and is removed --------------------------
    silent = Member(c, "silent", topics, timeout_ms=1000)
    silent.join()
    time.sleep(1.3)
    s, b = silent.pull(topics[2])  # a pull is no sign of life
    assert (s, b["error"]["code"]) == (404, "unknown_member")
    d = c.describe()
    assert "silent" not in {m["member_id"] for m in d["members"]}
    assert d["generation"] == gen_stable + 2  # its join, then its expiry
    s, b = silent.heartbeat()
    assert (s, b["error"]["code"]) == (404, "unknown_member")
    d = drive(c, rest, topics)
    assert set().union(*(qset(m["assignment"]) for m in d["members"])) == all_queues
