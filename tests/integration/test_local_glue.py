"""The local stack's Glue (infra/local/glue.py, issue 18.1): a StartJobRun of a template job runs it.

- Glue's JSON 1.1 protocol as boto3 speaks it, against the real HTTP endpoint (a werkzeug server):
  run ids, the job's default arguments merged with the run's, unknown jobs, MaxConcurrentRuns, and
  no thread before the first run (the stack's idle cost is unchanged).
- The replay job's runs (``ReplayRun``) on a lake the real archiver wrote (moto S3): selection.json and
  the manifest appear; a failing job, a missing Java and a job that dies write error.json.
"""
from __future__ import annotations

import importlib.util
import json
import os
import sys
import threading
from pathlib import Path

import boto3
import pytest
from botocore.exceptions import ClientError
from werkzeug.serving import make_server
from werkzeug.wrappers import Request

from infra.local import glue as G
from tests.manifest import manifest_rows

ROOT = Path(__file__).resolve().parents[2]
REPLAY = "lakeq-local-replay-select"
T0 = 1_767_225_600_000  # the stream samples' first hour (2026-01-01T00Z)


@pytest.fixture
def endpoint():
    """``(LocalGlue factory, glue client)``: the gateway's /_local/glue on a real port."""
    holder = {}

    def app(environ, start_response):
        return holder["glue"].handle(Request(environ))(environ, start_response)

    server = make_server("127.0.0.1", 0, app, threaded=True)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    client = boto3.client("glue", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x",
                          endpoint_url=f"http://127.0.0.1:{server.server_port}{G.PATH}")

    def make(run):
        holder["glue"] = G.LocalGlue(None, run)
        return holder["glue"]

    yield make, client
    server.shutdown()
    if "glue" in holder:
        holder["glue"].stop()


def test_start_job_run_over_glues_protocol(endpoint):
    make, client = endpoint
    seen = []
    glue = make(lambda job, run, args: seen.append((job.name, run.id, args)) or None)
    assert glue._thread is None  # nothing runs (nor waits) before the first run
    rid = client.start_job_run(JobName=REPLAY, Arguments={"--replay_id": "rp_1", "--topic": "t"})["JobRunId"]
    assert rid.startswith("jr_") and len(rid) == 67
    assert glue.wait(rid, 10) == "SUCCEEDED"
    (name, run_id, args), = seen
    assert (name, run_id) == (REPLAY, rid)
    assert args["--lake"] == "s3://lakeq-local-lakebucket"  # the job's DefaultArguments …
    assert args["--replay_id"] == "rp_1" and args["--topic"] == "t"  # … and the run's
    got = client.get_job_run(JobName=REPLAY, RunId=rid)["JobRun"]
    assert got["JobRunState"] == "SUCCEEDED" and got["Arguments"] == {"--replay_id": "rp_1", "--topic": "t"}
    assert [r["Id"] for r in client.get_job_runs(JobName=REPLAY)["JobRuns"]] == [rid]


def test_unknown_jobs_and_runs_are_entity_not_found(endpoint):
    make, client = endpoint
    make(lambda *a: None)
    for call in (lambda: client.start_job_run(JobName="lakeq-local-nope"),
                 lambda: client.get_job_run(JobName=REPLAY, RunId="jr_0")):
        with pytest.raises(ClientError) as e:
            call()
        assert e.value.response["Error"]["Code"] == "EntityNotFoundException"


def test_a_failing_run_is_failed_with_its_message(endpoint):
    make, client = endpoint
    glue = make(lambda *a: "selection failed")
    rid = client.start_job_run(JobName=REPLAY, Arguments={"--replay_id": "rp_2"})["JobRunId"]
    assert glue.wait(rid, 10) == "FAILED"
    assert client.get_job_run(JobName=REPLAY, RunId=rid)["JobRun"]["ErrorMessage"] == "selection failed"


def test_max_concurrent_runs_is_enforced(endpoint):
    """BacklogJob allows one run at a time: a second StartJobRun while it runs is refused, as on Glue."""
    make, client = endpoint
    release = threading.Event()
    glue = make(lambda *a: release.wait(10) and None)
    first = client.start_job_run(JobName="lakeq-local-backlog")["JobRunId"]
    with pytest.raises(ClientError) as e:
        client.start_job_run(JobName="lakeq-local-backlog")
    assert e.value.response["Error"]["Code"] == "ConcurrentRunsExceededException"
    release.set()
    assert glue.wait(first, 10) == "SUCCEEDED"
    second = client.start_job_run(JobName="lakeq-local-backlog")["JobRunId"]
    assert glue.wait(second, 10) == "SUCCEEDED"


# ----------------------------------------------------------------------- the replay job's runs


@pytest.fixture
def archived(aws):
    """The lake bucket as the real archiver writes it from the stream samples (topic quotes: offsets
    0-2 in hour 00 with tags A / - / hot,A, 3-4 in hour 01; quotes/sh 0)."""
    spec = importlib.util.spec_from_file_location("archiver_app", ROOT / "functions" / "archiver" / "app.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    ev = json.loads((ROOT / "events" / "stream_segments.json").read_text())
    assert len(mod.lambda_handler(ev, None)["objects"]) == 4  # messages and bodies, two hours
    return aws["s3"], os.environ["LAKE_BUCKET"]


def _replay(aws_s3, run, replay_id: str, flt: str = "{}", **over) -> tuple[G.LocalGlue, str]:
    glue = G.LocalGlue(None, G.runner(run))
    args = {"--replay_id": replay_id, "--topic": "quotes", "--from_ms": str(T0), "--to_ms": str(T0 + 2 * 3_600_000),
            "--filter": flt, **over}
    return glue, glue.start_job_run(REPLAY, args)


def _get(s3, bucket, key):
    try:
        return s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    except ClientError:
        return None


@pytest.mark.spark
def test_a_run_selects_from_the_archived_lake(archived):
    pytest.importorskip("pyspark")
    if G.spark_missing():
        pytest.skip(G.spark_missing())
    s3, bucket = archived
    drained = []
    glue, rid = _replay(s3, G.ReplayRun(s3=lambda: s3, drain=lambda: drained.append(1)), "rp_ok", '{"tags": ["A"]}')
    try:
        assert glue.wait(rid, 600) == "SUCCEEDED", glue.runs[rid].error
    finally:
        glue.stop()
    assert drained == [1]  # the streams are brought into the lake first
    sel = json.loads(_get(s3, bucket, "replays/rp_ok/selection.json"))
    assert sel["found"] == 2 and sel["queues"] == {"0": 2} and sel["missing_bodies"] == 0
    rows = [r for p in sel["parts"] for r in manifest_rows(p["key"], _get(s3, bucket, p["key"]))]
    assert [(r["queue"], r["offset"], r["body"]) for r in rows] == [(0, 0, "hello"), (0, 2, "x" * len(rows[1]["body"]))]
    assert _get(s3, bucket, "replays/rp_ok/error.json") is None


def test_a_failing_job_writes_error_json(archived):
    """The job refuses the filter before Spark starts: its error.json reaches the bucket; the run FAILED."""
    s3, bucket = archived
    glue, rid = _replay(s3, G.ReplayRun(s3=lambda: s3), "rp_bad", '{"conditions": [{"field": "x"}]}')
    try:
        assert glue.wait(rid, 120) == "FAILED"
    finally:
        glue.stop()
    err = json.loads(_get(s3, bucket, "replays/rp_bad/error.json"))
    assert "needs one of" in err["error"] and glue.runs[rid].error == err["error"]
    assert _get(s3, bucket, "replays/rp_bad/selection.json") is None


def test_without_java_the_run_writes_error_json_saying_so(archived, monkeypatch):
    s3, bucket = archived
    monkeypatch.delenv("JAVA_HOME", raising=False)
    glue, rid = _replay(s3, G.ReplayRun(s3=lambda: s3, which=lambda _: None, python="/nonexistent"), "rp_nojava")
    try:
        assert glue.wait(rid, 30) == "FAILED"
    finally:
        glue.stop()
    assert "no Java runtime" in json.loads(_get(s3, bucket, "replays/rp_nojava/error.json"))["error"]


def test_a_job_that_dies_without_a_word_gets_error_json(archived, tmp_path):
    s3, bucket = archived
    script = tmp_path / "dies.py"
    script.write_text("import sys\nprint('out of memory, say')\nsys.exit(3)\n")
    glue, rid = _replay(s3, G.ReplayRun(s3=lambda: s3, script=script, python=sys.executable), "rp_dies")
    try:
        assert glue.wait(rid, 60) == "FAILED"
    finally:
        glue.stop()
    err = json.loads(_get(s3, bucket, "replays/rp_dies/error.json"))["error"]
    assert err == "the selection job exited with 3: out of memory, say"


def test_glue_calls_are_authorised_on_the_jobs_arn(aws_rules_spec):
    """Locally a function's Glue call is checked against its role like AWS does: ``glue:StartJobRun``
    on ``arn:aws:glue:<region>:<account>:job/<name>`` (a function without it is denied)."""
    from infra.local import aws_rules as R
    from infra.local.interceptor import Call

    roles, tables = aws_rules_spec
    arn = "arn:aws:glue:us-east-1:123456789012:job/lakeq-local-replay-select"
    call = Call("glue", "StartJobRun", {"JobName": REPLAY, "Arguments": {}}, "Starter")
    assert R.required_permissions(call, R.Arns("us-east-1", "123456789012")) == [R.Permission("glue:StartJobRun", arn)]
    allowed = R.Role("Starter", "starter-role", "Starter", "123456789012",
                     [{"Effect": "Allow", "Action": ["glue:StartJobRun"], "Resource": arn}])
    rules = R.AwsRules({**roles, "Starter": allowed}, tables)
    rules.before(call)  # allowed
    with pytest.raises(ClientError) as e:
        rules.before(Call("glue", "StartJobRun", {"JobName": "lakeq-local-backlog"}, "Starter"))
    assert e.value.response["Error"]["Code"] == "AccessDeniedException"
    with pytest.raises(ClientError):
        rules.before(Call("glue", "StartJobRun", {"JobName": REPLAY}, "AdminFunction"))  # no glue:* at all
    rules.before(Call("glue", "StartJobRun", {"JobName": REPLAY}, None))  # the stack's own calls: not checked


def test_a_run_downloads_the_compacted_hours_it_reads(archived, tmp_path):
    """A compacted hour of the run's range: its newest manifest and the Parquet files it names come
    with the raw objects (what ``Lake.read_kind`` reads); an older generation and an hour outside
    the range do not."""
    from lakeq.lake import compaction as C

    s3, bucket = archived
    for gen, hour, files in ((1, "00", ["lake/kind=messages/run=1/dt=2026-01-01/hour=00/part-0.parquet"]),
                             (2, "00", ["lake/kind=messages/run=2/dt=2026-01-01/hour=00/part-0.parquet"]),
                             (1, "05", ["lake/kind=messages/run=2/dt=2026-01-01/hour=05/part-0.parquet"])):
        for k in files:
            s3.put_object(Bucket=bucket, Key=k, Body=b"parquet")
        doc = C.manifest_doc("messages", "2026-01-01", hour, gen, str(gen), files, [], 1)
        s3.put_object(Bucket=bucket, Key=C.manifest_key("messages", "2026-01-01", hour, gen), Body=json.dumps(doc))
    run = G.ReplayRun(s3=lambda: s3)
    run.bucket = bucket
    run.download_slice({"--from_ms": str(T0), "--to_ms": str(T0 + 2 * 3_600_000)}, tmp_path)
    got = sorted(str(p.relative_to(tmp_path)) for p in (tmp_path / "lake").rglob("*") if p.is_file())
    assert got == [C.manifest_key("messages", "2026-01-01", "00", 2),
                   "lake/kind=messages/run=2/dt=2026-01-01/hour=00/part-0.parquet"]
    assert (tmp_path / "raw").is_dir()  # the raw objects as before
