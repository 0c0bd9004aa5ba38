"""The one observability set-up: the powertools :data:`logger` and :data:`metrics` every function
and route module uses (``from lakeq.common.obs import logger, metrics``).

Nothing is hard-coded here: powertools reads its settings from the environment, which
template.yaml's ``Globals.Function.Environment`` sets for every function (and the local stack and
the tests take from there, ``infra/local/template.py``'s ``environment``):

- ``POWERTOOLS_SERVICE_NAME`` (the stack's name): the logger's ``service`` key and the metrics'
  ``service`` dimension;
- ``POWERTOOLS_METRICS_NAMESPACE`` (``lakeq/<stack name>``): the metrics' CloudWatch namespace (per
  stack: two stacks in one account never share a series);
- ``POWERTOOLS_LOG_LEVEL`` / ``POWERTOOLS_METRICS_DISABLED`` … as powertools documents them.

The modules' own ``logging.getLogger("lakeq.<module>")`` loggers are children of the service's
logger and come out in the same JSON. A metric a route adds to :data:`metrics` is flushed by its
function's ``log_metrics``, with the others of that invocation only: powertools keeps one metric set
per process (:class:`~aws_lambda_powertools.Metrics` instances share it), so requests run as threads
of one process (the in-process tests; never Lambda) flushed each other's metrics, and a flush that
found its set emptied by another's raised ``SchemaValidationError`` out of the handler (flake35).
:data:`metrics`' provider (:class:`_InvocationEMF`) keeps each ``log_metrics`` call's set, dimensions,
metadata and timestamp its own (a ContextVar); outside one, the process's, as before.
:data:`tracer` (powertools' ``Tracer``, reading ``POWERTOOLS_TRACE_*``) wraps every function's handler
(``@tracer.capture_lambda_handler(capture_response=False)``: responses may hold message bodies).
"""
from __future__ import annotations

import functools
import json
import operator
import os
from contextvars import ContextVar

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import EphemeralMetrics
from aws_lambda_powertools.metrics.provider.cloudwatch_emf.cloudwatch import AmazonCloudWatchEMFProvider

from lakeq.common import metric_names
from lakeq.common.contextual import PerContext


class _Batch:
    """What one flush prints: the metrics, dimensions, extra dimension sets, metadata, timestamp."""

    __slots__ = ("metric_set", "dimension_set", "dimension_sets", "metadata_set", "timestamp")

    def __init__(self, metric_set: dict | None = None, dimension_set: dict | None = None,
                 metadata_set: dict | None = None) -> None:
        self.metric_set = {} if metric_set is None else metric_set
        self.dimension_set = {} if dimension_set is None else dimension_set
        self.dimension_sets: list = []
        self.metadata_set = {} if metadata_set is None else metadata_set
        self.timestamp = None


_invocation: ContextVar[_Batch | None] = ContextVar("lakeq_metrics_invocation", default=None)


_PROCESS = operator.attrgetter("_process")  # outside a log_metrics call: the process's set


class _InvocationEMF(AmazonCloudWatchEMFProvider):
    """powertools' EMF provider, its flush state per ``log_metrics`` call (the invocation, in this
    thread or context): ``metric_set``, ``dimension_set``, ``dimension_sets``, ``metadata_set`` and
    ``timestamp`` read and written there; the process's (powertools' shared dicts) outside a call.
    Namespace, service and default dimensions stay the process's (configuration)."""

    metric_set = PerContext(_invocation, "metric_set", home=_PROCESS)
    dimension_set = PerContext(_invocation, "dimension_set", home=_PROCESS)
    dimension_sets = PerContext(_invocation, "dimension_sets", home=_PROCESS)
    metadata_set = PerContext(_invocation, "metadata_set", home=_PROCESS)
    timestamp = PerContext(_invocation, "timestamp", home=_PROCESS)

    def __init__(self, *args, **kwargs) -> None:
        self._process = _Batch()
        super().__init__(*args, **kwargs)

    def log_metrics(self, lambda_handler=None, **kwargs):
        if lambda_handler is None:  # @metrics.log_metrics(...): called again with the handler
            return functools.partial(self.log_metrics, **kwargs)
        flushing = super().log_metrics(lambda_handler, **kwargs)

        @functools.wraps(lambda_handler)
        def invocation(event, context, *args, **kw):
            token = _invocation.set(_Batch(dimension_set=dict(self.default_dimensions)))
            try:
                return flushing(event, context, *args, **kw)
            finally:
                _invocation.reset(token)
        return invocation


logger = Logger()
# (powertools' shared dicts as the process's set, as Metrics() would pass them to its own provider)
metrics = Metrics(provider=_InvocationEMF(metric_set=Metrics._metrics, dimension_set=Metrics._dimensions,
                                          metadata_set=Metrics._metadata,
                                          default_dimensions=Metrics._default_dimensions))
# X-Ray (template.yaml's Tracing: Active): each handler's invocation and its AWS calls (botocore
# patched); off where POWERTOOLS_TRACE_DISABLED is true (the local stack, the tests) or outside Lambda
tracer = Tracer()


def emit(dimensions: dict[str, str], values: dict[str, float], timestamp_ms: int | None = None) -> dict:
    """Print one EMF document now: ``values`` (metric name -> value, each named in
    :mod:`lakeq.common.metric_names`, its unit from there) under ``dimensions`` (plus powertools'
    ``service``), apart from the invocation's shared :data:`metrics` (whose dimensions are fixed per
    flush). For per-topic / per-group / per-endpoint figures. Returns the document printed."""
    m = EphemeralMetrics()
    for k, v in dimensions.items():
        m.add_dimension(name=k, value=str(v))
    for name, value in values.items():
        m.add_metric(name=name, unit=metric_names.UNITS[name], value=value)
    if timestamp_ms is not None:
        m.set_timestamp(timestamp_ms)
    doc = m.serialize_metric_set()
    print(json.dumps(doc, separators=(",", ":")), flush=True)
    return doc


def count_rows(rows: dict[tuple[tuple[str, str], ...], dict[str, float]]) -> None:
    """A request's counters per row as well (issue 34 item 1: rates per ``Topic``, per ``Topic`` +
    ``Group``, per ``Subscriber`` client or ``Replay``), beside the ``service``-only ones the route added to
    :data:`metrics`. ``rows``: the dimensions (pairs, in order) -> that row's counts. Zero counts
    and empty rows are dropped (a row costs a CloudWatch metric only in the hours it gets data).
    One row (a pull, a produce, an ack of one receipt: almost every request): the invocation's own
    document gets that dimension set too (:meth:`Metrics.add_dimensions`: the same EMF line, no
    second one); the route must have added exactly the row's counts to :data:`metrics`. Several
    rows (a batch ack across topics): one document a row (:func:`emit`). Nothing when
    ``LAKEQ_METRICS_DETAIL`` (template parameter ``MetricsDetail``) is ``totals``: a fixed metric
    count whatever the number of topics."""
    if os.environ.get("LAKEQ_METRICS_DETAIL") == "totals":
        return
    kept = {dims: {n: v for n, v in vals.items() if v} for dims, vals in rows.items()}
    kept = {dims: vals for dims, vals in kept.items() if vals}
    if len(kept) == 1 and len(rows) == 1:
        (dims, _), = kept.items()
        metrics.add_dimensions(**dict(dims), **({"service": metrics.service} if metrics.service else {}))
    else:
        for dims, vals in kept.items():
            emit(dict(dims), vals)

