"""Issue 18.2: messages up to 1 MiB. A body whose stored form is over 300 KiB goes to the lake bucket
by claim check (lakeq.log.claims, lakeq.store.bodies): the segment keeps the claim (key, size,
digest), a reader fetches and checks the body, copies (delayed items, subscription lists,
dead-letter copies) copy the claim. Every call below runs as its function with the IAM of
template.yaml (infra/local/aws_rules.py) and DynamoDB's item limits."""
from __future__ import annotations

import base64
import json
import os
import random

import pytest

from infra.local import template as tpl
from lakeq.common.payload import LAMBDA_RESPONSE_LIMIT
from lakeq.log import claims
from lakeq.store.models import DelayedModel, QueueModel, SegmentModel
from tests.crash import CountCalls, Crash, CrashAfter
from tests.handlers import Context, segment_records
from tests.history import path

MIB = 1024 * 1024
T = "quotes/sh"
BUCKET = os.environ["LAKE_BUCKET"]


def produce(api, key, *messages, topic=T):
    """As lakeq_client sends it: compact JSON, UTF-8 unescaped (an escaped astral character costs 12
    bytes of the 3,000,000-byte request limit instead of 4)."""
    raw = json.dumps({"producer": "feed", "messages": list(messages)}, ensure_ascii=False, separators=(",", ":"))
    return api.call("POST", path(topic), key=key, raw_body=raw)


def pull_all(api, key, want: int, topic=T, **query) -> list[dict]:
    """Pull (and ack) until ``want`` messages came; every response under Lambda's 6 MB."""
    got: list[dict] = []
    for _ in range(4 * want + 4):
        s, b = api.call("GET", path(topic), query={"group": "risk", "max": 100, **query}, key=key)
        assert s == 200, str(b)[:300]
        assert len(json.dumps(json.dumps(b))) < LAMBDA_RESPONSE_LIMIT
        got += b["messages"]
        if b.get("receipt"):
            assert api.call("POST", "/v1/acks", {"group": "risk", "receipt": b["receipt"]}, key=key)[0] == 200
        if len(got) >= want:
            break
    return got


class CrashAfterPut(CrashAfter):
    """The function dies right after its first S3 PutObject reached the bucket."""

    def __init__(self, functions):
        super().__init__(0, functions)

    def after(self, call, response):
        if self._counts(call) and not self.fired:
            self.calls.append(call)
            if (call.service, call.operation) == ("s3", "PutObject"):
                self.fired = True
                raise Crash(f"crashed after {call.service}.{call.operation}")
        return response


def state(topic=T):
    queues = sorted((q for q in QueueModel.scan(consistent_read=True) if q.topic == topic), key=lambda q: q.queue)
    return ([(q.queue, q.max_offset) for q in queues],
            sum(1 for q in queues for _ in SegmentModel.query(f"{topic}#{int(q.queue)}")))


def objects(aws) -> list[str]:
    out = aws["s3"].list_objects_v2(Bucket=BUCKET, Prefix=claims.PREFIX)
    return [o["Key"] for o in out.get("Contents", [])]


def segment_sizes(log: str) -> list[int]:
    return [len(s.data) + len(s.idx) for q in range(4) for s in SegmentModel.query(f"{log}#{q}")]


BODIES = {
    "ascii_1mib": "x" * MIB,
    "base64_binary": base64.b64encode(random.Random(7).randbytes(MIB // 4 * 3)).decode(),  # exactly 1 MiB
    "two_byte_utf8": "é" * (MIB // 2),  # 1 MiB of UTF-8, 512 Ki characters
    "astral_utf8": "\U0001f600" * (MIB // 4),
    "quotes": '"' * MIB,  # the widest JSON: 4 MiB in the Lambda response, still one message fits
}


@pytest.mark.parametrize("kind", sorted(BODIES))
def test_a_1mib_body_round_trips_through_the_lake_bucket(api, setup, aws, kind):
    body = BODIES[kind]
    assert len(body.encode("utf-8")) == MIB
    s, b = produce(api, setup["feed"], {"id": "big", "body": body, "key": "k", "tags": ["hot"]},
                   {"id": "small", "body": "s", "key": "k"})
    assert s == 200, b
    assert len(objects(aws)) == 1  # the small one stays inline
    assert max(segment_sizes(T)) < 4096  # the segment holds the claim, not the body
    got = pull_all(api, setup["risk"], 2)
    assert [(m["id"], m["body"] == x) for m, x in zip(got, (body, "s"))] == [("big", True), ("small", True)]
    assert got[0]["tags"] == ["hot"] and "claim" not in got[0]
    if kind == "base64_binary":
        assert base64.b64decode(got[0]["body"]) == random.Random(7).randbytes(MIB // 4 * 3)
    # a retried produce of the same id changes nothing and puts no second object
    assert produce(api, setup["feed"], {"id": "big", "body": body, "key": "k"}) == (200, {"results": [b["results"][0]]})
    assert len(objects(aws)) == 1


def test_small_messages_cost_no_s3_call(api, setup, aws):
    # just under the old per-message limit (300 KiB with id, key, tags, properties): inline as before
    assert produce(api, setup["feed"], *[{"body": "x" * (300 * 1024 - 200), "tags": ["t"]}] * 2)[0] == 200
    with CountCalls() as c:
        assert len(pull_all(api, setup["risk"], 2)) == 2
    assert objects(aws) == [] and not [x for x in c.calls if x.service == "s3"]


@pytest.mark.parametrize("body", ["x" * (MIB + 1), "é" * (MIB // 2) + "x", "\U0001f600" * (MIB // 4) + "é"],
                         ids=["ascii", "two_byte_utf8", "astral_utf8"])
def test_over_1mib_of_utf8_is_413_and_changes_nothing(api, setup, aws, body):
    before = state()
    s, b = produce(api, setup["feed"], {"body": body})
    assert s == 413 and b["error"]["code"] == "payload_too_large" and set(b["error"]) == {"code", "message"}, b
    assert "1048576" in b["error"]["message"]
    assert state() == before and objects(aws) == []


def test_metadata_beyond_300_kib_is_413(api, setup, aws):
    props = {f"p{i}": "\U0001f600" * 1024 for i in range(64)}  # 256 KiB of 4-byte characters + names
    s, b = produce(api, setup["feed"], {"body": "x", "properties": props, "tags": ["t" * 128] * 16, "key": "é" * 256})
    assert s == 200, b  # under 300 KiB of metadata: accepted, as before
    props2 = {f"p{i}": ("\x01" * 1024) for i in range(64)}  # \u0001: 6 bytes each as JSON: 384 KiB
    s, b = produce(api, setup["feed"], {"body": "x", "properties": props2})
    assert s == 413 and "id, key, tags and properties" in b["error"]["message"], b


def test_a_crash_between_the_put_and_the_segment_write_leaves_no_visible_message(api, setup, aws):
    body = "y" * MIB
    msg = {"id": "c1", "body": body, "key": "k"}
    with CountCalls({"ProduceFunction"}) as c:
        assert produce(api, setup["feed"], dict(msg, id="probe"))[0] == 200
    ops = [(x.service, x.operation) for x in c.calls]
    k = ops.index(("s3", "PutObject"))
    assert ("dynamodb", "TransactWriteItems") in ops[k:] and not [o for o in ops[:k] if "Write" in o[1]], ops
    assert pull_all(api, setup["risk"], 1)[0]["id"] == "probe"
    before = state()
    with CrashAfterPut({"ProduceFunction"}) as crash:
        crashed, _ = crash.run(lambda: produce(api, setup["feed"], msg))
    assert crashed and crash.calls[-1].operation == "PutObject"
    assert state() == before  # no segment, the head did not move
    s, b = api.call("GET", path(T), query={"group": "risk", "max": 100}, key=setup["risk"])
    assert (s, b["messages"]) == (200, [])  # nothing visible
    leaked = [o for o in objects(aws) if o not in [claims.object_key(T, "probe", claims.digest(body.encode()))]]
    assert len(leaked) == 1  # the unreferenced object, which the bucket's lifecycle rule removes:
    rules = tpl.load_template()["Resources"]["LakeBucket"]["Properties"]["LifecycleConfiguration"]["Rules"]
    assert any(r.get("Prefix") == claims.PREFIX and r["Status"] == "Enabled" and r["ExpirationInDays"] >= 400
               for r in rules)
    # the client retries: one message, the same object (no second leak)
    assert produce(api, setup["feed"], msg)[0] == 200
    assert len([o for o in objects(aws) if o not in leaked]) == 1
    got = pull_all(api, setup["risk"], 1)
    assert [(m["id"], m["body"] == body) for m in got] == [("c1", True)]


def test_a_body_that_does_not_match_its_claim_is_an_error_not_a_wrong_body(api, setup, aws):
    assert produce(api, setup["feed"], {"id": "m", "body": "z" * MIB})[0] == 200
    key, = objects(aws)
    aws["s3"].put_object(Bucket=BUCKET, Key=key, Body=b"z" * (MIB - 1) + b"Z")
    s, b = api.call("GET", path(T), query={"group": "risk"}, key=setup["risk"])
    assert s == 500 and b["error"]["code"] == "internal_error", b
    aws["s3"].delete_object(Bucket=BUCKET, Key=key)
    s, b = api.call("GET", path(T), query={"group": "risk"}, key=setup["risk"])
    assert s == 500 and b["error"]["code"] == "internal_error", b


def test_a_pull_of_big_messages_is_cut_under_6_mb_and_loses_nothing(api, setup, aws):
    bodies = [chr(ord("a") + i) * MIB for i in range(8)]  # 8 MiB: at most 5 fit one response
    for i in range(0, 8, 2):
        assert produce(api, setup["feed"], *[{"body": x, "key": "k"} for x in bodies[i:i + 2]])[0] == 200
    sizes = []
    got = []
    for _ in range(8):
        s, b = api.call("GET", path(T), query={"group": "risk", "max": 100}, key=setup["risk"])
        assert s == 200
        sizes.append(len(b["messages"]))
        got += [m["body"] for m in b["messages"]]
        if b["receipt"]:
            assert api.call("POST", "/v1/acks", {"group": "risk", "receipt": b["receipt"]}, key=setup["risk"])[0] == 200
        if len(got) == 8:
            break
    assert got == bodies and max(sizes) < 8 and len(sizes) >= 2, sizes


def test_a_delayed_big_message_keeps_the_claim_in_its_delayed_item(api, setup, aws, clock):
    body = "d" * MIB
    s, b = produce(api, setup["feed"], {"id": "later", "body": body, "delay_ms": 5000})
    assert s == 200 and b["results"][0]["offset"] is None, b
    items = list(DelayedModel.scan())
    assert len(items) == 1 and len(bytes(items[0].data)) < 4096
    s, b = api.call("GET", path(T), query={"group": "risk"}, key=setup["risk"])
    assert b["messages"] == []
    clock.t += 5000
    got = pull_all(api, setup["risk"], 1)
    assert [(m["id"], m["body"] == body) for m in got] == [("later", True)]
    assert len(objects(aws)) == 1


@pytest.mark.moto  # reads DynamoDB Streams
def test_fanout_copies_the_claim_to_a_subscription_list(api, setup, aws, fanout_handler):
    s, sub = api.call("POST", "/v1/subscriptions", {"subscriber": "risk", "topic": "quotes"}, key=setup["risk"])
    assert s == 201, sub
    body = "\U0001f600é" * (MIB // 6)
    assert produce(api, setup["feed"], {"id": "f", "body": body, "properties": {"type": "A"}}, topic="quotes")[0] == 200
    records = segment_records(aws)
    assert len(records) == 1
    assert fanout_handler({"Records": records}, Context()) == {"batchItemFailures": []}
    entries = list(SegmentModel.query(f"~{sub['id']}#0"))
    assert len(entries) == 1 and len(entries[0].data) < 4096  # the list entry holds the claim
    assert len(objects(aws)) == 1  # one object for the message and its copy
    s, b = api.call("GET", f"/v1/subscriptions/{sub['id']}/messages", key=setup["risk"])
    assert s == 200, b
    assert [(m["id"], m["topic"], m["body"] == body) for m in b["messages"]] == [("f", "quotes", True)]


def test_sqs_endpoint_defaults_to_1_mib_and_round_trips_it(aws, monkeypatch, clock):
    from lakeq.sqs import handler as sqs_service
    from lakeq.sqs import protocol as sp
    from tests.integration.sqs_harness import Harness, fake_auth
    monkeypatch.setattr(sqs_service, "authenticate_request", fake_auth)
    sqs = Harness().client("admin")
    url = sqs.create_queue(QueueName="big")["QueueUrl"]
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["MaximumMessageSize"])["Attributes"]
    assert attrs == {"MaximumMessageSize": "1048576"}
    body = "s" * (MIB - 20)
    sent = sqs.send_message(QueueUrl=url, MessageBody=body,
                            MessageAttributes={"a": {"DataType": "String", "StringValue": "x" * 10}})
    assert sent["MD5OfMessageBody"] == sp.md5_hex(body)
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, MessageAttributeNames=["All"])["Messages"]
    assert [m["Body"] == body for m in got] == [True]  # (boto3 checks MD5OfBody itself)
    sqs.delete_message(QueueUrl=url, ReceiptHandle=got[0]["ReceiptHandle"])
    with pytest.raises(sqs.exceptions.ClientError) as e:
        sqs.send_message(QueueUrl=url, MessageBody="s" * (MIB - 9),
                         MessageAttributes={"a": {"DataType": "String", "StringValue": "x" * 10}})
    assert e.value.response["Error"]["Code"] in ("InvalidParameterValue", "InvalidParameterValueException")
    assert "shorter than 1048576 bytes" in e.value.response["Error"]["Message"]


@pytest.mark.parametrize("protocol_body", ["x", "&"], ids=["ascii", "xml_escaped_ampersands"])
def test_sqs_receive_of_big_messages_stays_under_6_mb_and_loses_nothing(aws, monkeypatch, clock, protocol_body):
    """ReceiveMessage gathers batches over the queue's lakeq queues: their sum, as SQS encodes it (an
    ``&`` is 5 bytes of XML), must stay one Lambda response (else API Gateway's 500, and the locked
    messages come back only after their visibility timeout)."""
    from lakeq.sqs import handler as sqs_service
    from tests.integration.sqs_harness import fake_auth
    monkeypatch.setattr(sqs_service, "authenticate_request", fake_auth)
    sqs = GatewayHarness().client("admin")
    url = sqs.create_queue(QueueName="bigrecv")["QueueUrl"]
    bodies = [protocol_body * (MIB - 16) + f"{i:016d}" for i in range(8)]
    assert sqs.set_queue_attributes  # (JSON protocol: boto3's; the XML one is checked by the measure below)
    for b in bodies:
        sqs.send_message(QueueUrl=url, MessageBody=b)
    got, sizes = [], []
    for _ in range(40):
        ms = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
        sizes.append(len(ms))
        for m in ms:
            got.append(m["Body"])
            sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
        if len(got) == len(bodies):
            break
    assert sorted(got) == sorted(bodies), sizes


class GatewayHarness:
    """tests.integration.sqs_harness.Harness with API Gateway's and Lambda's payload limits: a result
    over Lambda's 6 MB response limit is API Gateway's 500 (as tests.handlers.Api.through_gateway)."""

    def __new__(cls):
        from botocore.awsrequest import AWSResponse
        from moto.core.botocore_stubber import MockRawResponse

        from infra.local import aws_rules
        from tests.integration.sqs_harness import Harness

        h = Harness()

        def send(request, **_kw):
            out = h.handler(h.event(request), Context())
            if aws_rules.response_too_large(out):
                out = {"statusCode": 500, "body": json.dumps(aws_rules.GATEWAY_INTERNAL_ERROR)}
            return AWSResponse(request.url, out["statusCode"], out.get("headers") or {},
                               MockRawResponse((out.get("body") or "").encode("utf-8")))
        h.send = send
        return h


def test_a_dead_lettered_big_message_is_copied_by_its_claim(api, setup, aws, clock):
    from tests.integration.test_settlement import patch
    assert api.call("POST", "/v1/topics", {"name": "dlq", "queues": 1})[0] == 201
    s, c = api.call("POST", "/v1/clients", {"name": "dlqc", "role": "consumer", "topics": ["dlq"]})
    assert s == 201
    assert patch(api, "risk", {"dead_letter_topic": "dlq"})[0] == 200
    body = "r" * (MIB - 1) + "!"
    assert produce(api, setup["feed"], {"id": "poison", "body": body})[0] == 200
    s, b = api.call("GET", path(T), query={"group": "risk"}, key=setup["risk"])
    assert s == 200 and [m["id"] for m in b["messages"]] == ["poison"]
    s, out = api.call("POST", "/v1/acks", {"group": "risk", "receipt": b["receipt"], "reject": [0]}, key=setup["risk"])
    assert s == 200, out
    copies = list(SegmentModel.query("dlq#0"))
    assert len(copies) == 1 and len(copies[0].data) < 4096  # the copy holds the claim
    assert len(objects(aws)) == 1
    s, b = api.call("GET", path("dlq"), query={"group": "dlqc"}, key=c["api_key"])
    assert s == 200, b
    assert [(m["body"] == body, m["dead_letter"]["id"]) for m in b["messages"]] == [(True, "poison")]
    # siblings (the merge of peek/redrive with the claim check): an operator peeks at the dead-letter
    # copy (PeekFunction reads the body from the bucket) and redrives it back (RedriveFunction's copy
    # carries a claim, as the dead-letter copy does, instead of a 1 MiB body in a segment: a claim of
    # its own object, copied in the bucket, so it lives as long as a new message's)
    s, page = api.call("GET", "/v1/topics/dlq/queues/0/messages", query={"from": "0", "limit": "5"})
    assert s == 200, str(page)[:300]
    assert [(m["body"] == body) for m in page["messages"]] == [True]
    s, r = api.call("POST", "/v1/redrives", {"source": "dlq"})
    assert s == 202, r
    for _ in range(20):
        s, r = api.call("GET", f"/v1/redrives/{r['id']}")
        if r["status"] == "completed":
            break
        clock.t += 60_000
        from tests.handlers import load_function
        load_function("RedriveFunction")({"source": "aws.events", "detail-type": "Scheduled Event"}, Context())
    assert r["status"] == "completed" and r["moved"] == 1 and r["failed"] == 0, r
    back = [s_ for s_ in SegmentModel.query("quotes/sh#0")] + [s_ for s_ in SegmentModel.query("quotes/sh#1")]
    assert all(len(s_.data) < 4096 for s_ in back)  # the original and its redriven copy: claims only
    assert len(objects(aws)) == 2  # the original's (named by it and the dead-letter copy), the redriven copy's
    first = claims.object_key(T, "poison", claims.digest(body.encode()))
    aws["s3"].delete_object(Bucket=BUCKET, Key=first)  # the first object expires: the copy keeps its body
    got = pull_all(api, setup["risk"], 1)
    assert [m["body"] == body for m in got] == [True]


@pytest.mark.moto  # reads DynamoDB Streams
def test_the_lake_keeps_a_claimed_body_by_its_claim(api, setup, aws):
    """The archiver's ``kind=bodies`` row of a claim-checked message (issue 18.1 meets 18.2): an empty
    body and the claim (key, size, digest) — what the replay's copier needs to find the body — and the
    message row's ``size`` is the body's, not 0."""
    from lakeq.lake import archive as lake

    body = "z" * MIB
    assert produce(api, setup["feed"], {"id": "big", "body": body}, {"id": "small", "body": "s"})[0] == 200
    rows, bodies = [], []
    for r in segment_records(aws):
        m, b = lake.message_and_body_rows(r)
        rows += m
        bodies += b
    by_id = {r["id"]: (r, b) for r, b in zip(rows, bodies)}
    big_row, big_body = by_id["big"]
    assert big_row["size"] == MIB and big_body["body"] == ""
    [key] = objects(aws)
    assert big_body["claim"]["key"] == key and big_body["claim"]["size"] == MIB
    assert claims.verify(big_body["claim"], aws["s3"].get_object(Bucket=BUCKET, Key=key)["Body"].read()) == body
    assert "claim" not in by_id["small"][1] and by_id["small"][1]["body"] == "s"


@pytest.mark.parametrize("answer", ["NoSuchKey", "AccessDenied"])
def test_a_copy_of_a_body_whose_object_is_gone_keeps_what_is_left(aws, monkeypatch, answer):
    """``BodyStore.renewed`` when the original's object has expired: S3 answers a CopyObject of a
    missing source ``NoSuchKey`` to a caller allowed ``s3:ListBucket`` (moto's answer) and
    ``AccessDenied`` to the others (lakeq's functions): either way the copy keeps its claim (nothing
    to copy; no error that would stall a replay or a redrive), or its own object when an earlier
    attempt made it (a chunk copied again after a crash, the original gone meanwhile). Any other
    error is raised."""
    from botocore.exceptions import ClientError

    from lakeq.store import bodies

    data = b"q" * 400_000
    src = claims.make("src", "m1", data)  # never put: its object is gone
    real = bodies._client()

    def failing(code):
        class Client:
            def __getattr__(self, name):
                return getattr(real, name)

            def copy_object(self, **kw):
                raise ClientError({"Error": {"Code": code, "Message": code}}, "CopyObject")
        return Client()

    if answer == "AccessDenied":
        monkeypatch.setattr(bodies, "_client", lambda: failing("AccessDenied"))
    assert bodies.BodyStore.renewed("dst", "c1", src) == src
    own = claims.object_key("dst", "c1", src["sha256"])
    real.put_object(Bucket=BUCKET, Key=own, Body=data)  # an earlier attempt's copy
    assert bodies.BodyStore.renewed("dst", "c1", src) == {**src, "key": own}
    monkeypatch.setattr(bodies, "_client", lambda: failing("SlowDown"))
    with pytest.raises(ClientError):
        bodies.BodyStore.renewed("dst", "c2", src)
