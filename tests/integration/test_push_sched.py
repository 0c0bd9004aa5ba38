"""Push endpoints shared by tenants (issue 30 items 4, 6, 8, 9): a concurrent first registration
has one winner, a subscription with an active endpoint refuses pulls, replaced settings apply from
the next batch, dead-letter topics are granted and loop-free (at registration and at dead-letter
time), endpoints per client are bounded and served fairly with per-run deadlines."""
from __future__ import annotations

import dataclasses
import json

import pytest

from lakeq.push import delivery as push
from lakeq.store.models import ClientModel
from lakeq.store.push import GroupPushRepo, PushRepo
from lakeq.store.subscriptions import SubscriptionModel
from tests.handlers import ADMIN
from tests.integration.test_push import URL, Poster, fan_out, produce, subscribe

# moto: these tests read DynamoDB Streams (the stream pump, the fan-out, the archiver), which the memory store has not
pytestmark = [pytest.mark.moto, pytest.mark.usefixtures("fresh_matcher")]
G = "/v1/groups/risk/push"


# --- item 8: two concurrent first registrations ------------------------------------------------------
def _stale_first_read(monkeypatch, repo):
    """The second request's first read of the endpoint's item is the one it made before the first
    request wrote (no endpoint yet): its write comes after the other's."""
    real = repo.get.__func__
    done = []

    def get(cls, name):
        item = real(cls, name)
        if not done and item is not None:
            done.append(1)
            stale = dict.fromkeys(("push", "push_secrets", "push_paused", "push_state"))
            if dataclasses.is_dataclass(item):  # a group's record (frozen)
                return dataclasses.replace(item, **stale)
            for k, v in stale.items():
                setattr(item, k, v)
        return item
    monkeypatch.setattr(repo, "get", classmethod(get))


@pytest.mark.parametrize("first", ["risk", "admin"])
def test_concurrent_first_registrations_of_a_subscription_endpoint_one_secret(api, setup, monkeypatch, first):
    sid = subscribe(api, setup["risk"])
    keys = {"risk": setup["risk"], "admin": ADMIN}
    second = "admin" if first == "risk" else "risk"
    path = f"/v1/subscriptions/{sid}/push"
    won_status, won = api.call("PUT", path, {"url": URL + "/a"}, key=keys[first])
    _stale_first_read(monkeypatch, PushRepo)
    s, b = api.call("PUT", path, {"url": URL + "/b"}, key=keys[second])
    assert won_status == 201 and won["secret"].startswith("whsec_")
    assert s == 409 and b["error"]["code"] == "push_registered" and "whsec_" not in json.dumps(b)
    stored = SubscriptionModel.get(sid)
    assert [x["secret"] for x in json.loads(stored.push_secrets)] == [won["secret"]]
    assert json.loads(stored.push)["url"] == URL + "/a"


@pytest.mark.parametrize("first", ["risk", "admin"])
def test_concurrent_first_registrations_of_a_group_endpoint_one_secret(api, setup, monkeypatch, first):
    keys = {"risk": setup["risk"], "admin": ADMIN}
    second = "admin" if first == "risk" else "risk"
    won_status, won = api.call("PUT", G, {"url": URL + "/a", "topic": "quotes"}, key=keys[first])
    _stale_first_read(monkeypatch, GroupPushRepo)
    s, b = api.call("PUT", G, {"url": URL + "/b", "topic": "quotes"}, key=keys[second])
    assert won_status == 201 and won["secret"].startswith("whsec_")
    assert s == 409 and b["error"]["code"] == "push_registered" and "whsec_" not in json.dumps(b)
    stored = ClientModel.get("risk")
    assert [x["secret"] for x in json.loads(stored.push_secrets)] == [won["secret"]]
    assert json.loads(stored.push)["url"] == URL + "/a"


# --- item 9: a puller beside an active endpoint; replaced settings ---------------------------------
def test_a_subscription_with_an_active_endpoint_refuses_pulls_until_paused(api, setup, aws):
    sid = subscribe(api, setup["risk"])
    path = f"/v1/subscriptions/{sid}/push"
    assert api.call("PUT", path, {"url": URL}, key=setup["risk"])[0] == 201
    produce(api, setup["feed"], ["a", "b"])
    fan_out(aws)
    s, b = api.call("GET", f"/v1/subscriptions/{sid}/messages", key=setup["risk"])
    assert s == 409 and b["error"]["code"] == "push_active", b
    assert api.call("POST", path + "/pause", key=setup["risk"])[0] == 200
    s, b = api.call("GET", f"/v1/subscriptions/{sid}/messages", key=setup["risk"])
    assert s == 200 and [m["body"] for m in b["messages"]] == ["a", "b"]
    assert api.call("DELETE", path, key=setup["risk"])[0] == 204  # no endpoint: pulls as ever
    assert api.call("GET", f"/v1/subscriptions/{sid}/messages", key=setup["risk"])[0] == 200


@pytest.mark.parametrize("kind", ["group", "subscription"])
def test_replaced_settings_apply_from_the_next_batch_of_a_run(api, setup, aws, kind):
    if kind == "group":
        path = G
        assert api.call("PUT", G, {"url": URL + "/a", "topic": "quotes", "batch_size": 1}, key=setup["risk"])[0] == 201
        produce(api, setup["feed"], ["m0", "m1", "m2"])  # one key: one queue, so the run takes them in turn
        run = lambda p: push.deliver_group("risk", p)  # noqa: E731
        extra = {"topic": "quotes"}
    else:
        sid = subscribe(api, setup["risk"])
        path = f"/v1/subscriptions/{sid}/push"
        assert api.call("PUT", path, {"url": URL + "/a", "batch_size": 1}, key=setup["risk"])[0] == 201
        produce(api, setup["feed"], ["m0", "m1", "m2"])
        fan_out(aws)
        run = lambda p: push.deliver(sid, p)  # noqa: E731
        extra = {}
    replaced = []

    class Replacing(Poster):
        def __call__(self, url, headers, body, timeout_s):
            if not replaced:  # the settings are replaced while the first batch is in flight
                replaced.append(api.call("PUT", path, {"url": URL + "/b", "batch_size": 2, "timeout_ms": 3000,
                                                       "headers": {"X-V": "2"}, **extra}, key=setup["risk"]))
            return super().__call__(url, headers, body, timeout_s)
    p = Replacing()
    out = run(p)
    assert replaced[0][0] == 200 and out.delivered == 3
    assert [c[0] for c in p.calls] == [URL + "/a", URL + "/b"]
    assert p.bodies() == [["m0"], ["m1", "m2"]]
    assert "X-V" not in p.calls[0][1] and p.calls[1][1]["X-V"] == "2" and p.calls[1][3] == 3.0


# --- item 6: fair scheduling, run deadlines, endpoints per client --------------------------------------
def _hostile_and_healthy(api, setup, aws, n):
    """``n`` subscriptions of ``risk`` whose endpoints never answer, one of ``calm`` that answers."""
    s, calm = api.call("POST", "/v1/clients", {"name": "calm", "role": "consumer", "topics": ["quotes"]})
    assert s == 201
    hostile = []
    for i in range(n):
        sid = subscribe(api, setup["risk"])
        assert api.call("PUT", f"/v1/subscriptions/{sid}/push", {"url": f"{URL}/dead{i}"}, key=setup["risk"])[0] == 201
        hostile.append(sid)
    s, sub = api.call("POST", "/v1/subscriptions", {"subscriber": "calm", "topic": "quotes"}, key=calm["api_key"])
    assert s == 201
    assert api.call("PUT", f"/v1/subscriptions/{sub['id']}/push", {"url": URL + "/ok"}, key=calm["api_key"])[0] == 201
    produce(api, setup["feed"], ["m"])
    fan_out(aws)
    return hostile, sub["id"]


class Dead(Poster):
    """Every endpoint but ``/ok`` times out."""

    def __call__(self, url, headers, body, timeout_s):
        self.calls.append((url, headers, body, timeout_s))
        return (200, b"") if url.endswith("/ok") else (None, b"")


def test_the_healthy_client_is_started_before_the_hostile_clients_second_endpoint(api, setup, aws):
    hostile, healthy = _hostile_and_healthy(api, setup, aws, 5)
    p = Dead()
    out = push.deliver_all(hostile + [healthy], p, workers=1)  # one worker: the schedule's order is the calls'
    assert [c[0] for c in p.calls][:2] == [f"{URL}/dead0", URL + "/ok"]
    assert out[healthy].delivered == 1 and sum(out[h].failed for h in hostile) == 5


def test_a_run_starts_no_request_it_could_not_finish_before_the_function_ends(api, setup, aws):
    hostile, healthy = _hostile_and_healthy(api, setup, aws, 2)
    p = Dead()
    # what the function has left is less than the largest timeout_ms and the margin: nothing starts
    left = push.contract.TIMEOUT_MAX + push.RUN_MARGIN_MS - 1
    out = push.deliver_all(hostile + [healthy], p, remaining_ms=left)
    assert p.calls == [] and sum(d.skipped for d in out.values()) == 3
    out = push.deliver_all(hostile + [healthy], p, remaining_ms=left + 60_000)
    assert len(p.calls) == 3 and sum(d.skipped for d in out.values()) == 0


def test_the_push_function_passes_its_remaining_time(api, setup, aws, monkeypatch):
    from tests.handlers import Context, load_function
    seen = []
    monkeypatch.setattr(push, "deliver_all", lambda *a, **kw: seen.append(kw.get("remaining_ms")) or {})
    load_function("PushFunction")({}, Context())
    assert seen == [Context.get_remaining_time_in_millis()]


def test_endpoints_per_client_are_bounded(api, setup, monkeypatch):
    from lakeq.push import service
    monkeypatch.setattr(service, "MAX_ENDPOINTS_PER_CLIENT", 2)
    sids = [subscribe(api, setup["risk"]) for _ in range(3)]
    for sid in sids[:2]:
        assert api.call("PUT", f"/v1/subscriptions/{sid}/push", {"url": URL}, key=setup["risk"])[0] == 201
    s, b = api.call("PUT", f"/v1/subscriptions/{sids[2]}/push", {"url": URL}, key=setup["risk"])
    assert s == 409 and b["error"]["code"] == "too_many_push_endpoints", b
    assert SubscriptionModel.get(sids[2]).push is None
    # the group's own endpoint counts for the same client; replacing one does not add one
    s, b = api.call("PUT", G, {"url": URL, "topic": "quotes"}, key=setup["risk"])
    assert s == 409 and b["error"]["code"] == "too_many_push_endpoints" and ClientModel.get("risk").push is None
    assert api.call("PUT", f"/v1/subscriptions/{sids[0]}/push", {"url": URL + "/v2"}, key=setup["risk"])[0] == 200
    assert api.call("DELETE", f"/v1/subscriptions/{sids[0]}/push", key=setup["risk"])[0] == 204
    assert api.call("PUT", G, {"url": URL, "topic": "quotes"}, key=setup["risk"])[0] == 201
    assert ClientModel.get("risk").push_endpoints == 2


def test_every_way_an_endpoint_ends_gives_its_place_back(api, setup, monkeypatch):
    """The count is a counter on the client item: deleting an endpoint, deleting a subscription
    that has one and deleting the group's own endpoint each free a place; deleting a subscription
    without one frees none."""
    from lakeq.push import service
    monkeypatch.setattr(service, "MAX_ENDPOINTS_PER_CLIENT", 2)
    a, b, c, plain = (subscribe(api, setup["risk"]) for _ in range(4))

    def put(path, body=None):
        return api.call("PUT", path, body or {"url": URL}, key=setup["risk"])[0]

    def count():
        return int(ClientModel.get("risk").push_endpoints or 0)

    assert put(f"/v1/subscriptions/{a}/push") == 201 and put(G, {"url": URL, "topic": "quotes"}) == 201
    assert count() == 2 and put(f"/v1/subscriptions/{b}/push") == 409
    assert api.call("DELETE", f"/v1/subscriptions/{plain}", key=setup["risk"])[0] == 204
    assert count() == 2 and put(f"/v1/subscriptions/{b}/push") == 409
    assert api.call("DELETE", f"/v1/subscriptions/{a}", key=setup["risk"])[0] == 204  # it had an endpoint
    assert count() == 1 and put(f"/v1/subscriptions/{b}/push") == 201
    assert api.call("DELETE", G, key=setup["risk"])[0] == 204
    assert count() == 1 and put(f"/v1/subscriptions/{c}/push") == 201
    assert count() == 2 and put(G, {"url": URL, "topic": "quotes"}) == 409


# --- item 4: dead-letter topics are granted and loop-free ------------------------------------------
def _subs():
    return sorted(s.id for s in SubscriptionModel.scan() if s.id != "~version")


@pytest.mark.parametrize("dlt, status", [("dlq", 403), ("quotes", 400), ("quotes/sh", 400)])
def test_a_consumer_key_names_no_ungranted_or_looping_dead_letter_topic(api, setup, dlq, dlt, status):
    before = _subs()
    s, b = api.call("POST", "/v1/subscriptions", {"subscriber": "risk", "topic": "quotes",
                                                  "dead_letter_topic": dlt}, key=setup["risk"])
    assert s == status, b
    assert _subs() == before


def test_the_admin_names_any_but_a_loop_and_a_consumer_its_granted_one(api, setup, dlq):
    s, b = api.call("POST", "/v1/subscriptions", {"subscriber": "risk", "topic": "quotes", "dead_letter_topic": "dlq"})
    assert s == 201 and b["dead_letter_topic"] == "dlq"
    s, b = api.call("POST", "/v1/subscriptions", {"subscriber": "risk", "topic": "quotes",
                                                  "dead_letter_topic": "quotes"})
    assert s == 400, b
    # the admin grants risk's dead letters to dlq (PATCH /v1/clients): risk's key may name it
    assert api.call("PATCH", "/v1/clients/risk", {"dead_letter_topic": "dlq"})[0] == 200
    s, b = api.call("POST", "/v1/subscriptions", {"subscriber": "risk", "topic": "quotes", "dead_letter_topic": "dlq"},
                    key=setup["risk"])
    assert s == 201 and b["dead_letter_topic"] == "dlq"


def test_a_group_dead_letter_topic_may_not_be_one_it_consumes(api, setup):
    s, b = api.call("PATCH", "/v1/clients/risk", {"dead_letter_topic": "quotes/sh"})  # risk consumes quotes/*
    assert s == 400, b
    assert ClientModel.get("risk").dead_letter_topic is None
    s, b = api.call("POST", "/v1/clients", {"name": "loopy", "role": "consumer", "topics": ["quotes"],
                                            "dead_letter_topic": "quotes"})
    assert s == 400 and ClientModel.count("loopy") == 0


def _dlq_count(aws):
    from lakeq.store.models import SegmentModel
    return sum(1 for x in SegmentModel.scan() if x.pq.startswith("dlq"))


def _failing_push(api, setup, aws, clock, sid):
    assert api.call("PUT", f"/v1/subscriptions/{sid}/push", {
        "url": URL, "retry": {"max_attempts": 2, "backoff_base_ms": 100, "backoff_cap_ms": 100}},
        key=setup["risk"])[0] == 201
    produce(api, setup["feed"], ["x"])
    fan_out(aws)
    p = Poster(*[503] * 10)
    outs = []
    for _ in range(4):
        outs.append(push.deliver(sid, p))
        clock.t += 1000
    return outs


def test_an_ungranted_dead_letter_topic_is_never_written(api, setup, aws, clock, dlq):
    """A subscription whose dead-letter topic was not granted by the admin (one stored before the
    check existed; or the admin's grant moved since): the failing endpoint's messages are dropped and
    counted, nothing is written to the topic."""
    sid = subscribe(api, setup["risk"])
    SubscriptionModel(sid).update(actions=[SubscriptionModel.dead_letter_topic.set("dlq")])  # no grant recorded
    outs = _failing_push(api, setup, aws, clock, sid)
    assert sum(o.dead_lettered for o in outs) == 1
    assert _dlq_count(aws) == 0


def test_a_grant_moved_after_registration_drops_instead_of_writing(api, setup, aws, clock, dlq):
    assert api.call("POST", "/v1/topics", {"name": "other", "queues": 1})[0] == 201
    assert api.call("PATCH", "/v1/clients/risk", {"dead_letter_topic": "dlq"})[0] == 200
    sid = subscribe(api, setup["risk"], dead_letter_topic="dlq")
    assert api.call("PATCH", "/v1/clients/risk", {"dead_letter_topic": "other"})[0] == 200  # the grant moves
    outs = _failing_push(api, setup, aws, clock, sid)
    assert sum(o.dead_lettered for o in outs) == 1 and _dlq_count(aws) == 0


def test_a_granted_dead_letter_topic_is_written(api, setup, aws, clock, dlq):
    assert api.call("PATCH", "/v1/clients/risk", {"dead_letter_topic": "dlq"})[0] == 200
    sid = subscribe(api, setup["risk"], dead_letter_topic="dlq")
    outs = _failing_push(api, setup, aws, clock, sid)
    assert sum(o.dead_lettered for o in outs) == 1 and _dlq_count(aws) == 1
