"""Pull and ack under AWS's limits and lost responses (issue 8, defects 4 and 8):

- a pull's response fits Lambda's 6 MB response payload whatever the bodies (the runtime encodes the
  body string a second time), always carries >= 1 message, and its lock covers exactly what it
  returned, so the rest is served next (nothing stuck, nothing skipped, nothing twice);
- an acknowledgement that succeeded answers 200 again when retried (lost response), through
  ``POST /v1/acks``, ``?ack=`` and a subscription's list, while a really stale receipt stays 409.
"""
from __future__ import annotations

import itertools
import json
import zlib

import pytest

from lakeq.fanout import worker as fanout
from tests.handlers import Context

T = "/v1/topics/quotes%2Fsh/messages"
LAMBDA_RESPONSE_LIMIT = 6 * 1024 * 1024  # a synchronous invocation's response payload
KIB = 1024


def produce(api, key, msgs, producer="feed"):
    s, b = api.call("POST", T, {"producer": producer, "messages": msgs}, key=key)
    assert s == 200, b
    return b


def raw_pull(api, key, **q):
    """The handler's own return value (what the Lambda runtime serialises) and its size as the
    python3.11 runtime sends it (json.dumps with ensure_ascii=True)."""
    q.setdefault("group", "risk")
    ev, h = api.event("GET", q.pop("path", T), query=q, key=key)
    out = h(ev, Context())
    return out, len(json.dumps(out).encode("utf-8"))


def ack(api, key, receipt, **extra):
    return api.call("POST", "/v1/acks", {"group": "risk", "receipt": receipt, **extra}, key=key)


def drain(api, key, max_=100, path=T):
    """Pull and ack until nothing is served; every response must fit Lambda's limit."""
    got, sizes = [], []
    for _ in range(200):
        out, size = raw_pull(api, key, max=max_, path=path)
        assert out["statusCode"] == 200, out["body"][:300]
        sizes.append(size)
        assert size <= LAMBDA_RESPONSE_LIMIT, size
        b = json.loads(out["body"])
        if not b["messages"]:
            return got, sizes
        got += b["messages"]
        _, off, nxt, _ = b["receipt"].rsplit(":", 3)
        # the lock covers exactly the messages returned (no filter: contiguous offsets)
        assert [m["offset"] for m in b["messages"]] == list(range(int(off), int(nxt)))
        s, a = ack(api, key, b["receipt"])
        assert s == 200, a
    raise AssertionError("never drained")


@pytest.mark.parametrize("body, n", [
    ("x" * (256 * KIB), 26),          # ASCII: 26 x 256 KiB = 6.5 MiB
    ("é" * (128 * KIB), 12),          # 2 UTF-8 bytes, 6 once escaped by the python3.11 runtime
    ('"' * (128 * KIB), 14),          # escaped twice: 4 bytes each
    ("\x01" * (64 * KIB), 16),        # \u0001 then \\u0001: 7 bytes each
    ("\U0001F600" * (64 * KIB), 12),  # outside the BMP: a surrogate pair, 12 bytes
], ids=["ascii", "latin", "quotes", "control", "astral"])
def test_big_bodies_are_served_in_batches_that_fit_the_lambda_response(api, setup, body, n):
    for _ in range(n):  # one per request: one conditional PutItem each
        produce(api, setup["feed"], [{"body": body, "key": "k"}])
    got, sizes = drain(api, setup["risk"], max_=32)
    assert [m["offset"] for m in got] == list(range(n))  # each once, in order
    assert all(m["body"] == body for m in got)
    assert len(sizes) > 2  # it really was cut into several batches
    assert max(sizes) > LAMBDA_RESPONSE_LIMIT * 0.6  # and the batches are not needlessly small


def test_the_response_body_keeps_utf8_as_is(api, setup):
    produce(api, setup["feed"], [{"body": "prix 10,5 €", "key": "k", "properties": {"nom": "Zürich"}}])
    out, _ = raw_pull(api, setup["risk"])
    assert "€" in out["body"] and "Zürich" in out["body"] and "\\u" not in out["body"]


def test_budget_with_a_filter_counts_only_returned_messages_and_locks_up_to_them(api, setup):
    big = "y" * (256 * KIB)
    for j in range(26):  # A-tagged big bodies interleaved with small B ones (one segment a request)
        produce(api, setup["feed"], [{"id": f"a{j}", "body": big, "key": "k", "tags": ["A"]},
                                     {"id": f"b{j}", "body": "small", "key": "k", "tags": ["B"]}])
    seen = []
    for _ in range(40):
        out, size = raw_pull(api, setup["risk"], max=100, tags="A")
        assert size <= LAMBDA_RESPONSE_LIMIT
        b = json.loads(out["body"])
        if not b["messages"]:
            break
        _, off, nxt, _ = b["receipt"].rsplit(":", 3)
        # cut by the budget: next_offset is right after the last message returned (skipped ones
        # before it included); the last batch also covers the trailing skipped message
        assert int(nxt) == b["messages"][-1]["offset"] + 1 or (b["messages"][-1]["id"] == "a25" and int(nxt) == 52)
        seen += [m["id"] for m in b["messages"]]
        assert ack(api, setup["risk"], b["receipt"])[0] == 200
    assert seen == [f"a{j}" for j in range(26)]
    s, o = api.call("GET", "/v1/groups/risk/offsets", query={"topic": "quotes/sh"}, key=setup["risk"])
    assert o["backlog"] == 0


# --- idempotent acknowledgements --------------------------------------------------------------
def test_a_repeated_ack_that_succeeded_answers_200_again(api, setup):
    produce(api, setup["feed"], [{"body": str(i), "key": "k"} for i in range(5)])
    s, b = api.call("GET", T, query={"group": "risk", "max": 2}, key=setup["risk"])
    first = ack(api, setup["risk"], b["receipt"])
    assert first[0] == 200
    assert ack(api, setup["risk"], b["receipt"]) == first  # the response was lost: same answer
    # another consumer of the group locks the queue meanwhile: the retry still answers 200
    s, b2 = api.call("GET", T, query={"group": "risk", "max": 2}, key=setup["risk"])
    assert [m["body"] for m in b2["messages"]] == ["2", "3"]
    assert ack(api, setup["risk"], b["receipt"]) == first
    assert ack(api, setup["risk"], b2["receipt"])[0] == 200
    assert ack(api, setup["risk"], b["receipt"]) == first  # and after that one's ack too
    s, o = api.call("GET", "/v1/groups/risk/offsets", query={"topic": "quotes/sh"}, key=setup["risk"])
    assert o["backlog"] == 1  # the retries changed nothing


def test_a_retried_pull_with_ack_after_a_lost_response(api, setup):
    produce(api, setup["feed"], [{"body": str(i), "key": "k"} for i in range(6)])
    s, b = api.call("GET", T, query={"group": "risk", "max": 2}, key=setup["risk"])
    s, lost = api.call("GET", T, query={"group": "risk", "max": 2, "ack": b["receipt"]}, key=setup["risk"])
    assert s == 200 and [m["body"] for m in lost["messages"]] == ["2", "3"]
    # the response was lost; the consumer retries the same request once its batch's lock expires
    import time
    time.sleep(1.1)  # risk's visibility timeout is 1 s
    s, again = api.call("GET", T, query={"group": "risk", "max": 2, "ack": b["receipt"]}, key=setup["risk"])
    assert s == 200 and [m["body"] for m in again["messages"]] == ["2", "3"]  # redelivered, not 409
    assert ack(api, setup["risk"], lost["receipt"])[1]["error"]["code"] == "stale_receipt"  # really stale
    assert ack(api, setup["risk"], again["receipt"])[0] == 200


def test_remembered_acks_stay_bounded(api, setup):
    from lakeq.store.models import OffsetModel
    from lakeq.store.offsets import OffsetRepo
    produce(api, setup["feed"], [{"body": str(i), "key": "k"} for i in range(12)])
    receipts = []
    for _ in range(12):
        s, b = api.call("GET", T, query={"group": "risk", "max": 1}, key=setup["risk"])
        receipts.append(b["receipt"])
        assert ack(api, setup["risk"], b["receipt"])[0] == 200
    (rec,) = [r for r in OffsetModel.scan() if r.owner.startswith("g|risk|quotes/sh")]
    assert len(rec.acks) <= OffsetRepo.ACKS_KEPT + 1
    for r in receipts[-OffsetRepo.ACKS_KEPT:]:  # the newest are still recognised as done
        assert ack(api, setup["risk"], r)[0] == 200
    assert ack(api, setup["risk"], receipts[0])[0] == 409  # the oldest were forgotten: stale, no change
    s, o = api.call("GET", "/v1/groups/risk/offsets", query={"topic": "quotes/sh"}, key=setup["risk"])
    assert o["backlog"] == 0


def test_stale_receipts_stay_409(api, setup):
    produce(api, setup["feed"], [{"body": str(i), "key": "k"} for i in range(3)])
    s, b = api.call("GET", T, query={"group": "risk", "max": 1}, key=setup["risk"])
    broker, q, off, nxt, ts = b["receipt"].split(":")
    for bad in [f"{broker}:{q}:{off}:{int(nxt) + 1}:{ts}", f"{broker}:{q}:{off}:{nxt}:{int(ts) + 1}",
                f"other:{q}:{off}:{nxt}:{ts}"]:
        s, e = ack(api, setup["risk"], bad)
        assert s == 409 and e["error"]["code"] == "stale_receipt", bad
    assert ack(api, setup["risk"], b["receipt"])[0] == 200
    for bad in [f"{broker}:{q}:{off}:{int(nxt) + 1}:{ts}", f"{broker}:{q}:{off}:{nxt}:{int(ts) - 1}"]:
        s, e = ack(api, setup["risk"], bad)  # near the acked one, but not it
        assert s == 409 and e["error"]["code"] == "stale_receipt", bad
    # a reset re-delivers: the old batch's receipt of a *later* lock is stale, the acked one stays done
    s, b2 = api.call("GET", T, query={"group": "risk", "max": 1}, key=setup["risk"])
    api.call("PUT", "/v1/groups/risk/offsets", {"topic": "quotes/sh", "queue": int(q.rpartition("@")[2]), "offset": 0})
    assert ack(api, setup["risk"], b2["receipt"])[0] == 409
    assert ack(api, setup["risk"], b["receipt"])[0] == 200


def test_subscription_list_ack_is_idempotent_and_its_pull_fits_the_limit(api, setup, monkeypatch):
    import itertools

    from lakeq.common import clock
    ticks = itertools.count(1_000)
    monkeypatch.setattr(clock, "now", lambda: next(ticks))
    fanout.matcher = fanout.Matcher()
    s, sub = api.call("POST", "/v1/subscriptions", {"subscriber": "risk", "topic": "quotes"}, key=setup["risk"])
    assert s == 201
    body = "é" * (128 * KIB)  # 768 KiB once escaped by the runtime: 10 of them exceed 6 MiB
    for j in range(10):
        produce(api, setup["feed"], [{"id": f"m{j}", "body": body, "key": "k"}])
    _fan_out_everything(api)
    path = f"/v1/subscriptions/{sub['id']}/messages"
    got, batches = [], 0
    for _ in range(40):
        ev, h = api.event("GET", path, query={"max": 32}, key=setup["risk"])
        out = h(ev, Context())
        assert out["statusCode"] == 200 and len(json.dumps(out)) <= LAMBDA_RESPONSE_LIMIT
        b = json.loads(out["body"])
        if not b["messages"]:
            break
        got += [m["id"] for m in b["messages"]]
        batches += 1
        a = api.call("POST", "/v1/acks", {"subscription": sub["id"], "receipt": b["receipt"]}, key=setup["risk"])
        assert a[0] == 200
        assert api.call("POST", "/v1/acks", {"subscription": sub["id"], "receipt": b["receipt"]},
                        key=setup["risk"]) == a
    assert got == [f"m{j}" for j in range(10)] and batches > 1
    fanout.matcher = fanout.Matcher()


def _fan_out_everything(api):
    """Feed every segment of the topic's queues to the fan-out handler, as the stream would."""
    from infra.local import template as tpl
    from lakeq.store.models import SegmentModel
    from tests.handlers import _load
    spec = next(s for s in tpl.functions(tpl.load_template()) if s.logical_id == "FanoutFunction")
    handler = _load(spec)
    records = []
    for q in range(2):
        for item in SegmentModel.query(f"quotes/sh#{q}"):
            image = item.serialize()  # DynamoDB-typed attribute values, binary as bytes
            records.append({"eventID": f"{q}-{int(item.base)}", "eventName": "INSERT", "eventSource": "aws:dynamodb",
                            "dynamodb": {"Keys": {"pq": image["pq"], "base": image["base"]}, "NewImage": image,
                                         "SequenceNumber": str(len(records) + 1), "StreamViewType": "NEW_IMAGE"},
                            "eventSourceARN": "arn:aws:dynamodb:us-east-1:123456789012:table/x/stream/1"})
    for r in records:
        assert handler({"Records": [r]}, Context()) == {"batchItemFailures": []}


# --- QueuesTable keyed by topic#queue: a topic's queues through BatchGetItem ----------------------
class _Unprocessed:
    """Interceptor hook: the first ``times`` BatchGetItem answers on QueuesTable hand back all
    but one of the asked keys as UnprocessedKeys (as DynamoDB does under throttling)."""

    def __init__(self, times: int):
        self.left = times
        self.calls = 0

    def before(self, call):
        pass

    def after(self, call, response):
        if call.operation != "BatchGetItem" or not any(t.endswith("-queues") for t in call.params["RequestItems"]):
            return response
        self.calls += 1
        if self.left <= 0:
            return response
        self.left -= 1
        (table, got), = response["Responses"].items()
        keys = call.params["RequestItems"][table]["Keys"]
        kept = got[:1]
        kept_pq = {i["pq"]["S"] for i in kept}
        return {**response, "Responses": {table: kept},
                "UnprocessedKeys": {table: {"Keys": [k for k in keys if k["pq"]["S"] not in kept_pq]}}}


def test_pull_and_offsets_see_every_queue_when_batchget_leaves_keys_unprocessed(api, setup):
    from infra.local import interceptor
    from lakeq.store.queue_log import LogRepo
    s, _ = api.call("POST", "/v1/topics", {"name": "quotes/wide", "queues": 64})
    assert s == 201
    keys: dict[int, str] = {}
    for i in itertools.count():  # one key per queue (CRC-32 of the key modulo the queue count)
        keys.setdefault(zlib.crc32(f"k{i}".encode()) % 64, f"k{i}")
        if len(keys) == 64:
            break
    s, b = api.call("POST", "/v1/topics/quotes%2Fwide/messages",
                    {"producer": "feed", "messages": [{"body": k, "key": k} for k in keys.values()]},
                    key=setup["feed"])
    assert s == 200 and sorted(r["queue"] for r in b["results"]) == list(range(64))
    hook = _Unprocessed(times=3)
    with interceptor.hooked(hook):
        assert [int(q.queue) for q in LogRepo.queues("quotes/wide", 64)] == list(range(64))
        assert hook.calls == 4  # three answers cut short, asked again each time
        hook.left = 2
        s, o = api.call("GET", "/v1/groups/risk/offsets", query={"topic": "quotes/wide"}, key=setup["risk"])
    assert s == 200 and [q["queue"] for q in o["queues"]] == list(range(64)) and o["backlog"] == 64
    # more than 100 keys: pages of 100 (a topic has at most 64 queues; the repository does not care)
    assert [int(q.queue) for q in LogRepo.queues("quotes/wide", 150)] == list(range(64))
