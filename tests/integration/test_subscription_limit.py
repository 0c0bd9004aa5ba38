"""Review of issue 34, item 1a: subscriptions per client are bounded. Each subscription is a row the
metrics function publishes (and a list the fan-out appends to); without a bound any consumer key
could create enough of them to cut every metrics run short. The count is a counter on the client
item, conditioned in the creation's transaction (as the push endpoints' and connections' limits)."""
from __future__ import annotations

import threading

from lakeq.store.models import ClientModel
from lakeq.store.subscriptions import SubscriptionModel, SubscriptionRepo
from tests.concurrency import FirstCallsMeet
from tests.handlers import ADMIN
from tests.integration.test_push import URL, subscribe
from tests.integration.test_subscriptions_handlers import snapshot


def count(name="risk"):
    return int(ClientModel.get(name).subscriptions or 0)


def test_subscriptions_per_client_are_bounded(api, setup, monkeypatch):
    """Past the limit: 409 ``too_many_subscriptions`` in the API's error shape, nothing stored;
    deleting one frees its place. The admin key is held to the same limit (it is the client's)."""
    from lakeq.subscriptions import service
    monkeypatch.setattr(service, "MAX_SUBSCRIPTIONS_PER_CLIENT", 2)
    a, _ = subscribe(api, setup["risk"]), subscribe(api, setup["risk"])
    assert count() == 2
    before = snapshot()
    for key in (setup["risk"], ADMIN):
        s, b = api.call("POST", "/v1/subscriptions", {"subscriber": "risk", "topic": "quotes"}, key=key)
        assert s == 409 and b["error"]["code"] == "too_many_subscriptions" and b["error"]["message"], b
    assert snapshot() == before and count() == 2
    assert api.call("DELETE", f"/v1/subscriptions/{a}", key=setup["risk"])[0] == 204
    assert count() == 1
    subscribe(api, setup["risk"])
    assert count() == 2


def test_concurrent_creations_cannot_pass_the_limit_together(api, setup, monkeypatch):
    """Both requests read the count (one below the limit) before either writes: the counter is the
    transaction's condition, so one answers 201 and the other 409, and one subscription is stored."""
    from lakeq.subscriptions import service
    monkeypatch.setattr(service, "MAX_SUBSCRIPTIONS_PER_CLIENT", 1)
    both_counted = FirstCallsMeet(SubscriptionRepo.count_of)  # each request's first count waits for the other's
    monkeypatch.setattr(SubscriptionRepo, "count_of", staticmethod(both_counted))
    answers = []

    def post():
        answers.append(api.call("POST", "/v1/subscriptions", {"subscriber": "risk", "topic": "quotes"},
                                key=setup["risk"]))

    threads = [threading.Thread(target=post) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not both_counted.broken, "the premise: both requests counted before either wrote"
    assert sorted(a[0] for a in answers) == [201, 409], answers
    assert next(a[1] for a in answers if a[0] == 409)["error"]["code"] == "too_many_subscriptions"
    stored = [s for s in SubscriptionModel.scan() if s.subscriber == "risk"]
    assert len(stored) == 1 and count() == 1


def test_deleting_gives_back_each_count_once_and_never_below_zero(api, setup):
    """A subscription with a push endpoint gives back both its places (one update of the client
    item); one made before the counter existed (no ``counted``) gives back none; a count already
    at 0 stays 0."""
    a, legacy, b = (subscribe(api, setup["risk"]) for _ in range(3))
    assert api.call("PUT", f"/v1/subscriptions/{a}/push", {"url": URL}, key=setup["risk"])[0] == 201
    assert count() == 3 and int(ClientModel.get("risk").push_endpoints) == 1
    SubscriptionModel(legacy).update(actions=[SubscriptionModel.counted.remove()])
    assert api.call("DELETE", f"/v1/subscriptions/{a}", key=setup["risk"])[0] == 204
    assert count() == 2 and int(ClientModel.get("risk").push_endpoints) == 0
    assert api.call("DELETE", f"/v1/subscriptions/{legacy}", key=setup["risk"])[0] == 204
    assert count() == 2
    ClientModel("risk").update(actions=[ClientModel.subscriptions.set(0)])
    assert api.call("DELETE", f"/v1/subscriptions/{b}", key=setup["risk"])[0] == 204
    assert count() == 0 and not [s for s in SubscriptionModel.scan() if s.subscriber]
