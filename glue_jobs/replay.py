"""Replay selection job (issue 18.1): the messages of one topic in ``[from, to)`` that a filter keeps
→ ``replays/<id>/manifest/`` and ``replays/<id>/selection.json`` (docs/design.md "Replay").

Locally (not yet a Glue job of template.yaml, nor in ``glue_jobs.package.JOBS``)::

    python glue_jobs/replay.py --lake <folder or s3://bucket> --replay_id r1 --topic quotes \\
        --from_ms 1767225600000 --to_ms 1767236400000 [--filter '{"tags": ["A"]}'] [--master 'local[*]']

shows the job's progress bar on stderr and prints the summary (JSON) on stdout.
"""
from __future__ import annotations

import argparse
import json
import sys


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--lake", required=True)
    p.add_argument("--replay_id", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--from_ms", type=int, required=True)
    p.add_argument("--to_ms", type=int, required=True)
    p.add_argument("--filter", default=None, help="JSON: {\"conditions\": [...], \"tags\": [...]}")
    p.add_argument("--master", default="local[*]")
    p.add_argument("--no-progress", action="store_true")
    a = p.parse_args(argv[1:])
    from lakeq_lake import local_paths

    local_paths()
    from lakeq.replay.rules import Filter
    from lakeq_lake.jobs import session
    from lakeq_lake.replay import run_replay
    from lakeq_lake.store import Lake

    flt = Filter.of(json.loads(a.filter) if a.filter else None)
    spark = session("lakeq-replay", a.master)
    spark.sparkContext.setLogLevel("ERROR")
    s = run_replay(spark, Lake(a.lake), a.replay_id, a.topic, a.from_ms, a.to_ms, flt,
                   show_progress=not a.no_progress, log=lambda m: print(m, file=sys.stderr))
    print(json.dumps({k: v for k, v in s.items() if k != "parts"} | {"parts": len(s["parts"])}))
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
