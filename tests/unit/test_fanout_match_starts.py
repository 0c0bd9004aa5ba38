"""The fan-out's Matcher.match (issue 33 item 4): each matched id's start (lakeq.store.subscriptions.
Start.delivers) is read once per subscription and source log (``Matcher._heads``) instead of per id
and message; the answer must be Start.delivers' for every kind of start — heads on the log, on
another log only, fewer queues than the message's, none at all (``{}``), and the rule before starts
(``produced_at`` against ``created_at``) — and a rebuild (``load``) must forget what was read.
Also: the plan pauses the cyclic collector while it matches (a real segment, so the match runs) and
leaves it as it found it, a failing match included."""
from __future__ import annotations

import gc
import json
import random
from types import SimpleNamespace

from lakeq.common.names import topic_of_log
from lakeq.fanout.worker import Matcher
from lakeq.log import fanout_plan


def _subs(rng: random.Random, n: int) -> list:
    out = []
    for i in range(n):
        r = rng.random()
        if r < 0.2:
            starts = None  # stored before starts: produced_at > created_at
        elif r < 0.35:
            starts = "{}"
        elif r < 0.5:
            starts = json.dumps({"t/sub": [5, 5]})
        else:
            starts = json.dumps({"t": [rng.randint(0, 30) for _ in range(rng.randint(1, 4))]})
        levels = [] if rng.random() < 0.5 else [{"field": "x", "range": [0, rng.randint(1, 10)]}]
        out.append(SimpleNamespace(id=f"s{i}", topic="t", conditions=json.dumps(levels), tags=None, parked=None,
                                   created_at=rng.randint(0, 20), starts=starts))
    return out


def _expected(m: Matcher, source: str, msg: dict, queue: int) -> list:
    ids = m.index.match(topic_of_log(source), msg.get("properties") or {}, msg.get("tags") or ())
    return [sid for sid in ids if m.created[sid].delivers(source, queue, msg)]


def test_match_reads_each_start_once_and_answers_as_delivers():
    rng = random.Random(5)
    m = Matcher()
    subs = _subs(rng, 300)
    m.load(subs)
    for step in range(400):
        queue = rng.randint(0, 5)
        msg = {"properties": {"x": rng.randint(0, 12)}, "produced_at": rng.randint(0, 25),
               "offset": rng.randint(0, 35)}
        source = "t" if rng.random() < 0.7 else "t/sub"
        assert m.match(source, msg, queue) == _expected(m, source, msg, queue), (step, source, queue, msg)
        if step == 200:  # a rebuild with other starts: nothing read before may be kept
            for s in subs:
                s.starts = json.dumps({"t": [rng.randint(0, 30)]})
            m.load(subs)
            assert not m._heads
    assert m._heads["t"], "the starts read should be kept per source log"
    no_offset = {"properties": {"x": 1}, "produced_at": 30}  # no offset: every id by Start.delivers
    m2 = Matcher()
    m2.load([s for s in _subs(random.Random(6), 50) if s.starts is None or s.starts == "{}"])
    assert m2.match("t", no_offset, 0) == _expected(m2, "t", no_offset, 0)


def _segment_record(n: int) -> dict:
    """A stream INSERT of a segment of ``n`` messages on queue 0 of topic ``t``."""
    from lakeq.log import segments as seg

    s = seg.encode([seg.Message(id=f"m{i}", body="b", properties={"x": i}) for i in range(n)], 0)
    return {"eventName": "INSERT", "dynamodb": {"SequenceNumber": "1", "NewImage": {
        "pq": {"S": "t#0"}, "base": {"N": str(s.base)}, "count": {"N": str(s.count)},
        "idx": {"B": s.idx}, "data": {"B": s.data}, "z": {"BOOL": s.compressed}}}}


def test_plan_pauses_the_collector_and_restores_it():
    """The collector is off while the plan matches (review_b: the first version of this test sent a
    record that is not a segment, so no match ran and a plan that never paused passed it), back on
    after it — also when a match raises (a poison record) — and left off when it was off."""
    class Counting:
        def __init__(self, fail: bool = False):
            self.fail = fail

        def match(self, source, msg, queue=0):
            seen.append(gc.isenabled())
            if self.fail:
                raise ValueError("a match that fails")
            return ["s"]

    seen: list = []
    assert gc.isenabled()
    p = fanout_plan.plan([_segment_record(3)], Counting())
    assert seen == [False] * 3 and gc.isenabled()
    assert [len(g.messages) for g in p.pending["s"]] == [3] and p.poison is None
    seen.clear()
    p = fanout_plan.plan([_segment_record(2)], Counting(fail=True))
    assert seen == [False] and gc.isenabled() and p.poison == 0
    gc.disable()
    try:
        seen.clear()
        fanout_plan.plan([_segment_record(1)], Counting())
        assert seen == [False] and not gc.isenabled()
    finally:
        gc.enable()


def test_match_past_every_start_takes_the_ids_as_they_are():
    """A message at or past its queue's highest recorded head among the subscriptions that can match
    it (``Matcher._bound``: its topic's and its ancestors', not others') is kept by all of them
    unless one is under the rule before starts; the answer is still Start.delivers' either way —
    a start on an ancestor topic's subscription that is higher, a queue past every start, a
    legacy subscription matched or not, a start on another topic's subscription (ignored)."""
    rng = random.Random(11)
    subs = []
    for i, (topic, starts) in enumerate([("t", json.dumps({"t/a": [3, 9]})),  # on the log's ancestor
                                         ("t/a", json.dumps({"t/a": [5]})),
                                         ("t/a", "{}"),
                                         ("t/a", json.dumps({"t": [50]})),  # another log: every message of t/a
                                         ("u", json.dumps({"t/a": [99, 99, 99]})),  # cannot match t/a
                                         ("t/a", None)]):  # produced_at > created_at
        levels = [{"field": "x", "range": [0, 10]}] if i == 5 else []
        subs.append(SimpleNamespace(id=f"s{i}", topic=topic, conditions=json.dumps(levels), tags=None,
                                    parked=None, created_at=10, starts=starts))
    m = Matcher()
    m.load(subs)
    fast = 0
    for step in range(300):
        queue = rng.randint(0, 2)
        x = rng.choice([5, 20])  # 20: the legacy subscription does not match
        msg = {"properties": {"x": x}, "produced_at": rng.randint(5, 15), "offset": rng.randint(0, 12)}
        got = m.match("t/a", msg, queue)
        assert got == _expected(m, "t/a", msg, queue), (step, queue, msg)
        hi, legacy = m._bounds["t/a"]
        fast += (queue >= len(hi) or msg["offset"] >= hi[queue]) and x == 20
    assert m._bounds["t/a"] == ([5, 9], {"s5"})
    assert fast > 20  # the quick path was taken, and answered the same
    m.load(subs[:3])
    assert not m._bounds
