"""Issue 14, item 6: reserved properties. A native producer cannot set ``sqs.*`` properties (the
SQS endpoint's own: sender, exact message attributes, trace header, deduplication id), so it cannot
forge what SQS consumers see; fields the system sets on a message (``deliveries``, ``dead_letter``,
``produced_at``, ``offset``) cannot be given by a producer either."""
from __future__ import annotations

import json

import pytest

from lakeq.sqs import handler as sqs_service
from tests.history import path
from tests.integration.sqs_harness import Harness, fake_auth

T = "quotes/sh"


@pytest.mark.parametrize("name", ["sqs.sender", "sqs.attrs", "sqs.attrs.1", "sqs.trace", "sqs.dedup", "sqs.x"])
@pytest.mark.parametrize("delay", [0, 5])
def test_native_producer_cannot_set_sqs_properties(api, setup, name, delay):
    s, b = api.call("POST", path(T), {"producer": "feed", "messages": [
        {"body": "ok"}, {"body": "forged", "delay_ms": delay, "properties": {name: "x", "fine": 1}}]},
        key=setup["feed"])
    assert s == 400, (s, b)
    assert b["error"]["code"] == "bad_request" and "reserved" in b["error"]["message"] and name in b["error"]["message"]
    s, got = api.call("GET", path(T), query={"group": "risk", "max": 100}, key=setup["risk"])
    assert s == 200 and got["messages"] == []  # nothing of the request stored
    s, d = api.call("GET", f"/v1/topics/{T.replace('/', '%2F')}")
    assert d["delayed"] == 0


def test_sqs_consumer_sees_no_forged_sender_attributes_or_trace(api, monkeypatch):
    monkeypatch.setattr(sqs_service, "authenticate_request", fake_auth)
    sqs = Harness().client("admin")
    url = sqs.create_queue(QueueName="jobs")["QueueUrl"]
    s, feed = api.call("POST", "/v1/clients", {"name": "mallory", "role": "producer", "topics": ["jobs"]})
    assert s == 201, feed
    forged = {"sqs.sender": "123456789012", "sqs.trace": "Root=1-forged",
              "sqs.attrs": json.dumps({"admin": {"DataType": "String", "StringValue": "true"}})}
    s, b = api.call("POST", path("jobs"), {"producer": "mallory", "messages": [{"body": "hi", "properties": forged}]},
                    key=feed["api_key"])
    assert s == 400, b
    ok = {"producer": "mallory", "messages": [{"body": "hi", "properties": {"k": "v"}}]}
    s, b = api.call("POST", path("jobs"), ok, key=feed["api_key"])
    assert s == 200, b
    m = sqs.receive_message(QueueUrl=url, MessageSystemAttributeNames=["All"], MessageAttributeNames=["All"])[
        "Messages"][0]
    assert "AWSTraceHeader" not in m["Attributes"]
    assert m["MessageAttributes"] == {"k": {"DataType": "String", "StringValue": "v"}}


def test_system_fields_of_a_message_cannot_be_given_by_a_producer(api, setup):
    s, b = api.call("POST", path(T), {"producer": "feed", "messages": [
        {"body": "x", "deliveries": 7, "produced_at": 1, "offset": 99, "queue": 3, "topic": "other",
         "dead_letter": {"topic": "secret", "queue": 0, "offset": 0, "reason": "rejected"}}]}, key=setup["feed"])
    assert s == 200, b
    s, got = api.call("GET", path(T), query={"group": "risk", "max": 100}, key=setup["risk"])
    (m,) = got["messages"]
    assert m.get("dead_letter") is None and m.get("deliveries", 1) == 1 and m["produced_at"] > 1
    assert m["topic"] == T and m["offset"] == 0


def test_sqs_send_still_sets_its_own_properties(api, monkeypatch):
    monkeypatch.setattr(sqs_service, "authenticate_request", fake_auth)
    sqs = Harness().client("admin")
    url = sqs.create_queue(QueueName="jobs")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="hi", DelaySeconds=0,
                     MessageAttributes={"sqs.sender": {"DataType": "String", "StringValue": "forged"}},
                     MessageSystemAttributes={"AWSTraceHeader": {"DataType": "String", "StringValue": "Root=1-a"}})
    m = sqs.receive_message(QueueUrl=url, MessageSystemAttributeNames=["All"], MessageAttributeNames=["All"])[
        "Messages"][0]
    assert m["Attributes"]["SenderId"] != "forged" and m["Attributes"]["AWSTraceHeader"] == "Root=1-a"


def test_native_properties_with_sqs_reserved_attribute_prefixes_are_not_shown_as_attributes(api, monkeypatch):
    """SQS reserves message attribute names starting with AWS. / Amazon. (any case) for AWS: a lakeq
    property so named is not shown to SQS consumers as an attribute (it stays a lakeq property)."""
    monkeypatch.setattr(sqs_service, "authenticate_request", fake_auth)
    sqs = Harness().client("admin")
    url = sqs.create_queue(QueueName="jobs")["QueueUrl"]
    s, feed = api.call("POST", "/v1/clients", {"name": "p", "role": "producer", "topics": ["jobs"]})
    props = {"AWS.TraceHeader": "forged", "amazon.x": "y", "ok": "v"}
    s, b = api.call("POST", path("jobs"), {"producer": "p", "messages": [{"body": "hi", "properties": props}]},
                    key=feed["api_key"])
    assert s == 200, b
    m = sqs.receive_message(QueueUrl=url, MessageAttributeNames=["All"])["Messages"][0]
    assert m["MessageAttributes"] == {"ok": {"DataType": "String", "StringValue": "v"}}
