"""Replay end to end (issue 18.1), the real pieces in turn: messages produced through the API (moto),
the real archiver handler building the lake from the segments' stream records (bodies included,
one claim-checked), the real selection job (``lakeq_lake.replay.run_replay``) on the local
SparkSession over that lake (copied from moto's bucket to a folder: Spark does not read moto),
its output put back under ``replays/<id>/``, then ReplayFunction's schedule (its IAM role applies)
copying into a topic — crashing once between a chunk's appends and its cursor write, resumed by
the next run. Exactly the messages of the range that the filter keeps, once each, in order per
source queue."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from lakeq.replay.rules import Filter
from lakeq_lake import replay as R
from lakeq_lake.store import Lake
from tests.crash import Crash
from tests.handlers import load_function, segment_records
from tests.integration import replay_harness as H
from tests.integration.conftest import api, clock, setup  # noqa: F401 - the fixtures
from tests.manifest import manifest_rows

T = "/v1/topics/quotes%2Fsh/messages"
T0 = 1_800_000_000_000
HOUR = 3_600_000


def _produce(api, setup, clock):  # noqa: F811
    """90 messages over 3 hours (one every 2 minutes), keys k0..k4, n = i, tags red/blue; one big
    body (m40, claim-checked)."""
    for i in range(90):
        clock.t = T0 + i * 120_000
        body = ("z" * (350 * 1024)) if i == 40 else f"body {i} ü"
        m = {"id": f"m{i}", "body": body, "key": f"k{i % 5}", "tags": ["red"] if i % 2 == 0 else ["blue"],
             "properties": {"n": i, "side": "buy" if i % 3 else "sell"}}
        s, b = api.call("POST", T, {"producer": "feed", "messages": [m]}, key=setup["feed"])
        assert s == 200, b


def _build_lake(aws, root: Path) -> None:
    """The archiver handler (as ArchiverFunction) over every segment record, then raw/ copied to ``root``."""
    archiver = load_function("ArchiverFunction")
    recs = segment_records(aws)
    for i in range(0, len(recs), 25):  # batches as the event source mapping would give them
        out = archiver({"Records": recs[i:i + 25]}, None)
        assert not (out or {}).get("batchItemFailures"), out
    s3, bucket = aws["s3"], os.environ["LAKE_BUCKET"]
    keys = [o["Key"] for p in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="raw/")
            for o in p.get("Contents", [])]
    assert any("kind=bodies" in k for k in keys) and any("kind=messages" in k for k in keys)
    for k in keys:
        (root / k).parent.mkdir(parents=True, exist_ok=True)
        (root / k).write_bytes(s3.get_object(Bucket=bucket, Key=k)["Body"].read())


def _publish(aws, root: Path, rid: str) -> None:
    """The job's output under ``replays/<id>/`` put in the lake bucket with the same keys."""
    s3, bucket = aws["s3"], os.environ["LAKE_BUCKET"]
    base = root / "replays" / rid
    for p in sorted(base.rglob("*")):
        if p.is_file() and not p.name.startswith(".") and not p.name.startswith("_"):
            s3.put_object(Bucket=bucket, Key=str(p.relative_to(root)), Body=p.read_bytes())


@pytest.mark.moto  # the archiver reads DynamoDB Streams
def test_produce_archive_select_copy_with_a_crash(spark, aws, api, setup, clock, tmp_path, monkeypatch):  # noqa: F811
    H.into_topic(api, aws, clock, monkeypatch, chunk=5)
    _produce(api, setup, clock)
    _build_lake(aws, tmp_path)

    lo, hi = T0 + 30 * 60_000, T0 + 2 * HOUR + 10 * 60_000  # crosses three hour partitions
    flt = {"conditions": [{"field": "side", "values": ["buy"]}], "tags": ["red"]}
    s, r = api.call("POST", "/v1/replays", {"topic": "quotes/sh", "from": lo, "to": hi, "filter": flt,
                                           "target": {"topic": "replayed"}, "rate": 1000})
    assert s == 202, r
    (run,) = H.job_runs()
    args = {k.lstrip("-"): v for k, v in run["Arguments"].items()}
    # the job as the Glue entry would run it, with the run's own arguments
    summary = R.run_replay(spark, Lake(str(tmp_path)), args["replay_id"], args["topic"], int(args["from_ms"]),
                           int(args["to_ms"]), Filter.of(json.loads(args["filter"]) or None),
                           log=lambda *_: None)
    want = H.expected(aws, "quotes/sh", lo, hi, flt)
    assert summary["found"] == len(want) > 10 and summary["missing_bodies"] == 0
    assert any(w["id"] == "m40" for w in want)  # the claim-checked one is selected
    _publish(aws, tmp_path, r["id"])

    H.crash_after_produce(monkeypatch, 2, "between the appends and the cursor write")
    with pytest.raises(Crash):
        H.run_schedule()
    mid = api.call("GET", f"/v1/replays/{r['id']}")[1]
    assert mid["status"] == "copying" and mid["copied"] == 5  # the first chunk recorded, the second not
    assert H.run_schedule() == {"replays": 1, "done": 1}
    got = api.call("GET", f"/v1/replays/{r['id']}")[1]
    assert (got["found"], got["copied"], got["failed"], got["duplicates"]) == (len(want), len(want), 0, 5)
    delivered = H.topic_messages("replayed")
    src = H.source_of("quotes/sh", want)
    ids = [m["id"] for ms in delivered.values() for m in ms]
    assert sorted(ids) == sorted(src)  # exactly the selection, once each
    for ms in delivered.values():  # in order per source queue
        last: dict[int, int] = {}
        for m in ms:
            q, o = src[m["id"]]
            assert o > last.get(q, -1)
            last[q] = o
    # the big body was carried by its claim, copied in the bucket to the copy's own object (same
    # size and digest, its own key: it lives as long as a new message's)
    copy40 = next(m for ms in delivered.values() for m in ms if src[m["id"]] == next(
        (w["queue"], w["offset"]) for w in want if w["id"] == "m40"))
    orig = next(m for ms in H.topic_messages("quotes/sh").values() for m in ms if m["id"] == "m40")
    assert copy40["claim"]["key"] != orig["claim"]["key"] and copy40["claim"]["size"] == 350 * 1024
    assert {**copy40["claim"], "key": None} == {**orig["claim"], "key": None}


@pytest.mark.moto
def test_a_dry_run_selects_what_the_replay_copies(spark, aws, api, setup, clock, tmp_path, monkeypatch):  # noqa: F811
    """Issue 32 item 5: a dry run and a replay of the same request, each selected by the real job:
    the dry run ends ``selected`` with the replay's own count and, as its sample, the first 20
    messages the replay copies; only the replay delivers (the target holds its copies, once)."""
    H.into_topic(api, aws, clock, monkeypatch)
    _produce(api, setup, clock)
    _build_lake(aws, tmp_path)
    body = {"topic": "quotes/sh", "from": T0, "to": T0 + 3 * HOUR,
            "filter": {"conditions": [{"field": "side", "values": ["buy"]}]}, "target": {"topic": "replayed"},
            "rate": 1000}
    s, dry = api.call("POST", "/v1/replays", {**body, "dry_run": True})
    assert s == 202 and dry["dry_run"] is True
    s, real = api.call("POST", "/v1/replays", body)
    assert s == 202
    for run in H.job_runs():  # the two runs of the one job, each with its own arguments
        a = {k.lstrip("-"): v for k, v in run["Arguments"].items()}
        R.run_replay(spark, Lake(str(tmp_path)), a["replay_id"], a["topic"], int(a["from_ms"]), int(a["to_ms"]),
                     Filter.of(json.loads(a["filter"]) or None), log=lambda *_: None,
                     dry_run=a.get("dry_run") == "true")
        _publish(aws, tmp_path, a["replay_id"])
    assert not (tmp_path / R.manifest_prefix(dry["id"])).exists()  # the dry run wrote no manifest
    assert H.run_schedule() == {"replays": 2, "selected": 1, "done": 1}
    d = api.call("GET", f"/v1/replays/{dry['id']}")[1]
    r = api.call("GET", f"/v1/replays/{real['id']}")[1]
    want = H.expected(aws, "quotes/sh", body["from"], body["to"], body["filter"])
    assert d["status"] == "selected" and d["found"] == r["found"] == r["copied"] == len(want) > 20
    summary = json.loads((tmp_path / R.summary_key(real["id"])).read_text())
    first = [x for p in summary["parts"] for x in manifest_rows(p["key"], (tmp_path / p["key"]).read_bytes())][:20]
    assert [(x["queue"], x["offset"], x["id"]) for x in d["sample"]] == [(x["queue"], x["offset"], x["id"])
                                                                        for x in first]
    src = {w["id"]: w for w in want}
    assert all(x["id"] in src and x["key"] == src[x["id"]]["key"] for x in d["sample"])
    big = [x for x in d["sample"] if x["id"] == "m40"]
    assert all(x["size"] == 350 * 1024 for x in big)  # a claim-checked body: its claim's size
    delivered = [m["id"] for ms in H.topic_messages("replayed").values() for m in ms]
    assert sorted(delivered) == sorted(H.source_of("quotes/sh", want))  # the replay's copies, once; none of the dry run
