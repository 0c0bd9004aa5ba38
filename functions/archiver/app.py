"""Archiver function: the tables' DynamoDB streams → the data lake (SPEC §5, docs/design.md "Data lake").

One invocation = one batch from one shard (``BatchSize`` / ``MaximumBatchingWindowInSeconds`` in
template.yaml): its records become gzipped JSON Lines objects under
``raw/kind=<messages|bodies|offsets|members>/dt=…/hour=…/``, one per partition, keyed by the batch's shard
and first/last sequence numbers (lakeq.lake.archive). An S3 error raises: the event source mapping retries
the same batch, which rewrites the same keys with the same bytes, so nothing is duplicated (a batch
bisected by ``BisectBatchOnFunctionError`` gets other keys: the jobs drop duplicate rows by ``seq``).

A record that cannot be read (a poison record) does not block the shard: the records before it are
archived and it and every later record are reported in ``batchItemFailures`` (the shard's order is
kept); when it is first of several the invocation raises, so the mapping bisects the batch down to
it; alone, it is retried ``MaximumRetryAttempts`` times and its metadata goes to the on-failure
queue (template.yaml). Not powertools' BatchProcessor: the archiver writes one object per batch and
partition, not one per record.
"""
from __future__ import annotations

import os

from aws_lambda_powertools.metrics import MetricUnit

from lakeq.common.errors import LakeqError
from lakeq.common.obs import logger, metrics, tracer
from lakeq.lake import archive as lake
from lakeq.store.lake import put_objects


def kinds_by_table() -> dict[str, str]:
    out = {}
    for env, kind in (("SEGMENTS_TABLE", "messages"), ("OFFSETS_TABLE", "offsets"), ("GROUPS_TABLE", "members")):
        if os.environ.get(env):
            out[os.environ[env]] = kind
    return out


class PoisonBatch(LakeqError):
    """The first record of a batch of several cannot be read: a function error, so the event
    source mapping bisects the batch (without spending retries) until the record is alone."""


@metrics.log_metrics(raise_on_empty_metrics=False)
@tracer.capture_lambda_handler(capture_response=False)
def lambda_handler(event, context):
    records = event.get("Records") or []
    objs, bad, error = lake.split_batch(records, kinds_by_table())
    if bad is not None:
        seq = lake.seq_of(records[bad])
        logger.error("poison record not archived", extra={"sequence_number": seq, "error": error})
        metrics.add_metric(name="LakePoisonRecords", unit=MetricUnit.Count, value=1)
        if bad == 0 and len(records) > 1:
            raise PoisonBatch(f"record {seq} cannot be archived: {error}")
    done = records if bad is None else records[:bad]
    put_objects(objs, os.environ["LAKE_BUCKET"])
    logger.info("archived", extra={"records": len(done), "objects": len(objs)})
    metrics.add_metric(name="LakeRecords", unit=MetricUnit.Count, value=len(done))
    metrics.add_metric(name="LakeObjects", unit=MetricUnit.Count, value=len(objs))
    failures = [] if bad is None else [{"itemIdentifier": lake.seq_of(r)} for r in records[bad:]]
    return {"batchItemFailures": failures, "records": len(done), "objects": sorted(objs)}
