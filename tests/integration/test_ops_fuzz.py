"""The routes added by issues 17 and 18 (push endpoints of subscriptions and groups, peek, pending,
redrives, the summary), fuzzed as test_native_fuzz.py fuzzes the earlier ones: bodies and query
parameters of wrong types, sizes and shapes, odd path parameters, repeated parameters. No answer is
a 5xx; an answer >= 400 has API.md's error shape and changes nothing (the observable state —
clients, the topic, the group's offsets, both push endpoints, the redrives — is the same before
and after)."""
from __future__ import annotations

import json
from urllib.parse import quote

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz import fuzz_settings, odd_texts, wild_json
from tests.handlers import make_dlq
from tests.history import path

T = "quotes/sh"
TQ = quote(T, safe="")
URL = "https://hooks.example.com/x"
FUZZ = fuzz_settings(60)

KEYS = ["url", "topic", "headers", "batch_size", "max_in_flight", "timeout_ms", "rate", "retry", "max_attempts",
        "backoff_base_ms", "backoff_cap_ms", "source", "destination", "from", "limit", "queue", "client_id",
        "status", "paused", "group"]
odd_text = odd_texts(["", "risk", "quotes", T, "dlq", "-1", "0", "1", "1.5", "9" * 30, "\x00", "None", "null", "true",
                      "0:0", "1:x", URL, "http://127.0.0.1:1/x", "https://u:p@h.example/x", "https://" + "a" * 2100])
wild = wild_json(KEYS, odd_text)


@st.composite
def push_bodies(draw):
    d = draw(st.dictionaries(st.sampled_from(KEYS), wild, max_size=6))
    if draw(st.booleans()):
        d["url"] = URL
    if draw(st.booleans()):
        d["topic"] = "quotes"
    return d


@st.composite
def redrive_bodies(draw):
    d = draw(st.dictionaries(st.sampled_from(KEYS), wild, max_size=4))
    if draw(st.booleans()):
        d["source"] = draw(st.sampled_from(["dlq", "quotes", T, "nope"]))
    return d


queries = st.lists(st.tuples(st.sampled_from(KEYS), odd_text), max_size=4)  # repeated names allowed


@pytest.fixture
def ops(api, setup):
    """The setup plus a subscription of risk (with a push endpoint), a group endpoint on quotes,
    a dead-letter topic and a redrive that ran (so the state has one of everything)."""
    s, sub = api.call("POST", "/v1/subscriptions", {"subscriber": "risk", "topic": "quotes"}, key=setup["risk"])
    assert s == 201, sub
    sid = sub["id"]
    assert api.call("PUT", f"/v1/subscriptions/{sid}/push", {"url": URL}, key=setup["risk"])[0] == 201
    assert api.call("PUT", "/v1/groups/risk/push", {"url": URL, "topic": "quotes"}, key=setup["risk"])[0] == 201
    make_dlq(api)
    s, r = api.call("POST", "/v1/redrives", {"source": "dlq", "destination": "quotes"})
    assert s == 202, r
    s, b = api.call("POST", path(T), {"producer": "feed", "messages": [{"body": f"m{i}"} for i in range(3)]},
                    key=setup["feed"])
    assert s == 200, b
    return {"sid": sid, "redrive": r["id"]}


def snapshot(api, setup, ops) -> str:
    out = []
    for m, p, q in [("GET", "/v1/clients", None), ("GET", f"/v1/topics/{TQ}", None),
                    ("GET", "/v1/groups/risk/offsets", {"topic": T}),
                    ("GET", f"/v1/subscriptions/{ops['sid']}/push", None), ("GET", "/v1/groups/risk/push", None),
                    ("GET", "/v1/redrives", None)]:
        s, b = api.call(m, p, query=q)
        assert s == 200, (p, s, b)
        out.append(b)
    return json.dumps(out, sort_keys=True)


def _check(api, setup, ops, before, route, s, b):
    assert s < 500, (route, s, b)
    if s >= 400:
        assert isinstance(b, dict) and b["error"]["code"] and b["error"]["message"], (route, b)
        assert snapshot(api, setup, ops) == before, (route, b)


def test_push_and_redrive_bodies_of_any_shape_never_5xx_and_bad_input_changes_nothing(api, setup, ops):
    sid = ops["sid"]
    writes = [("PUT", f"/v1/subscriptions/{sid}/push", "risk", push_bodies()),
              ("PUT", "/v1/groups/risk/push", "risk", push_bodies()),
              ("PUT", "/v1/groups/risk/push", None, push_bodies()),
              ("POST", "/v1/redrives", None, redrive_bodies())]

    @FUZZ
    @given(st.data(), st.sampled_from(range(len(writes))), st.sampled_from(["json", "raw"]), odd_text)
    def run(data, i, how, raw):
        method, p, who, bodies = writes[i]
        before = snapshot(api, setup, ops)
        kw = {"raw_body": raw} if how == "raw" else {"body": data.draw(bodies)}
        key = {"key": setup[who]} if who else {}
        s, b = api.call(method, p, **kw, **key)
        if s < 400:  # a valid body was accepted: put things back as the fixture had them
            if p.startswith("/v1/redrives"):
                api.call("POST", f"/v1/redrives/{b['id']}/cancel")
            return
        _check(api, setup, ops, before, (method, p, kw), s, b)
    run()


def test_peek_pending_summary_and_lists_with_odd_queries_never_5xx_and_change_nothing(api, setup, ops):
    sid = ops["sid"]
    reads = [(f"/v1/topics/{TQ}/queues/0/messages", None), (f"/v1/topics/{TQ}/queues/1/messages", "risk"),
             ("/v1/groups/risk/pending", "risk"), ("/v1/groups/risk/pending", None),
             (f"/v1/subscriptions/{sid}/pending", "risk"), ("/v1/redrives", None), ("/v1/summary", None),
             (f"/v1/redrives/{ops['redrive']}", None), ("/v1/console/metrics", None), ("/v1/console/metrics", "risk")]

    @FUZZ
    @given(st.sampled_from(reads), queries, st.booleans())
    def run(read, q, with_topic):
        p, who = read
        q = ([("topic", T)] if with_topic and "pending" in p and "groups" in p else []) + q
        before = snapshot(api, setup, ops)
        s, b = api.call("GET", p, query=q, **({"key": setup[who]} if who else {}))
        _check(api, setup, ops, before, (p, q), s, b)
        assert snapshot(api, setup, ops) == before, (p, q)  # a read changes nothing, 200 or not
    run()


@pytest.mark.parametrize("name", ["nobody", "a" * 300, "%00", "..", "risk%2Fx", "%F0%9F%98%80", "%ED%A0%80", "-1",
                                  "99999999999999999999"])
def test_odd_path_parameters_never_5xx(api, setup, ops, name):
    before = snapshot(api, setup, ops)
    for method, p, body in [
            ("GET", f"/v1/subscriptions/{name}/push", None), ("PUT", f"/v1/subscriptions/{name}/push", {"url": URL}),
            ("DELETE", f"/v1/subscriptions/{name}/push", None), ("POST", f"/v1/subscriptions/{name}/push/pause", None),
            ("GET", f"/v1/groups/{name}/push", None),
            ("PUT", f"/v1/groups/{name}/push", {"url": URL, "topic": "quotes"}),
            ("POST", f"/v1/groups/{name}/push/secret", None), ("GET", f"/v1/groups/{name}/pending", None),
            ("GET", f"/v1/subscriptions/{name}/pending", None),
            ("GET", f"/v1/topics/{TQ}/queues/{name}/messages", None),
            ("GET", f"/v1/topics/{name}/queues/0/messages", None), ("GET", f"/v1/redrives/{name}", None),
            ("POST", f"/v1/redrives/{name}/cancel", None)]:
        s, b = api.call(method, p, body=body)
        assert s < 500, (method, p, s, b)
        if s >= 400:
            assert b["error"]["code"], b
    assert snapshot(api, setup, ops) == before
