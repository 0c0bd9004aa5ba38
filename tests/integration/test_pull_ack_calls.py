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
    """Hook: each DynamoDB call made as a function, as (operation, table, strongly consistent)."""

    def __init__(self):
        self.calls: list[tuple[str, str, bool]] = []

    def before(self, call):
        pass

    def after(self, call, response):
        if call.service == "dynamodb" and call.function is not None:
            p = call.params
            tables = list(p.get("RequestItems") or {}) or [p.get("TableName", "")]
            consistent = bool(p.get("ConsistentRead")) or any(r.get("ConsistentRead")
                                                              for r in (p.get("RequestItems") or {}).values())
            self.calls.append((call.operation, ",".join(t.rsplit("-", 1)[-1] for t in tables), consistent))
        return response

    def __enter__(self):
        interceptor.add(self)
        return self

    def __exit__(self, *exc):
        interceptor.remove(self)


@pytest.fixture
def still(monkeypatch):
    """The container's copies never age here (a test must not depend on the machine's speed)."""
    monkeypatch.setattr(queue_log, "_monotonic", lambda: 1_000.0)


@pytest.mark.parametrize("batch", [1, 10])
def test_a_steady_produce_and_pull_ack_make_these_calls(api, setup, clock, still, batch):
    def produce():
        s, b = api.call("POST", T, {"producer": "feed", "messages": [{"body": "x" * 100, "key": "k"}
                                                                     for _ in range(batch)]}, key=setup["feed"])
        assert s == 200, b

    produce()  # the first produce reads the topic item (and bumps the topic's change marker)
    produces = []
    for _ in range(3):
        with Calls() as c:
            produce()
        produces.append(c.calls)
    # a produce: the queue's head (the newest segment, eventually consistent) and the segment's put;
    # the topic item comes from the container's copy (read < 1.5 s ago), not a GetItem a request
    assert produces == [[("Query", "segments", False), ("PutItem", "segments", False)]] * 3, produces

    s, b = api.call("GET", T, query={"group": "risk", "max": batch}, key=setup["risk"])  # ranked
    assert s == 200 and len(b["messages"]) == batch
    pulls = []
    for _ in range(2):
        with Calls() as c:
            s, b = api.call("GET", T, query={"group": "risk", "max": batch, "ack": b["receipt"]}, key=setup["risk"])
        assert s == 200 and len(b["messages"]) == batch
        pulls.append(c.calls)
    # a pull with the previous batch's ack, folded: the record, the segments from its frontier, one
    # conditional UpdateItem (the ack and the next lock); no topic item read
    assert pulls[0] == pulls[1] and [(o, t) for o, t, _ in pulls[0]] == [
        ("GetItem", "offsets"), ("Query", "segments"), ("UpdateItem", "offsets")], pulls

