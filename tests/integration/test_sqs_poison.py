"""SQS ReceiveMessage keeps lakeq's poison isolation (issue 30 item 7): a message redelivered after a
failed attempt (a suspect) is answered alone, even when a receive gathers over several lakeq queues,
so the standard worker (receive 10, process, DeleteMessageBatch, crash on a poison) dead-letters the
poison message only. On a fake clock: a crash is the visibility timeout running out."""
from __future__ import annotations

import json

from tests.integration.sqs_harness import h, sqs  # noqa: F401 (fixtures)

VIS = 30


def _queues(sqs, max_receive=3):
    dlq = sqs.create_queue(QueueName="poison-dlq")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    src = sqs.create_queue(QueueName="poison-src", Attributes={
        "VisibilityTimeout": str(VIS),
        "RedrivePolicy": json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": max_receive})})["QueueUrl"]
    return src, dlq


def _worker(sqs, src, clock, rounds=60):
    """Receive 10, crash when the poison is among them (nothing deleted, the lock runs out), else
    DeleteMessageBatch all. The bodies processed and deleted, and the answers' sizes."""
    done, answers = [], []
    for _ in range(rounds):
        got = sqs.receive_message(QueueUrl=src, MaxNumberOfMessages=10,
                                  AttributeNames=["ApproximateReceiveCount"]).get("Messages", [])
        if not got:
            clock.t += (VIS + 1) * 1000  # anything still locked comes back
            got = sqs.receive_message(QueueUrl=src, MaxNumberOfMessages=10,
                                      AttributeNames=["ApproximateReceiveCount"]).get("Messages", [])
            if not got:
                return done, answers
        answers.append([(m["Body"], m["Attributes"]["ApproximateReceiveCount"]) for m in got])
        if any(m["Body"] == "poison" for m in got):
            clock.t += (VIS + 1) * 1000  # the worker crashed: its lock runs out
            continue
        out = sqs.delete_message_batch(QueueUrl=src, Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
                                                              for i, m in enumerate(got)])
        assert not out.get("Failed"), out
        done += [m["Body"] for m in got]
    raise AssertionError(f"the worker never drained the queue: {answers[-5:]}")


def test_worker_over_several_lakeq_queues_dead_letters_the_poison_only(sqs, clock):
    src, dlq = _queues(sqs)
    # keys spread the messages over the queue's lakeq queues (a key's messages share one); the
    # poison first of its key, so it is the lowest suspect of its lakeq queue
    entries = [{"Id": "p", "MessageBody": "poison", "MessageGroupId": "k0"}]
    entries += [{"Id": f"m{i}", "MessageBody": f"m{i}", "MessageGroupId": f"k{i % 8}"} for i in range(1, 9)]
    sqs.send_message_batch(QueueUrl=src, Entries=entries)
    sqs.send_message_batch(QueueUrl=src, Entries=[{"Id": f"n{i}", "MessageBody": f"n{i}",
                                                   "MessageGroupId": f"k{i % 8}"} for i in range(8)])
    done, answers = _worker(sqs, src, clock)
    innocent = sorted(e["MessageBody"] for e in entries[1:]) + sorted(f"n{i}" for i in range(8))
    assert sorted(done) == sorted(innocent), answers
    dead = sqs.receive_message(QueueUrl=dlq, MaxNumberOfMessages=10).get("Messages", [])
    assert [m["Body"] for m in dead] == ["poison"], answers
    for a in answers:  # an answer holding a redelivered message holds only that one
        if any(count != "1" for _, count in a):
            assert len(a) == 1, answers


def test_receive_after_a_crash_answers_each_suspect_alone(sqs, clock):
    """After a crashed receive of messages from several lakeq queues, each next receive answers
    one of them alone, until they are all through."""
    src, _ = _queues(sqs, max_receive=5)
    sqs.send_message_batch(QueueUrl=src, Entries=[{"Id": str(i), "MessageBody": str(i), "MessageGroupId": f"k{i}"}
                                                  for i in range(8)])
    first = sqs.receive_message(QueueUrl=src, MaxNumberOfMessages=10)["Messages"]
    assert len(first) > 1
    clock.t += (VIS + 1) * 1000  # crashed
    seen = []
    for _ in range(len(first)):
        got = sqs.receive_message(QueueUrl=src, MaxNumberOfMessages=10)["Messages"]
        assert len(got) == 1, [m["Body"] for m in got]
        seen.append(got[0]["Body"])
        sqs.delete_message(QueueUrl=src, ReceiptHandle=got[0]["ReceiptHandle"])
    assert sorted(seen) == sorted(m["Body"] for m in first)
