"""Issue 33: the native API's busy routes behind Lambda function URLs (template.yaml
``FunctionUrlConfig`` on ProduceFunction and ConsumeFunction, outputs ``ProduceFunctionUrl`` and
``ConsumeFunctionUrl``), as the SQS endpoint already is.

A function URL's event differs from API Gateway's (``events/produce_function_url.json``, after
AWS's documented shape): ``routeKey`` ``$default``, no ``pathParameters`` (the handler reads the
path itself, percent-encoded as the client sent it), the URL's own host, no authorizer in front. So
the handler must route, authenticate and refuse on its own, exactly as behind API Gateway.

Abuse cases (docs/abuse.md "Function URLs"): a request without a key or with another tenant's key
is refused by the handler (nothing behind API Gateway was doing it); a route the function does not
serve answers 404 and changes nothing (a function URL hands every path and method to the function);
API Gateway's throttle does not apply (no per-key rate existed behind it either).
"""
from __future__ import annotations

import base64
import copy
import json

import pytest

from infra.local import template as tpl
from tests.handlers import Context, load_function, sample


def url_event(method: str, raw_path: str, key: str | None, body=None, query: str = "") -> dict:
    """A function URL event (the sample's shape) for ``method raw_path?query``."""
    ev = copy.deepcopy(sample("produce_function_url.json"))
    ev["rawPath"] = ev["requestContext"]["http"]["path"] = raw_path
    ev["requestContext"]["http"]["method"] = method
    ev["rawQueryString"] = query
    if query:
        ev["queryStringParameters"] = dict(p.split("=", 1) for p in query.split("&"))
    ev["headers"].pop("authorization")
    if key is not None:
        ev["headers"]["authorization"] = f"Bearer {key}"
    if body is None:
        ev.pop("body")
    else:
        ev["body"] = body if isinstance(body, str) else json.dumps(body)
    return ev


def answer(out: dict) -> tuple[int, object]:
    text = out.get("body") or ""
    return out["statusCode"], (json.loads(text) if text[:1] in "{[" else text)


@pytest.fixture
def fns():
    return {"produce": load_function("ProduceFunction"), "consume": load_function("ConsumeFunction")}


def test_the_template_offers_produce_and_consume_behind_function_urls():
    t = tpl.load_template()
    for fn in ("ProduceFunction", "ConsumeFunction"):
        assert t["Resources"][fn]["Properties"]["FunctionUrlConfig"] == {"AuthType": "NONE"}, fn
        assert f"{fn}Url" in t["Outputs"], fn


def test_the_sample_event_is_served_as_the_gateway_route(api, setup, fns):
    """The sample itself (admin key acting for any producer, child topic percent-encoded)."""
    s, b = answer(fns["produce"](sample("produce_function_url.json"), Context()))
    assert s == 200 and len(b["results"]) == 1, b
    s, b = api.call("GET", "/v1/topics/quotes%2Fsh/messages", query={"group": "risk", "max": 10}, key=setup["risk"])
    assert s == 200 and [m["body"] for m in b["messages"]] == ["hello"], b


def test_produce_pull_ack_through_the_function_urls(api, setup, fns):
    out = fns["produce"](url_event("POST", "/v1/topics/quotes/messages", setup["feed"],
                                   {"producer": "feed", "messages": [{"body": f"m{i}"} for i in range(3)]}), Context())
    s, b = answer(out)
    assert s == 200 and len(b["results"]) == 3, b
    got = []
    for _ in range(8):  # one queue a pull; 4 queues
        s, b = answer(fns["consume"](url_event("GET", "/v1/topics/quotes/messages", setup["risk"],
                                               query="group=risk&max=10"), Context()))
        assert s == 200, b
        if b["messages"]:
            got += [m["body"] for m in b["messages"]]
            s, a = answer(fns["consume"](url_event("POST", "/v1/acks", setup["risk"],
                                                   {"group": "risk", "receipt": b["receipt"]}), Context()))
            assert s == 200, a
    assert sorted(got) == ["m0", "m1", "m2"]
    s, off = answer(fns["consume"](url_event("GET", "/v1/groups/risk/offsets", setup["risk"],
                                             query="topic=quotes"), Context()))
    assert s == 200 and sum(q["committed_offset"] for q in off["queues"]) == 3, off
    # the same offsets through API Gateway's route
    assert api.call("GET", "/v1/groups/risk/offsets", query={"topic": "quotes"}, key=setup["risk"]) == (200, off)


@pytest.mark.parametrize("key", [None, "not-a-key", "risk"])
def test_a_produce_without_a_valid_producer_key_is_refused_and_stores_nothing(api, setup, fns, key):
    """No authorizer sits in front of a function URL: the handler's own check is the only one."""
    k = setup.get(key, key)
    s, b = answer(fns["produce"](url_event("POST", "/v1/topics/quotes/messages", k,
                                           {"producer": "feed", "messages": [{"body": "x"}]}),
                                 Context()))
    assert s in (401, 403) and set(b) == {"error"}, b
    s, b = api.call("GET", "/v1/groups/risk/offsets", query={"topic": "quotes"}, key=setup["risk"])
    assert s == 200 and b["queues"] and all(q["max_offset"] == 0 for q in b["queues"]), b


@pytest.mark.parametrize("fn,method,path,body", [
    ("produce", "POST", "/v1/topics", {"name": "evil"}),           # an admin route, on the produce URL
    ("produce", "GET", "/v1/topics/quotes/messages", None),         # consume's route, on the produce URL
    ("consume", "POST", "/v1/topics/quotes/messages", {"producer": "feed", "messages": [{"body": "x"}]}),
    ("consume", "DELETE", "/v1/topics/quotes", None),
    ("consume", "POST", "/v1/clients", {"name": "evil", "role": "producer", "topics": ["quotes"]}),
])
def test_a_route_the_function_does_not_serve_is_404_and_changes_nothing(api, setup, fns, fn, method, path, body):
    """A function URL hands every method and path to its function (API Gateway only the routes the
    template wires): even with the admin key, another function's route is a 404 in the API's
    error shape and nothing is created, deleted or produced."""
    before = api.call("GET", "/v1/topics")[1], api.call("GET", "/v1/clients")[1]
    s, b = answer(fns[fn](url_event(method, path, "local-admin-key", body), Context()))
    assert s == 404 and b["error"]["code"] == "not_found", b
    assert (api.call("GET", "/v1/topics")[1], api.call("GET", "/v1/clients")[1]) == before
    s, b = api.call("GET", "/v1/groups/risk/offsets", query={"topic": "quotes"}, key=setup["risk"])
    assert b["queues"] and all(q["max_offset"] == 0 for q in b["queues"]), b


def stored(api, setup) -> int:
    """Messages on topic quotes (risk's offsets: every queue's max_offset)."""
    s, b = api.call("GET", "/v1/groups/risk/offsets", query={"topic": "quotes"}, key=setup["risk"])
    assert s == 200, b
    return sum(q["max_offset"] for q in b["queues"])


@pytest.mark.parametrize("raw_path,status,code", [
    # a function URL hands the path percent-encoded as the client sent it (API Gateway's HTTP API
    # decodes it): the handler decodes each segment once, then the name rule and the topic lookup apply
    ("/v1/topics/%2E%2E/messages", 404, "not_found"),                    # '..': no such topic
    ("/v1/topics/quotes%2F..%2F..%2Fx/messages", 404, "not_found"),      # no path walking: a name, not found
    ("/v1/topics/quotes%252Fsh/messages", 400, "bad_request"),           # decoded once: 'quotes%2Fsh'
    ("/v1/topics/quotes%00/messages", 400, "bad_request"),
    ("/v1/topics/quotes%2F/messages", 400, "bad_request"),
    ("/v1/topics/quotes/sh/messages", 404, "not_found"),                 # a child topic unencoded: no route here
    ("/v1/topics/quotes/messages/", 404, "not_found"),
    ("//v1/topics/quotes/messages", 404, "not_found"),
    ("/V1/topics/quotes/messages", 404, "not_found"),
])
def test_a_hostile_path_on_the_produce_url_is_refused_and_stores_nothing(api, setup, fns, raw_path, status, code):
    """Review 33: paths API Gateway would have normalised or refused reach the function as sent."""
    s, b = answer(fns["produce"](url_event("POST", raw_path, setup["feed"],
                                           {"producer": "feed", "messages": [{"body": "x"}]}), Context()))
    assert (s, b["error"]["code"]) == (status, code), b
    assert stored(api, setup) == 0


@pytest.mark.parametrize("method", ["HEAD", "OPTIONS", "PUT", "PATCH", "DELETE"])
def test_another_method_on_a_served_path_is_404_and_changes_nothing(api, setup, fns, method):
    for fn in ("produce", "consume"):
        s, b = answer(fns[fn](url_event(method, "/v1/topics/quotes/messages", "local-admin-key",
                                        {"producer": "feed", "messages": [{"body": "x"}]}), Context()))
        assert s == 404 and b["error"]["code"] == "not_found", (fn, b)
    assert stored(api, setup) == 0


def test_header_cookie_query_and_body_encodings_of_a_function_url(api, setup, fns):
    """Review 33: what a function URL event carries differently, each answered as behind API Gateway.
    A key in a cookie is no key; two Authorization headers (joined with a comma) are no key; a
    repeated query parameter is a 400 (check_query reads ``rawQueryString``, as the URL sends it);
    a body the URL sent base64-encoded (a non-text content type) is decoded; one that is not UTF-8
    or not base64 is a 400."""
    msg = {"producer": "feed", "messages": [{"body": "x"}]}
    ev = url_event("POST", "/v1/topics/quotes/messages", None, msg)
    ev["cookies"] = [f"authorization=Bearer {setup['feed']}"]
    assert answer(fns["produce"](ev, Context()))[0] == 401
    ev = url_event("POST", "/v1/topics/quotes/messages", setup["feed"], msg)
    ev["headers"]["authorization"] = f"Bearer x,Bearer {setup['feed']}"
    assert answer(fns["produce"](ev, Context()))[0] == 401
    assert stored(api, setup) == 0
    ev = url_event("GET", "/v1/topics/quotes/messages", setup["risk"], query="group=risk&group=other")
    ev["queryStringParameters"] = {"group": "risk,other"}  # the URL joins them, as API Gateway does
    s, b = answer(fns["consume"](ev, Context()))
    assert s == 400 and "more than once" in b["error"]["message"], b
    ev = url_event("POST", "/v1/topics/quotes/messages", setup["feed"], msg)
    ev["body"], ev["isBase64Encoded"] = base64.b64encode(ev["body"].encode()).decode(), True
    ev["headers"]["content-type"] = "application/octet-stream"
    s, b = answer(fns["produce"](ev, Context()))
    assert s == 200 and len(b["results"]) == 1, b
    for raw in (base64.b64encode(b"\xff\xfe").decode(), "!!not base64"):
        ev = url_event("POST", "/v1/acks", setup["risk"], None)
        ev["body"], ev["isBase64Encoded"] = raw, True
        s, b = answer(fns["consume"](ev, Context()))
        assert s == 400 and b["error"]["code"] == "bad_request", b
    assert stored(api, setup) == 1
