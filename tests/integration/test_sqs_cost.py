"""What the SQS endpoint's hot actions cost in store calls (issue 16 item 4), and the behaviour of
settling a lakeq lock's handles together. Each call is named by operation and table, so a second
read of the topic item, a client lookup per request or a write per deleted message shows here
(docs/costs.md "SQS endpoint: store calls per action"; bench/sqs_endpoint.py prices them)."""
from __future__ import annotations

import pytest

from lakeq.log.produce_plan import queue_for_key
from lakeq.sqs import protocol as sp
from tests.crash import CountCalls
from tests.integration.sqs_harness import h, sqs  # noqa: F401 (fixtures)
from tests.integration.test_sqs_endpoint import make_client


def calls_of(fn) -> tuple[list[tuple[str, str]], object]:
    """(operation, table) of each DynamoDB call SqsFunction makes in ``fn()``, in order; conditional
    writes are marked ``?``."""
    with CountCalls({"SqsFunction"}) as c:
        out = fn()
    got = []
    for x in c.calls:
        p = x.params
        table = p.get("TableName") or ",".join(p.get("RequestItems") or {})
        cond = "?" if p.get("ConditionExpression") else ""
        got.append((x.operation + cond, table.rsplit("-", 1)[-1]))
    return got, out


# issue 16 item 3: the head is the newest segment's end (a Query), the put is the only write (the
# SegmentsTable stream's head mover moves the queue item's max_offset)
# a producer's sends and the receives take the topic item from the container's cache (read by the
# warm-up; issue 16 item 4): no GetItem of the topic
SEND = [("Query", "segments"), ("PutItem?", "segments")]
# a queue whose chain is empty (the send's queue is random: the warm-up may not have touched it):
# the head is the queue item's max_offset
SEND_EMPTY_CHAIN = [("Query", "segments"), ("GetItem", "queues"), ("PutItem?", "segments")]
RECEIVE = [("BatchGetItem", "queues"), ("Query", "offsets"), ("Query", "segments"), ("UpdateItem?", "offsets")]
# a receive within HINTS_MAX_AGE_S of the container's last read of the queue items ranks by that copy
# (issue 16 item 4): no BatchGetItem when the copy shows messages on an unlocked queue ...
RECEIVE_FROM_COPY = [("Query", "offsets"), ("Query", "segments"), ("UpdateItem?", "offsets")]
# ... and when it shows none (older than the head mover's last move), the probe of every queue at its
# frontier (one BatchGetItem of segment keys: the frontier the receive's last lock reached is a known
# segment boundary, OffsetModel.bnd) finds the message; the items are read again only when that finds
# nothing either (RECEIVE_EMPTY_FROM_COPY); the segment the probe found is the one read (no Query)
RECEIVE_COPY_PROBED = [("Query", "offsets"), ("BatchGetItem", "segments"), ("UpdateItem?", "offsets")]
RECEIVE_EMPTY_FROM_COPY = [("Query", "offsets"), ("BatchGetItem", "segments"), ("BatchGetItem", "queues")]
# deletes and visibility changes too, while every handle names the copy's incarnation (issue 16 item 4)
SETTLE_ONE = [("UpdateItem?", "offsets")]


@pytest.mark.parametrize("who", ["admin", "clients"])
@pytest.mark.moto  # reads DynamoDB Streams
def test_single_message_send_receive_delete_store_calls(h, frozen_caches, clock, who, aws):
    """One topic read per action (not one in the endpoint and one in the use case), no client
    lookup per request, and deleting the one message of a batch of one is one conditional write.
    The lakeq clock stands still (``clock``): the warm-up's sends bumped the topic's change marker,
    and on a loaded machine more than CHANGE_EVERY_MS of wall time could pass before the counted
    send, which then bumped it again (CI at 3115e95, load ~25: an ``UpdateItem`` of the queues table
    more than counted)."""
    if who == "admin":
        sender = receiver = h.client("admin")
        url = sender.create_queue(QueueName="single")["QueueUrl"]
    else:
        url = h.client("admin").create_queue(QueueName="single")["QueueUrl"]
        make_client("single-p", "producer", ["single"])
        make_client("single-c", "consumer", ["single"])
        sender, receiver = h.client("single-p"), h.client("single-c")
    for _ in range(2):  # warm: the container's caches (clients, the queue's SQS clients)
        sender.send_message(QueueUrl=url, MessageBody="warm")
        m = receiver.receive_message(QueueUrl=url)["Messages"][0]
        receiver.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    calls, _ = calls_of(lambda: sender.send_message(QueueUrl=url, MessageBody="x"))
    # (the admin's sends read the topic item every time: the admin's producer is the queue's SQS
    # client, deleted with the queue, which a stale copy would not know)
    topic = [("GetItem", "topics")] if who == "admin" else []
    assert calls in (topic + SEND, topic + SEND_EMPTY_CHAIN), calls
    # the head mover runs between the send and the receive, as the stream's consumer does on AWS:
    # the hint shows the message, so the receive probes no chain
    from tests.handlers import Context, load_function, segment_records
    load_function("HeadsFunction")({"Records": segment_records(aws)}, Context())
    calls, got = calls_of(lambda: receiver.receive_message(QueueUrl=url, MaxNumberOfMessages=1)["Messages"])
    assert calls == RECEIVE_COPY_PROBED and [m["Body"] for m in got] == ["x"], calls
    calls, _ = calls_of(lambda: receiver.change_message_visibility(QueueUrl=url, ReceiptHandle=got[0]["ReceiptHandle"],
                                                                   VisibilityTimeout=60))
    assert calls == SETTLE_ONE
    calls, _ = calls_of(lambda: receiver.delete_message(QueueUrl=url, ReceiptHandle=got[0]["ReceiptHandle"]))
    assert calls == SETTLE_ONE
    calls, out = calls_of(lambda: receiver.receive_message(QueueUrl=url))
    assert "Messages" not in out and calls == RECEIVE_EMPTY_FROM_COPY, calls
    # deleted, not merely hidden
    attrs = h.client("admin").get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert (attrs["ApproximateNumberOfMessages"], attrs["ApproximateNumberOfMessagesNotVisible"]) == ("0", "0")


@pytest.mark.moto  # reads DynamoDB Streams
def test_receives_rank_by_the_copy_of_the_queue_items_while_it_is_young(sqs, frozen_caches, monkeypatch, aws):
    """A busy queue's receives: the first reads the queue items, the next ones (within
    HINTS_MAX_AGE_S) rank by the container's copy (3 calls, no BatchGetItem); once the copy is older,
    a receive reads them again. Every message once, in the end none left."""
    from lakeq.sqs import messages as sqs_messages
    from lakeq.store import queue_log
    from tests.handlers import Context, load_function, segment_records

    clock = [5_000.0]
    monkeypatch.setattr(queue_log, "_monotonic", lambda: clock[0])
    url = sqs.create_queue(QueueName="busy")["QueueUrl"]
    bodies = [f"m{i}" for i in range(12)]
    for b in bodies:
        sqs.send_message(QueueUrl=url, MessageBody=b)
    load_function("HeadsFunction")({"Records": segment_records(aws)}, Context())  # the hints show them
    seen, shapes = [], []
    for i in range(12):
        if i == 8:
            clock[0] += sqs_messages.HINTS_MAX_AGE_S + 0.01  # the copy expires
        calls, got = calls_of(lambda: sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=1)["Messages"])
        shapes.append([c for c in calls if c[0] != "GetItem"])  # (the first: the client and topic caches)
        sqs.delete_message(QueueUrl=url, ReceiptHandle=got[0]["ReceiptHandle"])
        seen += [m["Body"] for m in got]
    assert sorted(seen) == sorted(bodies)
    assert shapes[0] == RECEIVE and shapes[8] == RECEIVE, shapes
    assert all(c == RECEIVE_FROM_COPY for j, c in enumerate(shapes) if j not in (0, 8)), shapes
    assert "Messages" not in sqs.receive_message(QueueUrl=url)
    assert counts(sqs, url) == ("0", "0")


def test_a_copy_never_hides_a_new_message_nor_delays_a_due_one(sqs, frozen_caches, monkeypatch):
    """Read-after-write with a copy that shows the queues drained: a message sent right after is
    received (the probes find it; the items are read again when they find nothing); a delayed
    message is never served from a copy (items naming delayed messages are not kept), so it comes
    when due; and a DeleteQueue in this container drops the copies."""
    from lakeq.common import clock as lq_clock
    from lakeq.store import queue_log

    monkeypatch.setattr(queue_log, "_monotonic", lambda: 5_000.0)  # the copy never expires by age
    url = sqs.create_queue(QueueName="raw")["QueueUrl"]
    assert "Messages" not in sqs.receive_message(QueueUrl=url)  # the copy: every queue empty
    for i in range(3):
        sqs.send_message(QueueUrl=url, MessageBody=f"n{i}")  # (the head mover does not run)
        got = sqs.receive_message(QueueUrl=url)["Messages"]
        assert [m["Body"] for m in got] == [f"n{i}"]
        sqs.delete_message(QueueUrl=url, ReceiptHandle=got[0]["ReceiptHandle"])
    t0 = lq_clock.now()
    sqs.send_message(QueueUrl=url, MessageBody="later", DelaySeconds=2)
    assert "Messages" not in sqs.receive_message(QueueUrl=url)
    assert not queue_log._HINTS or all(
        "next_due" not in item for _, items in queue_log._HINTS.values() for item in items)
    monkeypatch.setattr(lq_clock, "now", lambda: t0 + 2_100)
    got = sqs.receive_message(QueueUrl=url)["Messages"]
    assert [m["Body"] for m in got] == ["later"]
    sqs.delete_message(QueueUrl=url, ReceiptHandle=got[0]["ReceiptHandle"])
    # sent after the copy was made (it names no delayed message) and due at the next receive: the
    # receive reads the items again (the copy showed nothing) and promotes it then
    assert "Messages" not in sqs.receive_message(QueueUrl=url)
    assert queue_log._HINTS
    sqs.send_message(QueueUrl=url, MessageBody="later2", DelaySeconds=2)
    monkeypatch.setattr(lq_clock, "now", lambda: t0 + 4_300)
    got = sqs.receive_message(QueueUrl=url)["Messages"]
    assert [m["Body"] for m in got] == ["later2"]
    sqs.delete_message(QueueUrl=url, ReceiptHandle=got[0]["ReceiptHandle"])
    assert "Messages" not in sqs.receive_message(QueueUrl=url)  # (a copy again: nothing delayed left)
    assert queue_log._HINTS
    sqs.delete_queue(QueueUrl=url)
    assert not queue_log._HINTS


def counts(sqs, url) -> tuple[str, str]:
    a = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    return a["ApproximateNumberOfMessages"], a["ApproximateNumberOfMessagesNotVisible"]


def test_delete_batch_of_a_whole_lakeq_batch_is_one_write(sqs, frozen_caches):
    url = sqs.create_queue(QueueName="whole")["QueueUrl"]
    sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": f"m{i}"} for i in range(10)])
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert len(got) == 10  # one send request: one lakeq queue, one lakeq batch
    calls, out = calls_of(lambda: sqs.delete_message_batch(QueueUrl=url, Entries=[
        {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got)]))
    assert calls == SETTLE_ONE
    assert len(out["Successful"]) == 10 and not out["Failed"]
    assert counts(sqs, url) == ("0", "0")
    assert "Messages" not in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)


def test_delete_batch_over_two_lakeq_batches_writes_once_per_lock(sqs, frozen_caches):
    url = sqs.create_queue(QueueName="twolocks")["QueueUrl"]
    a, b = "ka", next(k for k in (f"k{i}" for i in range(100)) if queue_for_key(k, 4) != queue_for_key("ka", 4))
    for key in (a, b):
        sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": f"{key}{i}", "MessageGroupId": key}
                                                      for i in range(3)])
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert sorted(m["Body"] for m in got) == sorted(f"{k}{i}" for k in (a, b) for i in range(3))
    calls, out = calls_of(lambda: sqs.delete_message_batch(QueueUrl=url, Entries=[
        {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got)]))
    assert calls == [("UpdateItem?", "offsets"), ("UpdateItem?", "offsets")]
    assert len(out["Successful"]) == 6 and not out["Failed"]
    assert counts(sqs, url) == ("0", "0")


def test_delete_batch_of_part_of_a_lakeq_batch_then_the_rest(sqs, frozen_caches):
    """Part of a batch: one compare-and-set for all of them (read + conditional write); then the
    rest, an invalid handle and the same handle twice in one request."""
    url = sqs.create_queue(QueueName="part")["QueueUrl"]
    sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": f"m{i}"} for i in range(6)])
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert len(got) == 6
    calls, out = calls_of(lambda: sqs.delete_message_batch(QueueUrl=url, Entries=[
        {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got[:3])]))
    assert calls == [("GetItem", "offsets"), ("UpdateItem?", "offsets")]
    assert len(out["Successful"]) == 3
    assert counts(sqs, url) == ("0", "3")
    entries = [{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got[3:])]
    entries += [{"Id": "junk", "ReceiptHandle": "junk"}, {"Id": "again", "ReceiptHandle": got[5]["ReceiptHandle"]}]
    out = sqs.delete_message_batch(QueueUrl=url, Entries=entries)
    assert sorted(s["Id"] for s in out["Successful"]) == ["0", "1", "2", "again"]
    assert [(f["Id"], f["Code"]) for f in out["Failed"]] == [("junk", "ReceiptHandleIsInvalid")]
    assert counts(sqs, url) == ("0", "0")


def test_delete_batch_after_visibility_zero_deletes_the_released_message_too(sqs):
    """A batch whose every handle is deleted, one of them released before (ChangeMessageVisibility
    0): both are deleted, as SQS deletes a message by its latest handle (a whole-batch ack would
    have settled only the one still held and left the released one to be received again)."""
    url = sqs.create_queue(QueueName="released")["QueueUrl"]
    sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": f"m{i}"} for i in range(2)])
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert len(got) == 2
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=got[0]["ReceiptHandle"], VisibilityTimeout=0)
    out = sqs.delete_message_batch(QueueUrl=url, Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
                                                          for i, m in enumerate(got)])
    assert len(out["Successful"]) == 2 and not out["Failed"]
    assert "Messages" not in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)
    assert counts(sqs, url) == ("0", "0")


def test_delete_batch_with_a_handle_outside_its_lakeq_batch(sqs):
    """A handle naming a real lock but an offset that lock did not deliver fails on its own
    (ReceiptHandleIsInvalid); the others of that lock are deleted."""
    url = sqs.create_queue(QueueName="forged")["QueueUrl"]
    sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": f"m{i}"} for i in range(3)])
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    group, receipt, offset = sp.decode_handle(got[0]["ReceiptHandle"])
    forged = sp.encode_handle(group, receipt, offset + 50)
    out = sqs.delete_message_batch(QueueUrl=url, Entries=[
        *({"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got)),
        {"Id": "forged", "ReceiptHandle": forged}])
    assert sorted(s["Id"] for s in out["Successful"]) == ["0", "1", "2"], out
    assert [(f["Id"], f["Code"]) for f in out["Failed"]] == [("forged", "ReceiptHandleIsInvalid")]
    assert counts(sqs, url) == ("0", "0")


def test_delete_batch_with_a_stale_handle_succeeds_and_deletes_by_the_live_one(sqs):
    """A handle whose lock expired and was taken again succeeds and deletes nothing (SQS's rule for
    standard queues); the live handle in the same request deletes it."""
    import time

    url = sqs.create_queue(QueueName="stalebatch", Attributes={"VisibilityTimeout": "1"})["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="x")
    old = sqs.receive_message(QueueUrl=url)["Messages"][0]
    time.sleep(1.2)
    new = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=2)["Messages"][0]
    assert new["MessageId"] == old["MessageId"]
    out = sqs.delete_message_batch(QueueUrl=url, Entries=[{"Id": "old", "ReceiptHandle": old["ReceiptHandle"]}])
    assert [s["Id"] for s in out["Successful"]] == ["old"]
    assert counts(sqs, url) == ("0", "1")  # still in flight under the new lock
    out = sqs.delete_message_batch(QueueUrl=url, Entries=[{"Id": "old", "ReceiptHandle": old["ReceiptHandle"]},
                                                          {"Id": "new", "ReceiptHandle": new["ReceiptHandle"]}])
    assert sorted(s["Id"] for s in out["Successful"]) == ["new", "old"]
    assert counts(sqs, url) == ("0", "0")


def test_a_send_reads_the_queues_locks_at_most_once_a_second_per_container(h, frozen_caches, monkeypatch):
    """A standard queue's send avoids the lakeq queues a receive holds (OffsetRepo.held): from the
    container's copy of the locks while it is at most HELD_MAX_AGE_S old, else one eventually
    consistent Query of the offsets records. A container that sends and never receives pays that
    Query once a second, not once a send (the counts above see only a warm copy)."""
    from lakeq.store import queue_log
    url = h.client("admin").create_queue(QueueName="cold")["QueueUrl"]
    make_client("cold-p", "producer", ["cold"])
    sender = h.client("cold-p")
    sender.send_message(QueueUrl=url, MessageBody="warm")  # the container's client caches
    queue_log._HELD.clear()  # a container that never read the queue's locks

    def locks_read():
        calls, _ = calls_of(lambda: sender.send_message(QueueUrl=url, MessageBody="x"))
        assert [c for c in calls if c != ("Query", "offsets")] in (SEND, SEND_EMPTY_CHAIN), calls
        return calls.count(("Query", "offsets"))
    assert locks_read() == 1
    assert [locks_read() for _ in range(3)] == [0, 0, 0]
    monkeypatch.setattr(queue_log, "_monotonic", lambda: 1_000.0 + queue_log.HELD_MAX_AGE_S + 0.001)
    assert locks_read() == 1
