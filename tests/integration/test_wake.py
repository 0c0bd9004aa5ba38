"""WebSocket wake-ups on moto (lakeq.wake): the WakeFunction routes and the NotifyFunction, run as
their functions (IAM from template.yaml), with a fake or stubbed API Gateway management API."""
from __future__ import annotations

import json
from urllib.parse import quote

import boto3
import pytest
from botocore.stub import Stubber

from lakeq.wake import notify as wake_notify
from lakeq.wake import service as wake
from lakeq.store.models import WatcherModel
from tests.handlers import ADMIN, Context, load_function

T = "/v1/topics/quotes/messages"


@pytest.fixture
def ws(aws):
    return load_function("WakeFunction")


@pytest.fixture
def notify(aws, monkeypatch):
    fn = load_function("NotifyFunction")
    posts: list[tuple[str, dict]] = []
    outcomes: dict[str, str] = {}

    def post(conn, data):
        posts.append((conn, json.loads(data)))
        return outcomes.get(conn, "ok")

    monkeypatch.setattr(fn.module, "_post", post)
    fn.posts, fn.outcomes = posts, outcomes
    return fn


def event(route, conn="c1", body=None, headers=None):
    ev = {"requestContext": {"routeKey": route, "connectionId": conn, "eventType": "MESSAGE",
                             "stage": "ws", "apiId": "local", "requestId": "r1"}, "isBase64Encoded": False}
    if route == "$connect":
        ev["requestContext"]["eventType"] = "CONNECT"
        ev["headers"] = headers or {}
    if route == "$disconnect":
        ev["requestContext"]["eventType"] = "DISCONNECT"
    if body is not None:
        ev["body"] = body if isinstance(body, str) else json.dumps(body)
    return ev


def items():
    """The connection and watcher items (not the clients' connection counts, ``n|<client>``)."""
    return sorted((i.k, i.c) for i in WatcherModel.scan(consistent_read=True) if not i.k.startswith("n|"))


def open_connections(client="~admin"):
    return sorted(json.loads(WatcherModel.get(f"n|{client}", "-", consistent_read=True).conns or "{}"))


def call(ws, *a, **kw):
    r = ws(event(*a, **kw), Context())
    body = r.get("body")
    return r["statusCode"], (json.loads(body) if body else None), r.get("headers") or {}


def records(*pqs):
    return {"Records": [{"eventName": "INSERT", "eventSource": "aws:dynamodb",
                         "dynamodb": {"Keys": {"pq": {"S": pq}, "base": {"N": "0"}}}} for pq in pqs]}


def test_connect_watch_disconnect(setup, ws):
    s, _, h = call(ws, "$connect", headers={"Authorization": f"Bearer {setup['risk']}"})
    assert (s, h) == (200, {})
    s, b, _ = call(ws, "watch", body={"action": "watch", "topic": "quotes", "group": "risk"})
    assert (s, b) == (200, {"type": "watching", "topic": "quotes", "group": "risk"})
    assert call(ws, "watch", body={"action": "watch", "topic": "quotes", "group": "risk"})[0] == 200  # idempotent
    assert items() == [("c|c1", "-"), ("w|quotes", "c1")]
    assert WatcherModel.get("c|c1", "-").client == "risk"
    assert all(i.expires_at is not None for i in WatcherModel.scan())
    assert call(ws, "ping", body={"action": "ping"})[:2] == (200, {"type": "pong"})
    s, b, _ = call(ws, "$default", body={"action": "nope"})
    assert s == 400 and b["type"] == "error" and b["error"]["code"] == "bad_request"
    assert call(ws, "$disconnect")[0] == 200
    assert items() == []
    assert call(ws, "$disconnect")[0] == 200  # twice: nothing left, no error


def test_browser_form_of_the_key(setup, ws):
    s, _, h = call(ws, "$connect", headers={"sec-websocket-protocol": f"lakeq.v1, lakeq.key.{setup['risk']}"})
    assert (s, h) == (200, {"Sec-WebSocket-Protocol": "lakeq.v1"})


@pytest.mark.parametrize("headers,status", [({}, 401), ({"Authorization": "Bearer lq_nope"}, 401),
                                            ({"Authorization": "Basic x"}, 401)])
def test_connect_refused_stores_nothing(setup, ws, headers, status):
    s, b, _ = call(ws, "$connect", headers=headers)
    assert s == status and b["error"]["code"] == "unauthorized"
    assert items() == []


def test_watch_is_authorised_as_a_pull_and_a_refusal_stores_nothing(api, setup, ws):
    s, other = api.call("POST", "/v1/clients", {"name": "other", "role": "consumer", "topics": ["quotes/sh"]})
    assert s == 201
    assert call(ws, "$connect", headers={"Authorization": f"Bearer {other['api_key']}"})[0] == 200
    before = items()
    cases = [({"action": "watch", "topic": "quotes", "group": "other"}, 403),  # not granted quotes
             ({"action": "watch", "topic": "quotes", "group": "risk"}, 403),  # may not act for risk
             ({"action": "watch", "topic": "nope", "group": "other"}, 404),
             ({"action": "watch", "topic": "quotes/sh", "group": "nobody"}, 404),
             ({"action": "watch", "subscription": "0123"}, 404),
             ({"action": "watch", "topic": "a//b", "group": "other"}, 400),
             ("not json", 400)]
    for body, status in cases:
        s, b, _ = call(ws, "watch", body=body)
        assert (s, b["type"], b["status"]) == (status, "error", status), body
        # the same refusal as a pull of that topic as that group would get
        if isinstance(body, dict) and "topic" in body and status != 400:
            path = f"/v1/topics/{quote(body['topic'], safe='')}/messages"
            assert api.call("GET", path, query={"group": body["group"]}, key=other["api_key"])[0] == status, body
    assert items() == before == [("c|c1", "-")]
    assert call(ws, "watch", body={"action": "watch", "topic": "quotes/sh", "group": "other"})[0] == 200


def test_watch_needs_a_live_connection(setup, ws):
    s, b, _ = call(ws, "watch", conn="never", body={"action": "watch", "topic": "quotes", "group": "risk"})
    assert (s, b["error"]["code"]) == (410, "gone")
    assert items() == []


def test_watches_per_connection_are_bounded(setup, ws, monkeypatch):
    monkeypatch.setattr(wake.plan, "MAX_WATCHES", 1)
    call(ws, "$connect", headers={"Authorization": f"Bearer {ADMIN}"})
    assert call(ws, "watch", body={"action": "watch", "topic": "quotes", "group": "risk"})[0] == 200
    assert call(ws, "watch", body={"action": "watch", "topic": "quotes", "group": "risk"})[0] == 200
    s, b, _ = call(ws, "watch", body={"action": "watch", "topic": "quotes/sh", "group": "risk"})
    assert s == 400 and "at most 1" in b["error"]["message"]
    assert items() == [("c|c1", "-"), ("w|quotes", "c1")]


def test_notify_coalesces_one_wake_per_connection(setup, ws, notify):
    for conn, topic in [("c1", "quotes"), ("c1", "quotes/sh"), ("c2", "quotes"), ("c3", "quotes/sh")]:
        if ("c|" + conn, "-") not in items():
            call(ws, "$connect", conn=conn, headers={"Authorization": f"Bearer {ADMIN}"})
        assert call(ws, "watch", conn=conn, body={"action": "watch", "topic": topic, "group": "risk"})[0] == 200
    # a batch: many appends to quotes (two incarnations, several queues), one to quotes/sh, others
    out = notify(records("quotes#0", "quotes#1", "quotes#0", "quotes!2#3", "quotes/sh#1", "elsewhere#0"), Context())
    assert out == {"keys": 3, "posted": 3, "gone": 0, "failed": 0}
    got = {c: m for c, m in notify.posts}
    assert len(notify.posts) == 3
    assert got == {"c1": {"type": "wake", "topics": ["quotes", "quotes/sh"], "subscriptions": []},
                   "c2": {"type": "wake", "topics": ["quotes"], "subscriptions": []},
                   "c3": {"type": "wake", "topics": ["quotes/sh"], "subscriptions": []}}
    notify.posts.clear()
    assert notify(records("elsewhere#0"), Context())["posted"] == 0 and notify.posts == []


def test_gone_connection_loses_its_watchers(setup, ws, notify):
    for conn in ("c1", "c2"):
        call(ws, "$connect", conn=conn, headers={"Authorization": f"Bearer {ADMIN}"})
        call(ws, "watch", conn=conn, body={"action": "watch", "topic": "quotes", "group": "risk"})
    notify.outcomes["c1"] = "gone"
    notify.outcomes["c2"] = "error"  # a failed post: counted, the batch does not fail
    assert notify(records("quotes#0"), Context()) == {"keys": 1, "posted": 0, "gone": 1, "failed": 1}
    assert ("w|quotes", "c1") not in items() and ("w|quotes", "c2") in items()


def test_a_lost_wake_up_loses_no_message(setup, api, ws, notify):
    """Wake-ups are hints: a post that fails changes nothing stored; the next pull delivers."""
    call(ws, "$connect", headers={"Authorization": f"Bearer {setup['risk']}"})
    call(ws, "watch", body={"action": "watch", "topic": "quotes", "group": "risk"})
    assert api.call("POST", T, {"producer": "feed", "messages": [{"body": "x"}]}, key=setup["feed"])[0] == 200
    notify.outcomes["c1"] = "error"
    assert notify(records("quotes#0"), Context())["failed"] == 1
    s, b = api.call("GET", T, query={"group": "risk", "wait_ms": 0}, key=setup["risk"])
    assert s == 200 and [m["body"] for m in b["messages"]] == ["x"]


def test_management_poster_maps_gone_and_errors():
    c = boto3.client("apigatewaymanagementapi", endpoint_url="https://x.execute-api.us-east-1.amazonaws.com/ws",
                     region_name="us-east-1")
    post = wake_notify.management_poster(c)
    with Stubber(c) as st:
        st.add_response("post_to_connection", {}, {"ConnectionId": "a", "Data": b"d"})
        st.add_client_error("post_to_connection", service_error_code="GoneException", http_status_code=410)
        st.add_client_error("post_to_connection", service_error_code="LimitExceededException", http_status_code=429)
        assert [post("a", b"d"), post("b", b"d"), post("c", b"d")] == ["ok", "gone", "error"]


def test_only_the_notifier_may_post_and_only_to_its_stage(aws):
    """Least privilege (template.yaml, checked by infra/local/aws_rules.py): NotifyFunction may
    execute-api:ManageConnections POST on WakeApi's stage; WakeFunction may not post at all."""
    from infra.local import interceptor

    def poster(stage):
        c = boto3.client("apigatewaymanagementapi", region_name="us-east-1",
                         endpoint_url=f"https://local.execute-api.us-east-1.amazonaws.com/{stage}")
        st = Stubber(c)
        st.add_response("post_to_connection", {}, {"ConnectionId": "a", "Data": b"d"})
        st.activate()
        return wake_notify.management_poster(c)

    with interceptor.acting_as("NotifyFunction"):
        assert poster("ws")("a", b"d") == "ok"
        assert poster("other")("a", b"d") == "error"  # another stage: denied
    with interceptor.acting_as("WakeFunction"):
        assert poster("ws")("a", b"d") == "error"
    assert [(fn, p.action) for fn, p in aws["_rules"].denied] == [
        ("NotifyFunction", "execute-api:ManageConnections"), ("WakeFunction", "execute-api:ManageConnections")]


def test_watch_a_subscription(api, setup, ws, notify):
    s, sub = api.call("POST", "/v1/subscriptions", {"subscriber": "risk", "topic": "quotes",
                                                    "conditions": [{"field": "type", "values": ["A"]}]},
                      key=setup["risk"])
    assert s == 201, sub
    call(ws, "$connect", conn="c1", headers={"Authorization": f"Bearer {setup['risk']}"})
    s, b, _ = call(ws, "watch", conn="c1", body={"action": "watch", "subscription": sub["id"]})
    assert (s, b) == (200, {"type": "watching", "subscription": sub["id"]})
    # another consumer's key may not watch risk's subscription (as its pull would be refused)
    s, other = api.call("POST", "/v1/clients", {"name": "other", "role": "consumer", "topics": ["quotes"]})
    call(ws, "$connect", conn="c2", headers={"Authorization": f"Bearer {other['api_key']}"})
    s, b, _ = call(ws, "watch", conn="c2", body={"action": "watch", "subscription": sub["id"]})
    assert (s, b["error"]["code"]) == (403, "forbidden")
    assert api.call("GET", f"/v1/subscriptions/{sub['id']}/messages", key=other["api_key"])[0] == 403
    assert ("w|~" + sub["id"], "c2") not in items()
    # the list's segments wake it; the topic's own do not (c1 watches only the list)
    assert notify(records("quotes#0"), Context())["posted"] == 0
    assert notify(records(f"~{sub['id']}#0"), Context())["posted"] == 1
    assert notify.posts == [("c1", {"type": "wake", "topics": [], "subscriptions": [sub["id"]]})]


def test_connections_per_client_are_bounded(api, setup, ws, monkeypatch, clock):
    """Issue 30 (8): a key could open any number of connections (each one more post per wake-up).
    At most MAX_CONNECTIONS per client (all its keys together): a $connect past it is refused with
    409 too_many_connections (API Gateway then fails the handshake) and stores nothing; another
    client is not affected; a $disconnect frees a place, and so does the expiry of a connection
    that ended without one."""
    monkeypatch.setattr(wake.plan, "MAX_CONNECTIONS", 2)
    risk = {"Authorization": f"Bearer {setup['risk']}"}
    s, k2 = api.call("POST", "/v1/clients/risk/keys")
    assert s == 201
    assert call(ws, "$connect", conn="c1", headers=risk)[0] == 200
    assert call(ws, "$connect", conn="c2", headers={"Authorization": f"Bearer {k2['api_key']}"})[0] == 200
    before = items()
    s, b, _ = call(ws, "$connect", conn="c3", headers=risk)
    assert s == 409 and b["error"]["code"] == "too_many_connections", b
    assert items() == before and open_connections("risk") == ["c1", "c2"]
    assert call(ws, "$connect", conn="c1", headers=risk)[0] == 200  # the same connection again: no new place
    assert call(ws, "$connect", conn="a1", headers={"Authorization": f"Bearer {ADMIN}"})[0] == 200
    assert call(ws, "$disconnect", conn="c1")[0] == 200
    assert open_connections("risk") == ["c2"]
    assert call(ws, "$connect", conn="c3", headers=risk)[0] == 200
    assert call(ws, "$connect", conn="c4", headers=risk)[0] == 409
    clock.t += (wake.plan.ITEM_TTL_S + 1) * 1000  # c2, c3 ended without $disconnect: their entries expire
    assert call(ws, "$connect", conn="c4", headers=risk)[0] == 200
    assert open_connections("risk") == ["c4"]


def test_notify_posts_concurrently_within_a_deadline(setup, ws, monkeypatch):
    """Issue 30 (8): notify posted to one connection after another, so one slow connection delayed
    every other. Now a bounded pool posts at once (here 4 posts wait for each other at a barrier: one
    after another, the barrier would break), never more than the pool; a post that hangs is cut by the
    batch's deadline (counted failed) while the others are posted; a gone one loses its watchers."""
    import threading

    conns = [f"c{i}" for i in range(8)]
    for conn in conns + ["slow", "dead"]:
        call(ws, "$connect", conn=conn, headers={"Authorization": f"Bearer {ADMIN}"})
        assert call(ws, "watch", conn=conn, body={"action": "watch", "topic": "quotes", "group": "risk"})[0] == 200
    barrier = threading.Barrier(4, timeout=30)
    release = threading.Event()
    lock = threading.Lock()
    state = {"in": 0, "max": 0}

    def post(conn, data):
        if conn == "slow":
            release.wait(60)
            return "ok"
        if conn == "dead":
            return "gone"
        with lock:
            state["in"] += 1
            state["max"] = max(state["max"], state["in"])
        try:
            barrier.wait()
            return "ok"
        except threading.BrokenBarrierError:
            return "error"
        finally:
            with lock:
                state["in"] -= 1
    try:
        out = wake_notify.notify(records("quotes#0")["Records"], post, deadline_s=10.0, workers=5)
    finally:
        release.set()
    assert out.posted == 8 and out.gone == ["dead"] and out.failed == ["slow"], out
    assert 4 <= state["max"] <= 5  # 4 at the barrier together; never more than the pool (5)
    assert ("w|quotes", "dead") not in items() and ("w|quotes", "slow") in items()


def test_notify_pool_posts_as_the_notifier(setup, ws, aws):
    """The notifier's posts run in its pool's threads; each must still be made as the function (the
    local stack's IAM check, infra/local/aws_rules.py, reads the caller from a context variable a
    new thread does not inherit). Before, a pool thread posted as nobody: not IAM-checked, so a
    post the notifier's role does not allow (another stage) went through."""
    from infra.local import interceptor

    for conn in ("c1", "c2"):
        call(ws, "$connect", conn=conn, headers={"Authorization": f"Bearer {ADMIN}"})
        assert call(ws, "watch", conn=conn, body={"action": "watch", "topic": "quotes", "group": "risk"})[0] == 200
    seen = []

    def post(conn, data):
        seen.append(interceptor.current_function())
        return "ok"

    with interceptor.acting_as("NotifyFunction"):
        assert wake_notify.notify(records("quotes#0")["Records"], post, workers=2).posted == 2
    assert seen == ["NotifyFunction", "NotifyFunction"]

    c = boto3.client("apigatewaymanagementapi", region_name="us-east-1",
                     endpoint_url="https://local.execute-api.us-east-1.amazonaws.com/other")
    st = Stubber(c)
    for _ in range(2):
        st.add_response("post_to_connection", {}, None)
    st.activate()
    with interceptor.acting_as("NotifyFunction"):  # its role may post on WakeApi's stage "ws" only
        out = wake_notify.notify(records("quotes#0")["Records"], wake_notify.management_poster(c), workers=2)
    assert out.posted == 0 and sorted(out.failed) == ["c1", "c2"], out
    assert [(fn, p.action) for fn, p in aws["_rules"].denied] == [("NotifyFunction", "execute-api:ManageConnections")] * 2
