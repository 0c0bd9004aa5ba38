"""Issue 8 item 8: repeated query parameters, commas in tags, key rotation and revocation.

API Gateway's HTTP API (payload 2.0) joins a repeated query parameter's values with commas in
``queryStringParameters`` (``tags=A&tags=B`` arrives as ``tags=A,B``) and passes
``rawQueryString`` as sent; ``tests.handlers.Api`` builds events the same way."""
from __future__ import annotations

import pytest

from lakeq.admin import auth
from lakeq.admin import auth as lq_auth
from lakeq.admin import service as admin_service
from lakeq.common.backoff import CAS_ATTEMPTS
from lakeq.store.models import KeyModel
from tests.handlers import Context

T = "/v1/topics/quotes%2Fsh/messages"


def produce(api, key, msgs):
    return api.call("POST", T, {"producer": "feed", "messages": msgs}, key=key)


def backlog(api, key):
    s, b = api.call("GET", "/v1/groups/risk/offsets", query={"topic": "quotes/sh"}, key=key)
    assert s == 200, b
    return b["backlog"]


# --- (a) repeated query parameters ---------------------------------------------------------------
def test_repeated_tags_parameter_is_rejected_and_consumes_nothing(api, setup):
    """Before: ``tags=A&tags=B`` became the filter ``A,B``, matched nothing, and the pull moved the
    committed offset past every message (the backlog silently consumed)."""
    assert produce(api, setup["feed"], [{"body": "a", "key": "k", "tags": ["A"]},
                                        {"body": "b", "key": "k", "tags": ["B"]}])[0] == 200
    assert backlog(api, setup["risk"]) == 2
    s, b = api.call("GET", T, query=[("group", "risk"), ("tags", "A"), ("tags", "B")], key=setup["risk"])
    assert s == 400 and b["error"]["code"] == "bad_request" and "tags" in b["error"]["message"]
    assert backlog(api, setup["risk"]) == 2
    s, b = api.call("GET", T, query={"group": "risk", "tags": "A||B"}, key=setup["risk"])
    assert s == 200 and sorted(m["body"] for m in b["messages"]) == ["a", "b"]


@pytest.mark.parametrize("method, path, query", [
    ("GET", T, [("group", "risk"), ("group", "risk")]),
    ("GET", T, [("group", "risk"), ("max", "1"), ("max", "2")]),
    ("GET", "/v1/groups/risk/offsets", [("topic", "quotes/sh"), ("topic", "quotes")]),
    ("GET", "/v1/subscriptions", [("subscriber", "risk"), ("subscriber", "risk")]),
    ("GET", "/v1/reports/backlog", [("group", "risk"), ("topic", "quotes"), ("topic", "quotes")]),
    ("GET", "/v1/topics", [("x", "1"), ("x", "2")]),  # a route that reads no parameter
    ("POST", "/v1/acks", [("x", "1"), ("x", "1")]),
])
def test_any_repeated_query_parameter_is_a_400_on_every_route(api, setup, method, path, query):
    key = setup["risk"] if path != "/v1/topics" else "local-admin-key"
    s, b = api.call(method, path, body={"group": "risk", "receipt": "x"} if method == "POST" else None,
                    query=query, key=key)
    assert s == 400 and b["error"]["code"] == "bad_request", (s, b)
    assert "more than once" in b["error"]["message"]
    # still 401 first (API.md's check order)
    s, b = api.call(method, path, query=query, key=None)
    assert s == 401, (s, b)


def test_repeat_detected_whatever_the_name_encoding(api, setup):
    ev, h = api.event("GET", T, query={"group": "risk", "tags": "A,B"}, key=setup["risk"])
    ev["rawQueryString"] = "group=risk&tags=A&%74ags=B"
    out = h(ev, Context())
    assert out["statusCode"] == 400


def test_health_with_repeated_parameters(api):
    s, b = api.call("GET", "/v1/health", query=[("a", "1"), ("a", "2")], key=None)
    assert s == 400 and b["error"]["code"] == "bad_request"


# --- (b) commas in tags ----------------------------------------------------------------------------
def test_comma_in_pull_tags_filter_is_rejected(api, setup):
    assert produce(api, setup["feed"], [{"body": "a", "tags": ["A"]}])[0] == 200
    for raw in ("A,B", "A||B,C", ","):
        s, b = api.call("GET", T, query={"group": "risk", "tags": raw}, key=setup["risk"])
        assert s == 400 and b["error"]["code"] == "bad_request" and "','" in b["error"]["message"], raw
    assert backlog(api, setup["risk"]) == 1


def test_comma_in_produced_and_subscription_tags_is_rejected(api, setup):
    s, b = produce(api, setup["feed"], [{"body": "a", "tags": ["A,B"]}])
    assert s == 400 and b["error"]["code"] == "bad_request" and "','" in b["error"]["message"]
    assert backlog(api, setup["risk"]) == 0
    s, b = api.call("POST", "/v1/subscriptions", {"subscriber": "risk", "topic": "quotes", "tags": ["x,y"]},
                    key=setup["risk"])
    assert s == 400 and b["error"]["code"] == "bad_request"
    s, b = api.call("GET", "/v1/subscriptions", query={"subscriber": "risk"}, key=setup["risk"])
    assert b["subscriptions"] == []


# --- (d) key rotation and revocation ---------------------------------------------------------------
def _can_read(api, key) -> int:
    return api.call("GET", "/v1/groups/risk/offsets", query={"topic": "quotes/sh"}, key=key)[0]


def test_issue_and_revoke_keys(api, setup):
    old = setup["risk"]
    assert _can_read(api, old) == 200  # cached in this (warm) container now
    s, new = api.call("POST", "/v1/clients/risk/keys")
    assert s == 201, new
    assert new["name"] == "risk" and new["api_key"].startswith("lq_") and new["key_id"]
    assert new["api_key"] != old and _can_read(api, new["api_key"]) == 200 and _can_read(api, old) == 200
    s, listed = api.call("GET", "/v1/clients/risk/keys")
    assert s == 200 and {k["key_id"] for k in listed["keys"]} >= {new["key_id"]} and len(listed["keys"]) == 2
    old_id = next(k["key_id"] for k in listed["keys"] if k["key_id"] != new["key_id"])
    assert all("api_key" not in k for k in listed["keys"])
    # revoke the original key: 401 at once on the next request, the new key still works
    assert api.call("DELETE", f"/v1/clients/risk/keys/{old_id}") == (204, "")
    s, b = api.call("GET", "/v1/groups/risk/offsets", query={"topic": "quotes/sh"}, key=old)
    assert s == 401 and b["error"]["code"] == "unauthorized"
    assert _can_read(api, new["api_key"]) == 200
    assert api.call("DELETE", f"/v1/clients/risk/keys/{old_id}")[0] == 404  # already revoked
    assert sum(1 for _ in KeyModel.scan()) == 2  # feed's key + risk's new key: hashes only
    assert all(len(k.key_hash) == 64 and k.key_hash != new["api_key"] for k in KeyModel.scan())


def test_create_client_answers_its_key_id(api, setup):
    s, c = api.call("POST", "/v1/clients", {"name": "ops", "role": "consumer", "topics": ["quotes"]})
    assert s == 201 and c["key_id"]
    assert api.call("DELETE", f"/v1/clients/ops/keys/{c['key_id']}")[0] == 204
    assert api.call("GET", "/v1/groups/ops/offsets", query={"topic": "quotes"}, key=c["api_key"])[0] == 401


def test_key_routes_check_order(api, setup):
    assert api.call("POST", "/v1/clients/risk/keys", key=None)[0] == 401
    assert api.call("POST", "/v1/clients/bad%20name/keys")[0] == 400
    assert api.call("POST", "/v1/clients/nobody/keys")[0] == 404
    s, b = api.call("POST", "/v1/clients/risk/keys", key=setup["risk"])  # only the admin key
    assert s == 403 and b["error"]["code"] == "forbidden"
    assert api.call("DELETE", "/v1/clients/risk/keys/bad%20id")[0] == 400
    assert api.call("DELETE", "/v1/clients/nobody/keys/0123456789abcdef")[0] == 404
    assert api.call("DELETE", "/v1/clients/risk/keys/0123456789abcdef")[0] == 404
    assert api.call("DELETE", "/v1/clients/risk/keys/0123456789abcdef", key=setup["risk"])[0] == 404
    s, keys = api.call("GET", "/v1/clients/risk/keys")
    kid = keys["keys"][0]["key_id"]
    assert api.call("DELETE", f"/v1/clients/risk/keys/{kid}", key=setup["risk"])[0] == 403
    assert api.call("DELETE", f"/v1/clients/feed/keys/{kid}")[0] == 404  # another client's key
    assert _can_read(api, setup["risk"]) == 200


def test_key_limit_per_client(api, setup):
    for _ in range(admin_service.MAX_KEYS - 1):
        assert api.call("POST", "/v1/clients/feed/keys")[0] == 201
    s, b = api.call("POST", "/v1/clients/feed/keys")
    assert s == 409 and b["error"]["code"] == "too_many_keys"


def test_revoked_key_cached_by_another_container_expires_within_the_ttl(api, setup, monkeypatch):
    """Another warm container keeps its cache: the key stays valid there at most KEY_CACHE_TTL_S."""
    now = [1000.0]
    monkeypatch.setattr(auth, "monotonic", lambda: now[0])
    key = setup["risk"]
    assert _can_read(api, key) == 200
    cached = dict(auth._key_cache)  # what another container holds
    kid = api.call("GET", "/v1/clients/risk/keys")[1]["keys"][0]["key_id"]
    assert api.call("DELETE", f"/v1/clients/risk/keys/{kid}")[0] == 204
    auth._key_cache.update(cached)
    assert _can_read(api, key) == 200  # stale, within the TTL
    now[0] += lq_auth.KEY_CACHE_TTL_S + 0.001
    assert _can_read(api, key) == 401


def test_local_gateway_passes_repeats_as_api_gateway_does(api, setup):
    """The local stack's gateway (template.yaml's routes, in-process handlers on moto): a repeated
    parameter reaches the handler comma-joined, with rawQueryString as sent → 400."""
    from werkzeug.test import Client

    from infra.local.gateway import Gateway
    assert produce(api, setup["feed"], [{"body": "a", "tags": ["A"]}, {"body": "b", "tags": ["B"]}])[0] == 200
    gw = Client(Gateway(stack_name="lakeq-local"))
    auth = {"Authorization": f"Bearer {setup['risk']}"}
    r = gw.get("/v1/topics/quotes%2Fsh/messages?group=risk&tags=A&tags=B", headers=auth)
    assert r.status_code == 400 and r.get_json()["error"]["code"] == "bad_request"
    assert backlog(api, setup["risk"]) == 2
    r = gw.get("/v1/topics/quotes%2Fsh/messages?group=risk&tags=A%7C%7CB&max=10", headers=auth)
    assert r.status_code == 200 and len(r.get_json()["messages"]) == 2


def test_a_rival_change_of_the_key_set_is_seen_and_decided_again(api, setup, monkeypatch):
    """The key set is a compare-and-set on ``key_version`` (``auth.change_key_set``, shared with SQS
    credentials): a rotation that lands between this request's read and its write makes the write
    fail, the client is read again and both keys stay live; a revocation racing the same way
    answers 404 instead of removing what is no longer there."""
    from lakeq.store.catalog import ClientRepo

    real = ClientRepo.set_keys
    rival: list[dict] = []

    def racing(c, version, live, **kw):
        if not rival:  # once: another container issues a key first
            monkeypatch.setattr(ClientRepo, "set_keys", real)
            s, b = api.call("POST", "/v1/clients/risk/keys")
            assert s == 201
            rival.append(b)
            monkeypatch.setattr(ClientRepo, "set_keys", racing)
        return real(c, version, live, **kw)

    monkeypatch.setattr(ClientRepo, "set_keys", racing)
    s, mine = api.call("POST", "/v1/clients/risk/keys")
    assert s == 201, mine
    s, listed = api.call("GET", "/v1/clients/risk/keys")
    ids = {k["key_id"] for k in listed["keys"]}
    assert {mine["key_id"], rival[0]["key_id"]} <= ids and len(ids) == 3
    assert _can_read(api, mine["api_key"]) == 200 and _can_read(api, rival[0]["api_key"]) == 200

    # a revocation whose key is revoked by a rival in between: the retry reads it gone → 404
    rival.clear()

    def racing_revoke(c, version, live, **kw):
        monkeypatch.setattr(ClientRepo, "set_keys", real)
        assert api.call("DELETE", f"/v1/clients/risk/keys/{mine['key_id']}")[0] == 204
        monkeypatch.setattr(ClientRepo, "set_keys", racing_revoke)
        return real(c, version, live, **kw)

    monkeypatch.setattr(ClientRepo, "set_keys", racing_revoke)
    s, b = api.call("DELETE", f"/v1/clients/risk/keys/{mine['key_id']}")
    assert s == 404 and "no live key" in b["error"]["message"], (s, b)
    monkeypatch.setattr(ClientRepo, "set_keys", real)
    s, listed = api.call("GET", "/v1/clients/risk/keys")
    assert {k["key_id"] for k in listed["keys"]} == ids - {mine["key_id"]}


def test_a_key_set_contended_without_end_answers_503(api, setup, monkeypatch):
    from lakeq.store.catalog import ClientRepo
    from lakeq.store.writes import CONDITION_FAILED, TransactionFailed

    calls = []

    def always_moved(c, version, live, **kw):
        calls.append(version)
        raise TransactionFailed([CONDITION_FAILED, "None"])

    monkeypatch.setattr(ClientRepo, "set_keys", always_moved)
    s, b = api.call("POST", "/v1/clients/risk/keys")
    assert s == 503 and "contended" in b["error"]["message"], (s, b)
    assert len(calls) == CAS_ATTEMPTS
