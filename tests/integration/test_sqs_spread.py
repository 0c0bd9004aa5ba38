"""A standard queue's message sent while others are in flight is not held back behind them (issue 30
item 10: moto's ``test_message_attributes_in_receive_message`` passed or failed by chance). A lakeq
lock holds a whole lakeq queue until its batch is settled, and a send used to pick one of the SQS
queue's 4 lakeq queues at random: a message landing in a held one waited out the visibility timeout.
A send now goes to a lakeq queue no receive holds when there is one
(:func:`lakeq.produce.service.spread_queue`, :meth:`lakeq.store.offsets.OffsetRepo.held`)."""
from __future__ import annotations

from lakeq.sqs.permissions import LAKEQ_QUEUES
from tests.integration.sqs_harness import h, sqs  # noqa: F401 (fixtures)


def test_each_message_sent_while_others_are_in_flight_is_received_at_once(sqs):
    url = sqs.create_queue(QueueName="spread")["QueueUrl"]
    # one send, one receive left in flight, LAKEQ_QUEUES times: every lakeq queue ends up held; a
    # random pick would hold one of them back with chance 1 - 3/4 * 2/4 * 1/4 (91 %)
    for i in range(LAKEQ_QUEUES):
        sqs.send_message(QueueUrl=url, MessageBody=f"m{i}")
        got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
        assert [m["Body"] for m in got] == [f"m{i}"], i


def test_a_fifo_queues_groups_keep_their_lakeq_queue(sqs):
    """FIFO messages go by their group (its lakeq queue), held or not: order within a group."""
    url = sqs.create_queue(QueueName="spread.fifo", Attributes={"FifoQueue": "true",
                                                                "ContentBasedDeduplication": "true"})["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="a1", MessageGroupId="a")
    assert [m["Body"] for m in sqs.receive_message(QueueUrl=url).get("Messages", [])] == ["a1"]
    sqs.send_message(QueueUrl=url, MessageBody="a2", MessageGroupId="a")
    assert sqs.receive_message(QueueUrl=url).get("Messages", []) == []  # behind a1, in flight


def test_a_lock_write_never_changes_the_copy_a_send_is_reading():
    """The local stack serves requests in threads (werkzeug ``threaded=True``) sharing the
    container's copies of locks (``OffsetRepo.held``): a send iterating an owner's copy while
    another request's lock write (``_held_moved``) adds a queue to it raised "dictionary changed
    size during iteration" (a 500). A lock write replaces the copy; it never changes one in place."""
    from lakeq.store import queue_log
    from lakeq.store.offsets import OffsetRepo
    owner = "g|sqs.race|race"
    OffsetRepo._keep_held(owner, {0: 5})
    try:
        reading = iter(queue_log._HELD[owner][1].items())  # a send's frozenset(...) between two items
        assert next(reading) == (0, 5)
        OffsetRepo._held_moved(owner, 1, 10)  # the first lock of queue 1, written meanwhile
        assert list(reading) == []
        assert queue_log._HELD[owner][1] == {0: 5, 1: 10}
    finally:
        queue_log._HELD.pop(owner, None)
