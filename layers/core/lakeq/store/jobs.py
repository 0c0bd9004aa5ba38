"""Glue job runs started by the functions (issue 18.1: the replay's selection job).

One botocore ``glue`` client per container, made on first use (:mod:`lakeq.store.clients`, as
:mod:`lakeq.store.bodies` makes its S3 one), so a function that starts no job never creates it.
The job's name comes from the environment (``REPLAY_JOB``: ``<stack>-replay-select``); its
outcome is read from the objects the job writes, never from ``glue:GetJobRun``.
"""
from __future__ import annotations

import os

from lakeq.store.clients import client


def _client():
    return client("glue")


def start_replay_selection(args: dict[str, str]) -> str:
    """``glue:StartJobRun`` of the replay selection job with run arguments ``args`` (names without
    the leading ``--``, values strings). Returns the job run's id."""
    out = _client().start_job_run(JobName=os.environ["REPLAY_JOB"],
                                  Arguments={f"--{k}": str(v) for k, v in args.items()})
    return out["JobRunId"]
