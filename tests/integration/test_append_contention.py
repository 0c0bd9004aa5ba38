"""Issue 33 item 3: a lost append learns the new head from its own failure.

A single-segment append without ids is one conditional PutItem; the one that loses the race gets
the winner's segment back (``ReturnValuesOnConditionCheckFailure=ALL_OLD``) and writes at its end at
once: no head read and no backoff wait after its first loss (``lakeq.store.append.append_at_head``; a
later loss of the same write waits and reads the head fresh, as before). And
many producers racing on one queue keep its chain whole: contiguous from 0, every message once, each
producer's messages in its order.

The call-count tests failed on the loop before it (after a lost race: a sleep, then a fresh head
read: the queue item's GetItem and the newest segment's Query).
"""
from __future__ import annotations

import json
import random
import threading

import pytest

from infra.local import interceptor
from lakeq.common import backoff
from lakeq.store import append
from lakeq.store.queue_log import LogRepo

T = "hot"


class Calls:
    """Hook: every DynamoDB call (operation, table), in order, whoever makes it."""

    def __init__(self):
        self.lock = threading.Lock()
        self.seen: list[tuple[str, str]] = []

    def before(self, call):
        if call.service == "dynamodb":
            with self.lock:
                self.seen.append((call.operation, call.params.get("TableName", "")))

    def after(self, call, response):
        return response


def make_topic(queues: int = 1):
    from lakeq.admin import service as admin
    from lakeq.admin.auth import Principal

    root = Principal(admin=True)
    admin.create_topic(root, json.dumps({"name": T, "queues": queues}))
    admin.create_client(root, json.dumps({"name": "feed", "role": "producer", "topics": [T]}))
    return root


def produce(root, bodies: list[str]) -> list[dict]:
    from lakeq.produce.service import produce as produce_

    return produce_(root, T, json.dumps({"producer": "feed", "messages": [{"body": b} for b in bodies]}))["results"]


def chain(queue: int = 0) -> list[tuple[int, int]]:
    """(base, end) of every segment of the queue, in order."""
    return [(s.base, s.end) for s in LogRepo.segments_between(T, queue, 0, 10 ** 12)]


def bodies_in_order(queue: int = 0) -> list[str]:
    from lakeq.log import segments as seg

    out = []
    for s in LogRepo.segments_between(T, queue, 0, 10 ** 12):
        out += [m["body"] for m in seg.all_headers(s)]
    return out


def _lost_race_rounds(aws, monkeypatch):
    """One produce whose first put loses to a competitor that appended at the head it read (as a
    producer in another container would, between its head read and its put). Returns the calls the
    produce made after its lost put, the sleeps of the loop, and both results."""
    root = make_topic()
    produce(root, ["first"])
    real_head = LogRepo.head
    raced = []

    def head(topic, queue, fresh=False, past=None):
        base = real_head(topic, queue, fresh, past)
        if not raced:
            raced.append(base)
            raced.append(produce(root, ["competitor"]))  # lands at ``base``: this produce's put loses
        return base
    monkeypatch.setattr(LogRepo, "head", staticmethod(head))
    slept = []
    monkeypatch.setattr(backoff, "sleep", lambda *a, **k: slept.append(a))
    calls = Calls()
    with interceptor.hooked(calls):
        mine = produce(root, ["mine"])
    segs = [(op, t) for op, t in calls.seen if t.endswith("-segments") or t.endswith("-queues")]
    puts = [k for k, (op, t) in enumerate(segs) if op == "PutItem" and t.endswith("-segments")]
    # the competitor's (nested) calls come first: its head read, its put; then this produce's puts
    return segs, puts, slept, raced[1], mine


def _check_lost_race(aws, monkeypatch):
    segs, puts, slept, theirs, mine = _lost_race_rounds(aws, monkeypatch)
    assert theirs[0]["offset"] == 1 and mine[0]["offset"] == 2  # mine lost at 1, then landed at 2
    assert len(puts) == 3  # the competitor's, my lost one, my winning one
    lost, won = puts[1], puts[2]
    assert segs[lost + 1:won] == []  # no head read between the lost put and the next
    assert won == lost + 1
    assert slept == []  # and no backoff wait
    assert chain() == [(0, 1), (1, 2), (2, 3)]
    assert bodies_in_order() == ["first", "competitor", "mine"]


@pytest.mark.moto
def test_a_lost_put_retries_at_the_winners_end_without_a_head_read_or_a_wait_on_moto(aws, monkeypatch):
    _check_lost_race(aws, monkeypatch)


def test_a_lost_put_retries_at_the_winners_end_without_a_head_read_or_a_wait(aws, monkeypatch):
    """The same on the memory store (which answers ``Item`` on a failed condition as moto does)."""
    _check_lost_race(aws, monkeypatch)


def test_a_second_lost_round_waits_and_reads_the_head_fresh(aws, monkeypatch):
    """A base several segments behind (a head read lagging): the first lost put learns the next
    segment's base and goes at once; its second loss steps aside (the backoff) and reads the head
    fresh: the put lands at the chain's end in three puts, not one a segment. The fresh read is the
    chain's consistent Query alone (its second lost put said a segment ends at 2: the Query's end,
    4, is past it), not the queue item's GetItem then the Query (the loop before: one read more,
    one after the other)."""
    root = make_topic()
    for b in "abcd":
        produce(root, [b])
    real_head = LogRepo.head
    monkeypatch.setattr(LogRepo, "head", staticmethod(
        lambda topic, queue, fresh=False, past=None: real_head(topic, queue, True, past) if fresh else 0))  # 4 behind
    slept = []
    monkeypatch.setattr(backoff, "sleep", lambda *a, **k: slept.append(a))
    calls = Calls()
    with interceptor.hooked(calls):
        assert produce(root, ["e"])[0]["offset"] == 4
    seg_calls = [op for op, t in calls.seen
                 if (t.endswith("-segments") or t.endswith("-queues")) and op != "UpdateItem"]
    assert seg_calls == ["PutItem", "PutItem", "Query", "PutItem"]  # (not the change marker's UpdateItem)
    assert len(slept) == 1 and append.AT_ONCE_LOSSES == 1
    assert chain() == [(k, k + 1) for k in range(5)]


def test_a_fresh_read_past_a_known_end_reads_the_queue_item_when_the_chain_ends_short(aws, monkeypatch):
    """``LogRepo.head(fresh=True, past=n)``: when the chain's newest segment ends before ``n`` (it
    cannot after a lost put; here asked by hand) the queue item is read as in the plain fresh read,
    and a queue whose item is gone answers None."""
    root = make_topic()
    produce(root, ["a"])
    calls = Calls()
    with interceptor.hooked(calls):
        assert LogRepo.head(T, 0, fresh=True, past=1) == 1
    assert [op for op, t in calls.seen if t.endswith("-segments") or t.endswith("-queues")] == ["Query"]
    calls = Calls()
    with interceptor.hooked(calls):
        assert LogRepo.head(T, 0, fresh=True, past=5) == 1
    assert [op for op, t in calls.seen if t.endswith("-segments") or t.endswith("-queues")] == \
        ["Query", "GetItem", "Query"]
    assert LogRepo.head(T, 7, fresh=True, past=5) is None  # no such queue


def test_contended_after_the_attempts_still(aws, monkeypatch):
    """A queue whose head moves under every put gives up after CAS_ATTEMPTS lost rounds (503)."""
    root = make_topic()
    produce(root, ["a"])
    real_put = LogRepo._put_alone
    n = []

    def put(item):
        n.append(1)
        real_put(type(item)(item.pq, 0, end=1, count=1, idx=item.idx, data=item.data, produced_at=0))  # always lost
    monkeypatch.setattr(LogRepo, "_put_alone", staticmethod(put))
    from lakeq.common.errors import Unavailable

    with pytest.raises(Unavailable):
        produce(root, ["b"])
    assert len(n) == backoff.CAS_ATTEMPTS
    assert chain() == [(0, 1)]


def _race(aws, monkeypatch, producers: int, waves: int, seed: int):
    """``producers`` threads, ``waves`` produce requests each (1-3 messages, seeded); in every wave all
    of them read the same head before any writes (a barrier after the head read), so each wave
    loses ``producers - 1`` puts at least."""
    root = make_topic()
    rng = random.Random(seed)
    plan = {p: [[f"p{p}-w{w}-m{k}" for k in range(rng.randint(1, 3))] for w in range(waves)]
            for p in range(producers)}
    barrier = threading.Barrier(producers, timeout=30)
    real_head = LogRepo.head

    def head(topic, queue, fresh=False, past=None):
        base = real_head(topic, queue, fresh, past)
        if not fresh:  # a request's first read: wait for every producer's
            barrier.wait()
        return base
    monkeypatch.setattr(LogRepo, "head", staticmethod(head))
    calls = Calls()
    errors = []

    def run(p):
        try:
            for bodies in plan[p]:
                produce(root, bodies)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)
            barrier.abort()
    with interceptor.hooked(calls):
        ts = [threading.Thread(target=run, args=(p,)) for p in range(producers)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(60)
    assert errors == []
    links = chain()
    assert links[0][0] == 0 and all(a[1] == b[0] for a, b in zip(links, links[1:]))  # no hole, no overlap
    got = bodies_in_order()
    want = [b for p in plan.values() for w in p for b in w]
    assert sorted(got) == sorted(want) and len(got) == len(set(got))  # every message once
    for p, reqs in plan.items():  # each producer's messages in its order
        mine = [b for b in got if b.startswith(f"p{p}-")]
        assert mine == [b for w in reqs for b in w]
    puts = sum(1 for op, t in calls.seen if op == "PutItem" and t.endswith("-segments"))
    assert puts - len(links) >= (producers - 1) * waves  # the barrier made them race
    return calls


def test_many_producers_on_one_queue_keep_the_chain(aws, monkeypatch):
    _race(aws, monkeypatch, producers=12, waves=4, seed=33)


@pytest.mark.moto
def test_many_producers_on_one_queue_keep_the_chain_on_moto(aws, monkeypatch):
    _race(aws, monkeypatch, producers=8, waves=3, seed=7)


def test_a_put_retried_by_the_sdk_after_it_landed_is_not_appended_twice(aws, monkeypatch):
    _check_sdk_retry(aws, monkeypatch)


@pytest.mark.moto
def test_a_put_retried_by_the_sdk_after_it_landed_is_not_appended_twice_on_moto(aws, monkeypatch):
    _check_sdk_retry(aws, monkeypatch)


def _check_sdk_retry(aws, monkeypatch):
    """The SDK retries a PutItem whose answer it did not get (a 500, a reset connection) although the
    write may have landed: the retry then fails its condition on the very segment it wrote, and the
    item it gets back (ReturnValuesOnConditionCheckFailure) is its own. That is a landed write, not a
    lost race: the messages are not appended a second time at the segment's end."""
    root = make_topic()
    produce(root, ["first"])
    from lakeq.store.models import SegmentModel

    client = SegmentModel._get_connection().connection.client
    real = client.put_item
    retried = []

    def put_item(**kw):
        out = real(**kw)
        if not retried:  # the answer is lost on the way: the SDK sends the same request again
            retried.append(1)
            return real(**kw)
        return out
    monkeypatch.setattr(client, "put_item", put_item)
    assert produce(root, ["mine"])[0]["offset"] == 1
    assert retried
    assert chain() == [(0, 1), (1, 2)]
    assert bodies_in_order() == ["first", "mine"]
