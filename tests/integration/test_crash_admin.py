"""Crash injection for the admin write paths: create topic, grow topic, create client, issue key,
revoke key.

Each is killed after each of its store calls in turn (every prefix), then the admin retries the same
request as a client that got no response would, until it gets an answer. Checked afterwards: the
state is whole (a topic has every queue item, so every queue takes messages and serves them; a client
can be used with a key the admin holds; a revoked key no longer authenticates), never half-made.
Each write is one transaction, so these tests pin that down: a change that split one into two calls
would leave a half-made topic or client after the first call, and fail here.
"""
from __future__ import annotations

import pytest

from lakeq.admin import auth as lq_auth
from lakeq.produce import service as produce_service
from tests.crash import CrashAfter, count_calls

ATTEMPTS = 5


def retry(api, k: int, method: str, path: str, body=None, key=None) -> tuple[int, object, bool]:
    """First attempt crashes after store call ``k`` (if it makes that many); then retry until an
    answer that is not a crash or a 5xx. Returns (status, body, crashed)."""
    kw = {"key": key} if key is not None else {}
    with CrashAfter(k) as c:
        crashed, out = c.run(lambda: api.call(method, path, body, **kw))
    if not crashed and out[0] < 500:
        return out[0], out[1], False
    for _ in range(ATTEMPTS):
        s, b = api.call(method, path, body, **kw)
        if s < 500:
            return s, b, crashed
    raise AssertionError(f"{method} {path} kept failing")


def works_as_producer(api, topic: str, key: str, queues: int) -> None:
    """Every queue of ``topic`` takes a message (by key) and the topic's offsets show them."""
    keys = {}
    i = 0
    while len(keys) < queues and i < 500:  # find one message key per queue
        q = produce_service.queue_for_key(str(i), queues)
        keys.setdefault(q, str(i))
        i += 1
    msgs = [{"body": f"m{q}", "key": k} for q, k in sorted(keys.items())]
    s, b = api.call("POST", f"/v1/topics/{topic.replace('/', '%2F')}/messages", {"producer": "feed", "messages": msgs},
                    key=key)
    assert s == 200, b
    assert sorted(r["queue"] for r in b["results"]) == list(range(queues))
    s, off = api.call("GET", "/v1/groups/risk/offsets", query={"topic": topic})
    assert s == 200, off
    assert [q["max_offset"] for q in off["queues"]] == [1] * queues


@pytest.fixture
def clients(api):
    s, feed = api.call("POST", "/v1/clients", {"name": "feed", "role": "producer", "topics": ["quotes"]})
    assert s == 201
    s, risk = api.call("POST", "/v1/clients", {"name": "risk", "role": "consumer", "topics": ["quotes"]})
    assert s == 201
    return {"feed": feed["api_key"], "risk": risk["api_key"]}


@pytest.fixture
def root(api):
    assert api.call("POST", "/v1/topics", {"name": "quotes", "queues": 2})[0] == 201


def test_create_topic_every_prefix(api, root, clients):
    n, out = count_calls(lambda: api.call("POST", "/v1/topics", {"name": "quotes/probe", "queues": 3}))
    assert out[0] == 201 and n >= 2
    for k in range(1, n + 1):
        name = f"quotes/t{k}"
        s, b, crashed = retry(api, k, "POST", "/v1/topics", {"name": name, "queues": 3})
        assert crashed
        assert (s, b.get("error", {}).get("code")) in ((201, None), (409, "topic_exists")), (k, s, b)
        listed = {t["name"]: t for t in api.call("GET", "/v1/topics")[1]["topics"]}
        assert listed[name]["queues"] == 3 and listed[name]["parent"] == "quotes"
        works_as_producer(api, name, clients["feed"], 3)


def test_grow_topic_every_prefix(api, root, clients):
    n, out = count_calls(lambda: api.call("PATCH", "/v1/topics/quotes", {"queues": 3}))
    assert out[0] == 200 and n >= 2
    for k in range(1, n + 1):
        name = f"quotes/g{k}"
        assert api.call("POST", "/v1/topics", {"name": name, "queues": 2})[0] == 201
        s, b, crashed = retry(api, k, "PATCH", f"/v1/topics/{name.replace('/', '%2F')}", {"queues": 4})
        assert crashed
        # a retry of a growth that committed finds the topic already at 4: "can only grow" (400)
        assert s == 200 or (s == 400 and "has 4" in b["error"]["message"]), (k, s, b)
        works_as_producer(api, name, clients["feed"], 4)


def test_create_client_every_prefix(api, root, clients):
    body = {"name": "probe", "role": "producer", "topics": ["quotes"]}
    n, out = count_calls(lambda: api.call("POST", "/v1/clients", body))
    assert out[0] == 201 and n >= 2
    for k in range(1, n + 1):
        name = f"feed{k}"
        s, b, crashed = retry(api, k, "POST", "/v1/clients", {**body, "name": name})
        assert crashed
        if s == 409:  # it was created but the key was lost with the response: the admin issues one
            assert b["error"]["code"] == "client_exists"
            s, b = api.call("POST", f"/v1/clients/{name}/keys")
        assert s == 201, (k, s, b)
        s, res = api.call("POST", "/v1/topics/quotes/messages",
                          {"producer": name, "messages": [{"body": "x"}]}, key=b["api_key"])
        assert s == 200, (k, s, res)


def original(clients) -> str:
    return lq_auth.hash_key(clients["feed"])[:16]


def authenticates(api, key: str) -> bool:
    lq_auth.clear_caches()  # a fresh container: no cached key
    return api.call("GET", "/v1/groups/risk/offsets", query={"topic": "quotes"}, key=key)[0] != 401


def test_issue_key_every_prefix(api, root, clients):
    n, out = count_calls(lambda: api.call("POST", "/v1/clients/feed/keys"))
    assert out[0] == 201 and n >= 1
    for k in range(1, n + 1):
        s, b, crashed = retry(api, k, "POST", "/v1/clients/feed/keys")
        assert crashed and s == 201, (k, s, b)
        assert authenticates(api, b["api_key"])
        assert b["key_id"] in [x["key_id"] for x in api.call("GET", "/v1/clients/feed/keys")[1]["keys"]]
    assert authenticates(api, clients["feed"])


def test_revoke_key_every_prefix(api, root, clients):
    def issue() -> dict:
        s, b = api.call("POST", "/v1/clients/feed/keys")
        assert s == 201
        return b

    probe = issue()
    n, out = count_calls(lambda: api.call("DELETE", f"/v1/clients/feed/keys/{probe['key_id']}"))
    assert out[0] == 204 and n >= 1
    for k in range(1, n + 1):
        b = issue()
        s, r, crashed = retry(api, k, "DELETE", f"/v1/clients/feed/keys/{b['key_id']}")
        assert crashed
        assert s in (204, 404), (k, s, r)  # 404: the crashed attempt had revoked it
        assert not authenticates(api, b["api_key"])
        live = [x["key_id"] for x in api.call("GET", "/v1/clients/feed/keys")[1]["keys"]]
        assert live == [original(clients)], (k, live)
    assert authenticates(api, clients["feed"])
    assert api.call("POST", "/v1/topics/quotes/messages", {"producer": "feed", "messages": [{"body": "x"}]},
                    key=clients["feed"])[0] == 200
