"""The store calls of a produce and of a pull + ack in a steady state (issue 33 item 2), counted call
by call at batches of 1 and 10: which operation, on which table, strongly consistent or not — what
DynamoDB bills (request units in docs/benchmarks.md, "Queue"). The batches go to one queue (one
key), so every pull after the first folds its piggybacked ack into its lock
(:func:`lakeq.consume.reader.fold`)."""
from __future__ import annotations

import pytest

from infra.local import interceptor
from lakeq.store import queue_log

T = "/v1/topics/quotes/messages"


class Calls:
    """Hook: each DynamoDB call made as a function, as (operation, table, strongly consistent); a call
    over several tables (BatchGetItem) names them ``"a,b"`` with a tuple of each one's consistency."""

    def __init__(self):
        self.calls: list[tuple[str, str, bool]] = []

    def before(self, call):
        pass

    def after(self, call, response):
        if call.service == "dynamodb" and call.function is not None:
            p = call.params
            tables = list(p.get("RequestItems") or {}) or [p.get("TableName", "")]
            each = tuple(bool(r.get("ConsistentRead")) for r in (p.get("RequestItems") or {}).values())
            consistent = each if len(each) > 1 else bool(p.get("ConsistentRead")) or any(each)
            self.calls.append((call.operation, ",".join(t.rsplit("-", 1)[-1] for t in tables), consistent))
        return response

    def __enter__(self):
        interceptor.add(self)
        return self

    def __exit__(self, *exc):
        interceptor.remove(self)


def drain_folded(api, setup, receipt: str, batch: int) -> list[int]:
    """Pull group risk's batches of ``batch`` folded with the ack of the one before (``receipt``
    first) until one comes back empty: the offsets served, in order."""
    seen = []
    while True:
        s, b = api.call("GET", T, query={"group": "risk", "max": batch, "ack": receipt}, key=setup["risk"])
        assert s == 200
        if not b["messages"]:
            return seen
        seen += [m["offset"] for m in b["messages"]]
        receipt = b["receipt"]


@pytest.mark.parametrize("batch", [1, 10])
def test_a_steady_produce_and_pull_ack_make_these_calls(api, setup, clock, frozen_caches, batch):
    def produce():
        s, b = api.call("POST", T, {"producer": "feed", "messages": [{"body": "x" * 100, "key": "k"}
                                                                     for _ in range(batch)]}, key=setup["feed"])
        assert s == 200, b

    produce()  # the first produce bumps the topic's change marker
    produces = []
    for _ in range(3):
        with Calls() as c:
            produce()
        produces.append(c.calls)
    # a produce: the topic item and the queue's head (the newest segment), both eventually
    # consistent, and the segment's put
    assert produces == [[("GetItem", "topics", False), ("Query", "segments", False),
                         ("PutItem", "segments", False)]] * 3, produces

    s, b = api.call("GET", T, query={"group": "risk", "max": batch}, key=setup["risk"])  # ranked
    assert s == 200 and len(b["messages"]) == batch
    pulls = []
    for _ in range(2):
        with Calls() as c:
            s, b = api.call("GET", T, query={"group": "risk", "max": batch, "ack": b["receipt"]}, key=setup["risk"])
        assert s == 200 and len(b["messages"]) == batch
        pulls.append(c.calls)
    # a pull with the previous batch's ack, folded: the segments from its frontier, one conditional
    # UpdateItem (the ack and the next lock); no topic item read, and no record read: the record is
    # as this container's lock write left it (UpdateItem's ALL_NEW answer; the write is conditioned
    # on it as read)
    assert pulls == [[("Query", "segments", False), ("UpdateItem", "offsets", False)]] * 2, pulls
    # served by another container (no copy of the record): the record read eventually consistently
    queue_log._WROTE.clear()
    with Calls() as c:
        s, b = api.call("GET", T, query={"group": "risk", "max": batch, "ack": b["receipt"]}, key=setup["risk"])
    assert s == 200 and len(b["messages"]) == batch
    assert c.calls == [("GetItem", "offsets", False), ("Query", "segments", False),
                       ("UpdateItem", "offsets", False)], c.calls


@pytest.mark.parametrize("stale", ["absent", "before_the_lock", "before_a_renew"])
def test_a_fold_that_reads_a_stale_record_acks_alone_and_serves_once(api, setup, clock, monkeypatch, stale):
    """The folded pull reads the record eventually consistently (issue 33 item 2): a stale answer
    (no record yet; the record before the receipt's lock; the receipt's lock before a renew moved
    the record) never writes: the settle finds the receipt stale, or the write's condition (the
    record exactly as read) fails, and the ack is settled on its own from a consistent read, the
    pull going on as an unfolded one. Every message is served once, in order, and the receipt is
    acknowledged."""
    from lakeq.consume import reader as logread
    from lakeq.store.models import OffsetModel
    from lakeq.store.offsets import OffsetRepo

    s, _ = api.call("POST", T, {"producer": "feed", "messages": [{"body": f"m{i}", "key": "k"} for i in range(6)]},
                    key=setup["feed"])
    assert s == 200
    owner = OffsetRepo.owner("risk", "quotes")
    s, b1 = api.call("GET", T, query={"group": "risk", "max": 1}, key=setup["risk"])
    q = b1["messages"][0]["queue"]
    s, b = api.call("GET", T, query={"group": "risk", "max": 1, "ack": b1["receipt"]}, key=setup["risk"])
    seen = [b1["messages"][0]["offset"], b["messages"][0]["offset"]]
    snapshot = None
    if stale == "before_the_lock":
        snapshot = OffsetModel(owner, q, committed_offset=1, lock_ts=0, lock_until=0, last_consumed_at=0)
    elif stale == "before_a_renew":
        snapshot = OffsetRepo.get(owner, q)  # holds the receipt's lock; then a renew moves the record
        assert api.call("POST", "/v1/visibility", {"group": "risk", "receipt": b["receipt"],
                                                   "visibility_timeout_ms": 5000}, key=setup["risk"])[0] == 200
    writes = []
    real_write = OffsetRepo.write_state.__func__

    def write_state(cls, *a, **k):
        writes.append(ok := real_write(cls, *a, **k))
        return ok

    queue_log._WROTE.clear()  # another container: no copy of the record, it reads it (stale)
    monkeypatch.setattr(logread.OffsetRepo, "peek", staticmethod(lambda o, qq: snapshot))
    monkeypatch.setattr(OffsetRepo, "write_state", classmethod(write_state))
    s, b2 = api.call("GET", T, query={"group": "risk", "max": 1, "ack": b["receipt"]}, key=setup["risk"])
    assert s == 200 and len(b2["messages"]) == 1, b2
    if stale == "before_a_renew":
        assert writes[0] is False  # the fold's write, conditioned on the stale record, lost
    seen.append(b2["messages"][0]["offset"])
    monkeypatch.undo()
    # the receipt was acknowledged (a retry of it is remembered: 200), and the rest comes in order, once
    assert api.call("POST", "/v1/acks", {"group": "risk", "receipt": b["receipt"]}, key=setup["risk"])[0] == 200
    seen += drain_folded(api, setup, b2["receipt"], 1)
    assert seen == list(range(6)), seen


@pytest.mark.parametrize("moved", ["renew", "ack"])
def test_a_fold_whose_copy_of_the_record_another_container_moved_acks_alone_and_serves_once(api, setup, clock,
                                                                                           moved):
    """The folded pull takes the record from this container's copy of its last lock write
    (:meth:`OffsetRepo.known`, no read): when another container moved the record since (a renew of
    the receipt's lock, or the receipt acknowledged through ``POST /v1/acks``), the fold's write,
    conditioned on the copy, is lost, and the ack is settled on its own from a consistent read: the
    pull goes on as an unfolded one. Every message is served once, in order."""
    from lakeq.store.offsets import OffsetRepo

    s, _ = api.call("POST", T, {"producer": "feed", "messages": [{"body": f"m{i}", "key": "k"} for i in range(6)]},
                    key=setup["feed"])
    assert s == 200
    owner = OffsetRepo.owner("risk", "quotes")
    s, b1 = api.call("GET", T, query={"group": "risk", "max": 1}, key=setup["risk"])
    q = b1["messages"][0]["queue"]
    s, b = api.call("GET", T, query={"group": "risk", "max": 1, "ack": b1["receipt"]}, key=setup["risk"])
    seen = [b1["messages"][0]["offset"], b["messages"][0]["offset"]]
    copy = queue_log._WROTE[(owner, q)]
    assert int(copy.committed_offset) == seen[1]  # the copy holds the receipt's lock
    if moved == "renew":
        s, _ = api.call("POST", "/v1/visibility", {"group": "risk", "receipt": b["receipt"],
                                                   "visibility_timeout_ms": 5000}, key=setup["risk"])
    else:
        s, _ = api.call("POST", "/v1/acks", {"group": "risk", "receipt": b["receipt"]}, key=setup["risk"])
    assert s == 200
    queue_log._WROTE[(owner, q)] = copy  # the write was another container's: this one's copy stays
    s, b2 = api.call("GET", T, query={"group": "risk", "max": 1, "ack": b["receipt"]}, key=setup["risk"])
    assert s == 200 and len(b2["messages"]) == 1, b2
    seen.append(b2["messages"][0]["offset"])
    assert api.call("POST", "/v1/acks", {"group": "risk", "receipt": b["receipt"]}, key=setup["risk"])[0] == 200
    seen += drain_folded(api, setup, b2["receipt"], 1)
    assert seen == list(range(6)), seen


def test_a_copy_of_the_record_is_not_used_once_its_lock_expired(api, setup, clock):
    """A copy whose lock is no longer live (another consumer may lock the queue now) is not used:
    the fold reads the record."""
    from lakeq.store.offsets import OffsetRepo

    s, _ = api.call("POST", T, {"producer": "feed", "messages": [{"body": f"m{i}", "key": "k"} for i in range(4)]},
                    key=setup["feed"])
    s, b = api.call("GET", T, query={"group": "risk", "max": 1, "visibility_timeout_ms": 1000}, key=setup["risk"])
    owner = OffsetRepo.owner("risk", "quotes")
    q = b["messages"][0]["queue"]
    assert (owner, q) in queue_log._WROTE
    now = int(queue_log._WROTE[(owner, q)].lock_until)
    assert OffsetRepo.known(owner, q, now) is None and (owner, q) not in queue_log._WROTE


@pytest.mark.parametrize("container", ["same", "another"])
def test_a_fold_on_a_drained_queue_reads_one_segment_query(api, setup, clock, frozen_caches, container):
    """The pull whose ack finds its queue drained (the previous lock ended at a segment's end): one
    Query from the frontier finds nothing, and none asks for a segment around the frontier — the
    frontier is the end of the newest segment the lock read (the record's ``bnd``, or what this
    container read there), so a boundary. Then the ack alone, then the ranked pull."""
    for _ in range(2):
        s, _ = api.call("POST", T, {"producer": "feed", "messages": [{"body": "x", "key": "k"} for _ in range(3)]},
                        key=setup["feed"])
        assert s == 200
    s, b = api.call("GET", T, query={"group": "risk", "max": 3}, key=setup["risk"])
    s, b = api.call("GET", T, query={"group": "risk", "max": 3, "ack": b["receipt"]}, key=setup["risk"])
    assert [m["offset"] for m in b["messages"]] == [3, 4, 5]
    if container == "another":  # a pull served by a container that never read this queue's segments
        queue_log._ENDS.clear()  # nor wrote its lock
        queue_log._WROTE.clear()
    with Calls() as c:
        s, e = api.call("GET", T, query={"group": "risk", "max": 3, "ack": b["receipt"]}, key=setup["risk"])
    assert s == 200 and e["messages"] == []
    first_write = [op for op, _, _ in c.calls].index("UpdateItem")
    record = [("GetItem", "offsets", False)] if container == "another" else []
    assert c.calls[:first_write + 1] == record + [("Query", "segments", False),
                                                  ("UpdateItem", "offsets", False)], c.calls


def test_a_produce_whose_eventual_topic_read_misses_reads_it_consistently(api, setup, monkeypatch):
    """The produce reads the topic item eventually consistently: a read that finds no topic (an
    eventually consistent read right after the topic was made may) is confirmed by a strongly
    consistent one before answering 404, so a topic just made is never refused."""
    from lakeq.store import catalog

    real = catalog.TopicRepo.get_any
    monkeypatch.setattr(catalog.TopicRepo, "get_any",
                        staticmethod(lambda name, consistent=True: real(name, True) if consistent else None))
    with Calls() as c:
        s, b = api.call("POST", T, {"producer": "feed", "messages": [{"body": "x"}]}, key=setup["feed"])
    assert s == 200, b
    assert ("GetItem", "topics", True) in c.calls, c.calls
    s, b = api.call("POST", "/v1/topics/nothere/messages", {"producer": "feed", "messages": [{"body": "x"}]},
                    key=setup["feed"])
    assert s in (403, 404), b


@pytest.mark.parametrize("container", ["same", "another"])
def test_a_fold_whose_frontier_is_inside_a_segment_reads_one_segment_query(api, setup, clock, frozen_caches,
                                                                          container):
    """Batches that end mid-segment (segments of 3, pulls of 2): the fold's frontier lies inside the
    newest segment this container read there, so its one forward Query starts at that segment's
    base (two segments, one Query) instead of a Query from the frontier and another, newest first,
    for the segment around it. A container that did not read it asks for both, as before. Every
    message is served once, in order."""
    for _ in range(3):
        s, _ = api.call("POST", T, {"producer": "feed", "messages": [{"body": "x", "key": "k"} for _ in range(3)]},
                        key=setup["feed"])
        assert s == 200
    s, b = api.call("GET", T, query={"group": "risk", "max": 2}, key=setup["risk"])
    seen = [m["offset"] for m in b["messages"]]
    if container == "another":
        queue_log._SPANS.clear()
    with Calls() as c:
        s, b = api.call("GET", T, query={"group": "risk", "max": 2, "ack": b["receipt"]}, key=setup["risk"])
    seen += [m["offset"] for m in b["messages"]]
    queries = [call for call in c.calls if call[0] == "Query"]
    assert queries == [("Query", "segments", False)] * (1 if container == "same" else 2), c.calls
    seen += drain_folded(api, setup, b["receipt"], 2)
    assert seen == list(range(9)), seen


def test_a_lock_in_the_general_form_keeps_no_copy_of_the_record(api, setup, clock):
    """Only a lock in the simple form (no ``settle``: a record of ~1 KiB) is kept as the container's
    copy: a lock that serves a released message again alongside fresh ones (the general form) is
    not, and the fold that acknowledges it reads the record."""
    from lakeq.store.offsets import OffsetRepo

    s, _ = api.call("POST", T, {"producer": "feed", "messages": [{"body": f"m{i}", "key": "k"} for i in range(6)]},
                    key=setup["feed"])
    s, b = api.call("GET", T, query={"group": "risk", "max": 2}, key=setup["risk"])
    owner, q = OffsetRepo.owner("risk", "quotes"), b["messages"][0]["queue"]
    assert (owner, q) in queue_log._WROTE  # a simple-form lock
    first = b["messages"][0]["offset"]
    s, _ = api.call("POST", "/v1/acks", {"group": "risk", "receipt": b["receipt"], "release": [first],
                                         "accept": [b["messages"][1]["offset"]]}, key=setup["risk"])
    assert s == 200
    s, b = api.call("GET", T, query={"group": "risk", "max": 2}, key=setup["risk"])
    assert b["messages"][0]["offset"] == first
    record = OffsetRepo.get(owner, q)
    assert record.settle is not None and (owner, q) not in queue_log._WROTE
