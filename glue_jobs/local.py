"""``make jobs``: run the data-lake jobs once on a local SparkSession against the running local stack.

1. ``POST /_local/streams/drain`` on the stack (``http://127.0.0.1:$LAKEQ_PORT``): the stream pump
   brings everything produced so far into the lake;
2. ``GET /_local/info``: the stack's moto endpoint and table / bucket names;
3. download ``raw/`` and ``lake/`` from the lake bucket (moto S3) to a local folder
   (``.lake/<bucket>/``; only objects not downloaded before — keys never change content except by
   an identical rewrite, and a manifest is never rewritten);
4. the compaction (its ``lake/`` uploaded back, and what it deleted deleted in the bucket too), the
   backlog job, the delivery ledger's job (issue 32.4), then the rebalance-plan job (publishing each
   plan into its group's state through the groups repository, on the stack's DynamoDB) on
   ``local[2]`` over that folder — the same code the Glue jobs run over ``s3://``;
5. upload ``reports/`` back to the lake bucket (``GET /v1/reports/backlog`` serves it) and print a
   summary table.

``python -m glue_jobs.local [--port N] [--lake-dir .lake] [--no-publish] [--job compact|backlog|ledger|rebalance_plan]``
(``--job``, repeatable: only those jobs, by their script's name; the local stack's scheduler runs
each Glue trigger's job this way: ``make run WITH_JOBS=1``, ``infra/local/schedules.py``).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT / "glue_jobs", ROOT / "layers" / "core", ROOT / "layers" / "matcher"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))


def step(msg: str) -> float:
    print(f"[jobs] {msg}", flush=True)
    return time.monotonic()


def done(t: float, extra: str = "") -> None:
    print(f"[jobs]   done in {time.monotonic() - t:.1f}s{(' — ' + extra) if extra else ''}", flush=True)


def stack_info(base: str, drain_timeout: float) -> dict:
    t = step(f"draining the stack's streams ({base}/_local/streams/drain)")
    r = requests.post(f"{base}/_local/streams/drain", params={"timeout": drain_timeout}, timeout=drain_timeout + 30)
    r.raise_for_status()
    d = r.json()
    if not d.get("drained"):
        raise SystemExit(f"streams not drained within {drain_timeout}s: {d}")
    done(t, f"{d['records']} record(s) delivered")
    r = requests.get(f"{base}/_local/info", timeout=10)
    r.raise_for_status()
    return r.json()


def use_stack_environment(info: dict) -> None:
    os.environ.update(info["environment"])
    os.environ.update({"AWS_ENDPOINT_URL": info["aws_endpoint_url"], "AWS_ACCESS_KEY_ID": "testing",
                       "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": info["region"],
                       "AWS_REGION": info["region"], "AWS_ACCOUNT_ID_ENDPOINT_MODE": "disabled"})
    for v in ("AWS_PROFILE", "AWS_SESSION_TOKEN"):
        os.environ.pop(v, None)


def download(s3, bucket: str, prefix: str, dest: Path) -> int:
    keys = [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
            for o in page.get("Contents", [])]
    n = 0
    for i, key in enumerate(keys, 1):
        target = dest / key
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            s3.download_file(bucket, key, str(target))
            n += 1
        if i % 200 == 0 or i == len(keys):
            print(f"[jobs]   {i}/{len(keys)} objects checked, {n} downloaded", flush=True)
    return len(keys)


def upload(s3, bucket: str, root: Path, prefix: str) -> int:
    files = [f for f in (root / prefix).rglob("*") if f.is_file() and not f.name.endswith((".crc", ".tmp"))]
    for f in files:
        s3.upload_file(str(f), bucket, f.relative_to(root).as_posix())
    return len(files)


def delete_missing(s3, bucket: str, root: Path, prefix: str) -> int:
    """Delete the bucket's keys under ``prefix`` that the local folder no longer has (the
    compaction's garbage, deleted locally)."""
    keys = [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
            for o in page.get("Contents", [])]
    gone = [k for k in keys if not (root / k).exists()]
    for i in range(0, len(gone), 1000):
        s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in gone[i:i + 1000]], "Quiet": True})
    return len(gone)


def table(rows: list[list], header: list[str]) -> str:
    cells = [header] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    fmt = lambda r: "  ".join(c.ljust(w) for c, w in zip(r, widths))  # noqa: E731
    return "\n".join([fmt(cells[0]), fmt(["-" * w for w in widths])] + [fmt(r) for r in cells[1:]])


JOBS = ("compact", "backlog", "ledger", "rebalance_plan")


def run(port: int, lake_dir: Path, publish: bool = True, drain_timeout: float = 120.0, spark=None,
        jobs: tuple[str, ...] = JOBS) -> dict:
    base = f"http://127.0.0.1:{port}"
    info = stack_info(base, drain_timeout)
    use_stack_environment(info)
    import boto3

    bucket = info["environment"]["LAKE_BUCKET"]
    s3 = boto3.client("s3")
    root = lake_dir / bucket
    t = step(f"downloading s3://{bucket}/raw/ from moto ({info['aws_endpoint_url']}) to {root}")
    n = download(s3, bucket, "raw/", root)
    done(t, f"{n} object(s)")
    t = step(f"downloading s3://{bucket}/lake/ to {root}")
    done(t, f"{download(s3, bucket, 'lake/', root)} object(s)")

    from lakeq_lake.jobs import run_backlog, run_rebalance_plan
    from lakeq_lake.store import Lake

    if spark is None:
        t = step("starting a local SparkSession (local[2])")
        from pyspark.sql import SparkSession

        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        spark = (SparkSession.builder.master("local[2]").appName("lakeq-jobs")
                 .config("spark.sql.shuffle.partitions", "4").config("spark.ui.showConsoleProgress", "true")
                 .config("spark.sql.session.timeZone", "UTC").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        done(t)
    lake = Lake(str(root))
    log = lambda m: print(f"[jobs]   {m}", flush=True)  # noqa: E731
    backlog = plans = None
    if "compact" in jobs:
        from lakeq_lake.compact import run_compact

        t = step("compaction job")
        run_compact(spark, lake, log=log)
        done(t)
        t = step(f"uploading lake/ to s3://{bucket}/")
        done(t, f"{upload(s3, bucket, root, 'lake')} file(s), {delete_missing(s3, bucket, root, 'lake/')} deleted")
    if "backlog" in jobs:
        t = step("backlog job")
        backlog = run_backlog(spark, lake, log=log)
        done(t)
    ledger = None
    if "ledger" in jobs:
        from lakeq_lake.ledger import run_ledger

        t = step("delivery ledger job")
        ledger = run_ledger(spark, lake, log=log)
        done(t)
    if "rebalance_plan" in jobs:
        t = step("rebalance-plan job" + (" (publishing plans)" if publish else " (not publishing)"))
        plans = run_rebalance_plan(spark, lake, publish=publish, log=log)
        done(t)
    t = step(f"uploading reports/ to s3://{bucket}/")
    done(t, f"{upload(s3, bucket, root, 'reports')} file(s)")
    if backlog is not None:
        _print_backlog(backlog)
    if ledger is not None:
        print("\ndelivery ledger (the last day):")
        print(table([[x["group"], x["topic"], x["line"]] for x in sorted(
            ledger["summaries"], key=lambda x: (x["group"], x["topic"]))], ["group", "topic", "ledger"]))
    if plans is not None:
        _print_plans(plans)
    return {"backlog": backlog, "plans": plans, "ledger": ledger, "info": info}


def _print_backlog(backlog: dict) -> None:
    rows = [[s["group"], s["topic"], len(s["queues"]), sum(q["produced"] for q in s["queues"]),
             sum(q["committed"] for q in s["queues"]), s["backlog"],
             f"{max((q['oldest_unconsumed_age_ms'] or 0) for q in s['queues']) / 1000:.1f}s"]
            for s in sorted(backlog["summaries"], key=lambda s: (s["group"], s["topic"]))]
    print("\nbacklog (newest):")
    print(table(rows, ["group", "topic", "queues", "produced", "committed", "backlog", "oldest unconsumed"]))


def _print_plans(plans: dict) -> None:
    prow = [[g, len(p["members"]), f"{p['expected_imbalance']:.4f}", f"{p['count_based_imbalance']:.4f}",
             p["moved_queues"], "yes" if p.get("published_at") else "no"] for g, p in sorted(plans["plans"].items())]
    print("\nrebalance plans:")
    print(table(prow, ["group", "members", "expected imbalance", "count-based", "moves", "published"]) if prow
          else "(no group with members)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m glue_jobs.local", description=__doc__.split("\n")[0])
    ap.add_argument("--port", type=int, default=int(os.environ.get("LAKEQ_PORT") or 3000))
    ap.add_argument("--lake-dir", type=Path, default=ROOT / ".lake")
    ap.add_argument("--no-publish", dest="publish", action="store_false")
    ap.add_argument("--drain-timeout", type=float, default=120.0)
    ap.add_argument("--job", dest="jobs", action="append", choices=JOBS,
                    help="run only this job (repeatable; default: all four, in this order)")
    a = ap.parse_args(argv)
    try:
        run(a.port, a.lake_dir, a.publish, a.drain_timeout, jobs=tuple(a.jobs or JOBS))
    except requests.ConnectionError:
        print(f"no local stack on 127.0.0.1:{a.port}: start it with `make run` (same LAKEQ_PORT)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
