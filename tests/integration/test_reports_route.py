"""``GET /v1/reports/backlog`` reads the backlog job's summary from the lake bucket through
``lakeq.store.lake`` (the one S3 reader outside the jobs): 404 before the job wrote it, the object
as written after, under ReportsFunction's role."""
from __future__ import annotations

import json
import os

from lakeq.lake.report_keys import summary_key


def test_the_backlog_report_is_the_object_the_job_wrote(api, setup, aws):
    query = {"group": "risk", "topic": "quotes/sh"}
    s, b = api.call("GET", "/v1/reports/backlog", query=query, key=setup["risk"])
    assert s == 404 and b["error"]["code"] == "not_found" and "no backlog report" in b["error"]["message"]
    report = {"group": "risk", "topic": "quotes/sh", "computed_at": 1, "queues": [{"queue": 0, "lag": 3}]}
    aws["s3"].put_object(Bucket=os.environ["LAKE_BUCKET"], Key=summary_key("risk", "quotes/sh"),
                         Body=json.dumps(report).encode())
    assert api.call("GET", "/v1/reports/backlog", query=query, key=setup["risk"]) == (200, report)
    s, b = api.call("GET", "/v1/reports/backlog", query={"group": "risk", "topic": "quotes"}, key=setup["risk"])
    assert s == 404  # another topic's report: none
