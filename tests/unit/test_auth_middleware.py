"""Auth as one middleware (issue 31 item 2): :func:`lakeq.api.http.make_app` authenticates the caller of
every route not marked :func:`~lakeq.api.http.public`, once per request, before the route runs, and
the route reads it as ``router.caller``. No store is touched: the admin key is checked against the
environment, and a missing key fails before any lookup."""
from __future__ import annotations

import copy
import json
import pathlib

import pytest
from aws_lambda_powertools.event_handler.router import APIGatewayHttpRouter

from bench.echo_app import echo_app
from lakeq.admin.auth import Principal
from lakeq.api import http

ROOT = pathlib.Path(__file__).resolve().parents[2]
MISSING = '{"error":{"code":"unauthorized","message":"missing Authorization: Bearer <key> header"}}'


def event(method: str, path: str, key: str | None = None, raw_query: str = "") -> dict:
    ev = copy.deepcopy(json.loads((ROOT / "events" / "health.json").read_text()))
    ev["routeKey"] = ev["requestContext"]["routeKey"] = f"{method} {path}"
    ev["rawPath"] = ev["requestContext"]["http"]["path"] = path
    ev["requestContext"]["http"]["method"] = method
    ev["rawQueryString"] = raw_query
    if key is not None:
        ev["headers"]["authorization"] = f"Bearer {key}"
    return ev


@pytest.fixture
def app(monkeypatch):
    monkeypatch.setenv("LAKEQ_ADMIN_KEY", "k-admin")
    monkeypatch.delenv("LAKEQ_ADMIN_KEY_SHA256", raising=False)
    calls = []
    real = http.authenticate

    def counted(header):
        calls.append(header)
        return real(header)
    monkeypatch.setattr(http, "authenticate", counted)
    router = http.Router()
    seen = []

    @router.get("/open")
    @http.public
    def open_():
        return http.json_response({"open": True})

    @router.get("/things/<name>")
    def thing(name: str):
        seen.append(router.caller)
        seen.append(router.caller)  # read twice: still one authentication
        return http.json_response({"name": name})

    a = http.make_app(router)
    a.calls, a.seen = calls, seen
    return a


def test_a_private_route_without_a_key_is_the_401_of_api_md_and_never_runs(app):
    out = app.resolve(event("GET", "/things/x"), None)
    assert (out["statusCode"], out["body"]) == (401, MISSING)
    assert app.seen == []


def test_the_caller_is_authenticated_once_and_read_from_the_context(app):
    out = app.resolve(event("GET", "/things/x", key="k-admin"), None)
    assert out["statusCode"] == 200 and json.loads(out["body"]) == {"name": "x"}
    assert app.seen == [Principal(admin=True)] * 2 and app.calls == ["Bearer k-admin"]
    assert http.CALLER not in app.context  # cleared after the request


def test_a_public_route_answers_without_a_key_and_a_route_nobody_has_is_a_404(app):
    out = app.resolve(event("GET", "/open"), None)
    assert out["statusCode"] == 200 and app.calls == []
    out = app.resolve(event("GET", "/nowhere"), None)
    assert out["statusCode"] == 404 and json.loads(out["body"])["error"]["code"] == "not_found"
    out = app.resolve(event("POST", "/open"), None)  # no such method: 404 too, not 401
    assert out["statusCode"] == 404 and app.calls == []


def test_api_md_order_401_then_400_for_a_repeated_query_parameter(app):
    out = app.resolve(event("GET", "/things/x", raw_query="a=1&a=2"), None)
    assert out["statusCode"] == 401
    out = app.resolve(event("GET", "/things/x", key="k-admin", raw_query="a=1&a=2"), None)
    assert out["statusCode"] == 400 and "'a' is given more than once" in out["body"] and app.seen == []
    out = app.resolve(event("GET", "/open", raw_query="a=1&a=2"), None)
    assert out["statusCode"] == 400


def test_make_app_refuses_a_router_whose_routes_it_would_not_know():
    with pytest.raises(TypeError):
        http.make_app(APIGatewayHttpRouter())


def test_a_router_in_two_resolvers_hands_each_request_its_own_caller(monkeypatch):
    """A router included in a second resolver (a function module loaded again, as the test harness
    does) points powertools' ``router.context`` at the newest resolver; a request resolved by the
    first must still find its caller (was: KeyError, a 500)."""
    monkeypatch.setenv("LAKEQ_ADMIN_KEY", "k-admin")
    monkeypatch.delenv("LAKEQ_ADMIN_KEY_SHA256", raising=False)
    router = http.Router()

    @router.get("/me")
    def me():
        return http.json_response({"admin": router.caller.admin})
    first, second = http.make_app(router), http.make_app(router)
    for app in (second, first, second):
        out = app.resolve(event("GET", "/me", key="k-admin"), None)
        assert (out["statusCode"], out["body"]) == (200, '{"admin":true}')


def _echo_app(monkeypatch):
    """An app whose route answers what it read of its request: path argument, caller, body, query;
    ``authenticate`` stands in for the key lookup (the caller is the key's text)."""
    monkeypatch.setattr(http, "authenticate", lambda header: Principal(admin=False, client=header.split()[-1]))
    return echo_app(http)


def _echo_event(i: int) -> dict:
    ev = event("POST", f"/things/n{i}", key=f"c{i}", raw_query=f"x={i}")
    ev["queryStringParameters"] = {"x": str(i)}
    ev["body"] = f"b{i}"
    return ev


def _echo_answer(i: int) -> dict:
    return {"name": f"n{i}", "caller": f"c{i}", "body": f"b{i}", "query": {"x": str(i)}}


def test_two_requests_resolved_at_once_by_one_app_each_read_their_own(monkeypatch):
    """Two threads inside one app's resolve at once, both past the authentication and neither in its
    route yet (flake35): each route reads its own path argument, caller, body and query. Was:
    powertools' event on ``BaseRouter`` (one per process) and the routing context on the app, so
    both read the request resolved last (test_settlement's concurrent settles: one offset settled
    twice, the other never) or found the caller cleared by the other's end (a 500)."""

    from tests.concurrency import FirstCallsMeet, in_threads
    app = _echo_app(monkeypatch)
    meet = FirstCallsMeet(http.authenticate)
    monkeypatch.setattr(http, "authenticate", meet)
    out: dict = {}

    def call(i: int) -> None:
        got = app.resolve(_echo_event(i), None)
        out[i] = (got["statusCode"], json.loads(got["body"]))
    in_threads(call, (1, 2))
    assert not meet.broken, "the two requests did not meet"
    assert out == {i: (200, _echo_answer(i)) for i in (1, 2)}, out


def test_two_first_requests_of_a_route_at_once_both_go_through_its_middleware(monkeypatch):
    """powertools builds a route's middleware stack on the route's first call, frame by frame; a
    second first call in another thread meanwhile (made certain here: the first thread pauses
    between two frames until the second has answered) wrapped the half-built stack again: the second
    request ran through two adapters (seen: a 500, ``MiddlewareFrame.__call__() got an unexpected
    keyword argument 'name'``). :func:`lakeq.api.http.make_app` builds every stack before the first
    request now (flake35)."""
    import threading

    from aws_lambda_powertools.event_handler import api_gateway as pt
    real = pt.MiddlewareFrame
    second_done, first_paused = threading.Event(), threading.Event()

    class PausingFrame(real):  # the first thread's second frame (the authentication's) waits
        def __init__(self, current_middleware, next_middleware):
            if threading.current_thread().name == "first" and current_middleware.__name__ == "authenticate_caller":
                first_paused.set()
                second_done.wait(timeout=60)
            super().__init__(current_middleware=current_middleware, next_middleware=next_middleware)
    monkeypatch.setattr(pt, "MiddlewareFrame", PausingFrame)
    app = _echo_app(monkeypatch)
    out: dict = {}

    def call(i: int) -> None:
        try:
            got = app.resolve(_echo_event(i), None)
            out[i] = (got["statusCode"], json.loads(got["body"]))
        finally:
            first_paused.set()  # (a first request that never paused: the second goes on at once)
    first = threading.Thread(target=call, args=(1,), name="first")
    first.start()
    first_paused.wait(timeout=60)
    call(2)
    second_done.set()
    first.join()
    call(3)
    assert out == {i: (200, _echo_answer(i)) for i in (1, 2, 3)}, out
