"""Where the lake is: ``s3://bucket`` (Glue: Spark reads and writes ``s3://`` paths itself; small JSON
objects go through boto3) or a local folder with the same layout (``make jobs`` brings the local
stack's lake objects to a folder first: hadoop-aws is not installable here).

A kind's rows are the committed Parquet of its compacted hours plus the raw JSON Lines no
committed manifest names (:mod:`lakeq.lake.compaction`): :meth:`Lake.read_kind`."""
from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lakeq.lake import compaction as C

from . import schemas


def _first_lines(lines, n: int) -> list[bytes]:
    """The first ``n`` non-empty lines of ``lines`` (bytes, with or without their line ends)."""
    out: list[bytes] = []
    for line in lines:
        line = line.rstrip(b"\r\n")
        if line.strip():
            out.append(line)
            if len(out) >= n:
                break
    return out


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

    @contextmanager
    def open_read(self, key: str):
        """Object ``key`` as a stream with ``read(n)`` (S3: one GetObject, streamed), closed after."""
        if self.is_s3:
            body = self.s3().get_object(Bucket=self.bucket, Key=key)["Body"]
            try:
                yield body
            finally:
                body.close()
            return
        with open(self.path(key), "rb") as f:
            yield f

    def head_lines(self, key: str, n: int) -> list[bytes]:
        """The first ``n`` non-empty lines of object ``key`` (streamed: not read past them; a key
        ending in ``.gz`` is gunzipped)."""
        import gzip

        if n <= 0:
            return []
        if self.is_s3:
            body = self.s3().get_object(Bucket=self.bucket, Key=key)["Body"]
            try:
                return _first_lines(gzip.GzipFile(fileobj=body) if key.endswith(".gz") else body.iter_lines(), n)
            finally:
                body.close()
        with (gzip.open if key.endswith(".gz") else open)(self.path(key), "rb") as f:
            return _first_lines(f, n)

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

    def get_json(self, key: str):
        if self.is_s3:
            return json.loads(self.s3().get_object(Bucket=self.bucket, Key=key)["Body"].read())
        return json.loads(Path(self.path(key)).read_bytes())

    def get_jsons(self, keys: list[str]) -> list:
        """Many small JSON objects (in ``keys``' order; on S3 16 at a time)."""
        if not self.is_s3 or len(keys) < 2:
            return [self.get_json(k) for k in keys]
        self.s3()
        with ThreadPoolExecutor(16) as pool:
            return list(pool.map(self.get_json, keys))

    def create_json(self, key: str, obj) -> bool:
        """Write ``key`` only if it does not exist (S3: ``If-None-Match: *``; a folder: a hard link,
        which fails on an existing name). False when it existed: nothing was written."""
        data = json.dumps(obj, separators=(",", ":"), sort_keys=True).encode("utf-8")
        if self.is_s3:
            from botocore.exceptions import ClientError

            try:
                self.s3().put_object(Bucket=self.bucket, Key=key, Body=data, ContentType="application/json",
                                     IfNoneMatch="*")
            except ClientError as e:
                if e.response.get("Error", {}).get("Code") in ("PreconditionFailed", "ConditionalRequestConflict") \
                        or e.response.get("ResponseMetadata", {}).get("HTTPStatusCode") in (409, 412):
                    return False
                raise
            return True
        p = Path(self.path(key))
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
        tmp.write_bytes(data)
        try:
            os.link(tmp, p)
        except FileExistsError:
            return False
        finally:
            tmp.unlink()
        return True

    def put_text(self, key: str, text: str) -> None:
        data = text.encode("utf-8")
        if self.is_s3:
            self.s3().put_object(Bucket=self.bucket, Key=key, Body=data, ContentType="text/plain")
            return
        p = Path(self.path(key))
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(f".{p.name}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, p)

    def modified(self, prefix: str) -> dict[str, int]:
        """The keys under ``prefix`` and their last-modified times (epoch ms)."""
        if self.is_s3:
            out = {}
            for page in self.s3().get_paginator("list_objects_v2").paginate(
                    Bucket=self.bucket, Prefix=prefix.rstrip("/") + "/"):
                out.update({o["Key"]: int(o["LastModified"].timestamp() * 1000) for o in page.get("Contents", [])})
            return out
        base = Path(self.root)
        p = Path(self.path(prefix))
        return ({str(f.relative_to(base)): int(f.stat().st_mtime * 1000) for f in p.rglob("*") if f.is_file()}
                if p.exists() else {})

    def delete(self, keys: list[str]) -> None:
        if self.is_s3:
            for i in range(0, len(keys), 1000):
                self.s3().delete_objects(Bucket=self.bucket, Delete={
                    "Objects": [{"Key": k} for k in keys[i:i + 1000]], "Quiet": True})
            return
        for k in keys:
            Path(self.path(k)).unlink(missing_ok=True)

    def tag(self, keys: list[str], tag: tuple[str, str]) -> None:
        """Tag objects (S3; the lifecycle rules act on tags); a folder has no tags: nothing to do."""
        if not self.is_s3:
            return
        self.s3()

        def one(k):
            self.s3().put_object_tagging(Bucket=self.bucket, Key=k,
                                         Tagging={"TagSet": [{"Key": tag[0], "Value": tag[1]}]})
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(one, keys))

    # ---------------------------------------------------------------- logs
    def manifests(self, kind: str, lo: str | None = None, hi: str | None = None) -> dict[C.Hour, dict]:
        """The newest committed manifest of each compacted hour of ``kind`` (within the
        ``"YYYY-MM-DD HH"`` bounds ``lo``..``hi``)."""
        newest = {h: k for h, k in C.newest_manifests(self.list_keys(f"{C.MANIFESTS}/kind={kind}"), kind).items()
                  if C.in_hours(h, lo, hi)}
        hours = sorted(newest)
        return dict(zip(hours, self.get_jsons([newest[h] for h in hours]), strict=True))

    def manifest_docs(self, keys: dict[C.Hour, str]) -> dict[C.Hour, dict]:
        """The manifests ``keys`` (hour → key) read: one GET each."""
        hours = sorted(keys)
        return dict(zip(hours, self.get_jsons([keys[h] for h in hours]), strict=True))

    def raw_keys(self, kind: str, lo: str | None = None, hi: str | None = None) -> list[str]:
        out = []
        for k in self.list_keys(f"{C.RAW}/kind={kind}"):
            p = C.raw_hour(k)
            if p is not None and C.in_hours((p[1], p[2]), lo, hi):
                out.append(k)
        return out

    def read_kind(self, spark: SparkSession, kind: str, lo: str | None = None, hi: str | None = None,
                  stored: bool = False, hours: set[C.Hour] | None = None,
                  planned: tuple[dict, list[str]] | None = None) -> DataFrame:
        """The rows of ``kind`` with their explicit schema (:data:`schemas.BY_KIND`, or
        ``stored``: :data:`schemas.STORED`, ``properties`` as its JSON text) and the partition
        columns ``dt`` (date), ``hour`` (int): the committed Parquet of the compacted hours and the
        raw JSON Lines no committed manifest names. ``lo``, ``hi``: only the hours
        ``"YYYY-MM-DD HH"`` within (``hours``: only those). Empty when nothing was archived.
        A lake without any manifest of ``kind`` in range is read as it always was: Spark lists
        ``raw/kind=<kind>/`` itself. ``planned`` (the compaction): ``(manifests, raw keys)`` as the
        caller listed them, read as they are — never listed again, so a raw key arriving after the
        caller's listing is not read (its rows would be written without the manifest naming it)."""
        schema = schemas.STORED[kind] if stored else schemas.BY_KIND[kind]
        prefix = f"{C.RAW}/kind={kind}"
        manifests = self.manifests(kind, lo, hi) if planned is None else dict(planned[0])
        if hours is not None:
            manifests = {h: m for h, m in manifests.items() if h in hours}
        if not manifests and hours is None and planned is None:
            if not self.exists(prefix):
                return spark.createDataFrame([], schema)
            base = self.path(prefix)
            df = _raw(spark.read.schema(schema).option("basePath", base)
                      .option("recursiveFileLookup", "false").json(base), kind)
            if lo is not None or hi is not None:  # a filter on the partition columns: Spark lists those folders only
                df = df.where(partition_key().between(lo or "0000", hi or "9999"))
            return df
        raw_keys = self.raw_keys(kind, lo, hi) if planned is None else list(planned[1])
        if hours is not None:
            raw_keys = [k for k in raw_keys if (C.raw_hour(k) or ("", "", ""))[1:] in hours]
        parquet, raw = C.unread(raw_keys, manifests)
        cols = [*schema.fieldNames(), "dt", "hour"]
        frames = []
        if raw:
            frames.append(_raw(spark.read.schema(schema).option("basePath", self.path(prefix))
                               .json([self.path(k) for k in raw]), kind))
        # files of bucketed generations (``bucket=NN/``) and of the layout before, each read with
        # its own partition folders (Spark's discovery refuses two directory structures in one read)
        flat = [k for k in parquet if C.bucket_of(k) is None]
        for group in (flat, [k for k in parquet if k not in set(flat)]):
            if not group:
                continue
            with _listed_here(spark, len(group)):
                df = (spark.read.schema(schemas.STORED[kind]).option("basePath", self.path(f"{C.LAKE}/kind={kind}"))
                      .parquet(*[self.path(k) for k in group]))
            if kind == "messages" and not stored:
                df = df.withColumn("properties", F.from_json("properties", schemas.PROPERTIES))
            frames.append(df)
        if not frames:
            return spark.createDataFrame([], schema).withColumn("dt", F.lit(None).cast("date")) \
                .withColumn("hour", F.lit(None).cast("int"))
        frames = [f.withColumn("dt", F.col("dt").cast("date")).withColumn("hour", F.col("hour").cast("int"))
                  .select(*cols) for f in frames]
        out = frames[0]
        for f in frames[1:]:
            out = out.unionByName(f)
        return out

    def read_buckets(self, spark: SparkSession, kind: str, lo: str | None = None,
                     hi: str | None = None) -> tuple[int, DataFrame] | None:
        """``(buckets, rows)`` when every hour of ``kind`` within ``lo``..``hi`` that holds rows is
        compacted, bucketed alike and has no raw key its newest manifest does not name
        (:func:`lakeq.lake.compaction.bucketed_files`): ``rows`` (:data:`schemas.STORED`'s columns,
        no partition columns) has exactly ``buckets`` partitions, partition ``b`` the files of
        bucket ``b`` of every hour — the rows of the queues ``pmod(hash(queue), buckets) = b``, each
        message once — read without a shuffle (one scan per bucket, coalesced into one partition,
        the scans in bucket order). None otherwise: the caller reads :meth:`read_kind` and
        deduplicates (the open hour, late raw keys, the layout before)."""
        manifests = self.manifests(kind, lo, hi)
        got = C.bucketed_files(manifests)
        if got is None or C.unread(self.raw_keys(kind, lo, hi), manifests)[1]:
            return None
        n, files = got
        schema = schemas.STORED[kind]
        paths = [self.path(k) for b in range(n) for k in files[b]]
        # one listing of every file, each bucket's scan pruned to its files by the partition column
        # ``bucket`` (its folder)
        with _listed_here(spark, len(paths)):
            every = (spark.read.schema(schema).option("basePath", self.path(f"{C.LAKE}/kind={kind}"))
                     .parquet(*paths)) if paths else None
        frames = []
        for b in range(n):
            if files[b]:
                df = every.where(F.col("bucket") == b).select(*schema.fieldNames()).coalesce(1)
            else:  # one empty partition (an empty local relation would have none: the buckets would shift)
                df = spark.createDataFrame(spark.sparkContext.parallelize([], 1), schema)
            frames.append(df)
        out = frames[0]
        for f in frames[1:]:
            out = out.union(f)
        return n, out


def _raw(df: DataFrame, kind: str) -> DataFrame:
    """Raw rows with the compaction's derived columns (:data:`schemas.DERIVED`) null, whatever a raw
    object holds: only the compaction writes them."""
    for f in schemas.DERIVED.get(kind, ()):
        if f.name in df.columns:
            df = df.withColumn(f.name, F.lit(None).cast(f.dataType))
    return df


# files a read lists on the driver at most (a week of bucketed hours is 1,344): above, Spark's
# listing job does, its tasks in parallel — the driver lists one path after another (on S3 a request
# each), and a read of every hour (the backlog's, a 400-day replay's) is 76,800 bucketed files
LISTED_HERE_MAX = 2048


@contextmanager
def _listed_here(spark: SparkSession, paths: int):
    """The files named by a manifest listed by the driver, not by a Spark job (which Spark runs for
    more than 32 paths: a day of bucketed hours is 192 files; the job cost ~1-2 CPU-s a read on
    ``local[2]``, docs/benchmarks.md "Compacted hours deduplicated and bucketed") — up to
    :data:`LISTED_HERE_MAX` files; more are listed by Spark's job as before."""
    key = "spark.sql.sources.parallelPartitionDiscovery.threshold"
    was = spark.conf.get(key)
    if paths <= LISTED_HERE_MAX:
        spark.conf.set(key, str(max(paths + 1, int(was))))
    try:
        yield
    finally:
        spark.conf.set(key, was)


def partition_key() -> F.Column:
    """``"YYYY-MM-DD HH"`` from the partition columns, whatever types discovery gave them (``dt`` a
    date or a string, ``hour`` an int or ``"07"``)."""
    return F.concat(F.col("dt").cast("string"), F.lit(" "), F.lpad(F.col("hour").cast("string"), 2, "0"))
