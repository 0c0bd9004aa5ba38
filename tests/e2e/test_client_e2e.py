"""The Python client (clients/python) and the ``lakeq`` CLI against the local stack: produce →
consume → settle with backlog back to 0, renew (extend / end a lock), group members getting
disjoint assignments from the background loop and pulling only their queues, a subscription, and every CLI command."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from lakeq_client import Admin, ApiError, Consumer, GroupMember, Producer, Subscriptions

LAKEQ = Path(sys.executable).parent / "lakeq"


def uniq(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def admin(stack) -> Admin:
    return Admin(stack.url, stack.admin_key)


def setup(admin: Admin, queues: int = 2):
    topic, feed, risk = uniq("ct"), uniq("feed"), uniq("risk")
    admin.create_topic(topic, queues)
    fk = admin.create_client(feed, "producer", [topic])["api_key"]
    rk = admin.create_client(risk, "consumer", [topic])["api_key"]
    return topic, feed, fk, risk, rk


def test_produce_consume_settle(stack, admin):
    topic, feed, fk, risk, rk = setup(admin, 3)
    # a linger no run reaches: the batches are cut by count (the send that fills 100) and by
    # close (the last 50) only, so the request count does not depend on the machine's load (with
    # 50 ms, a stall of a loaded CI machine between two sends cut a third batch)
    with Producer(stack.url, fk, producer=feed, linger=600) as p:
        futs = [p.send(topic, f"body-{i}", key=f"k{i % 7}", tags=["A"] if i % 2 else ["B"],
                       properties={"n": i}) for i in range(150)]
    results = [f.result() for f in futs]
    assert p.requests_sent == 2  # 100 + 50
    assert len({(r["queue"], r["offset"]) for r in results}) == 150
    # a retried id answers its original result (what the client's retries rely on)
    with Producer(stack.url, fk, producer=feed, linger=0) as p2:
        again = p2.send(topic, "body-0", key="k0", id=results[0]["id"])
    assert again.result() == results[0]

    seen: list[dict] = []
    with Consumer(stack.url, rk, group=risk, topic=topic, max=40, wait_ms=1000) as c:
        deadline = time.monotonic() + 60
        while len(seen) < 150 and time.monotonic() < deadline:
            b = c.pull()
            seen += b.messages
            b.settle()  # piggybacked on the next pull; close() sends the last one
    assert sorted(m["id"] for m in seen) == sorted(r["id"] for r in results)
    assert Admin(stack.url, rk).offsets(risk, topic)["backlog"] == 0

    # a stale receipt is a typed 409, and a repeated ack answers 200 again
    with Producer(stack.url, fk, producer=feed, linger=0) as p3:
        p3.send(topic, "late", key="k1")
    c = Consumer(stack.url, rk, group=risk, topic=topic, wait_ms=2000, piggyback=False)
    b = c.pull()
    assert len(b) == 1
    first = b.ack()
    assert b.ack() == first
    late = b.messages[0]
    admin.reset_offset(risk, topic, late["queue"], late["offset"])  # consume it again
    b2 = c.pull()
    assert [m["body"] for m in b2] == ["late"]
    admin.reset_offset(risk, topic, late["queue"], late["offset"] + 1)  # moved under the holder
    with pytest.raises(ApiError) as e:
        b2.ack()
    assert (e.value.status, e.value.code) == (409, "stale_receipt")


def test_renew_extends_and_ends_the_lock(stack, admin):
    topic, feed, risk = uniq("rt"), uniq("feed"), uniq("risk")
    admin.create_topic(topic, 1)
    fk = admin.create_client(feed, "producer", [topic])["api_key"]
    rk = admin.create_client(risk, "consumer", [topic], visibility_timeout_ms=1000)["api_key"]
    with Producer(stack.url, fk, producer=feed, linger=0) as p:
        p.send(topic, "slow", key="k")
    c = Consumer(stack.url, rk, group=risk, topic=topic, wait_ms=2000, piggyback=False)
    b = c.pull()
    assert [m["body"] for m in b] == ["slow"]
    asked = int(time.time() * 1000)  # the stack runs on this machine's clock: its now is later
    out = b.renew(60000)
    assert out["queue"] == 0 and out["locked_until"] >= asked + 60000
    time.sleep(1.5)  # past the group's 1000 ms: still held by the renewed lock (a minute: no loaded run's gap)
    assert c.pull(wait_ms=0).messages == []
    assert b.renew(0)["locked_until"] == 0  # give it back now: served again at once
    b2 = c.pull(wait_ms=0)
    assert [m["id"] for m in b2] == [m["id"] for m in b]
    with pytest.raises(ApiError) as e:
        b.ack()
    assert (e.value.status, e.value.code) == (409, "stale_receipt")
    assert b2.ack()["committed_offset"] == 1


def test_group_members_get_disjoint_assignments_and_pull_only_their_queues(stack, admin):
    topic, feed, fk, risk, rk = setup(admin, 4)
    all_q = {(topic, q) for q in range(4)}
    # a session no loaded run's late heartbeat outlives (with 6 s, a heartbeat late by seconds on a
    # busy machine expired a member mid-test and moved its queues); heartbeats every 5 s
    m1 = GroupMember(stack.url, rk, group=risk, topics=[topic], member_id="m1",
                     session_timeout_ms=15000, wait_ms=500)
    m2 = GroupMember(stack.url, rk, group=risk, topics=[topic], member_id="m2",
                     session_timeout_ms=15000, wait_ms=500)
    with m1:
        assert {(q["topic"], q["queue"]) for q in m1.wait_for_assignment(60)} == all_q
        with m2:
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline:
                a1 = {(q["topic"], q["queue"]) for q in m1.assignment}
                a2 = {(q["topic"], q["queue"]) for q in m2.assignment}
                if a1 and a2 and not a1 & a2 and a1 | a2 == all_q:
                    break
                time.sleep(0.2)
            assert a1 and a2 and not a1 & a2 and a1 | a2 == all_q, (a1, a2, m1.actions, m2.actions)
            d = admin.describe_group(risk)
            assert {m["member_id"] for m in d["members"]} == {"m1", "m2"}

            with Producer(stack.url, fk, producer=feed, linger=0) as p:
                res = [p.send(topic, f"g{i}", key=f"key{i}") for i in range(40)]
            res = [f.result() for f in res]
            got: dict[str, list[dict]] = {"m1": [], "m2": []}
            deadline = time.monotonic() + 60
            while sum(map(len, got.values())) < 40 and time.monotonic() < deadline:
                for m in (m1, m2):
                    b = m.pull()
                    got[m.member_id] += b.messages
                    b.settle()
            for m, mine in ((m1, a1), (m2, a2)):
                assert {(x["topic"], x["queue"]) for x in got[m.member_id]} <= mine
            assert sorted(x["id"] for v in got.values() for x in v) == sorted(r["id"] for r in res)
        # m2 left: m1 gets everything back
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and \
                {(q["topic"], q["queue"]) for q in m1.assignment} != all_q:
            time.sleep(0.2)
        assert {(q["topic"], q["queue"]) for q in m1.assignment} == all_q, m1.actions
        assert Admin(stack.url, rk).offsets(risk, topic)["backlog"] == 0
    assert admin.describe_group(risk)["members"] == []


def test_subscription(stack, admin):
    topic, feed, fk, risk, rk = setup(admin, 2)
    subs = Subscriptions(stack.url, rk)
    sub = subs.create(risk, topic, [{"field": "type", "values": ["A"]}])
    assert [s.id for s in subs.list(risk)] == [sub.id]
    with Producer(stack.url, fk, producer=feed, linger=0) as p:
        for i, t in enumerate("ABAB"):
            p.send(topic, f"s{i}", properties={"type": t})
    stack.drain()
    b = sub.pull(max=10, wait_ms=2000)
    assert sorted(m["body"] for m in b) == ["s0", "s2"]
    assert b.ack()["committed_offset"] >= 2
    assert len(sub.pull(wait_ms=0)) == 0
    sub.delete()
    assert subs.list(risk) == []
    with pytest.raises(ApiError) as e:
        subs.delete(sub.id)
    assert e.value.code == "not_found"


def lakeq(stack, *args, key=None, check=True, input=None) -> subprocess.CompletedProcess:
    assert LAKEQ.exists(), f"{LAKEQ} missing: `make` installs clients/python into .venv"
    env = dict(os.environ, LAKEQ_URL=stack.url, LAKEQ_KEY=key or stack.admin_key)
    r = subprocess.run([str(LAKEQ), *args], env=env, capture_output=True, text=True, timeout=120, check=False,
                       input=input)
    if check:
        assert r.returncode == 0, (args, r.stdout, r.stderr)
    return r


def lines(r) -> list[dict]:
    return [json.loads(x) for x in r.stdout.splitlines() if x.strip()]


# 23 CLI processes one after another, each starting Python and importing the client: on a machine
# whose cores other work keeps busy that alone passed the suite's 300 s (the call to `topics grow`
# was running when pytest-timeout ended it)
@pytest.mark.timeout(900)
def test_cli(stack, tmp_path):
    topic, feed, risk = uniq("cli"), uniq("cfeed"), uniq("crisk")
    assert lines(lakeq(stack, "topics", "create", topic, "--queues", "2")) == [
        {"name": topic, "queues": 2, "parent": None}]
    assert {"name": topic, "queues": 2, "parent": None} in lines(lakeq(stack, "topics", "list"))
    dup = lakeq(stack, "topics", "create", topic, check=False)
    assert dup.returncode == 1 and "409 topic_exists" in dup.stderr
    fk = lines(lakeq(stack, "clients", "create", feed, "--role", "producer", "--topics", topic))[0]["api_key"]
    rk = lines(lakeq(stack, "clients", "create", risk, "--role", "consumer", "--topics", topic,
                     "--visibility-timeout-ms", "30000"))[0]["api_key"]
    issued = lines(lakeq(stack, "clients", "keys", "issue", feed))[0]
    ids = [k["key_id"] for k in lines(lakeq(stack, "clients", "keys", "list", feed))[0]["keys"]]
    assert issued["key_id"] in ids and len(ids) == 2
    lakeq(stack, "clients", "keys", "revoke", feed, issued["key_id"])
    assert len(lines(lakeq(stack, "clients", "keys", "list", feed))[0]["keys"]) == 1

    sub = lines(lakeq(stack, "subscriptions", "create", "--subscriber", risk, "--topic", topic,
                      "--conditions", '[{"field": "type", "values": ["A"]}]', key=rk))[0]
    assert [s["id"] for s in lines(lakeq(stack, "subscriptions", "list", "--subscriber", risk, key=rk))] == [sub["id"]]

    f = tmp_path / "msgs.jsonl"
    f.write_text("".join(json.dumps({"id": f"c{i}", "body": f"m{i}", "key": f"k{i % 5}",
                                     "properties": {"type": "A" if i % 3 == 0 else "B"}}) + "\n"
                         for i in range(120)) + '"plain string body"\n')
    r = lakeq(stack, "produce", topic, str(f), "--producer", feed, key=fk)
    assert lines(r) == [{"produced": 121, "requests": 2}]
    assert "121/121 messages" in r.stderr

    r = lakeq(stack, "backlog", risk, topic, key=rk)
    assert r.stdout.splitlines()[0].split() == ["queue", "min", "max", "committed", "backlog",
                                                "locked_until"]
    assert f"topic {topic}: backlog 121" in r.stdout
    assert sum(int(x.split()[4]) for x in r.stdout.splitlines()[2:4]) == 121

    r = lakeq(stack, "tail", topic, "--group", risk, "--max", "50", "--wait-ms", "500", key=rk)
    got = lines(r)
    assert sorted(m["body"] for m in got) == sorted([f"m{i}" for i in range(120)] + ["plain string body"])
    assert "121 messages settled" in r.stderr
    assert lines(lakeq(stack, "backlog", risk, topic, "--json", key=rk))[0]["backlog"] == 0

    stack.drain()
    r = lakeq(stack, "subscriptions", "pull", sub["id"], "--max", "100", "--wait-ms", "2000", key=rk)
    assert sorted(m["body"] for m in lines(r)) == sorted(f"m{i}" for i in range(0, 120, 3))
    assert len(lines(lakeq(stack, "subscriptions", "pull", sub["id"], key=rk))) == 0  # acked
    lakeq(stack, "subscriptions", "delete", sub["id"], key=rk)
    assert lines(lakeq(stack, "subscriptions", "list", "--subscriber", risk, key=rk)) == []

    r = lakeq(stack, "groups", "describe", risk, key=rk)
    assert r.stdout.startswith(f"group {risk}  generation 0")
    assert lines(lakeq(stack, "topics", "grow", topic, "--queues", "3"))[0]["queues"] == 3
    bad = lakeq(stack, "tail", topic, "--group", risk, key=fk, check=False)
    assert bad.returncode == 1 and "403 forbidden" in bad.stderr
