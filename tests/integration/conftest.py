import pytest

from lakeq.admin import auth as lq_auth
from lakeq.common import clock as lakeq_clock
from tests.handlers import Api, make_dlq


@pytest.fixture
def api(aws):
    lq_auth.clear_caches()
    yield Api()
    lq_auth.clear_caches()


@pytest.fixture
def setup(api):
    """quotes (4 queues) with child quotes/sh (2), producer feed, consumer risk (clustering)."""
    assert api.call("POST", "/v1/topics", {"name": "quotes", "queues": 4})[0] == 201
    assert api.call("POST", "/v1/topics", {"name": "quotes/sh", "queues": 2})[0] == 201
    s, feed = api.call("POST", "/v1/clients", {"name": "feed", "role": "producer", "topics": ["quotes"]})
    assert s == 201
    s, risk = api.call("POST", "/v1/clients", {"name": "risk", "role": "consumer", "topics": ["quotes"],
                                               "visibility_timeout_ms": 1000})
    assert s == 201
    return {"feed": feed["api_key"], "risk": risk["api_key"]}


@pytest.fixture
def dlq(api):
    """A dead-letter topic ``dlq`` (1 queue) read by group ``ops``; the group's key."""
    return make_dlq(api)


class Clock:
    """A fake ``lakeq.common.clock.now``: stands still; tests move it by setting ``t`` (epoch ms)."""

    def __init__(self, t=1_800_000_000_000):
        self.t = t

    def __call__(self):
        return self.t


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(lakeq_clock, "now", c)
    return c


@pytest.fixture
def fresh_matcher():
    """A fresh fan-out index cache (one per container on AWS; here one per test's moto tables)."""
    from lakeq.fanout import worker as fanout
    fanout.matcher = fanout.Matcher()
    yield
    fanout.matcher = fanout.Matcher()


@pytest.fixture
def fanout_handler(aws, fresh_matcher):
    """FanoutFunction's handler, with a fresh index cache: every test's moto tables start the
    subscriptions' version counter again, so a cache left by an earlier test would look current
    (seen: test_poison's subscription test failing after test_big_messages' fan-out in one run)."""
    from tests.handlers import load_function
    return load_function("FanoutFunction")
