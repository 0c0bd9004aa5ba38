"""Subscriptions over HTTP against the local stack: the seed example, topic hierarchy, every condition
kind, unsubscribe, and many random subscriptions checked against a plain reference matcher.
Delivery is asynchronous (the stream pump runs FanoutFunction); ``stack.drain()`` waits for it."""
from __future__ import annotations

import math
import random
import uuid

import pytest
import requests

pytestmark = pytest.mark.e2e
T = 30


class Client:
    def __init__(self, stack):
        self.stack = stack

    def call(self, method, path, key, **kw):
        r = requests.request(method, self.stack.url + path, headers={"Authorization": f"Bearer {key}"},
                             timeout=T, **kw)
        return r.status_code, (r.json() if r.content else None)

    def ok(self, method, path, key, status=200, **kw):
        s, b = self.call(method, path, key, **kw)
        assert s == status, (method, path, s, b)
        return b

    def drain_list(self, sid, key, max_=100):
        """Pull and ack until empty: every message once."""
        out, receipt = [], None
        while True:
            params = {"max": max_, **({"ack": receipt} if receipt else {})}
            b = self.ok("GET", f"/v1/subscriptions/{sid}/messages", key, params=params)
            if not b["messages"]:
                assert b["receipt"] is None
                return out
            out += b["messages"]
            receipt = b["receipt"]


@pytest.fixture(scope="module")
def env(stack):
    """Topics ``quotes``/``quotes/sh`` and a fresh root with children; a producer and a consumer."""
    c = Client(stack)
    adm = stack.admin_key
    root = "e2esub-" + uuid.uuid4().hex[:8]
    for name, q in [("quotes", 4), ("quotes/sh", 2), (root, 2), (f"{root}/a", 2), (f"{root}/b", 1), (f"{root}/a/x", 1)]:
        s, _ = c.call("POST", "/v1/topics", adm, json={"name": name, "queues": q})
        assert s in (201, 409)
    tag = uuid.uuid4().hex[:6]
    feed = c.ok("POST", "/v1/clients", adm, 201, json={"name": f"feed-{tag}", "role": "producer",
                                                        "topics": ["quotes", root]})
    risk = c.ok("POST", "/v1/clients", adm, 201, json={"name": f"risk-{tag}", "role": "consumer",
                                                        "topics": ["quotes", root], "visibility_timeout_ms": 2000})
    return {"c": c, "root": root, "feed": feed, "risk": risk}


def produce(env, topic, messages):
    c, feed = env["c"], env["feed"]
    enc = topic.replace("/", "%2F")
    return c.ok("POST", f"/v1/topics/{enc}/messages", feed["api_key"],
                json={"producer": feed["name"], "messages": messages})["results"]


def subscribe(env, topic, conditions=None, tags=None):
    body = {"subscriber": env["risk"]["name"], "topic": topic}
    if conditions is not None:
        body["conditions"] = conditions
    if tags is not None:
        body["tags"] = tags
    return env["c"].ok("POST", "/v1/subscriptions", env["risk"]["api_key"], 201, json=body)


def test_seed_example(env, stack):
    c, key = env["c"], env["risk"]["api_key"]
    produce(env, "quotes/sh", [{"body": "before", "properties": {"type": "A", "stock_code": "000000"}}])
    stack.drain()
    sub = subscribe(env, "quotes", [{"field": "type", "values": ["A"]},
                                    {"field": "stock_code", "values": ["000000", "111111"]}])
    sent = produce(env, "quotes/sh", [
        {"id": f"{sub['id']}-1", "body": "hit1", "key": "000000", "properties": {"type": "A", "stock_code": "000000", "price": 10.5}},
        {"body": "miss-type", "key": "000000", "properties": {"type": "B", "stock_code": "000000"}},
        {"body": "miss-code", "key": "222222", "properties": {"type": "A", "stock_code": "222222"}},
        {"body": "hit2", "key": "111111", "properties": {"type": "A", "stock_code": "111111"}},
        {"body": "miss-json", "key": "000000", "properties": {"type": "A", "stock_code": 0}},
    ])
    stack.drain()
    b = c.ok("GET", f"/v1/subscriptions/{sub['id']}/messages", key)
    assert sorted(m["body"] for m in b["messages"]) == ["hit1", "hit2"]
    m = next(x for x in b["messages"] if x["body"] == "hit1")
    assert (m["id"], m["topic"], m["queue"], m["offset"]) == (f"{sub['id']}-1", "quotes/sh", sent[0]["queue"], sent[0]["offset"])
    assert set(m) == {"id", "topic", "queue", "offset", "body", "key", "tags", "properties", "produced_at",
                      "deliveries"}  # issue 9
    # locked until acked; the ack commits; repeating it (a lost response) answers the same; a stale one is 409
    assert c.ok("GET", f"/v1/subscriptions/{sub['id']}/messages", key)["messages"] == []
    a = c.ok("POST", "/v1/acks", key, json={"subscription": sub["id"], "receipt": b["receipt"]})
    assert a["committed_offset"] == 2
    assert c.ok("POST", "/v1/acks", key, json={"subscription": sub["id"], "receipt": b["receipt"]}) == a
    head, _, ts = b["receipt"].rpartition(":")
    s, e = c.call("POST", "/v1/acks", key, json={"subscription": sub["id"], "receipt": f"{head}:{int(ts) - 1}"})
    assert s == 409 and e["error"]["code"] == "stale_receipt"
    stack.drain()  # a second drain delivers nothing new
    assert c.drain_list(sub["id"], key) == []
    listed = c.ok("GET", "/v1/subscriptions", key, params={"subscriber": env["risk"]["name"]})["subscriptions"]
    assert sub["id"] in [x["id"] for x in listed]


def test_redelivery_after_visibility_timeout_then_once(env, stack):
    c, key = env["c"], env["risk"]["api_key"]
    sub = subscribe(env, env["root"])
    produce(env, f"{env['root']}/b", [{"body": str(i)} for i in range(3)])
    stack.drain()
    first = c.ok("GET", f"/v1/subscriptions/{sub['id']}/messages", key, params={"max": 2})
    assert [m["body"] for m in first["messages"]] == ["0", "1"]
    again = c.ok("GET", f"/v1/subscriptions/{sub['id']}/messages", key, params={"wait_ms": 4000, "max": 2})
    assert [m["body"] for m in again["messages"]] == ["0", "1"]  # lock expired (2 s): same batch again
    s, _ = c.call("POST", "/v1/acks", key, json={"subscription": sub["id"], "receipt": first["receipt"]})
    assert s == 409
    rest = c.drain_list(sub["id"], key)
    assert [m["body"] for m in rest] == ["2"] or [m["body"] for m in rest] == []
    c.ok("DELETE", f"/v1/subscriptions/{sub['id']}", key, 204)


def test_hierarchy_and_every_condition_kind(env, stack):
    c, key, root = env["c"], env["risk"]["api_key"], env["root"]
    subs = {
        "parent": subscribe(env, root),
        "child": subscribe(env, f"{root}/a"),
        "values": subscribe(env, root, [{"field": "k", "values": ["v", 1]}]),
        "range": subscribe(env, root, [{"field": "p", "range": [10, 20]}]),
        "prefix": subscribe(env, root, [{"field": "code", "prefix": "600"}]),
        "anything_but": subscribe(env, root, [{"field": "k", "anything_but": ["v"]}]),
        "exists": subscribe(env, root, [{"field": "p", "exists": True}]),
        "not_exists": subscribe(env, root, [{"field": "p", "exists": False}]),
        "tags": subscribe(env, root, tags=["hot"]),
        "and": subscribe(env, f"{root}/a", [{"field": "k", "values": ["v"]}, {"field": "p", "range": [0, 15]}], ["hot", "x"]),
    }
    msgs = {
        f"{root}": [{"body": "r1", "properties": {"k": "v", "p": 10}}],
        f"{root}/a": [{"body": "a1", "properties": {"k": "1", "p": 21, "code": "600519"}, "tags": ["hot"]},
                      {"body": "a2", "properties": {"k": 1, "code": "60"}}],
        f"{root}/a/x": [{"body": "x1", "properties": {"k": "v", "p": 15}, "tags": ["x"]}],
        f"{root}/b": [{"body": "b1", "properties": {"p": 20.0, "code": "600"}, "tags": ["cold"]}],
    }
    for t, ms in msgs.items():
        produce(env, t, ms)
    stack.drain()
    want = {"parent": ["a1", "a2", "b1", "r1", "x1"], "child": ["a1", "a2", "x1"], "values": ["a2", "r1", "x1"],
            "range": ["b1", "r1", "x1"], "prefix": ["a1", "b1"], "anything_but": ["a1", "a2"],
            "exists": ["a1", "b1", "r1", "x1"], "not_exists": ["a2"], "tags": ["a1"], "and": ["x1"]}
    for name, sub in subs.items():
        assert sorted(m["body"] for m in c.drain_list(sub["id"], key)) == want[name], name
    for sub in subs.values():
        c.ok("DELETE", f"/v1/subscriptions/{sub['id']}", key, 204)


def test_unsubscribe(env, stack):
    c, key = env["c"], env["risk"]["api_key"]
    sub = subscribe(env, env["root"])
    produce(env, env["root"], [{"body": "x"}])
    stack.drain()
    c.ok("DELETE", f"/v1/subscriptions/{sub['id']}", key, 204)
    assert c.call("GET", f"/v1/subscriptions/{sub['id']}/messages", key)[0] == 404
    assert c.call("DELETE", f"/v1/subscriptions/{sub['id']}", key)[0] == 404
    produce(env, env["root"], [{"body": "y"}])
    stack.drain()
    listed = c.ok("GET", "/v1/subscriptions", key, params={"subscriber": env["risk"]["name"]})["subscriptions"]
    assert sub["id"] not in [x["id"] for x in listed]


# ---------------------------------------------------------------- random run vs a reference
def _num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _eq(a, b):
    return type(a) is type(b) and a == b if not (_num(a) and _num(b)) else a == b


def ref_match(sub, topic, props, tags):
    if not (topic == sub["topic"] or topic.startswith(sub["topic"] + "/")):
        return False
    if sub["tags"] and not set(sub["tags"]) & set(tags):
        return False
    for lv in sub["conditions"]:
        f = lv["field"]
        if "exists" in lv:
            if (f in props) != lv["exists"]:
                return False
            continue
        if f not in props:
            return False
        x = props[f]
        if "values" in lv and not any(_eq(x, v) for v in lv["values"]):
            return False
        if "anything_but" in lv and any(_eq(x, v) for v in lv["anything_but"]):
            return False
        if "range" in lv and not (_num(x) and lv["range"][0] <= x <= lv["range"][1]):
            return False
        if "prefix" in lv and not (isinstance(x, str) and x.startswith(lv["prefix"])):
            return False
    return True


def test_random_subscriptions_against_reference(env, stack):
    rnd = random.Random(20240601)
    c, key, root = env["c"], env["risk"]["api_key"], env["root"]
    topics = [root, f"{root}/a", f"{root}/b", f"{root}/a/x"]
    vals = ["a", "b", "c", 1, 2, True]

    def level():
        f = rnd.choice(["f", "g", "n", "s"])
        kind = rnd.choice(["values", "values", "range", "prefix", "anything_but", "exists"])
        if kind == "values":
            return {"field": f, "values": rnd.sample(vals, rnd.randint(1, 3))}
        if kind == "range":
            lo = rnd.randint(0, 8)
            return {"field": f, "range": [lo, lo + rnd.randint(0, 4)]}
        if kind == "prefix":
            return {"field": f, "prefix": rnd.choice(["a", "ab", "b", ""])}
        if kind == "anything_but":
            return {"field": f, "anything_but": rnd.sample(vals, rnd.randint(1, 2))}
        return {"field": f, "exists": rnd.random() < 0.6}

    subs = []
    for _ in range(32):
        body_tags = rnd.sample(["t1", "t2", "t3"], rnd.randint(1, 2)) if rnd.random() < 0.2 else None
        s = subscribe(env, rnd.choice(topics), [level() for _ in range(rnd.randint(0, 3))], body_tags)
        subs.append(s)
    gone = set()
    for s in rnd.sample(subs, 3):  # a few unsubscribe before anything is published
        c.ok("DELETE", f"/v1/subscriptions/{s['id']}", key, 204)
        gone.add(s["id"])

    def value():
        return rnd.choice([rnd.choice(vals), rnd.randint(0, 12), rnd.choice(["ab", "abc", "b", "ba", "x"]), 2.5])

    published = []
    for batch in range(8):
        topic = rnd.choice(topics)
        ms = []
        for i in range(rnd.randint(5, 25)):
            props = {f: value() for f in ("f", "g", "n", "s") if rnd.random() < 0.7}
            ms.append({"body": f"{batch}-{i}", "key": rnd.choice(["k1", "k2", "k3", None]) or "k0",
                       "properties": props, "tags": rnd.sample(["t1", "t2", "t3", "t4"], rnd.randint(0, 2))})
        for m, r in zip(ms, produce(env, topic, ms)):
            published.append((topic, r["queue"], r["offset"], m))
        if batch == 3:
            stack.drain()
    stack.drain()
    total = 0
    for s in subs:
        if s["id"] in gone:
            assert c.call("GET", f"/v1/subscriptions/{s['id']}/messages", key)[0] == 404
            continue
        got = [(m["topic"], m["queue"], m["offset"]) for m in c.drain_list(s["id"], key, max_=rnd.choice([7, 100, 100]))]
        want = [(t, q, o) for t, q, o, m in published if ref_match(s, t, m["properties"], m["tags"])]
        assert len(got) == len(set(got)), s
        assert sorted(got) == sorted(want), s
        per_queue: dict = {}
        for t, q, o in got:
            per_queue.setdefault((t, q), []).append(o)
        assert all(v == sorted(v) for v in per_queue.values())
        total += len(got)
    assert total > 50 and not math.isnan(total)
