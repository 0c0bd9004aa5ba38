"""The replay job's selection (issue 18.1) on a lake folder written by the archiver's own encoding:
exactly the messages of the range and topic that the filter keeps — the filter judged by the pure
matcher (lakeq.replay.rules.matching) as the reference — once each (redelivered batches in the
lake), in (queue, offset) order, with their bodies; and the manifest the job writes."""
from __future__ import annotations

import gzip
import json
import random

import pytest

from lakeq.lake import archive as lake
from lakeq.replay.rules import Filter, matching
from lakeq_lake import replay as R
from lakeq_lake.store import Lake

H = 3_600_000
T0 = 1_767_225_600_000  # 2026-01-01T00:00Z
ARN = "arn:aws:dynamodb:us-east-1:1:table/lakeq-local-segments/stream/x"

# values whose JSON types matter: "1" is not 1, true is not 1, 1 is 1.0
VALUES = [1, 1.0, "1", True, False, 0, 2.5, "A", "AB", "ab", "", None, [1], {"x": 1}, 7, "7"]
FILTERS = [
    None,
    {"tags": ["red"]},
    {"conditions": [{"field": "k", "values": [1]}]},
    {"conditions": [{"field": "k", "values": ["1"]}]},
    {"conditions": [{"field": "k", "values": [True]}], "tags": ["red", "blue"]},
    {"conditions": [{"field": "k", "range": [0, 2]}, {"field": "s", "prefix": "A"}]},
    {"conditions": [{"field": "k", "anything_but": [1, "A"]}, {"field": "s", "exists": False}]},
    {"conditions": [{"field": "n\"q", "exists": True}]},
]


def _rows(rng: random.Random) -> list[dict]:
    rows, offsets = [], {}
    for i in range(1200):
        topic = rng.choice(["t", "t", "t", "t/sub", "u"])
        q = rng.randrange(3)
        off = offsets.get((topic, q), 0)
        offsets[(topic, q)] = off + 1
        props = {}
        for f in ("k", "s", 'n"q'):
            if rng.random() < 0.7:
                props[f] = rng.choice(VALUES)
        tags = rng.sample(["red", "blue", "green"], rng.randrange(3))
        rows.append({"topic": topic, "queue": q, "offset": off, "id": f"m{i}", "key": None, "size": 0,
                     "tags": tags, "properties": props, "produced_at": T0 + i * 9_000, "seq": str(1000 + i),
                     "body": f"body-{topic}-{q}-{off}-é"})
    return rows  # 1200 × 9 s = 3 hours


def _write(root, rows: list[dict], shard_arn: str) -> None:
    for kind, rs in (("messages", [{k: v for k, v in r.items() if k != "body"} for r in rows]),
                     ("bodies", [lake.body_row(r, r["body"]) for r in rows])):
        for i in range(0, len(rs), 250):  # one object per "batch" and partition, as the archiver does
            for key, blob in lake.objects(kind, shard_arn, rs[i:i + 250]).items():
                p = root / key
                p.parent.mkdir(parents=True, exist_ok=True)
                p.write_bytes(blob)


@pytest.fixture(scope="module")
def lake_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("lake")
    rows = _rows(random.Random(18))
    _write(root, rows, ARN)
    _write(root, rows[100:400], ARN + "-again")  # a batch redelivered with other boundaries
    return root, rows


def _reference(rows, topic, lo, hi, raw_filter):
    inside = [r for r in rows if r["topic"] == topic and lo <= r["produced_at"] < hi]
    kept = matching(Filter.of(raw_filter), inside)
    kept.sort(key=lambda r: (r["queue"], r["offset"]))
    return [(r["queue"], r["offset"], r["id"], r["body"]) for r in kept]


def test_selection_equals_the_pure_matcher_on_every_filter(spark, lake_dir):
    root, rows = lake_dir
    lk = Lake(str(root))
    lo, hi = T0 + H // 2 + 4_500, T0 + 2 * H + 123  # partial first and last hours
    msgs = R.read_slice(spark, lk, "messages", lo, hi)
    bods = R.read_slice(spark, lk, "bodies", lo, hi)
    R.ship(spark, "matcher", "lakeq")
    sizes = []
    for raw in FILTERS:
        want = _reference(rows, "t", lo, hi, raw)
        got = [(r["queue"], r["offset"], r["id"], r["body"])
               for r in R.select(msgs, bods, "t", lo, hi, Filter.of(raw), parts=2).collect()]
        assert sorted(got) == want, raw  # exactly these, once each
        for q in {w[0] for w in want}:  # in offset order within each queue
            assert [g for g in got if g[0] == q] == [w for w in want if w[0] == q]
        sizes.append(len(want))
    assert all(0 < n for n in sizes[1:]) and len(set(sizes)) > 4  # the filters really select differently
    # "1" and 1 and true are told apart (the lake's map<string,string> schema would merge them)
    one, one_s = sizes[2], sizes[3]
    assert one != one_s


def test_read_slice_reads_only_the_hours_of_the_range(spark, tmp_path):
    """Objects of other hours are never opened: here they are not even gzip, and reading them fails."""
    rows = [r for r in _rows(random.Random(1))[:1200] if T0 + H <= r["produced_at"] < T0 + 2 * H]
    _write(tmp_path, rows, ARN)
    for hour in ("00", "02"):
        for kind in ("messages", "bodies"):
            bad = tmp_path / f"raw/kind={kind}/dt=2026-01-01/hour={hour}/x-1-2.jsonl.gz"
            bad.parent.mkdir(parents=True, exist_ok=True)
            bad.write_bytes(b"not gzip")
    lk = Lake(str(tmp_path))
    with pytest.raises(Exception):
        R.read_slice(spark, lk, "messages", T0, T0 + 3 * H).count()  # the trap works
    for kind in ("messages", "bodies"):
        assert R.read_slice(spark, lk, kind, T0 + H + 1, T0 + 2 * H).count() == len(rows)


def test_job_writes_an_ordered_manifest_and_its_summary(spark, lake_dir, tmp_path):
    root, rows = lake_dir
    lk = Lake(str(root))
    raw = {"conditions": [{"field": "k", "range": [0, 2]}], "tags": ["red", "green"]}
    lo, hi = T0 + 600_000, T0 + 3 * H
    out = R.run_replay(spark, lk, "r1", "t", lo, hi, Filter.of(raw), log=lambda *_: None)
    want = _reference(rows, "t", lo, hi, raw)
    s = json.loads((root / R.summary_key("r1")).read_text())
    assert s == out and s["found"] == len(want) and s["missing_bodies"] == 0
    got, seen_queues = [], []
    for part in s["parts"]:  # each part: whole queues, sorted by (queue, offset); its count recorded
        lines = gzip.decompress((root / part["key"]).read_bytes()).decode("utf-8").splitlines()
        assert len(lines) == part["rows"]
        rs = [json.loads(x) for x in lines]
        assert [(r["queue"], r["offset"]) for r in rs] == sorted((r["queue"], r["offset"]) for r in rs)
        seen_queues += sorted({r["queue"] for r in rs})
        got += rs
    assert len(seen_queues) == len(set(seen_queues))  # a queue never spans two parts
    assert [p["key"] for p in s["parts"]] == sorted(p["key"] for p in s["parts"])
    got.sort(key=lambda r: (r["queue"], r["offset"]))
    assert [(r["queue"], r["offset"], r["id"], r["body"]) for r in got] == want
    assert s["queues"] == {str(q): sum(1 for w in want if w[0] == q) for q in {w[0] for w in want}}
    assert json.loads(got[0]["properties"]) == next(r["properties"] for r in rows if r["id"] == got[0]["id"])
