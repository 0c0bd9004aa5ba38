"""Issue 14, item 4: a malformed but signed request gets a 4xx in SQS's error shape, never a 5xx.
Hypothesis calls every SQS action (botocore's model) with members of wrong types and sizes (null,
booleans, huge ints, floats, strings of odd characters, lists, nested maps), in both protocols,
through the SqsFunction handler with the signing seam of the other SQS tests; every answer must
be < 500 and parse (JSON, or XML for the query protocol)."""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from urllib.parse import urlencode

import botocore.session
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz import fuzz_settings, odd_texts, wild_json
from tests.handlers import Context
from tests.integration.sqs_harness import Harness, fake_auth, h  # noqa: F401 (h, sqs: fixtures)
from tests.integration.test_sqs_edges import raw_event

MODEL = botocore.session.get_session().get_service_model("sqs")
ACTIONS = sorted(MODEL.operation_names)
MEMBERS = {a: sorted(MODEL.operation_model(a).input_shape.members) if MODEL.operation_model(a).input_shape else []
           for a in ACTIONS}
MEMBERS_ALL = sorted({m for ms in MEMBERS.values() for m in ms} | {"Entries", "Id", "ReceiptHandle", "MessageBody"})


@pytest.fixture
def urls(h):
    sqs = h.client("admin")
    out = [sqs.create_queue(QueueName="fz")["QueueUrl"],
           sqs.create_queue(QueueName="fz.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]]
    sqs.send_message(QueueUrl=out[0], MessageBody="m")
    handle = sqs.receive_message(QueueUrl=out[0], VisibilityTimeout=600)["Messages"][0]["ReceiptHandle"]
    return out + [handle]


odd_text = odd_texts(["", "All", ".*", "-1", "0", "9" * 40, "1e400", "²", "\x00", "\ud800", "fz", "http://h/1/fz",
                      "true", "String", "Number", "Binary"], max_size=20)
wild = wild_json(MEMBERS_ALL, odd_text, nan=True, max_leaves=12, max_dict=4)


def member_value(draw, urls, name):
    if name == "QueueUrl" and draw(st.booleans()):
        return draw(st.sampled_from(urls[:2]))
    if name == "ReceiptHandle" and draw(st.booleans()):
        return urls[2]
    if name == "Entries" and draw(st.booleans()):
        return draw(st.lists(st.dictionaries(st.sampled_from(MEMBERS_ALL), wild, max_size=5), max_size=12))
    if name in ("MessageAttributes", "MessageSystemAttributes", "Attributes", "Tags", "tags") and draw(st.booleans()):
        return draw(st.dictionaries(odd_text, wild, max_size=3))
    return draw(wild)


@st.composite
def json_requests(draw, urls):
    action = draw(st.sampled_from(ACTIONS))
    names = draw(st.lists(st.sampled_from(MEMBERS[action] or ["QueueUrl"]), unique=True, max_size=6))
    return action, {n: member_value(draw, urls, n) for n in names}


def json_call(h, action, req, raw=None):
    body = raw if raw is not None else json.dumps(req, allow_nan=True)
    ev = raw_event("/", body, {"content-type": "application/x-amz-json-1.0", "x-amz-target": f"AmazonSQS.{action}"})
    out = h.handler(ev, Context())
    assert out["statusCode"] < 500, (action, req, out)
    doc = json.loads(out["body"])
    if out["statusCode"] >= 400:
        assert doc["__type"] and isinstance(doc["message"], str), out
    return out["statusCode"], doc


def query_call(h, form):
    ev = raw_event("/", urlencode(form), {"content-type": "application/x-www-form-urlencoded"})
    out = h.handler(ev, Context())
    assert out["statusCode"] < 500, (form, out)
    root = ET.fromstring(out["body"].encode("utf-8"))
    return out["statusCode"], root


FUZZ = fuzz_settings(300)


def test_json_protocol_wrong_types_never_5xx(h, urls):
    @FUZZ
    @given(json_requests(urls))
    def run(ar):
        json_call(h, *ar)
    run()


def flat(prefix: str, v, out: list, depth: int = 0) -> None:
    """A wild value flattened the query protocol's way (and some ways it is not)."""
    if isinstance(v, dict):
        for i, (k, x) in enumerate(v.items(), 1):
            out.append((f"{prefix}.{i}.Name", str(k)))
            flat(f"{prefix}.{i}.Value" if depth % 2 == 0 else f"{prefix}.{k}", x, out, depth + 1)
    elif isinstance(v, list):
        for i, x in enumerate(v, 1):
            flat(f"{prefix}.{i}", x, out, depth + 1)
    elif v is not None:
        out.append((prefix, str(v) if not isinstance(v, str) else v))


WIRE = {"AttributeNames": "AttributeName", "MessageAttributeNames": "MessageAttributeName",
        "MessageSystemAttributeNames": "MessageSystemAttributeName", "TagKeys": "TagKey", "Attributes": "Attribute",
        "Tags": "Tag", "MessageAttributes": "MessageAttribute", "MessageSystemAttributes": "MessageSystemAttribute"}
ENTRY = {"SendMessageBatch": "SendMessageBatchRequestEntry", "DeleteMessageBatch": "DeleteMessageBatchRequestEntry",
         "ChangeMessageVisibilityBatch": "ChangeMessageVisibilityBatchRequestEntry"}


@st.composite
def query_forms(draw, urls):
    action, req = draw(json_requests(urls))
    form: list = [("Action", action)]
    for k, v in req.items():
        if k == "Entries":
            flat(ENTRY.get(action, "Entry"), v, form)
        else:
            flat(WIRE.get(k, k), v, form)
    form += draw(st.lists(st.tuples(st.sampled_from([f"{ENTRY.get(action, 'X')}.1.Id", "AttributeName.99999999999",
                                                      "Attribute.1.Name", "MessageAttribute.1.Value.DataType",
                                                      "QueueUrl", "MaxNumberOfMessages", "Action"]), odd_text),
                          max_size=3))
    def text(x: str) -> str:  # (a form cannot carry a lone surrogate)
        return x.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    return [(text(k), text(v)) for k, v in form]


def test_query_protocol_wrong_types_never_5xx(h, urls):
    @FUZZ
    @given(query_forms(urls))
    def run(form):
        query_call(h, form)
    run()


@pytest.mark.parametrize("action,req", [
    ("ListQueues", {"NextToken": 5}), ("ListQueues", {"QueueNamePrefix": ["a"]}),
    ("ListQueues", {"NextToken": {"a": 1}}), ("ListQueues", {"QueueNamePrefix": 7, "MaxResults": "x"}),
    ("GetQueueAttributes", {"QueueUrl": "U", "AttributeNames": [1, None]}),
    ("ReceiveMessage", {"QueueUrl": "U", "MessageSystemAttributeNames": [["All"]]}),
    ("ReceiveMessage", {"QueueUrl": "U", "AttributeNames": [{"a": 1}]}),
    ("ReceiveMessage", {"QueueUrl": "U", "MessageAttributeNames": [5]}),
    ("ListDeadLetterSourceQueues", {"QueueUrl": "U", "NextToken": 5}),
    ("ListDeadLetterSourceQueues", {"QueueUrl": "U", "NextToken": "%%%"}),
    ("CreateQueue", {"QueueName": 5}), ("GetQueueUrl", {"QueueName": ["fz"]}),
    ("UntagQueue", {"QueueUrl": "U", "TagKeys": [None, 1]}),
    ("TagQueue", {"QueueUrl": "U", "Tags": {"k": "\ud800"}}),
    ("SendMessage", {"QueueUrl": "U", "MessageBody": "x", "MessageGroupId": 5}),
    ("SendMessage", {"QueueUrl": "U", "MessageBody": "x", "MessageAttributes": {"a": {"DataType": 5}}}),
    ("SendMessage", {"QueueUrl": "U", "MessageBody": "x",
                     "MessageAttributes": {"a": {"DataType": "Binary", "BinaryValue": 5}}}),
    ("SendMessage", {"QueueUrl": "U", "MessageBody": "x", "MessageSystemAttributes": {
        "AWSTraceHeader": {"DataType": "String", "StringValue": "\x01"}}}),
    ("SendMessageBatch", {"QueueUrl": "U", "Entries": {"Id": "a", "MessageBody": "x"}}),
    ("SendMessageBatch", {"QueueUrl": "U", "Entries": [{"Id": "a", "MessageBody": "x", "DelaySeconds": 2**70}]}),
    ("DeleteMessageBatch", {"QueueUrl": "U", "Entries": [{"Id": 5}]}),
    ("ChangeMessageVisibility", {"QueueUrl": "U", "ReceiptHandle": "H", "VisibilityTimeout": 1.5}),
    ("SetQueueAttributes", {"QueueUrl": "U", "Attributes": {"Policy": "\ud800"}}),
    ("SetQueueAttributes", {"QueueUrl": "U", "Attributes": {"RedrivePolicy": '{"deadLetterTargetArn": 5, '
                                                           '"maxReceiveCount": 1}'}}),
    ("SetQueueAttributes", {"QueueUrl": "U", "Attributes": {"RedrivePolicy": '{"deadLetterTargetArn": '
                                                           '"arn:aws:sqs:us-east-1:1:fz", "maxReceiveCount": 1e400}'}}),
])
def test_named_malformed_requests_are_400(h, urls, action, req):
    req = {k: (urls[0] if v == "U" else urls[2] if v == "H" else v) for k, v in req.items()}
    status, doc = json_call(h, action, req)
    assert 400 <= status < 500 or (doc.get("Failed") and not doc.get("Successful")), doc
