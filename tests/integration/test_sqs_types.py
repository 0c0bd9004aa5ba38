"""Every SQS action's every member, of every JSON type (issue 30 item 8): from a request that works
(valid queue URLs, a receipt handle, a dead-letter queue's ARN, so each action gets past its lookups
to the member's own use), each member in turn is replaced by a string, a string of digits, a number,
a float, a boolean, a list, an object and null. No answer is a 5xx; a number, list or map member
given another type is a 400 (or, in a batch entry, that entry's failure)."""
from __future__ import annotations

import json

import botocore.session
import pytest

from tests.integration.sqs_harness import h  # noqa: F401 (fixture)
from tests.integration.test_sqs_fuzz import json_call, query_call

MODEL = botocore.session.get_session().get_service_model("sqs")
VALUES = ["x", "10", 10, 1.5, True, ["x"], {"a": "b"}, None]
NUMBER_WRONG = ["x", 1.5, True, ["x"], {"a": "b"}]


def member_kind(action: str, member: str) -> str:
    shape = MODEL.operation_model(action).input_shape.members[member]
    return shape.type_name


def entry_kinds(action: str) -> dict[str, str]:
    entry = MODEL.operation_model(action).input_shape.members["Entries"].member
    return {m: s.type_name for m, s in entry.members.items()}


@pytest.fixture
def world(h):
    sqs = h.client("admin")
    dlq = sqs.create_queue(QueueName="ty-dlq")["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    src = sqs.create_queue(QueueName="ty", Attributes={
        "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 3})})["QueueUrl"]
    sqs.send_message_batch(QueueUrl=src, Entries=[{"Id": str(i), "MessageBody": "m"} for i in range(3)])
    handle = sqs.receive_message(QueueUrl=src, VisibilityTimeout=600)["Messages"][0]["ReceiptHandle"]
    src_arn = dlq_arn.replace(":ty-dlq", ":ty")
    attrs = {"a": {"DataType": "String", "StringValue": "v"}}
    base = {
        "CreateQueue": {"QueueName": "ty-new", "Attributes": {"VisibilityTimeout": "5"}, "tags": {"k": "v"}},
        "GetQueueUrl": {"QueueName": "ty", "QueueOwnerAWSAccountId": "123456789012"},
        "ListQueues": {"QueueNamePrefix": "ty", "MaxResults": 5, "NextToken": None},
        "GetQueueAttributes": {"QueueUrl": src, "AttributeNames": ["All"]},
        "SetQueueAttributes": {"QueueUrl": src, "Attributes": {"DelaySeconds": "0"}},
        "TagQueue": {"QueueUrl": src, "Tags": {"k": "v"}},
        "UntagQueue": {"QueueUrl": src, "TagKeys": ["k"]},
        "ListQueueTags": {"QueueUrl": src},
        "SendMessage": {"QueueUrl": src, "MessageBody": "x", "DelaySeconds": 0, "MessageAttributes": attrs,
                        "MessageSystemAttributes": {"AWSTraceHeader": {"DataType": "String", "StringValue": "t"}},
                        "MessageGroupId": "g"},
        "SendMessageBatch": {"QueueUrl": src, "Entries": [{"Id": "a", "MessageBody": "x", "DelaySeconds": 0,
                                                           "MessageAttributes": attrs, "MessageGroupId": "g"}]},
        "ReceiveMessage": {"QueueUrl": src, "MaxNumberOfMessages": 1, "WaitTimeSeconds": 0, "VisibilityTimeout": 0,
                           "AttributeNames": ["All"], "MessageSystemAttributeNames": ["All"],
                           "MessageAttributeNames": ["All"], "ReceiveRequestAttemptId": "r"},
        "DeleteMessage": {"QueueUrl": src, "ReceiptHandle": handle},
        "DeleteMessageBatch": {"QueueUrl": src, "Entries": [{"Id": "a", "ReceiptHandle": handle}]},
        "ChangeMessageVisibility": {"QueueUrl": src, "ReceiptHandle": handle, "VisibilityTimeout": 600},
        "ChangeMessageVisibilityBatch": {"QueueUrl": src, "Entries": [{"Id": "a", "ReceiptHandle": handle,
                                                                       "VisibilityTimeout": 600}]},
        "ListDeadLetterSourceQueues": {"QueueUrl": dlq, "MaxResults": 5},
        "AddPermission": {"QueueUrl": src, "Label": "l", "AWSAccountIds": ["123456789012"],
                          "Actions": ["SendMessage"]},
        "RemovePermission": {"QueueUrl": src, "Label": "l"},
        "StartMessageMoveTask": {"SourceArn": dlq_arn, "DestinationArn": src_arn, "MaxNumberOfMessagesPerSecond": 10},
        "ListMessageMoveTasks": {"SourceArn": dlq_arn, "MaxResults": 5},
        "CancelMessageMoveTask": {"TaskHandle": "nope"},
        "PurgeQueue": {"QueueUrl": src},
        "DeleteQueue": {"QueueUrl": src},
    }
    return base


def _ok_or_400(action, member, value, status, doc, kind):
    if value is None or kind == "string" or (isinstance(value, str) and value.isdigit() and kind == "integer"):
        return
    wrong = (kind == "integer" and value in NUMBER_WRONG) or (kind == "list" and not isinstance(value, list)) \
        or (kind == "map" and not isinstance(value, dict)) or (kind == "structure" and not isinstance(value, dict))
    if wrong:
        assert status == 400 or (doc.get("Failed") and not doc.get("Successful")), (action, member, value, doc)


def test_every_member_of_every_json_type_is_never_5xx(h, world):
    assert set(world) == set(MODEL.operation_names)  # every action
    for action, base in world.items():  # (PurgeQueue, DeleteQueue last: they empty / remove the queue)
        for member in sorted(set(MODEL.operation_model(action).input_shape.members) | set(base)):
            for value in VALUES:
                req = {**base, member: value}
                status, doc = json_call(h, action, req)  # (asserts < 500 and an error in SQS's shape)
                _ok_or_400(action, member, value, status, doc, member_kind(action, member))
        if "Entries" in base:
            kinds = entry_kinds(action)
            for member in sorted(kinds):
                for value in VALUES:
                    entry = {**base["Entries"][0], member: value}
                    status, doc = json_call(h, action, {**base, "Entries": [entry]})
                    _ok_or_400(action, member, value, status, doc, kinds[member])


def test_every_scalar_member_in_the_query_protocol_is_never_5xx(h, world):
    for action, base in world.items():
        for member, v in base.items():
            if isinstance(v, (list, dict)):
                continue
            for value in ("x", "", "10", "-1", "1.5", "true"):
                form = [("Action", action)] + [(k, str(x)) for k, x in base.items()
                                               if k != member and x is not None and not isinstance(x, (list, dict))]
                query_call(h, form + [(member, value)])  # (asserts < 500 and XML)
