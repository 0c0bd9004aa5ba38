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
