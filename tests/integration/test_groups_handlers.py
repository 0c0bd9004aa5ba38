"""Consumer-group membership handlers and GroupRepo on in-process moto (issue 4).

``setup`` (conftest): topics quotes (4 queues) and quotes/sh (2), producer feed, consumer group risk
granted ``quotes`` (so also ``quotes/sh``)."""
from __future__ import annotations

import json
import random
import threading

import pytest

from lakeq.consume import service
from lakeq.groups import service as group_service
from lakeq.store import groups as group_store
from lakeq.store.models import GroupModel, QueueModel
from tests.handlers import sample

QUOTES = [("quotes", i) for i in range(4)] + [("quotes/sh", i) for i in range(2)]


def wire(qs):
    return [{"topic": t, "queue": i} for t, i in sorted(qs)]


def unwire(items):
    return {(x["topic"], x["queue"]) for x in items}




def item(group="risk"):
    try:
        m = GroupModel.get(group, consistent_read=True)
    except GroupModel.DoesNotExist:
        return None
    return (int(m.version), m.state, m.subscriptions)


def join(api, key, body, group="risk"):
    return api.call("POST", f"/v1/groups/{group}/members", body, key=key)


def hb(api, key, mid, gen, owned=None, group="risk"):
    b = {"generation": gen}
    if owned is not None:
        b["owned"] = owned
    return api.call("POST", f"/v1/groups/{group}/members/{mid}/heartbeat", b, key=key)


def sync(api, key, mid, gen, group="risk"):
    return api.call("POST", f"/v1/groups/{group}/members/{mid}/sync", {"generation": gen}, key=key)


def describe(api, key="local-admin-key", group="risk"):
    return api.call("GET", f"/v1/groups/{group}", key=key)


# ------------------------------------------------------------------------------------ samples
def test_sample_events(api, setup, clock):
    s, b = api.invoke(sample("groups_describe.json"))
    assert (s, b["generation"], b["members"]) == (200, 0, [])
    s, b = api.invoke(sample("groups_join.json"))
    assert s == 200 and b["member_id"] == "m1" and b["generation"] == 1 and b["state"] == "awaiting_sync"
    assert b["session_timeout_ms"] == 45000 and b["heartbeat_interval_ms"] == 15000
    s, b = api.invoke(sample("groups_heartbeat.json"))
    assert (s, b["action"], b["generation"]) == (200, "sync", 1)
    s, b = api.invoke(sample("groups_sync.json"))
    assert s == 200 and unwire(b["assignment"]) == set(QUOTES)  # quotes covers its child quotes/sh
    s, b = api.invoke(sample("topics_grow.json"))
    assert (s, b) == (200, {"name": "quotes/sh", "queues": 3, "parent": "quotes"})
    s, b = api.invoke(sample("groups_describe.json"))
    assert s == 200 and b["generation"] == 2  # the new queue count rebalanced the group
    assert unwire(b["members"][0]["assignment"]) == set(QUOTES) | {("quotes/sh", 2)}
    s, b = api.invoke(sample("groups_leave.json"))
    assert (s, b) == (204, "")
    s, b = api.invoke(sample("groups_describe.json"))
    assert (b["generation"], b["members"]) == (3, [])


# ---------------------------------------------------------------------------------- the loop
def test_member_loop_join_heartbeat_sync_leave(api, setup, clock):
    k = setup["risk"]
    s, a = join(api, k, {"topics": ["quotes"], "session_timeout_ms": 10_000})
    assert s == 200 and a["generation"] == 1 and a["heartbeat_interval_ms"] == 3333
    ma = a["member_id"]
    s, r = sync(api, k, ma, 1)
    assert s == 200 and unwire(r["assignment"]) == set(QUOTES)
    clock.t += 100
    assert hb(api, k, ma, 1, r["assignment"])[1]["action"] == "none"

    s, b = join(api, k, {"member_id": "mb", "topics": ["quotes"]})
    assert (s, b["member_id"], b["generation"]) == (200, "mb", 2)
    s, h = hb(api, k, ma, 1, r["assignment"])
    assert (h["action"], h["generation"]) == ("rejoin", 2)
    # mb syncs before ma released anything: nothing handed over yet
    s, rb = sync(api, k, "mb", 2)
    assert rb["assignment"] == []
    s, a2 = join(api, k, {"member_id": ma, "topics": ["quotes"], "owned": r["assignment"]})
    assert (s, a2["generation"], a2["state"]) == (200, 2, "awaiting_sync")
    s, ra = sync(api, k, ma, 2)
    assert len(ra["assignment"]) == 3
    assert hb(api, k, "mb", 2, [])[1]["action"] == "sync"  # ma released: mb is woken
    s, rb = sync(api, k, "mb", 2)
    assert len(rb["assignment"]) == 3
    assert unwire(ra["assignment"]) | unwire(rb["assignment"]) == set(QUOTES)
    assert not unwire(ra["assignment"]) & unwire(rb["assignment"])

    s, d = describe(api, k)
    assert s == 200 and d["group"] == "risk" and d["assignor"] == "sticky" and d["generation"] == 2
    assert {m["member_id"]: m["state"] for m in d["members"]} == {ma: "stable", "mb": "stable"}
    assert all(set(m) >= {"member_id", "state", "assignment", "last_heartbeat"} for m in d["members"])

    assert api.call("DELETE", f"/v1/groups/risk/members/{ma}", key=k) == (204, "")
    s, h = hb(api, k, "mb", 2, rb["assignment"])
    assert (h["generation"], h["action"]) == (3, "rejoin")  # its assignment grows
    s, b = join(api, k, {"member_id": "mb", "topics": ["quotes"], "owned": rb["assignment"]})
    assert (s, b["generation"]) == (200, 3)
    s, rb = sync(api, k, "mb", 3)
    assert unwire(rb["assignment"]) == set(QUOTES)


def test_zombie_is_fenced_and_unknown_member_is_404(api, setup, clock):
    k = setup["risk"]
    join(api, k, {"member_id": "m1", "topics": ["quotes"]})
    sync(api, k, "m1", 1)
    join(api, k, {"member_id": "m2", "topics": ["quotes"]})
    assert hb(api, k, "m1", 1)[1]["generation"] == 2  # m1 has now received generation 2
    before = item()
    for s, b in [hb(api, k, "m1", 1), sync(api, k, "m1", 1)]:
        assert (s, b["error"]["code"]) == (409, "stale_generation")
    assert item()[1] == before[1]  # nothing changed (state identical)
    for s, b in [hb(api, k, "nobody", 2), sync(api, k, "nobody", 2),
                 api.call("DELETE", "/v1/groups/risk/members/nobody", key=k),
                 api.call("GET", "/v1/topics/quotes/messages", query={"group": "risk", "member_id": "nobody"}, key=k)]:
        assert (s, b["error"]["code"]) == (404, "unknown_member")
    s, b = hb(api, k, "m1", 7)  # newer than the group's generation
    assert (s, b["error"]["code"]) == (400, "bad_request")


def test_auth_and_existence_checks(api, setup, clock):
    k = setup["risk"]
    assert api.call("POST", "/v1/topics", {"name": "other", "queues": 1})[0] == 201
    s, c = api.call("POST", "/v1/clients", {"name": "audit", "role": "consumer", "topics": ["other"]})
    other = c["api_key"]
    body = {"topics": ["quotes"]}
    assert join(api, None, body)[0] == 401
    assert join(api, "wrong", body)[0] == 401
    assert join(api, k, body, group="nogroup")[1]["error"]["code"] == "not_found"
    assert join(api, k, body, group="feed")[0] == 404  # a producer is no consumer group
    assert join(api, k, {"topics": ["missing"]})[0] == 404
    assert join(api, k, {"topics": ["other"]})[0] == 403  # not granted to risk
    assert join(api, other, body)[0] == 403  # another group's key
    assert describe(api, other)[0] == 403
    assert describe(api, k, group="nogroup")[0] == 404
    assert describe(api, None)[0] == 401
    join(api, k, {"member_id": "m1", "topics": ["quotes"]})
    assert hb(api, other, "m1", 1)[0] == 403
    assert hb(api, other, "zz", 1)[1]["error"]["code"] == "unknown_member"  # 404 before 403
    assert sync(api, other, "m1", 1)[0] == 403
    assert api.call("DELETE", "/v1/groups/risk/members/m1", key=other)[0] == 403
    assert hb(api, None, "m1", 1)[0] == 401
    # the admin key may act for any group
    assert hb(api, "local-admin-key", "m1", 1)[0] == 200


BAD_JOINS = [
    None, "[]", "{", {"topics": []}, {"topics": "quotes"}, {"topics": ["a b"]}, {"topics": [1]},
    {"topics": ["quotes"], "session_timeout_ms": 999}, {"topics": ["quotes"], "session_timeout_ms": 300_001},
    {"topics": ["quotes"], "session_timeout_ms": "1000"}, {"topics": ["quotes"], "session_timeout_ms": True},
    {"topics": ["quotes"], "member_id": "a b"}, {"topics": ["quotes"], "member_id": 5},
    {"topics": ["quotes"], "owned": "x"}, {"topics": ["quotes"], "owned": [{"topic": "quotes"}]},
    {"topics": ["quotes"], "owned": [{"topic": "quotes", "queue": -1}]},
]


def _send(api, method, path, body, key):
    if isinstance(body, str) or body is None:
        return api.call(method, path, raw_body=body, key=key)
    return api.call(method, path, body, key=key)


def test_bad_input_is_400_and_changes_nothing(api, setup, clock):
    k = setup["risk"]
    join(api, k, {"member_id": "m1", "topics": ["quotes"]})
    before = item()
    for b in BAD_JOINS:
        s, out = _send(api, "POST", "/v1/groups/risk/members", b, k)
        assert (s, out["error"]["code"]) == (400, "bad_request"), b
    for route in ("heartbeat", "sync"):
        for b in [None, "{", "[1]", {}, {"generation": -1}, {"generation": "1"}, {"generation": 1.5},
                  {"generation": True}] + ([{"generation": 1, "owned": 3}] if route == "heartbeat" else []):
            s, out = _send(api, "POST", f"/v1/groups/risk/members/m1/{route}", b, k)
            assert (s, out["error"]["code"]) == (400, "bad_request"), (route, b)
    for path in ["/v1/groups/a%20b/members/m1/heartbeat", "/v1/groups/risk/members/a%20b/heartbeat"]:
        assert api.call("POST", path, {"generation": 1}, key=k)[0] == 400
    assert api.call("DELETE", "/v1/groups/risk/members/a%20b", key=k)[0] == 400
    assert api.call("GET", "/v1/groups/a%20b", key=k)[0] == 400
    # bad syntax wins over a missing group (400 before 404)
    assert join(api, k, {"topics": []}, group="nogroup")[0] == 400
    assert item() == before


def test_expiry_on_request_and_by_sweep(api, setup, clock):
    k = setup["risk"]
    join(api, k, {"member_id": "m1", "topics": ["quotes"], "session_timeout_ms": 1000})
    sync(api, k, "m1", 1)
    join(api, k, {"member_id": "m2", "topics": ["quotes"], "session_timeout_ms": 60_000})
    clock.t += 1500
    # a pull by m1 is no sign of life, and m1 is gone by now
    s, b = api.call("GET", "/v1/topics/quotes/messages", query={"group": "risk", "member_id": "m1"}, key=k)
    assert (s, b["error"]["code"]) == (404, "unknown_member")
    s, b = hb(api, k, "m1", 2)
    assert (s, b["error"]["code"]) == (404, "unknown_member")
    d = describe(api, k)[1]
    assert [m["member_id"] for m in d["members"]] == ["m2"] and d["generation"] == 3
    # the sweep: m2 goes silent past its timeout; no request reaches the group
    clock.t += 61_000
    stats = group_store.sweep()
    assert stats == {"groups": 1, "expired": 1, "changed": 1}
    st = group_store.GroupRepo.load("risk")
    assert st.members == {} and st.generation == 4
    assert group_store.sweep()["changed"] == 0


def test_sweep_picks_up_new_child_topics(api, setup, clock):
    k = setup["risk"]
    join(api, k, {"member_id": "m1", "topics": ["quotes"]})
    assert api.call("POST", "/v1/topics", {"name": "quotes/sz", "queues": 1})[0] == 201
    assert group_store.sweep()["changed"] == 1
    st = group_store.GroupRepo.load("risk")
    assert st.members["m1"].topics == ["quotes", "quotes/sh", "quotes/sz"]
    assert ("quotes/sz", 0) in st.members["m1"].target


def test_member_pull_serves_only_assigned_queues(api, setup, clock):
    k = setup["risk"]
    msgs = [{"body": str(i), "key": f"k{i}"} for i in range(40)]
    assert api.call("POST", "/v1/topics/quotes/messages", {"producer": "feed", "messages": msgs})[0] == 200
    join(api, k, {"member_id": "m1", "topics": ["quotes"]})
    join(api, k, {"member_id": "m2", "topics": ["quotes"]})
    a1 = unwire(sync(api, k, "m1", 2)[1]["assignment"])
    a2 = unwire(sync(api, k, "m2", 2)[1]["assignment"])
    assert a1 and a2 and not a1 & a2
    for mid, mine in [("m1", a1), ("m2", a2)]:
        seen = set()
        for _ in range(6):
            s, b = api.call("GET", "/v1/topics/quotes/messages", query={"group": "risk", "member_id": mid}, key=k)
            assert s == 200
            seen |= {(m["topic"], m["queue"]) for m in b["messages"]}
        assert seen and seen <= mine
    before = item()
    api.call("GET", "/v1/topics/quotes/messages", query={"group": "risk", "member_id": "m1"}, key=k)
    assert item() == before  # a pull writes nothing to the group


def test_a_members_pull_reads_only_its_queues_items(api, setup, clock):
    """A member's poll reads the queue items of its assigned queues of the topic, not every queue
    item of the topic (issue 16: a 64-queue topic over 16 members read 64 items a poll for the 4 it
    may serve); a pull without ``member_id`` still reads all of them. Seen failing before the change
    (the BatchGetItem asked for all 4 keys)."""
    from tests.crash import CountCalls

    k = setup["risk"]
    join(api, k, {"member_id": "m1", "topics": ["quotes"]})
    join(api, k, {"member_id": "m2", "topics": ["quotes"]})
    mine = {q for t, q in unwire(sync(api, k, "m1", 2)[1]["assignment"]) if t == "quotes"}
    sync(api, k, "m2", 2)
    assert mine and mine != set(range(4))

    def queue_keys(query):
        with CountCalls() as calls:
            s, b = api.call("GET", "/v1/topics/quotes/messages", query=query, key=k)
        assert s == 200, b
        return sorted(int(key["pq"]["S"].rsplit("#", 1)[1]) for x in calls.calls if x.operation == "BatchGetItem"
                      for t, req in x.params["RequestItems"].items() if t.endswith("queues") for key in req["Keys"]
                      if not key["pq"]["S"].endswith("#w"))  # (not the topic's change marker, issue 33)
    assert queue_keys({"group": "risk", "member_id": "m1"}) == sorted(mine)
    assert queue_keys({"group": "risk"}) == [0, 1, 2, 3]
    # served as before: each member gets what is in its queues, nothing of the other's
    msgs = [{"body": str(i), "key": f"k{i}"} for i in range(20)]
    assert api.call("POST", "/v1/topics/quotes/messages", {"producer": "feed", "messages": msgs})[0] == 200
    s, b = api.call("GET", "/v1/topics/quotes/messages", query={"group": "risk", "member_id": "m1"}, key=k)
    assert b["messages"] and {m["queue"] for m in b["messages"]} <= mine


def test_members_under_random_mixes_each_read_and_serve_their_own_queues_only(api, clock):
    """Seeded mixes unlike the friendly one: 1-8 queues, 1-5 members (some with no queue at all),
    keys skewed onto one queue, members pulling in a random order with the ack riding on the next
    pull. Every message is delivered exactly once over the members, each by the member that owns its
    queue, and no member's poll reads another member's queue items."""
    from tests.crash import CountCalls

    for seed in (3, 11, 29):
        rnd = random.Random(seed)
        topic, group = f"mix{seed}", f"g{seed}"
        n_queues, n_members = rnd.randint(1, 8), rnd.randint(1, 5)
        assert api.call("POST", "/v1/topics", {"name": topic, "queues": n_queues})[0] == 201
        key = api.call("POST", "/v1/clients", {"name": group, "role": "consumer", "topics": [topic]})[1]["api_key"]
        assert api.call("POST", "/v1/clients", {"name": f"p{seed}", "role": "producer", "topics": [topic]})[0] == 201
        members = [f"m{i}" for i in range(n_members)]
        for m in members:
            assert join(api, key, {"member_id": m, "topics": [topic]}, group=group)[0] == 200
        gen = describe(api, key, group=group)[1]["generation"]
        owned = {m: {q for t, q in unwire(sync(api, key, m, gen, group=group)[1]["assignment"]) if t == topic}
                 for m in members}
        assert set().union(*owned.values()) == set(range(n_queues))
        hot = f"hot{seed}"
        msgs = [{"body": f"{seed}-{i}", "key": hot if rnd.random() < 0.7 else f"k{rnd.randint(0, 50)}"}
                for i in range(rnd.randint(20, 60))]
        for i in range(0, len(msgs), 10):
            assert api.call("POST", f"/v1/topics/{topic}/messages",
                            {"producer": f"p{seed}", "messages": msgs[i:i + 10]})[0] == 200
        # until every member came back empty since the last delivery (so each one's last batch was
        # acknowledged by its empty pull)
        delivered, receipts, quiet = [], {m: None for m in members}, set()
        while quiet != set(members):
            m = rnd.choice(members)
            q = {"group": group, "member_id": m, "max": rnd.randint(1, 7)}
            if receipts[m] is not None:
                q["ack"] = receipts[m]
            with CountCalls() as calls:
                s, b = api.call("GET", f"/v1/topics/{topic}/messages", query=q, key=key)
            assert s == 200, b
            read = {int(k["pq"]["S"].rsplit("#", 1)[1]) for x in calls.calls if x.operation == "BatchGetItem"
                    for t, req in x.params["RequestItems"].items() if t.endswith("queues") for k in req["Keys"]
                    if not k["pq"]["S"].endswith("#w")}  # (not the topic's change marker, issue 33)
            assert read <= owned[m], (seed, m, read, owned[m])
            assert {x["queue"] for x in b["messages"]} <= owned[m]
            delivered += [x["body"] for x in b["messages"]]
            receipts[m] = b["receipt"]
            quiet = quiet | {m} if not b["messages"] else set()
        assert sorted(delivered) == sorted(x["body"] for x in msgs), seed


def test_patch_topic(api, setup, clock):
    k = setup["risk"]
    for b, code in [({"queues": 4}, 400), ({"queues": 2}, 400), ({"queues": 65}, 400), ({"queues": "5"}, 400),
                    ({}, 400), (None, 400)]:
        s, out = _send(api, "PATCH", "/v1/topics/quotes", b, "local-admin-key")
        assert s == code, b
    assert api.call("PATCH", "/v1/topics/nope", {"queues": 5})[0] == 404
    assert api.call("PATCH", "/v1/topics/quotes", {"queues": 5}, key=k)[0] == 403
    assert api.call("PATCH", "/v1/topics/quotes", {"queues": 5}, key=None)[0] == 401
    assert api.call("PATCH", "/v1/topics/a%20b", {"queues": 5})[0] == 400
    assert api.call("GET", "/v1/topics")[1]["topics"][0]["queues"] == 4  # nothing changed
    join(api, k, {"member_id": "m1", "topics": ["quotes"]})
    sync(api, k, "m1", 1)
    s, b = api.call("PATCH", "/v1/topics/quotes", {"queues": 6})
    assert (s, b) == (200, {"name": "quotes", "queues": 6, "parent": None})
    assert sorted(int(q.queue) for q in QueueModel.scan() if q.topic == "quotes") == list(range(6))
    assert api.call("PATCH", "/v1/topics/quotes", {"queues": 6})[0] == 400  # no longer growth
    s, h = hb(api, k, "m1", 1)
    assert (h["generation"], h["action"]) == (2, "rejoin")  # the new count rebalanced the group
    assert join(api, k, {"member_id": "m1", "topics": ["quotes"], "owned": wire(QUOTES)})[1]["generation"] == 2
    got = unwire(sync(api, k, "m1", 2)[1]["assignment"])
    assert got == set(QUOTES) | {("quotes", 4), ("quotes", 5)}
    # produce reaches the new queues
    s, out = api.call("POST", "/v1/topics/quotes/messages",
                      {"producer": "feed", "messages": [{"body": "x", "key": f"k{i}"} for i in range(30)]})
    assert {r["queue"] for r in out["results"]} & {4, 5}


def test_patch_topic_unknown_field_is_400_and_changes_nothing(api, setup):
    """An unknown field was ignored: ``{"queues": 6, "name": "other"}`` grew ``quotes`` (200)."""
    for body in ({"queues": 6, "name": "other"}, {"queues": 6, "parent": None}):
        s, out = api.call("PATCH", "/v1/topics/quotes", body)
        assert s == 400, (body, out)
        assert out["error"]["code"] == "bad_request" and next(iter(set(body) - {"queues"})) in out["error"]["message"]
    assert sorted(int(q.queue) for q in QueueModel.scan() if q.topic == "quotes") == list(range(4))
    assert [t["queues"] for t in api.call("GET", "/v1/topics")[1]["topics"] if t["name"] == "quotes"] == [4]


# -------------------------------------------------------------------------------- concurrency
def _history(aws):
    """Every image the GroupsTable stream recorded, in order."""
    ddb, streams = aws["dynamodb"], aws["dynamodbstreams"]
    arn = ddb.describe_table(TableName=GroupModel.Meta.table_name)["Table"]["LatestStreamArn"]
    out = []
    for sh in streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]:
        it = streams.get_shard_iterator(StreamArn=arn, ShardId=sh["ShardId"],
                                        ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
        while it:
            r = streams.get_records(ShardIterator=it, Limit=1000)
            out += [rec["dynamodb"]["NewImage"] for rec in r["Records"] if "NewImage" in rec["dynamodb"]]
            if not r["Records"]:
                break
            it = r.get("NextShardIterator")
    return out


def test_two_joins_that_read_the_header_at_once_both_land(aws, api, setup, clock, monkeypatch):
    """A group's generations are a compare-and-set too (the header saved conditionally on the version
    read, pynamodb's VersionAttribute), made to race for certain (flake35): two joins both read the
    header before either writes. One save wins, the other's version condition fails (WriteLost, seen
    exactly once), it reads again and joins on the winner's state: both members in, one generation
    per join."""
    from tests.concurrency import FirstCallsMeet
    p = service.Principal(admin=True)
    assert join(api, setup["risk"], {"member_id": "base", "topics": ["quotes"]})[0] == 200
    meet = FirstCallsMeet(group_store.GroupRepo.get)  # each join's first header read waits for the other's
    monkeypatch.setattr(group_store.GroupRepo, "get", meet)
    real_write, lost = group_store.GroupRepo._write_header, []

    def write_header(*args):
        try:
            return real_write(*args)
        except group_store.WriteLost:
            lost.append(True)
            raise
    monkeypatch.setattr(group_store.GroupRepo, "_write_header", write_header)
    responses, errors = {}, []

    def member(mid):
        try:
            responses[mid] = group_service.join(p, "risk", json.dumps({"member_id": mid, "topics": ["quotes"]}))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(repr(e))
    threads = [threading.Thread(target=member, args=(mid,)) for mid in ("m1", "m2")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not meet.broken, "the two joins did not read at once"
    assert errors == [] and lost == [True], (errors, lost)
    monkeypatch.setattr(group_store.GroupRepo, "get", meet.real)
    st = group_store.GroupRepo.load("risk")
    assert set(st.members) == {"base", "m1", "m2"} and st.generation == 3, st
    assert sorted(r["generation"] for r in responses.values()) == [2, 3], responses


@pytest.mark.moto  # reads DynamoDB Streams
def test_concurrent_joins_and_heartbeats_lose_nothing(aws, api, setup, clock, monkeypatch):
    monkeypatch.setattr(group_store, "BACKOFF_BASE_S", 0.001)
    monkeypatch.setattr(group_store, "ATTEMPTS", 200)
    p = service.Principal(admin=True)
    n = 6
    join(api, setup["risk"], {"member_id": "base", "topics": ["quotes"]})
    errors, responses = [], {}
    barrier = threading.Barrier(n + 1)

    def member(i):
        try:
            barrier.wait()
            r = group_service.join(p, "risk", json.dumps({"member_id": f"m{i}", "topics": ["quotes"]}))
            responses[f"m{i}"] = r
            gen = r["generation"]
            for _ in range(3):
                gen = group_service.heartbeat(p, "risk", f"m{i}", json.dumps({"generation": gen}))["generation"]
        except Exception as e:  # pragma: no cover - reported below
            errors.append(repr(e))

    def beater():
        barrier.wait()
        for _ in range(6):
            try:
                st = group_store.GroupRepo.load("risk")
                group_service.heartbeat(p, "risk", "base", json.dumps({"generation": st.members["base"].generation}))
            except Exception as e:  # pragma: no cover
                errors.append(repr(e))

    threads = [threading.Thread(target=member, args=(i,)) for i in range(n)] + [threading.Thread(target=beater)]
    random.shuffle(threads)
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    st = group_store.GroupRepo.load("risk")
    assert set(st.members) == {"base"} | {f"m{i}" for i in range(n)}  # no lost join
    assert st.generation == n + 1  # one rebalance per join, none lost or doubled
    assert sorted(r["generation"] for r in responses.values()) == list(range(2, n + 2))
    # the stream: versions advance one by one, and each generation has exactly one assignment
    hist = _history(aws)
    versions = [int(h["version"]["N"]) for h in hist]
    assert versions == list(range(1, len(versions) + 1))
    per_gen: dict[int, set] = {}
    for h in hist:
        s = json.loads(h["state"]["S"])
        targets = json.dumps({m["member_id"]: m["target"] for m in s["members"]}, sort_keys=True)
        per_gen.setdefault(s["generation"], set()).add(targets)
    assert all(len(v) == 1 for v in per_gen.values()), per_gen
    assert set(per_gen) == set(range(1, n + 2))


def test_a_group_whose_sweep_raises_does_not_stop_the_others(api, setup, clock, monkeypatch):
    """Two groups with a silent member each; the sweep of the first in the Scan's order raises (a
    store error): it is logged and counted in ``errors``, and the other group's member still
    expires in the same sweep."""
    s, c = api.call("POST", "/v1/clients", {"name": "audit", "role": "consumer", "topics": ["quotes"]})
    assert s == 201, c
    keys = {"risk": setup["risk"], "audit": c["api_key"]}
    for group, k in keys.items():
        join(api, k, {"member_id": "m1", "topics": ["quotes"], "session_timeout_ms": 1000}, group=group)
    clock.t += 1500
    real, failing = group_store.GroupRepo.read, []

    def read(group, *a, **k):
        if not failing:
            failing.append(group)
        if group == failing[0]:
            raise RuntimeError("the store refused")
        return real(group, *a, **k)
    monkeypatch.setattr(group_store.GroupRepo, "read", staticmethod(read))
    stats = group_store.sweep()
    monkeypatch.setattr(group_store.GroupRepo, "read", staticmethod(real))
    assert stats == {"groups": 2, "expired": 1, "changed": 1, "errors": 1}
    other = ({"risk", "audit"} - set(failing)).pop()
    assert group_store.GroupRepo.load(other).members == {}
    assert set(group_store.GroupRepo.load(failing[0]).members) == {"m1"}
    assert group_store.sweep() == {"groups": 2, "expired": 1, "changed": 1}
