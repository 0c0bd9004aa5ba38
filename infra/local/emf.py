"""What CloudWatch Logs does with the functions' embedded-metric-format lines, for the local stack.

Each worker (``infra/local/worker.py``) picks the EMF documents (a JSON object with ``_aws``) out of
what its handler prints during an invocation and hands them back with the reply; :data:`COLLECTED`
keeps them as CloudWatch would: one series per (namespace, metric name, dimension values), one
point per minute (``sum``, ``count``, ``max``, ``last``) over the last :data:`KEEP_MINUTES`.
``GET /_local/metrics[?name=…&namespace=…]`` on the gateway serves them (``infra/local/gateway.py``).

The local stack (``python -m infra.local``) also sets :attr:`Collected.sink` to :class:`CloudWatchSink`:
every document collected is put into the local moto's CloudWatch (``PutMetricData`` with the
document's timestamp, namespace, dimensions, values and unit: :func:`metric_data`), so what reads
CloudWatch on AWS (the console's ``GET /v1/console/metrics``, ``GetMetricData``) reads the same
figures locally. Nothing else calls PutMetricData: on AWS, CloudWatch Logs does this from the lines.
"""
from __future__ import annotations

import datetime as _dt
import json
import logging
import threading
from collections import OrderedDict

log = logging.getLogger("lakeq.local.emf")

KEEP_MINUTES = 60
MINUTE_MS = 60_000


def documents(text: str) -> list[dict]:
    """The EMF documents among ``text``'s lines (anything else printed is left alone)."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not (line.startswith("{") and '"_aws"' in line):
            continue
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict) and isinstance(doc.get("_aws"), dict):
            out.append(doc)
    return out


def metric_data(doc: dict) -> list[tuple[str, list[dict]]]:
    """What CloudWatch makes of one EMF document, as ``PutMetricData`` requests: ``[(namespace,
    MetricData)]``, one datum per (metric, dimension set), its values (``Values``: a list in the
    document is several) at the document's ``Timestamp``, with its unit."""
    aws = doc["_aws"]
    ts = _dt.datetime.fromtimestamp(int(aws.get("Timestamp") or 0) / 1000, tz=_dt.timezone.utc)
    out = []
    for d in aws.get("CloudWatchMetrics") or []:
        data = []
        for dims in d.get("Dimensions") or [[]]:
            dimensions = [{"Name": k, "Value": str(doc.get(k))} for k in dims]
            for m in d.get("Metrics") or []:
                v = doc.get(m.get("Name"))
                values = [float(x) for x in (v if isinstance(v, list) else [v])
                          if isinstance(x, (int, float)) and not isinstance(x, bool)]
                if values:
                    datum = {"MetricName": m["Name"], "Dimensions": dimensions, "Timestamp": ts, "Values": values}
                    if m.get("Unit"):
                        datum["Unit"] = m["Unit"]
                    data.append(datum)
        if data and d.get("Namespace"):
            out.append((d["Namespace"], data))
    return out


class CloudWatchSink:
    """Puts each collected document into CloudWatch (the local stack's moto: ``AWS_ENDPOINT_URL``),
    at most 1,000 data per ``PutMetricData`` (CloudWatch's limit), as nobody: CloudWatch Logs does
    this on AWS, not the function (whose role has no ``cloudwatch:PutMetricData``; the thread that
    collects acts as the function it invoked). A failure is logged, not raised."""

    def __init__(self, client=None) -> None:
        self._client = client

    def __call__(self, doc: dict) -> None:
        if self._client is None:
            import boto3

            self._client = boto3.client("cloudwatch")
        from infra.local.interceptor import acting_as

        with acting_as(None):
            for ns, data in metric_data(doc):
                for i in range(0, len(data), 1000):
                    try:
                        self._client.put_metric_data(Namespace=ns, MetricData=data[i:i + 1000])
                    except Exception as e:  # noqa: BLE001 - the local stack's metrics are best effort
                        log.warning("PutMetricData to the local CloudWatch failed: %s", e)


class Collected:
    """The series of the EMF documents seen, per minute, the newest :data:`KEEP_MINUTES` minutes
    (and, with a :attr:`sink`, each document handed to it as well)."""

    def __init__(self, sink=None) -> None:
        self._lock = threading.Lock()
        self.sink = sink
        # (namespace, name, unit, ((dim, value), ...)) -> OrderedDict(minute_ms -> [sum, count, max, last])
        self._series: dict[tuple, OrderedDict] = {}

    def add(self, doc: dict) -> None:
        aws = doc["_aws"]
        minute = int(aws.get("Timestamp") or 0) // MINUTE_MS * MINUTE_MS
        for d in aws.get("CloudWatchMetrics") or []:
            for dims in d.get("Dimensions") or [[]]:
                key_dims = tuple((k, str(doc.get(k))) for k in dims)
                for m in d.get("Metrics") or []:
                    v = doc.get(m.get("Name"))
                    values = [x for x in (v if isinstance(v, list) else [v]) if isinstance(x, (int, float))]
                    if values:
                        self._point((d.get("Namespace"), m["Name"], m.get("Unit"), key_dims), minute, values)
        if self.sink is not None:
            self.sink(doc)

    def _point(self, key: tuple, minute: int, values: list) -> None:
        with self._lock:
            s = self._series.setdefault(key, OrderedDict())
            p = s.get(minute)
            if p is None:
                p = s[minute] = [0.0, 0, float("-inf"), 0.0]
                for old in [t for t in s if t <= minute - KEEP_MINUTES * MINUTE_MS]:
                    del s[old]
            for x in values:
                p[0] += x
                p[1] += 1
                p[2] = max(p[2], x)
                p[3] = x

    def add_text(self, text: str) -> int:
        docs = documents(text)
        for d in docs:
            self.add(d)
        return len(docs)

    def series(self, name: str | None = None, namespace: str | None = None) -> list[dict]:
        with self._lock:
            out = []
            for (ns, n, unit, dims), points in sorted(self._series.items(), key=lambda kv: repr(kv[0])):
                if (name and n != name) or (namespace and ns != namespace):
                    continue
                out.append({"namespace": ns, "name": n, "unit": unit, "dimensions": dict(dims),
                            "points": [{"minute": t, "sum": p[0], "count": p[1], "max": p[2], "last": p[3]}
                                       for t, p in sorted(points.items())]})
            return out

    def clear(self) -> None:
        with self._lock:
            self._series.clear()


COLLECTED = Collected()


class Tee:
    """A ``sys.stdout`` that writes through to ``stream`` and keeps the EMF lines written (a worker's)."""

    def __init__(self, stream) -> None:
        self.stream = stream
        self.lines: list[str] = []
        self._partial = ""

    def write(self, s: str) -> int:
        self._partial += s
        if "\n" in self._partial:
            *full, self._partial = self._partial.split("\n")
            self.lines += [line for line in full if '"_aws"' in line]
        return self.stream.write(s)

    def flush(self) -> None:
        self.stream.flush()

    def take(self) -> list[str]:
        out, self.lines = self.lines, []
        return out

    def __getattr__(self, name):
        return getattr(self.stream, name)
