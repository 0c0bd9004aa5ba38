"""Reports computed by the data-lake jobs, as served by ``GET /v1/reports/backlog`` (API.md "Reports")
and ``GET /v1/groups/{group}/ledger`` (the delivery ledger, issue 32.4; docs/api.md).

The backlog job writes, next to its Parquet output, one small JSON summary per group and topic —
the newest state of every queue — at :func:`lakeq.lake.report_keys.summary_key` (the keys are defined
once there and imported by the jobs), overwriting the previous run's (the Glue
job runs one at a time). Serving a report is then one S3 GetObject, whatever the size of the
history. Check order as everywhere: 401 → 400 → 404 (topic, group) → 403 → 404 (no report yet).
"""
from __future__ import annotations

from lakeq.admin.auth import Principal, authorize, client_or_404, topic_or_404
from lakeq.common.errors import NotFound
from lakeq.common.names import check_name, check_topic
from lakeq.lake.report_keys import BACKLOG, PLANS, enc, ledger_key, plan_key, summary_key  # noqa: F401
from lakeq.store.lake import get_json


def backlog(p: Principal, params: dict) -> dict:
    return _report(p, params.get("group"), params.get("topic"), summary_key, "backlog report", "backlog job")


def ledger(p: Principal, group_name: str, params: dict) -> dict:
    """The newest delivery ledger of ``group_name`` on ``params["topic"]`` (the ledger job's summary:
    one S3 GetObject). The same checks as :func:`backlog`: the group's key or the admin key, the
    topic granted to the group; 404 before the job's first run over their traffic."""
    return _report(p, group_name, params.get("topic"), ledger_key, "delivery ledger", "ledger job")


def _report(p: Principal, group_name, topic, key_of, what: str, job: str) -> dict:
    """A job's newest summary for a group and topic at ``key_of(group, topic)``: the group's key or
    the admin key, the topic granted to the group; 404 before the job's first run over their traffic."""
    check_name(group_name, "group")
    check_topic(topic)
    topic_or_404(topic)
    group = client_or_404(group_name, "consumer")
    authorize(p, group, topic)
    report = get_json(key_of(group.name, topic))
    if report is None:
        raise NotFound(f"no {what} for group '{group.name}' and topic '{topic}' yet "
                       f"(the {job} has not run since they had traffic)")
    return report
