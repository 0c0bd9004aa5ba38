"""The two job bodies, shared by the Glue entry points and ``make jobs``: read the lake, run the
pure transforms, write the reports (and publish the plans). The reports' keys are the API's own
(:mod:`lakeq.lake.report_keys`, from the core layer: on Glue it is in the job's bundle, locally
:func:`lakeq_lake.local_paths` puts the layer on ``sys.path``)."""
from __future__ import annotations

import time
from collections import defaultdict

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from lakeq.lake.report_keys import BACKLOG as BACKLOG_PREFIX
from lakeq.lake.report_keys import PLANS as PLANS_PREFIX
from lakeq.lake.report_keys import history_prefix, plan_key, run_key, summary_key

from . import transforms as T
from .store import Lake

__all__ = ["BACKLOG_PREFIX", "PLANS_PREFIX", "plan_key", "run_backlog", "run_rebalance_plan", "session",
           "summary_key"]


def session(app: str, master: str | None):
    """The job's SparkSession: Glue's own (``master`` None), else a small local one."""
    b = SparkSession.builder.appName(app)
    if master:
        b = b.master(master).config("spark.sql.shuffle.partitions", "4")
    return b.getOrCreate()


def now_ms() -> int:
    return int(time.time() * 1000)


SERIES_POINTS = 48  # the newest buckets of backlog over time kept in each summary (the console's chart)


def _series(report) -> dict[tuple[str, str], list[dict]]:
    """Backlog over time per (group, topic): the sum over its queues (and clients) per bucket end
    ``at``, oldest first, the newest :data:`SERIES_POINTS` buckets."""
    out: dict[tuple[str, str], list[dict]] = {}
    for r in (report.groupBy("group", "topic", "at").agg(F.sum("backlog").alias("backlog"))
              .orderBy("group", "topic", "at").collect()):
        out.setdefault((r["group"], r["topic"]), []).append({"at": int(r["at"]), "backlog": int(r["backlog"])})
    return {k: v[-SERIES_POINTS:] for k, v in out.items()}


def run_backlog(spark: SparkSession, lake: Lake, as_of_ms: int | None = None,
                bucket_minutes: int = 60, log=print) -> dict:
    """Backlog report: Parquet ``reports/backlog/history/computed_at=<ms>/`` (every bucket) and one
    JSON summary per group and topic at :func:`summary_key` (newest bucket). Returns the summaries."""
    computed_at = now_ms()
    as_of = as_of_ms or computed_at
    msgs, offs = lake.read_kind(spark, "messages"), lake.read_kind(spark, "offsets")
    persisted: list = []  # the logs' aggregates the transform reads in several branches (T.backlog)
    report = T.backlog(msgs, offs, as_of, bucket_minutes * 60_000, persisted=persisted).cache()
    out = lake.path(history_prefix(BACKLOG_PREFIX, computed_at))
    log(f"backlog: writing {out}")
    report.coalesce(1).write.mode("overwrite").parquet(out)
    rows = T.latest(report).orderBy("group", "topic", "queue", "client_id").collect()
    series = _series(report)
    for df in (report, *persisted):
        df.unpersist()
    summaries: dict[tuple[str, str], dict] = {}
    for r in rows:
        s = summaries.setdefault((r["group"], r["topic"]), {
            "group": r["group"], "topic": r["topic"], "computed_at": computed_at, "as_of": as_of,
            "bucket_minutes": bucket_minutes, "queues": [], "backlog": 0,
            "series": series.get((r["group"], r["topic"]), [])})
        q = {"queue": int(r["queue"]), "produced": int(r["produced"]), "committed": int(r["committed"]),
             "backlog": int(r["backlog"]), "at": int(r["at"]),
             "production_rate": float(r["production_rate"]), "consumption_rate": float(r["consumption_rate"]),
             "oldest_unconsumed_age_ms": None if r["oldest_unconsumed_age_ms"] is None
             else int(r["oldest_unconsumed_age_ms"])}
        if r["client_id"] is not None:
            q["client_id"] = r["client_id"]
        s["queues"].append(q)
        s["backlog"] += q["backlog"]
    for (group, topic), s in summaries.items():
        lake.put_json(summary_key(group, topic), s)
    lake.put_json(run_key(),
                  {"computed_at": computed_at, "as_of": as_of, "summaries": len(summaries)})
    log(f"backlog: {len(rows)} queues in {len(summaries)} group/topic summaries")
    return {"computed_at": computed_at, "summaries": list(summaries.values())}


def run_rebalance_plan(spark: SparkSession, lake: Lake, as_of_ms: int | None = None,
                       bucket_minutes: int = 60, lookback_minutes: int = 60, horizon_minutes: int = 60,
                       publish: bool = True, log=print) -> dict:
    """Rebalance plans: weigh each queue per group, then on the driver compute and (``publish``)
    store each group's plan with ``groups.set_plan`` through the groups repository; every plan is
    also written to :func:`plan_key` and ``reports/plans/history/computed_at=<ms>/`` (Parquet weights)."""
    from . import plans

    computed_at = now_ms()
    as_of = as_of_ms or computed_at
    msgs, offs = lake.read_kind(spark, "messages"), lake.read_kind(spark, "offsets")
    persisted: list = []  # the logs' aggregates the transform reads in several branches (T.backlog)
    latest = T.latest(T.backlog(msgs, offs, as_of, bucket_minutes * 60_000, persisted=persisted))
    weights_df = T.queue_weights(msgs, latest, as_of, lookback_minutes * 60_000, horizon_minutes * 60_000).cache()
    weights_df.coalesce(1).write.mode("overwrite").parquet(
        lake.path(history_prefix(PLANS_PREFIX, computed_at)))
    by_group: dict[str, dict] = defaultdict(dict)
    for r in weights_df.collect():
        by_group[r["group"]][(r["topic"], int(r["queue"]))] = float(r["weight"])
    for df in (weights_df, *persisted):
        df.unpersist()
    members = lake.read_kind(spark, "members")
    groups = set(by_group) | {r["group"] for r in members.select("group").where(F.col("group").isNotNull())
                              .distinct().collect()}
    results = {}
    for i, group in enumerate(sorted(groups), 1):
        w = by_group.get(group, {})
        if publish:
            p = plans.publish(group, w)
        else:
            from lakeq.store.groups import GroupRepo

            p = plans.plan(GroupRepo.load(group), w, {})
            if p is not None:
                p["published_at"] = None
        log(f"plans: [{i}/{len(groups)}] {group}: "
            + ("no members, nothing to plan" if p is None else
               f"imbalance {p['expected_imbalance']:.3f} (count-based {p['count_based_imbalance']:.3f}), "
               f"{p['moved_queues']} queue(s) move"))
        if p is not None:
            p["computed_at"] = computed_at
            lake.put_json(plan_key(group), p)
            results[group] = p
    return {"computed_at": computed_at, "plans": results}
