"""Where the data-lake jobs write their reports in the lake bucket: the one definition, imported by
the Glue jobs (``glue_jobs/lakeq_lake/jobs.py``) and by the API that serves them
(:mod:`lakeq.lake.reports`). Pure (no AWS imports).

>>> summary_key("risk", "quotes/sh")
'reports/backlog/latest/group=risk/topic=quotes%2Fsh.json'
>>> plan_key("risk"), run_key()
('reports/plans/latest/group=risk.json', 'reports/backlog/latest/_run.json')
"""
from __future__ import annotations

from urllib.parse import quote

BACKLOG = "reports/backlog"  # Parquet history under history/computed_at=<ms>/, JSON summaries under latest/
PLANS = "reports/plans"
LEDGER = "reports/ledger"  # the delivery ledger (issue 32.4): Parquet history, JSON summaries under latest/


def enc(topic: str) -> str:
    """A topic as one key segment (``quotes/sh`` → ``quotes%2Fsh``)."""
    return quote(topic, safe="")


def summary_key(group: str, topic: str) -> str:
    """The newest backlog summary of one group and topic (one JSON object, overwritten per run)."""
    return f"{BACKLOG}/latest/group={group}/topic={enc(topic)}.json"


def plan_key(group: str) -> str:
    """The newest rebalance plan of one group."""
    return f"{PLANS}/latest/group={group}.json"


def run_key() -> str:
    """The backlog job's last run: ``{"computed_at", "as_of", "summaries"}``."""
    return f"{BACKLOG}/latest/_run.json"


def history_prefix(kind: str, computed_at: int) -> str:
    """A run's Parquet output: ``kind`` is :data:`BACKLOG` or :data:`PLANS`.

    >>> history_prefix(PLANS, 5)
    'reports/plans/history/computed_at=5'
    """
    return f"{kind}/history/computed_at={computed_at}"


def ledger_key(group: str, topic: str) -> str:
    """The newest delivery ledger of one group and topic (one JSON object, overwritten per run).

    >>> ledger_key("risk", "quotes/sh")
    'reports/ledger/latest/group=risk/topic=quotes%2Fsh.json'
    """
    return f"{LEDGER}/latest/group={group}/topic={enc(topic)}.json"


def ledger_run_key() -> str:
    """The ledger job's last run: ``{"computed_at", "as_of", "from", "to", "summaries"}``."""
    return f"{LEDGER}/latest/_run.json"
