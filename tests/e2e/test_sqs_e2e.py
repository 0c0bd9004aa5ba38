"""The SQS-compatible endpoint over the local stack: boto3's sqs client (SigV4 with the admin SQS
credential the stack hands out) against http://127.0.0.1:<port>: create, send, receive, delete,
FIFO order per group, batch results, and redrive to a dead-letter queue after maxReceiveCount."""
from __future__ import annotations

import json
import time
import uuid

import boto3
import pytest
import requests
from botocore.config import Config
from botocore.exceptions import ClientError


@pytest.fixture(scope="module")
def sqs(stack):
    r = requests.get(f"{stack.url}/v1/sqs-credentials/admin", headers=stack.admin_headers(), timeout=10)
    assert r.status_code == 200, r.text
    cred = r.json()
    return boto3.client("sqs", endpoint_url=stack.url, region_name="us-east-1",
                        aws_access_key_id=cred["access_key_id"], aws_secret_access_key=cred["secret_access_key"],
                        config=Config(retries={"max_attempts": 1}))


def uniq(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def drain(sqs, url, rounds=20, **kw):
    out = []
    empty = 0
    for _ in range(rounds):
        got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1, **kw).get("Messages", [])
        if not got:
            empty += 1
            if empty == 2:
                break
            continue
        out += got
        res = sqs.delete_message_batch(QueueUrl=url, Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
                                                              for i, m in enumerate(got)])
        assert not res.get("Failed"), res
    return out


def test_standard_round_trip(stack, sqs):
    name = uniq("e2e")
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    assert url == f"{stack.url}/123456789012/{name}"
    assert url in sqs.list_queues(QueueNamePrefix=name)["QueueUrls"]
    res = sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": f"m{i}", "MessageBody": f"body {i}"} for i in range(10)])
    assert len(res["Successful"]) == 10 and not res.get("Failed")
    sent = sqs.send_message(QueueUrl=url, MessageBody="one more",
                            MessageAttributes={"k": {"DataType": "String", "StringValue": "v"}})
    got = drain(sqs, url, MessageAttributeNames=["All"], MessageSystemAttributeNames=["All"])
    assert sorted(m["Body"] for m in got) == sorted([f"body {i}" for i in range(10)] + ["one more"])
    one = next(m for m in got if m["Body"] == "one more")
    assert one["MD5OfMessageAttributes"] == sent["MD5OfMessageAttributes"]
    assert one["Attributes"]["ApproximateReceiveCount"] == "1"
    a = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert a["ApproximateNumberOfMessages"] == a["ApproximateNumberOfMessagesNotVisible"] == "0"
    sqs.delete_queue(QueueUrl=url)
    with pytest.raises(ClientError) as e:
        sqs.get_queue_url(QueueName=name)
    assert e.value.response["Error"]["Code"] == "AWS.SimpleQueueService.NonExistentQueue"


def test_fifo_order_per_group(sqs):
    name = uniq("e2e") + ".fifo"
    url = sqs.create_queue(QueueName=name, Attributes={"FifoQueue": "true",
                                                       "ContentBasedDeduplication": "true"})["QueueUrl"]
    for i in range(12):
        sqs.send_message(QueueUrl=url, MessageBody=f"{i % 3}:{i}", MessageGroupId=f"g{i % 3}")
    sqs.send_message(QueueUrl=url, MessageBody="0:0", MessageGroupId="g0")  # a duplicate: dropped
    got = drain(sqs, url, MessageSystemAttributeNames=["MessageGroupId", "SequenceNumber"])
    assert len(got) == 12
    for g in range(3):
        mine = [m for m in got if m["Attributes"]["MessageGroupId"] == f"g{g}"]
        assert [m["Body"] for m in mine] == [f"{g}:{i}" for i in range(g, 12, 3)]
        seqs = [m["Attributes"]["SequenceNumber"] for m in mine]
        assert seqs == sorted(seqs)


def test_redrive_to_dead_letter_queue(sqs):
    dlq = sqs.create_queue(QueueName=uniq("dlq"))["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    src = sqs.create_queue(QueueName=uniq("src"), Attributes={
        "VisibilityTimeout": "1",
        "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": "2"})})["QueueUrl"]
    assert sqs.list_dead_letter_source_queues(QueueUrl=dlq)["queueUrls"] == [src]
    sqs.send_message(QueueUrl=src, MessageBody="poison")
    receives = 0
    deadline = time.monotonic() + 90  # however loaded the machine
    while time.monotonic() < deadline:  # never deleted: received maxReceiveCount times, then moved
        got = sqs.receive_message(QueueUrl=src, WaitTimeSeconds=1, AttributeNames=["ApproximateReceiveCount"])
        receives += len(got.get("Messages", []))
        moved = sqs.receive_message(QueueUrl=dlq, MessageAttributeNames=["All"]).get("Messages", [])
        if moved:
            assert [m["Body"] for m in moved] == ["poison"]
            break
        time.sleep(0.5)
    else:
        raise AssertionError(f"not dead-lettered after {receives} receives")
    assert receives == 2
