"""Push endpoints shared by tenants (issue 30 items 4, 6, 8, 9): a concurrent first registration
has one winner, a subscription with an active endpoint refuses pulls, replaced settings apply from
the next batch, dead-letter topics are granted and loop-free (at registration and at dead-letter
time), endpoints per client are bounded and served fairly with per-run deadlines."""
from __future__ import annotations

import json

import pytest

from lakeq.push import delivery as push
from lakeq.store.models import ClientModel
from lakeq.store.push import GroupPushRepo, PushRepo
from lakeq.store.subscriptions import SubscriptionModel
from tests.handlers import ADMIN
from tests.integration.test_push import URL, Poster, fan_out, produce, subscribe

pytestmark = pytest.mark.usefixtures("fresh_matcher")
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
            item.push = item.push_secrets = item.push_paused = item.push_state = None
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
