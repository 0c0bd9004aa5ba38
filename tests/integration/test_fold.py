"""A pull's piggybacked ack folded into its lock (issue 16 item 3, :func:`lakeq.consume.reader.fold`).

A pull with ``ack=<receipt>`` of a lock on a queue of the same topic acknowledges that batch and
locks the next one of that queue in ONE conditional UpdateItem, conditioned on the record being
exactly as read (the receipt's lock still there). These tests check the write count, that the
fold is the ack (``acks`` remembers it: a retry answers 200), that a stale receipt is reported as
before and changes nothing, that a record moving between the fold's read and its write makes the
fold fall back to the ack alone (never a lock without its ack, never a lost or doubled message),
and that runs of folded locks end (the queues are ranked again).
"""
from __future__ import annotations

import zlib
from collections import Counter

import pytest

from infra.local import interceptor
from lakeq.consume import reader as logread
from lakeq.log import selection
from lakeq.store.models import OffsetModel
from lakeq.store.offsets import OffsetRepo
from lakeq.store.queue_log import LogRepo
from tests.crash import CountCalls

T = "/v1/topics/quotes%2Fsh/messages"


def produce(api, key, n, k="k"):
    s, b = api.call("POST", T, {"producer": "feed", "messages": [{"body": f"m{i}", "key": k} for i in range(n)]},
                    key=key)
    assert s == 200
    return b["results"]


def pull(api, key, **q):
    q.setdefault("group", "risk")
    return api.call("GET", q.pop("path", T), query=q, key=key)


def record(queue):
    return OffsetModel.get(OffsetRepo.owner("risk", "quotes/sh"), queue, consistent_read=True)


def ops(calls):
    return Counter(c.operation for c in calls)


def test_folded_ack_is_one_write_and_is_remembered(api, setup):
    q = produce(api, setup["feed"], 5)[0]["queue"]
    s, b1 = pull(api, setup["risk"], max=2)
    assert s == 200 and [m["offset"] for m in b1["messages"]] == [0, 1]
    with CountCalls() as c:
        s, b2 = pull(api, setup["risk"], max=2, ack=b1["receipt"])
    assert s == 200 and [m["offset"] for m in b2["messages"]] == [2, 3]
    assert [m["deliveries"] for m in b2["messages"]] == [1, 1]
    o = ops(c.calls)
    # one write: the ack and the lock together; no queue item or record ranking reads
    assert o["UpdateItem"] == 1 and o["BatchGetItem"] == 0, o
    r = record(q)
    assert (int(r.committed_offset), int(r.lock_next), int(r.run)) == (2, 4, 1)
    b1_key = ":".join(b1["receipt"].split(":")[-3:])
    assert b1_key in r.acks
    # the folded ack is an ack: repeating it answers 200 (a retry), POST /v1/acks as well
    assert api.call("POST", "/v1/acks", {"group": "risk", "receipt": b1["receipt"]}, key=setup["risk"])[0] == 200
    s, b3 = pull(api, setup["risk"], max=2, ack=b1["receipt"])  # a retried pull: the ack is known, b2 still locked
    assert s == 200 and b3 == {"messages": [], "receipt": None}
    s, b4 = pull(api, setup["risk"], max=2, ack=b2["receipt"])
    assert s == 200 and [m["offset"] for m in b4["messages"]] == [4]
    s, b5 = pull(api, setup["risk"], max=2, ack=b4["receipt"])  # nothing left: the ack alone
    assert s == 200 and b5 == {"messages": [], "receipt": None}
    r = record(q)
    assert (int(r.committed_offset), r.lock_next, int(r.lock_until)) == (5, None, 0)


def test_stale_piggybacked_ack_serves_nothing_and_changes_nothing(api, setup, clock):
    produce(api, setup["feed"], 4)
    s, b1 = pull(api, setup["risk"], max=1)
    q = b1["messages"][0]["queue"]
    clock.t += 2_000  # risk's visibility timeout is 1 s: the lock expires, another pull takes the queue
    s, b2 = pull(api, setup["risk"], max=1)
    assert s == 200 and [m["offset"] for m in b2["messages"]] == [0]  # redelivered
    before = record(q).attribute_values
    s, e = pull(api, setup["risk"], max=1, ack=b1["receipt"])
    assert s == 409 and e["error"]["code"] == "stale_receipt"
    assert record(q).attribute_values == before
    s, b3 = pull(api, setup["risk"], max=1, ack=b2["receipt"])
    assert s == 200 and [m["offset"] for m in b3["messages"]] == [1]


@pytest.mark.parametrize("source", ["read", "copy"])
@pytest.mark.parametrize("meanwhile", ["same_ack", "expired_and_relocked"])
def test_record_moving_between_read_and_write_falls_back_to_the_ack_alone(api, setup, clock, monkeypatch, meanwhile,
                                                                          source):
    """The fold read the record (``read``: a container without a copy of it; ``copy``: this
    container's copy of its lock write, :meth:`OffsetRepo.known`), then something else wrote it: the
    fold's write fails its condition and the ack is settled on its own (as ``POST /v1/acks``): a
    concurrent identical ack → 200 and the pull goes on; the lock expired and was taken by another
    pull → 409, nothing served, and the other pull's lock stands."""
    from lakeq.store import queue_log

    produce(api, setup["feed"], 4)
    s, b1 = pull(api, setup["risk"], max=1)
    q = b1["messages"][0]["queue"]
    name = "peek" if source == "read" else "known"
    if source == "read":
        queue_log._WROTE.clear()
    else:
        assert queue_log._WROTE
    real_get = getattr(OffsetRepo, name)  # the fold's read of the record
    other: dict = {}

    def get_then_race(*a):
        rec = real_get(*a)
        assert rec is not None
        monkeypatch.setattr(logread.OffsetRepo, name, real_get)  # once
        if meanwhile == "same_ack":
            other["ack"] = api.call("POST", "/v1/acks", {"group": "risk", "receipt": b1["receipt"]},
                                    key=setup["risk"])
        else:
            clock.t += 2_000
            other["pull"] = pull(api, setup["risk"], max=1)
        return rec

    monkeypatch.setattr(logread.OffsetRepo, name, staticmethod(get_then_race))
    s, b2 = pull(api, setup["risk"], max=1, ack=b1["receipt"])
    if meanwhile == "same_ack":
        assert other["ack"][0] == 200
        assert s == 200 and [m["offset"] for m in b2["messages"]] == [1]
        r = record(q)
        assert (int(r.committed_offset), int(r.lock_next)) == (1, 2)
    else:
        assert other["pull"][0] == 200 and [m["offset"] for m in other["pull"][1]["messages"]] == [0]
        assert s == 409 and b2["error"]["code"] == "stale_receipt"
        r = record(q)
        assert (int(r.committed_offset), int(r.lock_next)) == (0, 1)  # the other pull's lock stands
        assert str(int(r.lock_ts)) == other["pull"][1]["receipt"].rsplit(":", 1)[1]


def test_runs_of_folded_locks_end_and_every_message_is_served_once(api, setup, monkeypatch):
    monkeypatch.setattr(selection, "FOLD_RUN", 3)
    produce(api, setup["feed"], 12)
    seen, runs, receipt = [], [], None
    while True:
        params = {"max": 1}
        if receipt:
            params["ack"] = receipt
        s, b = pull(api, setup["risk"], **params)
        assert s == 200
        if not b["messages"]:
            break
        m = b["messages"][0]
        seen.append((m["queue"], m["offset"]))
        receipt = b["receipt"]
        runs.append(int(record(m["queue"]).run or 0))
    assert sorted(seen) == sorted(set(seen)) and len(seen) == 12
    # 0 (ranked), 1, 2, 3 (folded), then ranked again: the run never passes FOLD_RUN
    assert max(runs) == 3 and runs[:5] == [0, 1, 2, 3, 0], runs


class Reads:
    """Hook: every store Query (its Limit and how many items it returned)."""

    def __init__(self):
        self.queries: list[tuple[int | None, int]] = []

    def before(self, call):
        pass

    def after(self, call, response):
        if call.operation == "Query":
            self.queries.append((call.params.get("Limit"), len(response.get("Items", []))))
        return response

    def __enter__(self):
        interceptor.add(self)
        return self

    def __exit__(self, *exc):
        interceptor.remove(self)


def test_a_read_asks_for_the_segments_its_batch_needs(api, setup):
    """A Query is billed for every segment it reads: once a container saw a queue's segments, a
    read's first page asks for as many as the batch needs (a page of 8 segments of 100 messages
    was ~8 times what a batch of 100 reads); smaller segments than that are read on, nothing missed."""
    from lakeq.store import queue_log
    for _ in range(3):
        q = produce(api, setup["feed"], 10)[0]["queue"]
    queue_log._segment_sizes.clear()
    with Reads() as r:
        segs = list(LogRepo.read("quotes/sh", q, 0, 10))
    assert [s.base for s in segs] == [0] and r.queries == [(8, 3)]  # nothing known yet: a page of 8 (3 exist)
    with Reads() as r:
        segs = list(LogRepo.read("quotes/sh", q, 10, 10))
    assert [s.base for s in segs] == [10] and r.queries == [(1, 1)]
    for _ in range(5):
        produce(api, setup["feed"], 1)
    with Reads() as r:  # segments of 10 and then of 1: the first page (2) is short of the 12 offsets asked
        segs = list(LogRepo.read("quotes/sh", q, 20, 12))
    assert [(s.base, s.count) for s in segs] == [(20, 10), (30, 1), (31, 1)]
    assert r.queries[0] == (2, 2) and r.queries[1][0] == 8, r.queries


def test_a_member_folds_only_into_a_queue_it_is_assigned(api, setup, clock):
    """A member pull folds the ack into its lock only on a queue the member serves; a receipt of a
    queue it does not serve (a group's receipt may be acked by any of its members) is acked alone
    and the member is served from its own queues."""
    from tests.integration.test_groups_handlers import join, sync, unwire
    k = setup["risk"]
    ma = join(api, k, {"topics": ["quotes"], "session_timeout_ms": 10_000})[1]["member_id"]
    r = sync(api, k, ma, 1)[1]
    clock.t += 100
    join(api, k, {"member_id": "mb", "topics": ["quotes"]})
    sync(api, k, "mb", 2)
    join(api, k, {"member_id": ma, "topics": ["quotes"], "owned": r["assignment"]})
    ra = unwire(sync(api, k, ma, 2)[1]["assignment"])
    rb = unwire(sync(api, k, "mb", 2)[1]["assignment"])
    topic = next(t for t in ("quotes", "quotes/sh") if any(x == t for x, _ in ra) and any(x == t for x, _ in rb))
    n = 4 if topic == "quotes" else 2
    qa = min(q for t, q in ra if t == topic)
    qb = min(q for t, q in rb if t == topic)
    path = "/v1/topics/" + topic.replace("/", "%2F") + "/messages"
    keys = {}
    for i in range(200):  # a key for each of the topic's queues
        keys.setdefault(zlib.crc32(f"k{i}".encode()) % n, f"k{i}")
    for q in (qa, qb):
        s, _ = api.call("POST", path, {"producer": "feed", "messages": [{"body": "x", "key": keys[q]}] * 3},
                        key=setup["feed"])
        assert s == 200
    s, b1 = pull(api, k, path=path, max=1, member_id=ma)
    assert s == 200 and b1["messages"][0]["queue"] == qa
    with CountCalls() as c:
        s, b2 = pull(api, k, path=path, max=1, member_id=ma, ack=b1["receipt"])
    assert s == 200 and [(m["queue"], m["offset"]) for m in b2["messages"]] == [(qa, 1)]
    assert ops(c.calls)["UpdateItem"] == 1  # folded
    s, b3 = pull(api, k, path=path, max=1, member_id="mb", ack=b2["receipt"])  # mb does not serve qa
    assert s == 200 and [(m["queue"], m["offset"]) for m in b3["messages"]] == [(qb, 0)]
    rec = OffsetModel.get(OffsetRepo.owner("risk", topic), qa, consistent_read=True)
    assert (int(rec.committed_offset), rec.lock_next, int(rec.lock_until)) == (2, None, 0)  # acked alone
    assert ":".join(b2["receipt"].split(":")[-3:]) in rec.acks


def test_a_piggybacked_ack_that_finds_nothing_left_is_remembered(api, setup):
    """A pull's ``ack=`` of a batch whose offsets were all settled one by one answers no error (the
    ack succeeded, nothing was left); a later ``POST /v1/acks`` retry of that receipt, after the
    queue was locked again, answers 200 as for any remembered ack, not 409 ``stale_receipt``."""
    produce(api, setup["feed"], 3)
    s, b1 = pull(api, setup["risk"])
    assert s == 200 and [m["offset"] for m in b1["messages"]] == [0, 1, 2]
    s, out = api.call("POST", "/v1/acks", {"group": "risk", "receipt": b1["receipt"], "accept": [0, 1, 2]},
                      key=setup["risk"])
    assert s == 200 and out["committed_offset"] == 3, out
    produce(api, setup["feed"], 1)
    s, b2 = pull(api, setup["risk"], ack=b1["receipt"])
    assert s == 200 and [m["offset"] for m in b2["messages"]] == [3], b2  # locked again
    s, again = api.call("POST", "/v1/acks", {"group": "risk", "receipt": b1["receipt"]}, key=setup["risk"])
    assert s == 200 and again["committed_offset"] == 3 and again["unsettled"] == [], (s, again)


def test_a_folded_pull_of_a_consumer_with_max_deliveries_1_locks_one_message(api, setup):
    """docs/api.md (pull): with ``max_deliveries`` 1 there is no second delivery to tell a poison from
    its neighbours with, so every batch is one message — a folded pull too. Found by the queue model
    once its pulls carried ``ack=`` (cost33f): the fold locked ``max`` fresh messages whatever the policy."""
    s, b = api.call("PATCH", "/v1/clients/risk", {"max_deliveries": 1})
    assert s == 200, b
    produce(api, setup["feed"], 4)
    s, b = pull(api, setup["risk"], max=3)
    assert s == 200 and [m["offset"] for m in b["messages"]] == [0], b
    for want in ([1], [2], [3]):
        s, b = pull(api, setup["risk"], max=3, ack=b["receipt"])
        assert s == 200 and [m["offset"] for m in b["messages"]] == want, b
