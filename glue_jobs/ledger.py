"""Glue job ``ledger`` (issue 32.4): the delivery ledger — every message produced in the last
``window_hours`` accounted for per group and topic → ``reports/ledger/``.

On Glue: ``--lake s3://<bucket> --window_hours 24`` (``getResolvedOptions``); elsewhere:
``python glue_jobs/ledger.py --lake <folder or s3://bucket> [--window_hours 24] [--as_of_ms N]
[--retention_hours N]``. The work is in ``lakeq_lake.ledger.run_ledger``.
"""
from __future__ import annotations

import argparse
import sys

OPTIONS = ["lake", "window_hours"]


def options(argv: list[str]) -> dict:
    try:
        from awsglue.utils import getResolvedOptions  # type: ignore[import-not-found]
    except ImportError:
        p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
        p.add_argument("--lake", required=True)
        p.add_argument("--window_hours", type=int, default=24)
        p.add_argument("--retention_hours", type=int, default=None)
        p.add_argument("--as_of_ms", type=int, default=None)
        p.add_argument("--master", default="local[2]")
        return vars(p.parse_args(argv[1:]))
    args = getResolvedOptions(argv, OPTIONS)
    return {"lake": args["lake"], "window_hours": int(args["window_hours"]), "retention_hours": None,
            "as_of_ms": None, "master": None}


def main(argv: list[str]) -> int:
    opts = options(argv)
    from lakeq_lake import local_paths

    local_paths()
    from lakeq_lake.jobs import session
    from lakeq_lake.ledger import run_ledger
    from lakeq_lake.store import Lake

    spark = session("lakeq-ledger", opts["master"])
    run_ledger(spark, Lake(opts["lake"]), opts["as_of_ms"], opts["window_hours"], opts["retention_hours"])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
