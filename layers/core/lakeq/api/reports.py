"""Report routes (data-lake job output): ``GET /v1/reports/backlog``."""
from __future__ import annotations

from aws_lambda_powertools.event_handler.router import APIGatewayHttpRouter

from .. import reports
from ..http import json_response, principal, query

reports_router = APIGatewayHttpRouter()


@reports_router.get("/v1/reports/backlog")
def backlog():
    p = principal(reports_router)
    return json_response(reports.backlog(p, query(reports_router)))
