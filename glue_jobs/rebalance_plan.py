"""Glue job ``rebalance_plan`` (SPEC §5): per group, weigh queues by measured traffic and lag, compute a
load-balanced sticky assignment of the group's current members and publish it (``groups.set_plan``
through the groups repository) so the group's next rebalance applies it.

On Glue: ``--lake s3://<bucket> --GROUPS_TABLE … --GROUP_MEMBERS_TABLE … --TOPICS_TABLE …`` (``getResolvedOptions``);
elsewhere: ``python glue_jobs/rebalance_plan.py --lake <folder or s3://bucket> [--no-publish]``
with the tables' names in the environment. Work: ``lakeq_lake.jobs.run_rebalance_plan``.
"""
from __future__ import annotations

import argparse
import os
import sys

OPTIONS = ["lake", "lookback_minutes", "horizon_minutes", "publish", "GROUPS_TABLE", "GROUP_MEMBERS_TABLE",
           "TOPICS_TABLE"]


def options(argv: list[str]) -> dict:
    try:
        from awsglue.utils import getResolvedOptions  # type: ignore[import-not-found]
    except ImportError:
        p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
        p.add_argument("--lake", required=True)
        p.add_argument("--bucket_minutes", type=int, default=60)
        p.add_argument("--lookback_minutes", type=int, default=60)
        p.add_argument("--horizon_minutes", type=int, default=60)
        p.add_argument("--as_of_ms", type=int, default=None)
        p.add_argument("--no-publish", dest="publish", action="store_false")
        p.add_argument("--master", default="local[2]")
        return vars(p.parse_args(argv[1:]))
    a = getResolvedOptions(argv, OPTIONS)
    # the core layer's pynamodb models read their table names from the environment
    for name in ("GROUPS_TABLE", "GROUP_MEMBERS_TABLE", "TOPICS_TABLE"):
        os.environ[name] = a[name]
    return {"lake": a["lake"], "bucket_minutes": 60, "lookback_minutes": int(a["lookback_minutes"]),
            "horizon_minutes": int(a["horizon_minutes"]), "as_of_ms": None,
            "publish": a["publish"].lower() == "true", "master": None}


def main(argv: list[str]) -> int:
    opts = options(argv)
    from lakeq_lake import local_paths

    local_paths()
    from lakeq_lake.jobs import run_rebalance_plan, session
    from lakeq_lake.store import Lake

    spark = session("lakeq-rebalance-plan", opts["master"])
    run_rebalance_plan(spark, Lake(opts["lake"]), opts["as_of_ms"], opts["bucket_minutes"],
                       opts["lookback_minutes"], opts["horizon_minutes"], opts["publish"])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
