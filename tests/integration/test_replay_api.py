"""Replay (issue 18.1) on moto: the routes (validation, auth, nothing written on a 4xx), the Glue
start (ReplayFunction), the schedule as ReplayCopierFunction (its IAM role applies) taking a replay from selecting to
copying to done from the job's objects, a topic target receiving exactly the selected messages once
each in order per queue (also across crashes of the copier between produce and cursor write, and
after any store call), error.json → failed, cancel, the list's pages."""
from __future__ import annotations

import json

import pytest

from lakeq.log import claims
from lakeq.replay import rules, service
from lakeq.store.replays import ReplayModel
from tests.crash import Crash, CrashAfter
from tests.handlers import sample
from tests.integration import replay_harness as H

# moto: these tests read DynamoDB Streams (the stream pump, the fan-out, the archiver), which the memory store has not
pytestmark = pytest.mark.moto

T = "/v1/topics/quotes%2Fsh/messages"
T0 = 1_800_000_000_000  # the clock fixture's start


@pytest.fixture
def replay(api, setup, clock, monkeypatch, aws):
    """The Glue job in moto, target topic ``replayed`` (3 queues), a fake copier clock."""
    return H.into_topic(api, aws, clock, monkeypatch)


def produce(api, setup, clock, n, start=0, step_ms=1000):
    """``n`` messages into quotes/sh, one a second from ``T0 + start`` s: key ``k<i % 5>``, property
    ``n = i``, tag ``red`` on even ones."""
    for i in range(start, start + n):
        clock.t = T0 + i * step_ms
        m = {"id": f"m{i}", "body": f"body {i} é", "key": f"k{i % 5}", "properties": {"n": i, "s": "x"},
             "tags": ["red"] if i % 2 == 0 else ["blue"]}
        s, b = api.call("POST", T, {"producer": "feed", "messages": [m]}, key=setup["feed"])
        assert s == 200, b


def start(api, body, status=202):
    s, b = api.call("POST", "/v1/replays", body)
    assert s == status, b
    return b


def scan():
    return sorted(json.dumps(i.attribute_values, sort_keys=True, default=str) for i in ReplayModel.scan())


def check_delivered(topic_rows, log="replayed", source="quotes/sh"):
    """The target holds each selected message exactly once (derived id, body, key, tags, properties
    kept), and messages of one source queue keep their order within each target queue."""
    src = H.source_of(source, topic_rows)
    by_pos = {(r["queue"], r["offset"]): r for r in topic_rows}
    got = H.topic_messages(log)
    seen = []
    for q, msgs in got.items():
        last: dict[int, int] = {}
        for m in msgs:
            sq, so = src[m["id"]]
            seen.append(m["id"])
            assert so > last.get(sq, -1), (q, m["id"])  # in order per source queue
            last[sq] = so
            r = by_pos[(sq, so)]
            assert (m["key"], m["tags"], m["properties"]) == (r["key"], r["tags"], r["properties"])
    assert sorted(seen) == sorted(src)  # each exactly once
    return got


def test_a_replay_into_a_topic_end_to_end(api, setup, clock, replay, aws, aws_rules, capsys):
    produce(api, setup, clock, 40)
    lo, hi = T0 + 5_000, T0 + 35_000
    flt = {"conditions": [{"field": "n", "range": [0, 30]}], "tags": ["red"]}
    r = start(api, {"topic": "quotes/sh", "from": lo, "to": hi, "filter": flt, "target": {"topic": "replayed"},
                    "rate": 1000})
    assert r["status"] == "selecting" and r["found"] is None and r["id"].startswith("rp_")
    assert (r["topic"], r["from"], r["to"], r["rate"]) == ("quotes/sh", lo, hi, 1000)
    assert r["target"] == {"topic": "replayed"}
    assert r["filter"] == rules.Filter.of(flt).to_json() and (r["copied"], r["failed"], r["duplicates"]) == (0, 0, 0)
    # the selection job was started with the contract's arguments
    (run,) = H.job_runs()
    assert run["Arguments"] == {"--replay_id": r["id"], "--topic": "quotes/sh", "--from_ms": str(lo),
                                "--to_ms": str(hi), "--filter": json.dumps(rules.Filter.of(flt).to_json())}
    # nothing in the lake yet: still selecting
    assert H.run_schedule() == {"replays": 1, "selecting": 1}
    want = H.expected(aws, "quotes/sh", lo, hi, flt)
    assert [x["id"] for x in sorted(want, key=lambda x: x["produced_at"])] == \
        [f"m{i}" for i in range(6, 31, 2)]  # 13 messages: even (red), 5 s ≤ t < 35 s, n ≤ 30
    H.write_manifest(aws, r["id"], "quotes/sh", lo, hi, flt)
    capsys.readouterr()
    out = H.run_schedule()
    assert out == {"replays": 1, "done": 1}
    # its progress as metrics, per replay (issue 34)
    from tests.emf import documents, problems
    (doc,) = [d for d in documents(capsys.readouterr().out) if "Replay" in d]
    assert problems(doc) == [] and doc["Replay"] == r["id"]
    assert (doc["ReplayMessagesCopied"], doc["ReplayMessagesFound"]) == ([13.0], [13.0])
    s, got = api.call("GET", f"/v1/replays/{r['id']}")
    assert s == 200 and got["status"] == "done"
    assert (got["found"], got["copied"], got["failed"], got["duplicates"]) == (13, 13, 0, 0)
    check_delivered(want)
    assert H.run_schedule() == {"replays": 0}  # ended: no longer live
    # the schedule ran as ReplayFunction, and its role allowed every call
    assert [d for d in aws_rules.denied if d[0] in ("ReplayFunction", "ReplayCopierFunction")] == []
    # a second replay of the same slice into the same topic copies nothing twice (derived ids)
    # (its manifest as the job wrote them before 2026-11-25: gzipped parts, read the same)
    r2 = start(api, {"topic": "quotes/sh", "from": lo, "to": hi, "filter": flt, "target": {"topic": "replayed"}})
    H.write_manifest(aws, r2["id"], "quotes/sh", lo, hi, flt, gz=True)
    H.run_schedule()
    s, got2 = api.call("GET", f"/v1/replays/{r2['id']}")
    assert (got2["status"], got2["copied"], got2["duplicates"]) == ("done", 13, 13)
    check_delivered(want)
    # and as JSON Lines, as the job wrote them before 2026-12-07 (a replay selected before the deploy)
    r3 = start(api, {"topic": "quotes/sh", "from": lo, "to": hi, "filter": flt, "target": {"topic": "replayed"}})
    H.write_manifest(aws, r3["id"], "quotes/sh", lo, hi, flt, fmt="json")
    H.run_schedule()
    s, got3 = api.call("GET", f"/v1/replays/{r3['id']}")
    assert (got3["status"], got3["copied"], got3["duplicates"]) == ("done", 13, 13)
    check_delivered(want)


def test_a_deleted_queue_is_replayed_into_a_topic_from_the_lake(api, setup, clock, replay, aws):
    """A queue deleted (SQS DeleteQueue: its topic item is a tombstone) can still be replayed into a
    topic: the lake keeps its messages. Into a group it cannot (no group reads a deleted topic), and a
    name never made is 404 as before."""
    from lakeq.store.catalog import TopicRepo
    from lakeq.store.sqs import SqsRepo

    produce(api, setup, clock, 10)
    assert SqsRepo.delete(TopicRepo.get("quotes/sh"), T0 + 20_000)
    assert TopicRepo.get("quotes/sh") is None
    lo, hi = T0, T0 + 10_000
    before = scan()
    s, b = api.call("POST", "/v1/replays", {"topic": "quotes/sh", "from": lo, "to": hi,
                                            "target": {"group": "risk"}})
    assert s == 404 and "quotes/sh" in b["error"]["message"], b
    s, b = api.call("POST", "/v1/replays", {"topic": "never/made", "from": lo, "to": hi,
                                            "target": {"topic": "replayed"}})
    assert s == 404 and "never/made" in b["error"]["message"], b
    assert scan() == before and H.job_runs() == []
    r = start(api, {"topic": "quotes/sh", "from": lo, "to": hi, "target": {"topic": "replayed"}, "rate": 1000})
    want = H.expected(aws, "quotes/sh", lo, hi, None)
    assert len(want) == 10
    H.write_manifest(aws, r["id"], "quotes/sh", lo, hi, None)
    assert H.run_schedule() == {"replays": 1, "done": 1}
    s, got = api.call("GET", f"/v1/replays/{r['id']}")
    assert (got["status"], got["found"], got["copied"], got["failed"]) == ("done", 10, 10, 0)
    check_delivered(want)


def test_the_sample_event_and_the_rate(api, setup, clock, replay, aws):
    """events/replays_start.json through the gateway; the copier keeps the replay's rate."""
    produce(api, setup, clock, 30)
    s, r = api.invoke(sample("replays_start.json"))
    assert s == 202 and r["status"] == "selecting" and r["rate"] == 500
    body = json.loads(sample("replays_start.json")["body"])
    H.write_manifest(aws, r["id"], body["topic"], body["from"], body["to"], body["filter"])
    want = H.expected(aws, body["topic"], body["from"], body["to"], body["filter"])
    assert len(want) == 6  # even n in 0..10
    # rate 2/s, chunks of 2: each chunk starts no earlier than the rows before it allow (its sending
    # slot), so the third starts 4 / 2 = 2 s of the copier's clock after the first (which goes at once)
    ReplayModel(r["id"]).update(actions=[ReplayModel.rate.set(2)])
    t0 = replay.t
    H.run_schedule()
    s, got = api.call("GET", f"/v1/replays/{r['id']}")
    assert got["status"] == "done" and got["copied"] == 6
    assert replay.t - t0 >= 2 and sum(replay.slept) >= 2
    check_delivered(want)


def test_bad_requests_and_auth_change_nothing(api, setup, clock, replay, aws):
    produce(api, setup, clock, 3)
    ok = {"topic": "quotes/sh", "from": T0, "to": T0 + 10_000, "target": {"topic": "replayed"}}
    assert api.call("POST", "/v1/topics", {"name": "other", "queues": 1})[0] == 201
    assert api.call("POST", "/v1/clients", {"name": "solo", "role": "consumer", "topics": ["other"]})[0] == 201
    before = scan()
    cases = [
        (api.call("POST", "/v1/replays", ok, key=None), 401),
        (api.call("POST", "/v1/replays", ok, key="nope"), 401),
        (api.call("POST", "/v1/replays", ok, key=setup["risk"]), 403),  # a group's key: admin only
        (api.call("POST", "/v1/replays", raw_body="{"), 400),
        (api.call("POST", "/v1/replays", [1]), 400),
        (api.call("POST", "/v1/replays", {**ok, "topic": "a//b"}), 400),
        (api.call("POST", "/v1/replays", {**ok, "to": T0}), 400),
        (api.call("POST", "/v1/replays", {**ok, "from": "1"}), 400),
        (api.call("POST", "/v1/replays", {**ok, "rate": 0}), 400),
        (api.call("POST", "/v1/replays", {**ok, "rate": 1001}), 400),
        (api.call("POST", "/v1/replays", {**ok, "extra": 1}), 400),
        (api.call("POST", "/v1/replays", {**ok, "target": {"queue": "x"}}), 400),
        (api.call("POST", "/v1/replays", {**ok, "target": {"topic": "replayed", "group": "risk"}}), 400),
        (api.call("POST", "/v1/replays", {**ok, "target": "replayed"}), 400),
        (api.call("POST", "/v1/replays", {**ok, "filter": {"conditions": [{"field": "n"}]}}), 400),
        (api.call("POST", "/v1/replays", {**ok, "filter": {"nope": 1}}), 400),
        (api.call("POST", "/v1/replays", {**ok, "topic": "nosuch"}), 404),
        (api.call("POST", "/v1/replays", {**ok, "target": {"topic": "nosuch"}}), 404),
        (api.call("POST", "/v1/replays", {**ok, "target": {"group": "nosuch"}}), 404),
        (api.call("POST", "/v1/replays", {**ok, "target": {"group": "feed"}}), 404),  # a producer
        (api.call("POST", "/v1/replays", {**ok, "target": {"group": "solo"}}), 404),  # no grant on quotes/sh
        (api.call("GET", "/v1/replays/rp_nosuch"), 404),
        (api.call("GET", "/v1/replays/rp_nosuch", key=setup["risk"]), 404),
        (api.call("GET", "/v1/replays", key=setup["risk"]), 403),
        (api.call("GET", "/v1/replays", key=None), 401),
        (api.call("GET", "/v1/replays", query={"limit": "0"}), 400),
        (api.call("GET", "/v1/replays", query={"limit": "101"}), 400),
        (api.call("GET", "/v1/replays", query={"next": "bad"}), 400),
        (api.call("GET", "/v1/replays", query=[("limit", "1"), ("limit", "2")]), 400),
        (api.call("POST", "/v1/replays/rp_nosuch/cancel"), 404),
    ]
    for (status, body), want in cases:
        assert status == want, body
        assert set(body["error"]) == {"code", "message"}
    assert scan() == before == []
    assert H.job_runs() == []  # no job started either
    # the same with a valid body and the admin key: written, and a group key still may not read it
    r = start(api, ok)
    assert api.call("GET", f"/v1/replays/{r['id']}", key=setup["risk"])[0] == 403
    assert api.call("POST", f"/v1/replays/{r['id']}/cancel", key=setup["risk"])[0] == 403
    assert len(scan()) == 1 and len(H.job_runs()) == 1


def test_a_refused_job_start_writes_nothing(api, setup, clock, replay, aws):
    import boto3
    boto3.client("glue", region_name="us-east-1").delete_job(JobName=H.JOB)
    s, b = api.call("POST", "/v1/replays", {"topic": "quotes/sh", "from": 1, "to": 2, "target": {"topic": "replayed"}})
    assert s == 503 and b["error"]["code"] and scan() == []


def test_error_json_fails_it_and_nothing_is_copied(api, setup, clock, replay, aws):
    produce(api, setup, clock, 4)
    r = start(api, {"topic": "quotes/sh", "from": T0, "to": T0 + 10_000, "target": {"topic": "replayed"}})
    H.write_error(aws, r["id"], "Spark: out of memory")
    assert H.run_schedule() == {"replays": 1, "failed": 1}
    s, got = api.call("GET", f"/v1/replays/{r['id']}")
    assert got["status"] == "failed" and got["error"] == "selection: Spark: out of memory" and got["found"] is None
    assert H.topic_messages("replayed") == {}
    assert api.call("POST", f"/v1/replays/{r['id']}/cancel")[0] == 409
    assert H.run_schedule() == {"replays": 0}


def test_a_selection_that_never_comes_fails_in_time(api, setup, clock, replay, aws):
    r = start(api, {"topic": "quotes/sh", "from": T0, "to": T0 + 10_000, "target": {"topic": "replayed"}})
    clock.t += service.SELECT_TIMEOUT_MS + 1
    assert H.run_schedule() == {"replays": 1, "failed": 1}
    assert "in time" in api.call("GET", f"/v1/replays/{r['id']}")[1]["error"]


def test_rows_without_a_body_are_failed_and_an_empty_selection_is_done(api, setup, clock, replay, aws):
    produce(api, setup, clock, 10)
    lo, hi = T0, T0 + 10_000
    want = H.expected(aws, "quotes/sh", lo, hi, None)
    gone = {(want[0]["queue"], want[0]["offset"]), (want[-1]["queue"], want[-1]["offset"])}
    r = start(api, {"topic": "quotes/sh", "from": lo, "to": hi, "target": {"topic": "replayed"}})
    H.write_manifest(aws, r["id"], "quotes/sh", lo, hi, None, drop_body=gone)
    H.run_schedule()
    got = api.call("GET", f"/v1/replays/{r['id']}")[1]
    assert (got["status"], got["found"], got["copied"], got["failed"]) == ("done", 10, 8, 2)
    check_delivered([w for w in want if (w["queue"], w["offset"]) not in gone])
    r2 = start(api, {"topic": "quotes/sh", "from": lo, "to": hi, "filter": {"tags": ["green"]},
                     "target": {"topic": "replayed"}})
    H.write_manifest(aws, r2["id"], "quotes/sh", lo, hi, {"tags": ["green"]})
    H.run_schedule()
    got = api.call("GET", f"/v1/replays/{r2['id']}")[1]
    assert (got["status"], got["found"], got["copied"]) == ("done", 0, 0)


def test_a_crash_between_produce_and_cursor_write_resumes_exactly_once(api, setup, clock, replay, aws, monkeypatch):
    """The copier dies after each chunk's copies are appended and before its cursor write (a new
    chunk each time); the next run copies that chunk again, the derived ids drop it."""
    monkeypatch.setattr(service, "CHUNK", 3)
    produce(api, setup, clock, 20)
    lo, hi = T0, T0 + 20_000
    want = H.expected(aws, "quotes/sh", lo, hi, None)
    real = service.topic_sink
    crashes = 0
    r3 = start(api, {"topic": "quotes/sh", "from": lo, "to": hi, "target": {"topic": "replayed"}, "rate": 1000})
    H.write_manifest(aws, r3["id"], "quotes/sh", lo, hi, None, parts=3)
    n_chunk = [0]

    def crashing_sink(name):
        produce_ = real(name)

        def p(copies):
            n = produce_(copies)
            n_chunk[0] += 1
            if n_chunk[0] == target[0]:
                raise Crash("between produce and cursor write")
            return n
        return p
    monkeypatch.setattr(service, "topic_sink", crashing_sink)
    target = [1]
    while True:
        n_chunk[0] = 0
        try:
            H.run_schedule()
        except Crash:
            crashes += 1
            target[0] = 2  # the next run copies that chunk again, then dies after the next one
            got = ReplayModel.get(r3["id"])
            assert got.status == "copying"
            continue
        break
    got = api.call("GET", f"/v1/replays/{r3['id']}")[1]
    assert crashes == 7  # 20 rows in chunks of 3: each of the 7 chunks crashed once
    assert (got["status"], got["found"], got["copied"], got["failed"]) == ("done", 20, 20, 0)
    assert got["duplicates"] == 20  # each chunk copied again, each copy dropped by its derived id
    check_delivered(want)


def test_a_crash_after_any_store_call_neither_duplicates_nor_loses(api, setup, clock, replay, aws, monkeypatch):
    monkeypatch.setattr(service, "CHUNK", 4)
    produce(api, setup, clock, 10)
    lo, hi = T0, T0 + 10_000
    want = H.expected(aws, "quotes/sh", lo, hi, {"tags": ["red", "blue"]})
    r = start(api, {"topic": "quotes/sh", "from": lo, "to": hi, "filter": {"tags": ["red", "blue"]},
                    "target": {"topic": "replayed"}, "rate": 1000})
    H.write_manifest(aws, r["id"], "quotes/sh", lo, hi, {"tags": ["red", "blue"]}, parts=2)
    k, crashes = 1, 0
    while True:
        with CrashAfter(k, {"ReplayCopierFunction"}) as c:
            crashed, _ = c.run(H.run_schedule)
        if not crashed:
            break
        crashes += 1
        k += 1
    assert crashes >= 10  # (13 seen: the run dies after each of its store calls in turn)
    got = api.call("GET", f"/v1/replays/{r['id']}")[1]
    assert (got["status"], got["found"], got["copied"]) == ("done", 10, 10)
    check_delivered(want)


def test_cancel_stops_the_copier_at_its_next_chunk(api, setup, clock, replay, aws, monkeypatch):
    monkeypatch.setattr(service, "CHUNK", 2)
    produce(api, setup, clock, 12)
    lo, hi = T0, T0 + 12_000
    r = start(api, {"topic": "quotes/sh", "from": lo, "to": hi, "target": {"topic": "replayed"}, "rate": 2})
    # cancel a selecting one: cancelled at once; again: the same answer; the schedule skips it
    rs = start(api, {"topic": "quotes/sh", "from": lo, "to": hi, "target": {"topic": "replayed"}})
    s, b = api.call("POST", f"/v1/replays/{rs['id']}/cancel")
    assert s == 200 and b["status"] == "cancelled"
    assert api.call("POST", f"/v1/replays/{rs['id']}/cancel")[1]["status"] == "cancelled"
    H.write_manifest(aws, r["id"], "quotes/sh", lo, hi, None)
    answers = []

    def cancel_once():  # the operator cancels while the copier waits for its rate
        if not answers:
            answers.append(api.call("POST", f"/v1/replays/{r['id']}/cancel"))
    replay.hooks.append(cancel_once)
    assert H.run_schedule() == {"replays": 1, "cancelled": 1}
    replay.hooks.clear()
    assert answers[0][0] == 200 and answers[0][1]["status"] == "cancelled"
    got = api.call("GET", f"/v1/replays/{r['id']}")[1]
    # the first chunk; the cancel came while the copier waited for its next sending slot, so it read
    # the replay again and stopped before the next chunk (a chunk in hand when a cursor write meets
    # the cancel is recorded: test_cancel_records_the_chunk_in_hand)
    assert got["status"] == "cancelled" and got["copied"] == 2
    assert sum(len(v) for v in H.topic_messages("replayed").values()) == 2
    assert H.run_schedule() == {"replays": 0}
    assert api.call("POST", f"/v1/replays/{r['id']}/cancel")[1]["status"] == "cancelled"


def test_cancel_records_the_chunk_in_hand(api, setup, clock, replay, aws, monkeypatch):
    """A cancel between a chunk's produce and its cursor write: the chunk is counted on the
    cancelled item, nothing after it is copied."""
    monkeypatch.setattr(service, "CHUNK", 3)
    produce(api, setup, clock, 9)
    lo, hi = T0, T0 + 9_000
    r = start(api, {"topic": "quotes/sh", "from": lo, "to": hi, "target": {"topic": "replayed"}, "rate": 1000})
    H.write_manifest(aws, r["id"], "quotes/sh", lo, hi, None)
    real = service.topic_sink
    calls = [0]

    def sink(name):
        p = real(name)

        def produce_(copies):
            n = p(copies)
            calls[0] += 1
            if calls[0] == 2:
                assert api.call("POST", f"/v1/replays/{r['id']}/cancel")[0] == 200
            return n
        return produce_
    monkeypatch.setattr(service, "topic_sink", sink)
    H.run_schedule()
    got = api.call("GET", f"/v1/replays/{r['id']}")[1]
    assert (got["status"], got["copied"]) == ("cancelled", 6)
    assert sum(len(v) for v in H.topic_messages("replayed").values()) == 6


def test_a_copy_outgrowing_a_segment_entry_goes_by_claim_and_claims_are_carried(api, setup, clock, replay, aws):
    """A body just under the inline limit with a short id: the copy's longer derived id pushes it
    over, so its body goes to the lake bucket (bodies/*); a claim-checked source body is copied to
    the copy's own object (its lifetime starts again: the bucket expires bodies/ by age) — and the
    copy is still delivered after the source's object is gone."""
    clock.t = T0
    base = {"id": "a", "key": "k", "properties": {}, "tags": []}
    hdr = len(json.dumps({"id": "a", "key": "k", "tags": [], "properties": {}, "produced_at": T0},
                         separators=(",", ":")).encode())
    near = {**base, "body": "x" * (claims.INLINE_BYTES - hdr)}
    big = {**base, "id": "b", "body": "y" * (400 * 1024)}
    for m in (near, big):
        s, b = api.call("POST", T, {"producer": "feed", "messages": [m]}, key=setup["feed"])
        assert s == 200, b
    r = start(api, {"topic": "quotes/sh", "from": T0, "to": T0 + 1, "target": {"topic": "replayed"}})
    H.write_manifest(aws, r["id"], "quotes/sh", T0, T0 + 1, None)
    H.run_schedule()
    got = api.call("GET", f"/v1/replays/{r['id']}")[1]
    assert (got["status"], got["copied"]) == ("done", 2)
    msgs = [m for ms in H.topic_messages("replayed").values() for m in ms]
    by_body = {m["claim"]["size"] if m.get("claim") else -1: m for m in msgs}
    assert set(by_body) == {len(near["body"]), 400 * 1024}
    # the big one names its own copy of the source's object; the near one got its own (put by the copier)
    src = {m["id"]: m for ms in H.topic_messages("quotes/sh").values() for m in ms}
    copied = by_body[400 * 1024]["claim"]
    assert copied["key"] != src["b"]["claim"]["key"]
    assert {**copied, "key": None} == {**src["b"]["claim"], "key": None}  # same size and digest
    assert "claim" not in src["a"] or src["a"].get("claim") is None
    import os
    key = by_body[len(near["body"])]["claim"]["key"]
    assert aws["s3"].get_object(Bucket=os.environ["LAKE_BUCKET"], Key=key)["Body"].read() == near["body"].encode()
    # the source's object expires (the bucket's lifecycle, by age): the copy keeps its body
    aws["s3"].delete_object(Bucket=os.environ["LAKE_BUCKET"], Key=src["b"]["claim"]["key"])
    # through the API: a consumer of replayed reads both bodies
    s, c = api.call("POST", "/v1/clients", {"name": "rc", "role": "consumer", "topics": ["replayed"]})
    got_bodies = []
    for _ in range(6):
        s, b = api.call("GET", "/v1/topics/replayed/messages", query={"group": "rc", "max": 10}, key=c["api_key"])
        assert s == 200, b
        got_bodies += [m["body"] for m in b["messages"]]
        if b["messages"]:
            api.call("POST", "/v1/acks", {"group": "rc", "receipt": b["receipt"]}, key=c["api_key"])
    assert sorted(got_bodies) == sorted([near["body"], big["body"]])


def test_the_list_pages_newest_first(api, setup, clock, replay):
    ids = []
    for i in range(5):
        clock.t = T0 + i
        ids.append(start(api, {"topic": "quotes/sh", "from": 1, "to": 2, "target": {"topic": "replayed"}})["id"])
    s, p1 = api.call("GET", "/v1/replays", query={"limit": "2"})
    assert s == 200 and [x["id"] for x in p1["replays"]] == ids[::-1][:2] and p1["next"]
    s, p2 = api.call("GET", "/v1/replays", query={"limit": "2", "next": p1["next"]})
    s, p3 = api.call("GET", "/v1/replays", query={"limit": "2", "next": p2["next"]})
    assert [x["id"] for x in p2["replays"] + p3["replays"]] == ids[::-1][2:] and "next" not in p3
    s, everything = api.call("GET", "/v1/replays")
    assert [x["id"] for x in everything["replays"]] == ids[::-1] and "next" not in everything
    assert everything["replays"][0] == api.call("GET", f"/v1/replays/{ids[-1]}")[1]


def test_the_role_allows_what_the_copier_needs_and_not_more(api, setup, clock, replay, aws):
    """As either replay function: the lake's raw data, another job and another table are refused."""
    import os

    import boto3
    from botocore.exceptions import ClientError

    from infra.local import interceptor

    s3 = boto3.client("s3", region_name="us-east-1")
    glue = boto3.client("glue", region_name="us-east-1")
    ddb = boto3.client("dynamodb", region_name="us-east-1")
    bucket = os.environ["LAKE_BUCKET"]
    refused = [lambda: s3.get_object(Bucket=bucket, Key="raw/kind=messages/x.jsonl.gz"),
               lambda: s3.put_object(Bucket=bucket, Key="replays/x/selection.json", Body=b"{}"),
               lambda: s3.list_objects_v2(Bucket=bucket, Prefix="raw/"),
               lambda: glue.start_job_run(JobName="lakeq-local-backlog"),
               lambda: ddb.scan(TableName=os.environ["OFFSETS_TABLE"]),
               lambda: ddb.delete_item(TableName=os.environ["REPLAYS_TABLE"], Key={"id": {"S": "x"}})]
    copier_only = [lambda: glue.start_job_run(JobName="lakeq-local-replay-select"),  # the routes start jobs
                   lambda: ddb.scan(TableName=os.environ["REPLAYS_TABLE"])]
    routes_only = [lambda: s3.get_object(Bucket=bucket, Key="replays/x/selection.json"),  # the copier reads
                   lambda: ddb.batch_get_item(RequestItems={os.environ["DEDUP_TABLE"]: {"Keys": [
                       {"topic": {"S": "t"}, "id": {"S": "x"}}]}})]
    for fn, calls in (("ReplayFunction", refused + routes_only), ("ReplayCopierFunction", refused + copier_only)):
        with interceptor.acting_as(fn):
            for call in calls:
                with pytest.raises(ClientError) as e:
                    call()
                assert "AccessDenied" in e.value.response["Error"]["Code"], fn


def test_store_calls_per_chunk(api, setup, clock, replay, aws):
    """What one copier run costs (docs/design.md "Replay"): per chunk of 100 copies into a topic of
    3 queues, one dedup BatchGetItem, per target queue a head read and one transaction, its sending
    slot's claim and one cursor write; per run the live Query, the replay's reads and one GetObject per manifest part."""
    from collections import Counter

    from tests.crash import CountCalls

    produce(api, setup, clock, 200)
    lo, hi = T0, T0 + 200_000
    r = start(api, {"topic": "quotes/sh", "from": lo, "to": hi, "target": {"topic": "replayed"}, "rate": 1000})
    H.write_manifest(aws, r["id"], "quotes/sh", lo, hi, None, parts=2)
    H.run_schedule()  # selecting → copying, and the copy
    got = api.call("GET", f"/v1/replays/{r['id']}")[1]
    assert (got["status"], got["copied"]) == ("done", 200)
    assert api.call("POST", "/v1/topics", {"name": "other", "queues": 3})[0] == 201
    r2 = start(api, {"topic": "quotes/sh", "from": lo, "to": hi, "target": {"topic": "other"}, "rate": 1000})
    H.write_manifest(aws, r2["id"], "quotes/sh", lo, hi, None, parts=2)
    with CountCalls({"ReplayCopierFunction"}) as c:
        H.run_schedule()
    ops = Counter(f"{x.service}.{x.operation}" + (f"({x.params.get('TableName', '').rsplit('-', 1)[-1]})"
                                                   if "TableName" in x.params else "") for x in c.calls)
    print(dict(ops))
    assert api.call("GET", f"/v1/replays/{r2['id']}")[1]["copied"] == 200
    chunks = 2  # 200 rows, chunks of 100
    assert ops["dynamodb.BatchGetItem"] == chunks
    assert ops["dynamodb.TransactWriteItems"] <= chunks * 3 + 2  # a write per target queue (+ a lost race)
    # per chunk its sending slot's claim and its cursor write; selected, done, unlive
    assert ops["dynamodb.UpdateItem(replays)"] == 2 * chunks + 3
    assert ops["s3.GetObject"] == 1 + 2  # selection.json, then each part once (streamed)


def test_a_group_target_is_wired_to_group_target(api, setup, clock, replay, aws, monkeypatch):
    """The copier's calls into lakeq.replay.group_target (helper replaygroup's module, replaced here
    by a recorder): begin once when copying starts, sink per chunk (rows with "pos"), end when done;
    end(cancelled=True) on a cancel, end on a failed selection."""
    import sys
    import types

    import lakeq.replay as pkg

    calls = []
    fake = types.ModuleType("lakeq.replay.group_target")
    fake.begin = lambda rid, topic, group: calls.append(("begin", rid, topic, group))
    fake.end = lambda rid, topic, group, cancelled: calls.append(("end", rid, topic, group, cancelled))

    def sink(rid, topic, group):
        def put(copies):
            calls.append(("sink", rid, [c.row["pos"] for c in copies], [c.id for c in copies]))
            return len(copies)
        return put
    fake.sink = sink
    monkeypatch.setitem(sys.modules, "lakeq.replay.group_target", fake)
    monkeypatch.setattr(pkg, "group_target", fake, raising=False)
    monkeypatch.setattr(service, "CHUNK", 4)
    produce(api, setup, clock, 6)
    lo, hi = T0, T0 + 6_000
    want = H.expected(aws, "quotes/sh", lo, hi, None)
    r = start(api, {"topic": "quotes/sh", "from": lo, "to": hi, "target": {"group": "risk"}, "rate": 1000})
    assert r["target"] == {"group": "risk"}
    H.write_manifest(aws, r["id"], "quotes/sh", lo, hi, None)
    H.run_schedule()
    rid = r["id"]
    assert calls[0] == ("begin", rid, "quotes/sh", "risk") and calls[-1] == ("end", rid, "quotes/sh", "risk", False)
    sinks = [c for c in calls if c[0] == "sink"]
    assert [p for c in sinks for p in c[2]] == list(range(6)) and [len(c[2]) for c in sinks] == [4, 2]
    assert sorted(i for c in sinks for i in c[3]) == sorted(H.source_of("quotes/sh", want))
    assert api.call("GET", f"/v1/replays/{rid}")[1]["status"] == "done"
    calls.clear()
    r2 = start(api, {"topic": "quotes/sh", "from": lo, "to": hi, "target": {"group": "risk"}})
    assert api.call("POST", f"/v1/replays/{r2['id']}/cancel")[0] == 200
    r3 = start(api, {"topic": "quotes/sh", "from": lo, "to": hi, "target": {"group": "risk"}})
    H.write_error(aws, r3["id"], "boom")
    H.run_schedule()
    assert calls == [("end", r2["id"], "quotes/sh", "risk", True), ("end", r3["id"], "quotes/sh", "risk", False)]
    # a copier that died between the final status and end: the next run tells the target (an outbox)
    calls.clear()
    ReplayModel(rid).update(actions=[ReplayModel.live.set("1")])
    assert H.run_schedule() == {"replays": 1, "done": 1}
    assert calls == [("end", rid, "quotes/sh", "risk", False)] and H.run_schedule() == {"replays": 0}


def test_every_statement_of_the_role_is_used(api, setup, clock, replay, aws, aws_rules, tmp_path):
    """Least privilege, the other way round: a flow that starts, lists, shows, selects, copies (a
    copy going by claim check; an append losing a race to a producer of the target topic, so the
    fresh head read runs) and cancels uses each of the role's own statements (the SAM read
    policies aside). The producer's messages and the copy are all there afterwards."""
    from infra.local import interceptor

    class Race:
        """Before ReplayCopierFunction's first append transaction, a producer appends to every queue of
        the target: the copier's write at the head it read fails, it reads the head afresh."""
        fired = False

        def before(self, call):
            if call.function == "ReplayCopierFunction" and call.operation == "TransactWriteItems" and not self.fired:
                self.fired = True
                msgs = [{"body": f"rival {i}", "key": f"r{i}"} for i in range(12)]
                assert api.call("POST", "/v1/topics/replayed/messages", {"producer": "rp", "messages": msgs})[0] == 200

        def after(self, call, response):
            return response
    assert api.call("POST", "/v1/clients", {"name": "rp", "role": "producer", "topics": ["replayed"]})[0] == 201
    record = tmp_path / "iam.txt"
    aws_rules.record_file = str(record)
    clock.t = T0
    hdr = len(json.dumps({"id": "a", "key": "k", "tags": [], "properties": {}, "produced_at": T0},
                         separators=(",", ":")).encode())
    m = {"id": "a", "key": "k", "properties": {}, "tags": [], "body": "x" * (claims.INLINE_BYTES - hdr)}
    big = {"id": "b", "key": "k", "properties": {}, "tags": [], "body": "y" * (400 * 1024)}  # copied in the bucket
    assert api.call("POST", T, {"producer": "feed", "messages": [m, big]}, key=setup["feed"])[0] == 200
    r = start(api, {"topic": "quotes/sh", "from": T0, "to": T0 + 1, "target": {"topic": "replayed"}})
    H.run_schedule()  # selecting: listed, nothing yet
    H.write_manifest(aws, r["id"], "quotes/sh", T0, T0 + 1, None)
    race = Race()
    with interceptor.hooked(race):
        H.run_schedule()
    assert race.fired and api.call("GET", f"/v1/replays/{r['id']}")[1]["copied"] == 2
    held = [m for ms in H.topic_messages("replayed").values() for m in ms]
    assert sorted(m["id"] for m in held if m["id"].startswith("rp-")) == sorted(H.source_of("quotes/sh", [
        {"queue": q, "offset": o} for q, ms in H.topic_messages("quotes/sh").items() for o in range(len(ms))]))
    assert len(held) == 14
    assert api.call("GET", "/v1/replays")[0] == 200 and api.call("GET", f"/v1/replays/{r['id']}")[0] == 200
    r2 = start(api, {"topic": "quotes/sh", "from": T0, "to": T0 + 1, "target": {"topic": "replayed"}})
    assert api.call("POST", f"/v1/replays/{r2['id']}/cancel")[0] == 200
    from lakeq.replay import group_target as gt
    r3 = start(api, {"topic": "quotes/sh", "from": T0, "to": T0 + 1, "target": {"group": "risk"}})
    gt.begin(r3["id"], "quotes/sh", "risk")  # as the copier does when copying starts
    assert api.call("POST", f"/v1/replays/{r3['id']}/cancel")[0] == 200  # closes the group target
    from infra.local.aws_rules import _wild

    lines = [line.split() for line in record.read_text().splitlines()]
    table = "arn:aws:dynamodb:us-east-1:123456789012:table/lakeq-local-"
    unused = {}
    for function, n in (("ReplayFunction", 4), ("ReplayCopierFunction", 11)):
        used = {(a, res) for fn, a, res, d in lines if fn == function and d == "allow"}
        own = [st for st in aws_rules.roles[function].statements  # the template block's Statement list
               if isinstance(st["Resource"], str) and not st["Action"][0].startswith(("logs:", "xray:"))]
        assert len(own) == n, function
        granted = [(a, st["Resource"]) for st in own for a in st["Action"]]
        unused[function] = [(a, res) for a, res in granted if not any(a == ua and _wild(res, ur, True)
                                                                      for ua, ur in used)]
    # only the group target (test_a_replay_into_a_group_end_to_end_as_replay_function) uses these
    assert unused == {"ReplayFunction": [], "ReplayCopierFunction": [
        ("dynamodb:PutItem", table + "queues"), ("dynamodb:UpdateItem", table + "clients"),
        ("dynamodb:GetItem", table + "offsets")]}


def test_a_replay_into_a_group_end_to_end_as_replay_function(api, setup, clock, replay, aws, aws_rules):
    """The real group target (lakeq.replay.group_target) driven by the schedule as ReplayCopierFunction
    (its role applies): the group gets exactly the selection, in order per source queue, once; a
    second group of the topic gets nothing of it; the replay stays ``live`` (the schedule asks
    again) until the group settled every copy, then the marker goes and the replay leaves ``live``.
    Pulls never write the group's item (ConsumeFunction has no write on ClientsTable)."""
    from lakeq.admin import auth as lq_auth
    from lakeq.store.models import ClientModel

    s, other = api.call("POST", "/v1/clients", {"name": "audit", "role": "consumer", "topics": ["quotes"]})
    assert s == 201
    produce(api, setup, clock, 20)
    lo, hi = T0 + 2_000, T0 + 18_000
    flt = {"tags": ["red"]}
    r = start(api, {"topic": "quotes/sh", "from": lo, "to": hi, "filter": flt, "target": {"group": "risk"},
                    "rate": 1000})
    want = H.expected(aws, "quotes/sh", lo, hi, flt)
    assert len(want) == 8  # even i in 2..16
    H.write_manifest(aws, r["id"], "quotes/sh", lo, hi, flt)
    assert H.run_schedule() == {"replays": 1, "done": 1}
    assert ClientModel.get("risk").replays == {f"{r['id']}|quotes/sh"}

    def pull_all(key, group):
        got, receipt = [], None
        for _ in range(20):
            q = {"group": group, "max": 10, **({"ack": receipt} if receipt else {})}
            s, b = api.call("GET", T, query=q, key=key)
            assert s == 200, b
            if not b["messages"]:
                return got
            got += [(b["receipt"].split(":")[1].startswith("~r."), m) for m in b["messages"]]
            receipt = b["receipt"]
        raise AssertionError("never drained")

    lq_auth.clear_caches()
    # the replay's copies (same ids as their sources; batches of the list's receipts) come first,
    # each once; then the topic's own 20
    got = pull_all(setup["risk"], "risk")
    copies = [m for from_list, m in got if from_list]
    assert [from_list for from_list, _ in got] == [True] * len(want) + [False] * 20
    assert sorted(m["id"] for m in copies) == sorted(w["id"] for w in want)
    by_queue: dict[int, list[int]] = {}
    for m in copies:
        by_queue.setdefault(m["queue"], []).append(m["offset"])
    assert all(v == sorted(v) for v in by_queue.values())  # in order per source queue
    assert len(pull_all(other["api_key"], "audit")) == 20  # the other group: its topic only
    assert ClientModel.get("risk").replays == {f"{r['id']}|quotes/sh"}  # no pull wrote it
    # the schedule: drained and settled, so the marker goes and the replay leaves live
    assert H.run_schedule() == {"replays": 1, "done": 1}
    assert ClientModel.get("risk").replays is None
    assert H.run_schedule() == {"replays": 0}
    assert [d for d in aws_rules.denied if d[0] in ("ReplayFunction", "ReplayCopierFunction", "ConsumeFunction")] == []


def test_a_replay_whose_turn_fails_does_not_stop_the_others(api, setup, clock, replay, aws):
    """Two live replays; the schedule takes them oldest id first. The first one's manifest part is
    gone (its turn raises NoSuchKey): it is logged and counted in ``errors``, stays copying for the
    next invocation, and the second is still copied in the same invocation."""
    import os

    produce(api, setup, clock, 10)
    lo, hi = T0, T0 + 10_000
    body = {"topic": "quotes/sh", "from": lo, "to": hi, "target": {"topic": "replayed"}, "rate": 1000}
    ids = sorted([start(api, body)["id"], start(api, body)["id"]])
    broken = H.write_manifest(aws, ids[0], "quotes/sh", lo, hi, None)
    H.write_manifest(aws, ids[1], "quotes/sh", lo, hi, None)
    for p in broken["parts"]:
        aws["s3"].delete_object(Bucket=os.environ[H.BUCKET_ENV], Key=p["key"])
    assert H.run_schedule() == {"replays": 2, "errors": 1, "done": 1}
    got = {i: api.call("GET", f"/v1/replays/{i}")[1] for i in ids}
    assert (got[ids[0]]["status"], got[ids[0]]["copied"]) == ("copying", 0)
    assert (got[ids[1]]["status"], got[ids[1]]["copied"]) == ("done", 10)
    check_delivered(H.expected(aws, "quotes/sh", lo, hi, None))
    assert H.run_schedule() == {"replays": 1, "errors": 1}  # tried again, still failing, logged


def _copying_into_group(api, setup, clock, replay, aws, group="risk"):
    """A replay into ``group`` whose copying has begun (its list made, the group's marker set), as
    the copier leaves it between two chunks."""
    from lakeq.replay import group_target as gt

    lo, hi = T0, T0 + 4_000
    r = start(api, {"topic": "quotes/sh", "from": lo, "to": hi, "target": {"group": group}, "rate": 1})
    ReplayModel(r["id"]).update(actions=[ReplayModel.status.set("copying")])
    gt.begin(r["id"], "quotes/sh", group)
    return r["id"]


def test_cancelling_a_replay_into_a_group_as_replay_function(api, setup, clock, replay, aws, aws_rules):
    """Issue 30 (9): the cancel of a replay into a group answered 500 — ReplayFunction's role could not
    write the list's queue item nor the group's marker, and the status was already ``cancelled``.
    Under the template's IAM it answers 200, the group stops seeing the list at once, and nothing
    is denied; the schedule then has nothing left to close."""
    from lakeq.store.models import ClientModel
    from lakeq.store.replay_lists import ReplayListRepo

    produce(api, setup, clock, 4)
    rid = _copying_into_group(api, setup, clock, replay, aws)
    assert ClientModel.get("risk", consistent_read=True).replays == {f"{rid}|quotes/sh"}
    s, b = api.call("POST", f"/v1/replays/{rid}/cancel")
    assert (s, b.get("status")) == (200, "cancelled"), b
    assert ClientModel.get("risk", consistent_read=True).replays is None
    assert ReplayListRepo.queue(rid).ended_at is not None
    assert [d for d in aws_rules.denied if d[0] == "ReplayFunction"] == []
    assert H.run_schedule() == {"replays": 0}  # closed: no longer live
    assert api.call("POST", f"/v1/replays/{rid}/cancel")[1]["status"] == "cancelled"


def test_a_cancel_cut_short_after_any_store_call_is_finished_by_its_retry(api, setup, clock, replay, aws):
    """The cancel dies after each of its store calls in turn (as a Lambda can); the operator's retry
    answers 200 ``cancelled`` and leaves no half state: the marker is gone and the replay is no
    longer live (before, a retry of a cancelled replay answered at once and left the marker to the
    schedule's next run, serving the cancelled copies until then)."""
    from lakeq.store.models import ClientModel
    from tests.crash import count_calls

    produce(api, setup, clock, 4)
    rid = _copying_into_group(api, setup, clock, replay, aws)
    n, (s, _) = count_calls(lambda: api.call("POST", f"/v1/replays/{rid}/cancel"), {"ReplayFunction"})
    assert s == 200 and n >= 4
    for k in range(1, n + 1):
        rid = _copying_into_group(api, setup, clock, replay, aws)
        with CrashAfter(k, {"ReplayFunction"}) as c:
            crashed, _ = c.run(lambda: api.call("POST", f"/v1/replays/{rid}/cancel"))
        assert crashed or k == n, k
        s, b = api.call("POST", f"/v1/replays/{rid}/cancel")
        assert (s, b["status"]) == (200, "cancelled"), (k, b)
        assert f"{rid}|quotes/sh" not in (ClientModel.get("risk", consistent_read=True).replays or set()), k
        assert ReplayModel.get(rid, consistent_read=True).live is None, k


def test_two_overlapping_copier_runs_keep_the_rate_together(api, setup, clock, replay, aws, monkeypatch):
    """Issue 30 (9): the copier's rate was per run, so a second invocation overlapping the first
    (EventBridge delivers a schedule's event at least once) doubled it. Here the second run starts
    during the first one's first wait and copies for 10 s, then the first goes on; in simulated time
    (the copier's clock moves only when it sleeps), the new copies between any two chunks are at
    most ``rate`` a second plus one chunk."""
    monkeypatch.setattr(service, "CHUNK", 5)
    rate = 5
    produce(api, setup, clock, 120)
    lo, hi = T0, T0 + 120_000
    r = start(api, {"topic": "quotes/sh", "from": lo, "to": hi, "target": {"topic": "replayed"}, "rate": rate})
    H.write_manifest(aws, r["id"], "quotes/sh", lo, hi, None)
    assert H.run_schedule(budget_ms=1) == {"replays": 1, "copying": 1}  # selected; nothing copied yet
    real = service.topic_sink
    copied: list[tuple[float, int]] = []  # (simulated s, new copies) per chunk produced

    def sink(name):
        put = real(name)

        def counted_put(copies):
            n = put(copies)
            copied.append((replay.t, n))
            return n
        return counted_put
    monkeypatch.setattr(service, "topic_sink", sink)
    second = []

    def overlap():  # the schedule's event delivered again while the first run waits (once)
        if not second:
            second.append(None)
            second[0] = H.run_schedule(budget_ms=10_000)
    replay.hooks.append(overlap)
    first = H.run_schedule(budget_ms=60_000)
    replay.hooks.clear()
    assert second[0] == {"replays": 1, "copying": 1} and first["replays"] == 1
    got = api.call("GET", f"/v1/replays/{r['id']}")[1]
    assert (got["status"], got["copied"]) == ("done", 120), got
    assert sum(n for _, n in copied) == 120
    times = sorted(copied)
    for i in range(len(times)):
        for j in range(i, len(times)):
            n = sum(c for _, c in times[i:j + 1])
            assert n <= rate * (times[j][0] - times[i][0]) + 5, (times[i], times[j], n, times)
