"""glue_jobs/replay.py, the selection job's entry (issue 18.1, REPLAY.md §2): Glue's command line
(its own arguments ignored), and a failed run = ``replays/<id>/error.json`` + a non-zero exit. These
runs fail before Spark starts (no JVM); the real runs are in tests/unit/test_glue_packaging.py
(the generated bundle) and tests/integration/test_local_glue.py (the local stack's runs)."""
from __future__ import annotations

import json
import os
import sys
import types
from pathlib import Path

import pytest

from glue_jobs import replay as job

GLUE_JOBS = str(Path(job.__file__).parent)  # run as a script, the entry has its folder on sys.path
if GLUE_JOBS not in sys.path:
    sys.path.insert(0, GLUE_JOBS)

GLUE_OWN = ["--JOB_ID", "j_0123", "--JOB_RUN_ID", "jr_0123", "--JOB_NAME", "lakeq-replay-select",
            "--job-bookmark-option", "job-bookmark-disable", "--TempDir", "s3://aws-glue-temp/x",
            "--enable-metrics", "true", "--enable-continuous-cloudwatch-log", "true", "--job-language", "python"]
RUN = ["--lake", "s3://lake", "--replay_id", "rp_1", "--topic", "quotes/sh", "--from_ms", "1767225600000",
       "--to_ms", "1767229200000", "--filter", '{"tags": ["A"]}']


def test_argparse_ignores_glues_own_arguments():
    opts = job.options(["replay.py", *GLUE_OWN[:6], *RUN, *GLUE_OWN[6:]])
    assert {k: opts[k] for k in ("lake", "replay_id", "topic", "from_ms", "to_ms", "filter")} == {
        "lake": "s3://lake", "replay_id": "rp_1", "topic": "quotes/sh", "from_ms": "1767225600000",
        "to_ms": "1767229200000", "filter": '{"tags": ["A"]}'}
    assert opts["master"] == "local[*]"


def test_argparse_does_not_take_an_abbreviation_of_an_unknown_argument():
    """``--from`` (not ours) must not be read as ``--from_ms``."""
    opts = job.options(["replay.py", "--from", "9", *RUN])
    assert opts["from_ms"] == "1767225600000"


def test_on_glue_getresolvedoptions_reads_the_run(monkeypatch):
    seen = {}

    def get_resolved_options(argv, names):  # what awsglue.utils does: each name's value, all required
        seen["names"] = list(names)
        return {n: argv[argv.index(f"--{n}") + 1] for n in names}

    glue = types.ModuleType("awsglue")
    utils = types.ModuleType("awsglue.utils")
    utils.getResolvedOptions = get_resolved_options
    glue.utils = utils
    monkeypatch.setitem(sys.modules, "awsglue", glue)
    monkeypatch.setitem(sys.modules, "awsglue.utils", utils)
    opts = job.options(["replay.py", *GLUE_OWN, *RUN])
    assert opts["topic"] == "quotes/sh" and opts["filter"] == '{"tags": ["A"]}'
    assert opts["master"] is None  # Glue's own SparkSession
    assert "filter" in seen["names"]
    no_filter = [a for a in RUN if a not in ("--filter", '{"tags": ["A"]}')]
    assert job.options(["replay.py", *GLUE_OWN, *no_filter])["filter"] is None
    assert "filter" not in seen["names"]  # it would be required


@pytest.mark.parametrize("bad, message", [
    ('{"tags": "A"}', "tags"),
    ("{not json", "JSONDecodeError"),
])
def test_a_bad_filter_writes_error_json_and_exits_non_zero(tmp_path, capsys, bad, message):
    lake = tmp_path / "lake"
    args = [a if a != "s3://lake" else str(lake) for a in RUN]
    args[args.index("--filter") + 1] = bad
    assert job.main(["replay.py", *GLUE_OWN, *args]) == 1
    err = json.loads((lake / "replays/rp_1/error.json").read_text())
    assert set(err) == {"error"} and message in err["error"], err
    assert not (lake / "replays/rp_1/selection.json").exists()
    assert "rp_1 failed" in capsys.readouterr().err


def test_an_empty_range_is_an_error(tmp_path):
    lake = tmp_path / "lake"
    args = [a if a != "s3://lake" else str(lake) for a in RUN]
    args[args.index("--to_ms") + 1] = "1767225600000"
    assert job.main(["replay.py", *args]) == 1
    assert "must be before" in json.loads((lake / "replays/rp_1/error.json").read_text())["error"]


def test_error_json_goes_to_the_s3_lake(aws):
    bucket = os.environ["LAKE_BUCKET"]
    job.write_error(f"s3://{bucket}", "rp_9", "Spark failed")
    body = aws["s3"].get_object(Bucket=bucket, Key="replays/rp_9/error.json")["Body"].read()
    assert json.loads(body) == {"error": "Spark failed"}


def test_describe_keeps_the_first_lines_only():
    text = job.describe(RuntimeError("An error occurred while calling o1.json.\n: java.io.IOException: "
                                     "no such bucket\n\tat a.b.C(C.java:1)\n" + "\tat x\n" * 500))
    assert text.startswith("RuntimeError: An error occurred") and "no such bucket" in text
    assert len(text) < 300
