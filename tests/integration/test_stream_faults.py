"""Stream consumers under faults (issue 8, defect 6): a poison record no longer blocks a shard
forever, retries stop at template.yaml's MaximumRetryAttempts and the record's metadata lands in the
on-failure queue; partial batch responses keep a shard's order; one failing subscription is parked
(visible in GET /v1/subscriptions) while the others get their messages, and catches up later.

Everything runs through the real event source mapping settings of template.yaml (the local stream
pump) and the real FanoutFunction handler, acting as its function (tests/handlers.py ``_load``)."""
from __future__ import annotations

import copy
import itertools
import json

import pytest
from botocore.exceptions import ClientError

from infra.local import interceptor
from infra.local import template as tpl
from infra.local.streams import StreamPump
from lakeq.common import clock as lakeq_clock
from lakeq.fanout import worker as fanout
from tests.handlers import Context, sample, sqs_messages

T_SAMPLE = 1795312800123  # produced_at of the messages in events/fanout_*stream.json


# moto: these tests read DynamoDB Streams (the stream pump, the fan-out, the archiver), which the memory store has not
pytestmark = [pytest.mark.moto, pytest.mark.usefixtures("fresh_matcher")]


@pytest.fixture
def early_clock(monkeypatch):
    ticks = itertools.count(T_SAMPLE - 1000)
    monkeypatch.setattr(lakeq_clock, "now", lambda: next(ticks))


@pytest.fixture
def pump(aws, fanout_handler):
    p = StreamPump(stack_name=tpl.LOCAL_STACK, dynamodb_client=aws["dynamodb"],
                   streams_client_=aws["dynamodbstreams"], sqs_client=aws["sqs"],
                   handlers={"FanoutFunction": fanout_handler}, max_backoff=0.01)
    p.mappings = [m for m in p.mappings if m.spec.logical_id == "FanoutFunction"]
    assert len(p.mappings) == 1
    return p


def on_failure_queue(aws) -> list[dict]:
    return sqs_messages(aws["sqs"], f"{tpl.LOCAL_STACK}-stream-failures")


def create(api, key, **body):
    s, b = api.call("POST", "/v1/subscriptions", {"subscriber": "risk", "topic": "quotes", **body}, key=key)
    assert s == 201, b
    return b["id"]


def produce(api, key, n, start, topic="quotes", key_="k"):
    msgs = [{"id": f"m{start + i}", "body": f"b{start + i}", "key": key_, "properties": {"n": start + i}}
            for i in range(n)]
    s, b = api.call("POST", f"/v1/topics/{topic}/messages", {"producer": "feed", "messages": msgs}, key=key)
    assert s == 200, b
    return [(topic, r["queue"], r["offset"]) for r in b["results"]]


def drain_list(api, sid, key):
    got, receipt = [], None
    while True:
        q = {"max": 100, **({"ack": receipt} if receipt else {})}
        s, b = api.call("GET", f"/v1/subscriptions/{sid}/messages", query=q, key=key)
        assert s == 200, b
        if not b["messages"]:
            return got
        got += [(m["topic"], m["queue"], m["offset"]) for m in b["messages"]]
        receipt = b["receipt"]


def parked(api, key, sid):
    s, b = api.call("GET", "/v1/subscriptions", query={"subscriber": "risk"}, key=key)
    assert s == 200
    return next(x for x in b["subscriptions"] if x["id"] == sid)["parked"]


def put_poison(aws, pq="quotes#3", base=0):
    """A segment item whose data is not what its index says: no consumer can decode it."""
    aws["dynamodb"].put_item(TableName=f"{tpl.LOCAL_STACK}-segments", Item={
        "pq": {"S": pq}, "base": {"N": str(base)}, "end": {"N": str(base + 1)}, "count": {"N": "1"},
        "idx": {"B": b"\x00" * 20}, "data": {"B": b"not zlib"}, "z": {"BOOL": True},
        "produced_at": {"N": "1"}})


class FailAppendsTo:
    """Hook: every write the fan-out makes to these subscriptions' lists fails like a throttled
    partition (after the SDK's own retries)."""

    def __init__(self, *sids: str):
        self.marks = [f"~{s}#0" for s in sids]
        self.failed = 0

    def before(self, call):
        if call.function == "FanoutFunction" and call.operation in ("TransactWriteItems", "PutItem"):
            text = json.dumps(call.params, default=str)
            if any(m in text for m in self.marks):
                self.failed += 1
                raise ClientError({"Error": {"Code": "ProvisionedThroughputExceededException",
                                             "Message": "Throughput exceeds the current capacity (test)"}},
                                  call.operation)

    def after(self, call, response):
        return response


# ------------------------------------------------------------------------ the handler's contract
def test_poison_record_mid_batch_partial_response_keeps_the_shard_order(api, setup, early_clock, fanout_handler):
    sid = create(api, setup["risk"])  # every message of quotes and its children
    ev = sample("fanout_poison_stream.json")
    seqs = [r["dynamodb"]["SequenceNumber"] for r in ev["Records"]]
    out = fanout_handler(ev, Context())
    # the poison record (index 2) and every later record of the batch are reported, in order
    assert out == {"batchItemFailures": [{"itemIdentifier": s} for s in seqs[2:]]}
    got = [m["id"] for m in api.call("GET", f"/v1/subscriptions/{sid}/messages", query={"max": 100},
                                     key=setup["risk"])[1]["messages"]]
    assert got == ["m1", "m2", "m3", "m4", "m5", "m6"]  # records 0 and 1 only: nothing after the poison


def test_poison_record_first_of_several_fails_the_invocation_so_it_is_bisected(api, setup, early_clock,
                                                                               fanout_handler):
    create(api, setup["risk"])
    ev = sample("fanout_poison_stream.json")
    ev["Records"] = ev["Records"][2:]
    with pytest.raises(fanout.PoisonBatch):
        fanout_handler(copy.deepcopy(ev), Context())
    ev["Records"] = ev["Records"][:1]  # alone: reported, so that retries count
    assert fanout_handler(ev, Context()) == {
        "batchItemFailures": [{"itemIdentifier": ev["Records"][0]["dynamodb"]["SequenceNumber"]}]}


# ------------------------------------------------------------------------ through the pump
def test_poison_record_is_discarded_after_the_templates_retries_and_the_rest_delivered(api, setup, aws, pump):
    """Before the fix (no MaximumRetryAttempts / bisection in template.yaml, the whole batch
    reported failed) the shard stayed blocked forever and drain() timed out."""
    sid = create(api, setup["risk"])
    calls = []
    handler = pump.handler_overrides["FanoutFunction"]
    pump.handler_overrides["FanoutFunction"] = lambda e, c: (
        calls.append([r["dynamodb"]["SequenceNumber"] for r in e["Records"]]), handler(e, c))[1]
    sent = produce(api, setup["feed"], 3, 0)
    put_poison(aws)
    sent += produce(api, setup["feed"], 3, 3)
    drained, n = pump.drain(30)
    assert drained, "the poison record still blocks the shard"
    assert drain_list(api, sid, setup["risk"]) == sent  # every good message, once, in order
    ev = pump.mappings[0].event
    assert (ev.maximum_retry_attempts, ev.bisect_on_error) == (10, True)
    [info] = on_failure_queue(aws)
    b = info["DDBStreamBatchInfo"]
    assert info["requestContext"]["condition"] == "RetryAttemptsExhausted"
    assert info["requestContext"]["approximateInvokeCount"] == 11  # first attempt + 10 retries
    assert b["batchSize"] == 1 and b["startSequenceNumber"] == b["endSequenceNumber"]
    assert b["streamArn"].endswith("/stream/" + b["streamArn"].rsplit("/stream/", 1)[1])
    poison = b["startSequenceNumber"]
    # [A, P, B] → A done, P reported (its first attempt); [P, B, …] and [P, B] raise and are
    # bisected (free); P alone is retried 10 times, then discarded
    assert calls.count([poison]) == 10
    assert sum(1 for c in calls if poison in c) == 13
    assert parked(api, setup["risk"], sid) == []


def test_one_failing_subscription_is_parked_while_the_others_get_their_messages(api, setup, aws, pump):
    bad = create(api, setup["risk"])
    good = create(api, setup["risk"])
    hook = FailAppendsTo(bad)
    with interceptor.hooked(hook):
        sent = produce(api, setup["feed"], 4, 0)
        assert pump.drain(20)[0]
        assert hook.failed >= 1
        [p] = parked(api, setup["risk"], bad)
        assert (p["topic"], p["queue"], p["from_offset"], p["attempts"]) == ("quotes", sent[0][1], 0, 1)
        assert "ProvisionedThroughputExceeded" in p["reason"]
        assert parked(api, setup["risk"], good) == []
        sent += produce(api, setup["feed"], 3, 4)
        assert pump.drain(20)[0]  # still failing: parked again (attempts 2), the batch succeeds
        [p] = parked(api, setup["risk"], bad)
        assert (p["from_offset"], p["attempts"]) == (0, 2)
        assert drain_list(api, good, setup["risk"]) == sent
    assert on_failure_queue(aws) == []  # nothing was discarded: the subscription held its messages
    assert drain_list(api, bad, setup["risk"]) == []
    # the partition recovers: the next record of that source queue catches the list up, in order
    sent2 = produce(api, setup["feed"], 2, 7)
    assert pump.drain(20)[0]
    assert parked(api, setup["risk"], bad) == []
    assert drain_list(api, bad, setup["risk"]) == sent + sent2
    assert drain_list(api, good, setup["risk"]) == sent2


def test_parked_for_one_source_queue_only(api, setup, aws, pump):
    """Parking is per source queue: a subscription parked on quotes#q still gets quotes/sh."""
    sid = create(api, setup["risk"])
    s, b = api.call("GET", "/v1/subscriptions", query={"subscriber": "risk"}, key=setup["risk"])
    assert b["subscriptions"][0]["parked"] == []

    class FailFirstQueue(FailAppendsTo):
        def before(self, call):
            if call.function == "FanoutFunction" and call.operation == "TransactWriteItems":
                if '"quotes@' in json.dumps(call.params, default=str):
                    self.failed += 1
                    raise ClientError({"Error": {"Code": "InternalServerError", "Message": "x"}}, "TransactWriteItems")

    with interceptor.hooked(FailFirstQueue(sid)):
        a = produce(api, setup["feed"], 2, 0)
        assert pump.drain(20)[0]
        sh = produce(api, setup["feed"], 2, 10, topic="quotes%2Fsh")
        assert pump.drain(20)[0]
    sh = [("quotes/sh", q, o) for _, q, o in sh]
    assert [(p["topic"], p["queue"]) for p in parked(api, setup["risk"], sid)] == [("quotes", a[0][1])]
    assert drain_list(api, sid, setup["risk"]) == sh
    a2 = produce(api, setup["feed"], 1, 2)
    assert pump.drain(20)[0]
    assert parked(api, setup["risk"], sid) == []
    assert drain_list(api, sid, setup["risk"]) == a + a2


def test_scheduled_sweep_catches_up_a_parked_subscription_of_a_quiet_queue(api, setup, aws, pump):
    sid = create(api, setup["risk"])
    with interceptor.hooked(FailAppendsTo(sid)):
        sent = produce(api, setup["feed"], 3, 0)
        assert pump.drain(20)[0]
    assert len(parked(api, setup["risk"], sid)) == 1
    # no record of that queue arrives any more: the Redeliver schedule (EventBridge) sweeps
    handler = pump.handler_overrides["FanoutFunction"]
    scheduled = sample("fanout_redeliver_schedule.json")
    assert handler(scheduled, Context()) == {"unparked": 1, "added": 3}
    assert parked(api, setup["risk"], sid) == []
    assert drain_list(api, sid, setup["risk"]) == sent
    assert handler(scheduled, Context()) == {"unparked": 0, "added": 0}  # nothing parked: a no-op
    res = tpl.load_template()["Resources"]["FanoutFunction"]["Properties"]["Events"]["Redeliver"]
    assert res["Type"] == "Schedule"
