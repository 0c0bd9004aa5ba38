"""Glue job runs started by the functions (issue 18.1: the replay's selection job).

One botocore ``glue`` client per container, made on first use (as :mod:`lakeq.store.bodies` does
for S3), so a function that starts no job never creates it. The job's name comes from the
environment (``REPLAY_JOB``: ``<stack>-replay-select``); its outcome is read from the objects the
job writes, never from ``glue:GetJobRun``.
"""
from __future__ import annotations

import os

_glue = None


def _client():
    global _glue
    if _glue is None:
        import botocore.session

        _glue = botocore.session.get_session().create_client("glue")
    return _glue


def reset_client() -> None:
    """Forget the client (tests: a new moto mock per test)."""
    global _glue
    _glue = None


def start_replay_selection(args: dict[str, str]) -> str:
    """``glue:StartJobRun`` of the replay selection job with run arguments ``args`` (names without
    the leading ``--``, values strings). Returns the job run's id."""
    out = _client().start_job_run(JobName=os.environ["REPLAY_JOB"],
                                  Arguments={f"--{k}": str(v) for k, v in args.items()})
    return out["JobRunId"]
