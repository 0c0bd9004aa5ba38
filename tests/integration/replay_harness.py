"""Shared by the replay tests (moto and Spark): the Glue job in moto, a fake monotonic clock for the
copier (and the set-up of a replay into a topic: :func:`into_topic`; a copier dying between a
chunk's produce and its cursor write: :func:`crash_after_produce`), the manifest the selection job
writes (built here from the archiver's own rows of the produced segments, in the job's exact
format), the schedule run as ReplayFunction, and what a topic holds."""
from __future__ import annotations

import gzip
import json

from infra.local import template as tpl
from lakeq.lake import archive
from lakeq.log import segments as seg
from lakeq.replay.rules import Filter, copy_id, matching
from lakeq.store import replay_manifest
from lakeq.store.models import SegmentModel
from tests.handlers import Context, load_function, sample, segment_records

JOB = f"{tpl.LOCAL_STACK}-replay-select"
BUCKET_ENV = "LAKE_BUCKET"
MANIFEST_COLUMNS = ["queue", "offset", "id", "key", "tags", "properties", "produced_at", "body", "claim", "inc"]


def create_job(aws) -> None:
    """The selection job in moto (helper replayjob adds the template's resource; moto runs nothing)."""
    import boto3

    glue = boto3.client("glue", region_name="us-east-1")
    try:
        glue.get_job(JobName=JOB)
    except glue.exceptions.EntityNotFoundException:
        glue.create_job(Name=JOB, Role="arn:aws:iam::123456789012:role/glue",
                        Command={"Name": "glueetl", "ScriptLocation": "s3://x/replay.py"})


def job_runs() -> list[dict]:
    import boto3

    return boto3.client("glue", region_name="us-east-1").get_job_runs(JobName=JOB)["JobRuns"]


class FakeTime:
    """``service.monotonic`` / ``service.sleep``: time moves only when the copier sleeps (and the
    lakeq clock with it); ``hooks`` run on each sleep."""

    def __init__(self, clock=None):
        self.t, self.clock, self.hooks, self.slept = 1000.0, clock, [], []

    def monotonic(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s
        self.slept.append(s)
        if self.clock is not None:
            self.clock.t += round(s * 1000)
        for h in list(self.hooks):
            h()


def into_topic(api, aws, clock, monkeypatch, chunk: int | None = None) -> FakeTime:
    """A replay into a topic's set-up: the Glue job in moto, target topic ``replayed`` (3 queues), the
    copier's fake clock (moving ``clock`` with it) and, given, its chunk size."""
    from lakeq.replay import service

    create_job(aws)
    assert api.call("POST", "/v1/topics", {"name": "replayed", "queues": 3})[0] == 201
    ft = FakeTime(clock)
    monkeypatch.setattr(service, "monotonic", ft.monotonic)
    monkeypatch.setattr(service, "sleep", ft.sleep)
    if chunk is not None:
        monkeypatch.setattr(service, "CHUNK", chunk)
    return ft


def crash_after_produce(monkeypatch, which: int, why: str = "between produce and cursor write") -> None:
    """The copier dies (:class:`tests.crash.Crash`) right after the ``which``-th chunk's copies are
    appended to a topic target, before its cursor write; ``monkeypatch.undo`` or setting
    ``service.topic_sink`` back ends it."""
    from lakeq.replay import service
    from tests.crash import Crash

    real, n = service.topic_sink, [0]

    def sink(name):
        produce_ = real(name)

        def produce(copies):
            out = produce_(copies)
            n[0] += 1
            if n[0] == which:
                raise Crash(why)
            return out
        return produce
    monkeypatch.setattr(service, "topic_sink", sink)


def lake_rows(aws) -> tuple[list[dict], dict]:
    """The archiver's message rows and body rows (by (topic, inc, queue, offset)) of every segment
    written so far (its own decoding of the stream records)."""
    msgs, bodies = [], {}
    for rec in segment_records(aws):
        rows, bods = archive.message_and_body_rows(rec)
        msgs += rows
        for b in bods:
            bodies[(b["topic"], b["inc"], b["queue"], b["offset"])] = b
    return msgs, bodies


def expected(aws, topic: str, lo: int, hi: int, flt: dict | None) -> list[dict]:
    """The rows a replay selects, in (queue, inc, offset) order: the pure matcher as the reference."""
    msgs, _ = lake_rows(aws)
    inside = {(r["queue"], r["inc"], r["offset"]): r for r in msgs
              if r["topic"] == topic and lo <= r["produced_at"] < hi}
    kept = matching(Filter.of(flt), list(inside.values()))
    return sorted(kept, key=lambda r: (r["queue"], r["inc"], r["offset"]))


def write_manifest(aws, rid: str, topic: str, lo: int, hi: int, flt: dict | None, parts: int = 2,
                   drop_body: set | None = None, gz: bool = False, fmt: str = "records") -> dict:
    """What the selection job writes for replay ``rid``: ``replays/<id>/manifest/part-*.txt``
    (records, :mod:`lakeq.store.replay_manifest`; ``fmt="json"``: JSON Lines ``part-*.json``, as
    the job wrote them before 2026-12-07 — ``gz``: gzipped ``part-*.json.gz``, as before 2026-11-25 —
    columns :data:`MANIFEST_COLUMNS`, properties and claim as JSON text, null
    fields left out as Spark's writer does; a queue's rows in one part, sorted) and
    ``replays/<id>/selection.json``. ``drop_body``: (queue, offset)s whose body row is missing."""
    import os

    _, bodies = lake_rows(aws)
    rows = expected(aws, topic, lo, hi, flt)
    by_part: dict[int, list[dict]] = {}
    for r in rows:
        b = (None if (r["queue"], r["offset"]) in (drop_body or set())
             else bodies.get((topic, r["inc"], r["queue"], r["offset"])))
        out = {"queue": r["queue"], "offset": r["offset"], "id": r["id"], "key": r["key"], "tags": r["tags"],
               "properties": json.dumps(r["properties"], separators=(",", ":"), ensure_ascii=False),
               "produced_at": r["produced_at"], "body": None if b is None else b["body"],
               "claim": None if b is None or "claim" not in b else json.dumps(b["claim"], separators=(",", ":")),
               "inc": r["inc"]}
        by_part.setdefault(r["queue"] % parts, []).append({k: v for k, v in out.items() if v is not None})
    s3, bucket = aws["s3"], os.environ[BUCKET_ENV]
    listed = []
    for i in sorted(by_part):
        if fmt == "records" and not gz:
            key = f"replays/{rid}/manifest/part-{i:05d}-0a1b-c000.txt"
            text = replay_manifest.encode_all(by_part[i])
        else:
            key = f"replays/{rid}/manifest/part-{i:05d}-0a1b.c000.json" + (".gz" if gz else "")
            text = "".join(json.dumps(x, ensure_ascii=False) + "\n" for x in by_part[i]).encode("utf-8")
        s3.put_object(Bucket=bucket, Key=key, Body=gzip.compress(text) if gz else text)
        listed.append({"key": key, "rows": len(by_part[i])})
    ordered = [x for i in sorted(by_part) for x in by_part[i]]  # the copier's order
    first = [{"queue": x["queue"], "offset": x["offset"], "id": x["id"], "key": x.get("key"),
              "produced_at": x["produced_at"],
              "size": json.loads(x["claim"])["size"] if "claim" in x else
              (len(x["body"].encode("utf-8")) if "body" in x else None)} for x in ordered[:20]]
    summary = {"replay_id": rid, "topic": topic, "from": lo, "to": hi, "filter": Filter.of(flt).to_json(),
               "found": len(rows), "missing_bodies": len(drop_body or ()), "parts": listed, "sample": first,
               "queues": {}, "manifest": f"replays/{rid}/manifest", "seconds": 0.1}
    s3.put_object(Bucket=bucket, Key=f"replays/{rid}/selection.json", Body=json.dumps(summary).encode())
    return summary


def write_error(aws, rid: str, text: str) -> None:
    import os

    aws["s3"].put_object(Bucket=os.environ[BUCKET_ENV], Key=f"replays/{rid}/error.json",
                         Body=json.dumps({"error": text}).encode())


def run_schedule(budget_ms: int = 30_000) -> dict:
    """The 1-minute schedule's invocation of ReplayCopierFunction (its IAM role applies)."""
    fn = load_function("ReplayCopierFunction")

    class Ctx(Context):
        @staticmethod
        def get_remaining_time_in_millis() -> int:
            return budget_ms
    return fn(sample("replay_schedule.json"), Ctx())


def topic_messages(log: str) -> dict[int, list[dict]]:
    """Every message of ``log``'s queues, per queue in offset order (headers with bodies)."""
    out: dict[int, list[dict]] = {}
    items = [i for i in SegmentModel.scan(consistent_read=True) if i.pq.rsplit("#", 1)[0] == log]
    for item in sorted(items, key=lambda i: (i.pq, int(i.base))):
        s = seg.Segment(int(item.base), int(item.count), item.idx, item.data, bool(item.z))
        out.setdefault(int(item.pq.rsplit("#", 1)[1]), []).extend(seg.all_headers(s))
    return out


def source_of(topic: str, rows: list[dict]) -> dict[str, tuple[int, int]]:
    """copy id → (queue, offset) of its source message."""
    return {copy_id(topic, r["queue"], r["offset"]): (r["queue"], r["offset"]) for r in rows}

