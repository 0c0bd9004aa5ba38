"""Reports computed by the data-lake jobs, as served by ``GET /v1/reports/backlog`` (API.md "Reports").

The backlog job writes, next to its Parquet output, one small JSON summary per group and topic —
the newest state of every queue — at :func:`lakeq.lake.report_keys.summary_key` (the keys are defined
once there and imported by the jobs), overwriting the previous run's (the Glue
job runs one at a time). Serving a report is then one S3 GetObject, whatever the size of the
history. Check order as everywhere: 401 → 400 → 404 (topic, group) → 403 → 404 (no report yet).
"""
from __future__ import annotations

import json
import os

from lakeq.admin.auth import Principal, authorize, client_or_404, topic_or_404
from lakeq.common.errors import NotFound
from lakeq.common.names import check_name, check_topic
from lakeq.lake.report_keys import BACKLOG, PLANS, enc, plan_key, summary_key  # noqa: F401

_s3 = None


def _client():
    global _s3
    if _s3 is None:
        import botocore.session  # not boto3: it would load s3transfer too (docs/design.md "Cold start")

        _s3 = botocore.session.get_session().create_client("s3")
    return _s3


def get_json(key: str, bucket: str | None = None) -> dict | None:
    from botocore.exceptions import ClientError

    try:
        obj = _client().get_object(Bucket=bucket or os.environ["LAKE_BUCKET"], Key=key)
    except ClientError as e:
        if e.response.get("Error", {}).get("Code") in ("NoSuchKey", "404", "NotFound"):
            return None
        raise
    return json.loads(obj["Body"].read())


def backlog(p: Principal, params: dict) -> dict:
    group_name = params.get("group")
    topic = params.get("topic")
    check_name(group_name, "group")
    check_topic(topic)
    topic_or_404(topic)
    group = client_or_404(group_name, "consumer")
    authorize(p, group, topic)
    report = get_json(summary_key(group.name, topic))
    if report is None:
        raise NotFound(f"no backlog report for group '{group.name}' and topic '{topic}' yet "
                       "(the backlog job has not run since they had traffic)")
    return report
