"""Produce under AWS's limits and crashes (issue 8, defects 2, 3 and 5): regression tests.

- a crash between the segment write and the head's move must not leave acknowledged messages
  invisible (a retry answered from the dedup items must be readable);
- no TransactWriteItems over DynamoDB's 100 items / 4 MB, whatever the request;
- a message whose stored form would exceed DynamoDB's 400 KB item, and a request over the
  per-request byte limit, are refused with 413 ``payload_too_large`` and change nothing.
"""
from __future__ import annotations

import base64
import json

import pytest

from infra.local import interceptor
from lakeq.contract import validation as v
from lakeq.store.models import DedupModel, QueueModel, SegmentModel
from tests.crash import CountCalls, CrashAfter

T = "/v1/topics/quotes%2Fsh/messages"
DDB_ITEM_BYTES = 400 * 1024
DDB_TRANSACT_ITEMS = 100
DDB_TRANSACT_BYTES = 4 * 1024 * 1024


def produce(api, key, msgs):
    return api.call("POST", T, {"producer": "feed", "messages": msgs}, key=key)


def drain(api, key, group="risk", topic_path=T):
    """Every message a consumer can read, acknowledged batch by batch."""
    out = []
    while True:
        s, b = api.call("GET", topic_path, query={"group": group, "max": 100}, key=key)
        assert s == 200, b
        if not b["messages"]:
            return out
        out += b["messages"]
        assert api.call("POST", "/v1/acks", {"group": group, "receipt": b["receipt"]}, key=key)[0] == 200


def backlog(api, key, group="risk"):
    s, b = api.call("GET", "/v1/groups/risk/offsets", query={"topic": "quotes/sh"}, key=key)
    assert s == 200, b
    return b["backlog"]


def stored():
    """(head per queue, segment items, dedup items) of quotes/sh: to show a refused request wrote
    nothing."""
    heads = {int(q.queue): int(q.max_offset) for q in QueueModel.scan() if q.topic == "quotes/sh"}
    assert len(heads) == 2
    return (heads, sum(1 for q in heads for _ in SegmentModel.query(f"quotes/sh#{q}")),
            sum(1 for _ in DedupModel.query("quotes/sh")))


# --- DynamoDB item sizes, as DynamoDB counts them (names + values) -------------------------------
def _value_bytes(v: dict) -> int:
    (kind, x), = v.items()
    if kind == "S":
        return len(x.encode("utf-8"))
    if kind == "N":
        return (len(str(x).lstrip("-").replace(".", "")) + 1) // 2 + 1
    if kind == "B":
        return len(base64.b64decode(x)) if isinstance(x, str) else len(x)
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "L":
        return 3 + sum(1 + _value_bytes(e) for e in x)
    if kind == "M":
        return 3 + sum(len(k.encode("utf-8")) + 1 + _value_bytes(e) for k, e in x.items())
    if kind in ("SS", "NS", "BS"):
        return sum(_value_bytes({kind[0]: e}) for e in x)
    raise AssertionError(kind)


def item_bytes(item: dict) -> int:
    return sum(len(k.encode("utf-8")) + _value_bytes(val) for k, val in item.items())


class Limits:
    """Hook: records every write and fails the test's assertions later if one broke a DynamoDB
    limit (item <= 400 KB, transaction <= 100 items and <= 4 MB)."""

    def __init__(self):
        self.transactions: list[tuple[int, int]] = []
        self.items: list[int] = []

    def before(self, call):
        if call.service != "dynamodb":
            return
        p = call.params
        if call.operation == "PutItem":
            self.items.append(item_bytes(p["Item"]))
        elif call.operation == "TransactWriteItems":
            total = 0
            for ti in p["TransactItems"]:
                (kind, body), = ti.items()
                size = item_bytes(body.get("Item") or body.get("Key") or {})
                if kind == "Put":
                    self.items.append(size)
                total += size
            self.transactions.append((len(p["TransactItems"]), total))

    def after(self, call, response):
        return response

    def check(self):
        assert all(n <= DDB_TRANSACT_ITEMS and b <= DDB_TRANSACT_BYTES for n, b in self.transactions), \
            self.transactions
        assert all(b <= DDB_ITEM_BYTES for b in self.items), max(self.items)


# --- defect 2: crash between the segment write and the head's move -------------------------------
def _ops(api, key, msgs):
    with CountCalls() as c:
        s, b = produce(api, key, msgs)
    assert s == 200, b
    return [call.operation for call in c.calls]


@pytest.mark.parametrize("with_ids", [True, False])
def test_crash_after_the_segment_write_then_retry_is_readable(api, setup, with_ids):
    """The function dies right after its segment write (before anything else): the client
    retries the same request; every message the 2xx acknowledges must be pulled, at the offset
    the 2xx says, and counted in the backlog."""
    warm = [{"body": "warm", "key": "k"}]  # warms the per-container caches, so calls line up
    _ops(api, setup["feed"], warm)
    write = "PutItem" if not with_ids else "TransactWriteItems"
    msgs = [{"body": f"m{i}", "key": "k", **({"id": f"id-{i}"} if with_ids else {})} for i in range(3)]
    ops = _ops(api, setup["feed"], [{"body": "probe", "key": "k", **({"id": "probe"} if with_ids else {})}])
    k = ops.index(write) + 1  # 1-based: the segment write is the k-th call
    with CrashAfter(k) as c:
        crashed, _ = c.run(lambda: produce(api, setup["feed"], msgs))
    assert crashed and c.calls[-1].operation == write
    s, b = produce(api, setup["feed"], msgs)  # the client's retry
    assert s == 200, b
    got = {(m["queue"], m["offset"]): m for m in drain(api, setup["risk"])}
    for sent, r in zip(msgs, b["results"]):
        assert (r["queue"], r["offset"]) in got, (r, sorted(got))
        assert got[(r["queue"], r["offset"])]["body"] == sent["body"]
    assert backlog(api, setup["risk"]) == 0
    # warm + probe + the request (twice when without ids: the crashed copy is unacknowledged)
    assert len(got) == 2 + 3 * (1 if with_ids else 2)


# --- defect 3: 100 ids into one queue --------------------------------------------------------------
def test_hundred_ids_into_one_queue_stay_within_transaction_limits(api, setup):
    lim = Limits()
    msgs = [{"id": f"id-{i}", "body": f"m{i}", "key": "k"} for i in range(100)]
    with interceptor.hooked(lim):
        s, b = produce(api, setup["feed"], msgs)
    assert s == 200, b
    lim.check()
    assert [r["offset"] for r in b["results"]] == list(range(100))
    assert [m["body"] for m in drain(api, setup["risk"])] == [m["body"] for m in msgs]
    with interceptor.hooked(lim):  # the retry answers from the dedup items: same results
        assert produce(api, setup["feed"], msgs) == (200, b)


def test_large_batches_with_ids_split_into_transactions_within_limits(api, setup):
    """Bodies large enough for several segments, with ids, over two queues."""
    lim = Limits()
    big = "x" * 200_000
    msgs = [{"id": f"b-{i}", "body": big + str(i), "key": f"k{i % 2}"} for i in range(12)]
    msgs += [{"id": f"s-{i}", "body": f"s{i}", "key": "k0"} for i in range(88)]
    with interceptor.hooked(lim):
        s, b = produce(api, setup["feed"], msgs)
    if s == 413:  # over the per-request byte limit: then half of it must pass
        msgs = msgs[:5] + msgs[12:]
        with interceptor.hooked(lim):
            s, b = produce(api, setup["feed"], msgs)
    assert s == 200, b
    lim.check()
    got = {(m["queue"], m["offset"]): m["body"] for m in drain(api, setup["risk"])}
    assert {(r["queue"], r["offset"]): m["body"] for m, r in zip(msgs, b["results"])} == got


# --- defect 5: one message over DynamoDB's item, one request over Lambda's payload ---------------
def _fat_message(extra: int = 0) -> dict:
    """1 MiB body + 64 properties of 1024 three-byte characters: valid field by field."""
    return {"id": "fat", "body": "b" * (v.MAX_BODY_BYTES - extra), "key": "k",
            "properties": {f"p{i:02d}": "€" * 1024 for i in range(64)}}


@pytest.mark.parametrize("with_id", [True, False])
def test_a_message_whose_stored_form_exceeds_an_item_is_413(api, setup, with_id):
    lim = Limits()
    m = _fat_message()
    if not with_id:
        del m["id"]
    assert produce(api, setup["feed"], [{"id": "first", "body": "first", "key": "k"}])[0] == 200
    before = stored()
    assert sum(before[0].values()) == 1 and before[1:] == (1, 1)
    with interceptor.hooked(lim):
        s, b = produce(api, setup["feed"], [{"body": "small", "key": "k"}, m])
    assert s == 413 and b["error"]["code"] == "payload_too_large", (s, b)
    assert "messages[1]" in b["error"]["message"]
    assert stored() == before
    lim.check()


def test_message_size_limit_boundary(api, setup):
    """Exactly at the limit is stored (and read back intact); one byte more is 413."""
    lim = Limits()
    props = {f"p{i:02d}": "€" * 1000 for i in range(60)} | {"n": 1.5, "b": True, "q": 'a"\\b'}
    m = {"id": "edge", "key": "k", "tags": ["t"], "properties": props, "body": ""}
    m["body"] = "y" * (v.MAX_MESSAGE_BYTES - v.message_bytes(v.MessageIn("edge", "", "k", ["t"], props)))
    assert len(m["body"]) <= v.MAX_BODY_BYTES
    assert v.message_bytes(v.MessageIn("edge", m["body"], "k", ["t"], props)) == v.MAX_MESSAGE_BYTES
    over = {**m, "id": "edge2", "body": m["body"] + "y"}
    with interceptor.hooked(lim):
        s, b = produce(api, setup["feed"], [over])
        assert s == 413 and b["error"]["code"] == "payload_too_large", (s, b)
        s, b = produce(api, setup["feed"], [m])
        assert s == 200, b
    lim.check()
    [got] = drain(api, setup["risk"])
    assert got["body"] == m["body"] and got["properties"] == m["properties"]


def test_request_over_the_request_byte_limit_is_413(api, setup):
    """Four messages of 1 MiB with ids are each valid, together over the per-request limit (and under
    API Gateway's 10 MB: the function's 413)."""
    msgs = [{"id": f"r{i}", "body": "z" * v.MAX_BODY_BYTES, "key": f"k{i}"} for i in range(4)]
    raw = json.dumps({"producer": "feed", "messages": msgs})
    assert len(raw.encode()) > v.MAX_REQUEST_BYTES
    before = stored()
    s, b = api.call("POST", T, raw_body=raw, key=setup["feed"])
    assert s == 413 and b["error"]["code"] == "payload_too_large", (s, b)
    assert str(v.MAX_REQUEST_BYTES) in b["error"]["message"]
    assert stored() == before
    # the same messages in requests under the limit all pass
    lim = Limits()
    with interceptor.hooked(lim):
        for part in (msgs[i:i + 2] for i in range(0, len(msgs), 2)):
            s, b = produce(api, setup["feed"], part)
            assert s == 200, (s, b)
    lim.check()


def test_request_byte_limit_is_checked_after_auth_and_syntax(api, setup):
    msgs = [{"body": "z" * v.MAX_BODY_BYTES} for _ in range(3)]  # 3 MiB: over 3,000,000, under the gateway's
    assert api.call("POST", T, {"producer": "feed", "messages": msgs}, key="wrong")[0] == 401
    assert api.call("POST", T, {"producer": "feed", "messages": msgs + [{"body": 1}]}, key=setup["feed"])[0] == 400
    assert api.call("POST", "/v1/topics/nope/messages", {"producer": "feed", "messages": msgs},
                    key=setup["feed"])[0] == 404


# --- the head mover's UpdateItem meeting a transaction in flight ----------------------------------
class ConflictOnce:
    """Hook: the first ``times`` UpdateItems of a queue item made by ``function`` fail as AWS fails
    a write that meets a transaction in flight on the item (not retried by the SDK)."""

    def __init__(self, times: int = 2, function: str = "HeadsFunction"):
        self.left = times
        self.function = function

    def before(self, call):
        import os

        from botocore.exceptions import ClientError
        if (call.function == self.function and call.operation == "UpdateItem"
                and call.params.get("TableName") == os.environ["QUEUES_TABLE"] and self.left > 0):
            self.left -= 1
            raise ClientError({"Error": {"Code": "TransactionConflictException",
                                         "Message": "Transaction is ongoing for the item"}}, "UpdateItem")

    def after(self, call, response):
        return response


def test_produce_without_ids_writes_no_queue_item(api, setup):
    """Issue 16 item 3: an append without ids is one PutItem of its segment; the head's UpdateItem
    is the stream's head mover's (seen failing on the old code: one UpdateItem per request)."""
    calls = CountCalls({"ProduceFunction"})
    with interceptor.hooked(calls):
        s, b = produce(api, setup["feed"], [{"body": "a", "key": "k"}, {"body": "b", "key": "k"}])
    assert s == 200, b
    ops = [(c.operation, c.params.get("TableName", "").rsplit("-", 1)[-1]) for c in calls.calls]
    # the only QueuesTable write: the topic's change marker (issue 33), never a queue item's head
    marker = [c for c in calls.calls if c.operation == "UpdateItem" and c.params["Key"]["pq"]["S"].endswith("#w")]
    assert len(marker) == 1 and ops.count(("UpdateItem", "queues")) == 1, ops
    assert ops.count(("PutItem", "segments")) == 1, ops
    assert [m["body"] for m in drain(api, setup["risk"])] == ["a", "b"]


@pytest.mark.moto  # reads DynamoDB Streams
def test_head_update_meeting_a_transaction_is_retried(api, setup, aws):
    """The head mover's UpdateItem can meet an id-carrying producer's transaction on the queue item:
    it is retried, the head moves."""
    from tests.handlers import Context, load_function, segment_records
    s, b = produce(api, setup["feed"], [{"body": "a", "key": "k"}, {"body": "b", "key": "k"}])
    assert s == 200, b
    q = b["results"][0]["queue"]
    hook = ConflictOnce(2)
    with interceptor.hooked(hook):
        out = load_function("HeadsFunction")({"Records": segment_records(aws)}, Context())
    assert hook.left == 0 and out["moved"] == 1
    assert int(QueueModel.get(f"quotes/sh#{q}").max_offset) == 2


@pytest.mark.parametrize("delay_ms", [0, 60_000])
def test_a_change_marker_that_cannot_be_bumped_answers_busy_and_a_retry_stores_nothing_twice(
        api, setup, monkeypatch, delay_ms):
    """The topic's change marker (issue 33) is what a waiting long poll and a pull's empty look
    trust: every append bumps it before the produce answers (``lakeq.store.append.bump_change``,
    retried). One that cannot be bumped answers 503 ``busy`` with the appends (or the delayed
    messages) stored; the retry with the same ids answers their first results — stored once —
    and bumps. (Before: an append's failed bump was logged and the produce answered 200, its
    message then hidden from looks until the 60-s safety net.)"""
    from lakeq.store.queue_log import LogRepo

    def throttled(topic, now):
        raise RuntimeError("ProvisionedThroughputExceededException (injected)")
    msg = [{"body": "a", "key": "k", "id": "once", "delay_ms": delay_ms}]
    with monkeypatch.context() as m:
        m.setattr(LogRepo, "bump_change", staticmethod(throttled))
        s, b = produce(api, setup["feed"], msg)
    assert (s, b["error"]["code"]) == (503, "busy"), b
    before = LogRepo.change("quotes/sh")
    s, b = produce(api, setup["feed"], msg)
    assert s == 200, b
    first = b["results"][0]
    s, b = produce(api, setup["feed"], msg)
    assert s == 200 and b["results"][0] == first, b  # the same result: stored once
    assert LogRepo.change("quotes/sh") != before  # the retry bumped
