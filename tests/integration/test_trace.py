"""Issue 34 item 3: a message's X-Ray trace context travels from its produce to every delivery. The
produce request's ``X-Amzn-Trace-Id`` (else the produce function's own ``_X_AMZN_TRACE_ID``) is kept
with each message and comes back as ``trace`` on a pull (a group's, a subscription's, a dead-letter
copy's, a delayed message's) and as the SQS system attribute ``AWSTraceHeader``."""
from __future__ import annotations

import json

import pytest

from lakeq.sqs import handler as sqs_service
from tests.handlers import Context, segment_records
from tests.history import path
from tests.integration.sqs_harness import Harness, fake_auth

T = "quotes"
TRACE = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"
OTHER = "Root=1-67891233-abcdef012345678912345678;Sampled=0"


def produce(api, key, messages, trace=None, topic=T):
    ev, h = api.event("POST", path(topic), {"producer": "feed", "messages": messages}, None, key, None)
    if trace is not None:
        ev["headers"]["x-amzn-trace-id"] = trace
    s, b = api.through_gateway(ev, h)
    assert s == 200, b
    return b


def pull(api, key, group="risk", topic=T):
    s, b = api.call("GET", path(topic), query={"group": group, "max": 100}, key=key)
    assert s == 200, b
    return b


@pytest.mark.parametrize("header, env, kept", [
    (TRACE, None, TRACE),
    (None, OTHER, OTHER),                   # no header: the produce invocation's own trace
    (TRACE, OTHER, TRACE),                  # the caller's wins
    ("Root=1-nothex!-x", OTHER, OTHER),     # a malformed header is ignored, not refused
    ("Root=1-nothex!-x", None, None),
    ("Root=1-5759e988-bd862e3fe1be46a994272793;" + "x" * 300, None, None),  # over 256 characters
    (None, None, None),
])
def test_pull_returns_the_trace_the_produce_carried(api, setup, monkeypatch, header, env, kept):
    if env is None:
        monkeypatch.delenv("_X_AMZN_TRACE_ID", raising=False)
    else:
        monkeypatch.setenv("_X_AMZN_TRACE_ID", env)
    produce(api, setup["feed"], [{"body": "a", "key": "k"}, {"body": "d", "key": "k"}], trace=header)
    (a, d) = pull(api, setup["risk"])["messages"]
    assert a.get("trace") == kept and d.get("trace") == kept
    assert ("trace" in a) == (kept is not None)  # no field without a trace (the response is unchanged)


@pytest.mark.moto  # reads DynamoDB Streams (the fan-out)
def test_the_trace_follows_delayed_dead_lettered_and_subscription_copies(api, setup, dlq, clock, monkeypatch, aws,
                                                                         fanout_handler):
    from tests.integration.test_settlement import patch
    monkeypatch.delenv("_X_AMZN_TRACE_ID", raising=False)
    s, sub = api.call("POST", "/v1/subscriptions", {"topic": T, "subscriber": "risk"}, key=setup["risk"])
    assert s == 201, sub
    assert patch(api, "risk", {"dead_letter_topic": "dlq"})[0] == 200
    produce(api, setup["feed"], [{"body": "later", "key": "k", "delay_ms": 1000}], trace=TRACE)
    clock.t += 1000
    got = pull(api, setup["risk"])  # promoted by the pull
    assert [(m["body"], m["trace"]) for m in got["messages"]] == [("later", TRACE)]
    s, out = api.call("POST", "/v1/acks", {"group": "risk", "receipt": got["receipt"]}, key=setup["risk"])
    assert s == 200, out
    produce(api, setup["feed"], [{"body": "poison", "key": "k"}], trace=OTHER)
    b = pull(api, setup["risk"])
    s, out = api.call("POST", "/v1/acks", {"group": "risk", "receipt": b["receipt"],
                                           "reject": [b["messages"][0]["offset"]]},
                      key=setup["risk"])
    assert s == 200, out
    (copy,) = pull(api, dlq, group="ops", topic="dlq")["messages"]
    assert copy["dead_letter"]["reason"] == "rejected" and copy["trace"] == OTHER
    assert fanout_handler({"Records": segment_records(aws)}, Context()) == {"batchItemFailures": []}
    s, lst = api.call("GET", f"/v1/subscriptions/{sub['id']}/messages", query={"max": 10}, key=setup["risk"])
    assert s == 200, lst
    assert [(x["body"], x.get("trace")) for x in lst["messages"]] == [("later", TRACE), ("poison", OTHER)]


def test_sqs_receive_shows_a_traced_produce_as_awstraceheader(api, monkeypatch):
    monkeypatch.setattr(sqs_service, "authenticate_request", fake_auth)
    monkeypatch.delenv("_X_AMZN_TRACE_ID", raising=False)
    sqs = Harness().client("admin")
    url = sqs.create_queue(QueueName="jobs")["QueueUrl"]
    s, feed = api.call("POST", "/v1/clients", {"name": "feed", "role": "producer", "topics": ["jobs"]})
    assert s == 201, feed
    produce(api, feed["api_key"], [{"body": "hi"}], trace=TRACE, topic="jobs")
    produce(api, feed["api_key"], [{"body": "untraced"}], topic="jobs")
    got = {m["Body"]: m for m in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10,
                                                      MessageSystemAttributeNames=["AWSTraceHeader"])["Messages"]}
    assert got["hi"]["Attributes"] == {"AWSTraceHeader": TRACE}
    assert "AWSTraceHeader" not in got["untraced"].get("Attributes", {})


@pytest.mark.moto  # reads DynamoDB Streams (the fan-out)
def test_push_carries_the_trace_in_the_body_and_one_trace_as_the_header(api, setup, aws, monkeypatch):
    from lakeq.push import delivery as push
    from tests.integration.test_push import Poster, fan_out, register, subscribe
    monkeypatch.delenv("_X_AMZN_TRACE_ID", raising=False)
    sid = subscribe(api, setup["risk"])
    register(api, sid, setup["risk"], batch_size=10)
    produce(api, setup["feed"], [{"body": "a", "key": "k"}, {"body": "b", "key": "k"}], trace=TRACE)
    fan_out(aws)
    poster = Poster()
    assert push.deliver(sid, poster).delivered == 2
    (url, headers, body, _t), = poster.calls
    assert headers["X-Amzn-Trace-Id"] == TRACE
    assert [m["trace"] for m in json.loads(body)["messages"]] == [TRACE, TRACE]
    # two producers' traces in one batch: each message keeps its own, no batch header
    produce(api, setup["feed"], [{"body": "c", "key": "k"}], trace=TRACE)
    produce(api, setup["feed"], [{"body": "d", "key": "k"}], trace=OTHER)
    fan_out(aws)
    poster = Poster()
    assert push.deliver(sid, poster).delivered == 2
    (url, headers, body, _t), = poster.calls
    assert "X-Amzn-Trace-Id" not in headers
    assert [m["trace"] for m in json.loads(body)["messages"]] == [TRACE, OTHER]


def test_an_sqs_send_keeps_only_a_bounded_printable_awstraceheader(api, monkeypatch):
    """Review of issue 34: a send's ``AWSTraceHeader`` was kept as sent, any length and any character,
    and shown to every consumer of the queue (SQS consumers and their X-Ray parsers). Now one that is
    not printable ASCII of at most 256 characters is ignored (the message is sent, without it), as
    lakeq's own produce ignores a malformed ``X-Amzn-Trace-Id``; a well-formed one still goes through."""
    monkeypatch.setattr(sqs_service, "authenticate_request", fake_auth)
    sqs = Harness().client("admin")
    url = sqs.create_queue(QueueName="jobs")["QueueUrl"]
    sent = {"ok": TRACE, "newline": TRACE + "\r\nX-Injected: 1", "long": TRACE + ";Lineage=" + "a" * 300}
    for body, header in sent.items():
        sqs.send_message(QueueUrl=url, MessageBody=body,
                         MessageSystemAttributes={"AWSTraceHeader": {"DataType": "String", "StringValue": header}})
    got = {m["Body"]: m.get("Attributes", {}) for m in sqs.receive_message(
        QueueUrl=url, MaxNumberOfMessages=10, MessageSystemAttributeNames=["AWSTraceHeader"])["Messages"]}
    assert got == {"ok": {"AWSTraceHeader": TRACE}, "newline": {}, "long": {}}
