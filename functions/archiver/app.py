"""Archiver function: the tables' DynamoDB streams → the data lake (SPEC §5, docs/design.md "Data lake").

One invocation = one batch from one shard (``BatchSize`` / ``MaximumBatchingWindowInSeconds`` in
template.yaml): its records become gzipped JSON Lines objects under
``raw/kind=<messages|offsets|members>/dt=…/hour=…/``, one per partition, keyed by the batch's shard
and first/last sequence numbers (lakeq.lake). Any error raises: the event source mapping retries the
same batch, which rewrites the same keys with the same bytes, so nothing is duplicated.
"""
from __future__ import annotations

import os

import boto3
from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit

from lakeq import lake

logger = Logger(service="lakeq")
metrics = Metrics(namespace="lakeq", service="lakeq")
_s3 = None


def kinds_by_table() -> dict[str, str]:
    out = {}
    for env, kind in (("SEGMENTS_TABLE", "messages"), ("OFFSETS_TABLE", "offsets"), ("GROUPS_TABLE", "members")):
        if os.environ.get(env):
            out[os.environ[env]] = kind
    return out


def s3():
    global _s3
    if _s3 is None:
        _s3 = boto3.client("s3")
    return _s3


@metrics.log_metrics(raise_on_empty_metrics=False)
def lambda_handler(event, context):
    records = event.get("Records") or []
    objs = lake.batch_objects(records, kinds_by_table())
    lake.put_objects(s3(), os.environ["LAKE_BUCKET"], objs)
    logger.info("archived", extra={"records": len(records), "objects": len(objs)})
    metrics.add_metric(name="LakeRecords", unit=MetricUnit.Count, value=len(records))
    metrics.add_metric(name="LakeObjects", unit=MetricUnit.Count, value=len(objs))
    return {"records": len(records), "objects": sorted(objs)}
