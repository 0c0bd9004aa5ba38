"""Report routes (data-lake job output): ``GET /v1/reports/backlog``, ``GET /v1/groups/{group}/ledger``."""
from __future__ import annotations

from lakeq.api.http import Router, json_response, path, query
from lakeq.lake import reports

reports_router = Router()


@reports_router.get("/v1/reports/backlog")
def backlog():
    p = reports_router.caller
    return json_response(reports.backlog(p, query(reports_router)))


@reports_router.get("/v1/groups/<group>/ledger")
def ledger(group: str):
    p = reports_router.caller
    return json_response(reports.ledger(p, path(group), query(reports_router)))
