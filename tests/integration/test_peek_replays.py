"""The group's ``pending`` peek shows the copies a live replay into that group is waiting to serve
(issue 18, gap left by 18.1/18.3; lakeq.peek.service.group_pending, lakeq.log.peek_plan).

On moto, through the HTTP handlers: the copies come first (the order a pull serves them), each
marked ``replay`` (the id) and ``list_offset`` with its source ``topic``/``queue``/``offset``; paging
with a cursor ``~r.<replay id>:<list offset>`` crosses from the list to the topic's queues without
a gap or a repeat (every limit); a drained list shows nothing (and its cursor still pages on); another
group of the topic sees none of it; a bad cursor is a 400 with API.md's error shape; nothing is written.
"""
from __future__ import annotations

import json
from collections import Counter

import pytest

from lakeq.admin import auth as lq_auth
from lakeq.replay import group_target as gt
from lakeq.replay.copier import Copy
from lakeq.replay.rules import copy_id
from tests.crash import CountCalls
from tests.integration.test_peek import snapshot

T = "quotes/sh"
PULL = "/v1/topics/quotes%2Fsh/messages"


def rows(n: int) -> list[dict]:
    """Manifest rows (as the selection job writes them, plus the copier's ``pos``): queue 0's then
    queue 1's, source offsets 100 + i."""
    out = [{"queue": i % 2, "offset": 100 + i, "id": f"r{i}", "key": f"k{i % 2}", "tags": [],
            "properties": json.dumps({"i": i}), "produced_at": 1_700_000_000_000 + i, "body": f"rb{i}",
            "claim": None} for i in range(n)]
    out.sort(key=lambda r: (r["queue"], r["offset"]))
    return [{**r, "pos": p} for p, r in enumerate(out)]


def replay(rid: str, rs: list[dict], group: str = "risk") -> None:
    """What the copier does for a ``{"group"}`` target: begin, then the copies sunk."""
    gt.begin(rid, T, group)
    gt.sink(rid, T, group)([Copy(copy_id(T, r["queue"], r["offset"]), r) for r in rs])
    lq_auth.clear_caches()  # (as 5 s passing would: the group's item is cached)


def pending(api, key=None, group="risk", **params):
    return api.call("GET", f"/v1/groups/{group}/pending", query={"topic": T, **params},
                    **({"key": key} if key else {}))


def pages(api, limit: int, **params) -> list[dict]:
    """Every page's messages from the start, following ``next``."""
    out, cur = [], None
    for _ in range(100):
        s, p = pending(api, limit=limit, **({"from": cur} if cur else {}), **params)
        assert s == 200, p
        assert len(p["messages"]) <= limit
        out += p["messages"]
        cur = p["next"]
        if cur is None:
            return out
    raise AssertionError("paging did not end")


def ops(calls) -> Counter:
    return Counter(c.operation for c in calls)


def where(m: dict) -> tuple:
    return (m.get("replay"), m.get("list_offset"), m["queue"], m["offset"])


@pytest.fixture
def two(api, setup):
    """``setup`` plus consumer ``audit`` (granted quotes too) and 3 messages t0..t2 in quotes/sh."""
    s, audit = api.call("POST", "/v1/clients", {"name": "audit", "role": "consumer", "topics": ["quotes"]})
    assert s == 201
    s, b = api.call("POST", PULL, {"producer": "feed", "messages": [{"id": f"t{i}", "body": f"t{i}", "key": "k"}
                                                                     for i in range(3)]}, key=setup["feed"])
    assert s == 200, b
    return {**setup, "audit": audit["api_key"], "queue": b["results"][0]["queue"]}


def test_pending_shows_the_replay_copies_first_marked_and_writes_nothing(api, two, clock):
    rs = rows(4)
    replay("rp_v1", rs)
    s, b = api.call("GET", PULL, query={"group": "risk", "max": 1}, key=two["risk"])  # one copy locked
    assert s == 200 and b["receipt"].split(":")[1] == "~r.rp_v1"
    before = snapshot()
    s, p = pending(api, two["risk"])
    assert s == 200, p
    assert p["backlog"] == 3  # the topic's queues, as GET /v1/groups/{group}/offsets counts them
    assert p["replays"] == [{"id": "rp_v1", "backlog": 4}]
    copies, own = p["messages"][:4], p["messages"][4:]
    assert [(m["id"], m["topic"], m["queue"], m["offset"], m["body"], m["replay"], m["list_offset"])
            for m in copies] == [(r["id"], T, r["queue"], r["offset"], r["body"], "rp_v1", r["pos"]) for r in rs]
    until = clock.t + 1000
    assert [(m["state"], m["deliveries"], m["locked_until"]) for m in copies] == [
        ("locked", 1, until), ("new", 0, 0), ("new", 0, 0), ("new", 0, 0)]
    assert [m["id"] for m in own] == ["t0", "t1", "t2"]
    assert all("replay" not in m and "list_offset" not in m for m in own)  # the topic's own: as before
    assert list(own[0]) == ["id", "topic", "queue", "offset", "body", "key", "tags", "properties", "produced_at",
                            "state", "deliveries", "locked_until"]
    assert p["next"] is None
    assert snapshot() == before
    # once the first is settled, the next pull serves what the peek showed next: the list's second copy
    assert api.call("POST", "/v1/acks", {"group": "risk", "receipt": b["receipt"]}, key=two["risk"])[0] == 200
    s, b = api.call("GET", PULL, query={"group": "risk", "max": 1}, key=two["risk"])
    assert [m["id"] for m in b["messages"]] == [copies[1]["id"]] and b["messages"][0]["deliveries"] == 1


@pytest.mark.parametrize("limit", range(1, 10))
def test_paging_crosses_the_list_and_the_queues_without_gap_or_repeat(api, two, limit):
    replay("rp_b1", rows(3))
    replay("rp_b2", rows(2))
    whole = pages(api, 100)
    assert [m.get("replay") for m in whole] == ["rp_b1"] * 3 + ["rp_b2"] * 2 + [None] * 3
    assert [where(m) for m in pages(api, limit)] == [where(m) for m in whole]


def test_a_page_filled_exactly_by_the_list_points_at_the_queues(api, two):
    replay("rp_x1", rows(3))
    s, p = pending(api, limit=3)
    assert s == 200, p
    assert [m["replay"] for m in p["messages"]] == ["rp_x1"] * 3
    assert p["next"] == f"{two['queue']}:0"
    s, q = pending(api, limit=3, **{"from": p["next"]})
    assert [m["id"] for m in q["messages"]] == ["t0", "t1", "t2"] and q["next"] is None


def test_a_page_filled_by_one_queue_then_a_queue_with_delivered_messages(api, setup):
    """Not about replays: a page that queue 0 fills exactly, followed by queue 1 holding delivered
    unsettled messages, answered 500 (an IndexError in peek_plan.unsettled asked for 0 offsets)."""
    for key in ("d", "e", "k", "j", "x"):  # queue 0: d e; queue 1: k j x (crc32 % 2)
        s, b = api.call("POST", PULL, {"producer": "feed", "messages": [{"body": key, "key": key}]}, key=setup["feed"])
        assert s == 200, b
    for _ in range(3):  # each pull locks one queue: both delivered, nothing settled
        s, b = api.call("GET", PULL, query={"group": "risk", "max": 10, "wait_ms": 0}, key=setup["risk"])
        assert s == 200, b
    whole = pages(api, 100)
    first = [m for m in whole if m["queue"] == 0]
    assert first and len(first) < len(whole) and all(m["state"] == "locked" for m in whole)
    assert [where(m) for m in pages(api, len(first))] == [where(m) for m in whole]


def test_a_drained_list_shows_nothing_and_its_cursor_still_pages(api, two):
    replay("rp_d1", rows(3))
    s, b = api.call("GET", PULL, query={"group": "risk", "max": 10}, key=two["risk"])
    assert len(b["messages"]) == 3 and b["receipt"].split(":")[1] == "~r.rp_d1"
    s, p = pending(api, limit=2)
    assert [m.get("replay") for m in p["messages"]] == ["rp_d1", "rp_d1"] and p["next"] == "~r.rp_d1:2"
    assert api.call("POST", "/v1/acks", {"group": "risk", "receipt": b["receipt"]}, key=two["risk"])[0] == 200
    s, p = pending(api)
    assert s == 200 and p["replays"] == [{"id": "rp_d1", "backlog": 0}]
    assert [m["id"] for m in p["messages"]] == ["t0", "t1", "t2"]
    s, q = pending(api, **{"from": "~r.rp_d1:2"})  # a cursor taken before it drained
    assert s == 200 and [m["id"] for m in q["messages"]] == ["t0", "t1", "t2"]
    assert gt.end("rp_d1", T, "risk", cancelled=False) is True  # the marker goes
    lq_auth.clear_caches()
    s, p = pending(api, **{"from": "~r.rp_d1:2"})  # a cursor naming a replay that ended: pages on
    assert s == 200 and p["replays"] == [] and [m["id"] for m in p["messages"]] == ["t0", "t1", "t2"]


def test_another_group_sees_nothing_of_it(api, two):
    with CountCalls() as before:
        assert pending(api, two["audit"], group="audit")[0] == 200
        assert pending(api, two["risk"])[0] == 200
    replay("rp_o1", rows(3))
    with CountCalls() as audit_after:
        s, p = pending(api, two["audit"], group="audit")
    with CountCalls() as risk_after:
        assert pending(api, two["risk"])[0] == 200
    half = len(before.calls) // 2
    assert ops(audit_after.calls) == ops(before.calls[:half])  # no marker: not one call more
    extra = ops(risk_after.calls) - ops(before.calls[half:])  # the list's queue item, its record, its segments
    assert extra == Counter({"GetItem": 2, "Query": 1}), extra
    assert s == 200, p
    assert p["replays"] == [] and [m["id"] for m in p["messages"]] == ["t0", "t1", "t2"]
    assert all("replay" not in m for m in p["messages"])
    s, p = pending(api, two["audit"], group="audit", **{"from": "~r.rp_o1:0"})  # its cursor shows it nothing
    assert s == 200 and [m["id"] for m in p["messages"]] == ["t0", "t1", "t2"]
    s, p = pending(api, two["risk"], queue=str(two["queue"]))  # one topic queue asked for: the queue only
    assert s == 200 and [m["id"] for m in p["messages"]] == ["t0", "t1", "t2"]
    assert p["replays"] == [{"id": "rp_o1", "backlog": 3}]


def test_a_broadcasting_instance_sees_its_own_state_of_the_list(api, two, clock):
    s, bc = api.call("POST", "/v1/clients", {"name": "bc", "role": "consumer", "topics": ["quotes"],
                                             "mode": "broadcasting"})
    assert s == 201
    k = bc["api_key"]
    replay("rp_c1", rows(2), group="bc")
    s, b = api.call("GET", PULL, query={"group": "bc", "client_id": "i1", "max": 10}, key=k)
    assert [m["id"] for m in b["messages"]] == ["r0", "r1"]
    st = {cid: [(m.get("replay"), m["state"]) for m in pending(api, k, group="bc", client_id=cid)[1]["messages"]]
          for cid in ("i1", "i2")}
    assert st["i1"][:2] == [("rp_c1", "locked")] * 2 and st["i2"][:2] == [("rp_c1", "new")] * 2
    assert pending(api, k, group="bc")[0] == 400  # client_id is required, as before


@pytest.mark.parametrize("cursor", ["~r.:1", "~r.rp_v1", "~r.rp_v1:", "~r.rp_v1:-1", "~r.rp_v1:x", "~r.a b:1",
                                    "~r.rp:v1:1", "~x.rp_v1:1", "~r.rp_v1:1234567890123456", ":1", "1:"])
def test_a_bad_cursor_is_a_400_and_changes_nothing(api, two, cursor):
    replay("rp_v1", rows(2))
    before = snapshot()
    s, b = pending(api, two["risk"], **{"from": cursor})
    assert s == 400, b
    assert set(b) == {"error"} and set(b["error"]) == {"code", "message"} and b["error"]["code"] == "bad_request"
    assert snapshot() == before
