"""The compacted lake's small objects on S3 (moto): ``Lake`` (glue_jobs/lakeq_lake/store.py) as the
compaction and the readers use it over ``s3://`` — a manifest is created once (``If-None-Match``),
the newest generation per hour is found, compacted raw objects are tagged for the lifecycle rule,
garbage is listed with its age and deleted. No Spark session: these are boto3 calls."""
from __future__ import annotations

import sys
from pathlib import Path

import boto3
import pytest
from moto import mock_aws

pytest.importorskip("pyspark")  # store.py imports pyspark's DataFrame types (no JVM started)
ROOT = Path(__file__).resolve().parents[2]
if str(ROOT / "glue_jobs") not in sys.path:
    sys.path.insert(0, str(ROOT / "glue_jobs"))

from lakeq.lake import compaction as C  # noqa: E402
from lakeq_lake.store import Lake  # noqa: E402


@pytest.fixture
def lake(monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        boto3.client("s3").create_bucket(Bucket="lake-bucket")
        yield Lake("s3://lake-bucket")


def test_a_generation_is_committed_once_and_the_newest_is_read(lake):
    doc = C.manifest_doc("messages", "2026-01-01", "00", 1, "r1", ["lake/a.parquet"], ["raw/x"], 1)
    key = C.manifest_key("messages", "2026-01-01", "00", 1)
    assert lake.create_json(key, doc) is True
    assert lake.create_json(key, {**doc, "run": "r2"}) is False  # another run's commit of generation 1
    assert lake.get_json(key)["run"] == "r1"
    lake.create_json(C.manifest_key("messages", "2026-01-01", "00", 2), {**doc, "generation": 2})
    lake.create_json(C.manifest_key("messages", "2026-01-01", "01", 1), {**doc, "hour": "01"})
    got = lake.manifests("messages")
    assert {h: m["generation"] for h, m in got.items()} == {("2026-01-01", "00"): 2, ("2026-01-01", "01"): 1}
    assert list(lake.manifests("messages", "2026-01-01 01", "2026-01-01 01")) == [("2026-01-01", "01")]
    assert lake.manifests("bodies") == {}


def test_compacted_raw_objects_are_tagged_and_garbage_deleted(lake):
    s3 = boto3.client("s3")
    raw = [f"raw/kind=messages/dt=2026-01-01/hour=00/m-{i}-{i}.jsonl.gz" for i in range(3)]
    for k in raw + ["lake/kind=messages/run=1/dt=2026-01-01/hour=00/part-0.parquet"]:
        s3.put_object(Bucket="lake-bucket", Key=k, Body=b"x")
    lake.tag(raw[:2], C.COMPACTED_TAG)
    tags = [s3.get_object_tagging(Bucket="lake-bucket", Key=k)["TagSet"] for k in raw]
    assert tags == [[{"Key": "lakeq-compacted", "Value": "true"}]] * 2 + [[]]
    assert lake.raw_keys("messages") == raw
    written = lake.modified("lake/kind=messages")
    assert list(written) == ["lake/kind=messages/run=1/dt=2026-01-01/hour=00/part-0.parquet"]
    lake.delete(list(written))
    assert lake.list_keys("lake/kind=messages") == []
    lake.put_text(C.symlink_key("messages", "2026-01-01", "00"), "s3://lake-bucket/a\n")
    assert s3.get_object(Bucket="lake-bucket", Key=C.symlink_key("messages", "2026-01-01", "00"))["Body"].read() == b"s3://lake-bucket/a\n"


def test_a_run_without_work_tags_again_repairs_and_retires_on_s3(lake):
    """The compaction's upkeep over s3:// (no hour to write, so no Spark): a raw object its newest
    manifest named days ago and still there is tagged again (the run stopped before tagging it); a
    missing symlink is written from the manifest; once the day is past retention its symlink,
    Parquet and manifest are deleted (the raw object is raw/'s lifecycle's)."""
    from lakeq_lake.compact import compact_kind

    s3 = boto3.client("s3")
    t0 = C.hour_start_ms("2026-01-01", "00")
    raw = "raw/kind=messages/dt=2026-01-01/hour=00/m-1-2.jsonl.gz"
    pq = "lake/kind=messages/run=r1/dt=2026-01-01/hour=00/part-0.parquet"
    for k in (raw, pq):
        s3.put_object(Bucket="lake-bucket", Key=k, Body=b"x")
    doc = C.manifest_doc("messages", "2026-01-01", "00", 1, "r1", [pq], [raw], t0 + 2 * C.HOUR_MS)
    assert lake.create_json(C.manifest_key("messages", "2026-01-01", "00", 1), doc)
    out = compact_kind(None, lake, "messages", t0 + 5 * C.DAY_MS, log=lambda *_: None)
    assert (out["hours"], out["retagged"], out["repaired"], out["retired"]) == ([], 1, 1, 0)
    assert s3.get_object_tagging(Bucket="lake-bucket", Key=raw)["TagSet"] == [
        {"Key": "lakeq-compacted", "Value": "true"}]
    link = C.symlink_key("messages", "2026-01-01", "00")
    assert s3.get_object(Bucket="lake-bucket", Key=link)["Body"].read() == f"s3://lake-bucket/{pq}\n".encode()
    out = compact_kind(None, lake, "messages", t0 + C.RETAIN_DAYS * C.DAY_MS, log=lambda *_: None)
    assert (out["hours"], out["retired"]) == ([], 3)
    assert lake.list_keys("lake") == [] and lake.raw_keys("messages") == [raw]
