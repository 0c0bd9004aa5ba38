"""The lake bucket's archive and reports (``$LAKE_BUCKET``): the archiver's objects (built by the pure
:mod:`lakeq.lake.archive`) and the reports the Glue jobs write next to their output (read by
:mod:`lakeq.lake.reports`). S3 through the container's one botocore client (:mod:`lakeq.store.clients`,
made on first use); no pynamodb, so the archiver loads no table model.
"""
from __future__ import annotations

import json
import os
from collections.abc import Mapping

from lakeq.store.clients import client


def put_objects(objs: Mapping[str, bytes], bucket: str | None = None) -> None:
    """One PutObject per object, in order (``objs``: key → gzipped JSON Lines). Raises on an S3 error
    (the archiver's batch is retried and rewrites the same keys with the same bytes)."""
    bucket = bucket or os.environ["LAKE_BUCKET"]
    s3 = client("s3")
    for key, blob in objs.items():
        # no Content-Encoding: readers (Spark, boto3) decompress by the .gz suffix themselves
        s3.put_object(Bucket=bucket, Key=key, Body=blob, ContentType="application/gzip")


def get_json(key: str, bucket: str | None = None) -> dict | None:
    """The JSON object at ``key`` (one GetObject); None when there is none."""
    from botocore.exceptions import ClientError

    try:
        obj = client("s3").get_object(Bucket=bucket or os.environ["LAKE_BUCKET"], Key=key)
    except ClientError as e:
        if e.response.get("Error", {}).get("Code") in ("NoSuchKey", "404", "NotFound"):
            return None
        raise
    return json.loads(obj["Body"].read())
