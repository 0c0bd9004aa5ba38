"""Where the lake is: ``s3://bucket`` (Glue: Spark reads and writes ``s3://`` paths itself; small JSON
objects go through boto3) or a local folder with the same layout (``make jobs`` brings the local
stack's lake objects to a folder first: hadoop-aws is not installable here)."""
from __future__ import annotations

import json
import os
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

from . import schemas


class Lake:
    def __init__(self, root: str):
        self.root = root.rstrip("/")
        self.is_s3 = self.root.startswith("s3://")
        if self.is_s3:
            self.bucket = self.root[len("s3://"):].split("/", 1)[0]
        self._s3 = None

    def path(self, key: str) -> str:
        return f"{self.root}/{key.lstrip('/')}"

    # ---------------------------------------------------------------- small objects
    def s3(self):
        if self._s3 is None:
            import boto3

            self._s3 = boto3.client("s3")
        return self._s3

    def exists(self, prefix: str) -> bool:
        if self.is_s3:
            r = self.s3().list_objects_v2(Bucket=self.bucket, Prefix=prefix.rstrip("/") + "/", MaxKeys=1)
            return r.get("KeyCount", 0) > 0
        p = Path(self.path(prefix))
        return p.exists() and any(f.is_file() for f in p.rglob("*"))

    def list_keys(self, prefix: str) -> list[str]:
        """The keys under ``prefix`` (relative to the lake's root), sorted."""
        if self.is_s3:
            out = []
            for page in self.s3().get_paginator("list_objects_v2").paginate(
                    Bucket=self.bucket, Prefix=prefix.rstrip("/") + "/"):
                out += [o["Key"] for o in page.get("Contents", [])]
            return sorted(out)
        base = Path(self.root)
        p = Path(self.path(prefix))
        return sorted(str(f.relative_to(base)) for f in p.rglob("*") if f.is_file()) if p.exists() else []

    def sizes(self, prefix: str) -> dict[str, int]:
        """The keys under ``prefix`` (relative to the lake's root) and their sizes in bytes."""
        if self.is_s3:
            out = {}
            for page in self.s3().get_paginator("list_objects_v2").paginate(
                    Bucket=self.bucket, Prefix=prefix.rstrip("/") + "/"):
                out.update({o["Key"]: int(o["Size"]) for o in page.get("Contents", [])})
            return out
        base = Path(self.root)
        p = Path(self.path(prefix))
        return {str(f.relative_to(base)): f.stat().st_size for f in p.rglob("*") if f.is_file()} if p.exists() else {}

    def first_line(self, key: str) -> bytes:
        """The first line of object ``key`` (streamed: the object is not read past it)."""
        if self.is_s3:
            body = self.s3().get_object(Bucket=self.bucket, Key=key)["Body"]
            try:
                return next(iter(body.iter_lines()), b"")
            finally:
                body.close()
        with open(self.path(key), "rb") as f:
            return f.readline().rstrip(b"\r\n")

    def put_json(self, key: str, obj) -> None:
        data = json.dumps(obj, separators=(",", ":"), sort_keys=True).encode("utf-8")
        if self.is_s3:
            self.s3().put_object(Bucket=self.bucket, Key=key, Body=data, ContentType="application/json")
            return
        p = Path(self.path(key))
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_suffix(p.suffix + ".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, p)

    # ---------------------------------------------------------------- logs
    def read_kind(self, spark: SparkSession, kind: str) -> DataFrame:
        """``raw/kind=<kind>/`` with its explicit schema (partition columns ``dt``, ``hour`` added by
        Spark's partition discovery); an empty DataFrame when nothing was archived yet."""
        prefix = f"raw/kind={kind}"
        schema = schemas.BY_KIND[kind]
        if not self.exists(prefix):
            return spark.createDataFrame([], schema)
        base = self.path(prefix)
        return (spark.read.schema(schema).option("basePath", base)
                .option("recursiveFileLookup", "false").json(base))
