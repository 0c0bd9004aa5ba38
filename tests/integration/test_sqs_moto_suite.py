"""Behaviours moto's own SQS suite (5.2.5, server mode; bench/sqs_conformance.py) checks, kept here
as fast regression tests on the in-process endpoint (issue 30 item 10)."""
from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from tests.integration.sqs_harness import h, sqs  # noqa: F401 (fixtures)


def code(e) -> str:
    return e.value.response["Error"]["Code"]


def test_attribute_names_with_surrounding_spaces_are_read_as_the_name(sqs):
    """moto's suite (and moto) accept "VisibilityTimeout " as VisibilityTimeout: as lenient here."""
    url = sqs.create_queue(QueueName="spaced", Attributes={"VisibilityTimeout ": "7"})["QueueUrl"]
    assert sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["VisibilityTimeout "])["Attributes"] == {
        "VisibilityTimeout": "7"}
    sqs.set_queue_attributes(QueueUrl=url, Attributes={" DelaySeconds": "3"})
    assert sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["DelaySeconds"])["Attributes"] == {
        "DelaySeconds": "3"}
    with pytest.raises(ClientError) as e:  # still a known name only
        sqs.create_queue(QueueName="spaced2", Attributes={"Visibility Timeout": "7"})
    assert code(e) == "InvalidAttributeName"


def test_an_empty_queue_name_is_an_invalid_value(sqs):
    with pytest.raises(ClientError) as e:
        sqs.create_queue(QueueName="")
    assert code(e) == "InvalidParameterValue"
    assert e.value.response["Error"]["Message"] == ("Can only include alphanumeric characters, hyphens, or "
                                                    "underscores. 1 to 80 in length")


def test_an_invalid_delay_fails_its_batch_entry_in_sqs_words(sqs):
    url = sqs.create_queue(QueueName="delays")["QueueUrl"]
    out = sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": "ok", "MessageBody": "b"},
                                                        {"Id": "late", "MessageBody": "b", "DelaySeconds": 901}])
    assert [e["Id"] for e in out["Successful"]] == ["ok"]
    assert out["Failed"] == [{"Id": "late", "SenderFault": True, "Code": "InvalidParameterValue",
                              "Message": "Value 901 for parameter DelaySeconds is invalid. Reason: DelaySeconds "
                                         "must be >= 0 and <= 900."}]


def test_a_second_purge_within_60_s_is_purge_queue_in_progress(sqs, clock):
    url = sqs.create_queue(QueueName="purged")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="m")
    sqs.purge_queue(QueueUrl=url)
    clock.t += 59_000
    with pytest.raises(ClientError) as e:
        sqs.purge_queue(QueueUrl=url)
    assert code(e) == "AWS.SimpleQueueService.PurgeQueueInProgress"
    assert e.value.response["Error"]["Message"] == "Only one PurgeQueue operation on purged is allowed every 60 seconds."
    clock.t += 1_001
    sqs.purge_queue(QueueUrl=url)  # 60 s after the first


def test_add_and_remove_permission_edit_the_queue_policy(sqs):
    import json
    url = sqs.create_queue(QueueName="shared.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    sqs.add_permission(QueueUrl=url, Label="a1", AWSAccountIds=["111111111111"], Actions=["*"])
    sqs.add_permission(QueueUrl=url, Label="a2", AWSAccountIds=["222211111111", "333311111111"],
                       Actions=["SendMessage", "ReceiveMessage"])
    policy = json.loads(sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["Policy"])["Attributes"]["Policy"])
    assert policy == {"Version": "2012-10-17", "Id": f"{arn}/SQSDefaultPolicy", "Statement": [
        {"Sid": "a1", "Effect": "Allow", "Principal": {"AWS": "arn:aws:iam::111111111111:root"}, "Action": "SQS:*",
         "Resource": arn},
        {"Sid": "a2", "Effect": "Allow", "Principal": {"AWS": ["arn:aws:iam::222211111111:root",
                                                               "arn:aws:iam::333311111111:root"]},
         "Action": ["SQS:SendMessage", "SQS:ReceiveMessage"], "Resource": arn}]}
    sqs.remove_permission(QueueUrl=url, Label="a2")
    policy = json.loads(sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["Policy"])["Attributes"]["Policy"])
    assert [s["Sid"] for s in policy["Statement"]] == ["a1"]
    sqs.remove_permission(QueueUrl=url, Label="a1")
    assert "Attributes" not in sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["Policy"])


@pytest.mark.parametrize("kwargs,want,message", [
    ({"Label": "dup", "AWSAccountIds": ["111111111111"], "Actions": ["SendMessage"]}, "InvalidParameterValue",
     "Value dup for parameter Label is invalid. Reason: Already exists."),
    ({"Label": "x", "AWSAccountIds": ["111111111111"], "Actions": ["RemovePermission"]}, "InvalidParameterValue",
     "Value SQS:RemovePermission for parameter ActionName is invalid. Reason: Only the queue owner is allowed to "
     "invoke this action."),
    ({"Label": "x", "AWSAccountIds": ["111111111111"], "Actions": []}, "MissingParameter",
     "The request must contain the parameter Actions."),
    ({"Label": "x", "AWSAccountIds": [], "Actions": ["SendMessage"]}, "InvalidParameterValue",
     "Value [] for parameter PrincipalId is invalid. Reason: Unable to verify."),
    ({"Label": "x", "AWSAccountIds": ["111111111111"], "Actions": ["ChangeMessageVisibility", "DeleteMessage",
     "GetQueueAttributes", "GetQueueUrl", "ListDeadLetterSourceQueues", "PurgeQueue", "ReceiveMessage",
     "SendMessage"]}, "OverLimit", "8 Actions were found, maximum allowed is 7."),
])
def test_add_permission_errors(sqs, h, kwargs, want, message):
    url = sqs.create_queue(QueueName="perm")["QueueUrl"]
    sqs.add_permission(QueueUrl=url, Label="dup", AWSAccountIds=["111111111111"], Actions=["ReceiveMessage"])
    with pytest.raises(ClientError) as e:
        sqs.add_permission(QueueUrl=url, **kwargs)
    assert (code(e), e.value.response["Error"]["Message"]) == (want, message)
    with pytest.raises(ClientError) as e:  # the queue's administration: the admin's
        h.client("feed").add_permission(QueueUrl=url, Label="y", AWSAccountIds=["1"], Actions=["SendMessage"])
    assert code(e) == "AccessDenied"


def test_remove_permission_of_an_unknown_label(sqs):
    url = sqs.create_queue(QueueName="perm2")["QueueUrl"]
    with pytest.raises(ClientError) as e:
        sqs.remove_permission(QueueUrl=url, Label="test")
    assert (code(e), e.value.response["Error"]["Message"]) == (
        "InvalidParameterValue", "Value test for parameter Label is invalid. Reason: can't find label on existing "
        "policy.")


def test_a_prefix_wildcard_selects_the_attributes_that_start_with_the_prefix(sqs):
    url = sqs.create_queue(QueueName="wild")["QueueUrl"]
    attrs = {n: {"DataType": "String", "StringValue": n} for n in ("Custom1", "Custom.x", "Other")}
    sqs.send_message(QueueUrl=url, MessageBody="m", MessageAttributes=attrs)
    got = sqs.receive_message(QueueUrl=url, MessageAttributeNames=["Custom.*"], VisibilityTimeout=0)["Messages"]
    assert sorted(got[0]["MessageAttributes"]) == ["Custom.x", "Custom1"]
    got = sqs.receive_message(QueueUrl=url, MessageAttributeNames=[".*"], VisibilityTimeout=0)["Messages"]
    assert sorted(got[0]["MessageAttributes"]) == ["Custom.x", "Custom1", "Other"]
