"""Glue job ``replay-select`` (issue 18.1): the messages of one topic in ``[from, to)`` that a filter
keeps → ``replays/<id>/manifest/`` and ``replays/<id>/selection.json`` (docs/design.md "Replay").

On Glue (template.yaml ``ReplaySelectJob``, started by the replay function with ``StartJobRun``):
``--lake s3://<bucket>`` from the job's default arguments, the run's ``--replay_id``, ``--topic``,
``--from_ms``, ``--to_ms``, ``--filter`` (JSON text, ``{}`` = no filter) and ``--dry_run`` (``true``: a
dry run — ``selection.json`` with the count and sample, no manifest written), read with
``getResolvedOptions`` (Glue's own arguments — ``--JOB_ID``, ``--JOB_RUN_ID``, ``--TempDir``… — are
ignored). Elsewhere (the local stack runs it so, ``infra/local/glue.py``)::

    python glue_jobs/replay.py --lake <folder or s3://bucket> --replay_id r1 --topic quotes \\
        --from_ms 1767225600000 --to_ms 1767236400000 [--filter '{"tags": ["A"]}'] [--master 'local[*]']

shows the job's progress bar on stderr (``--no-progress``: not) and prints the summary (JSON) on
stdout. Unknown arguments are ignored there too (``parse_known_args``), so Glue's command line works.

A failed run writes ``replays/<id>/error.json`` = ``{"error": "<text>"}`` and exits 1: with
``selection.json`` the only signal the copier reads (it never asks Glue about the run).
"""
from __future__ import annotations

import argparse
import json
import sys
import traceback

OPTIONS = ["lake", "replay_id", "topic", "from_ms", "to_ms"]


def error_key(replay_id: str) -> str:
    return f"replays/{replay_id}/error.json"


def options(argv: list[str]) -> dict:
    """The run's options from Glue's command line (``getResolvedOptions``) or argparse, which ignores
    arguments it does not know (Glue's own)."""
    try:
        from awsglue.utils import getResolvedOptions  # type: ignore[import-not-found]
    except ImportError:
        getResolvedOptions = None
    if getResolvedOptions is not None:
        names = OPTIONS + [n for n in ("filter", "dry_run") if f"--{n}" in argv]  # getResolvedOptions needs every name
        a = getResolvedOptions(argv, names)
        return {"lake": a["lake"], "replay_id": a["replay_id"], "topic": a["topic"], "from_ms": a["from_ms"],
                "to_ms": a["to_ms"], "filter": a.get("filter"), "dry_run": a.get("dry_run", "false"),
                "master": None, "progress": False}
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], allow_abbrev=False)
    p.add_argument("--lake", required=True)
    p.add_argument("--replay_id", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--from_ms", required=True)
    p.add_argument("--to_ms", required=True)
    p.add_argument("--filter", default=None, help="JSON: {\"conditions\": [...], \"tags\": [...]}")
    p.add_argument("--dry_run", default="false", choices=["true", "false"],
                   help="count and sample only: no manifest written")
    p.add_argument("--master", default="local[*]")
    p.add_argument("--no-progress", dest="progress", action="store_false")
    a, _glue_own = p.parse_known_args(argv[1:])
    return vars(a)


def write_error(lake: str, replay_id: str, text: str) -> None:
    """``replays/<id>/error.json`` in the lake (``s3://`` through boto3, or a folder), without Spark:
    it must work when Spark is what failed."""
    data = json.dumps({"error": text}).encode("utf-8")
    key = error_key(replay_id)
    if lake.startswith("s3://"):
        import boto3

        bucket = lake[len("s3://"):].split("/", 1)[0]
        boto3.client("s3").put_object(Bucket=bucket, Key=key, Body=data, ContentType="application/json")
        return
    from pathlib import Path

    path = Path(lake.rstrip("/")) / key
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def describe(exc: BaseException) -> str:
    """A short text for error.json: the exception's type and its first lines (a Py4J error's text is
    a whole Java stack trace)."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return f"{type(exc).__name__}: {' '.join(lines[:3])}"[:2000]


def select(opts: dict) -> dict:
    """The job's work (raises on any failure)."""
    from lakeq_lake import local_paths

    local_paths()
    from lakeq.replay.rules import Filter

    raw = json.loads(opts["filter"]) if opts.get("filter") else None
    flt = Filter.of(raw or None)  # {} = no filter
    from_ms, to_ms = int(opts["from_ms"]), int(opts["to_ms"])
    if not from_ms < to_ms:
        raise ValueError(f"from_ms ({from_ms}) must be before to_ms ({to_ms})")
    from lakeq_lake.jobs import session
    from lakeq_lake.replay import run_replay
    from lakeq_lake.store import Lake

    spark = session("lakeq-replay", opts["master"])
    if opts["master"]:
        spark.sparkContext.setLogLevel("ERROR")
    try:
        return run_replay(spark, Lake(opts["lake"]), opts["replay_id"], opts["topic"], from_ms, to_ms, flt,
                          show_progress=bool(opts.get("progress")), log=lambda m: print(m, file=sys.stderr),
                          dry_run=opts.get("dry_run") == "true")
    finally:
        if opts["master"]:  # a local session (Glue ends its own)
            spark.stop()


def main(argv: list[str]) -> int:
    opts = options(argv)
    try:
        s = select(opts)
    except Exception as exc:  # noqa: BLE001 - every failure becomes error.json and a non-zero exit
        traceback.print_exc()
        text = describe(exc)
        try:
            write_error(opts["lake"], opts["replay_id"], text)
        except Exception:  # noqa: BLE001
            traceback.print_exc()
        print(f"replay {opts['replay_id']} failed: {text}", file=sys.stderr)
        return 1
    print(json.dumps({k: v for k, v in s.items() if k != "parts"} | {"parts": len(s["parts"])}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
