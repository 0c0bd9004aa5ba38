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
def frozen_caches(monkeypatch):
    """The container's key, client and topic caches and its copies of the queue items and the topic
    item never expire during the test: they run on the monotonic clock, not the fake one, and a
    slow machine would otherwise see an occasional refresh read and make exact call counts flaky
    (CI at 3115e95, load ~25: test_idle_poll's counted poll looked the key and the client up again).
    Frozen, as a warm Lambda between back-to-back requests."""
    from lakeq.sqs import permissions as sqs_perm
    from lakeq.store import queue_log
    monkeypatch.setattr(lq_auth, "monotonic", lambda: 1_000.0)
    monkeypatch.setattr(sqs_perm, "monotonic", lambda: 1_000.0)
    monkeypatch.setattr(queue_log, "_monotonic", lambda: 1_000.0)


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
