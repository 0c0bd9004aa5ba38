"""API Gateway's HTTP API hands a function the request path percent-DECODED: ``rawPath`` (and
``requestContext.http.path``) of ``/v1/topics/quotes%2Fsh/messages`` arrive as
``/v1/topics/quotes/sh/messages`` (live captures published with hotsock/voker's path tests: REST
APIs, ALB and function URLs keep the encoding, HTTP APIs decode, ``%252F`` even twice). Routing on
that path would split a child topic into two segments and answer 404; the handlers route on the
route API Gateway matched (``routeKey``) and its ``pathParameters`` instead
(lakeq.api.http.routed_path). Every test here failed with handlers routing on ``rawPath``.

Abuse cases: a parameter decoded only once by the gateway (``quotes%2Fsh``) is decoded again (names
hold no ``%``); a parameter naming another path (``..``, ``quotes/sh/../x``, a query or fragment
character) is one name, refused by the name rules (400/404) and changes nothing; a route key or
parameters that do not fit each other route as before (404); a function URL's event (``$default``,
no parameters) is untouched."""
from __future__ import annotations

import copy
import json

import pytest

from tests.handlers import Context, load_function, sample


def gw_event(base: str, route: str, params: dict | None, raw_path: str, key: str | None = None,
             body=None, query: str = "") -> dict:
    ev = copy.deepcopy(sample(base))
    ev["routeKey"] = ev["requestContext"]["routeKey"] = route
    ev["requestContext"]["http"]["method"] = route.split(" ", 1)[0]
    ev["rawPath"] = ev["requestContext"]["http"]["path"] = raw_path
    if params is None:
        ev.pop("pathParameters", None)
    else:
        ev["pathParameters"] = params
    ev["rawQueryString"] = query
    ev.pop("queryStringParameters", None)
    if query:
        ev["queryStringParameters"] = dict(p.split("=", 1) for p in query.split("&"))
    if key is not None:
        ev["headers"]["authorization"] = f"Bearer {key}"
    if body is None:
        ev.pop("body", None)
    else:
        ev["body"] = json.dumps(body)
    return ev


def answer(out: dict):
    text = out.get("body") or ""
    return out["statusCode"], (json.loads(text) if text[:1] in "{[" else text)


@pytest.fixture
def fns():
    return {n: load_function(f"{n.capitalize()}Function") for n in ("produce", "consume", "admin")}


PRODUCE = "POST /v1/topics/{topic}/messages"
PULL = "GET /v1/topics/{topic}/messages"


def produce(fns, key, topic_param, raw_path, body):
    return answer(fns["produce"](gw_event("produce.json", PRODUCE, {"topic": topic_param}, raw_path, key, body),
                                 Context()))


def test_a_child_topic_is_produced_to_and_pulled_from_with_the_gateways_decoded_path(api, setup, fns):
    s, b = produce(fns, setup["feed"], "quotes/sh", "/v1/topics/quotes/sh/messages",
                   {"producer": "feed", "messages": [{"key": "k", "body": "child"}]})
    assert s == 200 and len(b["results"]) == 1, b
    got = []
    for _ in range(4):
        ev = gw_event("pull.json", PULL, {"topic": "quotes/sh"}, "/v1/topics/quotes/sh/messages",
                      setup["risk"], query="group=risk&max=10")
        s, b = answer(fns["consume"](ev, Context()))
        assert s == 200, b
        got += [m["body"] for m in b["messages"]]
    assert got == ["child"]
    # the admin route of the child topic, too
    s, b = answer(fns["admin"](gw_event("topics_grow.json", "GET /v1/topics/{topic}", {"topic": "quotes/sh"},
                                        "/v1/topics/quotes/sh"), Context()))
    assert s == 200 and b["name"] == "quotes/sh", b


def test_a_parameter_decoded_once_is_decoded_again(api, setup, fns):
    """A client that sent ``quotes%252Fsh`` (what some guides advise for API Gateway): the gateway
    decodes the path twice and the parameter once or twice; either way the child topic."""
    for param in ("quotes%2Fsh", "quotes/sh"):
        s, b = produce(fns, setup["feed"], param, "/v1/topics/quotes/sh/messages",
                       {"producer": "feed", "messages": [{"body": param}]})
        assert s == 200 and len(b["results"]) == 1, (param, b)
    s, b = api.call("GET", "/v1/topics/quotes%2Fsh", None)
    assert s == 200


def queue_state(api):
    s, b = api.call("GET", "/v1/topics", None)
    assert s == 200
    return b


@pytest.mark.parametrize("param", ["..", "quotes/sh/../x", "quotes/sh?x=1", "quotes#sh", "quotes%25sh", "quotes/",
                                   "/quotes", "quotes//sh", "quotes%2F..%2Fx", ""])
def test_a_parameter_is_one_name_and_a_bad_one_changes_nothing(api, setup, fns, param):
    before = queue_state(api)
    s, b = produce(fns, setup["feed"], param, "/v1/topics/" + param + "/messages",
                   {"producer": "feed", "messages": [{"body": "x"}]})
    assert s in (400, 403, 404), (param, s, b)
    assert b["error"]["code"] in ("bad_request", "not_found", "forbidden"), b
    assert queue_state(api) == before
    s, b = api.call("GET", "/v1/topics/quotes/messages", None, query={"group": "risk", "max": 10})
    assert s == 200 and b["messages"] == [], b  # nothing reached the parent either


def test_an_event_whose_route_and_parameters_disagree_is_not_routed_elsewhere(api, setup, fns):
    # the parameter's name is not the route's: nothing to rebuild from -> the raw path as before (404)
    s, b = answer(fns["produce"](gw_event("produce.json", PRODUCE, {"other": "quotes"}, "/v1/topics/quotes/sh/messages",
                                          setup["feed"], {"producer": "feed", "messages": [{"body": "x"}]}), Context()))
    assert s == 404 and b["error"]["code"] == "not_found", b
    # a route key of another function's route: that route does not exist here -> 404
    s, b = answer(fns["produce"](gw_event("produce.json", "GET /v1/topics/{topic}", {"topic": "quotes"},
                                          "/v1/topics/quotes", setup["feed"]), Context()))
    assert s == 404, b


def test_a_function_url_event_is_untouched(api, setup, fns):
    ev = sample("produce_function_url.json")
    assert ev["routeKey"] == "$default" and "%2F" in ev["rawPath"]
    s, b = answer(fns["produce"](ev, Context()))
    assert s == 200, b
