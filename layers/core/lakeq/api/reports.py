"""Report routes (data-lake job output): ``GET /v1/reports/backlog``."""
from __future__ import annotations

from lakeq.api.http import Router, json_response, query
from lakeq.lake import reports

reports_router = Router()


@reports_router.get("/v1/reports/backlog")
def backlog():
    p = reports_router.caller
    return json_response(reports.backlog(p, query(reports_router)))
