"""Glue job ``backlog`` (SPEC §5): backlog per group, topic and queue over time → ``reports/backlog/``.

On Glue: ``--lake s3://<bucket>`` (``getResolvedOptions``); elsewhere:
``python glue_jobs/backlog.py --lake <folder or s3://bucket> [--bucket_minutes 60] [--as_of_ms N]``.
The work is in ``lakeq_lake.jobs.run_backlog`` over the pure transforms of ``lakeq_lake.transforms``.
"""
from __future__ import annotations

import argparse
import sys

OPTIONS = ["lake", "bucket_minutes"]


def options(argv: list[str]) -> dict:
    try:
        from awsglue.utils import getResolvedOptions  # type: ignore[import-not-found]
    except ImportError:
        p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
        p.add_argument("--lake", required=True)
        p.add_argument("--bucket_minutes", type=int, default=60)
        p.add_argument("--as_of_ms", type=int, default=None)
        p.add_argument("--master", default="local[2]")
        return vars(p.parse_args(argv[1:]))
    args = getResolvedOptions(argv, OPTIONS)
    return {"lake": args["lake"], "bucket_minutes": int(args["bucket_minutes"]), "as_of_ms": None, "master": None}


def main(argv: list[str]) -> int:
    opts = options(argv)
    from lakeq_lake import local_paths

    local_paths()
    from lakeq_lake.jobs import run_backlog, session
    from lakeq_lake.store import Lake

    spark = session("lakeq-backlog", opts["master"])
    run_backlog(spark, Lake(opts["lake"]), opts["as_of_ms"], opts["bucket_minutes"])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
