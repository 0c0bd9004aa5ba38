"""Differential SQS conformance: each scripted scenario runs against moto's own SQS (in-process,
``moto.mock_aws``: the reference for wire-level behaviour — error codes, HTTP status, fault type,
attribute names and value formats, validation rules) and against lakeq's endpoint through
tests/integration/sqs_harness.py; the observable results must be equal once normalised (message
ids, receipt handles, URL hosts, regions, timestamps and sequence numbers are replaced by
placeholders; error messages are not compared — codes, status and Sender/Receiver are).

Both sides use a real boto3 ``sqs`` client with client-side parameter validation off, so
out-of-range values reach the server as a non-boto3 SDK (or a conformance suite) would send them.
moto runs in its own region (eu-west-1), empty of the queues template.yaml gives moto for lakeq's
own use.

Where moto and AWS's documentation disagree, the documentation wins (botocore's service model
docstrings, botocore/data/sqs/2012-11-05/service-2.json, and the SQS API reference / developer
guide; where the docs are silent, SQS's own error strings as widely reported): such a scenario
passes ``aws=`` overrides — the outcome lakeq must give at that step, with the reason beside it.
Where lakeq deliberately differs (visibility is per lakeq batch lock; ordering is per
MessageGroupId/key over N lakeq queues), the scenario is skipped with the reason (docs/api.md
"SQS-compatible endpoint").
"""
from __future__ import annotations

import itertools
import re
from unittest.mock import ANY

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from lakeq.produce import service as produce_service
from lakeq.sqs import handler as sqs_service
from tests.integration.sqs_harness import BASE, Harness, fake_auth

ACCOUNT = "123456789012"
MOTO_REGION = "eu-west-1"
_NO_VALIDATION = Config(parameter_validation=False, retries={"max_attempts": 1})

PLACEHOLDER_KEYS = {"MessageId": "<id>", "ReceiptHandle": "<handle>", "SentTimestamp": "<ts>",
                    "ApproximateFirstReceiveTimestamp": "<ts>", "CreatedTimestamp": "<ts>",
                    "LastModifiedTimestamp": "<ts>", "SequenceNumber": "<seq>", "SenderId": "<sender>",
                    "NextToken": "<token>", "RequestId": "<rid>"}


class Side:
    """One endpoint under test: calls record ``(op, "ok", normalised response)`` or
    ``(op, "error", code, status, fault type)`` in ``log``; ``note`` records a derived fact."""

    def __init__(self, client, base: str):
        self.client = client
        self.base = base.rstrip("/")
        self.log: list[tuple] = []

    def url(self, name: str) -> str:
        return f"{self.base}/{ACCOUNT}/{name}"

    def arn(self, name: str) -> str:
        region = MOTO_REGION if "amazonaws" in self.base else "us-east-1"
        return f"arn:aws:sqs:{region}:{ACCOUNT}:{name}"

    def __call__(self, op: str, **kw):
        try:
            r = getattr(self.client, op)(**kw)
        except ClientError as e:
            err = e.response.get("Error") or {}
            self.log.append((op, "error", err.get("Code"), e.response["ResponseMetadata"]["HTTPStatusCode"],
                             err.get("Type")))
            return None
        except Exception as e:  # noqa: BLE001  (moto raises on some inputs: a 500 from a real server)
            self.log.append((op, "crash", type(e).__name__))
            return None
        self.log.append((op, "ok", self.normalise(r)))
        return r

    def note(self, what: str, value) -> None:
        self.log.append(("note", what, value))

    def normalise(self, value, key: str | None = None):
        if isinstance(value, dict):
            return {k: self.normalise(v, k) for k, v in value.items() if k != "ResponseMetadata"}
        if isinstance(value, list):
            return [self.normalise(v) for v in value]
        if key in PLACEHOLDER_KEYS:
            return PLACEHOLDER_KEYS[key]
        if isinstance(value, str):
            value = value.replace(self.base, "<base>")
            value = re.sub(r"arn:aws:sqs:[a-z0-9-]+:", "arn:aws:sqs:<region>:", value)
        return value


@pytest.fixture
def pair(aws, monkeypatch):
    monkeypatch.setattr(sqs_service, "authenticate_request", fake_auth)
    h = Harness()
    ours = boto3.client("sqs", endpoint_url=BASE, region_name="us-east-1", aws_access_key_id="admin",
                        aws_secret_access_key="unused", config=_NO_VALIDATION)
    ours.meta.events.register_first("before-send.sqs", h.send)
    ref = boto3.client("sqs", region_name=MOTO_REGION, config=_NO_VALIDATION)
    return Side(ref, f"https://sqs.{MOTO_REGION}.amazonaws.com"), Side(ours, BASE)


def differential(pair, scenario, aws: dict | None = None):
    """Run ``scenario(side)`` on moto and on lakeq; lakeq's log must equal moto's, except at the
    step indexes in ``aws``: there lakeq must give that outcome (AWS's documented behaviour where
    moto does not follow it, or lakeq's deliberate difference — each with its reason at the call;
    a callable gets moto's outcome and returns the expected one)."""
    ref, ours = pair
    scenario(ref)
    scenario(ours)
    expected = list(ref.log)
    for i, documented in (aws or {}).items():
        expected[i] = documented(ref.log[i]) if callable(documented) else documented
    diffs = [f"step {i}:\n  lakeq     {got}\n  reference {want}"
             for i, (got, want) in enumerate(zip(ours.log, expected)) if got != want]
    assert not diffs and len(ours.log) == len(expected), "\n".join(diffs)


def E(op: str, code: str, status: int = 400, fault: str = "Sender") -> tuple:  # noqa: N802
    return (op, "error", code, status, fault)


def with_attrs(**changes):
    """Moto's successful outcome with some ``Attributes`` replaced."""
    def patch(step: tuple) -> tuple:
        op, ok, resp = step
        return (op, ok, {**resp, "Attributes": {**resp["Attributes"], **changes}})
    return patch


INVALID = "InvalidParameterValue"


# --- CreateQueue / GetQueueUrl / names ---------------------------------------------------------------
def test_create_queue_idempotency_and_queue_name_exists(pair):
    def s(q):
        q("create_queue", QueueName="idem", Attributes={"VisibilityTimeout": "40"})
        q("create_queue", QueueName="idem", Attributes={"VisibilityTimeout": "40"})
        q("create_queue", QueueName="idem", Attributes={"VisibilityTimeout": "41"})
        q("create_queue", QueueName="idem", Attributes={"DelaySeconds": "0"})
        q("create_queue", QueueName="idem", Attributes={"DelaySeconds": "5"})
        q("get_queue_url", QueueName="idem")
        q("get_queue_url", QueueName="missing")
    differential(pair, s)


def test_invalid_queue_names(pair):
    def s(q):
        for name in ("x" * 80, "x" * 81, "a.b", "bad!name", "sp ace", "std.fifo", "x" * 75 + ".fifo",
                     "x" * 76 + ".fifo", ".fifo"):
            q("create_queue", QueueName=name)
        q("create_queue", QueueName="fifo-ok.fifo", Attributes={"FifoQueue": "true"})
        q("create_queue", QueueName="std", Attributes={"FifoQueue": "true"})
        q("create_queue", QueueName="std2", Attributes={"FifoQueue": "false"})
        q("create_queue", QueueName="std3", Attributes={"ContentBasedDeduplication": "true"})
    # moto makes standard queues named *.fifo; AWS: a standard queue name is alphanumerics, '-' and
    # '_' only, and .fifo names are FIFO queues (CreateQueue QueueName / FifoQueue docs). FIFO-only
    # attributes on a standard queue: InvalidAttributeName (AWS: "apply only to FIFO queues").
    differential(pair, s, aws={5: E("create_queue", INVALID), 6: E("create_queue", INVALID),
                               12: E("create_queue", "InvalidAttributeName")})


def test_create_queue_attribute_validation(pair):
    def s(q):
        for attrs in ({"Bogus": "1"}, {"DelaySeconds": "901"}, {"DelaySeconds": "-1"}, {"DelaySeconds": "abc"},
                      {"VisibilityTimeout": "43201"}, {"MaximumMessageSize": "1023"},
                      {"MaximumMessageSize": "1048577"}, {"MessageRetentionPeriod": "59"},
                      {"MessageRetentionPeriod": "1209601"}, {"ReceiveMessageWaitTimeSeconds": "21"},
                      {"Policy": "not json"}):
            name = f"v{len(q.log)}"
            q("create_queue", QueueName=name, Attributes=attrs)
            q("get_queue_url", QueueName=name)  # nothing made by a refused call
    # moto checks none of these (and crashes on non-numbers); AWS's CreateQueue Attributes docs give
    # each range: InvalidAttributeName / InvalidAttributeValue, and nothing is created
    codes = ["InvalidAttributeName"] + ["InvalidAttributeValue"] * 10
    documented = {}
    for i, code in enumerate(codes):
        documented[2 * i] = E("create_queue", code)
        documented[2 * i + 1] = E("get_queue_url", "AWS.SimpleQueueService.NonExistentQueue")
    differential(pair, s, aws=documented)


# --- queue attributes -----------------------------------------------------------------------------------
def test_get_queue_attributes_all_and_unknown(pair):
    def s(q):
        q("create_queue", QueueName="ga", Attributes={"DelaySeconds": "3", "MessageRetentionPeriod": "600"})
        q("get_queue_attributes", QueueUrl=q.url("ga"), AttributeNames=["All"])
        q("get_queue_attributes", QueueUrl=q.url("ga"))
        q("get_queue_attributes", QueueUrl=q.url("ga"), AttributeNames=["VisibilityTimeout", "DelaySeconds"])
        q("get_queue_attributes", QueueUrl=q.url("ga"), AttributeNames=["Bogus"])
        q("get_queue_attributes", QueueUrl=q.url("ga"), AttributeNames=["QueueArn"])
        q("create_queue", QueueName="gf.fifo", Attributes={"FifoQueue": "true"})
        q("get_queue_attributes", QueueUrl=q.url("gf.fifo"), AttributeNames=["All"])
        q("get_queue_attributes", QueueUrl=q.url("missing"), AttributeNames=["All"])
    # MaximumMessageSize defaults to 1 MiB as SQS's does (issue 18.2: bodies over 300 KiB go to the
    # lake bucket; it was lakeq's deliberate 256 KiB before); everything as moto
    differential(pair, s)


def test_set_queue_attributes_invalid_values(pair):
    def s(q):
        q("create_queue", QueueName="sa")
        for attrs in ({"VisibilityTimeout": "-1"}, {"VisibilityTimeout": "x"}, {"DelaySeconds": "901"},
                      {"MaximumMessageSize": "100"}, {"Bogus": "1"}, {"FifoQueue": "true"},
                      {"ContentBasedDeduplication": "true"}, {"ReceiveMessageWaitTimeSeconds": "20"},
                      {"VisibilityTimeout": "0"}):
            q("set_queue_attributes", QueueUrl=q.url("sa"), Attributes=attrs)
        q("get_queue_attributes", QueueUrl=q.url("sa"), AttributeNames=["VisibilityTimeout",
                                                                         "ReceiveMessageWaitTimeSeconds"])
    # moto accepts all of these; AWS: out-of-range / non-numeric values are InvalidAttributeValue,
    # unknown names and FIFO-only or creation-only attributes on a standard queue InvalidAttributeName
    differential(pair, s, aws={**{i: E("set_queue_attributes", "InvalidAttributeValue") for i in (1, 2, 3, 4)},
                               **{i: E("set_queue_attributes", "InvalidAttributeName") for i in (5, 6, 7)}})


def test_redrive_policy_forms(pair):
    def s(q):
        q("create_queue", QueueName="dlq")
        q("create_queue", QueueName="src")
        dlq = q.arn("dlq")
        for rp in ('{"deadLetterTargetArn":"%s","maxReceiveCount":5}' % dlq,
                   '{"deadLetterTargetArn":"%s","maxReceiveCount":"7"}' % dlq):
            q("set_queue_attributes", QueueUrl=q.url("src"), Attributes={"RedrivePolicy": rp})
            q("get_queue_attributes", QueueUrl=q.url("src"), AttributeNames=["RedrivePolicy"])
        for rp in ("not json", '{"maxReceiveCount":5}', '{"deadLetterTargetArn":"%s"}' % dlq,
                   '{"deadLetterTargetArn":"%s","maxReceiveCount":0}' % dlq):
            q("set_queue_attributes", QueueUrl=q.url("src"), Attributes={"RedrivePolicy": rp})
        q("list_dead_letter_source_queues", QueueUrl=q.url("dlq"))
    # RedrivePolicy comes back in SQS's compact JSON with an integer maxReceiveCount (AWS CLI docs'
    # examples; moto re-serialises with spaces); a non-JSON policy or maxReceiveCount 0 is
    # InvalidParameterValue (moto crashes / accepts)
    def compact(count: int) -> tuple:
        policy = '{"deadLetterTargetArn":"arn:aws:sqs:<region>:%s:dlq","maxReceiveCount":%d}' % (ACCOUNT, count)
        return ("get_queue_attributes", "ok", {"Attributes": {"RedrivePolicy": policy}})
    differential(pair, s, aws={3: compact(5), 5: compact(7),
                               6: E("set_queue_attributes", INVALID), 9: E("set_queue_attributes", INVALID)})


# --- ListQueues ---------------------------------------------------------------------------------------------
def test_list_queues_prefix_max_results_next_token(pair):
    def s(q):
        for n in ("lq-a1", "lq-a2", "lq-a3", "lq-b1"):
            q("create_queue", QueueName=n)
        q("list_queues", QueueNamePrefix="lq-a")
        q("list_queues", QueueNamePrefix="zz")
        first = q("list_queues", QueueNamePrefix="lq-", MaxResults=2)
        urls = list(first["QueueUrls"])
        token = first.get("NextToken")
        while token:
            page = q("list_queues", QueueNamePrefix="lq-", MaxResults=2, NextToken=token)
            urls += page["QueueUrls"]
            token = page.get("NextToken")
        q.note("all pages", sorted(u.rsplit("/", 1)[1] for u in urls))
        q("list_queues", MaxResults=0)
        q("list_queues", MaxResults=1001)
    # AWS: "MaxResults ... Value range is 1 to 1000" (moto ignores the bound)
    differential(pair, s, aws={9: E("list_queues", INVALID), 10: E("list_queues", INVALID)})


# --- SendMessage ----------------------------------------------------------------------------------------
def test_send_delay_and_fifo_rules(pair):
    def s(q):
        q("create_queue", QueueName="sd")
        for d in (-1, 901, 900):
            q("send_message", QueueUrl=q.url("sd"), MessageBody="x", DelaySeconds=d)
        q("create_queue", QueueName="f.fifo", Attributes={"FifoQueue": "true"})
        q("send_message", QueueUrl=q.url("f.fifo"), MessageBody="x", MessageDeduplicationId="d1")
        q("send_message", QueueUrl=q.url("f.fifo"), MessageBody="x", MessageGroupId="g")
        q("send_message", QueueUrl=q.url("f.fifo"), MessageBody="x", MessageGroupId="g",
          MessageDeduplicationId="d1", DelaySeconds=5)
        q("send_message", QueueUrl=q.url("f.fifo"), MessageBody="x", MessageGroupId="g",
          MessageDeduplicationId="d1", DelaySeconds=0)
        a = q("send_message", QueueUrl=q.url("f.fifo"), MessageBody="x", MessageGroupId="g",
              MessageDeduplicationId="d2")
        b = q("send_message", QueueUrl=q.url("f.fifo"), MessageBody="x", MessageGroupId="g",
              MessageDeduplicationId="d2")
        q.note("duplicate send keeps the MessageId", a["MessageId"] == b["MessageId"])
        q("create_queue", QueueName="c.fifo", Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true"})
        a = q("send_message", QueueUrl=q.url("c.fifo"), MessageBody="same", MessageGroupId="g")
        b = q("send_message", QueueUrl=q.url("c.fifo"), MessageBody="same", MessageGroupId="g")
        q.note("content-based dedup keeps the MessageId", a["MessageId"] == b["MessageId"])
        q("send_message", QueueUrl=q.url("sd"), MessageBody="x", MessageDeduplicationId="d")
    seq = ("send_message", "ok", {"MD5OfMessageBody": "51037a4a37730f52c8732586d3aaa316", "MessageId": "<id>",
                                  "SequenceNumber": "<seq>"})
    differential(pair, s, aws={
        1: E("send_message", INVALID),  # DelaySeconds -1: AWS "Valid values: 0 to 900" (moto accepts)
        # a send deduplicated within the window answers with the original MessageId (lakeq's design,
        # as ElasticMQ; moto mints a new id)
        11: ("note", "duplicate send keeps the MessageId", True),
        15: ("note", "content-based dedup keeps the MessageId", True),
        13: seq, 14: seq,  # FIFO sends return a SequenceNumber (moto omits it with content-based dedup)
        16: E("send_message", INVALID),  # MessageDeduplicationId "applies only to FIFO queues"
    })


def test_message_body_characters(pair):
    def s(q):
        q("create_queue", QueueName="body")
        for body in ("\t\n\r ok", "emoji \U0001F600", "\ud7ff\ue000\ufffd", "nul \x00", "bell \x07", "\x1f",
                     "\ufffe", "\uffff", ""):
            q("send_message", QueueUrl=q.url("body"), MessageBody=body)
    # AWS (SendMessage MessageBody): only #x9 #xA #xD #x20-#xD7FF #xE000-#xFFFD #x10000-#x10FFFF,
    # else InvalidMessageContents; at least one character. moto accepts all.
    differential(pair, s, aws={**{i: E("send_message", "InvalidMessageContents") for i in (4, 5, 6, 7, 8)},
                               9: E("send_message", "MissingParameter")})


def test_message_attributes_round_trip_and_md5(pair):
    def s(q):
        q("create_queue", QueueName="ma")
        ok = {"s": {"DataType": "String", "StringValue": "v"},
              "s.custom": {"DataType": "String.foo", "StringValue": "ü"},
              "n": {"DataType": "Number", "StringValue": "-12.5e3"},
              "n2": {"DataType": "Number.int", "StringValue": "7"},
              "b": {"DataType": "Binary", "BinaryValue": b"\x00\x01\xff"},
              "b2": {"DataType": "Binary.gif", "BinaryValue": b"GIF"}}
        q("send_message", QueueUrl=q.url("ma"), MessageBody="m", MessageAttributes=ok)
        q("send_message", QueueUrl=q.url("ma"), MessageBody="m",
          MessageAttributes={f"k{i}": {"DataType": "String", "StringValue": "v"} for i in range(10)})
        got: list = []
        for _ in range(10):  # lakeq serves one lakeq queue's batch per receive (fewer than asked, as SQS may)
            got += q.client.receive_message(QueueUrl=q.url("ma"), MaxNumberOfMessages=10,
                                            MessageAttributeNames=["All"]).get("Messages", [])
            if len(got) >= 2:
                break
        q.note("received", sorted((m["MD5OfBody"], m.get("MD5OfMessageAttributes"),
                                   q.normalise(m["MessageAttributes"])) for m in got))
    differential(pair, s)


def test_message_attribute_validation(pair):
    def s(q):
        q("create_queue", QueueName="mv")
        for bad in ({"e": {"DataType": "String", "StringValue": ""}},
                    {"e": {"DataType": "String"}},
                    {"e": {"StringValue": "v"}},
                    {"e": {"DataType": "Foo", "StringValue": "v"}},
                    {"e": {"DataType": "Number", "StringValue": "abc"}},
                    {"e": {"DataType": "Binary", "StringValue": "abc"}},
                    {"AWS.x": {"DataType": "String", "StringValue": "v"}},
                    {"a..b": {"DataType": "String", "StringValue": "v"}},
                    {".a": {"DataType": "String", "StringValue": "v"}},
                    {f"k{i}": {"DataType": "String", "StringValue": "v"} for i in range(11)}):
            q("send_message", QueueUrl=q.url("mv"), MessageBody="m", MessageAttributes=bad)
    # AWS (SendMessage MessageAttributes / MessageAttributeValue): a value is required and non-empty,
    # a Number must parse, Binary uses BinaryValue, names can't start with AWS./Amazon., contain
    # '..' or start/end with '.', at most 10 attributes: InvalidParameterValue. moto accepts them.
    differential(pair, s, aws={i: E("send_message", INVALID) for i in (1, 2, 3, 5, 6, 7, 8, 9, 10)})


# --- ReceiveMessage ------------------------------------------------------------------------------------
def test_receive_parameter_ranges(pair):
    def s(q):
        q("create_queue", QueueName="rr")
        for kw in ({"MaxNumberOfMessages": 0}, {"MaxNumberOfMessages": 11}, {"WaitTimeSeconds": 21},
                   {"WaitTimeSeconds": -1}, {"VisibilityTimeout": -1}, {"VisibilityTimeout": 43201},
                   {"MaxNumberOfMessages": 10, "WaitTimeSeconds": 0}):
            q("receive_message", QueueUrl=q.url("rr"), **kw)
    # VisibilityTimeout above 12 hours: AWS's maximum (ChangeMessageVisibility docs); moto accepts
    differential(pair, s, aws={5: E("receive_message", INVALID)})


def test_receive_system_attributes(pair):
    def s(q):
        q("create_queue", QueueName="sys.fifo", Attributes={"FifoQueue": "true"})
        q("send_message", QueueUrl=q.url("sys.fifo"), MessageBody="b", MessageGroupId="g",
          MessageDeduplicationId="d", MessageAttributes={"a.x": {"DataType": "String", "StringValue": "1"},
                                                          "b": {"DataType": "Number", "StringValue": "2"}})
        q("receive_message", QueueUrl=q.url("sys.fifo"), MessageSystemAttributeNames=["All"],
          MessageAttributeNames=["a.*"], VisibilityTimeout=0)
        q("receive_message", QueueUrl=q.url("sys.fifo"), AttributeNames=["ApproximateReceiveCount", "MessageGroupId"],
          MessageAttributeNames=["b"])
    differential(pair, s)


# --- batches -------------------------------------------------------------------------------------------------
def test_batch_entry_id_rules(pair):
    def s(q):
        q("create_queue", QueueName="bt")
        u = q.url("bt")
        for entries in ([], [{"Id": str(i), "MessageBody": "x"} for i in range(11)],
                        [{"Id": "a", "MessageBody": "1"}, {"Id": "a", "MessageBody": "2"}],
                        [{"Id": "a b", "MessageBody": "1"}], [{"Id": "a.b", "MessageBody": "1"}],
                        [{"Id": "x" * 81, "MessageBody": "1"}], [{"Id": "x" * 80, "MessageBody": "1"}],
                        [{"Id": "ok", "MessageBody": "1"}, {"Id": "bad", "MessageBody": "\x00"},
                         {"Id": "late", "MessageBody": "1", "DelaySeconds": 901}]):
            q("send_message_batch", QueueUrl=u, Entries=entries)
        q("delete_message_batch", QueueUrl=u, Entries=[])
        q("delete_message_batch", QueueUrl=u, Entries=[{"Id": "a", "ReceiptHandle": "h"},
                                                       {"Id": "a", "ReceiptHandle": "h"}])
        q("change_message_visibility_batch", QueueUrl=u, Entries=[{"Id": f"i{i}", "ReceiptHandle": "h",
                                                                   "VisibilityTimeout": 1} for i in range(11)])
        q("change_message_visibility_batch", QueueUrl=u, Entries=[{"Id": "a!", "ReceiptHandle": "h",
                                                                   "VisibilityTimeout": 1}])
    # an invalid body in a batch fails that entry with InvalidMessageContents (moto accepts it);
    # ChangeMessageVisibilityBatch checks the entry count and ids like the other batches
    # (TooManyEntriesInBatchRequest / InvalidBatchEntryId are its documented errors; moto skips them)
    entry = ("send_message_batch", "ok", {
        "Successful": [{"Id": "ok", "MessageId": "<id>", "MD5OfMessageBody": "c4ca4238a0b923820dcc509a6f75849b"}],
        "Failed": [{"Id": "bad", "SenderFault": True, "Code": "InvalidMessageContents", "Message": ANY},
                   {"Id": "late", "SenderFault": True, "Code": "InvalidParameterValue", "Message": ANY}]})
    differential(pair, s, aws={8: entry,
                               11: E("change_message_visibility_batch",
                                     "AWS.SimpleQueueService.TooManyEntriesInBatchRequest"),
                               12: E("change_message_visibility_batch", "AWS.SimpleQueueService.InvalidBatchEntryId")})


# --- settle ---------------------------------------------------------------------------------------------------
def test_delete_and_change_visibility_errors(pair):
    def s(q):
        q("create_queue", QueueName="dv")
        u = q.url("dv")
        q("delete_message", QueueUrl=u, ReceiptHandle="garbage")
        q("change_message_visibility", QueueUrl=u, ReceiptHandle="garbage", VisibilityTimeout=10)
        q("send_message", QueueUrl=u, MessageBody="x")
        m = q("receive_message", QueueUrl=u)["Messages"][0]
        for t in (-1, 43201):
            q("change_message_visibility", QueueUrl=u, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=t)
        q("change_message_visibility", QueueUrl=u, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=60)
        q("delete_message", QueueUrl=u, ReceiptHandle=m["ReceiptHandle"])
        q("delete_message", QueueUrl=u, ReceiptHandle=m["ReceiptHandle"])  # again: succeeds
        q("delete_message_batch", QueueUrl=u, Entries=[{"Id": "a", "ReceiptHandle": m["ReceiptHandle"]},
                                                       {"Id": "b", "ReceiptHandle": "garbage"}])
    # ReceiptHandleIsInvalid is HTTP 404 in AWS's API reference (DeleteMessage / ChangeMessageVisibility
    # "Errors"); moto answers 400. A negative VisibilityTimeout is refused (moto accepts it).
    differential(pair, s, aws={1: E("delete_message", "ReceiptHandleIsInvalid", 404),
                               2: E("change_message_visibility", "ReceiptHandleIsInvalid", 404),
                               5: E("change_message_visibility", INVALID)})


# --- tags, delete, purge -------------------------------------------------------------------------------------
def test_tags(pair):
    def s(q):
        q("create_queue", QueueName="tg", tags={"team": "a", "env": "dev"})
        q("list_queue_tags", QueueUrl=q.url("tg"))
        q("tag_queue", QueueUrl=q.url("tg"), Tags={"env": "prod", "cost": ""})
        q("list_queue_tags", QueueUrl=q.url("tg"))
        q("untag_queue", QueueUrl=q.url("tg"), TagKeys=["team", "nope"])
        q("list_queue_tags", QueueUrl=q.url("tg"))
        q("untag_queue", QueueUrl=q.url("tg"), TagKeys=["env", "cost"])
        q("list_queue_tags", QueueUrl=q.url("tg"))
        q("list_queue_tags", QueueUrl=q.url("missing"))
    differential(pair, s)


def test_delete_queue_and_purge(pair):
    def s(q):
        q("create_queue", QueueName="gone")
        q("send_message", QueueUrl=q.url("gone"), MessageBody="x")
        q("purge_queue", QueueUrl=q.url("gone"))
        q("receive_message", QueueUrl=q.url("gone"))
        q("delete_queue", QueueUrl=q.url("gone"))
        q("get_queue_url", QueueName="gone")
        q("send_message", QueueUrl=q.url("gone"), MessageBody="x")
        q("delete_queue", QueueUrl=q.url("gone"))
        q("purge_queue", QueueUrl=q.url("gone"))
    differential(pair, s)


def test_more_edges(pair):
    def s(q):
        q("create_queue", QueueName="m1")
        q("create_queue", QueueName="m2")
        u = q.url("m1")
        q("create_queue", QueueName="rp", Attributes={"RedrivePolicy": '{"deadLetterTargetArn":"%s",'
                                                      '"maxReceiveCount":3}' % q.arn("nope")})
        q("get_queue_url", QueueName="m1", QueueOwnerAWSAccountId=ACCOUNT)
        q("set_queue_attributes", QueueUrl=u, Attributes={})
        q("send_message", QueueUrl=u, MessageBody="g", MessageGroupId="grp")  # fair queues: allowed
        q("send_message", QueueUrl=u, MessageBody="t",
          MessageSystemAttributes={"AWSTraceHeader": {"DataType": "String", "StringValue": "Root=1-5759e988"}})
        q("send_message", QueueUrl=u, MessageBody="l",
          MessageAttributes={"l": {"DataType": "String", "StringListValues": ["a"]}})
        if q("receive_message", QueueUrl=u, AttributeNames=["Bogus"], MaxNumberOfMessages=1, VisibilityTimeout=0):
            q.log[-1] = q.log[-1][:2] + (len(q.log[-1][2]["Messages"]),)  # which one: lakeq orders per key only
        q("tag_queue", QueueUrl=u, Tags={})
        q("tag_queue", QueueUrl=u, Tags={f"k{i}": "v" for i in range(51)})
        q("untag_queue", QueueUrl=u, TagKeys=[])
        q("list_queue_tags", QueueUrl=u)
        q("send_message", QueueUrl=q.url("m2"), MessageBody="x")
        other = None
        for _ in range(5):
            got = q.client.receive_message(QueueUrl=q.url("m2")).get("Messages")
            if got:
                other = got[0]["ReceiptHandle"]
                break
        q("delete_message", QueueUrl=u, ReceiptHandle=other)  # a handle of another queue
        q("delete_message", QueueUrl=q.url("m2"), ReceiptHandle=other)
        q("change_message_visibility", QueueUrl=q.url("m2"), ReceiptHandle=other, VisibilityTimeout=5)
        q("list_dead_letter_source_queues", QueueUrl=u)
    differential(pair, s, aws={
        # a RedrivePolicy naming a missing queue: SQS's "InvalidParameterValue ... Reason: Dead letter
        # target does not exist." (moto: QueueDoesNotExist)
        2: E("create_queue", INVALID),
        # SendMessageResult documents MD5OfMessageSystemAttributes (moto omits it)
        6: ("send_message", "ok", {"MD5OfMessageBody": "e358efa489f58062f10dd7316b65649e",
                                   "MD5OfMessageSystemAttributes": "1093703a9379955b75098a87e549ba88",
                                   "MessageId": "<id>"}),
        # StringListValues: "Not implemented. Reserved for future use." (moto accepts it)
        7: E("send_message", INVALID),
        14: E("delete_message", "ReceiptHandleIsInvalid", 404),  # 404: AWS API reference
        # a handle of a deleted message: SQS's "InvalidParameterValue ... Reason: Message does not
        # exist or is not available for visibility timeout change." (moto: ReceiptHandleIsInvalid)
        16: E("change_message_visibility", INVALID),
    })


@pytest.mark.skip(reason="lakeq deliberately differs: visibility is a lakeq batch lock, so "
                  "ChangeMessageVisibility(n>0) on one message of a receive extends the whole batch's lock, "
                  "and order is per MessageGroupId/key over N lakeq queues (docs/api.md 'SQS-compatible endpoint')")
def test_visibility_per_message_and_global_order(pair):
    def s(q):
        q("create_queue", QueueName="vis")
        for i in range(3):
            q("send_message", QueueUrl=q.url("vis"), MessageBody=f"m{i}")
        got = q("receive_message", QueueUrl=q.url("vis"), MaxNumberOfMessages=10, VisibilityTimeout=1)
        q("change_message_visibility", QueueUrl=q.url("vis"), ReceiptHandle=got["Messages"][0]["ReceiptHandle"],
          VisibilityTimeout=60)
        q.note("bodies in order", [m["Body"] for m in got["Messages"]])
    differential(pair, s)


# --- issue 14: what moto's own suite showed SQS users hit -----------------------------------------------
def _bodies(resp) -> list[str]:
    return [m["Body"] for m in (resp or {}).get("Messages") or []]


def _by_group(resp) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for m in (resp or {}).get("Messages") or []:
        out.setdefault(m["Attributes"]["MessageGroupId"], []).append(m["Body"])
    return out


def _quiet(q, op: str, **kw):
    """A call whose result is recorded as a note (a receive's messages vary in handles and order)."""
    try:
        return getattr(q.client, op)(**kw)
    except ClientError as e:
        q.log.append((op, "error", e.response["Error"]["Code"]))
        return None


def test_receive_gathers_up_to_max_across_lakeq_queues(pair, monkeypatch):
    # Sends spread round-robin over the lakeq queues, not at random: with a random spread all three n's
    # land in one lakeq queue 1 time in 16, and the receive of 2 then locks that queue with n2 behind
    # the lock — the documented difference "messages behind a lock wait" (docs/api.md), which this
    # scenario does not check (seen failing so in a fresh-clone CI run, 1 in 12 locally)
    turns = itertools.count()
    monkeypatch.setattr(produce_service, "spread_queue", lambda n, avoid=frozenset(): next(turns) % n)

    def s(q):
        q("create_queue", QueueName="gather")
        u = q.url("gather")
        for i in range(6):
            q("send_message", QueueUrl=u, MessageBody=f"m{i}")
        got = _quiet(q, "receive_message", QueueUrl=u, MaxNumberOfMessages=10, VisibilityTimeout=30)
        q.note("one receive of 10 returns all six", sorted(_bodies(got)))
        q.note("then nothing is visible", _bodies(_quiet(q, "receive_message", QueueUrl=u, MaxNumberOfMessages=10)))
        for m in (got or {}).get("Messages") or []:
            q.client.delete_message(QueueUrl=u, ReceiptHandle=m["ReceiptHandle"])
        for i in range(3):
            q("send_message", QueueUrl=u, MessageBody=f"n{i}")
        got = _quiet(q, "receive_message", QueueUrl=u, MaxNumberOfMessages=2)
        q.note("at most the number asked for", len(_bodies(got)))
        got2 = _quiet(q, "receive_message", QueueUrl=u, MaxNumberOfMessages=10, WaitTimeSeconds=1)
        q.note("the rest", sorted(_bodies(got) + _bodies(got2)))
        for m in (got or {}).get("Messages", []) + (got2 or {}).get("Messages", []):
            q.client.delete_message(QueueUrl=u, ReceiptHandle=m["ReceiptHandle"])
        for i in range(4):
            q("send_message", QueueUrl=u, MessageBody=f"o{i}")
        # one receive over several lakeq queues answers in send order (as SQS does in practice for a
        # queue this small; lakeq merges its batches by send time, each batch's order kept)
        q.note("in send order", _bodies(_quiet(q, "receive_message", QueueUrl=u, MaxNumberOfMessages=10)))
    differential(pair, s)


def test_fifo_receive_gathers_groups_in_order(pair):
    def s(q):
        q("create_queue", QueueName="gr.fifo", Attributes={"FifoQueue": "true"})
        u = q.url("gr.fifo")
        entries = [{"Id": f"e{i}", "MessageBody": f"{g}{i}", "MessageGroupId": g, "MessageDeduplicationId": f"d{i}"}
                   for i, g in enumerate("abcabcaab")]
        q("send_message_batch", QueueUrl=u, Entries=entries)
        got = _quiet(q, "receive_message", QueueUrl=u, MaxNumberOfMessages=10, AttributeNames=["MessageGroupId"],
                     VisibilityTimeout=30)
        q.note("every group, each in the order sent", _by_group(got))
        # a group with messages in flight is served to no other receiver
        q.note("groups in flight", _bodies(_quiet(q, "receive_message", QueueUrl=u, MaxNumberOfMessages=10)))
        q("create_queue", QueueName="gs.fifo", Attributes={"FifoQueue": "true"})
        u = q.url("gs.fifo")
        q("send_message_batch", QueueUrl=u, Entries=[
            {"Id": f"e{i}", "MessageBody": f"b{i}", "MessageGroupId": f"g{i}", "MessageDeduplicationId": f"d{i}"}
            for i in range(6)])
        # one request's messages of several groups, received together: in the order sent
        q.note("one request, one receive", _bodies(_quiet(q, "receive_message", QueueUrl=u, MaxNumberOfMessages=10)))
    differential(pair, s)


def test_fifo_deduplication_explicit_and_content_based(pair):
    def s(q):
        q("create_queue", QueueName="dd.fifo", Attributes={"FifoQueue": "true"})
        u = q.url("dd.fifo")
        for body, dedup, group in (("x", "1", "g"), ("x", "2", "g"), ("y", "1", "h"), ("z", "3", "h")):
            q("send_message", QueueUrl=u, MessageBody=body, MessageDeduplicationId=dedup, MessageGroupId=group)
        got = _quiet(q, "receive_message", QueueUrl=u, MaxNumberOfMessages=10)
        q.note("explicit ids: a new id is a new message, a repeated one is not", sorted(_bodies(got)))
        q("create_queue", QueueName="dc.fifo", Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true"})
        u = q.url("dc.fifo")
        for body, group in (("a", "g"), ("b", "g"), ("a", "h"), ("c", "h")):
            q("send_message", QueueUrl=u, MessageBody=body, MessageGroupId=group)
        got = _quiet(q, "receive_message", QueueUrl=u, MaxNumberOfMessages=10)
        q.note("content-based: a new body is a new message", sorted(_bodies(got)))
    # SequenceNumber: moto answers none with content-based deduplication; SQS always does for FIFO
    seq = ("send_message", "ok", {"MD5OfMessageBody": ANY, "MessageId": "<id>", "SequenceNumber": "<seq>"})
    differential(pair, s, aws={7: seq, 8: seq, 9: seq, 10: seq})


def test_fifo_batch_refusals_whole(pair):
    def s(q):
        q("create_queue", QueueName="fb.fifo", Attributes={"FifoQueue": "true"})
        u = q.url("fb.fifo")
        q("send_message_batch", QueueUrl=u, Entries=[
            {"Id": "ok", "MessageBody": "1", "MessageGroupId": "g", "MessageDeduplicationId": "d1"},
            {"Id": "nogroup", "MessageBody": "2", "MessageDeduplicationId": "d2"},
            {"Id": "nodedup", "MessageBody": "3", "MessageGroupId": "g"}])
        q("send_message_batch", QueueUrl=u, Entries=[
            {"Id": "ok", "MessageBody": "1", "MessageGroupId": "g", "MessageDeduplicationId": "d1"},
            {"Id": "nodedup", "MessageBody": "3", "MessageGroupId": "g"}])
        q("send_message_batch", QueueUrl=u, Entries=[])
        q("send_message_batch", QueueUrl=u, Entries=[{"Id": f"i{i}", "MessageBody": "x", "MessageGroupId": "g",
                                                       "MessageDeduplicationId": f"i{i}"} for i in range(11)])
        q("send_message_batch", QueueUrl=u, Entries=[{"Id": "a", "MessageBody": "x", "MessageGroupId": "g"},
                                                      {"Id": "a", "MessageBody": "y", "MessageGroupId": "g"}])
        q("send_message_batch", QueueUrl=u, Entries=[{"Id": "a!", "MessageBody": "x", "MessageGroupId": "g"}])
        q("send_message_batch", QueueUrl=u, Entries=[{"Id": f"b{i}", "MessageBody": "x" * 200_000,
                                                       "MessageGroupId": "g", "MessageDeduplicationId": f"b{i}"}
                                                      for i in range(6)])
        q("send_message_batch", QueueUrl=u, Entries=[{"Id": "big", "MessageBody": "b" * 1_048_577,
                                                       "MessageGroupId": "g", "MessageDeduplicationId": "big"}])
        got = _quiet(q, "receive_message", QueueUrl=u, MaxNumberOfMessages=10)
        q.note("only the valid entry was stored", _bodies(got))
    # a FIFO batch with an entry lacking MessageGroupId, or a deduplication id on a queue without
    # content-based deduplication, is refused whole (MissingParameter / InvalidParameterValue), as
    # SQS answers it (moto issue 4009 reported it from AWS; moto's suite expects it too)
    differential(pair, s)


def test_fifo_batch_order_and_sequence_numbers_with_default_delay(pair):
    def s(q):
        q("create_queue", QueueName="sq.fifo", Attributes={"FifoQueue": "true", "DelaySeconds": "1"})
        u = q.url("sq.fifo")
        sent = q.client.send_message_batch(QueueUrl=u, Entries=[
            {"Id": f"e{i}", "MessageBody": f"m{i}", "MessageGroupId": "g", "MessageDeduplicationId": f"d{i}"}
            for i in range(10)])
        one = q.client.send_message(QueueUrl=u, MessageBody="last", MessageGroupId="g", MessageDeduplicationId="dl")
        answered = {e["MessageId"]: e["SequenceNumber"] for e in sent["Successful"]}
        answered[one["MessageId"]] = one["SequenceNumber"]
        import time as _t
        _t.sleep(1.3)
        got = _quiet(q, "receive_message", QueueUrl=u, MaxNumberOfMessages=10, WaitTimeSeconds=2,
                     AttributeNames=["SequenceNumber"])
        msgs = (got or {}).get("Messages") or []
        q.note("received in the order sent", [m["Body"] for m in msgs])
        q.note("each received with the SequenceNumber its send answered",
               all(answered[m["MessageId"]] == m["Attributes"]["SequenceNumber"] for m in msgs))
        seqs = [int(m["Attributes"]["SequenceNumber"]) for m in msgs]
        q.note("increasing within the group", seqs == sorted(seqs) and len(set(seqs)) == len(seqs))
    # AWS (SendMessage, SequenceNumber): "SequenceNumber continues to increase for a particular
    # MessageGroupId" (moto draws random digits)
    differential(pair, s, aws={3: ("note", "increasing within the group", True)})


def test_bare_queue_name_and_other_url_forms(pair):
    def s(q):
        q("create_queue", QueueName="bare")
        for url in ("bare", f"https://sqs.us-east-1.amazonaws.com/{ACCOUNT}/bare",
                    "http://localhost:4566/000000000000/bare", "https://sqs.us-east-1.amazonaws.com/bare"):
            q("send_message", QueueUrl=url, MessageBody="x")
            q("get_queue_attributes", QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])
        q("send_message", QueueUrl="missing", MessageBody="x")
    differential(pair, s)


def test_check_order_and_wording(pair):
    def s(q):
        q("send_message", QueueUrl=q.url("nowhere"), MessageBody="x", DelaySeconds=901)
        q("receive_message", QueueUrl=q.url("nowhere"), MaxNumberOfMessages=11)
        q("create_queue", QueueName="wd")
        u = q.url("wd")
        for attrs in ({"a": {"DataType": "Bogus", "StringValue": "1"}}, {"a": {"DataType": "String"}},
                      {"a": {"DataType": "String", "StringValue": ""}},
                      {"öther": {"DataType": "String", "StringValue": "x"}}):
            try:
                q.client.send_message(QueueUrl=u, MessageBody="x", MessageAttributes=attrs)
                q.note("message", None)
            except ClientError as e:
                q.note("message", e.response["Error"]["Message"])
        try:
            q.client.get_queue_attributes(QueueUrl=u, AttributeNames=["Bogus"])
            q.note("message", None)
        except ClientError as e:
            q.note("message", e.response["Error"]["Message"])
        for op, kw in (("delete_message", {}), ("change_message_visibility", {"VisibilityTimeout": 5})):
            try:
                getattr(q.client, op)(QueueUrl=u, ReceiptHandle="garbage", **kw)
            except ClientError as e:
                q.note(op, (e.response["Error"]["Code"], e.response["Error"]["Message"]))
    # AWS (API reference, ReceiptHandleIsInvalid; SQS's own answers as widely reported):
    # 'The input receipt handle "<h>" is not a valid receipt handle.' (moto: "The input receipt handle
    # is invalid." for the single call, AWS's wording in its batch calls)
    wording = 'The input receipt handle "garbage" is not a valid receipt handle.'
    # a String attribute without a value: SQS refuses it ("must contain non-empty message attribute
    # value for message attribute type 'String'", moto's own wording for a null value; moto accepts it)
    empty = ("note", "message", "The message attribute 'a' must contain non-empty message attribute value for "
             "message attribute type 'String'.")
    # DelaySeconds out of range: InvalidParameterValue whether or not the queue exists (SQS validates
    # the request first; moto looks the queue up first)
    differential(pair, s, aws={0: E("send_message", INVALID), 1: E("receive_message", INVALID), 4: empty, 5: empty,
                               8: ("note", "delete_message", ("ReceiptHandleIsInvalid", wording)),
                               9: ("note", "change_message_visibility", ("ReceiptHandleIsInvalid", wording))})


def test_delete_after_visibility_zero_with_the_same_handle(pair):
    def s(q):
        q("create_queue", QueueName="vz")
        u = q.url("vz")
        for batch in ([{"Id": "a", "MessageBody": "x"}],  # alone, and one of a lakeq batch of three
                      [{"Id": "a", "MessageBody": "x"}, {"Id": "b", "MessageBody": "y"}, {"Id": "c", "MessageBody": "z"}]):
            q.client.send_message_batch(QueueUrl=u, Entries=batch)
            got = q.client.receive_message(QueueUrl=u, MaxNumberOfMessages=10, VisibilityTimeout=30)["Messages"]
            x = next(m for m in got if m["Body"] == "x")
            q("change_message_visibility", QueueUrl=u, ReceiptHandle=x["ReceiptHandle"], VisibilityTimeout=0)
            q("delete_message", QueueUrl=u, ReceiptHandle=x["ReceiptHandle"])  # the same, still newest handle
            for m in got:
                if m is not x:
                    q.client.delete_message(QueueUrl=u, ReceiptHandle=m["ReceiptHandle"])
            q.note("deleted", _bodies(_quiet(q, "receive_message", QueueUrl=u, MaxNumberOfMessages=10)))
    differential(pair, s)


def test_settle_after_receiving_again(pair):
    def s(q):
        q("create_queue", QueueName="again")
        u = q.url("again")
        q("send_message", QueueUrl=u, MessageBody="x")
        first = q.client.receive_message(QueueUrl=u, VisibilityTimeout=0)["Messages"][0]["ReceiptHandle"]
        second = q.client.receive_message(QueueUrl=u, VisibilityTimeout=30)["Messages"][0]["ReceiptHandle"]
        q("change_message_visibility", QueueUrl=u, ReceiptHandle=second, VisibilityTimeout=40)
        q("change_message_visibility_batch", QueueUrl=u, Entries=[{"Id": "a", "ReceiptHandle": second,
                                                                   "VisibilityTimeout": 50}])
        q("delete_message", QueueUrl=u, ReceiptHandle=first)  # an earlier receive's handle
        q("get_queue_attributes", QueueUrl=u, AttributeNames=["ApproximateNumberOfMessagesNotVisible"])
    # AWS DeleteMessage: "you must use the ReceiptHandle from the most recent time you received the
    # message. If you use an old ReceiptHandle, the request will succeed, but the message might not be
    # deleted"; moto deletes it. lakeq
    # keeps it (docs/api.md, deliberate differences): the receiver holding the newest handle settles it.
    differential(pair, s, aws={5: ("get_queue_attributes", "ok",
                                   {"Attributes": {"ApproximateNumberOfMessagesNotVisible": "1"}})})
