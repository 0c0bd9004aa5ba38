"""Peek pages of big messages (issue 18.2 meets 18.3): a page is cut by one byte budget (the pull's,
lakeq.common.payload.ByteBudget) for the whole page, at the first message that does not fit, and its
``next`` names that message, so paging shows every message exactly once and every page is one Lambda
response (through tests.handlers.Api, as API Gateway: a result over 6 MB is its 500).

The bodies are 1 MiB (kept in the lake bucket by claim check, lakeq.log.claims): at most 5 fit one
page."""
from __future__ import annotations

import pytest

import json
import zlib

from lakeq.common.payload import LAMBDA_RESPONSE_LIMIT
from lakeq.log import claims
from tests.handlers import Context, segment_records
from tests.integration.test_big_messages import BUCKET, MIB, produce
from tests.integration.test_peek_replays import replay, rows

T = "quotes/sh"


def key_of(queue: int, queues: int = 2) -> str:
    """A message key that quotes/sh (2 queues) maps to ``queue``."""
    return next(k for k in (f"k{i}" for i in range(100)) if zlib.crc32(k.encode()) % queues == queue)


def big(api, feed: str, tag: str, n: int, queue: int, topic: str = T) -> list[str]:
    """Produce ``n`` 1 MiB messages ``<tag>0``… to ``topic``'s ``queue``, two a request (so one run of
    consecutive offsets); their ids."""
    msgs = [{"id": f"{tag}{i}", "body": tag[0] * (MIB - 1) + str(i % 10), "key": key_of(queue)} for i in range(n)]
    for i in range(0, n, 2):
        s, b = produce(api, feed, *msgs[i:i + 2], topic=topic)
        assert s == 200, b
        assert {r["queue"] for r in b["results"]} == {queue} or topic != T
    return [m["id"] for m in msgs]


def pages(api, route: str, **params) -> tuple[list[dict], list[int]]:
    """Every page from the start, following ``next``: (the messages, each page's size); each page a
    200 under Lambda's response limit."""
    out, sizes, cur = [], [], None
    for _ in range(50):
        s, p = api.call("GET", route, query={**params, **({"from": str(cur)} if cur is not None else {})})
        assert s == 200, str(p)[:300]
        assert len(json.dumps(json.dumps(p))) < LAMBDA_RESPONSE_LIMIT
        out += p["messages"]
        sizes.append(len(p["messages"]))
        cur = p["next"]
        if cur is None:
            return out, sizes
    raise AssertionError("paging did not end")


def test_group_pending_pages_a_run_of_big_messages_each_once(api, setup, aws):
    """One run of 8 consecutive offsets: the read of the run was cut at 5 by its own budget, the rest
    dropped, and ``next`` (from the plan alone) was null: messages 5-7 were shown on no page."""
    ids = big(api, setup["feed"], "a", 8, 0)
    got, sizes = pages(api, "/v1/groups/risk/pending", topic=T, limit="100")
    assert [m["id"] for m in got] == ids, sizes
    assert [m["body"][-1] for m in got] == [str(i) for i in range(8)]
    assert max(sizes) <= 5 and all(m["state"] == "new" for m in got)


def test_group_pending_of_big_messages_over_replays_and_queues_is_one_response(api, setup, aws):
    """A replay's 3 copies and 2 + 2 messages in the topic's two queues, 7 MiB: each source's read had
    its own budget and the page none, so the first page was over 6 MB (the gateway's 500)."""
    rs = rows(3)
    for r in rs:  # each copy's body in the lake bucket, named by its claim (as the copier keeps it)
        data = (r["id"] * MIB)[:MIB].encode()
        claim = {"key": claims.object_key("x", r["id"], claims.digest(data)), "size": MIB,
                 "sha256": claims.digest(data)}
        aws["s3"].put_object(Bucket=BUCKET, Key=claim["key"], Body=data)
        r["claim"] = json.dumps(claim)
    replay("rp_big", rs)
    own = big(api, setup["feed"], "q", 2, 0) + big(api, setup["feed"], "p", 2, 1)
    want = [(r["id"], "rp_big") for r in rs] + [(i, None) for i in own]
    for limit in ("100", "4"):
        got, sizes = pages(api, "/v1/groups/risk/pending", topic=T, limit=limit)
        assert [(m["id"], m.get("replay")) for m in got] == want, (limit, sizes)
        assert all(len(m["body"]) == MIB for m in got)


@pytest.mark.moto  # reads DynamoDB Streams
def test_subscription_pending_pages_big_messages_each_once(api, setup, aws, fanout_handler):
    s, sub = api.call("POST", "/v1/subscriptions", {"subscriber": "risk", "topic": "quotes"}, key=setup["risk"])
    assert s == 201, sub
    ids = big(api, setup["feed"], "s", 7, 0, topic="quotes")
    assert fanout_handler({"Records": segment_records(aws)}, Context()) == {"batchItemFailures": []}
    got, sizes = pages(api, f"/v1/subscriptions/{sub['id']}/pending", limit="100")
    assert [m["id"] for m in got] == ids, sizes
    assert [m["list_offset"] for m in got] == list(range(7)) and max(sizes) <= 5


def test_queue_peek_pages_big_messages_each_once(api, setup, aws):
    """The sibling route: one read, whose budget already cuts the page and sets ``next`` after the
    last message shown (passed before the pending routes' fix too)."""
    ids = big(api, setup["feed"], "b", 8, 1)
    got, sizes = pages(api, "/v1/topics/quotes%2Fsh/queues/1/messages", limit="100")
    assert [m["id"] for m in got] == ids and max(sizes) <= 5, sizes
