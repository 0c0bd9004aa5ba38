"""The hourly compaction (issue 32.1, lakeq_lake.compact) on lake folders written by the archiver's
own encoding: the jobs (backlog report, replay selection) give the same results on a compacted lake
as on the same raw lake never compacted — also with a raw file arriving late for a compacted hour,
read as the raw lake's before the next run folds it in, and the same results after — and a crash
at any step of a run leaves every hour's rows exactly once, before and after the next run."""
from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path

import pytest

from lakeq.lake import archive as lake
from lakeq.lake import compaction as C
from lakeq.replay.rules import Filter
from lakeq_lake import replay as R
from lakeq_lake import schemas
from lakeq_lake.compact import compact_kind, run_compact
from lakeq_lake.jobs import run_backlog
from lakeq_lake.store import Lake
from tests.manifest import manifest_rows

H = 3_600_000
T0 = 1_767_225_600_000  # 2026-01-01T00:00Z
SEG = "arn:aws:dynamodb:us-east-1:1:table/lakeq-local-segments/stream/x"
OFF = "arn:aws:dynamodb:us-east-1:1:table/lakeq-local-offsets/stream/x"
MEM = "arn:aws:dynamodb:us-east-1:1:table/lakeq-local-groups/stream/x"
VALUES = [1, 1.0, "1", True, 0, "A", "AB", "", None, "😀", "a\nb", 7, "7"]
AFTER = T0 + 3 * H + C.GRACE_MS  # hours 00-02 closed, 03 open
QUIET = {"log": lambda *_: None}


def _rows(rng: random.Random, n: int, t0: int, step: int, seq0: int, off0: int = 0):
    """Messages (offsets from ``off0`` per queue) and group g's commits now and then: a message is
    one ``(topic, queue, offset)`` (the jobs keep one row of each)."""
    msgs, offs, offsets = [], [], {}
    for i in range(n):
        topic = rng.choice(["t", "t", "u", "t/sub"])
        q = rng.randrange(3)
        off = offsets.get((topic, q), off0)
        offsets[(topic, q)] = off + 1
        props = {f: rng.choice(VALUES) for f in ("k", "s") if rng.random() < 0.7}
        at = t0 + i * step
        msgs.append({"topic": topic, "queue": q, "offset": off, "id": f"m{seq0 + i}", "key": None, "size": 3,
                     "tags": rng.sample(["red", "blue"], rng.randrange(3)), "properties": props,
                     "produced_at": at, "seq": str(seq0 + i), "body": f"b-{topic}-{q}-{off}"})
        if i % 7 == 3:  # group g commits topic's queue now and then
            offs.append({"group": "g", "client_id": None, "subscription": None, "topic": topic, "queue": q,
                         "committed_offset": off, "prev_committed_offset": None, "lock_ts": 0, "lock_until": 0,
                         "last_consumed_at": at, "event": "MODIFY", "change": "commit", "at": at + 1,
                         "seq": str(seq0 + i), "inc": 0})
    return msgs, offs


def _write(root: Path, msgs, offs, members=(), suffix=""):
    for kind, arn, rows in (("messages", SEG, [{k: v for k, v in r.items() if k != "body"} for r in msgs]),
                            ("bodies", SEG, [lake.body_row(r, r["body"]) for r in msgs]),
                            ("offsets", OFF, offs), ("members", MEM, list(members))):
        for i in range(0, len(rows), 150):
            for key, blob in lake.objects(kind, arn + suffix, rows[i:i + 150]).items():
                (root / key).parent.mkdir(parents=True, exist_ok=True)
                (root / key).write_bytes(blob)


MEMBERS = [{"group": "g", "generation": 1, "member_id": "m1", "change": "join", "state": "stable",
            "topics": ["t"], "assignment": ["t#0"], "at": T0 + 5, "seq": "1"}]


@pytest.fixture(scope="module")
def raw_lake(tmp_path_factory):
    root = tmp_path_factory.mktemp("raw-lake")
    msgs, offs = _rows(random.Random(32), 800, T0, 16_000, 1000)  # 800 × 16 s: hours 00-03
    _write(root, msgs, offs, MEMBERS)
    return root


@pytest.fixture(scope="module")
def compacted(spark, raw_lake, tmp_path_factory):
    """``raw_lake`` compacted once (hours 00-02 closed, 03 open), and what the run said: the tests
    that read a compacted lake share it (or copy it, to change it) instead of compacting their own."""
    root = tmp_path_factory.mktemp("compacted-lake") / "lake"
    shutil.copytree(raw_lake, root)
    return root, run_compact(spark, Lake(str(root)), AFTER, **QUIET)


FILTER = {"conditions": [{"field": "k", "values": [1, "A"]}], "tags": ["red"]}


def _expire(root: Path) -> int:
    """What the lifecycle rule does two days after a commit: delete the raw objects the newest
    manifests name (a reader of raw/ alone then misses their rows)."""
    lk, n = Lake(str(root)), 0
    for kind in C.KINDS:
        for m in lk.manifests(kind).values():
            for k in m["raw"]:
                if (root / k).exists():
                    (root / k).unlink()
                    n += 1
    return n


def _results(spark, root: Path, out: Path, name: str, jobs: bool = True) -> dict:
    """What the jobs read of the lake at ``root`` (each kind's rows; the messages and bodies of the
    replays' range as the replay job reads them) and what they make of it (``jobs``): the backlog
    summaries, two replay selections (filtered: one side; all of topic t)."""
    lk = Lake(str(root))
    got = {"kinds": {k: sorted(map(str, lk.read_kind(spark, k).drop("dt", "hour").collect())) for k in C.KINDS},
           # (the compacted bodies' derived `plain` column left out: a raw row has none)
           "sliced": {k: sorted(map(str, R.read_slice(spark, lk, k, T0 + H // 2, T0 + 4 * H).drop("plain").collect()))
                      for k in ("messages", "bodies")}}
    if not jobs:
        return got
    backlog = run_backlog(spark, lk, as_of_ms=T0 + 4 * H, **QUIET)
    got["backlog"] = sorted((json.dumps({k: v for k, v in s.items() if k != "computed_at"}, sort_keys=True)
                             for s in backlog["summaries"]))
    got["replays"] = []
    for i, flt in enumerate((FILTER, None)):
        rid = f"{name}-{i}"
        s = R.run_replay(spark, lk, rid, "t", T0 + H // 2, T0 + 4 * H, Filter.of(flt), out=Lake(str(out)), **QUIET)
        rows = [r for p in s["parts"] for r in manifest_rows(p["key"], (out / p["key"]).read_bytes())]
        got["replays"].append(sorted(json.dumps(r, sort_keys=True) for r in rows))
    return got


def _read(results: dict) -> dict:
    """The rows the jobs read, of :func:`_results`' answer (the jobs' own results left out)."""
    return {k: results[k] for k in ("kinds", "sliced")}


def test_the_jobs_read_a_compacted_lake_as_the_raw_one(spark, raw_lake, compacted, tmp_path):
    plain = tmp_path / "plain"
    shutil.copytree(raw_lake, plain)
    # the shared compacted lake's copy (its first run: the `compacted` fixture's; other tests' reports
    # left out), changed here
    (shared, done), compacted = compacted, tmp_path / "compacted"
    shutil.copytree(shared, compacted, ignore=shutil.ignore_patterns("reports"))
    before = _results(spark, plain, tmp_path / "out", "a")
    assert before["replays"][0] and len(before["replays"][1]) > len(before["replays"][0])
    assert len(before["kinds"]["messages"]) == 800 and before["backlog"]

    assert {k: [(h["dt"], h["hour"], h["generation"]) for h in v["hours"]] for k, v in done.items()} == {
        "messages": [("2026-01-01", f"{h:02d}", 1) for h in range(3)],
        "bodies": [("2026-01-01", f"{h:02d}", 1) for h in range(3)],
        "offsets": [("2026-01-01", f"{h:02d}", 1) for h in range(3)],
        "members": [("2026-01-01", "00", 1)]}
    # raw and Parquet both there: each row read once (the jobs on what they read: after the expiry)
    assert _results(spark, compacted, tmp_path / "out", "b0", jobs=False) == _read(before)
    assert _expire(compacted) > 0
    assert _results(spark, compacted, tmp_path / "out", "b") == before
    # a second run has nothing to do
    assert all(not v["hours"] for v in run_compact(spark, Lake(str(compacted)), AFTER, **QUIET).values())

    # a batch arriving late for compacted hour 01 (and the open hour 03), on both lakes
    msgs, offs = _rows(random.Random(7), 60, T0 + H + 100, 60_000, 50_000, off0=10_000)
    for root in (plain, compacted):
        _write(root, msgs, offs, suffix="-late")
    before = _results(spark, plain, tmp_path / "out", "c")
    assert len(before["kinds"]["messages"]) == 860
    assert _results(spark, compacted, tmp_path / "out", "d", jobs=False) == _read(before)
    done = run_compact(spark, Lake(str(compacted)), AFTER + H, **QUIET)  # now hour 03 is closed too
    # hour 01: generation 2 = generation 1 + the late object; hour 03 (its 2 objects) for the first time
    assert [(h["hour"], h["generation"], h["late"]) for h in done["messages"]["hours"]] == [
        ("01", 2, 1), ("03", 1, 2)]
    _expire(compacted)
    assert _results(spark, compacted, tmp_path / "out", "e") == before
    lk = Lake(str(compacted))
    m = lk.manifests("messages")[("2026-01-01", "01")]
    assert m["generation"] == 2 and sum("-late" in k or "-50000-" in k for k in m["raw"]) == 1
    # the open hour 04 is empty here: every raw key is folded in (and expired)
    assert lk.raw_keys("messages") == []


def test_parquet_files_have_the_stored_schema_sorted_by_topic(spark, raw_lake, compacted):
    lk = Lake(str(raw_lake))
    tmp = Lake(str(compacted[0]))
    for kind in C.KINDS:
        (doc,) = [m for h, m in tmp.manifests(kind).items() if h == ("2026-01-01", "00")]
        # one file per hour; messages and bodies: one per hash bucket of queue holding rows
        # (queues 0-2 here: test_messages_and_bodies_are_written_once_each_in_the_bucket_of_their_queue)
        assert len(doc["parquet"]) == (len({C.bucket_of(k) for k in doc["parquet"]}) if kind in C.BUCKETED else 1)
        rows = 0
        for f in doc["parquet"]:
            df = spark.read.parquet(tmp.path(f))
            assert [(f.name, f.dataType) for f in df.schema.fields] == [
                (f.name, f.dataType) for f in schemas.STORED[kind].fields]
            order = [r[0] for r in df.select("group" if kind == "members" else "topic").collect()]
            assert order == sorted(order)
            rows += df.count()
        assert rows == lk.read_kind(spark, kind, "2026-01-01 00", "2026-01-01 00").count()
        # Athena's view of the hour: the same files
        link = (Path(tmp.root) / C.symlink_key(kind, "2026-01-01", "00")).read_text().split()
        assert link == [tmp.path(k) for k in doc["parquet"]]


class Crash(Exception):
    pass


def _symlinks_match(root: Path, lk: Lake, kind: str) -> bool:
    """Each compacted hour's symlink.txt names the files of its newest manifest."""
    return all((root / C.symlink_key(kind, *h)).exists()
               and (root / C.symlink_key(kind, *h)).read_text() == C.symlink_text(lk.root, m["parquet"])
               for h, m in lk.manifests(kind).items())


@pytest.mark.parametrize("step", ["written", "committed", "symlink"])
def test_a_crash_anywhere_leaves_each_hour_once(spark, raw_lake, tmp_path, step):
    root = tmp_path / "lake"
    shutil.copytree(raw_lake, root)
    lk = Lake(str(root))
    want = sorted(map(str, lk.read_kind(spark, "messages").drop("dt", "hour").collect()))

    def crash(at):
        if at == step:
            raise Crash(at)
    with pytest.raises(Crash):
        compact_kind(spark, lk, "messages", AFTER, crash=crash, **QUIET)
    got = sorted(map(str, lk.read_kind(spark, "messages").drop("dt", "hour").collect()))
    assert got == want
    out = compact_kind(spark, lk, "messages", AFTER, **QUIET)
    # the hour the crashed run committed is done; the others are committed now, once
    assert [h["hour"] for h in out["hours"]] == (["00", "01", "02"] if step == "written" else ["01", "02"])
    # a crash between the commit and the symlink: the next run writes it from the manifest
    assert out["repaired"] == (1 if step == "committed" else 0)
    assert _symlinks_match(root, lk, "messages")
    assert {h: m["generation"] for h, m in lk.manifests("messages").items()} == {
        ("2026-01-01", f"{h:02d}"): 1 for h in range(3)}
    assert sorted(map(str, lk.read_kind(spark, "messages").drop("dt", "hour").collect())) == want
    # the crashed run's files are garbage once old enough, and never read before
    assert compact_kind(spark, lk, "messages", AFTER + C.KEEP_MS + 10**12, retain_days=10**5,
                        **QUIET)["deleted"] >= (1 if step == "written" else 0)
    assert sorted(map(str, lk.read_kind(spark, "messages").drop("dt", "hour").collect())) == want


def test_a_raw_file_arriving_during_a_run_is_compacted_once(spark, raw_lake, tmp_path):
    """A raw object of a closed hour written after the run listed raw/ (the archiver's late batch)
    is not in that run's Parquet: the run writes what its manifests name, and the next run folds
    the object in. (The run once read the hours again, listing raw/ a second time: the late rows
    went into the Parquet without the manifest naming their object, so readers read them twice, and
    the next generation kept them twice.)"""
    root = tmp_path / "lake"
    shutil.copytree(raw_lake, root)
    msgs, offs = _rows(random.Random(9), 5, T0 + H + 200, 1_000, 70_000, off0=20_000)  # 5 rows in hour 01

    class Arriving(Lake):
        listed = 0

        def raw_keys(self, kind, *a, **k):
            keys = super().raw_keys(kind, *a, **k)
            Arriving.listed += 1
            if Arriving.listed == 1:  # right after the run's own listing
                _write(root, msgs, offs, suffix="-arriving")
            return keys

    lk = Arriving(str(root))
    compact_kind(spark, lk, "messages", AFTER, **QUIET)
    ids = [r["id"] for r in Lake(str(root)).read_kind(spark, "messages").select("id").collect()]
    assert len(ids) == 805 and len(set(ids)) == 805  # the 800 and the 5 late ones, each once
    out = compact_kind(spark, Lake(str(root)), "messages", AFTER, **QUIET)
    assert [(h["hour"], h["generation"], h["late"]) for h in out["hours"]] == [("01", 2, 1)]
    ids = [r["id"] for r in Lake(str(root)).read_kind(spark, "messages").select("id").collect()]
    assert len(ids) == 805 and len(set(ids)) == 805


def test_a_run_that_loses_the_commit_leaves_the_symlink_to_the_winner(spark, raw_lake, tmp_path):
    """Another run commits hour 00's generation 1 first: this run's files are no hour's, so its
    symlink must not name them (it was written before the commit, and stayed so); the hour's
    symlink comes from the winner's manifest. A symlink older than its manifest (a crash between
    the two) is rewritten by the next run."""
    root = tmp_path / "lake"
    shutil.copytree(raw_lake, root)
    winner = ["lake/kind=offsets/run=winner/dt=2026-01-01/hour=00/part-00000-w.snappy.parquet"]
    key = C.manifest_key("offsets", "2026-01-01", "00", 1)

    class Racing(Lake):
        def create_json(self, k, obj):
            if k == key:  # the other run's commit lands first
                super().create_json(k, {**obj, "run": "winner", "parquet": winner})
            return super().create_json(k, obj)

    out = compact_kind(spark, Racing(str(root)), "offsets", AFTER, **QUIET)
    assert out["conflicts"] == ["2026-01-01 00"] and [h["hour"] for h in out["hours"]] == ["01", "02"]
    lk = Lake(str(root))
    assert (root / C.symlink_key("offsets", "2026-01-01", "00")).read_text() == C.symlink_text(lk.root, winner)
    assert _symlinks_match(root, lk, "offsets")
    # hour 01's symlink left behind its manifest (written before it, with other files)
    link = root / C.symlink_key("offsets", "2026-01-01", "01")
    link.write_text("s3://elsewhere/part-0.parquet\n")
    manifest = root / C.manifest_key("offsets", "2026-01-01", "01", 1)
    os.utime(link, ns=(manifest.stat().st_mtime_ns - 10**9,) * 2)
    again = compact_kind(spark, lk, "offsets", AFTER, **QUIET)
    assert again["hours"] == [] and again["repaired"] == 1
    assert _symlinks_match(root, lk, "offsets")


def test_a_run_reads_the_manifests_its_work_needs_only(spark, raw_lake, tmp_path):
    """The manifests a run GETs: the newest of each hour with raw keys to plan, of each hour whose
    garbage its key names cannot tell — not every manifest ever written (each run read them all)."""
    root = tmp_path / "lake"
    shutil.copytree(raw_lake, root)

    class Counting(Lake):
        gets: list[str] = []

        def get_json(self, key):
            Counting.gets.append(key)
            return super().get_json(key)

    lk = Counting(str(root))
    assert [h["hour"] for h in compact_kind(spark, lk, "messages", AFTER, **QUIET)["hours"]] == ["00", "01", "02"]
    assert Counting.gets == []
    _expire(root)  # the lifecycle rule: the folded raw objects are gone
    assert compact_kind(spark, lk, "messages", AFTER, **QUIET)["hours"] == []
    assert Counting.gets == []  # nothing to fold: nothing read
    msgs, offs = _rows(random.Random(5), 5, T0 + H + 100, 1_000, 60_000, off0=30_000)
    _write(root, msgs, offs, suffix="-late")  # a late object for hour 01
    out = compact_kind(spark, lk, "messages", AFTER, **QUIET)
    assert [(h["hour"], h["generation"]) for h in out["hours"]] == [("01", 2)]
    assert Counting.gets == [C.manifest_key("messages", "2026-01-01", "01", 1)]
    _expire(root)
    Counting.gets.clear()
    far = AFTER + C.KEEP_MS + 10**12
    out = compact_kind(spark, lk, "messages", far, retain_days=10**5, **QUIET)
    # hour 01 has two runs' files: its newest manifest tells the superseded ones
    assert Counting.gets == [C.manifest_key("messages", "2026-01-01", "01", 2)]
    assert out["deleted"] >= 2 and not (root / C.manifest_key("messages", "2026-01-01", "01", 1)).exists()
    _expire(root)  # hour 03's raw objects (folded by that run: open at AFTER)
    Counting.gets.clear()
    assert compact_kind(spark, lk, "messages", far, retain_days=10**5, **QUIET)["deleted"] == 0
    assert Counting.gets == []
    ids = [r["id"] for r in Lake(str(root)).read_kind(spark, "messages").select("id").collect()]
    assert len(ids) == 805 and len(set(ids)) == 805


def test_hours_past_retention_leave_the_lake_whole(spark, raw_lake, tmp_path):
    """The day's compacted hours go when raw/'s retention ends for it (RETAIN_DAYS after the day's
    start; its bodies/ are kept a day longer): manifests, Parquet and symlinks of every generation
    — the one folded days later too — and a raw object of the day arriving then is not compacted.
    (Nothing expired lake/: its rows outlived raw/ and the bodies their claims name.)"""
    root = tmp_path / "lake"
    shutil.copytree(raw_lake, root)
    lk = Lake(str(root))
    compact_kind(spark, lk, "messages", AFTER, **QUIET)
    msgs, offs = _rows(random.Random(5), 5, T0 + H + 100, 1_000, 60_000, off0=30_000)
    _write(root, msgs, offs, suffix="-late")
    later = compact_kind(spark, lk, "messages", AFTER + 3 * C.DAY_MS, **QUIET)  # hour 01 gen 2, hour 03
    assert [(h["hour"], h["generation"]) for h in later["hours"]] == [("01", 2), ("03", 1)]
    _expire(root)
    assert lk.read_kind(spark, "messages").count() == 805
    end = T0 + C.RETAIN_DAYS * C.DAY_MS
    assert compact_kind(spark, lk, "messages", end - 1, **QUIET)["retired"] == 0
    assert len(lk.manifests("messages")) == 4
    msgs, offs = _rows(random.Random(6), 5, T0 + 2 * H + 100, 1_000, 61_000, off0=40_000)
    _write(root, msgs, offs, suffix="-last")  # a raw object for hour 02, past retention
    out = compact_kind(spark, lk, "messages", end, **QUIET)
    assert out["hours"] == [] and out["retired"] > 0
    assert lk.manifests("messages") == {}
    assert [k for k in lk.list_keys(C.LAKE) if (C.key_hour(k) or ("",))[0] == "messages"] == []
    assert not (root / C.SYMLINKS / "kind=messages").exists() or lk.list_keys(f"{C.SYMLINKS}/kind=messages") == []
    assert lk.read_kind(spark, "messages").count() == 5  # the raw object alone (raw/'s own lifecycle)


def _declared(template, logical_id: str) -> tuple[dict, list[tuple[str, str]]]:
    table = template["Resources"][logical_id]["Properties"]["TableInput"]
    return table, [(c["Name"], c["Type"]) for c in table["StorageDescriptor"]["Columns"]]


def _of_files(df) -> list[tuple[str, str]]:
    return [(f.name, f.dataType.simpleString()) for f in df.schema.fields]


def test_the_catalog_declares_the_columns_of_the_files(spark, compacted, template, tmp_path):
    """template.yaml's Glue tables: each kind's columns are those of the Parquet files the
    compaction writes, each report's those of the files its job writes; partitions projected over
    the layout the files are in."""
    from lakeq_lake import transforms as T
    from lakeq_lake.jobs import PLANS_PREFIX

    lk = Lake(str(compacted[0]))  # (its backlog report below goes under reports/, which no other test reads)
    for kind in C.KINDS:
        table, columns = _declared(template, f"Lake{kind.capitalize()}Table")
        doc = lk.manifests(kind)[("2026-01-01", "00")]
        assert columns == _of_files(spark.read.parquet(*[lk.path(k) for k in doc["parquet"]])), kind
        assert table["Name"] == kind
        assert [(p["Name"], p["Type"]) for p in table["PartitionKeys"]] == [("dt", "string"), ("hour", "int")]
        params = table["Parameters"]
        assert params["projection.hour.digits"] == "2" and params["projection.dt.format"] == "yyyy-MM-dd"
        # the location template names the hour's symlink folder (Athena reads symlink.txt there)
        loc = params["storage.location.template"]["Fn::Sub"]
        assert loc.replace("s3://${LakeBucket}/", "").replace("${!dt}", "2026-01-01").replace("${!hour}", "00") \
            == C.symlink_key(kind, "2026-01-01", "00").rsplit("/", 1)[0] + "/"
        assert table["StorageDescriptor"]["InputFormat"].endswith("SymlinkTextInputFormat")
    # the reports: the backlog job's history, the plan job's weights (T.queue_weights, as it writes them)
    out = run_backlog(spark, lk, as_of_ms=T0 + 4 * H, **QUIET)
    hist = spark.read.parquet(lk.path(f"reports/backlog/history/computed_at={out['computed_at']}"))
    table, columns = _declared(template, "LakeBacklogTable")
    assert columns == _of_files(hist)
    assert table["Parameters"]["storage.location.template"]["Fn::Sub"].endswith(
        "/reports/backlog/history/computed_at=${!computed_at}/")
    msgs, offs = lk.read_kind(spark, "messages"), lk.read_kind(spark, "offsets")
    latest = T.latest(T.backlog(msgs, offs, T0 + 4 * H, H))
    weights = tmp_path / "weights"
    T.queue_weights(msgs, latest, T0 + 4 * H, H, H).coalesce(1).write.parquet(str(weights))
    table, columns = _declared(template, "LakePlansTable")
    assert columns == _of_files(spark.read.parquet(str(weights)))
    assert table["Parameters"]["storage.location.template"]["Fn::Sub"].endswith(
        f"/{PLANS_PREFIX}/history/computed_at=${{!computed_at}}/")


def test_a_run_writes_the_oldest_hours_first_and_leaves_the_rest(spark, raw_lake, tmp_path):
    root = tmp_path / "lake"
    shutil.copytree(raw_lake, root)
    lk = Lake(str(root))
    first = compact_kind(spark, lk, "offsets", AFTER, max_hours=2, **QUIET)
    assert [h["hour"] for h in first["hours"]] == ["00", "01"] and first["left"] == 1
    second = compact_kind(spark, lk, "offsets", AFTER, max_hours=2, **QUIET)
    assert [h["hour"] for h in second["hours"]] == ["02"] and second["left"] == 0


def _hash_bucket(spark, queues: list[int], buckets: int) -> dict[int, int]:
    """Spark's hash partitioning of ``queue`` (a long) into ``buckets``: queue → bucket."""
    from pyspark.sql import functions as F

    df = spark.createDataFrame([(q,) for q in queues], "queue long")
    return {r[0]: r[1] for r in df.select("queue", F.expr(f"pmod(hash(queue), {buckets})")).collect()}


def test_messages_and_bodies_are_written_once_each_in_the_bucket_of_their_queue(spark, tmp_path):
    """A compacted hour of messages (and of bodies) holds each message once, even when the raw
    hour holds it twice (a stream batch redelivered with other boundaries: another object, the same
    rows), as :data:`lakeq.lake.compaction.BUCKETS` files, ``bucket=b/`` holding the queues
    Spark's hash partitioning puts in partition ``b`` (the replay job's manifest part), each file
    sorted by ``(topic, inc, queue, offset)``; the manifest says ``buckets``. (Before: one file per
    hour, sorted by topic, duplicates kept — each reader dropped them.)"""
    root = tmp_path / "lake"
    msgs, offs = _rows(random.Random(5), 400, T0, 30_000, 1000)  # hours 00-03 (03 open)
    msgs = [dict(m, queue=m["queue"] * 5 + i % 2) for i, m in enumerate(msgs)]  # queues 0-11: several buckets
    _write(root, msgs, offs)
    _write(root, msgs[100:160], [], suffix="-again")  # 60 rows of hour 00 archived twice
    lk = Lake(str(root))
    raw = {k: lk.read_kind(spark, k, stored=True).drop("dt", "hour", "seq", "plain").collect()
           for k in ("messages", "bodies")}
    assert len(raw["messages"]) == 460 and lk.raw_keys("messages", "2026-01-01 03", "2026-01-01 03")
    run_compact(spark, lk, AFTER, kinds=("messages", "bodies"), **QUIET)
    part_of = _hash_bucket(spark, list(range(12)), C.BUCKETS)
    for kind in ("messages", "bodies"):
        once = sorted({str(r) for r in raw[kind]})
        assert len(once) == 400
        got = lk.read_kind(spark, kind, stored=True).drop("dt", "hour", "seq", "plain").collect()
        assert sorted(map(str, got)) == once  # each message once (their copies were the same row)
        for h, doc in lk.manifests(kind).items():
            assert doc["buckets"] == C.BUCKETS
            seen = set()
            for f in doc["parquet"]:
                b = C.bucket_of(f)
                assert b is not None and b not in seen  # one file per bucket of the hour
                seen.add(b)
                rows = [(r["topic"], r["inc"], r["queue"], r["offset"])
                        for r in spark.read.parquet(lk.path(f)).select("topic", "inc", "queue", "offset").collect()]
                assert rows == sorted(rows) and len(set(rows)) == len(rows)
                assert {part_of[q] for _, _, q, _ in rows} == {b}
    # the replay reads whole compacted hours bucket by bucket: the buckets in order, no exchange
    n, df = lk.read_buckets(spark, "bodies", "2026-01-01 00", "2026-01-01 02")
    assert n == C.BUCKETS and df.rdd.getNumPartitions() == n
    assert "Exchange" not in df._jdf.queryExecution().executedPlan().toString()
    per = df.select("queue").rdd.glom().collect()
    assert all(part_of[r["queue"]] == b for b, rows in enumerate(per) for r in rows)
    # the open hour 03 (raw) in the range: not whole compacted hours
    assert lk.read_buckets(spark, "bodies", "2026-01-01 00", "2026-01-01 03") is None


def test_the_selection_over_compacted_hours_has_no_shuffle_and_selects_as_the_raw_lake(spark, tmp_path):
    """The replay job over whole compacted hours: the one-sided selection's plan has no exchange
    (the buckets read in order, each sorted), and the manifest is the raw lake's, part by part —
    also after a late raw object of a compacted hour repeats rows the hour's Parquet holds (read
    beside the Parquet and deduplicated with it: each message once), and after the next run folds
    it in."""
    raw_root, pq_root = tmp_path / "raw", tmp_path / "pq"
    msgs, offs = _rows(random.Random(11), 600, T0, 16_000, 1000)  # hours 00-02
    msgs = [dict(m, queue=m["queue"] * 7 + i % 3) for i, m in enumerate(msgs)]
    for root in (raw_root, pq_root):
        _write(root, msgs, offs)
    run_compact(spark, Lake(str(pq_root)), AFTER, kinds=("messages", "bodies"), **QUIET)
    lo, hi = T0, T0 + 3 * H
    flt = Filter.of({"conditions": [{"field": "k", "anything_but": ["A"]}]})

    def manifest(root: Path, name: str) -> tuple[str, list]:
        s = R.run_replay(spark, Lake(str(root)), name, "t", lo, hi, flt, out=Lake(str(tmp_path / "out")), **QUIET)
        parts = [manifest_rows(p["key"], (tmp_path / "out" / p["key"]).read_bytes()) for p in s["parts"]]
        return s["plan"], [[json.dumps(r, sort_keys=True) for r in p] for p in parts]

    n, bodies = R.read_slice_buckets(spark, Lake(str(pq_root)), "bodies", lo, hi)
    df = R.select_one_sided(bodies, "t", lo, hi, flt, parts=n, matcher=False, bucketed=True)
    plan = df._jdf.queryExecution().executedPlan().toString()
    assert "Exchange" not in plan and "Sort " in plan
    assert sum(map(len, manifest(raw_root, "raw")[1])) > 100
    spark.conf.set("spark.sql.shuffle.partitions", str(C.BUCKETS))  # the raw lake's parts: the buckets' number
    try:
        want = manifest(raw_root, "raw8")
        assert manifest(pq_root, "pq") == want
        # a late object of compacted hour 01 repeating 40 of its rows, and 5 new ones
        late = [m for m in msgs if T0 + H <= m["produced_at"] < T0 + 2 * H][:40]
        new = [dict(m, offset=m["offset"] + 100_000, id=m["id"] + "n", seq=m["seq"] + "1") for m in late[:5]]
        for root in (raw_root, pq_root):
            _write(root, late + new, [], suffix="-late")
        assert R.read_slice_buckets(spark, Lake(str(pq_root)), "bodies", lo, hi) is None
        want = manifest(raw_root, "raw-late")
        rows = [r for p in want[1] for r in p]
        ids = [json.loads(r)["id"] for r in rows]
        assert len(set(ids)) == len(ids)  # the raw lake's job drops the copies too
        assert manifest(pq_root, "pq-late") == want
        run_compact(spark, Lake(str(pq_root)), AFTER, kinds=("messages", "bodies"), **QUIET)
        assert R.read_slice_buckets(spark, Lake(str(pq_root)), "bodies", lo, hi) is not None
        assert manifest(pq_root, "pq-folded") == want
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", "2")


def test_the_driver_lists_a_manifests_files_itself_only_up_to_a_bound():
    """The files a manifest names are listed by the driver (no Spark listing job) for a day or a
    week of bucketed hours, not for any count: the backlog, ledger and rebalance jobs read every
    compacted hour of messages (no bounds) and a replay may span 400 days — 400 x 24 x 8 = 76,800
    bucketed files, which the driver would list one by one (one S3 request each, in series) on
    every hourly run. Above :data:`lakeq_lake.store.LISTED_HERE_MAX` Spark's listing job (its
    tasks in parallel) lists them, as it did before. No JVM: the session's conf only."""
    from lakeq_lake import store

    key = "spark.sql.sources.parallelPartitionDiscovery.threshold"

    class Conf(dict):
        def get(self, k):
            return self[k]

        def set(self, k, v):
            self[k] = v

    class Session:
        conf = Conf({key: "32"})

    seen = []
    for paths in (24 * C.BUCKETS, 400 * 24 * C.BUCKETS):
        with store._listed_here(Session, paths):
            seen.append(int(Session.conf[key]))
    assert seen[0] > 24 * C.BUCKETS  # a day's buckets: listed by the driver
    assert seen[1] < 400 * 24 * C.BUCKETS  # 400 days: by Spark's job
    assert Session.conf[key] == "32"


def test_mixed_layouts_bucket_counts_late_rows_and_a_crash_leave_each_message_once(spark, tmp_path, monkeypatch):
    """One day's hours in every layout the lake may hold at once: hour 00 compacted as before (one
    file, duplicates kept), hours 01-02 bucketed by 8; then a late object for 00 and 01 each
    (repeating rows of the hour and adding new ones), a run with 4 buckets crashing after its
    write (its files never read), and the run again: 00 and 01 bucketed by 4 beside 02 by 8. At
    every step the replay's selection, the rows the backlog reads and the ledger's messages hold
    each message once, and the same as the raw lake's."""
    from lakeq_lake.transforms import clean_messages

    raw_root, pq_root, out = tmp_path / "raw", tmp_path / "pq", tmp_path / "out"
    msgs, offs = _rows(random.Random(23), 300, T0, 30_000, 1000)  # hours 00-02 (…and 03 open)
    msgs = [dict(m, queue=m["queue"] * 3 + i % 3) for i, m in enumerate(msgs)]
    for root in (raw_root, pq_root):
        _write(root, msgs, offs)
    pq = Lake(str(pq_root))
    kinds = ("messages", "bodies")
    run_compact(spark, pq, T0 + H + C.GRACE_MS, kinds=kinds, buckets=0, **QUIET)  # hour 00, as before
    run_compact(spark, pq, AFTER, kinds=kinds, **QUIET)  # hours 01, 02 bucketed
    assert {h: m.get("buckets") for h, m in pq.manifests("bodies").items()} == {
        ("2026-01-01", "00"): None, ("2026-01-01", "01"): 8, ("2026-01-01", "02"): 8}
    lo, hi = T0, T0 + 3 * H
    flt = Filter.of({})
    by_buckets = []  # what the job's bucketed read answered, per run (None: the general way)
    read_slice_buckets = R.read_slice_buckets

    def spy(*a, **k):
        got = read_slice_buckets(*a, **k)
        by_buckets.append(None if got is None else got[0])
        return got
    monkeypatch.setattr(R, "read_slice_buckets", spy)

    def selected(root: Path, name: str, lo: int = lo, hi: int = hi) -> list[str]:
        by_buckets.clear()
        s = R.run_replay(spark, Lake(str(root)), name, "t", lo, hi, flt, out=Lake(str(out)), **QUIET)
        return [json.dumps(r, sort_keys=True) for p in s["parts"]
                for r in manifest_rows(p["key"], (out / p["key"]).read_bytes())]

    def messages(root: Path) -> list[str]:
        rows = clean_messages(Lake(str(root)).read_kind(spark, "messages")).drop("dt", "hour", "seq").collect()
        return sorted(map(str, rows))

    def check(step: str) -> None:
        want = selected(raw_root, f"raw-{step}")
        ids = [json.loads(r)["id"] for r in want]
        assert len(ids) == len(set(ids)) > 50
        assert sorted(selected(pq_root, f"pq-{step}")) == sorted(want), step
        assert messages(pq_root) == messages(raw_root), step

    check("mixed")
    assert by_buckets == [None]  # hour 00 as before: the general way
    # hours 01-02 alone: read bucket by bucket, and the same selection
    want = sorted(selected(raw_root, "raw-01", T0 + H))
    assert sorted(selected(pq_root, "pq-01", T0 + H)) == want and by_buckets == [8]
    # late objects for 00 and 01: copies of some of their rows and new messages
    late = []
    for h in (0, 1):
        hour = [m for m in msgs if T0 + h * H <= m["produced_at"] < T0 + (h + 1) * H]
        late += hour[:15] + [dict(m, offset=m["offset"] + 100_000, id=m["id"] + "n", seq=m["seq"] + "1")
                             for m in hour[:3]]
    for root in (raw_root, pq_root):
        _write(root, late, [], suffix="-late")
    assert R.read_slice_buckets(spark, pq, "bodies", lo, hi) is None
    check("late")

    class Crash(Exception):
        pass

    def crash(at):
        if at == "written":
            raise Crash(at)
    with pytest.raises(Crash):
        compact_kind(spark, pq, "bodies", AFTER, crash=crash, buckets=4, **QUIET)
    check("crashed")
    run_compact(spark, pq, AFTER, kinds=kinds, buckets=4, **QUIET)
    assert {h: (m["generation"], m.get("buckets")) for h, m in pq.manifests("bodies").items()} == {
        ("2026-01-01", "00"): (2, 4), ("2026-01-01", "01"): (2, 4), ("2026-01-01", "02"): (1, 8)}
    assert R.read_slice_buckets(spark, pq, "bodies", lo, hi) is None  # two bucket counts
    assert R.read_slice_buckets(spark, pq, "bodies", T0, T0 + 2 * H)[0] == 4
    check("refolded")


def test_compacted_bodies_carry_the_plain_test_and_a_replay_trusts_only_its_own_version(spark, tmp_path):
    """The compaction stores each body row's `plain` test (lakeq_lake.native_filter.stored_plain:
    +version plain, -version not) so that a replay does not run the regex per row: the column is
    the regex's answer on every compacted row; a raw row's is null even when the raw object holds
    a ``plain`` key (only the compaction writes it); a replay selects the same manifest reading it
    as evaluating the regex, over compacted hours (bucketed) and with the open raw hour; and
    :func:`plain_of` takes only this version's answers, evaluating the regex on the others."""
    from pyspark.sql import functions as F

    from lakeq_lake import native_filter as NF

    root = tmp_path / "lake"
    msgs, offs = _rows(random.Random(8), 300, T0, 48_000, 1000)  # hours 00-03 (03 open)
    odd = [{"k": {"n": 1}}, {"k": 10**19}, {"k": "A", "s": [1]}]  # not plain: the matcher's
    msgs = [dict(m, properties=odd[i % 3]) if i % 4 == 0 else m for i, m in enumerate(msgs)]
    _write(root, [m for m in msgs if m["produced_at"] < T0 + 3 * H], offs)
    # the open hour's raw bodies claim plain = this version on every row, the odd ones included
    late = [m for m in msgs if m["produced_at"] >= T0 + 3 * H]
    _write(root, late, [])
    forged = [dict(lake.body_row(m, m["body"]), plain=NF.PLAIN_VERSION) for m in late]
    for key, blob in lake.objects("bodies", SEG + "-forged", forged).items():
        (root / key).write_bytes(blob)
    lk = Lake(str(root))
    run_compact(spark, lk, AFTER, kinds=("messages", "bodies"), **QUIET)
    rows = lk.read_kind(spark, "bodies", stored=True).select(
        "hour", "plain", NF.plain(F.col("properties")).alias("regex")).collect()
    closed = [r for r in rows if r["hour"] < 3]
    assert {r["regex"] for r in closed} == {True, False}
    assert all(r["plain"] == (NF.PLAIN_VERSION if r["regex"] else -NF.PLAIN_VERSION) for r in closed)
    assert {r["plain"] for r in rows if r["hour"] == 3} == {None}
    flt = Filter.of({"conditions": [{"field": "k", "exists": True}]})
    out = Lake(str(tmp_path / "out"))

    def manifest(name, hi, stored_plain):
        s = R.run_replay(spark, lk, name, "t", T0, hi, flt, out=out, stored_plain=stored_plain, **QUIET)
        return s["plan"], [json.dumps(r, sort_keys=True) for p in s["parts"]
                           for r in manifest_rows(p["key"], (tmp_path / "out" / p["key"]).read_bytes())]

    for hi in (T0 + 3 * H, T0 + 4 * H):  # whole compacted hours (buckets), then with the open raw hour
        got, want = manifest(f"stored-{hi}", hi, True), manifest(f"regex-{hi}", hi, False)
        assert got == want and got[0] == "one side, matcher" and len(got[1]) > 20
    v = NF.PLAIN_VERSION
    cases = [(v, '{"k":{"n":1}}'), (-v, '{"k":1}'), (v + 1, '{"k":{"n":1}}'), (-v - 1, '{"k":1}'),
             (None, '{"k":{"n":1}}'), (None, '{"k":1}')]
    df = spark.createDataFrame(cases, "stored int, props string")
    got = [r[0] for r in df.select(NF.plain_of(F.col("stored"), F.col("props"))).collect()]
    assert got == [True, False, False, True, False, True]  # this version's answer as stored; others: the regex


def test_a_replay_over_compacted_bodies_reads_their_plain_column(spark, tmp_path, monkeypatch):
    """The selection takes `plain` from the compacted bodies' column, not from the regex: bodies
    compacted with a column that says "not plain" on every row (a compaction made to lie, by hand)
    send a replay over those whole hours to the matcher's pass — the same filter over the same
    rows with the regex (``stored_plain=False``) selects in one pass. (Until 2026-12-08 the
    replay's read of the slice dropped the column: both selected in one pass.)"""
    from pyspark.sql import functions as F

    from lakeq_lake import compact as CP
    from lakeq_lake import native_filter as NF

    root = tmp_path / "lake"
    msgs, offs = _rows(random.Random(9), 200, T0, 48_000, 1000)
    _write(root, [m for m in msgs if m["produced_at"] < T0 + 3 * H], offs)
    monkeypatch.setattr(CP.NF, "stored_plain", lambda props: F.lit(-NF.PLAIN_VERSION).cast("int"))
    lk = Lake(str(root))
    run_compact(spark, lk, AFTER, kinds=("messages", "bodies"), **QUIET)
    assert {r["plain"] for r in lk.read_kind(spark, "bodies", stored=True).select("plain").collect()} == {
        -NF.PLAIN_VERSION}
    assert R.read_slice_buckets(spark, lk, "bodies", T0, T0 + 3 * H) is not None  # whole bucketed hours
    flt = Filter.of({"conditions": [{"field": "k", "exists": True}]})
    out = Lake(str(tmp_path / "out"))
    plans = {sp: R.run_replay(spark, lk, f"p-{sp}", "t", T0, T0 + 3 * H, flt, out=out, stored_plain=sp,
                              **QUIET)["plan"] for sp in (True, False)}
    assert plans == {True: "one side, matcher", False: "one side"}
