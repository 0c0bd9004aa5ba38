"""CloudWatch metrics, read (the console's charts, ``lakeq.console.charts``): one ``GetMetricData``
call of a few queries. The metrics themselves are written by the functions' EMF lines (CloudWatch
Logs turns them into metrics; locally ``infra/local/emf.py`` puts them into moto's CloudWatch), never
here. IAM: ``cloudwatch:GetMetricData`` (no resource-level permissions: ``Resource: "*"``).

Also the metrics function's memory between runs (:class:`MetricsStateRepo`): one S3 object."""
from __future__ import annotations

import datetime as _dt
import json
import os

from botocore.exceptions import ClientError

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


STATE_KEY = "ops/metrics/state.json"  # in $LAKE_BUCKET; IAM: s3:GetObject / s3:PutObject on ops/metrics/*
STATE_PRECONDITION = ("PreconditionFailed", "ConditionalRequestConflict")


class MetricsStateRepo:
    """What the metrics function remembers between runs (:func:`lakeq.console.gauges.compute`'s
    ``previous`` / ``Gauges.state``): one JSON object, read and written once a run. The write is
    conditional on the object read (its ETag; none read: on there being none), so of two
    overlapping runs one saves and the other's ``put`` answers False (its figures were printed;
    the next run reads the winner's)."""

    @staticmethod
    def load() -> tuple[dict | None, str | None]:
        """``(state, etag)``; ``(None, None)`` when there is no object yet, ``(None, etag)`` when it is not JSON."""
        try:
            obj = client("s3").get_object(Bucket=os.environ["LAKE_BUCKET"], Key=STATE_KEY)
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") in ("NoSuchKey", "404", "NotFound"):
                return None, None
            raise
        try:
            return json.loads(obj["Body"].read()), obj["ETag"]
        except ValueError:  # not JSON (written by hand?): the run starts afresh and replaces it
            return None, obj["ETag"]

    @staticmethod
    def put(state: dict, etag: str | None) -> bool:
        """Write ``state`` if the object is still the one read (``etag``; None: if there is none).
        False when another run wrote it in between."""
        cond = {"IfMatch": etag} if etag else {"IfNoneMatch": "*"}
        try:
            client("s3").put_object(Bucket=os.environ["LAKE_BUCKET"], Key=STATE_KEY, ContentType="application/json",
                                    Body=json.dumps(state, separators=(",", ":")).encode(), **cond)
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") in STATE_PRECONDITION:
                return False
            raise
        return True
