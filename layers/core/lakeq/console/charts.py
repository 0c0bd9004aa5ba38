"""The console's charts (``GET /v1/console/metrics``): the produce and consume rates and the backlog
over the last hour, per minute, read back from CloudWatch — the same figures the functions print as
embedded metric format (:mod:`lakeq.common.metric_names`), the dashboard and the alarms watch.

What is charted (one ``GetMetricData`` call, three queries, period 60 s, the last 60 whole minutes
and the current one):

- ``produced`` — ``NumberOfMessagesSent`` (Sum per minute), and ``consumed`` — ``NumberOfAcks``
  (Sum per minute: receipts settled, the group pulls', subscriptions' and SQS deletes alike);
- ``backlog`` — ``ApproximateNumberOfMessagesBacklog`` (Maximum per minute);

for the (``Topic``, ``Group``) asked — sent per ``Topic``, settled and backlog per ``Topic`` +
``Group`` (the request paths count per row too, :func:`lakeq.common.obs.count_rows`; the backlog
is the metrics function's row) — or, with neither, the deployment's (``service`` only: the
counters' totals, the metrics function's totals row). A group's key sees its own rows only, never
another tenant's traffic (the SQS endpoint's sends count per ``Topic``, in ``produced``; its
receives and deletes per ``Topic`` alone, not in ``consumed``).

The answer's ``scope`` says which is which. A minute without data has no point (CloudWatch returns
none): with ``detail`` ``active`` a (topic, group) row is printed only while it has a backlog, so a
missing backlog point after the first one means 0.

Who may ask: the admin key anything; a consumer's key its own group on a topic it is granted (and
not the deployment's totals). Input: ``topic`` and ``group`` together, or neither; nothing else.
"""
from __future__ import annotations

import os

from lakeq.admin.auth import Principal
from lakeq.common import clock as _clock
from lakeq.common import metric_names as M
from lakeq.common.errors import BadRequest, Forbidden
from lakeq.common.names import check_name, check_topic, covers
from lakeq.store.catalog import ClientRepo
from lakeq.store.metrics import MetricsRepo

PERIOD_S = 60
MINUTES = 60  # the last hour (and the current minute)
MINUTE_MS = PERIOD_S * 1000
PARAMS = ("topic", "group")
CACHE_TTL_MS = 10_000  # an answer is reused this long by the container (the figures move once a minute)
CACHE_MAX = 1_000
_cache: dict[tuple, tuple[int, dict]] = {}


def clear_cache() -> None:
    _cache.clear()
SERIES = (("produced", M.SENT, "Sum"), ("consumed", M.ACKS, "Sum"), ("backlog", M.BACKLOG, "Maximum"))


def namespace() -> str:
    return os.environ.get("POWERTOOLS_METRICS_NAMESPACE") or "lakeq"


def service() -> str:
    return os.environ.get("POWERTOOLS_SERVICE_NAME") or "lakeq"


def parse(q: dict) -> tuple[str | None, str | None]:
    """``(topic, group)`` from the query (both or neither); 400 for anything else."""
    extra = sorted(set(q) - set(PARAMS))
    if extra:
        raise BadRequest(f"unknown query parameter(s): {', '.join(extra)} (only topic and group)")
    topic, group = q.get("topic"), q.get("group")
    if (topic is None) != (group is None):
        raise BadRequest("give topic and group together (a group's backlog on a topic), or neither (the totals)")
    if topic is not None:
        check_topic(topic)
        check_name(group, "group")
    return topic, group


def window(now: int) -> tuple[int, int]:
    """``[start, end)`` in epoch ms: whole minutes, the last :data:`MINUTES` and the current one."""
    end = (now // MINUTE_MS + 1) * MINUTE_MS
    return end - (MINUTES + 1) * MINUTE_MS, end


def queries(topic: str | None, group: str | None) -> list[dict]:
    """The ``GetMetricData`` queries (ids ``produced``, ``consumed``, ``backlog``)."""
    svc = [{"Name": "service", "Value": service()}]
    row = {"produced": [("Topic", topic)], "consumed": [("Topic", topic), ("Group", group)],
           "backlog": [("Topic", topic), ("Group", group)]}
    out = []
    for sid, name, stat in SERIES:
        dims = svc if topic is None else [*({"Name": k, "Value": v} for k, v in row[sid]), *svc]
        out.append({"Id": sid, "ReturnData": True,
                    "MetricStat": {"Metric": {"Namespace": namespace(), "MetricName": name, "Dimensions": dims},
                                   "Period": PERIOD_S, "Stat": stat}})
    return out


def shape(raw: dict[str, list[tuple[int, float]]], start: int, end: int) -> dict[str, list[dict]]:
    """Each series as ``[{"t": minute (epoch ms), "v": value}]``, oldest first, inside the window,
    one point per minute (the last value wins), counters as numbers of messages per minute."""
    out = {}
    for sid, _name, _stat in SERIES:
        pts: dict[int, float] = {}
        for t, v in raw.get(sid) or []:
            m = int(t) // MINUTE_MS * MINUTE_MS
            if start <= m < end:
                pts[m] = v
        out[sid] = [{"t": t, "v": (int(v) if float(v).is_integer() else v)} for t, v in sorted(pts.items())]
    return out


def _may_ask(p: Principal, topic: str | None, group: str | None) -> None:
    if p.admin:
        return
    if topic is None:
        raise Forbidden("the deployment's totals are the admin key's")
    c = ClientRepo.get(p.client) if p.client else None
    if c is None or c.name != group:
        raise Forbidden(f"this key is not group '{group}'")
    if not any(covers(g, topic) for g in c.topics):
        raise Forbidden(f"this key is not granted topic '{topic}'")


def metrics(p: Principal, q: dict, now: int | None = None) -> dict:
    """``GET /v1/console/metrics``: the three series of :func:`queries` over :func:`window`."""
    topic, group = parse(q)
    _may_ask(p, topic, group)
    now = _clock.now() if now is None else now
    start, end = window(now)
    # a key asking again and again costs the operator one GetMetricData (3 metrics) per container per
    # CACHE_TTL_MS, not one per request (review of issue 34: no per-key rate limit on this route)
    key = (namespace(), service(), topic, group, start)
    hit = _cache.get(key)
    if hit is not None and hit[0] > now:
        raw = hit[1]
    else:
        raw = MetricsRepo.series(queries(topic, group), start, end)
        if len(_cache) >= CACHE_MAX:
            _cache.clear()
        _cache[key] = (now + CACHE_TTL_MS, raw)
    return {"start": start, "end": end, "period_s": PERIOD_S, "topic": topic, "group": group,
            "scope": ({"produced": "deployment", "consumed": "deployment", "backlog": "deployment"} if topic is None
                      else {"produced": "topic", "consumed": "topic+group", "backlog": "topic+group"}),
            "series": shape(raw, start, end)}
