"""Issue 33 item 1, the SQS endpoint's ReceiveMessage with WaitTimeSeconds: its waiting rounds read the
topic's change marker (one GetItem, as the native long poll's do: ``lakeq.consume.reader._wait_for_change``)
instead of running the whole receive again every 50 ms doubling to 500 ms (the copy of the queue items
when it is young, the consumer's records, the chains' probe and the items read again each round).
The marker comes with the copy of the queue items (same BatchGetItem, as old as they are).

Time is the fake clock, moved by the poll's own sleeps; the container's copies (the queue items' 1 s,
the topic's 5 s, the keys') expire on the same fake clock. The count test failed on the code before
(42 store calls for an idle 5-s receive of a 4-queue SQS queue: 14 rounds of a Query and two
BatchGetItems; 7 now).
"""
from __future__ import annotations

import pytest

from lakeq.sqs import permissions as sqs_perm
from tests.crash import CountCalls
from tests.handlers import this_thread_sleep
from tests.integration.sqs_harness import h, sqs  # noqa: F401 (fixtures)
from tests.integration.test_sqs_endpoint import make_client


@pytest.fixture
def fake_time(clock, monkeypatch):
    """The long poll's sleeps move the fake clock, and the container's copies expire on it;
    ``fake_time.during(n)`` (settable) runs after the n-th sleep."""
    from lakeq.admin import auth as lq_auth
    from lakeq.consume import reader
    from lakeq.store import queue_log

    class T:
        n = 0
        during = None

    def sleep(s):
        clock.t += max(1, round(s * 1000))
        T.n += 1
        if T.during is not None:
            T.during(T.n)
    monkeypatch.setattr(reader.time, "sleep", this_thread_sleep(sleep))
    for mod, name in ((lq_auth, "monotonic"), (sqs_perm, "monotonic"), (queue_log, "_monotonic")):
        monkeypatch.setattr(mod, name, lambda: clock.t / 1000)
    reader.forget_probes()
    yield T
    reader.forget_probes()


def test_an_idle_5_s_receive_waits_on_the_change_marker(h, sqs, clock, fake_time):  # noqa: F811
    """An empty queue (4 lakeq queues): one full round (the records' Query, the drained queues' probe,
    the queue items with the marker in one BatchGetItem: the warm-up's copy ranked, then read again),
    then one GetItem of the marker a second: 7 calls. Before: every round ran the whole receive (42)."""
    url = sqs.create_queue(QueueName="idle")["QueueUrl"]
    assert "Messages" not in sqs.receive_message(QueueUrl=url, WaitTimeSeconds=0)  # warm: caches, as on a warm Lambda
    start = clock.t
    with CountCalls({"SqsFunction"}) as c:
        got = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=5)
    assert "Messages" not in got and clock.t - start >= 5000
    ops = [x.operation for x in c.calls]
    assert len(ops) <= 7, ops
    assert ops.count("GetItem") >= 4 and ops.count("Query") == 1, ops


def test_a_message_sent_while_a_receive_waits_is_returned_by_it_within_a_second(h, sqs, clock, fake_time):  # noqa: F811
    """The receive is in its quiet waiting rounds (marker reads only) when another client sends: the
    send bumps the marker, the next round sees it moved and runs the receive again (reading the queue
    items afresh, not the copy), and the same receive returns the message within a second."""
    url = sqs.create_queue(QueueName="late")["QueueUrl"]
    make_client("feed", "producer", ["late"])
    feed = h.client("feed")
    assert "Messages" not in sqs.receive_message(QueueUrl=url, WaitTimeSeconds=0)
    clock.t += 60_000  # the topic quiet, the copies expired
    sent = []

    def during(n):
        if n == 2:  # ~2 s into the receive, in its waiting rounds
            feed.send_message(QueueUrl=url, MessageBody="late")
            sent.append(clock.t)
    fake_time.during = during
    start = clock.t
    got = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=20)
    assert [m["Body"] for m in got["Messages"]] == ["late"]
    assert sent and sent[0] - start >= 1000
    assert clock.t - sent[0] <= 1000, (sent[0] - start, clock.t - start)


def test_a_second_send_the_container_did_not_signal_is_still_returned(h, sqs, clock, fake_time):  # noqa: F811
    """Two sends 200 ms apart from one container: the second bumps no marker. A receive that starts
    after the first was taken waits on the marker and still returns the second within a second."""
    url = sqs.create_queue(QueueName="twice")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="one")
    m = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=0)["Messages"][0]
    sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    sent = []

    def during(n):
        if n == 1:
            clock.t += 200
            sqs.send_message(QueueUrl=url, MessageBody="two")
            sent.append(clock.t)
    fake_time.during = during
    got = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=20)
    assert [m["Body"] for m in got["Messages"]] == ["two"]
    assert clock.t - sent[0] <= 1000


def test_a_message_another_receiver_makes_visible_while_a_receive_waits_is_returned_by_it(h, sqs, clock, fake_time):  # noqa: F811
    """Review 33 (B): no send bumps the marker when another receiver's lock ends early: a
    ChangeMessageVisibility to 0 makes the message visible again at once (so does a DeleteMessage of
    a batch with more messages behind it on the same lakeq queue). SQS answers a waiting ReceiveMessage as soon
    as a message is visible; waiting on the marker alone, the receive answered nothing at its
    deadline (20 s) although the message was visible from the second second. While a queue it saw
    is locked by another receiver, the receive runs its full rounds (50 ms doubling to 500 ms, as
    before the marker) and returns the message within a second of the release."""
    url = sqs.create_queue(QueueName="nack")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="m")
    held = sqs.receive_message(QueueUrl=url, VisibilityTimeout=60)["Messages"]
    clock.t += 5000  # the sends' bump long settled
    released = []

    def during(k):
        if k == 2:
            sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=held[0]["ReceiptHandle"], VisibilityTimeout=0)
            released.append(clock.t)
    fake_time.during = during
    got = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=20)
    assert released and [m["Body"] for m in got.get("Messages", [])] == ["m"], clock.t - released[0]
    assert clock.t - released[0] <= 1000, clock.t - released[0]
