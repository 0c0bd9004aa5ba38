"""lakeq.sqs.protocol (pure): MD5 digests against a reference, receipt handles, attribute checks,
error shapes, the query protocol's parsing and XML."""
from __future__ import annotations

import base64
import json
import xml.etree.ElementTree as ET

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakeq.sqs import protocol as sp


def reference_md5(attrs: dict) -> str:
    """moto's implementation of SQS's MD5OfMessageAttributes, used as the reference (test only)."""
    from moto.sqs.models import Message
    m = Message("id", "body")
    m.message_attributes = {k: ({"DataType": a["DataType"], "BinaryValue": a["BinaryValue"]}
                                if "BinaryValue" in a else a) for k, a in attrs.items()}
    return m.attribute_md5


names = st.from_regex(r"[A-Za-z0-9_-]{1,20}", fullmatch=True)
values = st.one_of(
    st.builds(lambda s: {"DataType": "String", "StringValue": s}, st.text(min_size=1, max_size=40)),
    st.builds(lambda n: {"DataType": "Number", "StringValue": str(n)}, st.integers()),
    st.builds(lambda b: {"DataType": "Binary.x", "BinaryValue": b}, st.binary(min_size=1, max_size=40)),
)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(names, values, min_size=1, max_size=10))
def test_md5_of_attributes_matches_the_reference(attrs):
    assert sp.md5_attributes(attrs) == reference_md5(attrs)


def test_md5_known_values():
    # MD5OfMessageBody of "hello"; attributes: one String attribute, computed by hand below
    assert sp.md5_hex("hello") == "5d41402abc4b2a76b9719d911017c592"
    raw = (b"\x00\x00\x00\x04kind" + b"\x00\x00\x00\x06String" + b"\x01" + b"\x00\x00\x00\x08greeting")
    import hashlib
    assert sp.md5_attributes({"kind": {"DataType": "String", "StringValue": "greeting"}}) == \
        hashlib.md5(raw).hexdigest()
    assert sp.md5_attributes({}) is None


@given(st.from_regex(r"sqs\.[A-Za-z0-9_-]{1,40}", fullmatch=True), st.text(min_size=1, max_size=80).filter(
    lambda s: "\n" not in s), st.integers(0, 2**53))
def test_handle_round_trip(group, receipt, offset):
    assert sp.decode_handle(sp.encode_handle(group, receipt, offset)) == (group, receipt, offset)


@pytest.mark.parametrize("bad", ["", "x", "!!!", base64.urlsafe_b64encode(b"2\ng\nr\n1").decode(),
                                 base64.urlsafe_b64encode(b"1\ng\nr\nx").decode(), None, 5])
def test_bad_handles_are_receipt_handle_is_invalid(bad):
    with pytest.raises(sp.SqsError) as e:
        sp.decode_handle(bad)
    assert (e.value.name, e.value.code, e.value.status) == ("ReceiptHandleIsInvalid", "ReceiptHandleIsInvalid", 404)


def test_error_shapes_json():
    status, headers, body = sp.json_error(sp.no_queue())
    assert status == 400
    assert headers["x-amzn-query-error"] == "AWS.SimpleQueueService.NonExistentQueue;Sender"
    assert json.loads(body) == {"__type": "com.amazonaws.sqs#QueueDoesNotExist",
                                "message": "The specified queue does not exist."}
    status, headers, body = sp.json_error(sp.invalid("nope"))
    assert (status, headers["x-amzn-query-error"], json.loads(body)["__type"]) == \
        (400, "InvalidParameterValue;Sender", "com.amazonaws.sqs#InvalidParameterValue")
    too_many = sp.SqsError("TooManyEntriesInBatchRequest", "x")
    assert too_many.code == "AWS.SimpleQueueService.TooManyEntriesInBatchRequest"
    assert sp.SqsError("QueueNameExists", "x").code == "QueueAlreadyExists"
    assert sp.access_denied("X").status == 403


def test_error_shapes_xml():
    status, _, body = sp.xml_error(sp.no_queue(), "rid")
    root = ET.fromstring(body)
    ns = {"q": "http://queue.amazonaws.com/doc/2012-11-05/"}
    assert status == 400
    assert root.find("q:Error/q:Code", ns).text == "AWS.SimpleQueueService.NonExistentQueue"
    assert root.find("q:Error/q:Type", ns).text == "Sender"


def test_queue_names_and_urls():
    assert sp.queue_name_of_url("http://127.0.0.1:3000/123456789012/jobs") == "jobs"
    assert sp.queue_name_of_url("https://sqs.us-east-1.amazonaws.com/1/a.fifo") == "a.fifo"
    assert sp.queue_name_of_url("http://h/only") == sp.queue_name_of_url("only") == "only"  # (as SQS and moto)
    for url in ("http://h/", "http://h/1/bad name", "/"):
        with pytest.raises(sp.SqsError) as e:
            sp.queue_name_of_url(url)
        assert e.value.name == "QueueDoesNotExist"
    with pytest.raises(sp.SqsError) as e:
        sp.queue_name_of_url(None)
    assert e.value.name == "MissingParameter"
    assert sp.name_of_arn("arn:aws:sqs:us-east-1:123456789012:dlq") == "dlq"


def test_attribute_validation():
    assert sp.check_attributes({"DelaySeconds": "10", "VisibilityTimeout": "0"}, False, True) == \
        {"DelaySeconds": "10", "VisibilityTimeout": "0"}
    for attrs, name in [({"Bogus": "1"}, "InvalidAttributeName"), ({"DelaySeconds": "901"}, "InvalidAttributeValue"),
                        ({"MaximumMessageSize": "1023"}, "InvalidAttributeValue"),
                        ({"ContentBasedDeduplication": "true"}, "InvalidAttributeName"),
                        ({"RedrivePolicy": "{}"}, "InvalidParameterValue"),  # (SQS's code for a bad policy)
                        ({"RedrivePolicy": json.dumps({"deadLetterTargetArn": "arn:aws:sqs:r:1:d",
                                                       "maxReceiveCount": 0})}, "InvalidParameterValue")]:
        with pytest.raises(sp.SqsError) as e:
            sp.check_attributes(attrs, False, True)
        assert e.value.name == name, attrs
    assert sp.check_attributes({"FifoQueue": "true", "ContentBasedDeduplication": "True"}, True, True) == \
        {"FifoQueue": "true", "ContentBasedDeduplication": "true"}
    with pytest.raises(sp.SqsError) as e:  # FifoQueue only at creation
        sp.check_attributes({"FifoQueue": "true"}, True, False)
    assert e.value.name == "InvalidAttributeName"


def test_message_attribute_validation():
    ok = sp.check_message_attributes({"a.b": {"DataType": "Number.int", "StringValue": "1.5"},
                                      "bin": {"DataType": "Binary", "BinaryValue": b"\x00\x01"}})
    assert ok["bin"]["BinaryValue"] == b"\x00\x01"
    for attrs in [{"AWS.x": {"DataType": "String", "StringValue": "v"}},
                  {".a": {"DataType": "String", "StringValue": "v"}},
                  {"a..b": {"DataType": "String", "StringValue": "v"}},
                  {"a": {"DataType": "Str", "StringValue": "v"}},
                  {"a": {"DataType": "Number", "StringValue": "x"}},
                  {"a": {"DataType": "String"}},
                  {"a": {"DataType": "String", "StringValue": ""}},
                  {f"a{i}": {"DataType": "String", "StringValue": "v"} for i in range(11)}]:
        with pytest.raises(sp.SqsError) as e:
            sp.check_message_attributes(attrs)
        assert e.value.name == "InvalidParameterValue", attrs
    with pytest.raises(sp.SqsError) as e:
        sp.check_body("bad \x00 char")
    assert e.value.name == "InvalidMessageContents"
    assert sp.message_size("ab", {"n": {"DataType": "String", "StringValue": "xyz"}}) == 2 + 1 + 6 + 3


def test_batch_checks_in_sqs_order():
    for entries, name in [([], "EmptyBatchRequest"),
                          ([{"Id": str(i)} for i in range(11)], "TooManyEntriesInBatchRequest"),
                          ([{"Id": "a b"}], "InvalidBatchEntryId"),
                          ([{"Id": "a"}, {"Id": "a"}], "BatchEntryIdsNotDistinct")]:
        with pytest.raises(sp.SqsError) as e:
            sp.check_batch(entries, "SendMessage")
        assert e.value.name == name


def test_query_protocol_parsing():
    form = ("Action=SendMessageBatch&QueueUrl=http%3A%2F%2Fh%2F1%2Fq&Version=2012-11-05"
            "&SendMessageBatchRequestEntry.1.Id=a&SendMessageBatchRequestEntry.1.MessageBody=x"
            "&SendMessageBatchRequestEntry.1.DelaySeconds=3"
            "&SendMessageBatchRequestEntry.1.MessageAttribute.1.Name=k"
            "&SendMessageBatchRequestEntry.1.MessageAttribute.1.Value.DataType=String"
            "&SendMessageBatchRequestEntry.1.MessageAttribute.1.Value.StringValue=v"
            "&SendMessageBatchRequestEntry.2.Id=b&SendMessageBatchRequestEntry.2.MessageBody=y")
    action, req = sp.query_request(form)
    assert action == "SendMessageBatch"
    assert req["QueueUrl"] == "http://h/1/q"
    assert req["Entries"] == [{"Id": "a", "MessageBody": "x", "DelaySeconds": 3,
                               "MessageAttributes": {"k": {"DataType": "String", "StringValue": "v"}}},
                              {"Id": "b", "MessageBody": "y"}]
    action, req = sp.query_request("Action=CreateQueue&QueueName=q&Attribute.1.Name=DelaySeconds&Attribute.1.Value=5"
                                   "&Tag.1.Key=team&Tag.1.Value=x")
    assert req == {"QueueName": "q", "Attributes": {"DelaySeconds": "5"}, "tags": {"team": "x"}}
    action, req = sp.query_request("Action=ReceiveMessage&AttributeName.1=All&MaxNumberOfMessages=2", "http://h/1/q")
    assert req == {"AttributeNames": ["All"], "MaxNumberOfMessages": 2, "QueueUrl": "http://h/1/q"}


def test_query_protocol_xml():
    body = sp.xml_response("ReceiveMessage", {"Messages": [{"MessageId": "m", "ReceiptHandle": "r", "MD5OfBody": "d",
                                                            "Body": "<b>&", "Attributes": {"SentTimestamp": "1"}}]},
                           "rid")
    ns = {"q": "http://queue.amazonaws.com/doc/2012-11-05/"}
    root = ET.fromstring(body)
    assert root.find("q:ReceiveMessageResult/q:Message/q:Body", ns).text == "<b>&"
    assert root.find("q:ReceiveMessageResult/q:Message/q:Attribute/q:Name", ns).text == "SentTimestamp"
    assert ET.fromstring(sp.xml_response("DeleteQueue", {}, "r")).find("q:ResponseMetadata/q:RequestId", ns).text == "r"


# --- issue 14: the query-protocol parser is linear and counts entries before building them ----------------
def _timed(fn):
    """``fn()`` and the CPU seconds this process spent on it: the bounds below are against a parser
    that is quadratic (minutes), not a latency, so they are measured in CPU time, which other work
    on the machine does not stretch as it stretches the wall clock."""
    import time
    t0 = time.process_time()
    try:
        out = fn()
    except sp.SqsError as e:
        out = e
    return out, time.process_time() - t0


def test_query_parser_refuses_too_many_entries_before_building_them():
    n = 100_000
    form = "Action=SendMessageBatch&QueueUrl=q&" + "&".join(
        f"SendMessageBatchRequestEntry.{i}.Id=a{i}&SendMessageBatchRequestEntry.{i}.MessageBody=b" for i in range(1, n))
    out, secs = _timed(lambda: sp.query_request(form))
    assert isinstance(out, sp.SqsError) and out.name == "TooManyEntriesInBatchRequest", out
    assert secs < 20, secs


def test_query_parser_is_linear_in_attributes_and_lists():
    n = 30_000
    parts = ["Action=SendMessage", "QueueUrl=q", "MessageBody=x"]
    parts += [f"MessageAttribute.{i}.Name=n{i}&MessageAttribute.{i}.Value.DataType=String&"
              f"MessageAttribute.{i}.Value.StringValue=v" for i in range(1, n)]
    parts += [f"Attribute.{i}.Name=a{i}&Attribute.{i}.Value=v" for i in range(1, n)]
    parts += [f"AttributeName.{i}=All" for i in range(1, n)]
    out, secs = _timed(lambda: sp.query_request("&".join(parts)))
    assert secs < 20, secs
    _, req = out
    assert len(req["MessageAttributes"]) == n - 1 and len(req["Attributes"]) == n - 1
    assert req["MessageAttributes"]["n7"] == {"DataType": "String", "StringValue": "v"}


def test_query_parser_huge_indices_do_not_allocate():
    big = "9" * 5000
    out, secs = _timed(lambda: sp.query_request(
        f"Action=DeleteMessageBatch&QueueUrl=q&DeleteMessageBatchRequestEntry.{big}.Id=a&"
        f"DeleteMessageBatchRequestEntry.{big}.ReceiptHandle=h&DeleteMessageBatchRequestEntry.1.Id=b&"
        f"DeleteMessageBatchRequestEntry.1.ReceiptHandle=h&AttributeName.{big}=All&MaxNumberOfMessages={big}"))
    assert secs < 5, secs
    assert not isinstance(out, Exception) or out.status < 500
    if not isinstance(out, Exception):
        assert len(out[1]["Entries"]) <= 2


def test_query_parser_entries_in_index_order_with_gaps():
    _, req = sp.query_request("Action=DeleteMessageBatch&DeleteMessageBatchRequestEntry.3.Id=c&"
                              "DeleteMessageBatchRequestEntry.1.Id=a&DeleteMessageBatchRequestEntry.1.ReceiptHandle=h")
    assert [e["Id"] for e in req["Entries"]] == ["a", "c"]
    assert req["Entries"][0] == {"Id": "a", "ReceiptHandle": "h"}


@pytest.mark.parametrize("text", ["²", "9" * 5000, "-", "1e3", "٣"])
def test_non_ascii_or_huge_digit_strings_are_400_not_crashes(text):
    with pytest.raises(sp.SqsError) as e:
        sp.int_param({"X": text}, "X", 0, 10)
    assert e.value.status == 400
    with pytest.raises(sp.SqsError):
        sp.check_attributes({"DelaySeconds": text}, False, True)
    _, req = sp.query_request(f"Action=ReceiveMessage&MaxNumberOfMessages={text}&WaitTimeSeconds=20")
    assert req["WaitTimeSeconds"] == 20
