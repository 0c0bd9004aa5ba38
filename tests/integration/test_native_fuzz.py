"""Issue 14, "How to work": the native routes added last round, fuzzed as the SQS endpoint is
(tests/integration/test_sqs_fuzz.py): ``POST /v1/acks`` (one ack and the batch form ``{"acks":
[...]}``), ``POST /v1/visibility``, ``PATCH /v1/clients/{name}``, produce with ``delay_ms`` and the
sqs-credentials routes, with members of wrong types and sizes and odd path parameters. No answer
is a 5xx, and an answer >= 400 changes nothing (the observable state is the same before and after)."""
from __future__ import annotations

import json
from urllib.parse import quote

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz import fuzz_settings, odd_texts, wild_json
from tests.history import path

T = "quotes/sh"
FUZZ = fuzz_settings(150)

KEYS = ["group", "subscription", "client_id", "receipt", "accept", "release", "reject", "acks",
        "visibility_timeout_ms", "max_deliveries", "dead_letter_topic", "producer", "messages", "body", "id", "key",
        "tags", "properties", "delay_ms"]
odd_text = odd_texts(["", "risk", "feed", "quotes", "quotes/sh", "R", "-1", "9" * 30, "\x00", "sqs.sender", "None"])
wild = wild_json(KEYS, odd_text)


@st.composite
def bodies(draw, receipt):
    d = draw(st.dictionaries(st.sampled_from(KEYS), wild, max_size=5))
    if draw(st.booleans()):
        d["group"] = "risk"
    if draw(st.booleans()):
        d["receipt"] = receipt
    if draw(st.booleans()):
        d["acks"] = draw(st.lists(st.one_of(wild, st.fixed_dictionaries({"receipt": st.just(receipt)},
                                                                         optional={"accept": wild, "reject": wild})),
                                  max_size=4))
    if draw(st.booleans()):
        d["producer"] = "feed"
        d["messages"] = draw(st.lists(st.dictionaries(st.sampled_from(KEYS), wild, max_size=5), max_size=3))
    return d


def snapshot(api, setup) -> str:
    out = []
    for m, p, q, k in [("GET", "/v1/clients", None, None),
                       ("GET", f"/v1/topics/{quote(T, safe='')}", None, None),
                       ("GET", "/v1/groups/risk/offsets", {"topic": T}, setup["risk"]),
                       ("GET", "/v1/clients/risk/sqs-credentials", None, None)]:
        s, b = api.call(m, p, query=q) if k is None else api.call(m, p, query=q, key=k)
        assert s == 200, (p, s, b)
        out.append(b)
    return json.dumps(out, sort_keys=True)


ROUTES = [("POST", "/v1/acks", "risk"), ("POST", "/v1/visibility", "risk"), ("PATCH", "/v1/clients/risk", None),
          ("POST", path(T), "feed")]


def test_native_routes_wrong_types_never_5xx_and_bad_input_changes_nothing(api, setup, clock):
    s, b = api.call("POST", path(T), {"producer": "feed", "messages": [{"body": f"m{i}"} for i in range(6)]},
                    key=setup["feed"])
    assert s == 200
    s, got = api.call("GET", path(T), query={"group": "risk", "max": 3}, key=setup["risk"])
    assert s == 200 and got["receipt"]
    receipt = got["receipt"]

    @FUZZ
    @given(st.sampled_from(ROUTES), bodies(receipt), st.sampled_from(["json", "raw"]), odd_text)
    def run(route, body, how, raw):
        method, p, who = route
        before = snapshot(api, setup)
        key = setup[who] if who else None
        kw = {"raw_body": raw} if how == "raw" else {"body": body}
        s, b = api.call(method, p, **kw) if key is None else api.call(method, p, key=key, **kw)
        assert s < 500, (route, body, s, b)
        if s >= 400:
            assert isinstance(b, dict) and b["error"]["code"], b
            assert snapshot(api, setup) == before, (route, body, b)
    run()


@pytest.mark.parametrize("name", ["risk", "nobody", "a" * 300, "%00", "..", "risk%2Fx", "%F0%9F%98%80", "%ED%A0%80"])
def test_sqs_credential_routes_with_odd_path_parameters_never_5xx(api, setup, name):
    before = snapshot(api, setup)
    for method, p in [("GET", f"/v1/clients/{name}/sqs-credentials"), ("DELETE", f"/v1/clients/{name}/sqs-credentials/{name}"),
                      ("DELETE", f"/v1/clients/risk/sqs-credentials/{name}")]:
        s, b = api.call(method, p)
        assert s < 500, (method, p, s, b)
    s, b = api.call("POST", f"/v1/clients/{name}/sqs-credentials", raw_body='{"x": [1, {"y": null}]}')
    assert s < 500, (name, s, b)
    if s >= 400:
        assert snapshot(api, setup) == before
    s, b = api.call("GET", "/v1/sqs-credentials/admin", key=setup["risk"])
    assert s == 403 or s < 500
