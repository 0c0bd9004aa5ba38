"""Crash injection on the settlement paths (issue 9): a reject (dead-letter copy, then settle) and
a partial settle (accept + release), each dying right after every store call it makes
(:class:`tests.crash.CrashAfter`).

After the crash either the client retries the same request (``retry``), or it gives up and the
next pull of the queue (after the lock expired) has to finish what was started (``next_pull``);
a consumer that is served the batch again decides the same (rejects m2, accepts the rest). Then:
the dead-letter topic holds exactly one copy of the rejected message, nothing accepted with a 2xx
is served again, and the queue ends with backlog 0."""
from __future__ import annotations

import itertools
from collections import Counter

import pytest

from lakeq.store import queue_log
from tests.crash import CrashAfter, count_calls

VIS = 1_000


@pytest.fixture
def env(api, setup, clock):
    assert api.call("POST", "/v1/topics", {"name": "dlq", "queues": 2})[0] == 201
    s, c = api.call("POST", "/v1/clients", {"name": "dlqc", "role": "consumer", "topics": ["dlq"]})
    assert s == 201
    assert api.call("PATCH", "/v1/clients/risk", {"dead_letter_topic": "dlq"})[0] == 200
    return {"api": api, "feed": setup["feed"], "risk": setup["risk"], "dlqc": c["api_key"], "clock": clock,
            "n": itertools.count(), "copies": Counter()}


def path(topic):
    return f"/v1/topics/{topic.replace('/', '%2F')}/messages"


def fresh_batch(env):
    """A new topic quotes/rN (1 queue) with m0..m3, pulled by risk: (topic, batch)."""
    api = env["api"]
    topic = f"quotes/r{next(env['n'])}"
    assert api.call("POST", "/v1/topics", {"name": topic, "queues": 1})[0] == 201
    msgs = [{"id": f"m{i}", "body": f"b{i}", "key": "k"} for i in range(4)]
    assert api.call("POST", path(topic), {"producer": "feed", "messages": msgs}, key=env["feed"])[0] == 200
    s, b = api.call("GET", path(topic), query={"group": "risk"}, key=env["risk"])
    assert s == 200 and [m["offset"] for m in b["messages"]] == [0, 1, 2, 3]
    return topic, b


def drain_dlq(env):
    api = env["api"]
    while True:
        s, b = api.call("GET", "/v1/topics/dlq/messages", query={"group": "dlqc", "max": 100}, key=env["dlqc"])
        assert s == 200, b
        if not b["messages"]:
            return
        for m in b["messages"]:
            env["copies"][(m["dead_letter"]["topic"], m["dead_letter"]["offset"])] += 1
        assert api.call("POST", "/v1/acks", {"group": "dlqc", "receipt": b["receipt"]}, key=env["dlqc"])[0] == 200


REQUESTS = {
    "reject": {"accept": [0], "reject": [2]},
    "partial": {"accept": [1], "release": [2]},
}


def finish(env, topic, accepted: set[int], rejected: set[int]):
    """Consume to the end: a batch served again is decided as before (m2 rejected in the reject
    scenario), everything else accepted; time passes when the queue is still locked."""
    api = env["api"]
    for _ in range(20):
        s, b = api.call("GET", path(topic), query={"group": "risk"}, key=env["risk"])
        assert s == 200, b
        if not b["messages"]:
            s, o = api.call("GET", "/v1/groups/risk/offsets", query={"topic": topic}, key=env["risk"])
            if o["backlog"] == 0:
                return
            env["clock"].t += VIS
            continue
        offs = [m["offset"] for m in b["messages"]]
        assert not set(offs) & accepted, f"{set(offs) & accepted} accepted with a 2xx, served again"
        rej = [o for o in offs if o in rejected]
        acc = [o for o in offs if o not in rejected]
        s, out = api.call("POST", "/v1/acks", {"group": "risk", "receipt": b["receipt"], "accept": acc, "reject": rej},
                          key=env["risk"])
        assert s == 200 and out["unsettled"] == [], out
        accepted |= set(acc)
    raise AssertionError("never finished")


def run(env, scenario, k, mode):
    api = env["api"]
    topic, b = fresh_batch(env)
    req = {"group": "risk", "receipt": b["receipt"], **REQUESTS[scenario]}
    env["clock"].t += 1
    # each request's copy bumps the dead-letter topic's marker: not skipped because an earlier run
    # bumped it less than a second before (CHANGE_EVERY_MS), so every run makes the same calls
    queue_log._BUMPED.clear()
    if k is None:
        n, (s, out) = count_calls(lambda: api.call("POST", "/v1/acks", req, key=env["risk"]))
        assert s == 200, out
        answered = True
    else:
        with CrashAfter(k) as c:
            crashed, _ = c.run(lambda: api.call("POST", "/v1/acks", req, key=env["risk"]))
        assert crashed and c.fired, (scenario, k)
        n, answered = k, False
        if mode == "retry":
            s, out = api.call("POST", "/v1/acks", req, key=env["risk"])
            assert s == 200, out
            answered = True
    accepted = set(REQUESTS[scenario]["accept"]) if answered else set()
    rejected = {2} if scenario == "reject" else set()
    if mode == "next_pull" and not answered:
        env["clock"].t += VIS  # the client gave up on its batch; the lock expires
    finish(env, topic, accepted, rejected)
    drain_dlq(env)
    assert env["copies"][(topic, 2)] == (1 if scenario == "reject" else 0), (scenario, k, mode, env["copies"])
    return n


@pytest.mark.parametrize("scenario", sorted(REQUESTS))
def test_crash_after_every_store_call(env, scenario):
    # the first copy into the dead-letter queue reads its head from the queue item too (its chain is
    # empty: issue 16 item 3), later ones from the chain alone: count the calls of a later one
    run(env, scenario, None, "retry")
    n = run(env, scenario, None, "retry")
    assert n >= 2, n  # GetItem + conditional UpdateItem at least
    for k in range(1, n + 1):
        for mode in ("retry", "next_pull"):
            run(env, scenario, k, mode)


def test_crash_in_a_pull_that_dead_letters_expired_messages(env):
    """max_deliveries 1 (set after the pull: with 1 from the start batches are one message): a
    batch whose lock expires with m1..m3 unsettled is dead-lettered by the next pull of the queue.
    That pull dies after each of its store calls; a pull retried (or any later one) finishes the
    job: one copy of each, m0 (accepted) never served again."""
    api = env["api"]

    def one(k):
        assert api.call("PATCH", "/v1/clients/risk", {"max_deliveries": None})[0] == 200
        topic, b = fresh_batch(env)
        assert api.call("PATCH", "/v1/clients/risk", {"max_deliveries": 1})[0] == 200
        s, out = api.call("POST", "/v1/acks", {"group": "risk", "receipt": b["receipt"], "accept": [0]},
                          key=env["risk"])
        assert s == 200 and out["unsettled"] == [1, 2, 3]
        env["clock"].t += VIS

        def request():
            return api.call("GET", path(topic), query={"group": "risk"}, key=env["risk"])
        if k is None:
            n, (s, got) = count_calls(request)
        else:
            with CrashAfter(k) as c:
                crashed, _ = c.run(request)
            assert crashed and c.fired, k
            n = k
            s, got = request()
        assert s == 200 and got["messages"] == [], got
        finish(env, topic, {0}, set())
        drain_dlq(env)
        assert [env["copies"][(topic, o)] for o in range(4)] == [0, 1, 1, 1], (k, env["copies"])
        s, o = api.call("GET", "/v1/groups/risk/offsets", query={"topic": topic}, key=env["risk"])
        assert o["queues"][0]["dead_lettered"] == 3 and o["backlog"] == 0, o
        return n
    one(None)  # the dead-letter queue's chain is no longer empty (see test_crash_after_every_store_call)
    n = one(None)
    assert n >= 10, n
    for k in range(1, n + 1):
        one(k)
