"""The one observability set-up: the powertools :data:`logger` and :data:`metrics` every function
and route module uses (``from lakeq.common.obs import logger, metrics``).

Nothing is hard-coded here: powertools reads its settings from the environment, which
template.yaml's ``Globals.Function.Environment`` sets for every function (and the local stack and
the tests take from there, ``infra/local/template.py``'s ``environment``):

- ``POWERTOOLS_SERVICE_NAME`` (``lakeq``): the logger's ``service`` key and the metrics'
  ``service`` dimension;
- ``POWERTOOLS_METRICS_NAMESPACE`` (``lakeq``): the metrics' CloudWatch namespace;
- ``POWERTOOLS_LOG_LEVEL`` / ``POWERTOOLS_METRICS_DISABLED`` … as powertools documents them.

The modules' own ``logging.getLogger("lakeq.<module>")`` loggers are children of the service's
logger and come out in the same JSON. :class:`~aws_lambda_powertools.Metrics` instances share one
metric set per process, so a metric a route adds is flushed by its function's ``log_metrics``.
(No tracer: lakeq does not trace; a ``Tracer()`` would go here, reading ``POWERTOOLS_TRACE_*``.)
"""
from __future__ import annotations

from aws_lambda_powertools import Logger, Metrics

logger = Logger()
metrics = Metrics()
