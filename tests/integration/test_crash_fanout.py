"""Crash injection on the fan-out's write path (issue 8): the FanoutFunction is killed right after
each of its store calls in turn (tests/crash.py), then the stream redelivers the same batch, as
Lambda does after a crashed invocation, until it succeeds. A history checker then asserts that every
subscription's list holds each matching source message exactly once (no loss, no duplicate), in
source order per source queue, all of it below the list's head (visible to pulls), nothing parked.

Scenarios: ``plain`` (three subscriptions, every crash point: every prefix of the call sequence)
and ``parked`` (one subscription's list fails during the crashed invocation, so it is parked, and
the redelivery catches it up; seeded crash points). Each run creates fresh subscriptions, then
produces one round of messages (three source queues) whose stream batch it feeds to the function;
the reference predicates below are independent of the matcher. 19 crashed runs + 3 uncrashed."""
from __future__ import annotations

import json
from collections import Counter

import pytest
from botocore.exceptions import ClientError

from infra.local import interceptor
from infra.local import template as tpl
from infra.local.streams import lambda_record
from lakeq.fanout import worker as fanout
from lakeq.store.models import SegmentModel
from lakeq.store.queue_log import LogRepo
from lakeq.subscriptions.service import SubscriptionRepo, list_topic, read_list
from tests.crash import CrashAfter, count_calls, seeded_points
from tests.handlers import Context, _load

# moto: these tests read DynamoDB Streams (the stream pump, the fan-out, the archiver), which the memory store has not
pytestmark = pytest.mark.moto

FN = {"FanoutFunction"}
SUBS = {  # name -> (create body, reference predicate on (topic, properties))
    "all": ({"topic": "quotes"}, lambda t, p: True),
    "type_a": ({"topic": "quotes", "conditions": [{"field": "type", "values": ["A"]}]},
               lambda t, p: p.get("type") == "A"),
    "sh": ({"topic": "quotes/sh"}, lambda t, p: t == "quotes/sh"),
}


class FailAppendsTo:
    """The fan-out's writes to these lists fail (a throttled partition) until removed."""

    def __init__(self, *sids: str):
        self.marks = [f"~{s}#0" for s in sids]

    def before(self, call):
        if call.function == "FanoutFunction" and call.operation in ("TransactWriteItems", "PutItem"):
            if any(m in json.dumps(call.params, default=str) for m in self.marks):
                raise ClientError({"Error": {"Code": "ProvisionedThroughputExceededException",
                                             "Message": "throttled (test)"}}, call.operation)

    def after(self, call, response):
        return response


@pytest.fixture
def world(api, setup, aws):
    """``world["produce"]()`` publishes one round of messages to quotes (two queues) and quotes/sh
    and returns them with the stream batch they made (the records not seen before)."""
    ddbs = aws["dynamodbstreams"]
    arn = aws["dynamodb"].describe_table(TableName=f"{tpl.LOCAL_STACK}-segments")["Table"]["LatestStreamArn"]
    last: dict[str, str] = {}  # shard -> last sequence number read

    def produce():
        sent = []  # (topic, queue, offset, properties)
        for r, key_ in enumerate(("key0", "key4", "key1")):  # quotes queues 2 and 0, quotes/sh queue 1
            topic = "quotes/sh" if r % 2 else "quotes"
            msgs = [{"body": f"b{r}-{i}", "key": key_,
                     "properties": {"type": "A" if (r + i) % 3 == 0 else "B", "n": i}} for i in range(3)]
            s, b = api.call("POST", f"/v1/topics/{topic.replace('/', '%2F')}/messages",
                            {"producer": "feed", "messages": msgs}, key=setup["feed"])
            assert s == 200, b
            sent += [(topic, x["queue"], x["offset"], m["properties"]) for x, m in zip(b["results"], msgs)]
        new = []
        for sh in ddbs.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]:
            sid = sh["ShardId"]
            pos = ({"ShardIteratorType": "AFTER_SEQUENCE_NUMBER", "SequenceNumber": last[sid]} if sid in last
                   else {"ShardIteratorType": "TRIM_HORIZON"})
            it = ddbs.get_shard_iterator(StreamArn=arn, ShardId=sid, **pos)["ShardIterator"]
            got = ddbs.get_records(ShardIterator=it)["Records"]
            if got:
                last[sid] = got[-1]["dynamodb"]["SequenceNumber"]
            new += [lambda_record(x, arn, "us-east-1") for x in got]
        new = [r for r in new if r["eventName"] == "INSERT"
               and not r["dynamodb"]["Keys"]["pq"]["S"].startswith("~")]
        assert len(new) == 3 and len({(t, q) for t, q, _, _ in sent}) == 3
        return sent, {"Records": new}

    spec = next(s for s in tpl.functions(tpl.load_template()) if s.logical_id == "FanoutFunction")
    return {"produce": produce, "handler": _load(spec)}


def subscribe(api, key) -> dict[str, str]:
    out = {}
    for name, (body, _) in SUBS.items():
        s, b = api.call("POST", "/v1/subscriptions", {"subscriber": "risk", **body}, key=key)
        assert s == 201, b
        out[name] = b["id"]
    return out


def unsubscribe(sids: dict[str, str]) -> None:
    """Out of the next run's index (its list is left: purging is not what is tested here)."""
    for sid in sids.values():
        assert SubscriptionRepo.delete(sid)


def redeliver(world, event) -> None:
    """The event source mapping retries the batch until the function succeeds."""
    for _ in range(5):
        fanout.matcher = fanout.Matcher()  # a crashed container is gone; a new one starts cold
        out = world["handler"](event, Context())
        if not out["batchItemFailures"]:
            return
    raise AssertionError(f"the batch still fails after 5 redeliveries: {out}")


def check(api, key, sent, sids: dict[str, str], where: str) -> None:
    """The history checker: every matching message exactly once, in source order, visible."""
    s, b = api.call("GET", "/v1/subscriptions", query={"subscriber": "risk"}, key=key)
    assert s == 200
    views = {x["id"]: x for x in b["subscriptions"]}
    for name, sid in sids.items():
        pred = SUBS[name][1]
        want = [(t, q, o) for t, q, o, p in sent if pred(t, p)]
        lt = list_topic(sid)
        head = int(LogRepo.queue(lt, 0).max_offset)
        segs = list(SegmentModel.query(LogRepo.pq(lt, 0), consistent_read=True))
        end = max((int(s.end) for s in segs), default=0)
        assert end == head, f"{where} {name}: segments end at {end} but the head says {head} (invisible)"
        got_msgs, nxt = read_list(sid, 0, 10_000, head)
        got = [(m["topic"], m["queue"], m["offset"]) for m in got_msgs]
        assert nxt == head and len(got) == head, f"{where} {name}: a hole in the list"
        dup = [x for x, c in Counter(got).items() if c > 1]
        assert not dup, f"{where} {name}: duplicates {dup}"
        assert sorted(got) == sorted(want), f"{where} {name}: lost {sorted(set(want) - set(got))}"
        for tq in {(t, q) for t, q, _ in want}:
            offs = [o for t, q, o in got if (t, q) == tq]
            assert offs == sorted(offs), f"{where} {name}: {tq} out of source order: {offs}"
        assert views[sid]["parked"] == [], f"{where} {name}: still parked {views[sid]['parked']}"


def run(api, key, world, k: int | None, fail_type_a: bool) -> bool:
    """One history: fresh subscriptions, then a round of messages whose batch is handled with a
    crash after call ``k`` (and the type_a list failing during it, if asked), redelivered until it
    succeeds, then checked."""
    sids = subscribe(api, key)
    sent, event = world["produce"]()
    fanout.matcher = fanout.Matcher()
    hooks = [FailAppendsTo(sids["type_a"])] if fail_type_a else []
    with interceptor.hooked(*hooks):
        with CrashAfter(k, FN) as c:
            crashed, _ = c.run(lambda: world["handler"](event, Context()))
    redeliver(world, event)
    check(api, key, sent, sids, f"crash after call {k} (parking: {fail_type_a}):")
    unsubscribe(sids)
    return crashed


def calls_of_one_run(api, key, world, fail_type_a: bool) -> int:
    sids = subscribe(api, key)
    sent, event = world["produce"]()
    fanout.matcher = fanout.Matcher()
    hooks = [FailAppendsTo(sids["type_a"])] if fail_type_a else []
    with interceptor.hooked(*hooks):
        n, out = count_calls(lambda: world["handler"](event, Context()), FN)
    assert out == {"batchItemFailures": []}
    if fail_type_a:
        [p] = [x for x in api.call("GET", "/v1/subscriptions", query={"subscriber": "risk"}, key=key)[1]
               ["subscriptions"] if x["id"] == sids["type_a"]]
        assert p["parked"], "the failing subscription was not parked"
    redeliver(world, event)
    check(api, key, sent, sids, "uncrashed:")
    unsubscribe(sids)
    return n


def test_fanout_crash_after_every_store_call_then_redelivery(api, setup, world):
    n = calls_of_one_run(api, setup["risk"], world, fail_type_a=False)
    assert n >= 8  # index refresh (2) + per subscription: head, append transaction, check
    crashes = [run(api, setup["risk"], world, k, fail_type_a=False) for k in range(1, n + 1)]
    assert all(crashes), "every point up to the last call must crash the invocation"


@pytest.mark.parametrize("seed", [11, 12])
def test_fanout_crash_while_parking_a_failing_subscription(api, setup, world, seed):
    n = calls_of_one_run(api, setup["risk"], world, fail_type_a=True)
    points = seeded_points(seed, n, 4)
    crashes = [run(api, setup["risk"], world, k, fail_type_a=True) for k in points]
    assert all(crashes)
