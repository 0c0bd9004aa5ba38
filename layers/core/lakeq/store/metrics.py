"""CloudWatch metrics, read (the console's charts, ``lakeq.console.charts``): one ``GetMetricData``
call of a few queries. The metrics themselves are written by the functions' EMF lines (CloudWatch
Logs turns them into metrics; locally ``infra/local/emf.py`` puts them into moto's CloudWatch), never
here. IAM: ``cloudwatch:GetMetricData`` (no resource-level permissions: ``Resource: "*"``)."""
from __future__ import annotations

import datetime as _dt

from lakeq.store.clients import client

MAX_PAGES = 3  # a few queries of ≤ 61 points fit one page (100,800 points); a bound all the same


def _utc(ms: int) -> _dt.datetime:
    return _dt.datetime.fromtimestamp(ms / 1000, tz=_dt.timezone.utc)


class MetricsRepo:
    @staticmethod
    def series(queries: list[dict], start_ms: int, end_ms: int) -> dict[str, list[tuple[int, float]]]:
        """``GetMetricData`` of ``queries`` (their ``Id`` → ``[(epoch ms, value)]``, oldest first)
        over ``[start_ms, end_ms)``. One call (a NextToken is followed, at most :data:`MAX_PAGES`)."""
        out: dict[str, dict[int, float]] = {q["Id"]: {} for q in queries}
        args = {"MetricDataQueries": queries, "StartTime": _utc(start_ms), "EndTime": _utc(end_ms),
                "ScanBy": "TimestampAscending"}
        for _ in range(MAX_PAGES):
            r = client("cloudwatch").get_metric_data(**args)
            for res in r.get("MetricDataResults") or []:
                pts = out.setdefault(res["Id"], {})
                for t, v in zip(res.get("Timestamps") or [], res.get("Values") or []):
                    pts[int(t.timestamp() * 1000)] = float(v)
            if not r.get("NextToken"):
                break
            args["NextToken"] = r["NextToken"]
        return {k: sorted(v.items()) for k, v in out.items()}
