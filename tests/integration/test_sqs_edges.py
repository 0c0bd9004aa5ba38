"""Issue 14, item 4 (the SQS edges): PurgeQueue and delayed messages, well-formed XML answers
whatever a body holds, a linear query-protocol batch parser, and no 5xx for a malformed but signed
request (hypothesis over every action's members, both protocols)."""
from __future__ import annotations

import pytest

from tests.history import path
from tests.integration.sqs_harness import Harness, fake_auth, h, sqs  # noqa: F401 (h, sqs: fixtures)


def receive_all(sqs, url, rounds=6):
    got = []
    for _ in range(rounds):
        got += sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=60).get("Messages", [])
    return got


# --- PurgeQueue ---------------------------------------------------------------------------------------
def test_purge_also_purges_delayed_messages_already_due(sqs, clock):
    url = sqs.create_queue(QueueName="p")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="now")
    for i in range(3):
        sqs.send_message(QueueUrl=url, MessageBody=f"due{i}", DelaySeconds=1 + i)
    clock.t += 10_000  # all due, none promoted yet (nobody pulled)
    sqs.purge_queue(QueueUrl=url)
    assert receive_all(sqs, url) == []
    sqs.send_message(QueueUrl=url, MessageBody="after")
    assert [m["Body"] for m in receive_all(sqs, url)] == ["after"]


def test_purge_keeps_delayed_messages_not_yet_due_for_sqs_and_other_groups(api, sqs, clock):
    """lakeq's deliberate difference (docs/api.md PurgeQueue): a delayed message not yet due belongs
    to the topic (every group reads it), so PurgeQueue keeps it; one already due is purged."""
    url = sqs.create_queue(QueueName="p2")["QueueUrl"]
    s, c = api.call("POST", "/v1/clients", {"name": "other", "role": "consumer", "topics": ["p2"]})
    assert s == 201
    sqs.send_message(QueueUrl=url, MessageBody="due", DelaySeconds=1)
    sqs.send_message(QueueUrl=url, MessageBody="later", DelaySeconds=60)
    clock.t += 2_000
    sqs.purge_queue(QueueUrl=url)
    clock.t += 60_000
    assert [m["Body"] for m in receive_all(sqs, url)] == ["later"]
    bodies = []
    for _ in range(8):
        s, b = api.call("GET", path("p2"), query={"group": "other", "max": 100}, key=c["api_key"])
        assert s == 200, b
        bodies += [m["body"] for m in b["messages"]]
        if b.get("receipt"):
            api.call("POST", "/v1/acks", {"group": "other", "receipt": b["receipt"]}, key=c["api_key"])
    assert sorted(bodies) == ["due", "later"]


# --- XML answers ------------------------------------------------------------------------------------
def raw_event(path_: str, body: str, headers: dict) -> dict:
    import copy

    from tests.handlers import sample
    ev = copy.deepcopy(sample("health.json"))
    route = "/" if path_ == "/" else "/{account}/{queue}"
    ev["routeKey"] = ev["requestContext"]["routeKey"] = f"POST {route}"
    ev["rawPath"] = ev["requestContext"]["http"]["path"] = path_
    ev["requestContext"]["http"]["method"] = "POST"
    ev["rawQueryString"] = ""
    ev["headers"] = {"host": "lakeq.test:3000",
                     "authorization": "AWS4-HMAC-SHA256 Credential=admin/20260101/us-east-1/sqs/aws4_request, "
                                      "SignedHeaders=host, Signature=00", **headers}
    ev["body"] = body
    ev["isBase64Encoded"] = False
    return ev


def query(h, form: dict | list, path_: str = "/"):
    """A query-protocol call; returns (status, parsed XML root): every answer must parse."""
    import xml.etree.ElementTree as ET
    from urllib.parse import urlencode

    from tests.handlers import Context
    out = h.handler(raw_event(path_, urlencode(form), {"content-type": "application/x-www-form-urlencoded"}),
                    Context())
    assert out["headers"]["Content-Type"] == "text/xml"
    return out["statusCode"], ET.fromstring(out["body"].encode("utf-8"))


NS = {"q": "http://queue.amazonaws.com/doc/2012-11-05/"}


def test_xml_receive_of_any_native_body_is_well_formed_and_md5_checks(h, sqs, api):
    import hashlib

    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from lakeq.sqs.protocol import md5_attributes
    url = sqs.create_queue(QueueName="x")["QueueUrl"]
    s, feed = api.call("POST", "/v1/clients", {"name": "feed", "role": "producer", "topics": ["x"]})
    assert s == 201
    text = st.text(st.characters(blacklist_categories=["Cs"]), min_size=1, max_size=40)

    @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.lists(st.tuples(text, text), min_size=1, max_size=4))
    def run(items):
        msgs = [{"body": b, "key": "k", "properties": {"p": v}} for b, v in items]
        s, b = api.call("POST", path("x"), {"producer": "feed", "messages": msgs}, key=feed["api_key"])
        assert s == 200, b
        status, x = query(h, {"Action": "ReceiveMessage", "QueueUrl": url, "MaxNumberOfMessages": "10",
                              "MessageAttributeName.1": "All", "AttributeName.1": "All"})
        assert status == 200
        got = x.findall("q:ReceiveMessageResult/q:Message", NS)
        assert len(got) == len(items)
        for m, (body, value) in zip(got, items):
            delivered = m.find("q:Body", NS).text or ""
            assert hashlib.md5(delivered.encode("utf-8")).hexdigest() == m.find("q:MD5OfBody", NS).text
            if all(c in "\t\n\r" or " " <= c <= "\ud7ff" or "\ue000" <= c <= "\ufffd" or c >= "\U00010000"
                   for c in body):
                assert delivered == body  # XML can carry it: delivered exactly
            attrs = {a.find("q:Name", NS).text: {"DataType": a.find("q:Value/q:DataType", NS).text,
                                                 "StringValue": a.find("q:Value/q:StringValue", NS).text or ""}
                     for a in m.findall("q:MessageAttribute", NS)}
            assert md5_attributes(attrs) == m.find("q:MD5OfMessageAttributes", NS).text
        for m in got:  # (deleted one by one: PurgeQueue is once a minute, as SQS's)
            assert query(h, {"Action": "DeleteMessage", "QueueUrl": url,
                             "ReceiptHandle": m.find("q:ReceiptHandle", NS).text})[0] == 200
    run()


@pytest.mark.parametrize("form", [
    {"Action": "GetQueueAttributes", "QueueUrl": "Q", "AttributeName.1": "\x01<&\r"},
    {"Action": "GetQueueUrl", "QueueName": "a\x00b"},
    {"Action": "SendMessage", "QueueUrl": "Q", "MessageBody": "\x00"},
    {"Action": "SendMessage", "QueueUrl": "Q", "MessageBody": "ok", "MessageAttribute.1.Name": "a",
     "MessageAttribute.1.Value.DataType": "String", "MessageAttribute.1.Value.StringValue": "\x02"},
    {"Action": "SendMessageBatch", "QueueUrl": "Q", "SendMessageBatchRequestEntry.1.Id": "a",
     "SendMessageBatchRequestEntry.1.MessageBody": "\uffff"},
    {"Action": "DeleteMessage", "QueueUrl": "Q", "ReceiptHandle": "\x01\x02"},
    {"Action": "NoSuch\x01Action"},
    {"Action": "TagQueue", "QueueUrl": "Q", "Tag.1.Key": "k", "Tag.1.Value": "\x03v\r"},
])
def test_xml_answers_to_bad_characters_are_well_formed(h, sqs, form):
    url = sqs.create_queue(QueueName="x")["QueueUrl"]
    form = {k: (url if v == "Q" else v) for k, v in form.items()}
    status, x = query(h, form)  # parses
    assert status < 500
    if form["Action"] == "SendMessage":
        assert status == 400 and x.find("q:Error/q:Code", NS).text == "InvalidMessageContents"
    if form["Action"] == "SendMessageBatch":
        assert x.find("q:SendMessageBatchResult/q:BatchResultErrorEntry/q:Code", NS).text == "InvalidMessageContents"
    if form["Action"] == "TagQueue" and status == 200:
        status, x = query(h, {"Action": "ListQueueTags", "QueueUrl": url})
        assert status == 200
