"""The backlog console's routes on in-process moto (IAM from template.yaml enforced): the static
page, ``GET /v1/clients``, ``GET /v1/topics/{topic}``, ``lock_owner`` in a group's offsets and
``GET /v1/subscriptions/{id}/offsets``."""
from __future__ import annotations

import re

import pytest

T = "/v1/topics/quotes%2Fsh/messages"


def test_console_page_and_assets_are_static_and_hold_no_secret(api):
    s, html = api.call("GET", "/console", key=None)
    assert s == 200 and "<title>lakeq backlog console</title>" in html
    ev, h = api.event("GET", "/console", key=None)
    from tests.handlers import Context
    out = h(ev, Context())
    assert out["headers"]["Content-Type"].startswith("text/html")
    assert "script-src 'self'" in out["headers"]["Content-Security-Policy"]
    assert 'src="console/console.js"' in html and "http://" not in html and "https://" not in html
    s, js = api.call("GET", "/console/console.js", key=None)
    assert s == 200 and "sessionStorage" in js and "Authorization" in js
    assert not re.search(r"https?://(?!www\.w3\.org/2000/svg)", js)  # no CDN, nothing off-origin
    assert "local-admin-key" not in js + html
    assert api.call("GET", "/console/console.css", key=None)[0] == 200
    s, b = api.call("GET", "/console/openapi.yaml", key=None)  # only the console's own files
    assert s == 404 and b["error"]["code"] == "not_found"
    assert api.call("GET", "/console/..%2Fservice.py", key=None)[0] == 404


def test_list_clients_never_shows_keys(api, setup):
    s, b = api.call("GET", "/v1/clients")
    assert s == 200 and b["caller"] == {"admin": True, "client": None}
    assert [c["name"] for c in b["clients"]] == ["feed", "risk"]
    assert not any(setup[k] in str(b) for k in setup) and "key_hash" not in str(b) and "key_map" not in str(b)
    risk = b["clients"][1]
    assert risk["role"] == "consumer" and risk["topics"] == ["quotes"] and risk["mode"] == "clustering"
    s, b = api.call("GET", "/v1/clients", key=setup["risk"])  # a client's key sees itself only
    assert s == 200 and b["caller"] == {"admin": False, "client": "risk"} and [c["name"] for c in b["clients"]] == ["risk"]
    assert api.call("GET", "/v1/clients", key=None)[0] == 401
    assert api.call("GET", "/v1/clients", key="nope")[0] == 401


def test_topic_detail(api, setup):
    msgs = [{"key": "k", "body": str(i)} for i in range(3)]
    s, r = api.call("POST", T, {"producer": "feed", "messages": msgs}, key=setup["feed"])
    assert s == 200
    q = r["results"][0]["queue"]
    s, b = api.call("GET", "/v1/topics/quotes%2Fsh")
    assert s == 200 and b["name"] == "quotes/sh" and b["queues"] == 2 and b["parent"] == "quotes"
    assert b["produced"] == 3
    assert [(x["queue"], x["min_offset"], x["max_offset"]) for x in b["queue_offsets"]] == \
        [(i, 0, 3 if i == q else 0) for i in range(2)]
    assert api.call("GET", "/v1/topics/quotes%2Fsh", key=setup["risk"])[0] == 200  # granted (parent covers it)
    assert api.call("GET", "/v1/topics/nope")[0] == 404
    assert api.call("GET", "/v1/topics/bad%20name")[0] == 400
    assert api.call("GET", "/v1/topics/quotes", key=None)[0] == 401
    api.call("POST", "/v1/topics", {"name": "other"})
    assert api.call("GET", "/v1/topics/other", key=setup["risk"])[0] == 403


def test_offsets_carry_the_lock_owner(api, setup):
    api.call("POST", T, {"producer": "feed", "messages": [{"key": "k", "body": "x"}]}, key=setup["feed"])
    s, b = api.call("GET", "/v1/groups/risk/offsets", query={"topic": "quotes/sh"}, key=setup["risk"])
    assert s == 200 and all(q["lock_owner"] is None and q["locked_until"] == 0 for q in b["queues"])
    s, m = api.call("POST", "/v1/groups/risk/members", {"member_id": "m1", "topics": ["quotes/sh"]}, key=setup["risk"])
    assert s == 200
    assert api.call("POST", "/v1/groups/risk/members/m1/sync", {"generation": m["generation"]}, key=setup["risk"])[0] == 200
    s, p = api.call("GET", T, query={"group": "risk", "member_id": "m1"}, key=setup["risk"])
    assert s == 200 and p["receipt"]
    q = p["messages"][0]["queue"]
    s, b = api.call("GET", "/v1/groups/risk/offsets", query={"topic": "quotes/sh"}, key=setup["risk"])
    held = {x["queue"]: x for x in b["queues"]}
    assert held[q]["lock_owner"] == "m1" and held[q]["locked_until"] > 0 and held[q]["backlog"] == 1
    assert all(x["lock_owner"] is None for x in b["queues"] if x["queue"] != q)
    assert api.call("POST", "/v1/acks", {"group": "risk", "receipt": p["receipt"]}, key=setup["risk"])[0] == 200
    s, b = api.call("GET", "/v1/groups/risk/offsets", query={"topic": "quotes/sh"}, key=setup["risk"])
    assert all(x["lock_owner"] is None and x["backlog"] == 0 for x in b["queues"])


def test_subscription_offsets(api, setup, aws):
    s, sub = api.call("POST", "/v1/subscriptions", {"subscriber": "risk", "topic": "quotes", "conditions": []},
                      key=setup["risk"])
    assert s == 201
    s, b = api.call("GET", f"/v1/subscriptions/{sub['id']}/offsets", key=setup["risk"])
    assert s == 200 and b["id"] == sub["id"] and b["subscriber"] == "risk" and b["backlog"] == 0
    assert [x["queue"] for x in b["queues"]] == [0]
    assert api.call("GET", "/v1/subscriptions/nope/offsets", key=setup["risk"])[0] == 404
    assert api.call("GET", f"/v1/subscriptions/{sub['id']}/offsets", key=setup["feed"])[0] == 403
    assert api.call("GET", f"/v1/subscriptions/{sub['id']}/offsets", key=None)[0] == 401


def _summary(api, key="local-admin-key"):
    s, b = api.call("GET", "/v1/summary", key=key)
    assert s == 200, b
    return b


def _group(b, topic):
    return next(g for g in b["groups"] if g["group"] == "risk" and g["topic"] == topic)


def test_summary_totals_backlog_oldest_and_rates_inputs(api, setup, clock, aws):
    """``GET /v1/summary`` (issue 18 item 3): totals over every topic and clustering group, the oldest
    unconsumed message's produce time, and the produced/consumed counters the console derives rates
    from; it reads only (every table is the same before and after)."""
    b = _summary(api)
    assert b["totals"]["backlog"] == 0 and b["totals"]["oldest_unconsumed_at"] is None
    assert {t["topic"] for t in b["topics"]} == {"quotes", "quotes/sh"} and b["truncated"] is False
    assert _group(b, "quotes")["backlog"] == 0 and _group(b, "quotes")["oldest_unconsumed_age_ms"] is None
    t0 = clock.t
    assert api.call("POST", T, {"producer": "feed", "messages": [{"key": "a", "body": "old"}]}, key=setup["feed"])[0] == 200
    clock.t += 60_000
    msgs = [{"key": f"k{i}", "body": str(i)} for i in range(5)]
    assert api.call("POST", T, {"producer": "feed", "messages": msgs}, key=setup["feed"])[0] == 200
    clock.t += 5_000

    def tables():
        import boto3
        ddb = boto3.client("dynamodb", region_name="us-east-1")
        return {n: sorted(map(str, ddb.scan(TableName=n)["Items"])) for n in ddb.list_tables()["TableNames"]}

    before = tables()
    b = _summary(api)
    assert tables() == before  # a summary writes nothing
    g = _group(b, "quotes/sh")
    assert (g["backlog"], g["consumed"], g["dead_lettered"], g["locked_queues"]) == (6, 0, 0, 0)
    assert g["oldest_unconsumed_at"] == t0 and g["oldest_unconsumed_age_ms"] == 65_000
    assert b["totals"]["produced"] == 6 and b["totals"]["backlog"] == 6 and b["totals"]["consumed"] == 0
    assert b["totals"]["oldest_unconsumed_at"] == t0 and b["computed_at"] == clock.t
    sh = next(t for t in b["topics"] if t["topic"] == "quotes/sh")
    assert sh["produced"] == 6 and sh["last_produced_at"] == t0 + 60_000
    # consume everything the first pull gives and ack it: consumed moves, the oldest moves forward
    s, p = api.call("GET", T, query={"group": "risk", "max": "10"}, key=setup["risk"])
    assert s == 200 and p["messages"]
    got = len(p["messages"])
    assert api.call("POST", "/v1/acks", {"group": "risk", "receipt": p["receipt"]}, key=setup["risk"])[0] == 200
    b = _summary(api)
    g = _group(b, "quotes/sh")
    assert g["consumed"] == got and g["backlog"] == 6 - got and b["totals"]["consumed"] == got
    if g["backlog"]:
        assert g["oldest_unconsumed_at"] in (t0, t0 + 60_000)
    # a group's key sees its own grants only; no key → 401; a repeated parameter → 400
    b = _summary(api, setup["risk"])
    assert {g["group"] for g in b["groups"]} == {"risk"}
    assert _summary(api, setup["feed"])["groups"] == []
    assert api.call("GET", "/v1/summary", key=None)[0] == 401
    assert api.call("GET", "/v1/summary", query=[("x", "1"), ("x", "2")])[0] == 400


def test_summary_counts_dead_letters_and_caps_pairs(api, setup, clock, monkeypatch):
    from lakeq.console import summary

    assert api.call("PATCH", "/v1/clients/risk", {"max_deliveries": 1})[0] == 200
    assert api.call("POST", T, {"producer": "feed", "messages": [{"key": "k", "body": "poison"}]}, key=setup["feed"])[0] == 200
    s, p = api.call("GET", T, query={"group": "risk"}, key=setup["risk"])
    assert s == 200 and len(p["messages"]) == 1
    clock.t += 5_000  # the lock (1 s visibility) expires; max_deliveries 1 → dead-lettered on the next pull
    s, p = api.call("GET", T, query={"group": "risk"}, key=setup["risk"])
    assert s == 200 and p["messages"] == []
    g = _group(_summary(api), "quotes/sh")
    assert g["dead_lettered"] == 1 and g["backlog"] == 0, g
    monkeypatch.setattr(summary, "MAX_PAIRS", 1)
    b = _summary(api)
    assert b["truncated"] is True and sum(1 for g in b["groups"] if "backlog" in g) == 1


@pytest.mark.moto  # reads DynamoDB Streams
def test_summary_counts_subscription_lists(api, setup, clock, aws, fanout_handler, fresh_matcher):
    """A subscription's list is summed in the totals next to the groups, with its own oldest entry."""
    from tests.handlers import Context, segment_records

    s, sub = api.call("POST", "/v1/subscriptions", {"subscriber": "risk", "topic": "quotes", "conditions": []},
                      key=setup["risk"])
    assert s == 201
    t0 = clock.t
    assert api.call("POST", T, {"producer": "feed", "messages": [{"key": "a", "body": "x"}, {"key": "b", "body": "y"}]},
                    key=setup["feed"])[0] == 200
    assert fanout_handler({"Records": segment_records(aws)}, Context()) == {"batchItemFailures": []}
    clock.t += 1_000
    b = _summary(api)
    [row] = [x for x in b["subscriptions"] if x["subscription"] == sub["id"]]
    assert (row["subscriber"], row["topic"], row["backlog"], row["dead_lettered"]) == ("risk", "quotes", 2, 0)
    assert row["oldest_unconsumed_at"] == t0 and row["oldest_unconsumed_age_ms"] == 1_000
    groups = sum(g["backlog"] for g in b["groups"] if "backlog" in g)
    assert b["totals"]["backlog"] == groups + 2 and groups == 2
    s, p = api.call("GET", f"/v1/subscriptions/{sub['id']}/messages", query={"max": "10"}, key=setup["risk"])
    assert s == 200 and len(p["messages"]) == 2
    assert api.call("POST", "/v1/acks", {"subscription": sub["id"], "receipt": p["receipt"]}, key=setup["risk"])[0] == 200
    [row] = [x for x in _summary(api)["subscriptions"] if x["subscription"] == sub["id"]]
    assert row["backlog"] == 0 and row["oldest_unconsumed_at"] is None


def test_summary_store_work_is_bounded_by_its_cap(api, setup, monkeypatch):
    """Issue 30 (8): the summary read every visible topic's queues (one Query per queue of every
    topic: the head's exact end) whatever its cap. With the cap at 3, twice as many topics (and
    consumers with subscriptions) cost the same store calls, and ``truncated`` says the rest were
    not counted."""
    from lakeq.console import summary
    from tests.crash import CountCalls

    monkeypatch.setattr(summary, "MAX_PAIRS", 3)

    def add(n0, n1):
        for i in range(n0, n1):
            assert api.call("POST", "/v1/topics", {"name": f"quotes/t{i:02d}", "queues": 4})[0] == 201
            s, c = api.call("POST", "/v1/clients", {"name": f"c{i:02d}", "role": "consumer", "topics": ["quotes"]})
            assert s == 201
            s, _ = api.call("POST", "/v1/subscriptions", {"subscriber": f"c{i:02d}", "topic": "quotes"},
                            key=c["api_key"])
            assert s == 201

    def calls():
        with CountCalls() as c:
            b = _summary(api)
        assert b["truncated"] is True
        rows = len(b["topics"]), len(b["groups"]), len(b["subscriptions"])
        return sorted(f"{x.operation} {x.params.get('TableName', '')}" for x in c.calls
                      if x.operation not in ("Scan",)), rows  # the topics' and clients' Scans: one page each

    add(0, 6)
    few, rows = calls()
    assert rows[0] <= 3 and rows[1] + rows[2] <= 3, rows
    add(6, 12)
    many, rows2 = calls()
    assert rows2 == rows
    assert many == few, (len(few), len(many))


def test_console_metrics_reads_the_emf_figures_back_from_cloudwatch_with_the_templates_iam(api, setup, capsys,
                                                                                           clock):
    """What the functions print (obs.emit: the metrics function's gauges, a route's counters), put
    into CloudWatch as the local stack's EMF collector does (infra.local.emf), comes back per minute
    from ``GET /v1/console/metrics`` (GetMetricData as AdminFunction, IAM from template.yaml). The
    clock stands still (at the real time): the route's window is whole minutes, and a minute turning
    between the test's reading and the route's (a loaded machine) moved it (review34)."""
    import time

    import boto3

    from infra.local.emf import CloudWatchSink
    from lakeq.common import metric_names as M
    from lakeq.common.obs import emit

    clock.t = int(time.time() * 1000)
    now = clock.t
    m = now // 60_000 * 60_000
    sink = CloudWatchSink(boto3.client("cloudwatch", region_name="us-east-1"))
    for back, backlog, sent, acks in ((3, 5, 10, 2), (2, 7, 4, 2), (1, 6, 0, 1)):
        t = m - back * 60_000 + 1_000
        sink(emit({"Topic": "quotes/sh", "Group": "risk"}, {M.BACKLOG: backlog, M.VISIBLE: backlog}, t))
        sink(emit({"Topic": "quotes/sh", "Group": "other"}, {M.BACKLOG: 100}, t))  # not asked for
        sink(emit({}, {M.BACKLOG: backlog + 100}, t))  # the totals row
        if sent:  # the request paths' counters: the deployment's, and per row (obs.count_rows)
            sink(emit({}, {M.SENT: sent + 1000}, t))
            sink(emit({"Topic": "quotes/sh"}, {M.SENT: sent}, t))
        sink(emit({}, {M.ACKS: acks + 1000}, t))
        sink(emit({"Topic": "quotes/sh", "Group": "risk"}, {M.ACKS: acks}, t))
        sink(emit({"Topic": "quotes/sh", "Group": "other"}, {M.ACKS: 50}, t))  # another group's
    sink(emit({"Topic": "quotes/sh", "Group": "risk"}, {M.BACKLOG: 99}, m - 90 * 60_000))  # over an hour ago
    capsys.readouterr()

    R = "/v1/console/metrics"
    mine = {"topic": "quotes/sh", "group": "risk"}
    s, b = api.call("GET", R, query=mine)
    assert s == 200, b
    assert b["period_s"] == 60 and b["end"] - b["start"] == 61 * 60_000 and b["start"] <= m - 60 * 60_000
    assert b["scope"] == {"produced": "topic", "consumed": "topic+group", "backlog": "topic+group"}
    ser = b["series"]
    assert [(p["t"], p["v"]) for p in ser["backlog"]] == [(m - 180_000, 5), (m - 120_000, 7), (m - 60_000, 6)]
    assert [(p["t"], p["v"]) for p in ser["produced"]] == [(m - 180_000, 10), (m - 120_000, 4)]
    assert [(p["t"], p["v"]) for p in ser["consumed"]] == [(m - 180_000, 2), (m - 120_000, 2), (m - 60_000, 1)]

    s, b = api.call("GET", R)  # the deployment's totals (admin)
    assert s == 200 and set(b["scope"].values()) == {"deployment"}
    assert [p["v"] for p in b["series"]["backlog"]] == [105, 107, 106]
    assert [p["v"] for p in b["series"]["produced"]] == [1010, 1004]
    assert [p["v"] for p in b["series"]["consumed"]] == [1002, 1002, 1001]

    # a group's key: its own group on a granted topic only; never the totals
    assert api.call("GET", R, query=mine, key=setup["risk"])[0] == 200
    for q in ({"topic": "quotes/sh", "group": "other"}, None, {"topic": "elsewhere", "group": "risk"}):
        s, e = api.call("GET", R, query=q, key=setup["risk"])
        assert s == 403 and e["error"]["code"] == "forbidden", q
    assert api.call("GET", R, key=None)[0] == 401
    for q in ({"topic": "quotes"}, {"group": "risk"}, {**mine, "minutes": "600"},
              {"topic": "bad name", "group": "risk"}, [("topic", "quotes"), ("group", "risk"), ("topic", "quotes")]):
        s, e = api.call("GET", R, query=q)
        assert s == 400 and e["error"]["code"] == "bad_request", q


def _ref_counts(log, vs, now):
    from lakeq.console.summary import oldest_at

    oldest = [o for o in (oldest_at(log, v.queue, v.start, v.max_offset) for v in vs if v.backlog > 0)
              if o is not None]
    first = min(oldest) if oldest else None
    return {"consumed": sum(v.start for v in vs), "backlog": sum(v.backlog for v in vs),
            "dead_lettered": sum(v.dead_lettered for v in vs), "oldest_unconsumed_at": first,
            "oldest_unconsumed_age_ms": None if first is None else max(0, now - int(first))}


def _reference_summary(p):
    """``GET /v1/summary`` as it read before the batched reads (console35): per topic its queue items
    (and one newest-segment Query per queue), per (group, topic) its offset records' Query and per
    queue with a backlog a segment Query, per consumer its subscriptions' Query. Kept here to show
    the batched summary answers exactly as this one does."""
    from lakeq.common.names import covers, log_of
    from lakeq.console import summary as sm
    from lakeq.consume import views_of
    from lakeq.store.offsets import OffsetRepo
    from lakeq.store.queue_log import LogRepo
    from lakeq.store.subscriptions import SubscriptionRepo, list_owner, list_topic

    now = sm._clock.now()
    visible, clients = sm._visible(p)
    topics = visible[:sm.MAX_PAIRS]
    truncated = len(visible) > len(topics)
    metas = {t.name: LogRepo.queues(log_of(t), int(t.queues)) for t in topics}
    topic_rows = [{"topic": t.name, "queues": int(t.queues),
                   "produced": sum(int(m.max_offset) for m in metas[t.name]),
                   "retained": sum(int(m.max_offset) - int(m.min_offset) for m in metas[t.name]),
                   "delayed": sum(int(m.delayed or 0) for m in metas[t.name]),
                   "last_produced_at": max((int(m.last_produced_at or 0) for m in metas[t.name]), default=0) or None}
                  for t in topics]
    group_rows, sub_rows, rows = [], [], 0
    consumers = [c for c in clients if c.role == "consumer"]
    for c in consumers:
        for t in topics:
            if not any(covers(g, t.name) for g in c.topics):
                continue
            if rows >= sm.MAX_PAIRS:
                truncated = True
                break
            rows += 1
            if c.mode == "broadcasting":
                group_rows.append({"group": c.name, "topic": t.name, "mode": "broadcasting"})
                continue
            log = log_of(t)
            vs = views_of(metas[t.name], OffsetRepo.records(OffsetRepo.owner(c.name, log)))
            group_rows.append({"group": c.name, "topic": t.name, "mode": c.mode, **_ref_counts(log, vs, now),
                               "locked_queues": sum(1 for v in vs if v.locked(now))})
    for c in consumers:
        if rows >= sm.MAX_PAIRS:
            truncated = True
            break
        for sub in SubscriptionRepo.of_subscriber(c.name):
            if rows >= sm.MAX_PAIRS:
                truncated = True
                break
            rows += 1
            lt = list_topic(sub.id)
            vs = views_of(LogRepo.queues(lt, 1), OffsetRepo.records(list_owner(sub.id)))
            sub_rows.append({"subscription": sub.id, "subscriber": c.name, "topic": sub.topic,
                             **_ref_counts(lt, vs, now)})
    counted = [g for g in group_rows if "backlog" in g] + sub_rows
    oldest_all = [g["oldest_unconsumed_at"] for g in counted if g["oldest_unconsumed_at"] is not None]
    first_all = min(oldest_all) if oldest_all else None
    return {
        "computed_at": now,
        "totals": {"topics": len(topic_rows), "groups": len({g["group"] for g in group_rows}),
                   "produced": sum(r["produced"] for r in topic_rows),
                   "consumed": sum(g["consumed"] for g in counted if "group" in g),
                   "backlog": sum(g["backlog"] for g in counted),
                   "dead_lettered": sum(g["dead_lettered"] for g in counted),
                   "oldest_unconsumed_at": first_all,
                   "oldest_unconsumed_age_ms": None if first_all is None else max(0, now - int(first_all))},
        "topics": topic_rows, "groups": group_rows, "subscriptions": sub_rows, "truncated": truncated}


@pytest.mark.moto  # reads DynamoDB Streams (the subscriptions' fan-out)
def test_summary_reads_in_batches_not_per_group_and_topic(api, setup, clock, aws, fanout_handler, fresh_matcher,
                                                          monkeypatch):
    """console35: the summary read per (group, topic) — its offset records' Query and a segment Query
    per queue with a backlog —, per queue of every topic a newest-segment Query (the head's exact
    end) and per consumer a subscriptions Query: a tenant with many groups and topics made one
    console page cost hundreds of calls. Now its calls are a few Scans and BatchGetItems, ≤ 100 keys
    each: bounded by a constant plus ceil(keys/100) per kind of key, whatever the number of groups
    and topics; the answer is the same, byte for byte, as the per-row reads' (``_reference_summary``),
    with heads the head mover has not moved yet (appends without ids), a committed offset inside a
    segment, dead letters, a lock, a broadcasting group and subscription lists."""
    import json
    from collections import Counter
    from math import ceil

    from lakeq.admin.auth import Principal
    from lakeq.api.http import dumps
    from lakeq.store import queue_log
    from tests.crash import CountCalls
    from tests.handlers import Context, segment_records

    admin = Principal(admin=True)
    keys = {}

    def add(n0, n1):
        for i in range(n0, n1):
            assert api.call("POST", "/v1/topics", {"name": f"quotes/t{i:02d}", "queues": 4})[0] == 201
            s, c = api.call("POST", "/v1/clients", {"name": f"c{i:02d}", "role": "consumer", "topics": ["quotes"],
                                                     **({"mode": "broadcasting"} if i == 1 else {})})
            assert s == 201
            keys[f"c{i:02d}"] = c["api_key"]
            assert api.call("POST", "/v1/subscriptions", {"subscriber": f"c{i:02d}", "topic": "quotes"},
                            key=c["api_key"])[0] == 201
            for r in range(3):  # appends without ids: the queue items' max_offset hints lag (no head mover here)
                clock.t += 1_000
                msgs = [{"key": f"k{j}", "body": f"{i}-{r}-{j}"} for j in range(6)]
                assert api.call("POST", f"/v1/topics/quotes%2Ft{i:02d}/messages", {"producer": "feed", "messages": msgs},
                                key=setup["feed"])[0] == 200
        clock.t += 1_000
        assert api.call("POST", T, {"producer": "feed", "messages": [{"id": f"x{n0}-{j}", "key": f"k{j}", "body": "x"}
                                                                    for j in range(8)]}, key=setup["feed"])[0] == 200
        assert fanout_handler({"Records": segment_records(aws)}, Context()) == {"batchItemFailures": []}
        # a group's batch that ends inside a segment (committed offset mid-segment), and a lock held
        s, p = api.call("GET", f"/v1/topics/quotes%2Ft{n0:02d}/messages", query={"group": "c00", "max": "1"},
                        key=keys["c00"])
        assert s == 200 and len(p["messages"]) == 1
        assert api.call("POST", "/v1/acks", {"group": "c00", "receipt": p["receipt"]}, key=keys["c00"])[0] == 200
        assert api.call("GET", T, query={"group": "risk", "max": "2"}, key=setup["risk"])[0] == 200
        clock.t += 1_000

    def calls():
        ev, handler = api.event("GET", "/v1/summary")
        with CountCalls() as c:
            out = handler(ev, Context())
        assert out["statusCode"] == 200 and c.calls
        b = json.loads(out["body"])
        assert b["truncated"] is False
        ref = dumps(_reference_summary(admin))
        assert out["body"] == ref  # the same answer, byte for byte
        return Counter(x.operation for x in c.calls), b

    add(0, 4)
    few, b = calls()
    assert len(b["groups"]) >= 20 and len(b["subscriptions"]) == 4 and b["totals"]["backlog"] > 0
    few_rows = sum(1 for g in b["groups"] if "backlog" in g)  # clustering rows: a records Query each
    add(4, 12)
    many, b = calls()
    groups = [g for g in b["groups"] if "backlog" in g]
    assert len(b["groups"]) >= 100 and len(b["subscriptions"]) == 12
    # the keys each kind of batch reads: queue items (topics' and lists'), offset records (the lists'
    # alone: a group's are its Query, review_g), oldest segments
    queue_keys = sum(t["queues"] for t in b["topics"]) + len(b["subscriptions"])
    record_keys = len(b["subscriptions"])
    start_keys = sum(next(t["queues"] for t in b["topics"] if t["topic"] == g["topic"]) for g in groups) \
        + len(b["subscriptions"])  # at most one a row's queue
    bound = 3 + 2 * ceil(queue_keys / 100) + ceil(record_keys / 100) + ceil(start_keys / 100)
    for seen in (few, many):
        assert set(seen) <= {"Scan", "BatchGetItem", "Query"}, seen
        assert seen["Scan"] <= 3, seen  # topics, clients, subscriptions: one page each here
    # no read per queue: the Queries are one a clustering row's offset records (review_g: batched by
    # (owner, queue) key they cost 4-52x the RRU) and the fallbacks for a committed offset inside a
    # segment (one Query each, newest first: c00's, one per add()), none per queue
    assert few["Query"] == few_rows + 1 and many["Query"] == len(groups) + 2, (few, many, few_rows, len(groups))
    assert sum(few.values()) <= 12 + few_rows and sum(many.values()) <= bound + many["Query"], (few, many, bound)
    # heads lagging more segments than the walk's rounds take the newest-segment Query: the same answer
    monkeypatch.setattr(queue_log, "EXACT_WALK_ROUNDS", 1)
    lagging, _ = calls()
    assert lagging["Query"] > many["Query"], lagging


class _SubscriptionItemsRead:
    """Interceptor hook: the items Scans and Queries of the subscriptions table return."""

    def __init__(self):
        self.items = 0

    def before(self, call):
        pass

    def after(self, call, response):
        if call.operation in ("Scan", "Query") and str(call.params.get("TableName", "")).endswith("-subscriptions"):
            self.items += len(response.get("Items") or [])
        return response


def test_the_summarys_subscription_reads_do_not_grow_with_the_table(api, setup, clock, monkeypatch):
    """review_g: the batched summary (console35) read every consumer's subscriptions in one Scan of
    the table — every tenant's subscriptions, each summary (the console asks every 5 s), however few
    rows the cap lets in: 10k subscriptions of ~122 B (the smallest: no conditions, no push) are 149
    RRU a summary, a million (10k consumers x 100) 15k RRU in 117 sequential 1-MB pages (by
    DynamoDB's pricing of that size, not measured), where the
    per-consumer Queries it replaced stop at the cap. The Scan reads at most the cap's rows plus one
    consumer's 100 and one item; a table holding more is read a Query a consumer until the cap, as
    before: the items read are the same with 320 and 640 subscriptions, and the answer is the per-row
    reads' (``_reference_summary``), byte for byte."""
    import uuid

    from infra.local import interceptor
    from lakeq.admin.auth import Principal
    from lakeq.api.http import dumps
    from lakeq.console import summary as sm
    from lakeq.store.subscriptions import SubscriptionModel
    from lakeq.subscriptions.service import MAX_SUBSCRIPTIONS_PER_CLIENT

    assert sm.SUBSCRIPTIONS_PER_CLIENT == MAX_SUBSCRIPTIONS_PER_CLIENT  # the summary's copy of the limit
    monkeypatch.setattr(sm, "MAX_PAIRS", 20)
    admin = Principal(admin=True)
    made = 0

    def consumers(n0, n1, subs_each=80):
        nonlocal made
        for i in range(n0, n1):
            assert api.call("POST", "/v1/clients", {"name": f"c{i:02d}", "role": "consumer",
                                                     "topics": ["quotes/sh"]})[0] == 201
            for _ in range(subs_each):  # written as the subscriptions service writes their items
                made += 1
                SubscriptionModel(uuid.uuid4().hex, subscriber=f"c{i:02d}", topic="quotes/sh", conditions="[]",
                                  created_at=1_000_000 + made, counted=True).save()

    def read():
        hook = _SubscriptionItemsRead()
        with interceptor.hooked(hook):
            out = sm.summary(admin)
        assert dumps(out) == dumps(_reference_summary(admin))
        assert out["truncated"] is True and len(out["subscriptions"]) == 20 - len(out["groups"]) > 0, out["groups"]
        return hook.items

    consumers(0, 4)
    few = read()
    consumers(4, 8)
    many = read()
    assert many == few, (few, many)
    assert many <= 2 * (sm.MAX_PAIRS + 100) + 1, many


class _OffsetsReadUnits:
    """Interceptor hook: the read units the calls on the offsets table cost, priced from the items'
    sizes by DynamoDB's rules (moto reports none; as ``bench/queue.py``'s meter prices them): a
    Query the sum of its items rounded up to 4 KB (1 unit at least), a BatchGetItem each key on its
    own, its item rounded up to 4 KB, an absent one 1 unit; strongly consistent 1, eventually 0.5."""

    def __init__(self):
        self.units = 0.0

    def before(self, call):
        pass

    def after(self, call, response):
        from math import ceil

        from infra.local.aws_rules import item_size

        if call.operation == "Query" and str(call.params.get("TableName", "")).endswith("-offsets"):
            c = 1.0 if call.params.get("ConsistentRead") else 0.5
            self.units += c * max(1, ceil(sum(item_size(i) for i in response.get("Items", [])) / 4096))
        elif call.operation == "BatchGetItem":
            for table, req in call.params["RequestItems"].items():
                if table.endswith("-offsets"):
                    c = 1.0 if req.get("ConsistentRead") else 0.5
                    found = response.get("Responses", {}).get(table, [])
                    self.units += c * (sum(max(1, ceil(item_size(i) / 4096)) for i in found)
                                       + len(req.get("Keys", [])) - len(found))
        return response


def test_the_summarys_offset_reads_cost_no_more_than_a_query_a_row(api, setup, clock):
    """review_g: console35 read every row's offset records by consistent BatchGetItems of every
    ``(owner, queue)`` key instead of a consistent Query an owner. A BatchGetItem bills each key on
    its own (an absent record 1 unit too: a group has a record only for the queues it pulled) where a
    Query bills its items' sum rounded up to 4 KB: priced by DynamoDB's rules, 12 topics x 13 groups
    cost 714 units of offset reads a summary at 4 queues a topic (the Queries: 194) and 10,074 at 64
    (194): the whole summary 893.5 / 11,016.5 RRU against the per-row reads' 619 / 1,424 (counted
    with bench/queue.py's meter, 2026-12-08). An owner of many queues is read by its Query again;
    one of a single queue (a subscription list) by BatchGetItem, at the same price. Here: 3 topics of
    16 queues, 4 groups that each pulled a batch of each: the summary's offset reads cost no more
    than the per-row Queries' and the answer is theirs, byte for byte."""
    from infra.local import interceptor
    from lakeq.admin.auth import Principal
    from lakeq.api.http import dumps
    from lakeq.console import summary as sm

    admin = Principal(admin=True)
    keys = {}
    for i in range(3):
        assert api.call("POST", "/v1/topics", {"name": f"quotes/w{i}", "queues": 16})[0] == 201
        clock.t += 1_000
        msgs = [{"key": f"k{j}", "body": f"{i}-{j}"} for j in range(40)]
        assert api.call("POST", f"/v1/topics/quotes%2Fw{i}/messages", {"producer": "feed", "messages": msgs},
                        key=setup["feed"])[0] == 200
    for g in range(4):
        s, c = api.call("POST", "/v1/clients", {"name": f"g{g}", "role": "consumer", "topics": ["quotes"]})
        assert s == 201
        keys[f"g{g}"] = c["api_key"]
        if g < 2:
            assert api.call("POST", "/v1/subscriptions", {"subscriber": f"g{g}", "topic": "quotes"},
                            key=c["api_key"])[0] == 201
        for i in range(3):
            s, p = api.call("GET", f"/v1/topics/quotes%2Fw{i}/messages", query={"group": f"g{g}", "max": "5"},
                            key=c["api_key"])
            assert s == 200 and p["receipt"], p
            assert api.call("POST", "/v1/acks", {"group": f"g{g}", "receipt": p["receipt"]}, key=c["api_key"])[0] == 200
    units = {}
    for name, fn in (("batched", sm.summary), ("per-row", _reference_summary)):
        hook = _OffsetsReadUnits()
        with interceptor.hooked(hook):
            units[name] = (hook, dumps(fn(admin)))
    assert units["batched"][1] == units["per-row"][1]  # the same answer
    assert units["batched"][0].units <= units["per-row"][0].units, {k: v[0].units for k, v in units.items()}


def test_a_client_keys_summaries_scan_the_topics_table_once_per_copy(api, setup, monkeypatch):
    """A client's grants are name prefixes, matched over every topic: each of its summaries Scanned
    the whole topics table (every tenant's topics), at whatever rate the key asked. Now from the
    container's copy of the list (TopicRepo.all_listed): one Scan per LISTED_S; a topic created
    elsewhere shows once the copy is older; the admin's summary still reads the table each time."""
    from lakeq.store import catalog
    from tests.crash import CountCalls

    t = [1000.0]
    monkeypatch.setattr(catalog, "_monotonic", lambda: t[0])
    s, c = api.call("POST", "/v1/clients", {"name": "viewer", "role": "consumer", "topics": ["quotes"]})
    assert s == 201, c

    def topic_scans(key):
        with CountCalls() as cc:
            b = _summary(api, key=key)
        return sum(1 for x in cc.calls if x.operation == "Scan" and "topic" in x.params.get("TableName", "")), b

    first, b1 = topic_scans(c["api_key"])
    assert first == 1
    for _ in range(20):
        n, b = topic_scans(c["api_key"])
        assert n == 0 and b["topics"] == b1["topics"] and b["groups"] == b1["groups"]
    # another container creates a topic: not seen until the copy is older than LISTED_S
    real = catalog._LISTED.copy()
    assert api.call("POST", "/v1/topics", {"name": "quotes/late", "queues": 2})[0] == 201
    catalog._LISTED.update(real)  # (this process is every container: put the other one's copy back)
    assert "quotes/late" not in [r["topic"] for r in topic_scans(c["api_key"])[1]["topics"]]
    t[0] += catalog.LISTED_S
    n, b = topic_scans(c["api_key"])
    assert n == 1 and "quotes/late" in [r["topic"] for r in b["topics"]]
    admin = [topic_scans("local-admin-key")[0] for _ in range(3)]
    assert admin == [1, 1, 1]
