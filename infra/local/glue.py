"""The template's Glue jobs on the local stack: ``StartJobRun`` made real (issue 18.1).

The replay function starts the selection job with ``glue.start_job_run(JobName="<stack>-replay-select",
Arguments=...)``. On the local stack every function's Glue client is pointed at the gateway
(``AWS_ENDPOINT_URL_GLUE=http://127.0.0.1:<port>/_local/glue``, as the WebSocket management API
is pointed at its own server), where :class:`LocalGlue` serves Glue's JSON 1.1 protocol for the
``AWS::Glue::Job`` resources of ``template.yaml``:

- ``StartJobRun`` → ``{"JobRunId": "jr_…"}`` at once; the run is queued and run by one thread,
  one run at a time (a JVM at a time is enough for a laptop), started on the first run (the
  stack's start-up and idle cost do not change: the thread blocks on its queue). The run's
  arguments are the job's ``DefaultArguments`` overridden by the run's, as on Glue;
  ``MaxConcurrentRuns`` counts the runs not finished (``ConcurrentRunsExceededException``);
  an unknown job is ``EntityNotFoundException``;
- ``GetJobRun`` / ``GetJobRuns``: the runs with their state (``STARTING`` → ``RUNNING`` →
  ``SUCCEEDED`` | ``FAILED`` | ``STOPPED``) and ``ErrorMessage`` (a run past the job's
  ``Timeout`` is killed and FAILED).

How a run runs (:func:`runner`): the replay job (script ``replay``) by :class:`ReplayRun`: the
stack's streams drained (the archiver's 60 s window would otherwise hide the newest messages),
the ``raw/`` objects of the run's hours copied from the lake bucket (moto S3) to a temporary folder
(hadoop-aws cannot be installed here, so Spark reads a folder with the lake's layout, like
``make jobs``), ``python glue_jobs/replay.py`` with the run's arguments (``--lake`` = that folder,
``--master local[2]``) in a subprocess, then ``replays/<id>/`` uploaded back — the manifest parts
first, ``selection.json`` or ``error.json`` last, since those two keys are what the copier waits for.
When Spark cannot run here (no pyspark, no Java) the run writes ``error.json`` saying so; when the
subprocess dies without writing either key, the run writes ``error.json`` with its exit code and
last line. Other jobs (backlog, rebalance plan) run as their triggers run them
(``python -m glue_jobs.local --job <script>``, :func:`infra.local.schedules.glue_runner`).
"""
from __future__ import annotations

import datetime as dt
import importlib.util
import json
import logging
import os
import queue
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from werkzeug.wrappers import Request, Response

from . import template as tpl_mod

log = logging.getLogger("lakeq.local.glue")

PATH = "/_local/glue"
ENV = "AWS_ENDPOINT_URL_GLUE"
DONE = frozenset({"SUCCEEDED", "FAILED", "STOPPED", "TIMEOUT", "ERROR"})


@dataclass(frozen=True)
class Job:
    logical_id: str
    name: str  # the resolved Name (lakeq-local-replay-select)
    script: str  # the ScriptLocation's stem (replay)
    default_arguments: dict[str, str]
    max_concurrent: int = 1
    timeout_min: int = 2880  # Glue's default


@dataclass
class JobRun:
    id: str
    job: str
    arguments: dict[str, str]
    state: str = "STARTING"
    started_on: float = field(default_factory=time.time)
    completed_on: float | None = None
    error: str | None = None

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"Id": self.id, "Attempt": 0, "JobName": self.job, "Arguments": dict(self.arguments),
                               "JobRunState": self.state, "StartedOn": self.started_on,
                               "LastModifiedOn": self.completed_on or self.started_on}
        if self.completed_on is not None:
            out["CompletedOn"] = self.completed_on
            out["ExecutionTime"] = int(self.completed_on - self.started_on)
        if self.error:
            out["ErrorMessage"] = self.error
        return out


class GlueError(Exception):
    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


def jobs(template: Any = None, stack_name: str = tpl_mod.LOCAL_STACK) -> dict[str, Job]:
    """The template's ``AWS::Glue::Job`` resources by their (resolved) name."""
    ctx = tpl_mod._ctx(template, stack_name, None)
    out = {}
    for lid, res in tpl_mod.resources_of_type(ctx.template, "AWS::Glue::Job").items():
        props = res.get("Properties") or {}
        name = str(tpl_mod.resolve(props.get("Name"), ctx) or lid)
        loc = str(tpl_mod.resolve((props.get("Command") or {}).get("ScriptLocation"), ctx))
        defaults = {str(k): str(v) for k, v in (tpl_mod.resolve(props.get("DefaultArguments") or {}, ctx)).items()}
        limit = int(tpl_mod.resolve((props.get("ExecutionProperty") or {}).get("MaxConcurrentRuns", 1), ctx))
        out[name] = Job(lid, name, loc.rstrip("/").rsplit("/", 1)[-1].removesuffix(".py"), defaults, limit,
                        int(tpl_mod.resolve(props.get("Timeout", 2880), ctx)))
    return out


# A run: ``(job, run, arguments) -> None`` on success, else the error message (or it raises).
RunFn = Callable[[Job, JobRun, dict], "str | None"]


class LocalGlue:
    """Glue's job-run API for the template's jobs (see the module's docstring)."""

    def __init__(self, template: Any = None, run: RunFn | None = None, *, stack_name: str = tpl_mod.LOCAL_STACK):
        self.jobs = jobs(template, stack_name)
        self._run = run
        self.runs: dict[str, JobRun] = {}
        self._lock = threading.Lock()
        self._queue: queue.Queue[JobRun | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._stopped = threading.Event()
        self._finished = threading.Condition(self._lock)

    # ----- the API
    def start_job_run(self, name: str, arguments: Mapping[str, str] | None = None) -> str:
        job = self.jobs.get(name)
        if job is None:
            raise GlueError("EntityNotFoundException", f"Job with name: {name} not found.")
        args = dict(arguments or {})
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in args.items()):
            raise GlueError("InvalidInputException", "Arguments must map strings to strings")
        with self._lock:
            if self._stopped.is_set():
                raise GlueError("InternalServiceException", "the local stack is stopping")
            active = sum(1 for r in self.runs.values() if r.job == name and r.state not in DONE)
            if active >= job.max_concurrent:
                raise GlueError("ConcurrentRunsExceededException",
                                f"Concurrent runs exceeded for {name}: MaxConcurrentRuns is {job.max_concurrent}")
            run = JobRun("jr_" + secrets.token_hex(32), name, args)
            self.runs[run.id] = run
            if self._thread is None:  # the first run starts the run thread
                self._thread = threading.Thread(target=self._loop, name="local-glue", daemon=True)
                self._thread.start()
        self._queue.put(run)
        log.info("StartJobRun %s → %s", name, run.id)
        return run.id

    def get_job_run(self, name: str, run_id: str) -> dict:
        with self._lock:
            run = self.runs.get(run_id)
            if run is None or run.job != name:
                raise GlueError("EntityNotFoundException", f"Job Run with id: {run_id} not found.")
            return run.describe()

    def get_job_runs(self, name: str) -> list[dict]:
        if name not in self.jobs:
            raise GlueError("EntityNotFoundException", f"Job with name: {name} not found.")
        with self._lock:
            return [r.describe() for r in sorted(self.runs.values(), key=lambda r: -r.started_on) if r.job == name]

    def wait(self, run_id: str, timeout: float) -> str:
        """Block until the run is finished (or ``timeout``); its state (tests)."""
        deadline = time.monotonic() + timeout
        with self._finished:
            while self.runs[run_id].state not in DONE and time.monotonic() < deadline:
                self._finished.wait(deadline - time.monotonic())
            return self.runs[run_id].state

    # ----- running
    def _loop(self) -> None:
        while True:
            run = self._queue.get()  # blocks: no polling
            if run is None or self._stopped.is_set():
                if run is not None:
                    self._finish(run, "STOPPED", "the local stack stopped")
                if run is None:
                    return
                continue
            job = self.jobs[run.job]
            with self._lock:
                run.state = "RUNNING"
            arguments = {**job.default_arguments, **run.arguments}
            try:
                error = self._run(job, run, arguments) if self._run else "the local stack has no Glue runner"
            except Exception as exc:  # noqa: BLE001 - a failing run is a FAILED run
                log.exception("Glue run %s of %s failed", run.id, run.job)
                error = f"{type(exc).__name__}: {exc}"
            if self._stopped.is_set():
                self._finish(run, "STOPPED", error or "the local stack stopped")
            else:
                self._finish(run, "FAILED" if error else "SUCCEEDED", error or None)

    def _finish(self, run: JobRun, state: str, error: str | None) -> None:
        with self._finished:
            run.state, run.error, run.completed_on = state, error, time.time()
            self._finished.notify_all()
        (log.info if state == "SUCCEEDED" else log.error)("Glue run %s of %s: %s%s", run.id, run.job, state,
                                                          f" ({error})" if error else "")

    def stop(self, timeout: float = 10.0) -> None:
        self._stopped.set()
        if self._run is not None and hasattr(self._run, "stop"):
            self._run.stop()
        self._queue.put(None)
        if self._thread is not None:
            self._thread.join(timeout)

    # ----- Glue's JSON 1.1 protocol
    def handle(self, request: Request) -> Response:
        target = request.headers.get("X-Amz-Target", "")
        op = target.split(".", 1)[1] if target.startswith("AWSGlue.") else ""
        try:
            if request.method != "POST":
                raise GlueError("InvalidInputException", "Glue's API takes POST requests")
            body = json.loads(request.get_data() or b"{}")
            if op == "StartJobRun":
                out: dict = {"JobRunId": self.start_job_run(body.get("JobName", ""), body.get("Arguments"))}
            elif op == "GetJobRun":
                out = {"JobRun": self.get_job_run(body.get("JobName", ""), body.get("RunId", ""))}
            elif op == "GetJobRuns":
                out = {"JobRuns": self.get_job_runs(body.get("JobName", ""))}
            else:
                raise GlueError("InvalidInputException",
                                f"{op or target or 'this call'} is not served by the local stack "
                                "(StartJobRun, GetJobRun and GetJobRuns are)")
            return Response(json.dumps(out), mimetype="application/x-amz-json-1.1")
        except GlueError as exc:
            return Response(json.dumps({"__type": exc.code, "message": exc.message}), status=400,
                            mimetype="application/x-amz-json-1.1")
        except ValueError:
            return Response(json.dumps({"__type": "SerializationException", "message": "bad JSON"}),
                            status=400, mimetype="application/x-amz-json-1.1")


# ---------------------------------------------------------------------------- how runs run


def spark_missing(which: Callable[[str], str | None] = shutil.which) -> str | None:
    """Why a local SparkSession cannot start here, or None."""
    if importlib.util.find_spec("pyspark") is None:
        return "pyspark is not installed (the `lake` extra: pip install -e '.[lake]')"
    if which("java") is None and not os.environ.get("JAVA_HOME"):
        return "no Java runtime (Spark needs Java 17 on PATH or JAVA_HOME)"
    return None


def _hours(from_ms: int, to_ms: int) -> tuple[str, str, list[str]]:
    """The first and last ``"YYYY-MM-DD HH"`` of ``[from, to)`` and the days between (``dt=`` values)."""
    first = dt.datetime.fromtimestamp(from_ms / 1000, dt.timezone.utc)
    last = dt.datetime.fromtimestamp(max(from_ms, to_ms - 1) / 1000, dt.timezone.utc)
    days, d = [], first.date()
    while d <= last.date():
        days.append(d.isoformat())
        d += dt.timedelta(days=1)
    return first.strftime("%Y-%m-%d %H"), last.strftime("%Y-%m-%d %H"), days


class ReplayRun:
    """Runs the replay-select job once per run (see the module's docstring). The lake bucket is the
    run's ``--lake s3://<bucket>`` (the job's default argument); ``s3`` makes the S3 client (the
    stack's moto); ``drain`` brings the streams into the lake first."""

    SIGNALS = ("selection.json", "error.json")

    def __init__(self, *, s3: Callable[[], Any] | None = None, drain: Callable[[], Any] | None = None,
                 which: Callable[[str], str | None] = shutil.which, python: str = sys.executable,
                 script: Path = tpl_mod.REPO_ROOT / "glue_jobs" / "replay.py", master: str = "local[2]"):
        self.bucket = ""
        self._s3_factory = s3
        self._s3 = None
        self.drain = drain
        self.which = which
        self.python = python
        self.script = Path(script)
        self.master = master
        self._proc: subprocess.Popen | None = None
        self._stopped = threading.Event()

    def s3(self):
        if self._s3 is None:
            if self._s3_factory is not None:
                self._s3 = self._s3_factory()
            else:
                import boto3

                self._s3 = boto3.client("s3")
        return self._s3

    def put_error(self, replay_id: str, text: str) -> None:
        self.s3().put_object(Bucket=self.bucket, Key=f"replays/{replay_id}/error.json",
                             Body=json.dumps({"error": text}).encode("utf-8"), ContentType="application/json")

    def __call__(self, job: Job, run: JobRun, arguments: dict) -> str | None:
        rid = arguments.get("--replay_id")
        if not rid:
            return "no --replay_id argument: nothing to write error.json under"
        lake_arg = arguments.get("--lake", "")
        if not lake_arg.startswith("s3://"):
            return f"--lake {lake_arg!r} is not the stack's lake bucket (s3://<bucket>)"
        self.bucket = lake_arg[len("s3://"):].split("/", 1)[0]
        why = spark_missing(self.which)
        if why:
            text = f"the local stack cannot run the selection job: {why}"
            self.put_error(rid, text)
            return text
        if self.drain is not None:
            self.drain()
        tmp = Path(tempfile.mkdtemp(prefix="lakeq-replay-"))
        try:
            lake = tmp / "lake"
            lake.mkdir()
            n = self.download_slice(arguments, lake)
            log.info("replay %s (%s): %d raw object(s) of its hours copied to %s", rid, run.id, n, lake)
            args = [a for k, v in arguments.items() if k not in ("--lake", "--master") for a in (k, v)]
            cmd = [self.python, str(self.script), *args, "--lake", str(lake), "--master", self.master,
                   "--no-progress"]
            env = dict(os.environ)
            env.setdefault("PYSPARK_PYTHON", self.python)
            out_path = tmp / "job.log"
            with open(out_path, "wb") as out:
                self._proc = subprocess.Popen(cmd, cwd=str(tpl_mod.REPO_ROOT), env=env, stdin=subprocess.DEVNULL,
                                              stdout=out, stderr=subprocess.STDOUT)
                try:
                    code = self._proc.wait(timeout=job.timeout_min * 60)
                except subprocess.TimeoutExpired:
                    self._proc.kill()
                    code = self._proc.wait()
                    self.upload(lake, rid)
                    text = f"the selection job timed out after {job.timeout_min} minute(s)"
                    self.put_error(rid, text)
                    return text
                finally:
                    self._proc = None
            output = out_path.read_text("utf-8", "replace")
            for line in output.splitlines()[-40:]:
                log.info("replay %s | %s", rid, line)
            wrote = self.upload(lake, rid)
            if code == 0 and "selection.json" in wrote:
                return None
            if "error.json" in wrote:
                return json.loads((lake / "replays" / rid / "error.json").read_text())["error"]
            last = next((ln.strip() for ln in reversed(output.splitlines()) if ln.strip()), "")
            text = (f"the selection job was stopped (exit {code})" if self._stopped.is_set()
                    else f"the selection job exited with {code}: {last}"[:2000])
            self.put_error(rid, text)
            return text
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def download_slice(self, arguments: Mapping[str, str], lake: Path) -> int:
        """The ``raw/kind=messages|bodies`` objects of the run's hours and their compacted hours'
        newest manifests and Parquet files (what the job reads) → ``lake``."""
        try:
            first, last, days = _hours(int(arguments.get("--from_ms", "")), int(arguments.get("--to_ms", "")))
        except ValueError:
            return 0  # the job refuses its arguments itself (error.json)
        s3, n = self.s3(), 0
        for kind in ("messages", "bodies"):
            for day in days:
                prefix = f"raw/kind={kind}/dt={day}/"
                for page in s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
                    for o in page.get("Contents", []):
                        key = o["Key"]
                        hour = key[len(prefix):].split("/", 1)[0].removeprefix("hour=")
                        if not first <= f"{day} {hour}" <= last:
                            continue
                        target = lake / key
                        target.parent.mkdir(parents=True, exist_ok=True)
                        target.write_bytes(s3.get_object(Bucket=self.bucket, Key=key)["Body"].read())
                        n += 1
                n += self._download_compacted(kind, day, first, last, lake)
        return n

    def _download_compacted(self, kind: str, day: str, first: str, last: str, lake: Path) -> int:
        """The newest manifest of each compacted hour of ``day`` in ``[first, last]`` and its Parquet
        files (``lakeq.lake.compaction``: the job reads them instead of the raw keys they hold)."""
        from lakeq.lake import compaction as C

        s3, n = self.s3(), 0
        prefix = f"{C.MANIFESTS}/kind={kind}/dt={day}/"
        keys = [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix)
                for o in page.get("Contents", [])]
        for hour, key in C.newest_manifests(keys, kind).items():
            if not C.in_hours(hour, first, last):
                continue
            data = s3.get_object(Bucket=self.bucket, Key=key)["Body"].read()
            for k in [key, *json.loads(data).get("parquet", [])]:
                target = lake / k
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data if k == key else s3.get_object(Bucket=self.bucket, Key=k)["Body"].read())
                n += 1
        return n

    def upload(self, lake: Path, replay_id: str) -> set[str]:
        """``replays/<id>/`` back to the bucket, the signal keys last; the names of those uploaded."""
        root = lake / "replays" / replay_id
        if not root.is_dir():
            return set()
        files = [f for f in root.rglob("*") if f.is_file() and not f.name.startswith((".", "_"))
                 and not f.name.endswith((".crc", ".tmp"))]
        files.sort(key=lambda f: (f.parent == root and f.name in self.SIGNALS, str(f)))
        for f in files:
            self.s3().put_object(Bucket=self.bucket, Key=f.relative_to(lake).as_posix(), Body=f.read_bytes())
        return {f.name for f in files if f.parent == root and f.name in self.SIGNALS}

    def stop(self) -> None:
        self._stopped.set()
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()


def runner(replay: ReplayRun, other: Callable[[str], int] | None = None) -> RunFn:
    """The stack's way to run a job run: the replay job by ``replay``, any other job by ``other``
    (``glue_runner``: its script against the stack, as its trigger runs it; the run's arguments are
    not used by those jobs locally)."""

    def run(job: Job, jr: JobRun, arguments: dict) -> str | None:
        if job.script == "replay":
            return replay(job, jr, arguments)
        if other is None:
            return f"the local stack does not run {job.name} on StartJobRun"
        code = other(job.script)
        return None if code == 0 else f"{job.script} exited with {code}"

    def stop() -> None:
        replay.stop()
        if other is not None and hasattr(other, "stop"):
            other.stop()

    run.stop = stop  # type: ignore[attr-defined]
    return run
