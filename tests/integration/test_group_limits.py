"""Consumer groups at scale (issue 8, defect 7): no DynamoDB item may exceed 400 KB, a heartbeat that
changes nothing writes only a small item, and the documented caps answer a clear 4xx.

Item sizes are measured on every PutItem / UpdateItem / TransactWriteItems / DeleteItem the groups
code makes (an :mod:`infra.local.interceptor` hook, computed as DynamoDB sizes items: attribute
names + values), so these tests fail on moto, which enforces no item limit, exactly where AWS would.
"""
from __future__ import annotations

import pytest

from infra.local import interceptor
from lakeq.groups import service as group_service
from lakeq.lake import archive as lake
from lakeq.rebalance import state as g
from lakeq.store import groups as group_store
from lakeq.store.models import GroupMemberModel, GroupModel, TopicModel

ITEM_LIMIT = 400 * 1024
TOPIC_LEN = 180  # long topic names (the limit is 200 characters per level... and in all)


def _value_size(v: dict) -> int:
    (t, x), = v.items()
    if t == "S":
        return len(x.encode("utf-8"))
    if t == "N":
        return (len(str(x).lstrip("-").replace(".", "").lstrip("0")) + 1) // 2 + 1
    if t == "B":
        return len(x)
    if t in ("SS", "NS", "BS"):
        return sum(_value_size({t[0]: e}) for e in x)
    if t == "BOOL" or t == "NULL":
        return 1
    if t == "L":
        return 3 + sum(1 + _value_size(e) for e in x)
    if t == "M":
        return 3 + sum(len(k.encode()) + 1 + _value_size(e) for k, e in x.items())
    raise AssertionError(t)


def item_size(item: dict) -> int:
    """DynamoDB's item size: UTF-8 attribute names + values (numbers ~1 byte per 2 digits + 1)."""
    return sum(len(k.encode("utf-8")) + _value_size(v) for k, v in item.items())


class Sizes:
    """Hook: records (operation, table, item size, key) of every write; UpdateItem counts its values
    (a lower bound of the item it writes, enough to see an overflowing attribute)."""

    def __init__(self):
        self.writes: list[tuple[str, str, int]] = []
        self.ops: list[str] = []

    def before(self, call):
        if call.service != "dynamodb":
            return
        p = call.params
        self.ops.append(call.operation)
        if call.operation == "PutItem":
            self.writes.append(("PutItem", p["TableName"], item_size(p["Item"])))
        elif call.operation == "UpdateItem":
            vals = p.get("ExpressionAttributeValues") or {}
            self.writes.append(("UpdateItem", p["TableName"], item_size({**p["Key"], **vals})))
        elif call.operation == "TransactWriteItems":
            for it in p["TransactItems"]:
                if "Put" in it:
                    self.writes.append(("TransactPut", it["Put"]["TableName"], item_size(it["Put"]["Item"])))
            assert len(p["TransactItems"]) <= 100

    def after(self, call, response):
        return response

    def max(self) -> int:
        return max((s for _, _, s in self.writes), default=0)

    def clear(self):
        self.writes.clear()
        self.ops.clear()


@pytest.fixture
def sizes():
    h = Sizes()
    with interceptor.hooked(h):
        yield h




def _topic(api, name, queues=1):
    s, b = api.call("POST", "/v1/topics", {"name": name, "queues": queues})
    assert s == 201, b


def _topics(names, queues=1):
    """Many topics at once, written directly (moto's TransactWriteItems, which POST /v1/topics uses,
    copies every table: hundreds of topics that way take minutes). The groups code reads only
    TopicsTable."""
    with TopicModel.batch_write() as b:
        for n in names:
            b.save(TopicModel(n, queues=queues, parent=n.rpartition("/")[0] or None, created_at=1))


def _consumer(api, name, topics):
    s, c = api.call("POST", "/v1/clients", {"name": name, "role": "consumer", "topics": topics})
    assert s == 201, c
    return c["api_key"]


def _long(prefix: str, i: int) -> str:
    return f"{prefix}/{'c' * (TOPIC_LEN - len(prefix) - 6)}{i:05d}"





# ------------------------------------------------------------------------------ regressions
def test_members_with_100_long_child_topics_each(api, clock, sizes):
    """≈19 members asking for a parent with 100 long children overflowed the one group item."""
    _topic(api, "feed", 2)
    _topics([_long("feed", i) for i in range(100)])
    key = _consumer(api, "wide", ["feed"])
    n = 24
    for i in range(n):
        s, b = api.call("POST", "/v1/groups/wide/members", {"member_id": f"m{i:03d}", "topics": ["feed"]}, key=key)
        assert s == 200, b
        clock.t += 10
    assert sizes.max() <= ITEM_LIMIT, sorted(sizes.writes, key=lambda w: -w[2])[:3]
    s, d = api.call("GET", "/v1/groups/wide", key=key)
    assert s == 200 and len(d["members"]) == n
    assert all(len(m["topics"]) == 101 for m in d["members"])
    queues = [(q["topic"], q["queue"]) for m in d["members"] for q in m["assignment"]]
    assert len(queues) == len(set(queues)) == 102  # every queue assigned exactly once


def test_members_asking_for_100_long_topics_each(api, clock, sizes):
    topics = [_long("wide", i) for i in range(120)]
    _topics(["wide"] + topics)
    key = _consumer(api, "ask", ["wide"])  # the grant of a parent covers its children
    for i in range(22):
        # each member asks for its own 100 of the 120 topics (one distinct set per member)
        mine = (topics[i:] + topics[:i])[:100]
        s, b = api.call("POST", "/v1/groups/ask/members", {"member_id": f"m{i:03d}", "topics": mine}, key=key)
        assert s == 200, b
        clock.t += 10
    assert sizes.max() <= ITEM_LIMIT
    st = group_store.GroupRepo.load("ask")
    assert len(st.members) == 22 and all(len(m.topics) == 100 for m in st.members.values())


def _seed(group: str, n: int, topics: list[str], counts: dict[str, int], now: int, prefix="member") -> list[str]:
    """A group of ``n`` stable members written straight through the repository (building it by
    ``n`` joins over the API takes minutes on moto): targets from one rebalance, each member
    holding its target, as after everyone synced."""
    st = g.new_group(group)
    mids = [f"{prefix}-{i:04d}-{'x' * 24}" for i in range(n)]
    for mid in mids:
        st.members[mid] = g.Member(mid, sorted(topics), state=g.AWAITING, last_heartbeat=now, joined_at=now,
                                   sync_deadline=now + g.DEFAULT_SESSION_TIMEOUT_MS)
    st, _ = g.force_rebalance(st, now, counts, "seed")
    for m in st.members.values():
        m.owned, m.held, m.state, m.sync_deadline, m.generation = list(m.target), list(m.target), g.STABLE, None, st.generation
    view = group_store.View(group, None, g.new_group(group), {})
    group_store.GroupRepo._write_header(view, st, {mid: sorted(topics) for mid in mids}, now)
    return mids


def test_group_of_1000_members(api, clock, sizes):
    """1,000 members, each with a few long-named topics: the 1,000th joins over the API (a full
    rebalance), heartbeats write one small item, the 1,001st is refused with 409 group_full."""
    names = [f"{'t' * 60}{i}" for i in range(3)]
    _topics(names, 64)
    key = _consumer(api, "big", names)
    mids = _seed("big", 999, names, {t: 64 for t in names}, clock.t)
    sizes.clear()
    last = "member-0999-" + "x" * 24
    s, b = api.call("POST", "/v1/groups/big/members", {"member_id": last, "topics": names}, key=key)
    assert s == 200, b
    gen = b["generation"]
    assert sizes.max() <= ITEM_LIMIT, sorted(sizes.writes, key=lambda w: -w[2])[:3]
    (op, table, size), = sizes.writes
    assert op == "PutItem" and table == GroupModel.Meta.table_name
    st = group_store.GroupRepo.load("big")
    assert len(st.members) == 1000 and st.generation == gen
    s, h = api.call("POST", f"/v1/groups/big/members/{last}/heartbeat", {"generation": gen}, key=key)
    assert s == 200 and h["action"] == "sync"
    s, r = api.call("POST", f"/v1/groups/big/members/{last}/sync", {"generation": gen}, key=key)
    assert s == 200
    clock.t += 100
    sizes.clear()
    for mid in (last, mids[0], mids[500]):
        s, h = api.call("POST", f"/v1/groups/big/members/{mid}/heartbeat", {"generation": gen}, key=key)
        assert s == 200 and h["generation"] == gen, h
    assert [w[:2] for w in sizes.writes] == [("PutItem", GroupMemberModel.Meta.table_name)] * 3, sizes.writes
    assert sizes.max() < 200
    # the cap
    s, b = api.call("POST", "/v1/groups/big/members", {"member_id": "one-too-many", "topics": names}, key=key)
    assert (s, b["error"]["code"]) == (409, "group_full")
    assert "one-too-many" not in group_store.GroupRepo.load("big").members
    # a member re-joining is no new member: still fine at the cap
    s, b = api.call("POST", "/v1/groups/big/members",
                    {"member_id": mids[1], "topics": names, "owned": [{"topic": t, "queue": q} for t, q in
                                                                    st.members[mids[1]].target]}, key=key)
    assert s == 200, b


def test_topic_caps_and_state_size_cap(api, clock, sizes, monkeypatch):
    _topic(api, "quotes", 1)
    _topics([f"quotes/c{i}" for i in range(12)])
    key = _consumer(api, "capped", ["quotes"])
    monkeypatch.setattr(group_store, "MAX_MEMBER_TOPICS", 10)
    monkeypatch.setattr(group_service, "MAX_MEMBER_TOPICS", 10)
    s, b = api.call("POST", "/v1/groups/capped/members", {"member_id": "m1", "topics": ["quotes"]}, key=key)
    assert (s, b["error"]["code"]) == (400, "bad_request") and "at most 10" in b["error"]["message"]
    many = [f"t{i}" for i in range(101)]
    s, b = api.call("POST", "/v1/groups/capped/members", {"member_id": "m1", "topics": many}, key=key)
    assert (s, b["error"]["code"]) == (400, "bad_request")
    monkeypatch.setattr(group_store, "MAX_MEMBER_TOPICS", 1000)
    monkeypatch.setattr(group_service, "MAX_MEMBER_TOPICS", 1000)
    assert api.call("POST", "/v1/groups/capped/members", {"member_id": "m1", "topics": ["quotes"]}, key=key)[0] == 200
    before = GroupModel.get("capped", consistent_read=True)
    monkeypatch.setattr(group_store, "MAX_HEADER_BYTES", len(before.state) + 10)
    s, b = api.call("POST", "/v1/groups/capped/members", {"member_id": "m2", "topics": ["quotes"]}, key=key)
    assert (s, b["error"]["code"]) == (409, "group_too_large"), b
    after = GroupModel.get("capped", consistent_read=True)
    assert (after.version, after.state) == (before.version, before.state)  # nothing written


@pytest.mark.moto  # reads DynamoDB Streams
def test_large_header_is_compressed_and_the_stream_reads_it(aws, api, clock):
    """The lake's member rows come from the GroupsTable stream: the compact and the compressed
    header both decode to the same rows as the old one-item-per-group state did."""
    from tests.integration.test_groups_handlers import _history  # noqa: PLC0415

    names = ["quotes"]
    _topics(names, 8)
    key = _consumer(api, "lake", names)
    _seed("lake", 120, names, {"quotes": 8}, clock.t, prefix="zz")
    assert api.call("POST", "/v1/groups/lake/members", {"member_id": "a", "topics": names}, key=key)[0] == 200
    hdr = GroupModel.get("lake", consistent_read=True)
    assert hdr.state is None and hdr.state_z  # 120 members: compressed
    arn = aws["dynamodb"].describe_table(TableName=GroupModel.Meta.table_name)["Table"]["LatestStreamArn"]
    recs, old = [], None
    for img in _history(aws):
        d = {"NewImage": img, "SequenceNumber": str(len(recs) + 1), "ApproximateCreationDateTime": 1767225600}
        if old is not None:
            d["OldImage"] = old
        recs.append({"eventName": "MODIFY" if old else "INSERT", "eventSourceARN": arn, "dynamodb": d})
        old = img
    rows = [r for rec in recs for r in lake.member_rows(rec)]
    joined = [r["member_id"] for r in rows if r["change"] == "joined"]
    assert sorted(joined) == sorted(["a"] + [f"zz-{i:04d}-{'x' * 24}" for i in range(120)])
    assert rows[-1]["generation"] == group_store.GroupRepo.load("lake").generation
    assert all(r["group"] == "lake" and r["topics"] == ["quotes"] for r in rows)
