"""Issue 14, item 4 (the SQS edges): PurgeQueue and delayed messages, well-formed XML answers
whatever a body holds, a linear query-protocol batch parser, and no 5xx for a malformed but signed
request (hypothesis over every action's members, both protocols)."""
from __future__ import annotations

import pytest

from lakeq import sqs_service
from tests.history import path
from tests.integration.sqs_harness import Harness, fake_auth


@pytest.fixture
def h(aws, monkeypatch):
    monkeypatch.setattr(sqs_service, "authenticate_request", fake_auth)
    return Harness()


@pytest.fixture
def sqs(h):
    return h.client("admin")


def receive_all(sqs, url, rounds=6):
    got = []
    for _ in range(rounds):
        got += sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=60).get("Messages", [])
    return got


# --- PurgeQueue ---------------------------------------------------------------------------------------
def test_purge_also_purges_delayed_messages_already_due(sqs, clock):
    url = sqs.create_queue(QueueName="p")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="now")
    for i in range(3):
        sqs.send_message(QueueUrl=url, MessageBody=f"due{i}", DelaySeconds=1 + i)
    clock.t += 10_000  # all due, none promoted yet (nobody pulled)
    sqs.purge_queue(QueueUrl=url)
    assert receive_all(sqs, url) == []
    sqs.send_message(QueueUrl=url, MessageBody="after")
    assert [m["Body"] for m in receive_all(sqs, url)] == ["after"]


def test_purge_keeps_delayed_messages_not_yet_due_for_sqs_and_other_groups(api, sqs, clock):
    """lakeq's deliberate difference (docs/api.md PurgeQueue): a delayed message not yet due belongs
    to the topic (every group reads it), so PurgeQueue keeps it; one already due is purged."""
    url = sqs.create_queue(QueueName="p2")["QueueUrl"]
    s, c = api.call("POST", "/v1/clients", {"name": "other", "role": "consumer", "topics": ["p2"]})
    assert s == 201
    sqs.send_message(QueueUrl=url, MessageBody="due", DelaySeconds=1)
    sqs.send_message(QueueUrl=url, MessageBody="later", DelaySeconds=60)
    clock.t += 2_000
    sqs.purge_queue(QueueUrl=url)
    clock.t += 60_000
    assert [m["Body"] for m in receive_all(sqs, url)] == ["later"]
    bodies = []
    for _ in range(8):
        s, b = api.call("GET", path("p2"), query={"group": "other", "max": 100}, key=c["api_key"])
        assert s == 200, b
        bodies += [m["body"] for m in b["messages"]]
        if b.get("receipt"):
            api.call("POST", "/v1/acks", {"group": "other", "receipt": b["receipt"]}, key=c["api_key"])
    assert sorted(bodies) == ["due", "later"]
