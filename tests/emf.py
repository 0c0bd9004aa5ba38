"""The embedded metric format's rules (CloudWatch's "Specification: Embedded metric format"), checked
on a document: what CloudWatch Logs would turn into metrics, or reject."""
from __future__ import annotations

import json

UNITS = {"Seconds", "Microseconds", "Milliseconds", "Bytes", "Kilobytes", "Megabytes", "Gigabytes",
         "Terabytes", "Bits", "Kilobits", "Megabits", "Gigabits", "Terabits", "Percent", "Count",
         "Bytes/Second", "Kilobytes/Second", "Megabytes/Second", "Gigabytes/Second", "Terabytes/Second",
         "Bits/Second", "Kilobits/Second", "Megabits/Second", "Gigabits/Second", "Terabits/Second",
         "Count/Second", "None"}


def problems(doc: dict) -> list[str]:
    """What makes ``doc`` not a valid EMF document (empty when it is one)."""
    bad = []
    aws = doc.get("_aws")
    if not isinstance(aws, dict):
        return ["no _aws object"]
    if not isinstance(aws.get("Timestamp"), int) or aws["Timestamp"] <= 0:
        bad.append("_aws.Timestamp is not a positive integer (epoch ms)")
    directives = aws.get("CloudWatchMetrics")
    if not isinstance(directives, list) or not directives:
        return bad + ["_aws.CloudWatchMetrics is not a non-empty array"]
    for d in directives:
        ns = d.get("Namespace")
        if not isinstance(ns, str) or not 1 <= len(ns) <= 1024:
            bad.append(f"Namespace {ns!r}")
        dims = d.get("Dimensions")
        if not isinstance(dims, list):
            bad.append("Dimensions is not an array of dimension sets")
            dims = []
        for ds in dims:
            if not isinstance(ds, list) or len(ds) > 30:
                bad.append(f"dimension set {ds!r}: not an array of at most 30 keys")
                continue
            for k in ds:
                v = doc.get(k)
                if not isinstance(v, str) or not 1 <= len(v) <= 1024:
                    bad.append(f"dimension {k!r}: no string value (1-1024 chars) at the top level: {v!r}")
                elif not v.isprintable() or not v.isascii():
                    bad.append(f"dimension {k!r}: value {v!r} is not printable ASCII")
        metrics = d.get("Metrics")
        if not isinstance(metrics, list) or not 1 <= len(metrics) <= 100:
            bad.append("Metrics is not an array of 1-100 metric definitions")
            metrics = []
        for m in metrics:
            name = m.get("Name")
            if not isinstance(name, str) or not 1 <= len(name) <= 1024:
                bad.append(f"metric name {name!r}")
                continue
            if "Unit" in m and m["Unit"] not in UNITS:
                bad.append(f"metric {name}: unit {m['Unit']!r}")
            v = doc.get(name)
            vals = v if isinstance(v, list) else [v]
            if not vals or len(vals) > 100 or not all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                                      for x in vals):
                bad.append(f"metric {name}: no number (or array of 1-100 numbers) at the top level: {v!r}")
    return bad


def documents(text: str) -> list[dict]:
    """The EMF documents among printed lines (JSON objects with an ``_aws`` key)."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{") and '"_aws"' in line:
            out.append(json.loads(line))
    return out
