"""Delayed messages keep their produce order (issue 9 review): a request's messages due at the same
millisecond join their queue in request order (not id order), so a key's messages — and an SQS FIFO
group's, with the queue's DelaySeconds — stay in order."""
from __future__ import annotations

import time

from tests.integration.test_delayed import produce, pull
from tests.integration.test_sqs_endpoint import drain, h, sqs  # noqa: F401


def test_a_keys_delayed_messages_keep_request_order(api, setup, clock):
    ids = ["z", "a", "m", "b"]
    s, b = produce(api, setup["feed"], [{"id": i, "body": i, "key": "k", "delay_ms": 1000} for i in ids])
    assert s == 200 and len({r["deliver_at"] for r in b["results"]}) == 1
    clock.t += 1000
    s, got = pull(api, setup["risk"])
    assert s == 200 and [m["id"] for m in got["messages"]] == ids


def test_fifo_queue_delay_seconds_keeps_group_order(sqs):  # noqa: F811
    url = sqs.create_queue(QueueName="slow.fifo", Attributes={"FifoQueue": "true", "DelaySeconds": "1"})["QueueUrl"]
    sqs.send_message_batch(QueueUrl=url, Entries=[
        {"Id": str(i), "MessageBody": f"m{i}", "MessageGroupId": "g", "MessageDeduplicationId": f"d{i}"}
        for i in range(10)])
    time.sleep(1.3)
    assert [m["Body"] for m in drain(sqs, url)] == [f"m{i}" for i in range(10)]
