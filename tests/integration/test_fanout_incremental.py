"""Subscription churn must not make every fan-out container rescan (docs/abuse.md, ``POST
/v1/subscriptions``): after a create, delete, park or un-park the fan-out re-reads only the changed
subscriptions (the version item keeps the last ``CHANGES_KEPT`` changes,
lakeq.store.subscriptions), and falls back to the Scan when a change in between is not kept."""
from __future__ import annotations

import itertools

import pytest

from infra.local import interceptor
from lakeq.common import clock
from lakeq.fanout import worker as fanout
from lakeq.store import subscriptions as subs_store
from lakeq.store.subscriptions import VERSION_ID, ParkRepo, SubscriptionModel
from tests.crash import CountCalls
from tests.handlers import sample

pytestmark = pytest.mark.usefixtures("fresh_matcher")
SEED = {"subscriber": "risk", "topic": "quotes",
        "conditions": [{"field": "type", "values": ["A"]}, {"field": "stock_code", "values": ["000000", "111111"]}]}


@pytest.fixture
def early_clock(monkeypatch):
    """Subscriptions created 'before' the sample stream's messages (produced_at 1795312800123)."""
    ticks = itertools.count(1795312800123 - 1000)
    monkeypatch.setattr(clock, "now", lambda: next(ticks))


def create(api, key) -> dict:
    s, b = api.call("POST", "/v1/subscriptions", SEED, key=key)
    assert s == 201, b
    return b


def pull(api, sid, key):
    return api.call("GET", f"/v1/subscriptions/{sid}/messages", key=key)


def batch_calls(m: fanout.Matcher):
    """The store calls of one fan-out batch (the sample stream), as (operation, table)."""
    with CountCalls() as c, interceptor.acting_as("FanoutFunction"):
        assert fanout.handle(sample("fanout_segments_stream.json"), clock.now(), m) == {"batchItemFailures": []}
    return [(x.operation, ",".join(t.rsplit("-", 1)[-1] for t in (list(x.params.get("RequestItems") or {})
                                                                    or [x.params.get("TableName", "")])))
            for x in c.calls]


def sub_reads(calls):
    return [op for op, table in calls if table == "subscriptions"]


def test_a_batch_after_one_create_reads_that_subscription_not_all(api, setup, early_clock):
    first = create(api, setup["risk"])
    m = fanout.Matcher()
    m.refresh()  # the container's index, built once (a Scan: cold start)
    second = create(api, setup["risk"])  # one change
    calls = batch_calls(m)
    assert sub_reads(calls) == ["GetItem", "BatchGetItem"], calls  # the version item, the changed one
    assert (m.rebuilds, m.updates) == (1, 1)
    # the invariant: created before the messages were produced → in the index for their records
    for sid in (first["id"], second["id"]):
        assert len(pull(api, sid, setup["risk"])[1]["messages"]) == 4
    assert sub_reads(batch_calls(m)) == ["GetItem"]  # unchanged: only the version


def test_delete_park_and_unpark_are_applied_in_place(api, setup, early_clock):
    a, b = create(api, setup["risk"]), create(api, setup["risk"])
    m = fanout.Matcher()
    m.refresh()
    entry = '{"quotes#1":{"attempts":1,"from":0,"reason":"x","seq":"1","since":1,"at":1}}'
    assert ParkRepo.write(b["id"], None, entry)
    reads = sub_reads(batch_calls(m))
    assert "Scan" not in reads and reads[:2] == ["GetItem", "BatchGetItem"], reads
    assert m.updates == 1 and "quotes#1" in m.parked[b["id"]]  # the park, read in place; caught up
    m.refresh()  # ... and its un-park (the next batch's refresh)
    assert (m.rebuilds, m.updates) == (1, 2) and b["id"] not in m.parked
    assert api.call("DELETE", f"/v1/subscriptions/{a['id']}", key=setup["risk"])[0] == 204
    assert ParkRepo.write(b["id"], None, entry)
    m.refresh()
    assert m.rebuilds == 1 and a["id"] not in m.created and m.parked[b["id"]]["quotes#1"]["from"] == 0
    fresh = fanout.Matcher()
    fresh.refresh()
    assert set(fresh.created) == set(m.created) == {b["id"]} and fresh.parked == m.parked
    assert fresh._by_topic == m._by_topic and fresh._topic == m._topic


def test_too_far_behind_or_an_unlogged_bump_falls_back_to_the_scan(api, setup, early_clock, monkeypatch):
    monkeypatch.setattr(subs_store, "CHANGES_KEPT", 3)
    create(api, setup["risk"])
    m = fanout.Matcher()
    m.refresh()
    for _ in range(4):  # one more than kept
        create(api, setup["risk"])
    assert "Scan" in sub_reads(batch_calls(m)) and m.rebuilds == 2
    create(api, setup["risk"])
    assert "Scan" not in sub_reads(batch_calls(m)) and m.rebuilds == 2
    # a bump that logged nothing (code from before the log, during a deploy): its entry is missing
    SubscriptionModel(VERSION_ID).update(actions=[SubscriptionModel.version.add(1)])
    assert "Scan" in sub_reads(batch_calls(m)) and m.rebuilds == 3
    assert len(m.created) == 6


def test_racing_changes_each_log_their_own_version(api, setup, early_clock, monkeypatch):
    """The bump is a compare-and-set: a change that read the version before another one committed
    fails its condition and runs again (nothing written by the lost round), its entry at the next
    version."""
    m = fanout.Matcher()
    m.refresh()
    real = subs_store.read_changes
    raced = []

    def stale_once():
        cur = real()
        if not raced:
            raced.append(1)
            create(api, setup["risk"])  # commits between this read and the caller's transaction
        return cur
    monkeypatch.setattr(subs_store, "read_changes", stale_once)
    late = create(api, setup["risk"])
    monkeypatch.setattr(subs_store, "read_changes", real)
    cur = real()
    assert cur.version == 2 and cur.log[2] == late["id"] and len(set(cur.log.values())) == 2
    assert subs_store.SubscriptionRepo.count_of("risk") == 2
    m.refresh()
    assert m.rebuilds == 1 and len(m.created) == 2


def test_a_park_and_a_create_under_churn_that_wins_every_round_still_land(api, setup, early_clock, monkeypatch):
    """review_d: the version item's bump is a compare-and-set, and churn anywhere (any tenant's
    creates and deletes, which no budget bounds) that moves the version between each read and its
    transaction made a park — which was one ADD with no read before the change log — and another
    tenant's create fail after CAS_ATTEMPTS rounds (503; the fan-out fails the records). Past
    VERSION_CAS_ROUNDS lost rounds the bump is the ADD without a change entry: the change lands and
    every container Scans once (the unlogged-bump fallback) instead."""
    from lakeq.common import backoff

    sub = create(api, setup["risk"])
    m = fanout.Matcher()
    m.refresh()
    real = subs_store.read_changes
    moved = []

    def churned():
        cur = real()  # another change commits between every read and the caller's transaction
        SubscriptionModel(VERSION_ID).update(actions=[SubscriptionModel.version.add(1)])
        moved.append(1)
        return cur
    monkeypatch.setattr(subs_store, "read_changes", churned)
    monkeypatch.setattr(backoff, "sleep", lambda *_a: None)
    entry = '{"quotes#1":{"attempts":1,"from":0,"reason":"x","seq":"1","since":1,"at":1}}'
    assert ParkRepo.write(sub["id"], None, entry)
    other = create(api, setup["risk"])
    assert len(moved) < backoff.CAS_ATTEMPTS
    monkeypatch.setattr(subs_store, "read_changes", real)
    m.refresh()
    assert m.rebuilds == 2 and m.parked[sub["id"]]["quotes#1"]["from"] == 0 and other["id"] in m.created
