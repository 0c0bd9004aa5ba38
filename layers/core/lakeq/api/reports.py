"""Report routes (data-lake job output): ``GET /v1/reports/backlog``."""
from __future__ import annotations

from aws_lambda_powertools.event_handler.router import APIGatewayHttpRouter

from lakeq.api.http import json_response, principal, query
from lakeq.lake import reports

reports_router = APIGatewayHttpRouter()


@reports_router.get("/v1/reports/backlog")
def backlog():
    p = principal(reports_router)
    return json_response(reports.backlog(p, query(reports_router)))
