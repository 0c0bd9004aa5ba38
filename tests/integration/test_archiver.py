"""Archiver (functions/archiver): DynamoDB-stream samples (events/stream_*.json) → lake objects:
Hive partitions by event hour, one object per batch and partition, idempotent on redelivery."""
from __future__ import annotations

import base64
import copy
import importlib.util
import json
import os
from pathlib import Path

import pytest

from lakeq.lake import archive as lake

ROOT = Path(__file__).resolve().parents[2]
BUCKET = os.environ["LAKE_BUCKET"]


def sample(name: str) -> dict:
    return json.loads((ROOT / "events" / name).read_text())


@pytest.fixture
def archiver(aws):
    spec = importlib.util.spec_from_file_location("archiver_app", ROOT / "functions" / "archiver" / "app.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def objects(s3) -> dict[str, list[dict]]:
    out = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix="raw/"):
        for o in page.get("Contents", []):
            out[o["Key"]] = lake.decode_rows(s3.get_object(Bucket=BUCKET, Key=o["Key"])["Body"].read())
    return out


def test_segments_batch_is_partitioned_by_hour_and_holds_no_bodies(aws, archiver):
    out = archiver.lambda_handler(sample("stream_segments.json"), None)
    every = objects(aws["s3"])
    assert sorted(every) == out["objects"]
    objs = {k: v for k, v in every.items() if k.startswith("raw/kind=messages/")}
    assert len(objs) == 2  # three segments, two hours: never one object per message
    keys = sorted(objs)
    assert keys[0].startswith("raw/kind=messages/dt=2026-01-01/hour=00/messages-")
    assert keys[1].startswith("raw/kind=messages/dt=2026-01-01/hour=01/messages-")
    first, second = objs[keys[0]], objs[keys[1]]
    assert [(r["topic"], r["queue"], r["offset"]) for r in first] == [
        ("quotes", 0, 0), ("quotes", 0, 1), ("quotes", 0, 2), ("quotes/sh", 1, 0)]
    assert [(r["topic"], r["queue"], r["offset"]) for r in second] == [("quotes", 0, 3), ("quotes", 0, 4)]
    r0 = first[0]
    assert r0["id"] == "quotes-0-0" and r0["tags"] == ["A"] and r0["size"] == 5
    assert r0["properties"] == {"type": "A", "price": 10.5} and r0["produced_at"] == 1767225601000
    assert "body" not in r0
    assert first[2]["size"] == 600  # from a zlib-compressed segment
    # key = shard + first/last sequence number of the rows in the object
    seqs = [r["seq"] for r in first]
    assert keys[0].endswith(f"-{seqs[0]}-{seqs[-1]}.jsonl.gz")


def test_segments_bodies_go_to_a_parallel_dataset_partitioned_like_the_messages(aws, archiver):
    """Issue 18.1 (replay): every message's body is kept, gzipped, under ``raw/kind=bodies/`` in the
    same hour partitions and batch names as its metadata row (one object per batch and partition)."""
    archiver.lambda_handler(sample("stream_segments.json"), None)
    every = objects(aws["s3"])
    msgs = {k: v for k, v in every.items() if k.startswith("raw/kind=messages/")}
    bodies = {k: v for k, v in every.items() if k.startswith("raw/kind=bodies/")}
    assert len(bodies) == 2 and len(every) == 4
    assert [k.replace("kind=messages/", "").replace("/messages-", "/") for k in sorted(msgs)] == [
        k.replace("kind=bodies/", "").replace("/bodies-", "/") for k in sorted(bodies)]
    m_rows = [r for k in sorted(msgs) for r in msgs[k]]
    b_rows = [r for k in sorted(bodies) for r in bodies[k]]
    assert [(r["topic"], r["queue"], r["offset"], r["seq"]) for r in m_rows] == [
        (r["topic"], r["queue"], r["offset"], r["seq"]) for r in b_rows]
    assert [len(r["body"].encode("utf-8")) for r in b_rows] == [r["size"] for r in m_rows]
    assert b_rows[0]["body"] == "hello" and len(b_rows[2]["body"]) == 600  # from a zlib-compressed segment
    assert set(b_rows[0]) == {"topic", "inc", "queue", "offset", "id", "key", "tags", "properties", "body", "seq",
                              "produced_at"}
    # the metadata too (a replay reads this kind alone): the message row's, without its size
    assert [{k: v for k, v in r.items() if k != "size"} for r in m_rows] == [
        {k: v for k, v in r.items() if k != "body"} for r in b_rows]


def test_rows_of_a_topic_made_again_carry_its_incarnation(aws, archiver):
    """A topic deleted (SQS DeleteQueue) and made again writes its log under ``<topic>!<inc>``, offsets
    from 0 again: its rows name the topic and carry ``inc``, so the jobs keep its messages apart from
    the deleted log's at the same offsets (message, body and offset rows alike)."""
    seg = copy.deepcopy(sample("stream_segments.json"))
    for r in seg["Records"]:
        r["dynamodb"]["NewImage"]["pq"]["S"] = r["dynamodb"]["NewImage"]["pq"]["S"].replace("quotes#", "quotes!2#")
    offs = copy.deepcopy(sample("stream_offsets.json"))
    for r in offs["Records"]:
        for img in ("NewImage", "OldImage", "Keys"):
            o = r["dynamodb"].get(img, {}).get("owner")
            if o:
                o["S"] = o["S"].replace("|quotes", "|quotes!2")
    archiver.lambda_handler(seg, None)
    archiver.lambda_handler(offs, None)
    every = objects(aws["s3"])
    rows = {kind: [r for k in sorted(every) if k.startswith(f"raw/kind={kind}/") for r in every[k]]
            for kind in ("messages", "bodies", "offsets")}
    for kind in ("messages", "bodies"):
        assert [(r["topic"], r["inc"], r["offset"]) for r in rows[kind] if r["queue"] == 0] == [
            ("quotes", 2, o) for o in range(5)]
        assert {(r["topic"], r["inc"]) for r in rows[kind] if r["queue"] == 1} == {("quotes/sh", 0)}
    assert [(r["group"], r["topic"], r["inc"]) for r in rows["offsets"]] == [
        ("risk", "quotes", 2), ("risk", "quotes", 2), ("bc", "quotes", 2), (None, None, None)]


def test_redelivered_batch_overwrites_instead_of_duplicating(aws, archiver):
    ev = sample("stream_segments.json")
    archiver.lambda_handler(ev, None)
    before = {k: aws["s3"].get_object(Bucket=BUCKET, Key=k)["Body"].read() for k in objects(aws["s3"])}
    archiver.lambda_handler(copy.deepcopy(ev), None)
    after = {k: aws["s3"].get_object(Bucket=BUCKET, Key=k)["Body"].read() for k in objects(aws["s3"])}
    assert after == before  # same keys, same bytes


def test_offsets_rows_classify_changes(aws, archiver):
    archiver.lambda_handler(sample("stream_offsets.json"), None)
    objs = objects(aws["s3"])
    assert len(objs) == 1
    (key, rows), = objs.items()
    assert key.startswith("raw/kind=offsets/dt=2026-01-01/hour=00/offsets-")
    got = [(r["group"], r["client_id"], r["subscription"], r["topic"], r["committed_offset"], r["change"])
           for r in rows]
    assert got == [("risk", None, None, "quotes", 0, "lock"), ("risk", None, None, "quotes", 3, "commit"),
                   ("bc", "c1", None, "quotes", 0, "lock"), (None, None, "sub-1", None, 0, "lock")]
    assert rows[1]["prev_committed_offset"] == 0 and rows[1]["at"] == 1767225606000


def test_group_changes_become_member_rows(aws, archiver):
    archiver.lambda_handler(sample("stream_groups.json"), None)
    (key, rows), = objects(aws["s3"]).items()
    assert key.startswith("raw/kind=members/dt=2026-01-01/hour=00/members-")
    assert [(r["member_id"], r["change"], r["generation"]) for r in rows] == [
        ("m1", "joined", 1), ("m1", "changed", 2), ("m2", "joined", 2)]  # m2's join rebalances m1
    assert rows[0]["assignment"] == ["quotes#0", "quotes#1", "quotes#2", "quotes#3"]
    assert rows[1]["state"] == "awaiting_sync" and len(rows[1]["assignment"]) == 2
    assert rows[2]["group"] == "risk" and rows[2]["at"] == 1767225610000


def test_unknown_tables_and_subscription_lists_are_ignored():
    ev = sample("stream_segments.json")
    assert lake.batch_objects(ev["Records"], {"other-table": "messages"}) == {}
    r = copy.deepcopy(ev["Records"][0])
    r["dynamodb"]["NewImage"]["pq"] = {"S": "~sub1#0"}
    assert lake.message_rows(r) == []


def _poisoned(ev: dict, at: int) -> dict:
    ev = copy.deepcopy(ev)
    ev["Records"][at]["dynamodb"]["NewImage"]["data"] = {"B": "bm90IGEgc2VnbWVudA=="}  # not its index's data
    ev["Records"][at]["dynamodb"]["NewImage"]["z"] = {"BOOL": True}
    return ev


def test_poison_record_partial_batch_response_archives_only_what_precedes_it(aws, archiver):
    """Before: any unreadable record raised and the whole batch was retried forever."""
    ev = _poisoned(sample("stream_segments.json"), 1)
    seqs = [r["dynamodb"]["SequenceNumber"] for r in ev["Records"]]
    out = archiver.lambda_handler(ev, None)
    assert out["batchItemFailures"] == [{"itemIdentifier": s} for s in seqs[1:]]  # it and all after
    rows = [r for rs in objects(aws["s3"]).values() for r in rs]
    assert {r["seq"] for r in rows} == {seqs[0]} and out["records"] == 1
    # the retry starts at the poison record: first of several → a function error (bisected)
    ev["Records"] = ev["Records"][1:]
    with pytest.raises(archiver.PoisonBatch):
        archiver.lambda_handler(copy.deepcopy(ev), None)
    ev["Records"] = ev["Records"][:1]  # alone: reported (retries count, then the on-failure queue)
    assert archiver.lambda_handler(ev, None)["batchItemFailures"] == [{"itemIdentifier": seqs[1]}]


@pytest.mark.moto  # reads DynamoDB Streams
def test_archiver_poison_record_through_the_templates_event_source_mapping(aws, archiver):
    """Through the local stream pump with template.yaml's settings: the poison record is discarded
    after the retries and reported to the on-failure queue; every other row reaches the lake."""
    from infra.local import template as tpl
    from infra.local.streams import StreamPump
    pump = StreamPump(stack_name=tpl.LOCAL_STACK, dynamodb_client=aws["dynamodb"],
                      streams_client_=aws["dynamodbstreams"], sqs_client=aws["sqs"],
                      handlers={"ArchiverFunction": archiver.lambda_handler}, max_backoff=0.01)
    pump.mappings = [m for m in pump.mappings if m.spec.logical_id == "ArchiverFunction"
                     and m.event.name == "Segments"]
    ddb = aws["dynamodb"]
    good = sample("stream_segments.json")["Records"]
    table = os.environ["SEGMENTS_TABLE"]
    for i, r in enumerate([good[0], _poisoned({"Records": [good[1]]}, 0)["Records"][0], good[2]]):
        item = {k: ({"B": base64.b64decode(v["B"])} if "B" in v else v)
                for k, v in r["dynamodb"]["NewImage"].items()}
        item["pq"], item["base"] = {"S": f"quotes#{i}"}, {"N": "0"}
        ddb.put_item(TableName=table, Item=item)
    drained, n = pump.drain(20)
    assert drained and n == 2
    url = aws["sqs"].get_queue_url(QueueName=f"{tpl.LOCAL_STACK}-stream-failures")["QueueUrl"]
    [msg] = aws["sqs"].receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    info = json.loads(msg["Body"])
    assert info["requestContext"]["condition"] == "RetryAttemptsExhausted"
    assert info["DDBStreamBatchInfo"]["batchSize"] == 1
    rows = [r for rs in objects(aws["s3"]).values() for r in rs]
    assert sorted({(r["topic"], r["queue"]) for r in rows}) == [("quotes", 0), ("quotes", 2)]


def test_the_archiver_makes_its_own_s3_client_on_first_use(aws):
    """Not the test's client: the container's own (lakeq.store.clients: botocore, no boto3;
    docs/design.md "Cold start"), made on the first invocation, not at import, and kept for the next."""
    from lakeq.store import clients

    clients._clients.pop("s3", None)
    spec = importlib.util.spec_from_file_location("archiver_app_own", ROOT / "functions" / "archiver" / "app.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert "s3" not in clients._clients
    out = mod.lambda_handler(sample("stream_segments.json"), None)
    client = clients._clients["s3"]
    assert client is not aws["s3"] and client.meta.service_model.service_name == "s3"
    assert sorted(objects(aws["s3"])) == out["objects"] and len(out["objects"]) == 4  # messages + bodies, 2 hours
    mod.lambda_handler(sample("stream_segments.json"), None)
    assert clients._clients["s3"] is client
