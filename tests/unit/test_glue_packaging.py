"""glue_jobs.package: the single-file Glue scripts `sam deploy` uploads (template.yaml ScriptLocation)."""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from glue_jobs import package as P
from infra.local import template as T

ROOT = Path(__file__).resolve().parents[2]


def isolated_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    # Spark's code generation on, as on Glue (the suite's other JVMs interpret: tests/conftest.py)
    env["PYSPARK_SUBMIT_ARGS"] = re.sub(r"--conf spark\.sql\.codegen\.\S+\s*", "",
                                        env.get("PYSPARK_SUBMIT_ARGS", "pyspark-shell"))
    env["TMPDIR"] = str(tmp_path / "tmp")
    (tmp_path / "tmp").mkdir(exist_ok=True)
    return env


@pytest.fixture(scope="module", autouse=True)
def dist():
    """The scripts as `make sam-build` builds them (they are built, never committed: issue 31.5)."""
    P.write(P.DIST)
    return P.DIST


def test_the_scripts_are_built_not_committed():
    """No commit exists only to regenerate a bundle: git ignores glue_jobs/dist/ and tracks none of it."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    tracked = subprocess.run(["git", "ls-files", "glue_jobs/dist"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    assert tracked == []
    ignored = subprocess.run(["git", "check-ignore", "-q", "glue_jobs/dist/backlog.py"], cwd=ROOT)
    assert ignored.returncode == 0


def test_make_sam_build_builds_the_scripts_before_sam_build():
    make = (ROOT / "Makefile").read_text()
    recipe = make.split("\nsam-build:", 1)[1].split("\n\n", 1)[0]
    assert recipe.index("-m glue_jobs.package") < recipe.index("$(SAM) build")
    # `make test` makes test-ready first (two at a time), whose prerequisites hold sam-build
    assert "-j2 test-ready" in make.split("\ntest:", 1)[1].split("\n\n", 1)[0]
    assert "sam-build" in make.split("\ntest-ready:", 1)[1].split("\n", 1)[0]


@pytest.mark.parametrize("job", P.JOBS)
def test_built_script_is_what_the_generator_makes(job, dist):
    assert (dist / f"{job}.py").read_text(encoding="utf-8") == P.render(job)


def test_template_points_sam_at_the_generated_scripts(template):
    """`sam package` uploads a local Command.ScriptLocation; nothing else must need a manual upload."""
    jobs = T.resources_of_type(template, "AWS::Glue::Job")
    assert len(jobs) == len(P.JOBS)
    locations = {}
    for lid, res in jobs.items():
        props = res["Properties"]
        loc = props["Command"]["ScriptLocation"]
        assert isinstance(loc, str) and not loc.startswith("s3://"), f"{lid}: {loc!r} is not a local path"
        assert (ROOT / loc).is_file()
        locations[lid] = Path(loc)
        for arg, value in (props.get("DefaultArguments") or {}).items():
            # S3 files the jobs would need uploaded by hand: none
            assert arg not in ("--extra-py-files", "--extra-files", "--extra-jars"), f"{lid}: {arg}"
            assert "glue/" not in json.dumps(value), f"{lid}: {arg} = {value!r}"
    assert sorted(p.parent for p in locations.values()) == [Path("glue_jobs/dist")] * len(P.JOBS)
    assert sorted(p.stem for p in locations.values()) == sorted(P.JOBS)


def test_bundle_holds_what_the_jobs_import_and_nothing_of_the_api():
    names = set(P.closure(ROOT / "glue_jobs" / "rebalance_plan.py"))
    assert {"lakeq_lake/__init__.py", "lakeq_lake/jobs.py", "lakeq_lake/plans.py", "lakeq_lake/store.py",
            "lakeq_lake/transforms.py", "lakeq_lake/schemas.py", "lakeq/__init__.py",
            "lakeq/rebalance/assignors.py", "lakeq/rebalance/state.py", "lakeq/store/groups.py",
            "lakeq/store/models.py"} <= names
    # no use case (``<concern>/service.py``), no HTTP route, no spec
    assert not any(n.endswith("/service.py") or n.startswith("lakeq/api/") for n in names)
    assert "lakeq/openapi.yaml" not in names
    assert not any(n.startswith(("functions/", "backlog", "rebalance_plan", "local", "package")) for n in names)
    assert P.bundle(ROOT / "glue_jobs" / "backlog.py") == P.bundle(ROOT / "glue_jobs" / "backlog.py")


def test_check_finds_a_stale_script(tmp_path):
    P.write(tmp_path)
    assert P.stale(tmp_path) == []
    path = tmp_path / "backlog.py"
    path.write_text(path.read_text() + "# edited\n")
    assert P.stale(tmp_path) == ["backlog"]
    path.unlink()
    assert P.stale(tmp_path) == ["backlog"]


PROBE = """
import json, runpy, sys
ns = runpy.run_path(sys.argv[1], run_name="glue_job")   # the bootstrap runs, main() does not
import lakeq, lakeq_lake, lakeq_lake.jobs, lakeq_lake.plans, lakeq_lake.store, lakeq.store.groups
print(json.dumps({"path": sys.path, "files": {m: sys.modules[m].__file__ for m in
    ("lakeq", "lakeq_lake", "lakeq_lake.jobs", "lakeq_lake.plans", "lakeq.store.groups", "lakeq.rebalance.assignors")},
    "main": callable(ns.get("main"))}))
"""


@pytest.mark.parametrize("job", P.JOBS)
def test_generated_script_imports_its_modules_from_its_own_bundle(job, tmp_path):
    script = tmp_path / f"{job}.py"
    shutil.copy(P.DIST / f"{job}.py", script)
    out = subprocess.run([sys.executable, "-I", "-c", PROBE, str(script)], cwd=tmp_path, env=isolated_env(tmp_path),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["main"]
    repo_dirs = [ROOT, ROOT / "glue_jobs", ROOT / "glue_jobs" / "dist", ROOT / "layers" / "core",
                 ROOT / "layers" / "matcher"]
    assert not [p for p in got["path"] if Path(p) in repo_dirs], got["path"]
    bundle_dir = tmp_path / "tmp"
    for mod, file in got["files"].items():
        assert Path(file).is_relative_to(bundle_dir), (mod, file)


# The generated scripts' real runs share one Python process and so one JVM (pyspark keeps the
# gateway after a session stops: the next session starts in it). Each JVM start with its first job
# cost 6-9 CPU-s; the two runs were two processes. Each script still runs as `python -I script`
# would run it (runpy as __main__, its own argv, cwd and sys.path outside the repo); between the
# runs the driver forgets the modules the first bundle loaded, so the second imports its own again
# (checked: each run's lakeq modules come from its own script's lakeq-glue-<digest> folder, none from
# the repo; the replay and backlog bundles hold the same modules today, so that folder is one).
# The replay runs first: it stops its local session, so the backlog's gets a fresh one, with its
# own options, as in its own process.
DRIVER = """
import json, os, runpy, sys
base_path, base_mods = list(sys.path), set(sys.modules)
report = []


def bundle_dir(f):
    head, sep, tail = (f or "").partition("lakeq-glue-")
    return head + sep + tail.split(os.sep, 1)[0] if sep else None


for script, *argv in json.loads(sys.argv[1]):
    sys.argv = [script, *argv]
    try:
        runpy.run_path(script, run_name="__main__")
        code = 0
    except SystemExit as e:
        code = e.code
    dirs = sorted({bundle_dir(getattr(m, "__file__", None)) for m in list(sys.modules.values())} - {None})
    repo = [n for n, m in sys.modules.items() if n.split(".")[0] in ("lakeq", "lakeq_lake")
            and not bundle_dir(getattr(m, "__file__", None))]
    report.append({"script": os.path.basename(script), "code": code, "bundle_dirs": dirs,
                   "not_from_a_bundle": repo, "path": list(sys.path)})
    for name in set(sys.modules) - base_mods:  # the next script imports its own bundle's modules
        if bundle_dir(getattr(sys.modules[name], "__file__", None)):
            del sys.modules[name]
    sys.path[:] = base_path
print("DRIVER-REPORT " + json.dumps(report))
"""


def _lake_from_samples(lake_dir: Path, kinds: dict[str, str], samples: tuple[str, ...]) -> None:
    """A lake folder as the archiver's code writes it from the events/ stream samples."""
    sys.path.insert(0, str(ROOT / "layers" / "core"))
    from lakeq.lake import archive as lake

    for name in samples:
        ev = json.loads((ROOT / "events" / name).read_text())
        for key, blob in lake.batch_objects(ev["Records"], kinds).items():
            (lake_dir / key).parent.mkdir(parents=True, exist_ok=True)
            (lake_dir / key).write_bytes(blob)


@pytest.mark.spark
def test_generated_scripts_run_their_jobs_outside_the_repo(tmp_path):
    """The real runs (one process, one JVM: tens of seconds), each self-contained script with the repo
    nowhere on sys.path, on lake folders built by the archiver's code from the events/ stream samples:

    - replay, as Glue runs it: its default arguments, the run's and Glue's own ones (ignored) on the
      command line → selection.json and the manifest; a run that fails → error.json and exit 1;
    - backlog → the risk summary."""
    pytest.importorskip("pyspark")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("no Java")
    replay_lake, backlog_lake = tmp_path / "replay-lake", tmp_path / "backlog-lake"
    _lake_from_samples(replay_lake, {"lakeq-local-segments": "messages"}, ("stream_segments.json",))
    _lake_from_samples(backlog_lake, {"lakeq-local-segments": "messages", "lakeq-local-offsets": "offsets",
                                      "lakeq-local-groups": "members"},
                       ("stream_segments.json", "stream_offsets.json", "stream_groups.json"))
    for job in ("replay", "backlog"):
        shutil.copy(P.DIST / f"{job}.py", tmp_path / f"{job}.py")
    env = isolated_env(tmp_path)
    env["PYSPARK_PYTHON"] = sys.executable
    t0 = 1_767_225_600_000
    glue_own = ["--JOB_ID", "j_1", "--JOB_RUN_ID", "jr_1", "--job-bookmark-option", "job-bookmark-disable",
                "--TempDir", "s3://tmp/x", "--enable-metrics", "true", "--job-language", "python"]

    def replay(rid: str, flt: str) -> list[str]:
        return [str(tmp_path / "replay.py"), *glue_own, "--lake", str(replay_lake), "--replay_id", rid,
                "--topic", "quotes", "--from_ms", str(t0), "--to_ms", str(t0 + 2 * 3_600_000), "--filter", flt,
                "--master", "local[2]", "--no-progress"]

    runs = [replay("rp_ok", '{"tags": ["A"]}'),
            replay("rp_bad", '{"conditions": [{"field": "x"}]}'),  # a level without a test: refused
            [str(tmp_path / "backlog.py"), "--lake", str(backlog_lake), "--as_of_ms", str(t0 + 3_600_000 + 60_000)]]
    out = subprocess.run([sys.executable, "-I", "-c", DRIVER, json.dumps(runs)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.split("DRIVER-REPORT ", 1)[1])
    assert [(r["script"], r["code"]) for r in report] == [("replay.py", 0), ("replay.py", 1), ("backlog.py", 0)], \
        out.stderr[-3000:]
    repo_dirs = [ROOT, ROOT / "glue_jobs", ROOT / "glue_jobs" / "dist", ROOT / "layers" / "core",
                 ROOT / "layers" / "matcher"]
    for r in report:
        assert not [p for p in r["path"] if Path(p) in repo_dirs], r
        assert r["not_from_a_bundle"] == [], r
    for r, job in zip(report, ("replay", "replay", "backlog")):  # each from its own bundle's folder
        digest = hashlib.sha256(P.bundle(ROOT / "glue_jobs" / f"{job}.py")).hexdigest()[:16]
        assert r["bundle_dirs"] == [str(tmp_path / "tmp" / f"lakeq-glue-{digest}")], r

    sel = json.loads((replay_lake / "replays/rp_ok/selection.json").read_text())
    assert sel["found"] == 2 and sel["missing_bodies"] == 0 and sel["queues"] == {"0": 2}  # offsets 0 and 2
    assert not (replay_lake / "replays/rp_ok/error.json").exists()
    assert json.loads((replay_lake / "replays/rp_bad/error.json").read_text())["error"]
    assert not (replay_lake / "replays/rp_bad/selection.json").exists()

    sys.path.insert(0, str(ROOT / "glue_jobs"))
    from lakeq_lake.jobs import summary_key

    risk = json.loads((backlog_lake / summary_key("risk", "quotes")).read_text())
    assert [(q["queue"], q["produced"], q["committed"], q["backlog"]) for q in risk["queues"]] == [(0, 5, 3, 2)]


SAM = ROOT / ".venv-sam" / "bin" / "sam"


@pytest.mark.skipif(not SAM.exists(), reason="no SAM CLI in .venv-sam (make sam-build installs it)")
def test_sam_package_uploads_the_generated_scripts(tmp_path):
    """`sam package` (what `sam deploy` runs first) against moto's S3: each Glue job's ScriptLocation
    becomes an s3:// object whose bytes are the generated script."""
    import re

    import boto3
    from moto.server import ThreadedMotoServer

    from infra.local.__main__ import free_port

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "PYTHON"))}
        env.update({"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "testing",
                    "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
                    "SAM_CLI_TELEMETRY": "0"})
        s3 = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], region_name="us-east-1",
                          aws_access_key_id="testing", aws_secret_access_key="testing")
        s3.create_bucket(Bucket="artifacts")
        out_tpl = tmp_path / "packaged.yaml"
        out = subprocess.run([str(SAM), "package", "--template-file", str(ROOT / "template.yaml"),
                              "--s3-bucket", "artifacts", "--s3-prefix", "lakeq", "--region", "us-east-1",
                              "--output-template-file", str(out_tpl)],
                             cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
        locations = re.findall(r"ScriptLocation: (\S+)", out_tpl.read_text())
        assert len(locations) == len(P.JOBS)
        uploaded = set()
        for loc in locations:
            assert loc.startswith("s3://artifacts/lakeq/"), loc
            bucket, key = loc[len("s3://"):].split("/", 1)
            uploaded.add(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
        assert uploaded == {(P.DIST / f"{job}.py").read_bytes() for job in P.JOBS}
    finally:
        server.stop()
