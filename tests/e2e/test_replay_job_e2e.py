"""The local stack runs the replay's selection job when it is started through Glue's API (issue 18.1,
infra/local/glue.py): messages produced over HTTP reach the lake through the real archiver (the
stack's stream pump), then ``StartJobRun`` of ``lakeq-local-replay-select`` — what the replay function
calls — against the stack's Glue endpoint (``/_local/glue``, where the stack points its functions'
Glue clients) runs ``glue_jobs/replay.py`` on ``local[2]``: ``selection.json`` and the manifest appear in
the stack's lake bucket with exactly the matching messages and their bodies; a run the job refuses
writes ``error.json``."""
from __future__ import annotations

import json
import time

import boto3
import pytest
import requests

from tests.manifest import manifest_rows

pytest.importorskip("pyspark")
TOPIC, PRODUCER = "replay-e2e", "replay-e2e-p"
JOB = "lakeq-local-replay-select"


def bearer(key):
    return {"Authorization": f"Bearer {key}"}


def _wait(glue, run_id: str, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        run = glue.get_job_run(JobName=JOB, RunId=run_id)["JobRun"]
        if run["JobRunState"] not in ("STARTING", "RUNNING") or time.monotonic() > deadline:
            return run
        time.sleep(1)


def test_start_job_run_selects_from_the_stacks_lake(stack):
    from infra.local.glue import spark_missing

    url, admin = stack.url, bearer(stack.admin_key)
    assert requests.post(f"{url}/v1/topics", json={"name": TOPIC, "queues": 2}, headers=admin).status_code == 201
    pk = requests.post(f"{url}/v1/clients", json={"name": PRODUCER, "role": "producer", "topics": [TOPIC]},
                       headers=admin).json()["api_key"]
    t_from = int(time.time() * 1000) - 1000
    msgs = [{"body": f"m{i} é", "key": f"k{i % 3}", "tags": ["even" if i % 2 == 0 else "odd"],
             "properties": {"n": i}} for i in range(12)]
    r = requests.post(f"{url}/v1/topics/{TOPIC}/messages", json={"producer": PRODUCER, "messages": msgs},
                      headers=bearer(pk))
    assert r.status_code == 200, r.text
    t_to = int(time.time() * 1000) + 1000

    info = requests.get(f"{url}/_local/info", timeout=10).json()
    s3 = boto3.client("s3", endpoint_url=info["aws_endpoint_url"], region_name="us-east-1",
                      aws_access_key_id="testing", aws_secret_access_key="testing")
    bucket = info["environment"]["LAKE_BUCKET"]
    glue = boto3.client("glue", endpoint_url=f"{url}/_local/glue", region_name="us-east-1",
                        aws_access_key_id="testing", aws_secret_access_key="testing")
    flt = {"conditions": [{"field": "n", "range": [0, 8]}], "tags": ["even"]}  # n even, 0 ≤ n ≤ 8
    run_id = glue.start_job_run(JobName=JOB, Arguments={
        "--replay_id": "rp_e2e", "--topic": TOPIC, "--from_ms": str(t_from), "--to_ms": str(t_to),
        "--filter": json.dumps(flt)})["JobRunId"]
    run = _wait(glue, run_id, 600)
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="replays/rp_e2e/").get("Contents", [])}
    if spark_missing():  # the run says why in error.json
        assert run["JobRunState"] == "FAILED" and "replays/rp_e2e/error.json" in keys
        pytest.skip(spark_missing())
    assert run["JobRunState"] == "SUCCEEDED", run.get("ErrorMessage") + "\n" + stack.stderr[-4000:]
    sel = json.loads(s3.get_object(Bucket=bucket, Key="replays/rp_e2e/selection.json")["Body"].read())
    rows = [r for p in sel["parts"]
            for r in manifest_rows(p["key"], s3.get_object(Bucket=bucket, Key=p["key"])["Body"].read())]
    assert sel["found"] == len(rows) == 5 and sel["missing_bodies"] == 0
    assert sorted(r["body"] for r in rows) == [f"m{i} é" for i in (0, 2, 4, 6, 8)]
    for q in {r["queue"] for r in rows}:  # in offset order within each queue
        offs = [r["offset"] for r in rows if r["queue"] == q]
        assert offs == sorted(offs)
    assert "replays/rp_e2e/error.json" not in keys

    # a run the job refuses (to before from): error.json, the run FAILED with the same text
    run_id = glue.start_job_run(JobName=JOB, Arguments={
        "--replay_id": "rp_e2e_bad", "--topic": TOPIC, "--from_ms": str(t_to), "--to_ms": str(t_from),
        "--filter": "{}"})["JobRunId"]
    run = _wait(glue, run_id, 120)
    err = json.loads(s3.get_object(Bucket=bucket, Key="replays/rp_e2e_bad/error.json")["Body"].read())
    assert run["JobRunState"] == "FAILED"
    assert "must be before" in err["error"] and err["error"] == run["ErrorMessage"]
