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
    got = C.garbage("messages", written, [m1, m2], [live_pq], now)
    assert got == sorted([dead_pq, m1, "lake/kind=messages/run=1/_SUCCESS"])
    assert crashed in C.garbage("messages", written, [m1, m2], [live_pq], now + 1)
    assert C.garbage("bodies", written, [m1, m2], [], now) == []  # another kind's files are not its business


def test_parquet_keys_and_symlinks():
    k = "lake/kind=offsets/run=5-ab/dt=2026-01-01/hour=07/part-00000-x.snappy.parquet"
    assert C.parquet_hour(k) == ("offsets", "5-ab", "2026-01-01", "07")
    assert C.parquet_hour("lake/kind=offsets/run=5-ab/dt=2026-01-01/hour=07/.part-0.parquet.crc") is None
    assert C.symlink_text("s3://b", ["lake/b", "lake/a"]) == "s3://b/lake/a\ns3://b/lake/b\n"
