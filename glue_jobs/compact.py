"""Glue job ``compact`` (issue 32.1): every closed hour of ``raw/`` → Parquet under ``lake/``,
committed per hour by a manifest (docs/guide-lake.md "Compaction").

On Glue (template.yaml ``CompactJob``, hourly trigger): ``--lake s3://<bucket>`` and
``--grace_minutes``, ``--max_hours`` (getResolvedOptions); elsewhere:
``python glue_jobs/compact.py --lake <folder or s3://bucket> [--grace_minutes 15] [--max_hours 168] [--at_ms N]``.
The work is in ``lakeq_lake.compact.run_compact``; the decisions in ``lakeq.lake.compaction``.
"""
from __future__ import annotations

import argparse
import sys

OPTIONS = ["lake", "grace_minutes", "max_hours"]


def options(argv: list[str]) -> dict:
    try:
        from awsglue.utils import getResolvedOptions  # type: ignore[import-not-found]
    except ImportError:
        p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
        p.add_argument("--lake", required=True)
        p.add_argument("--grace_minutes", type=int, default=15)
        p.add_argument("--max_hours", type=int, default=168, help="hours per kind and run, oldest first")
        p.add_argument("--at_ms", type=int, default=None)
        p.add_argument("--master", default="local[2]")
        p.add_argument("--no-progress", dest="progress", action="store_false")
        return vars(p.parse_args(argv[1:]))
    args = getResolvedOptions(argv, OPTIONS)
    return {"lake": args["lake"], "grace_minutes": int(args["grace_minutes"]), "max_hours": int(args["max_hours"]),
            "at_ms": None, "master": None, "progress": False}


def main(argv: list[str]) -> int:
    opts = options(argv)
    from lakeq_lake import local_paths

    local_paths()
    from lakeq_lake.compact import run_compact
    from lakeq_lake.jobs import session
    from lakeq_lake.store import Lake

    spark = session("lakeq-compact", opts["master"])
    run_compact(spark, Lake(opts["lake"]), opts["at_ms"], opts["grace_minutes"] * 60_000,
                show_progress=bool(opts.get("progress")), max_hours=opts["max_hours"])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
