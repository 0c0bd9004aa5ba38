"""Issue 30.1, 30.3, 30.5 on moto, through the routes and the deliverer: a hostile tenant's push
settings. An internal address (literal, or a name resolving to one) and settings HTTP cannot carry
are refused at registration with 400 and nothing stored, on both push routes; a name that resolves
inside only at send time is never connected to and the attempt fails without a status; an answer
that is cut (over 64 KiB) or not the documented outcome is a failed attempt, retried."""
from __future__ import annotations

import json
import socket
import time

import pytest

from lakeq.push import delivery as push
from lakeq.push import transport
from lakeq.store.subscriptions import SubscriptionModel
from tests.integration.test_push import URL, fan_out, produce, subscribe
from tests.unit.test_push_net import Server

# moto: these tests read DynamoDB Streams (the stream pump, the fan-out, the archiver), which the memory store has not
pytestmark = [pytest.mark.moto, pytest.mark.usefixtures("fresh_matcher")]


def _snapshot():
    from lakeq.store.models import ClientModel, WatcherModel
    return sorted(json.dumps(i.attribute_values, default=str, sort_keys=True)
                  for m in (SubscriptionModel, ClientModel, WatcherModel) for i in m.scan())


def resolving(monkeypatch, names: dict[str, str]):
    """socket.getaddrinfo answering ``names`` (host -> address), the real lookup otherwise."""
    real = socket.getaddrinfo

    def fake(host, port, *a, **kw):
        if host in names:
            fam = socket.AF_INET6 if ":" in names[host] else socket.AF_INET
            return [(fam, socket.SOCK_STREAM, 6, "", (names[host], port))]
        return real(host, port, *a, **kw)
    monkeypatch.setattr(socket, "getaddrinfo", fake)


BAD = [
    # 30.1: internal addresses, literal or by name (resolving() below maps the names)
    {"url": "https://169.254.169.254/latest/meta-data/"}, {"url": "https://127.0.0.1:9001/2018-06-01/runtime"},
    {"url": "https://[::1]/"}, {"url": "https://10.0.0.5/"}, {"url": "https://0.0.0.0/"},
    {"url": "https://[::ffff:169.254.169.254]/"}, {"url": "https://2130706433/"}, {"url": "https://0x7f.1/"},
    {"url": "https://017700000001/"}, {"url": "https://127.1/"}, {"url": "https://100.64.0.1/"},
    {"url": "https://metadata.attacker.example/"}, {"url": "https://v6.attacker.example/"},
    {"url": "https://localhost/"},
    # 30.3: what HTTP cannot carry
    {"url": "https://hooks.example.com/ünï"}, {"url": "https://hooks.example.com/?q=ü"},
    {"url": "https://hooks.example.com/%zz"}, {"url": "https://hooks.example.com/a\x7f"},
    {"url": "https://ex ample.com/"}, {"url": "https://exa_mple!.com/"},
    {"url": URL, "headers": {"X Team": "a"}}, {"url": URL, "headers": {"X-Tëam": "a"}},
    {"url": URL, "headers": {"X-Team:": "a"}}, {"url": URL, "headers": {"": "a"}},
    {"url": URL, "headers": {"X-A": "a\rb"}}, {"url": URL, "headers": {"X-A": "a\nb"}},
    {"url": URL, "headers": {"X-A": "a\x00b"}}, {"url": URL, "headers": {"X-A": "a\x1bb"}},
    {"url": URL, "headers": {"X-A": "a\x7f"}}, {"url": URL, "headers": {"X-A": "€"}},
    {"url": URL, "headers": {"X-A": " padded "}}, {"url": URL, "headers": {"X-A": "1", "x-a": "2"}},
    {"url": URL, "headers": {"webhook-id": "x"}}, {"url": URL, "headers": {"Webhook-Signature": "v1,x"}},
    {"url": URL, "headers": {"webhook-timestamp": "1"}}, {"url": URL, "headers": {"Transfer-Encoding": "chunked"}},
    {"url": URL, "headers": {"Connection": "close"}}, {"url": URL, "headers": {"Accept-Encoding": "gzip"}},
    {"url": URL, "headers": {"Content-Encoding": "gzip"}}, {"url": URL, "headers": {"X-Lakeq-Replay": "1"}},
]


@pytest.mark.parametrize("route", ["subscription", "group"])
@pytest.mark.parametrize("body", BAD)
def test_unsendable_or_internal_settings_are_400_and_store_nothing(api, setup, body, route, monkeypatch):
    monkeypatch.delenv(push.ENV_LOOPBACK, raising=False)
    resolving(monkeypatch, {"metadata.attacker.example": "169.254.169.254", "v6.attacker.example": "fd00::1"})
    if route == "subscription":
        path = f"/v1/subscriptions/{subscribe(api, setup['risk'])}/push"
    else:
        path, body = "/v1/groups/risk/push", {**body, "topic": "quotes"}
    before = _snapshot()
    s, b = api.call("PUT", path, body, key=setup["risk"])
    assert s == 400 and b["error"]["code"] == "bad_request" and b["error"]["message"], b
    assert _snapshot() == before


def test_idna_hosts_and_encoded_paths_are_accepted(api, setup):
    sid = subscribe(api, setup["risk"])
    for url in ("https://bücher.example/h", "https://hooks.example.com/%C3%BC?q=a%20b&r=1"):
        s, b = api.call("PUT", f"/v1/subscriptions/{sid}/push", {"url": url, "headers": {"X-Tab": "a\tb é"}},
                        key=setup["risk"])
        assert s in (200, 201) and b["url"] == url, b


def test_a_name_resolving_inside_at_send_time_is_never_connected_to(api, setup, aws, clock, monkeypatch):
    """Registered while the name did not resolve (accepted: every send checks again); at send time
    it resolves to a loopback address where something listens: no connection is made, and the
    attempt is a failed one with no status (the same as an address that never answers)."""
    monkeypatch.delenv(push.ENV_LOOPBACK, raising=False)
    srv = Server(lambda c, _r: c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"))
    try:
        sid = subscribe(api, setup["risk"])
        url = f"https://rebind.attacker.example:{srv.port}/x"
        assert api.call("PUT", f"/v1/subscriptions/{sid}/push", {"url": url}, key=setup["risk"])[0] == 201
        produce(api, setup["feed"], ["a"])
        fan_out(aws)
        resolving(monkeypatch, {"rebind.attacker.example": "127.0.0.1"})
        out = push.deliver(sid)
        assert out.batches == 1 and out.failed == 1 and out.delivered == 0
        state = api.call("GET", f"/v1/subscriptions/{sid}/push", key=setup["risk"])[1]["state"]
        assert state["last_status"] is None and state["failures"] == 1 and state["next_attempt_at"] > clock.t
        time.sleep(0.3)
        assert srv.requests == [] and srv.connections == 0
    finally:
        srv.close()


def _answering(body: bytes):
    return Server(lambda c, _r: c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body))


@pytest.mark.parametrize("answer", ["cut", "text", "array"])
def test_an_answer_cut_or_not_an_outcome_is_retried_not_accepted(api, setup, aws, clock, monkeypatch, answer):
    """80 messages, all released by a 2xx answer padded over 64 KiB (the poster reads one byte more
    than the bound: cut), or a 2xx 'OK', or a JSON array: a failed attempt, every message retried
    later (deliveries 2), none acknowledged."""
    monkeypatch.setenv(push.ENV_LOOPBACK, "1")
    n = 80
    if answer == "cut":
        body = json.dumps({"release": list(range(n))}).encode()
        body += b" " * (push.MAX_RESPONSE_BYTES + 100 - len(body))
    else:
        body = b"OK" if answer == "text" else b"[]"
    srv = _answering(body)
    try:
        sid = subscribe(api, setup["risk"])
        s, _ = api.call("PUT", f"/v1/subscriptions/{sid}/push",
                        {"url": f"http://127.0.0.1:{srv.port}/x", "batch_size": n,
                         "retry": {"max_attempts": 5, "backoff_base_ms": 100, "backoff_cap_ms": 100}}, key=setup["risk"])
        assert s == 201
        produce(api, setup["feed"], [f"m{i}" for i in range(n)])
        fan_out(aws)
        out = push.deliver(sid)
        assert out.batches == 1 and out.delivered == 0 and out.failed == 1, out
        state = api.call("GET", f"/v1/subscriptions/{sid}/push", key=setup["risk"])[1]["state"]
        assert state["last_status"] == 200 and state["failures"] == 1 and state["delivered"] == 0
        clock.t = state["next_attempt_at"] + 1
        srv.answer = lambda c, _r: c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
        out = push.deliver(sid)
        assert out.delivered == n
        last = json.loads(srv.requests[-1].partition(b"\r\n\r\n")[2])
        assert len(last["messages"]) == n and {m["deliveries"] for m in last["messages"]} == {2}
    finally:
        srv.close()
