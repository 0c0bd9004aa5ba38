"""The compaction's pure decisions (lakeq.lake.compaction): which hours are closed, which raw keys
a run folds in and with which generation, what a reader reads, what is garbage."""
from __future__ import annotations

from lakeq.lake import compaction as C

T0 = 1_767_225_600_000  # 2026-01-01T00:00Z
H = C.HOUR_MS


def raw(kind, hour, name):
    return f"raw/kind={kind}/dt=2026-01-01/hour={hour:02d}/{name}.jsonl.gz"


def test_an_hour_is_closed_a_grace_after_its_end():
    assert not C.is_closed("2026-01-01", "00", T0 + H)
    assert not C.is_closed("2026-01-01", "00", T0 + H + C.GRACE_MS - 1)
    assert C.is_closed("2026-01-01", "00", T0 + H + C.GRACE_MS)
    assert C.is_closed("2026-01-01", "00", T0 + H, grace_ms=0)


def test_plan_compacts_closed_hours_and_skips_the_open_one():
    keys = [raw("messages", 0, "a"), raw("messages", 0, "b"), raw("messages", 1, "c"),
            raw("offsets", 0, "x"), "raw/kind=messages/dt=2026-01-01/hour=00/_SUCCESS"]
    work = C.plan("messages", keys, {}, T0 + H + C.GRACE_MS)
    assert [(w.day, w.hour, w.gen, w.late, w.previous_parquet) for w in work] == [
        ("2026-01-01", "00", 1, (raw("messages", 0, "a"), raw("messages", 0, "b")), [])]
    assert C.plan("messages", keys, {}, T0 + H + C.GRACE_MS - 1) == []


def test_plan_folds_late_raw_keys_into_the_next_generation():
    prev = C.manifest_doc("messages", "2026-01-01", "00", 3, "r", ["lake/p1.parquet"], [raw("messages", 0, "a")], 1)
    keys = [raw("messages", 0, "a"), raw("messages", 0, "late")]
    (w,) = C.plan("messages", keys, {("2026-01-01", "00"): prev}, T0 + 2 * H)
    assert (w.gen, w.late, w.previous_parquet) == (4, (raw("messages", 0, "late"),), ["lake/p1.parquet"])
    assert w.raw == [raw("messages", 0, "a"), raw("messages", 0, "late")]
    # nothing late: nothing to do
    assert C.plan("messages", keys[:1], {("2026-01-01", "00"): prev}, T0 + 2 * H) == []


def test_the_newest_generation_is_the_committed_one():
    keys = [C.manifest_key("bodies", "2026-01-01", "00", g) for g in (1, 2, 10)]
    keys += [C.manifest_key("messages", "2026-01-01", "00", 11), "lake/_manifests/kind=bodies/x.json"]
    assert C.newest_manifests(keys, "bodies") == {("2026-01-01", "00"): keys[2]}  # 10 > 2 (not text order)


def test_readers_read_committed_parquet_and_unfolded_raw():
    m0 = C.manifest_doc("messages", "2026-01-01", "00", 1, "r", ["lake/p0.parquet"], [raw("messages", 0, "a")], 1)
    keys = [raw("messages", 0, "a"), raw("messages", 0, "late"), raw("messages", 1, "open")]
    parquet, rest = C.unread(keys, {("2026-01-01", "00"): m0})
    assert parquet == ["lake/p0.parquet"]
    assert rest == [raw("messages", 0, "late"), raw("messages", 1, "open")]
    # an expired raw key (gone from the listing) changes nothing
    assert C.unread(keys[1:], {("2026-01-01", "00"): m0}) == (parquet, rest)


def test_garbage_is_unreferenced_and_old_enough():
    now = T0 + 10 * C.KEEP_MS
    old, young = now - C.KEEP_MS, now - C.KEEP_MS + 1
    live_pq = "lake/kind=messages/run=2/dt=2026-01-01/hour=00/part-0.parquet"
    dead_pq = "lake/kind=messages/run=1/dt=2026-01-01/hour=00/part-0.parquet"
    crashed = "lake/kind=messages/run=3/dt=2026-01-01/hour=01/part-0.parquet"
    m1, m2 = (C.manifest_key("messages", "2026-01-01", "00", g) for g in (1, 2))
    written = {live_pq: old, dead_pq: old, crashed: young, m1: old, m2: old,
               "lake/kind=messages/run=1/_SUCCESS": old}
    doc = C.manifest_doc("messages", "2026-01-01", "00", 2, "2", [live_pq], [], 1)
    # hour 00 has files of two runs: its newest manifest decides; hour 01 has no manifest at all
    assert C.doubtful_hours("messages", written, now) == {("2026-01-01", "00")}
    got = C.garbage("messages", written, now, known={("2026-01-01", "00"): doc})
    assert got == sorted([dead_pq, m1, "lake/kind=messages/run=1/_SUCCESS"])
    assert crashed in C.garbage("messages", written, now + 1, known={("2026-01-01", "00"): doc})
    # without the doubtful hour's manifest (or with a stale one) nothing of it is deleted but
    # what the key names tell: the superseded manifest
    for known in ({}, {("2026-01-01", "00"): {**doc, "generation": 1, "parquet": [dead_pq]}}):
        assert C.garbage("messages", written, now, known=known) == sorted([m1, "lake/kind=messages/run=1/_SUCCESS"])
    assert C.garbage("bodies", written, now, known={("2026-01-01", "00"): doc}) == []  # not its business
    # one run's files: live, no manifest needed
    assert C.doubtful_hours("messages", {live_pq: old, m2: old}, now) == set()
    assert C.garbage("messages", {live_pq: old, m2: old}, now) == []


def test_hours_past_retention_are_retired_whole_and_not_compacted_again():
    """A day is past retention RETAIN_DAYS after its start (raw/'s 400 days; bodies/ keeps 401, so
    its bodies are still there): every generation's files, manifests and symlink go — a
    generation folded late too, since it is found by the hour in its key, not its age."""
    assert C.RETAIN_DAYS == 400
    now = T0 + C.RETAIN_DAYS * C.DAY_MS  # 2026-01-01 is past retention, 2026-01-02 is not
    keys = [C.manifest_key("messages", "2026-01-01", "23", g) for g in (1, 2)] + [
        C.symlink_key("messages", "2026-01-01", "23"),
        "lake/kind=messages/run=1/dt=2026-01-01/hour=23/part-0.parquet",
        "lake/kind=messages/run=9/dt=2026-01-01/hour=23/part-0.parquet",  # the late generation's
        "lake/kind=messages/run=9/dt=2026-01-02/hour=00/part-0.parquet",
        C.manifest_key("messages", "2026-01-02", "00", 1), C.symlink_key("messages", "2026-01-02", "00"),
        C.manifest_key("bodies", "2026-01-01", "23", 1)]
    links, files, manifests = C.retired("messages", keys, now)
    assert links == [keys[2]] and files == keys[3:5] and manifests == keys[:2]
    assert C.retired("messages", keys, now - 1) == ([], [], [])
    late = [raw("messages", 23, "late"), "raw/kind=messages/dt=2026-01-02/hour=00/x.jsonl.gz"]
    assert [(w.day, w.hour) for w in C.plan("messages", late, {}, now)] == [("2026-01-02", "00")]
    assert C.plan_hours("messages", late, now) == {("2026-01-02", "00")}


def test_a_symlink_older_than_its_newest_manifest_is_stale():
    m1, m2 = (C.manifest_key("offsets", "2026-01-01", "00", g) for g in (1, 2))
    m3 = C.manifest_key("offsets", "2026-01-01", "01", 1)
    link0, link1 = C.symlink_key("offsets", "2026-01-01", "00"), C.symlink_key("offsets", "2026-01-01", "01")
    manifests = {m1: 10, m2: 20, m3: 30}
    assert C.stale_symlinks("offsets", manifests, {link0: 20, link1: 31}) == {}
    assert C.stale_symlinks("offsets", manifests, {link0: 19, link1: 31}) == {("2026-01-01", "00"): m2}
    assert C.stale_symlinks("offsets", manifests, {link0: 20}) == {("2026-01-01", "01"): m3}


def test_raw_keys_named_long_ago_and_still_there_are_tagged_again():
    now = T0 + 10 * C.DAY_MS
    a, b, c = raw("messages", 0, "a"), raw("messages", 0, "b"), raw("messages", 1, "c")
    m0 = C.manifest_doc("messages", "2026-01-01", "00", 1, "r", [], [a], now - C.KEEP_MS - C.DAY_MS - 1)
    m1 = C.manifest_doc("messages", "2026-01-01", "01", 1, "r", [], [c], now - C.KEEP_MS - C.DAY_MS)
    manifests = {("2026-01-01", "00"): m0, ("2026-01-01", "01"): m1}
    assert C.untagged([a, b, c], manifests, now) == [a]  # b is late (not named), c's tag may still act


def test_parquet_keys_and_symlinks():
    k = "lake/kind=offsets/run=5-ab/dt=2026-01-01/hour=07/part-00000-x.snappy.parquet"
    assert C.parquet_hour(k) == ("offsets", "5-ab", "2026-01-01", "07")
    assert C.parquet_hour("lake/kind=offsets/run=5-ab/dt=2026-01-01/hour=07/.part-0.parquet.crc") is None
    assert C.symlink_text("s3://b", ["lake/b", "lake/a"]) == "s3://b/lake/a\ns3://b/lake/b\n"


def test_bucketed_hours_are_read_bucket_by_bucket_only_when_every_manifest_is_bucketed_alike():
    def f(hour, b):
        return f"lake/kind=bodies/run=r/dt=2026-01-01/hour={hour:02d}/bucket={b}/part-0000{b}-x.c000.snappy.parquet"
    k = f(7, 3)
    assert C.parquet_hour(k) == ("bodies", "r", "2026-01-01", "07") and C.bucket_of(k) == 3
    assert C.key_hour(k) == ("bodies", ("2026-01-01", "07"))
    m0 = C.manifest_doc("bodies", "2026-01-01", "00", 1, "r", [f(0, 0), f(0, 2)], [], 1, buckets=4)
    m1 = C.manifest_doc("bodies", "2026-01-01", "01", 1, "r", [f(1, 2)], [], 1, buckets=4)
    assert C.bucketed_files({("2026-01-01", "00"): m0, ("2026-01-01", "01"): m1}) == (
        4, {0: [f(0, 0)], 1: [], 2: [f(0, 2), f(1, 2)], 3: []})
    flat = C.manifest_doc("bodies", "2026-01-01", "02", 1, "r", ["lake/kind=bodies/run=r/dt=2026-01-01/hour=02/"
                                                                 "part-0.parquet"], [], 1)
    assert "buckets" not in flat
    assert C.bucketed_files({("2026-01-01", "00"): m0, ("2026-01-01", "02"): flat}) is None  # the layout before
    m8 = C.manifest_doc("bodies", "2026-01-01", "01", 1, "r", [f(1, 2)], [], 1, buckets=8)
    assert C.bucketed_files({("2026-01-01", "00"): m0, ("2026-01-01", "01"): m8}) is None  # two bucket counts
    assert C.bucketed_files({}) is None


def test_a_superseded_generation_outlives_its_successors_commit_by_the_keep_time():
    """An hour compacted again long after its first generation (a raw batch arriving late, days
    after): generation 1's Parquet and manifest are older than KEEP_MS the moment generation 2 is
    committed, but a reader that listed the manifests just before that commit is reading them. They
    are garbage only KEEP_MS after the manifest that superseded them, not after their own write."""
    first = T0
    second = T0 + 3 * C.KEEP_MS  # the late batch folded in
    pq1 = "lake/kind=bodies/run=1/dt=2026-01-01/hour=00/bucket=3/part-00003-a.c000.snappy.parquet"
    pq2 = "lake/kind=bodies/run=2/dt=2026-01-01/hour=00/bucket=3/part-00003-b.c000.snappy.parquet"
    m1, m2 = (C.manifest_key("bodies", "2026-01-01", "00", g) for g in (1, 2))
    written = {pq1: first, m1: first, pq2: second, m2: second}
    doc = C.manifest_doc("bodies", "2026-01-01", "00", 2, "2", [pq2], [], second, buckets=8)
    known = {("2026-01-01", "00"): doc}
    for now in (second, second + C.KEEP_MS - 1):  # the run that committed generation 2, and after it
        assert C.garbage("bodies", written, now, known=known) == []
    assert C.garbage("bodies", written, second + C.KEEP_MS, known=known) == sorted([pq1, m1])
