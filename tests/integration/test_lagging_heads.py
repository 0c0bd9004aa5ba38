"""Issue 16 item 3: the producer's ``max_offset`` write moved to the SegmentsTable stream's head mover
(``HeadsFunction``, :mod:`lakeq.produce.heads`). An append without ids is one PutItem of its
segment; the queue item's ``max_offset`` is a hint that lags until the mover ran. Every reader that
needs the exact head answers right with the hint behind (here the mover never runs unless a test
calls it), and the mover is safe run late, twice, out of order and concurrently with producers.

Each reader test was seen failing on a naive version (the producer's UpdateItem removed, readers
left on the hint: ``LogRepo.queues``/``queue`` with ``exact=False`` and no pull probe).
"""
from __future__ import annotations

import threading

import pytest

from infra.local import interceptor
from lakeq.store.models import QueueModel, SegmentModel
from lakeq.store.queue_log import LogRepo
from tests.crash import CountCalls
from tests.handlers import Context, load_function, segment_records, this_thread_sleep
from tests.history import path

# moto: these tests read DynamoDB Streams (the stream pump, the fan-out, the archiver), which the memory store has not
pytestmark = pytest.mark.moto

T = "quotes/sh"
P = path(T)


def produce(api, key, messages, topic=T):
    s, b = api.call("POST", path(topic), {"producer": "feed", "messages": messages}, key=key)
    assert s == 200, b
    return b["results"]


def pull(api, key, group="risk", topic=T, **q):
    s, b = api.call("GET", path(topic), query={"group": group, "max": 100, **q}, key=key)
    assert s == 200, b
    return b


def hint(q, log=T):
    return int(QueueModel.get(f"{log}#{q}").max_offset)


def mover():
    return load_function("HeadsFunction")


class Writes:
    """Hook: every UpdateItem the head mover attempts (failed conditions included)."""

    def __init__(self):
        self.n = 0

    def before(self, call):
        if call.function == "HeadsFunction" and call.operation == "UpdateItem":
            self.n += 1

    def after(self, call, response):
        return response


def move(aws, records=None):
    return mover()({"Records": segment_records(aws, lists=True) if records is None else records}, Context())


def test_pull_right_after_produce_finds_the_message_with_the_hint_behind(api, setup, aws):
    """Read-after-write: a ``wait_ms=0`` pull right after the produce's answer finds the message
    although nothing moved the queue item; the probe is one Query of the newest segment per queue
    whose hint shows nothing (2 queues here), none for a queue whose hint shows messages."""
    r = produce(api, setup["feed"], [{"body": "a", "key": "k"}])
    q = r[0]["queue"]
    assert hint(q) == 0  # the head mover never ran
    calls = CountCalls({"ConsumeFunction"})
    with interceptor.hooked(calls):
        b = pull(api, setup["risk"], wait_ms=0)
    assert [m["body"] for m in b["messages"]] == ["a"]
    assert sorted(_probes(calls)) == [f"{T}#0", f"{T}#1"]  # both queues' hints show nothing: both probed
    assert len(_probe_calls(calls)) == 1  # in one BatchGetItem of the segment keys at their frontiers
    # once the mover ran, the hint shows the message's queue: it is not probed
    produce(api, setup["feed"], [{"body": "b", "key": "k"}])
    move(aws)
    assert hint(q) == 2
    assert api.call("POST", "/v1/acks", {"group": "risk", "receipt": b["receipt"]}, key=setup["risk"])[0] == 200
    calls = CountCalls({"ConsumeFunction"})
    with interceptor.hooked(calls):
        b = pull(api, setup["risk"], wait_ms=0)
    assert [m["body"] for m in b["messages"]] == ["b"]
    assert f"{T}#{q}" not in _probes(calls)


def test_a_consumer_that_keeps_up_probes_every_queue_in_one_call(api, setup):
    """Produce, pull, ack, again, the head mover never running (a consumer that keeps up is always
    ahead of the hints): each pull probes both queues in one BatchGetItem and no newest-first Query,
    since its lock recorded the end of the segment it read (OffsetModel.bnd), so its frontier is
    known to be a boundary. Before, the queue it read was probed with a Query of its own."""
    got = []
    for i in range(4):
        r = produce(api, setup["feed"], [{"body": f"m{i}", "key": "k"}])
        calls = CountCalls({"ConsumeFunction"})
        with interceptor.hooked(calls):
            b = pull(api, setup["risk"], wait_ms=0, max=1)
        got += [m["body"] for m in b["messages"]]
        assert [c.operation for c in _probe_calls(calls)] == ["BatchGetItem"], [c.operation for c in calls.calls]
        assert sorted(_probes(calls)) == [f"{T}#0", f"{T}#1"]
        # and the segment it found is the one read (it holds the batch of one): no Query of the segments
        assert not [c for c in calls.calls if c.operation == "Query" and c.params["TableName"].endswith("-segments")]
        assert api.call("POST", "/v1/acks", {"group": "risk", "receipt": b["receipt"]}, key=setup["risk"])[0] == 200
    assert got == [f"m{i}" for i in range(4)] and hint(r[0]["queue"]) == 0


def test_a_frontier_past_the_hint_inside_a_segment_still_sees_the_rest(api, setup):
    """A consumer that read part of a segment the hint does not show yet (its frontier is past the
    hint, inside the segment): its lock recorded the segment's end (OffsetModel.bnd), so the next
    pull ranks the queue by it and serves the rest without a probe."""
    r = produce(api, setup["feed"], [{"body": str(i), "key": "k"} for i in range(5)])  # one segment [0, 5)
    q = r[0]["queue"]
    b = pull(api, setup["risk"], wait_ms=0, max=2)
    assert [m["offset"] for m in b["messages"]] == [0, 1]
    assert api.call("POST", "/v1/acks", {"group": "risk", "receipt": b["receipt"]}, key=setup["risk"])[0] == 200
    assert hint(q) == 0
    b = pull(api, setup["risk"], wait_ms=0)
    assert [m["offset"] for m in b["messages"]] == [2, 3, 4]


def test_a_reset_into_a_segment_is_probed_by_the_newest_segment(api, setup):
    """A frontier inside a segment that no lock of the record read (an offset reset, the hint
    behind): neither the hint nor ``bnd`` says it is a boundary, so the probe asks the newest
    segment (one newest-first Query), not the key at the frontier (there is none), and the pull
    serves the rest."""
    r = produce(api, setup["feed"], [{"body": str(i), "key": "k"} for i in range(5)])  # one segment [0, 5)
    q = r[0]["queue"]
    assert api.call("PUT", "/v1/groups/risk/offsets", {"topic": T, "queue": q, "offset": 2})[0] == 200
    assert hint(q) == 0
    calls = CountCalls({"ConsumeFunction"})
    with interceptor.hooked(calls):
        b = pull(api, setup["risk"], wait_ms=0)
    assert [m["offset"] for m in b["messages"]] == [2, 3, 4]
    newest_first = [c for c in _probe_calls(calls) if c.operation == "Query"]
    # the probe's, then the read's lookup of the segment holding offset 2 (LogRepo.read); no BatchGetItem
    # of the key at the frontier (there is no segment starting at 2)
    assert len(newest_first) == 2 and all(f"{T}#{q}" in str(c.params) for c in newest_first)
    assert f"{T}#{q}" not in [p for c in _probe_calls(calls) if c.operation == "BatchGetItem" for p in _probes_of(c)]


def test_backlog_and_reset_bounds_are_exact_with_the_hint_behind(api, setup):
    r = produce(api, setup["feed"], [{"body": str(i), "key": "k"} for i in range(3)])
    q = r[0]["queue"]
    assert hint(q) == 0
    s, o = api.call("GET", "/v1/groups/risk/offsets", query={"topic": T}, key=setup["risk"])
    assert s == 200 and o["backlog"] == 3, o
    assert [x["max_offset"] for x in o["queues"] if x["queue"] == q] == [3]
    # a reset to the true head is inside the bounds (a lagging bound would answer 400)
    s, b = api.call("PUT", "/v1/groups/risk/offsets", {"topic": T, "queue": q, "offset": 3})
    assert s == 200, b
    assert pull(api, setup["risk"], wait_ms=0)["messages"] == []
    assert api.call("PUT", "/v1/groups/risk/offsets", {"topic": T, "queue": q, "offset": 4})[0] == 400


def test_delayed_promotion_takes_its_base_from_the_chain(api, setup, clock):
    """A promotion's transaction is conditioned on ``max_offset <= base``; with the hint behind the
    base is the chain's end, so the promoted message lands right after the id-less ones."""
    produce(api, setup["feed"], [{"body": "later", "key": "k", "delay_ms": 1000}])
    r = produce(api, setup["feed"], [{"body": "a", "key": "k"}, {"body": "b", "key": "k"}])
    q = r[0]["queue"]
    assert hint(q) == 0
    clock.t += 1000
    b = pull(api, setup["risk"], wait_ms=0)
    assert [(m["body"], m["offset"]) for m in b["messages"]] == [("a", 0), ("b", 1), ("later", 2)]
    assert hint(q) == 3  # the promotion's transaction moved the head itself


def test_empty_chain_falls_back_to_the_queue_item_the_mover_made_exact(api, setup, aws):
    """Segments expire (TTL): when a queue's chain is empty the producer's head is the queue item's
    ``max_offset``, which the mover made exact long before; offsets are never handed out twice."""
    r = produce(api, setup["feed"], [{"body": str(i), "key": "k"} for i in range(3)])
    q = r[0]["queue"]
    produce(api, setup["feed"], [{"body": "3", "key": "k"}])
    move(aws)
    assert hint(q) == 4
    for item in SegmentModel.query(f"{T}#{q}"):
        item.delete()  # every segment expired
    assert LogRepo.head(T, q) == 4
    assert produce(api, setup["feed"], [{"body": "x", "key": "k"}])[0]["offset"] == 4


def test_mover_late_twice_out_of_order_and_only_for_puts_alone(api, setup, aws):
    """The mover's writes are conditional on ``max_offset < end``: a batch applied twice, in reverse,
    or an older batch after a newer one never moves a head back. Segments whose transaction moved
    the head (messages with ids) cost no write at all."""
    produce(api, setup["feed"], [{"body": str(i), "key": "k"} for i in range(2)])
    r = produce(api, setup["feed"], [{"body": "2", "key": "k"}])
    q = r[0]["queue"]
    recs = segment_records(aws)
    assert len(recs) == 2
    w = Writes()
    with interceptor.hooked(w):
        assert move(aws, recs[1:])["moved"] == 1  # the newer batch first
        assert hint(q) == 3
        assert move(aws, recs[:1])["moved"] == 0  # then the older one: no move back
        assert move(aws, list(reversed(recs)) * 2)["moved"] == 0
    assert hint(q) == 3
    assert w.n == 3  # one conditional UpdateItem per queue per batch
    # with ids: the transaction moved the head, the mover writes nothing
    produce(api, setup["feed"], [{"id": "i1", "body": "3", "key": "k"}])
    assert hint(q) == 4
    w = Writes()
    with interceptor.hooked(w):
        assert move(aws, segment_records(aws)[2:])["queues"] == 0
    assert w.n == 0


def test_a_deleted_topics_queue_item_is_not_recreated(api, setup, aws):
    produce(api, setup["feed"], [{"body": "a", "key": "k"}])
    recs = segment_records(aws)
    for m in QueueModel.scan():
        m.delete()
    assert move(aws, recs)["moved"] == 0
    assert list(QueueModel.scan()) == []


def test_producers_racing_the_mover_keep_the_log_contiguous(api, setup, aws):
    """Producers (threads, without ids) and the mover (applying whatever the stream shows so far,
    again and again) racing on one queue: every message gets its own offset, contiguous, the hint
    never passes the chain's end, and a final mover pass makes it exact."""
    import json

    from lakeq.admin.auth import Principal
    from lakeq.produce import service as produce_service

    results: list[dict] = []
    lock = threading.Lock()
    stop = threading.Event()

    def producer(n):
        for i in range(6):
            with interceptor.acting_as("ProduceFunction"):
                out = produce_service.produce(Principal(False, "feed"), T, json.dumps(
                    {"producer": "feed", "messages": [{"body": f"{n}-{i}", "key": "k"}]}))
            with lock:
                results.extend(out["results"])

    ahead = []

    def heads():
        while not stop.is_set():
            move(aws)
            q = results[0]["queue"] if results else None
            if q is not None:
                h = hint(q)
                if h > LogRepo.head(T, q, fresh=True):
                    ahead.append(h)

    ts = [threading.Thread(target=producer, args=(n,)) for n in range(3)]
    mv = threading.Thread(target=heads)
    mv.start()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    stop.set()
    mv.join()
    q = results[0]["queue"]
    assert ahead == []
    assert sorted(r["offset"] for r in results) == list(range(18))
    move(aws)
    assert hint(q) == 18 == LogRepo.head(T, q, fresh=True)
    got = []
    receipt = None
    while True:
        b = pull(api, setup["risk"], wait_ms=0, **({"ack": receipt} if receipt else {}))
        if not b["messages"]:
            break
        got += [m["offset"] for m in b["messages"]]
        receipt = b["receipt"]
    assert got == list(range(18))


def _probe_calls(calls):
    """The pull's chain probes: BatchGetItems of segment keys (at frontiers equal to the hint) and
    newest-first one-item Queries (frontiers past the hint)."""
    out = []
    for c in calls.calls:
        if c.operation == "BatchGetItem" and any(t.endswith("-segments") for t in c.params.get("RequestItems", {})):
            out.append(c)
        elif (c.operation == "Query" and c.params.get("TableName", "").endswith("-segments")
              and c.params.get("Limit") == 1 and c.params.get("ScanIndexForward") is False):
            out.append(c)
    return out


def _probes_of(c):
    return [k["pq"]["S"] for r in c.params["RequestItems"].values() for k in r["Keys"]]


def _probes(calls):
    """The queues (``pq``) probed, one entry a queue a probe round."""
    out = []
    for c in _probe_calls(calls):
        if c.operation == "BatchGetItem":
            out += [k["pq"]["S"] for t, r in c.params["RequestItems"].items() for k in r["Keys"]]
        else:
            out.append(c.params["ExpressionAttributeValues"][":0"]["S"] if ":0" in c.params.get(
                "ExpressionAttributeValues", {}) else str(c.params.get("ExpressionAttributeValues")))
    return out


def _rounds(calls):
    return [c for c in calls.calls if c.operation == "BatchGetItem"  # (not a waiting round's marker + topic)
            and any(t.endswith("-queues") for t in c.params.get("RequestItems", {}))
            and not any(t.endswith("-topics") for t in c.params.get("RequestItems", {}))]


def test_an_idle_long_poll_probes_all_its_queues_in_one_call_a_round(api, setup, clock, monkeypatch):
    """Each full round of a long poll probes every lagging queue's chain in one BatchGetItem of the
    segment keys at their frontiers (``LogRepo.segments_at``), not one Query a queue: a 64-queue
    topic's empty pull made 64 sequential calls (bench/idle.py: 1.5 s of a fallback pull, 17× SQS a
    month). Since issue 33 a poll reads everything (and probes) only in the rounds around its topic's
    last bump (its change marker's window; the head mover may be behind then); afterwards a round
    reads the marker alone (tests/integration/test_idle_poll.py). Time is the fake clock, moved by
    the poll's own sleeps."""
    from lakeq.consume import reader
    monkeypatch.setattr(reader.time, "sleep",
                        this_thread_sleep(lambda s: setattr(clock, "t", clock.t + round(s * 1000))))
    produce(api, setup["feed"], [{"body": "a", "key": "k"}])
    b = pull(api, setup["risk"], wait_ms=0)
    assert [m["body"] for m in b["messages"]] == ["a"]
    ack = api.call("POST", "/v1/acks", {"group": "risk", "receipt": b["receipt"]}, key=setup["risk"])
    assert ack[0] == 200, ack
    calls = CountCalls({"ConsumeFunction"})
    with interceptor.hooked(calls):
        assert pull(api, setup["risk"], wait_ms=20000)["messages"] == []
    rounds = len(_rounds(calls))
    assert 2 <= rounds <= 8  # 50, 100, 200, 400 ms... rounds while the bump's window is open, one after
    assert [c.operation for c in _probe_calls(calls)] == ["BatchGetItem"] * rounds  # one call a round
    assert sorted(_probes(calls)) == sorted([f"{T}#0", f"{T}#1"] * rounds)  # both queues each round
    markers = [c for c in calls.calls if c.operation == "GetItem" and "#w" in repr(c.params)]
    assert len(markers) >= 15  # then one marker read a second


def test_a_message_appended_during_a_long_poll_is_found_within_a_second_without_the_mover(
        api, setup, clock, monkeypatch):
    """The head mover never runs here: a message produced while a long poll waits (its hint stays
    behind) is found by the next round's probe, within a second of fake time of its produce."""
    from lakeq.consume import reader
    sleeps, produced_at = [], []

    def sleep(s):
        clock.t += round(s * 1000)
        sleeps.append(s)
        if len(sleeps) == 6:  # ~1.25 s into the poll, between probe rounds
            produce(api, setup["feed"], [{"body": "late", "key": "k"}])
            produced_at.append(clock.t)

    monkeypatch.setattr(reader.time, "sleep", this_thread_sleep(sleep))
    start = clock.t
    b = pull(api, setup["risk"], wait_ms=20000)
    assert [m["body"] for m in b["messages"]] == ["late"]
    assert hint(b["messages"][0]["queue"]) == 0  # found by a probe, not by the mover
    assert produced_at and clock.t - produced_at[0] <= 1000, (produced_at[0] - start, clock.t - start)


def test_a_pull_with_probe_false_trusts_the_hints(api, setup, aws):
    """``probe=false`` (a safety-net look: the WebSocket client's fallback pull, issue 16): no chain is
    probed, so a message the head mover has not shown yet waits for a later pull; once the mover ran,
    the same pull serves it. A bad value is a 400 that changes nothing."""
    produce(api, setup["feed"], [{"body": "a", "key": "k"}])
    calls = CountCalls({"ConsumeFunction"})
    with interceptor.hooked(calls):
        assert pull(api, setup["risk"], wait_ms=0, probe="false")["messages"] == []
    assert _probe_calls(calls) == [] and len(_rounds(calls)) == 1
    for bad in ("no", "False", "0", ""):
        s, b = api.call("GET", P, query={"group": "risk", "probe": bad}, key=setup["risk"])
        assert (s, b["error"]["code"]) == (400, "bad_request"), (bad, s, b)
    move(aws)
    b = pull(api, setup["risk"], wait_ms=0, probe="false")
    assert [m["body"] for m in b["messages"]] == ["a"]
    assert pull(api, setup["risk"], wait_ms=0, probe="true", ack=b["receipt"])["messages"] == []
