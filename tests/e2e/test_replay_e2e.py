"""Replay from the lake (issue 18.1) on the local stack, over HTTP as a client would: messages
produced to a topic reach the lake through the real archiver; ``POST /v1/replays`` (admin) starts
the selection job (the stack runs it on ``local[2]`` when ReplayFunction calls Glue's StartJobRun);
ReplayFunction's schedule (fired through ``/_local/schedules/run``) copies the selection. Into a
group: that group re-receives exactly the messages of the time range the filter keeps, once, in
order per queue, before its topic's own; another group of the topic receives nothing of it. Into a
topic: the copies are produced there (derived ids), exactly the selection. ``GET /v1/replays/{id}``
shows the progress, ``GET /v1/replays`` lists both. A dry run of the group's request ends ``selected``
with the count and sample of the same selection and delivers nothing."""
from __future__ import annotations

import time
import uuid

import pytest
import requests

pytest.importorskip("pyspark")


def until_ended(stack, *ids: str, timeout: float = 600) -> None:
    """Fire ReplayCopierFunction's schedule until every replay of ``ids`` has ended (the job runs on
    Spark ``local[2]``; each schedule run moves what it can)."""
    deadline = time.monotonic() + timeout
    while True:
        run = requests.post(f"{stack.url}/_local/schedules/run", params={"name": "ReplayCopierFunction"}, timeout=120)
        assert run.status_code == 200, run.text
        got = {r["id"]: r for r in stack.call("GET", "/v1/replays")["replays"]}
        states = [got[i]["status"] for i in ids]
        if all(s in ("done", "failed", "cancelled", "selected") for s in states):
            return
        assert time.monotonic() < deadline, (states, stack.stderr[-4000:])
        time.sleep(2)


def test_replay_into_a_group_and_into_a_topic(stack):
    from infra.local.glue import spark_missing

    if spark_missing():
        pytest.skip(spark_missing())
    tag = uuid.uuid4().hex[:6]
    topic, copies_topic = f"rp-{tag}", f"rp-copies-{tag}"
    stack.call("POST", "/v1/topics", json={"name": topic, "queues": 2}, status=201)
    stack.call("POST", "/v1/topics", json={"name": copies_topic, "queues": 2}, status=201)
    feed = stack.call("POST", "/v1/clients", json={"name": f"feed-{tag}", "role": "producer", "topics": [topic]},
                      status=201)["api_key"]
    keys = {g: stack.call("POST", "/v1/clients", status=201,
                          json={"name": g, "role": "consumer", "topics": [topic, copies_topic]})["api_key"]
            for g in (f"billing-{tag}", f"audit-{tag}")}
    billing, audit = keys

    t_from = int(time.time() * 1000) - 1000
    msgs = [{"id": f"m{i}", "body": f"m{i} é", "key": f"k{i % 3}", "tags": ["even" if i % 2 == 0 else "odd"],
             "properties": {"n": i}} for i in range(12)]
    sent = stack.call("POST", f"/v1/topics/{topic}/messages", feed, json={"producer": f"feed-{tag}", "messages": msgs})
    where = {m["id"]: (m["queue"], m["offset"]) for m in sent["results"]}
    t_to = int(time.time() * 1000) + 1000
    flt = {"conditions": [{"field": "n", "range": [0, 8]}], "tags": ["even"]}  # n even, 0 ≤ n ≤ 8
    want = {f"m{i}" for i in (0, 2, 4, 6, 8)}

    into_group = stack.call("POST", "/v1/replays", status=202, json={
        "topic": topic, "from": t_from, "to": t_to, "filter": flt, "target": {"group": billing}, "rate": 1000})
    into_topic = stack.call("POST", "/v1/replays", status=202, json={
        "topic": topic, "from": t_from, "to": t_to, "filter": flt, "target": {"topic": copies_topic}})
    # a dry run of the group's request (issue 32): the count and sample, nothing delivered
    dry = stack.call("POST", "/v1/replays", status=202, json={
        "topic": topic, "from": t_from, "to": t_to, "filter": flt, "target": {"group": billing}, "dry_run": True})
    assert into_group["status"] == into_topic["status"] == dry["status"] == "selecting"

    until_ended(stack, into_group["id"], into_topic["id"], dry["id"])
    d = stack.call("GET", f"/v1/replays/{dry['id']}")
    assert (d["status"], d["found"], d["copied"], d["dry_run"]) == ("selected", 5, 0, True), (d, stack.stderr[-3000:])
    assert sorted(x["id"] for x in d["sample"]) == sorted(want)
    assert all((x["queue"], x["offset"]) == where[x["id"]] and x["size"] == len(f"{x['id']} é".encode())
               for x in d["sample"])
    for r in (into_group, into_topic):
        r = stack.call("GET", f"/v1/replays/{r['id']}")
        assert (r["status"], r["found"], r["copied"], r["failed"]) == ("done", 5, 5, 0), (r, stack.stderr[-3000:])

    def pull_all(key, group, t):
        got, receipt = [], None
        for _ in range(30):
            b = stack.call("GET", f"/v1/topics/{t}/messages", key,
                           params={"group": group, "max": 10, **({"ack": receipt} if receipt else {})})
            if not b["messages"]:
                return got
            got += [(b["receipt"].split(":")[1].startswith("~r."), m) for m in b["messages"]]
            receipt = b["receipt"]
        raise AssertionError("never drained")

    # into the group: its copies first (same ids and coordinates as the originals; the dry run's none),
    # then the topic's 12
    got = pull_all(keys[billing], billing, topic)
    copies = [m for from_list, m in got if from_list]
    assert [from_list for from_list, _ in got] == [True] * 5 + [False] * 12, got
    assert sorted(m["id"] for m in copies) == sorted(want)
    assert all((m["queue"], m["offset"]) == where[m["id"]] and m["body"] == f"{m['id']} é" for m in copies)
    for q in {m["queue"] for m in copies}:
        offs = [m["offset"] for m in copies if m["queue"] == q]
        assert offs == sorted(offs)  # in order per queue
    assert [from_list for from_list, _ in pull_all(keys[audit], audit, topic)] == [False] * 12  # untouched

    # into a topic: the copies are new messages there, exactly the selection, once
    got = [m for _, m in pull_all(keys[audit], audit, copies_topic)]
    assert sorted(m["body"] for m in got) == sorted(f"{i} é" for i in want)
    assert all(m["id"].startswith("rp-") for m in got) and len({m["id"] for m in got}) == 5


def test_a_replay_across_a_deleted_and_recreated_queue_copies_both_logs(stack):
    """A topic deleted through the SQS endpoint (DeleteQueue) and made again restarts its queue at
    offset 0: the lake holds two messages at each (queue, offset). A replay of the whole range
    copies all six, once each — before the lake kept incarnations apart, the job took the new log's
    messages for duplicates of the old one's and copied three."""
    from botocore.config import Config

    from infra.local.glue import spark_missing

    if spark_missing():
        pytest.skip(spark_missing())
    import boto3

    url, tag = stack.url, uuid.uuid4().hex[:6]
    topic, copies_topic, feed = f"rq-{tag}", f"rq-copies-{tag}", f"rq-feed-{tag}"
    stack.call("POST", "/v1/topics", json={"name": copies_topic, "queues": 1}, status=201)
    cred = stack.call("GET", "/v1/sqs-credentials/admin")
    sqs = boto3.client("sqs", endpoint_url=url, region_name="us-east-1", aws_access_key_id=cred["access_key_id"],
                       aws_secret_access_key=cred["secret_access_key"], config=Config(retries={"max_attempts": 1}))
    t_from = int(time.time() * 1000) - 1000
    key = None
    for inc in range(2):
        stack.call("POST", "/v1/topics", json={"name": topic, "queues": 1}, status=201)
        if key is None:
            key = stack.call("POST", "/v1/clients", status=201,
                             json={"name": feed, "role": "producer", "topics": [topic]})["api_key"]
        sent = stack.call("POST", f"/v1/topics/{topic}/messages", key, json={
            "producer": feed, "messages": [{"body": f"inc{inc}-m{i}"} for i in range(3)]})
        assert [(m["queue"], m["offset"]) for m in sent["results"]] == [(0, 0), (0, 1), (0, 2)]
        if inc == 0:
            sqs.delete_queue(QueueUrl=sqs.get_queue_url(QueueName=topic)["QueueUrl"])
    t_to = int(time.time() * 1000) + 1000
    rp = stack.call("POST", "/v1/replays", status=202, json={
        "topic": topic, "from": t_from, "to": t_to, "target": {"topic": copies_topic}, "rate": 1000})
    until_ended(stack, rp["id"])
    r = stack.call("GET", f"/v1/replays/{rp['id']}")
    assert (r["status"], r["found"], r["copied"], r["failed"]) == ("done", 6, 6, 0), (r, stack.stderr[-3000:])
    reader = stack.call("POST", "/v1/clients", status=201,
                        json={"name": f"rq-reader-{tag}", "role": "consumer", "topics": [copies_topic]})["api_key"]
    b = stack.call("GET", f"/v1/topics/{copies_topic}/messages", reader,
                   params={"group": f"rq-reader-{tag}", "max": 10})
    # in produce order: the deleted log's three, then the new one's
    assert [m["body"] for m in b["messages"]] == [f"inc{inc}-m{i}" for inc in range(2) for i in range(3)]
    assert len({m["id"] for m in b["messages"]}) == 6
