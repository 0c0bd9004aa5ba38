"""Adversarial review of issue 30 (h/review), in-process: defects in the merged push hardening."""
from __future__ import annotations

import socket
import threading

import pytest

from lakeq.store.push import PushRepo
from lakeq.store.subscriptions import SubscriptionModel
from tests.integration.test_push import URL, subscribe


@pytest.mark.xfail(strict=True, reason="open (issue 30.6): the per-client endpoint limit is a count read before "
                   "the write; concurrent first registrations may pass it (docs/api.md says so). The fix is a "
                   "conditional counter on the client item, kept with every endpoint put and delete")
def test_concurrent_registrations_cannot_pass_the_endpoint_limit_together(api, setup, monkeypatch):
    """The per-client endpoint limit is a count (a Query of an eventually consistent index) read
    before an unconditional-on-the-count write: two PUTs on two of the client's subscriptions that
    both count before either writes both answer 201, and the client holds more endpoints than the
    limit — the bound issue 30.6's fairness argument rests on. (The barrier only makes the
    interleaving certain; any two overlapping requests can take it.)"""
    from lakeq.push import service
    monkeypatch.setattr(service, "MAX_ENDPOINTS_PER_CLIENT", 1)
    sids = [subscribe(api, setup["risk"]) for _ in range(2)]
    real = PushRepo.endpoints_of
    both_counted = threading.Barrier(2, timeout=10)

    def counted(client):
        n = real(client)
        try:
            both_counted.wait()
        except threading.BrokenBarrierError:
            pass
        return n

    monkeypatch.setattr(PushRepo, "endpoints_of", staticmethod(counted))
    statuses = {}

    def put(sid):
        statuses[sid] = api.call("PUT", f"/v1/subscriptions/{sid}/push", {"url": URL}, key=setup["risk"])[0]

    threads = [threading.Thread(target=put, args=(sid,)) for sid in sids]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    stored = sum(SubscriptionModel.get(sid).push is not None for sid in sids)
    assert stored <= 1, (statuses, stored)


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
    monkeypatch.setattr(transport, "addresses", lambda h, p, lb, d, r=None: real(h, p, lb, d, resolver))
    monkeypatch.delenv("LAKEQ_PUSH_ALLOW_HTTP_LOOPBACK", raising=False)
    answers = {u: api.call("PUT", "/v1/subscriptions/0123456789abcdef0123456789abcdef/push", {"url": u},
                           key=setup["feed"])[0]
               for u in ("https://db.internal.test/", "https://public.example.com/")}
    assert answers["https://db.internal.test/"] == answers["https://public.example.com/"], answers
