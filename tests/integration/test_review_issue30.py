"""Adversarial review of issue 30 (h/review), in-process: defects in the merged push hardening."""
from __future__ import annotations

import socket
import threading

import pytest

from lakeq.store.push import PushRepo
from lakeq.store.subscriptions import SubscriptionModel
from tests.concurrency import FirstCallsMeet
from tests.integration.sqs_harness import h  # noqa: F401 (fixture)
from tests.integration.test_push import URL, subscribe


def test_concurrent_registrations_cannot_pass_the_endpoint_limit_together(api, setup, monkeypatch):
    """The per-client endpoint limit was a count (a Query of an eventually consistent index) read
    before a write not conditioned on it: two PUTs on two of the client's subscriptions that both
    counted before either wrote both answered 201, and the client held more endpoints than the
    limit — the bound issue 30.6's fairness argument rests on. Now the count is a counter on the
    client item, conditioned in the registration's transaction: the barrier makes both requests
    read the count before either writes, and still one answers 409 ``too_many_push_endpoints``."""
    from lakeq.push import service
    monkeypatch.setattr(service, "MAX_ENDPOINTS_PER_CLIENT", 1)
    sids = [subscribe(api, setup["risk"]) for _ in range(2)]
    both_counted = FirstCallsMeet(PushRepo.endpoints_of)  # each request's first count waits for the other's
    monkeypatch.setattr(PushRepo, "endpoints_of", staticmethod(both_counted))
    answers = {}

    def put(sid):
        answers[sid] = api.call("PUT", f"/v1/subscriptions/{sid}/push", {"url": URL}, key=setup["risk"])

    threads = [threading.Thread(target=put, args=(sid,)) for sid in sids]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not both_counted.broken, "the premise: both requests counted before either wrote"
    stored = sum(SubscriptionModel.get(sid).push is not None for sid in sids)
    assert stored == 1, (answers, stored)
    assert sorted(a[0] for a in answers.values()) == [201, 409], answers
    refused = next(a[1] for a in answers.values() if a[0] == 409)
    assert refused["error"]["code"] == "too_many_push_endpoints", refused


def test_a_key_without_the_subscription_cannot_probe_name_resolution_through_push_registration(api, setup,
                                                                                               monkeypatch):
    """``PUT /v1/subscriptions/{id}/push`` resolves the URL's host (transport.check_host, up to 2 s)
    before it checks that the subscription exists or that the key may act for it: any key — a
    producer's, for a subscription id that does not exist — learns whether a name resolves to an
    internal address (400 'not allowed') or not (404), and makes the admin function wait on any
    lookup it likes. API.md's order is 400 (syntax) → 404 → 403; a lookup is not syntax."""
    from lakeq.push import transport

    def resolver(host, port, deadline):
        addr = "10.0.0.5" if host == "db.internal.test" else "93.184.216.34"
        return [(socket.AF_INET, (addr, port))]

    real = transport.addresses
    monkeypatch.setattr(transport, "addresses", lambda host, p, lb, d, r=None: real(host, p, lb, d, resolver))
    monkeypatch.delenv("LAKEQ_PUSH_ALLOW_HTTP_LOOPBACK", raising=False)
    answers = {u: api.call("PUT", "/v1/subscriptions/0123456789abcdef0123456789abcdef/push", {"url": u},
                           key=setup["feed"])[0]
               for u in ("https://db.internal.test/", "https://public.example.com/")}
    assert answers["https://db.internal.test/"] == answers["https://public.example.com/"], answers


# --- h/review2: the push-endpoint counter (issue 30.6) ----------------------------------------------
def _count(name):
    from lakeq.store.models import ClientModel
    return int(ClientModel.get(name).push_endpoints or 0)


def test_an_endpoint_whose_subscriber_is_gone_can_still_be_deleted(api, setup, h):  # noqa: F811
    """An admin may subscribe an SQS queue's consumer group (``sqs.<queue>``) and give the
    subscription an endpoint; DeleteQueue deletes that client item and leaves the subscription.
    The endpoint's and the subscription's deletions uncount the endpoint on the subscriber's item,
    conditioned on it existing: with it gone, DELETE …/push answered 409 forever and DELETE of the
    subscription 500. There is nothing left to uncount: both must delete (and create no client item);
    a registration there answers 404 (the subscriber), not 409 "retry" after 5 attempts."""
    from lakeq.store.models import ClientModel
    sqs = h.client("admin")
    url = sqs.create_queue(QueueName="orphan")["QueueUrl"]
    sids = []
    for i in range(3):
        s, sub = api.call("POST", "/v1/subscriptions", {"subscriber": "sqs.orphan", "topic": "orphan"})
        assert s == 201, sub
        sids.append(sub["id"])
        if i < 2:
            assert api.call("PUT", f"/v1/subscriptions/{sub['id']}/push", {"url": URL})[0] == 201
    assert _count("sqs.orphan") == 2
    sqs.delete_queue(QueueUrl=url)
    assert ClientModel.count("sqs.orphan") == 0, "the premise: the subscriber's client item is gone"
    # a new endpoint there: the subscriber does not exist (404), not "changed meanwhile; retry" (409)
    s, body = api.call("PUT", f"/v1/subscriptions/{sids[2]}/push", {"url": URL})
    assert s == 404 and "sqs.orphan" in body["error"]["message"], (s, body)
    assert SubscriptionModel.get(sids[2]).push is None
    assert api.call("DELETE", f"/v1/subscriptions/{sids[0]}/push")[0] == 204
    assert SubscriptionModel.get(sids[0]).push is None
    assert api.call("DELETE", f"/v1/subscriptions/{sids[1]}")[0] == 204
    assert SubscriptionModel.count(sids[1]) == 0
    assert ClientModel.count("sqs.orphan") == 0  # no stub client item made by an uncount


def _uncounted(name):
    """An endpoint registered before the counter existed: the client item has no ``push_endpoints``."""
    from lakeq.store.models import ClientModel
    ClientModel(name).update(actions=[ClientModel.push_endpoints.remove()])


@pytest.mark.parametrize("how", ["endpoint", "subscription", "group"])
def test_deleting_an_uncounted_endpoint_never_makes_the_count_negative(api, setup, monkeypatch, how):
    """Endpoints registered before the counter are on no counter (absent = 0); deleting one took
    the count to -1, one place more than the limit for good (each such deletion one more). The
    count never goes below 0: a client with the limit's endpoints gets no further one."""
    from lakeq.push import service
    monkeypatch.setattr(service, "MAX_ENDPOINTS_PER_CLIENT", 1)
    old, b, c = (subscribe(api, setup["risk"]) for _ in range(3))
    G = "/v1/groups/risk/push"
    if how == "group":
        assert api.call("PUT", G, {"url": URL, "topic": "quotes"}, key=setup["risk"])[0] == 201
    else:
        assert api.call("PUT", f"/v1/subscriptions/{old}/push", {"url": URL}, key=setup["risk"])[0] == 201
    _uncounted("risk")
    path = {"endpoint": f"/v1/subscriptions/{old}/push", "subscription": f"/v1/subscriptions/{old}",
            "group": G}[how]
    assert api.call("DELETE", path, key=setup["risk"])[0] == 204
    assert _count("risk") == 0
    assert api.call("PUT", f"/v1/subscriptions/{b}/push", {"url": URL}, key=setup["risk"])[0] == 201
    s, body = api.call("PUT", f"/v1/subscriptions/{c}/push", {"url": URL}, key=setup["risk"])
    assert (s, body["error"]["code"]) == (409, "too_many_push_endpoints"), (s, body)
