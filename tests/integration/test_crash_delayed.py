"""Crash injection on delayed delivery (issue 9, ``delay_ms``), as ``test_crash_produce`` does for
produce: kill the function right after each of its store calls in turn (``tests/crash.py``), run it
again (the next scheduled run, the next pull, the client's retry), then check what consumers read.

- promotion (the scheduled PromoterFunction, and a pull): whatever prefix of the promotion's calls
  happened, every due message is in its queue exactly once, at contiguous offsets after what was
  there, in due order then id, with its fields; nothing delayed is left; the ids' retries answer
  the offsets read.
- a delayed produce: the client retries the same request until a 2xx; the ids are answered the
  same ``deliver_at`` whatever attempt recorded them, and each joins its queue once when due.
"""
from __future__ import annotations

import itertools

import pytest

from tests.crash import CrashAfter, count_calls
from tests.handlers import Context, load_function
from tests.history import drain, path

PARENT = "dcrash"


@pytest.fixture
def env(api, aws, clock, monkeypatch):
    # the per-container key/client caches expire on real time (5 s); on a loaded machine a probe run
    # and the crashed runs then made different numbers of store calls. Freeze their clock: every run
    # here counts the same calls.
    from lakeq.admin import auth
    monkeypatch.setattr(auth, "monotonic", lambda: 1_000.0)
    assert api.call("POST", "/v1/topics", {"name": PARENT, "queues": 1})[0] == 201
    s, feed = api.call("POST", "/v1/clients", {"name": "feed", "role": "producer", "topics": [PARENT]})
    assert s == 201
    s, risk = api.call("POST", "/v1/clients", {"name": "risk", "role": "consumer", "topics": [PARENT],
                                               "visibility_timeout_ms": 3_600_000})
    assert s == 201
    s, puller = api.call("POST", "/v1/clients", {"name": "puller", "role": "consumer", "topics": [PARENT],
                                                 "visibility_timeout_ms": 3_600_000})
    assert s == 201  # pulls to promote (its locks never hide anything from risk, which checks)
    counter = itertools.count()

    class Env:
        @staticmethod
        def topic(queues=1):
            name = f"{PARENT}/d{next(counter)}"
            assert api.call("POST", "/v1/topics", {"name": name, "queues": queues})[0] == 201
            return name

        @staticmethod
        def produce(topic, messages):
            return api.call("POST", path(topic), {"producer": "feed", "messages": messages}, key=feed["api_key"])

        @staticmethod
        def pull(topic):
            return api.call("GET", path(topic), query={"group": "puller", "max": 100}, key=puller["api_key"])

        @staticmethod
        def drain(topic):
            return drain(api, topic, "risk", risk["api_key"])

        @staticmethod
        def delayed(topic):
            s, b = api.call("GET", f"/v1/topics/{topic.replace('/', '%2F')}")
            assert s == 200, b
            return b["delayed"]

    e = Env()
    e.api, e.clock, e.promoter = api, clock, load_function("PromoterFunction")
    warm = e.topic()
    assert e.produce(warm, [{"body": "warm", "delay_ms": 1}])[0] == 200  # fill the per-container caches
    clock.t += 1
    e.promoter({}, Context())
    e.pull(warm)  # and the consumer's (a probe that is the first pull makes two more GetItems)
    return e


def delayed_shape(tag: str, t_due: int) -> list[dict]:
    """70 messages due together (60 client ids: two transactions; 10 generated), 2 due later."""
    ids = [{"id": f"{tag}-i{j:02d}", "body": f"{tag}-b{j}", "key": "k", "tags": ["t"] if j % 2 else [],
            "properties": {"j": j}, "delay_ms": t_due} for j in range(60)]
    gen = [{"body": f"{tag}-g{j}", "key": "k", "delay_ms": t_due} for j in range(10)]
    late = [{"id": f"{tag}-late{j}", "body": f"{tag}-late{j}", "key": "k", "delay_ms": t_due + 1000} for j in range(2)]
    return ids + gen + late


def setup_topic(env, tag):
    topic = env.topic()
    assert env.produce(topic, [{"id": f"{tag}-pre", "body": f"{tag}-pre", "key": "k"}])[0] == 200
    msgs = delayed_shape(tag, 100)
    s1, b1 = env.produce(topic, msgs[:60])
    env.clock.t += 1  # the second request a millisecond later (its messages due 1 ms later)
    s2, b2 = env.produce(topic, msgs[60:])
    assert (s1, s2) == (200, 200)
    assert all(r["offset"] is None for r in b1["results"] + b2["results"])
    return topic, msgs


def check_topic(env, topic, msgs, tag):
    """After the due time of everything: the log holds pre, then the 70 (in due order, then
    request order), then the 2 late ones, once each, fields intact."""
    env.clock.t += 2000
    log = env.drain(topic)
    (ms,) = log.values()
    assert [m["offset"] for m in ms] == list(range(len(ms)))
    assert len(ms) == 1 + len(msgs), [m["body"] for m in ms]
    assert ms[0]["body"] == f"{tag}-pre"
    assert sorted(m["body"] for m in ms[1:71]) == sorted(m["body"] for m in msgs[:70])
    assert [m["body"] for m in ms[1:71]] == [m["body"] for m in msgs[:70]]  # due, then request order
    assert [m["id"] for m in ms[71:]] == [f"{tag}-late0", f"{tag}-late1"]
    sent = {m["body"]: m for m in msgs}
    for m in ms[1:]:
        s = sent[m["body"]]
        assert (m["key"], m["tags"], m["properties"]) == (s["key"], s.get("tags", []), s.get("properties", {}))
        if "id" in s:
            assert m["id"] == s["id"]
    assert env.delayed(topic) == 0
    # the ids' retries now answer where they were read
    s, b = env.produce(topic, [m for m in msgs if "id" in m][:50])
    where = {m["id"]: m["offset"] for m in ms}
    assert s == 200 and all(r["offset"] == where[r["id"]] for r in b["results"])
    assert env.drain(topic) == {}


PARTS = 4  # every prefix of a pull's calls (~20), each a topic set up and drained: split so that
# pytest-xdist's workers share them (one part was 142 s of a worker's time on this machine)


@pytest.mark.parametrize("part", range(PARTS))
@pytest.mark.parametrize("via", ["promoter", "pull"])
def test_promotion_every_prefix(env, via, part):
    """Crash the promotion after its k-th store call, for every k (k ≡ ``part`` + 1 mod PARTS in
    this part; the parts together cover every k); the next run finishes it."""
    run = (lambda topic: env.promoter({}, Context())) if via == "promoter" else (lambda topic: env.pull(topic))
    probe, msgs = setup_topic(env, "probe")
    env.clock.t += 100
    n, _ = count_calls(lambda: run(probe), functions={"PromoterFunction", "ConsumeFunction"})
    check_topic(env, probe, msgs, "probe")
    assert n >= 8, n
    fired_all = 0
    ks = range(1 + part, n + 1, PARTS)
    for k in ks:
        tag = f"{via}{k}"
        env.clock.t += 10_000
        topic, msgs = setup_topic(env, tag)
        env.clock.t += 100
        with CrashAfter(k, functions={"PromoterFunction", "ConsumeFunction"}) as c:
            crashed, _ = c.run(lambda: run(topic))
        fired_all += crashed
        run(topic)  # the next scheduled run / pull carries on
        check_topic(env, topic, msgs, tag)
    assert fired_all >= len([k for k in ks if k < n]), (fired_all, n, part)  # every k but the last call's


def test_delayed_produce_every_prefix(env):
    """Crash a delayed produce after its k-th store call; the client retries the same request."""
    def request(tag):
        return [{"id": f"{tag}-a", "body": f"{tag}-a", "key": "k", "delay_ms": 500},
                {"id": f"{tag}-b", "body": f"{tag}-b", "key": "k", "delay_ms": 200},
                {"id": f"{tag}-now", "body": f"{tag}-now", "key": "k"},
                {"body": f"{tag}-gen", "key": "k", "delay_ms": 300}]

    probe = env.topic()
    n, (s, _) = count_calls(lambda: env.produce(probe, request("probe")), functions={"ProduceFunction"})
    assert s == 200 and n >= 3, n
    fired = 0
    for k in range(1, n + 1):
        tag = f"p{k}"
        topic = env.topic()
        t0 = env.clock.t
        with CrashAfter(k, functions={"ProduceFunction"}) as c:
            crashed, _ = c.run(lambda: env.produce(topic, request(tag)))
        fired += crashed
        env.clock.t += 50  # the retry comes later
        s, b = env.produce(topic, request(tag))
        assert s == 200, b
        r = {x["id"]: x for x in b["results"][:3]}
        # deliver_at is the produce time of whichever attempt recorded the id (the crashed one or the retry)
        assert r[f"{tag}-a"]["offset"] is None and r[f"{tag}-a"]["deliver_at"] in (t0 + 500, t0 + 550)
        assert r[f"{tag}-b"]["offset"] is None and r[f"{tag}-b"]["deliver_at"] in (t0 + 200, t0 + 250)
        assert r[f"{tag}-now"]["offset"] == 0
        assert env.produce(topic, request(tag))[1]["results"][:3] == b["results"][:3]  # and again
        env.clock.t = max(r[f"{tag}-a"]["deliver_at"], r[f"{tag}-b"]["deliver_at"]) + 400
        log = env.drain(topic)
        (ms,) = log.values()
        ids = [m["id"] for m in ms]
        assert ids.count(f"{tag}-a") == ids.count(f"{tag}-b") == ids.count(f"{tag}-now") == 1, ids
        gens = [m for m in ms if m["body"] == f"{tag}-gen"]
        # no id: once per 2xx (the retry and the repeat), and maybe once more by the crashed attempt
        assert 2 <= len(gens) <= 3, len(gens)
        assert [m["offset"] for m in ms] == list(range(len(ms)))
        assert ms[0]["id"] == f"{tag}-now"
        assert env.delayed(topic) == 0
    assert fired >= n - 1, (fired, n)
