"""The replay job's selection (issue 18.1) on a lake folder written by the archiver's own encoding:
exactly the messages of the range and topic that the filter keeps — the filter judged by the pure
matcher (lakeq.replay.rules.matching) as the reference — once each (redelivered batches in the
lake), in (queue, inc, offset) order, with their bodies; and the manifest the job writes. Topic
``t`` of the generated lake is deleted and made again half-way (its next incarnation restarts every
queue at offset 0, rows ``inc`` 1), and its first incarnation's rows carry no ``inc`` (rows archived
before the lake had it), so every test here sees two messages at each early ``(queue, offset)``."""
from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

import pytest

from lakeq.lake import archive as lake
from lakeq.replay.rules import Filter, matching
from lakeq_lake import replay as R
from lakeq_lake.store import Lake
from tests.manifest import manifest_rows

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
    # the adversarial mix of bench/replay.py: nothing a substring pre-filter can narrow
    {"conditions": [{"field": "k", "anything_but": [1.0, "A", True]}]},
    {"conditions": [{"field": "k", "range": [0.5, 7]}, {"field": "s", "exists": True}]},
    {"conditions": [{"field": "s", "prefix": ""}, {"field": "k", "anything_but": ["7"]}]},
    {"conditions": [{"field": "k", "values": [7]}, {"field": "s", "values": ["", "AB", False]}]},
    {"conditions": [{"field": "n\"q", "anything_but": [0]}], "tags": ["green"]},
]


def _rows(rng: random.Random) -> list[dict]:
    rows, offsets = [], {}
    for i in range(1200):
        topic = rng.choice(["t", "t", "t", "t/sub", "u"])
        q = rng.randrange(3)
        inc = 1 if topic == "t" and i >= 600 else 0  # t deleted and made again at row 600
        off = offsets.get((topic, inc, q), 0)
        offsets[(topic, inc, q)] = off + 1
        props = {}
        for f in ("k", "s", 'n"q'):
            if rng.random() < 0.7:
                props[f] = rng.choice(VALUES)
        tags = rng.sample(["red", "blue", "green"], rng.randrange(3))
        rows.append({"topic": topic, "queue": q, "offset": off, "id": f"m{i}", "key": None, "size": 0,
                     "tags": tags, "properties": props, "produced_at": T0 + i * 9_000, "seq": str(1000 + i),
                     "body": f"body-{topic}-{inc}-{q}-{off}-é", **({"inc": inc} if inc else {})})
    return rows  # 1200 × 9 s = 3 hours


def _no_inc_0(row: dict) -> dict:
    """A row as the archiver wrote it before ``inc``: incarnation 0 without the field."""
    return {k: v for k, v in row.items() if k != "inc" or v}


OLD_UNTIL = T0 + 1_800_000  # body rows produced before: archived without their metadata (before 2026-11-28)


def _as_archived(body_row: dict) -> dict:
    """A body row as the archiver wrote it then: without metadata in the lake's first half hour."""
    if body_row["produced_at"] < OLD_UNTIL:
        body_row = {k: v for k, v in body_row.items() if k not in ("id", "key", "tags", "properties")}
    return _no_inc_0(body_row)


def _write(root, rows: list[dict], shard_arn: str) -> None:
    for kind, rs in (("messages", [{k: v for k, v in r.items() if k != "body"} for r in rows]),
                     ("bodies", [_as_archived(lake.body_row(r, r["body"])) for r in rows])):
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
    kept.sort(key=lambda r: (r["queue"], r.get("inc", 0), r["offset"]))
    return [(r["queue"], r.get("inc", 0), r["offset"], r["id"], r["body"]) for r in kept]


@pytest.fixture
def unique_observations(monkeypatch):
    """Each :func:`native_filter.with_levels` observation of a query under its own ``name`` (the
    parameter says: unique within a query), so that several selections can be labelled and unioned
    into one Spark job (:func:`_collect_each`): the observation is a row count nobody reads, and
    Spark refuses two observations of one name with different plans in one query."""
    from lakeq_lake import native_filter as NF

    real, n = NF.with_levels, itertools.count()
    monkeypatch.setattr(NF, "with_levels",
                        lambda *a, **k: real(*a, **{**k, "name": f"lakeq-native-levels-{next(n)}"}))


def _collect_each(frames) -> list[list[tuple]]:
    """Each frame's rows, in the order its own ``collect()`` gives them, from one Spark job: the
    frames labelled and unioned (a union's partitions are its children's, in turn), so one job's
    overhead instead of one a frame; the rows come back as tuples of the frame's columns."""
    from pyspark.sql import functions as F

    frames = list(frames)
    assert len({tuple(df.columns) for df in frames}) == 1  # (a union by position)
    union = None
    for i, df in enumerate(frames):
        labelled = df.select(F.lit(i).alias("__which"), *df.columns)
        union = labelled if union is None else union.union(labelled)
    out: list[list[tuple]] = [[] for _ in frames]
    for r in union.collect():
        out[r[0]].append(tuple(r)[1:])
    return out


def _keys(rows: list[tuple]) -> list[tuple]:
    """(queue, inc, offset, id, body) of manifest rows (tuples of :data:`R.MANIFEST_COLUMNS`)."""
    return [(r[0], r[9], r[1], r[2], r[7]) for r in rows]


def _in_output_order(want: list[tuple], parts: int = 2) -> list[tuple]:
    """``want`` (:func:`_reference`'s rows) in the order a selection's ``collect()`` gives them: its
    ``parts`` partitions in turn, a queue's rows in the part of Spark's hash of the queue
    (:func:`R.hash_partition`), each part sorted by (queue, inc, offset). Two selections equal to
    this are equal to each other, row for row in order."""
    return sorted(want, key=lambda w: (R.hash_partition(w[0], parts), w[0], w[1], w[2]))


# the lake_dir's range of the selection tests: partial first and last hours; its start is the
# produced_at of one of t's rows (the bound is inclusive), and every body row from it on carries its
# message's metadata (the one-sided selection judges them all)
SEL_LO, SEL_HI = OLD_UNTIL, T0 + 2 * H + 123


def test_selection_equals_the_pure_matcher_on_every_filter(spark, lake_dir, unique_observations):
    """For every filter, ``select`` (both sides joined, the bodies narrowed to the selection as the
    job does) keeps exactly the pure matcher's rows, once each, each part sorted by (queue,
    incarnation, offset) and each queue in its hash partition (so in (incarnation, offset) order
    within each queue). All the filters' selections in one Spark job."""
    root, rows = lake_dir
    lk = Lake(str(root))
    lo, hi = SEL_LO, SEL_HI
    assert any(r["topic"] == "t" and r["produced_at"] == lo for r in rows)
    msgs = R.read_slice(spark, lk, "messages", lo, hi)
    bods = R.read_slice(spark, lk, "bodies", lo, hi)
    R.ship(spark, "matcher", "lakeq")
    twos = _collect_each(R.select(msgs, bods, "t", lo, hi, Filter.of(raw), parts=2) for raw in FILTERS)
    sizes = []
    for raw, two in zip(FILTERS, twos):
        want = _reference(rows, "t", lo, hi, raw)
        assert _keys(two) == _in_output_order(want), raw  # exactly these, once each, in order
        sizes.append(len(want))
    assert all(0 < n for n in sizes[1:]) and len(set(sizes)) > 8  # the filters really select differently
    # "1" and 1 and true are told apart (the lake's map<string,string> schema would merge them)
    one, one_s = sizes[2], sizes[3]
    assert one != one_s


def test_one_side_selects_what_two_sides_select(spark, lake_dir, unique_observations):
    """Body rows carrying their metadata (the archiver since 2026-11-28): ``select_one_sided`` over
    them alone gives exactly ``select``'s rows in the same order, for every filter (with the matcher
    UDF for rows not plain): both equal the pure matcher's selection in the order
    :func:`_in_output_order` gives (``select``'s: :func:`test_selection_equals_the_pure_matcher_on_every_filter`,
    same range). Without the matcher (``matcher=False``) it keeps every row it cannot judge: the
    rows it calls plain are exactly the matcher's among them, the others are all let through. Each
    of the two selections for all the filters in one Spark job."""
    root, rows = lake_dir
    lk = Lake(str(root))
    lo, hi = SEL_LO, SEL_HI
    bods = R.read_slice(spark, lk, "bodies", lo, hi)
    R.ship(spark, "matcher", "lakeq")
    flts = [Filter.of(raw) for raw in FILTERS]
    ones = _collect_each(R.select_one_sided(bods, "t", lo, hi, f, parts=2) for f in flts)
    fasts = _collect_each(R.select_one_sided(bods, "t", lo, hi, f, parts=2, matcher=False) for f in flts)
    by_id = {r["id"]: r for r in rows}
    for raw, one, fast in zip(FILTERS, ones, fasts):
        want = _reference(rows, "t", lo, hi, raw)
        assert _keys(one) == _in_output_order(want), raw
        assert set(_keys(fast)) >= set(want), raw  # never fewer: unjudged rows are kept
        if not (raw and raw.get("conditions")):  # tags alone: every row judged
            assert fast == one, raw
        else:  # what it judged, it judged as the matcher does
            judged = {k for k in _keys(fast) if _plain_text(by_id[k[3]])}
            assert judged == set(_reference([r for r in rows if _plain_text(r)], "t", lo, hi, raw)), raw


def _plain_text(row: dict) -> bool:
    """The native filter's `plain` on the lake_dir's rows: no escaped key (``n"q``), no nested value."""
    return not any(k == 'n"q' or isinstance(v, (list, dict)) for k, v in row["properties"].items())


def _plan(df) -> str:
    return df._jdf.queryExecution().executedPlan().toString()


@pytest.mark.parametrize("raw", [FILTERS[1], FILTERS[5], FILTERS[8]], ids=["tags", "range+prefix", "anything-but"])
def test_a_filtered_replay_shuffles_only_the_bodies_of_its_selected_messages(spark, lake_dir, monkeypatch, raw):
    """The bodies are narrowed to the selected messages' keys (a broadcast left semi-join) before
    their shuffle; over SEMI_JOIN_KEYS_MAX they are not. With the join a sort-merge join (broadcasts
    of the join's sides off, as at 10M) the bodies are shuffled once, and the kept selection once
    more (adaptive execution forgets its partitioning: docs/design.md "Bodies of the selected
    only"). Same rows, same order either way, and both the pure matcher's."""
    root, rows = lake_dir
    lk = Lake(str(root))
    lo, hi = T0 + H // 2 + 4_500, T0 + 2 * H + 123
    msgs, bods = R.read_slice(spark, lk, "messages", lo, hi), R.read_slice(spark, lk, "bodies", lo, hi)
    R.ship(spark, "matcher", "lakeq")
    want = _reference(rows, "t", lo, hi, raw)
    assert spark.conf.get("spark.sql.adaptive.enabled") == "true"  # Spark's default, and Glue's
    spark.conf.set("spark.sql.autoBroadcastJoinThreshold", "-1")
    try:
        narrowed = R.select(msgs, bods, "t", lo, hi, Filter.of(raw), parts=2)
        plan = _plan(narrowed)
        assert "LeftSemi" in plan and "SortMergeJoin" in plan
        assert plan.count("Exchange hashpartitioning") == 2, plan  # the bodies', the selection's again
        monkeypatch.setattr(R, "SEMI_JOIN_KEYS_MAX", len(want) - 1)  # one key over the limit
        whole = R.select(msgs, bods, "t", lo, hi, Filter.of(raw), parts=2)
        plan = _plan(whole)
        assert "LeftSemi" not in plan
        assert plan.count("Exchange hashpartitioning") == 2, plan
    finally:
        spark.conf.unset("spark.sql.autoBroadcastJoinThreshold")
    plain = R.select(msgs, bods, "t", lo, hi, Filter.of(raw), parts=2, narrow_bodies=False)
    for df in (narrowed, whole, plain):
        got = [(r["queue"], r["inc"], r["offset"], r["id"], r["body"]) for r in df.collect()]
        assert sorted(got) == want
        for q in {w[0] for w in want}:
            assert [g for g in got if g[0] == q] == [w for w in want if w[0] == q]


def test_an_unfiltered_replay_does_not_narrow_the_bodies(spark, lake_dir):
    root, _ = lake_dir
    lk = Lake(str(root))
    lo, hi = T0, T0 + 3 * H
    df = R.select(R.read_slice(spark, lk, "messages", lo, hi), R.read_slice(spark, lk, "bodies", lo, hi),
                  "t", lo, hi, Filter.of(None), parts=2)
    assert "LeftSemi" not in _plan(df)


def _plain_only(row: dict) -> dict:
    """``row`` with properties every native test can judge (no nested value, no escaped field)."""
    props = {k: v for k, v in row["properties"].items() if k != 'n"q' and not isinstance(v, (list, dict))}
    return {**row, "properties": props}


def test_the_job_selects_one_sided_and_falls_back_when_it_must(spark, lake_dir, tmp_path):
    """``run_replay`` takes the native one-sided pass first and selects again only when that pass
    wrote rows it could not judge: rows not plain → the matcher UDF (``one side, matcher``), rows
    without metadata (the lake's first half hour was archived before) → both sides joined (``two
    sides``). Every plan's manifest is the pure matcher's selection. (That the one-sided selection
    equals the two-sided one on every filter: :func:`test_one_side_selects_what_two_sides_select`.)"""
    root, rows = lake_dir
    lk = Lake(str(root))
    lo, hi = SEL_LO, SEL_HI
    plain_root = tmp_path / "plain-lake"
    plain_rows = [_plain_only(r) for r in rows]
    _write(plain_root, plain_rows, ARN)
    raw = {"conditions": [{"field": "k", "range": [0, 2]}], "tags": ["red"]}
    cases = [(lk, rows, (lo, hi), raw, "one side, matcher", "cannot judge"),
             (lk, rows, (lo, hi), {"tags": ["red"]}, "one side", None),
             (Lake(str(plain_root)), plain_rows, (lo, hi), raw, "one side", None),
             (Lake(str(plain_root)), plain_rows, (lo, hi), FILTERS[8], "one side", None),
             (lk, rows, (T0, hi), raw, "two sides", "without metadata")]
    for i, (source, reference_rows, (a, b), flt, plan, said_what) in enumerate(cases):
        said = []
        s = R.run_replay(spark, source, f"p{i}", "t", a, b, Filter.of(flt), log=said.append, out=Lake(str(tmp_path)))
        want = _reference(reference_rows, "t", a, b, flt)
        assert s["plan"] == plan and s["found"] == len(want), (i, s["plan"], said)
        assert [m for m in said if "selecting again" in m] == [m for m in said if said_what and said_what in m], said
        manifest = [r for part in _manifest_rows(tmp_path, s) for r in part]
        assert all(set(r) <= set(R.MANIFEST_COLUMNS) for r in manifest), i  # no working column (R.PLAIN)
        got = sorted((r["queue"], r["inc"], r["offset"], r["id"], r["body"]) for r in manifest)
        assert got == want, i


# Values Jackson (Spark's JSON reader, which re-writes the properties' text) spells otherwise than
# json.dumps does: a character beyond U+FFFF as two \\u escapes, a control character escaped; and a
# field holding one.
JACKSON_ESCAPED = ["😀", "😀x", "x😀", "a\nb", "tab\there", "\u0001z", "\u001f", "é", "a\u2028b", "x", 'a"b', 7, "7"]
ESCAPED_FILTERS = ([{"conditions": [{"field": "k", "values": [v]}]} for v in JACKSON_ESCAPED]
                   + [{"conditions": [{"field": "k", "prefix": p}]} for p in ("😀", "x", "a\n", "\u0001", "tab\t", "")]
                   + [{"conditions": [{"field": "k", "anything_but": ["😀", "a\nb"]}]},
                      {"conditions": [{"field": "😀f", "exists": True}]},
                      {"conditions": [{"field": "😀f", "values": ["😀"]}, {"field": "k", "exists": True}]},
                      {"conditions": [{"field": "k", "values": ["😀x", 7]}, {"field": "n", "range": [3, 40]}]}])


def _escaped_lake(root: Path) -> tuple[Lake, list[dict]]:
    """240 rows from OLD_UNTIL on, one a millisecond, with values from JACKSON_ESCAPED; from row 160
    on half of them also hold the key ``😀f`` (Jackson escapes it: not plain, the matcher decides)."""
    rng = random.Random(1802)
    rows = []
    for i in range(240):
        props = {"n": i % 50}
        if rng.random() < 0.9:
            props["k"] = rng.choice(JACKSON_ESCAPED)
        if i >= 160 and rng.random() < 0.5:  # a key Jackson escapes: not plain (the matcher decides)
            props["😀f"] = rng.choice(["😀", "x", 1])
        rows.append({"topic": "t", "queue": i % 3, "offset": i // 3, "id": f"m{i}", "key": None, "size": 0,
                     "tags": [], "properties": props, "produced_at": OLD_UNTIL + i, "seq": str(i),
                     "body": f"b{i}-😀"})
    _write(root, rows, ARN)
    return Lake(str(root)), rows


def test_values_jackson_spells_with_escapes_are_selected_as_the_matcher_selects(spark, tmp_path, unique_observations):
    """A filter on a value that Spark's JSON reader re-writes with escapes (an emoji: two ``\\u``
    escapes; a control character), or on a field holding one, selects what the pure matcher selects,
    one-sided and two-sided. (The substring pre-filter once spelled an emoji as is, so a replay of
    ``values: ["😀"]`` found none of the messages holding it.) Rows whose keys need no escape are
    judged natively, whatever their values hold.

    Per filter: the job's native one-sided pass (``matcher=False``): each row's ``plain`` is "no key
    Jackson escapes", the plain rows it keeps are the matcher's selection among them and every other
    row is let through; and both sides joined (the matcher UDF on the rows not plain) equal the
    matcher's selection (one filter of each kind and escape). Each of the two in one Spark job. The job itself, its
    plan choice and its one-sided pass with the matcher:
    :func:`test_the_job_selects_escaped_values_in_one_pass_when_every_key_is_plain`."""
    lk, rows = _escaped_lake(tmp_path / "lake")
    R.ship(spark, "matcher", "lakeq")
    lo, hi = OLD_UNTIL, OLD_UNTIL + H
    msgs, bods = R.read_slice(spark, lk, "messages", lo, hi), R.read_slice(spark, lk, "bodies", lo, hi)
    by_id = {r["id"]: r for r in rows}
    flts = [Filter.of(raw) for raw in ESCAPED_FILTERS]
    natives = _collect_each(R.select_one_sided(bods, "t", lo, hi, f, parts=2, matcher=False, keep_plain=True)
                            for f in flts)
    # both sides joined for one filter of each kind and escape (an emoji, a newline, a control
    # character, a quote, a number and its string; prefixes; anything-but; the escaped key): the
    # pre-filter and native levels they share with the one-sided pass are checked on every filter
    two_sided = (0, 3, 5, 10, 11, 12, 13, 16, 18, 19, 20, 21, 22)
    twos = dict(zip(two_sided, _collect_each(R.select(msgs, bods, "t", lo, hi, flts[i], parts=2) for i in two_sided)))
    for i, (raw, native) in enumerate(zip(ESCAPED_FILTERS, natives)):
        want = _reference(rows, "t", lo, hi, raw)
        assert want, raw  # each filter selects something
        assert all(r[10] == ("😀f" not in by_id[r[2]]["properties"]) for r in native), raw
        plain_want = [w for w in want if "😀f" not in by_id[w[3]]["properties"]]
        assert sorted(k for k, r in zip(_keys(native), native) if r[10]) == plain_want, raw
        assert set(_keys(native)) >= set(want), raw  # the rows not plain: let through
        if i in twos:
            assert _keys(twos[i]) == _in_output_order(want), raw  # both sides joined


def test_the_job_selects_escaped_values_in_one_pass_when_every_key_is_plain(spark, tmp_path, unique_observations):
    """The replay job on :func:`_escaped_lake`: over the whole range (rows with the key ``😀f``) its
    native pass leaves rows unjudged and it selects again with the matcher (``one side, matcher``),
    writing the matcher's selection; over the first 160 rows (values with emoji and control
    characters, keys without) the native filter judges every row: one pass (``one side``; before
    2026-12-05 such values sent the replay to a second). And the one-sided pass with the matcher,
    per filter (all in one Spark job), is the matcher's selection; on the first 160 rows the native
    pass judges every row of the first eight filters, as the matcher does."""
    lk, rows = _escaped_lake(tmp_path / "lake")
    R.ship(spark, "matcher", "lakeq")
    lo, hi = OLD_UNTIL, OLD_UNTIL + H
    exists = ESCAPED_FILTERS.index({"conditions": [{"field": "😀f", "exists": True}]})
    jobs = [(0, hi, "one side, matcher"), (exists, hi, "one side, matcher"),
            (0, lo + 160, "one side"), (3, lo + 160, "one side")]
    for i, (which, b, plan) in enumerate(jobs):
        raw = ESCAPED_FILTERS[which]
        want = _reference(rows, "t", lo, b, raw)
        s = R.run_replay(spark, lk, f"e{i}", "t", lo, b, Filter.of(raw), log=lambda *_: None,
                         out=Lake(str(tmp_path / "out")))
        manifest = [r for part in _manifest_rows(tmp_path / "out", s) for r in part]
        got = sorted((r["queue"], r["inc"], r["offset"], r["id"], r["body"]) for r in manifest)
        assert (got, s["plan"]) == (want, plan), raw
    bods = R.read_slice(spark, lk, "bodies", lo, hi)
    flts = [Filter.of(raw) for raw in ESCAPED_FILTERS]
    matchers = _collect_each(R.select_one_sided(bods, "t", lo, hi, f, parts=2) for f in flts)
    for raw, matcher in zip(ESCAPED_FILTERS, matchers):
        assert _keys(matcher) == _in_output_order(_reference(rows, "t", lo, hi, raw)), raw
    firsts = _collect_each(R.select_one_sided(bods, "t", lo, lo + 160, f, parts=2, matcher=False, keep_plain=True)
                           for f in flts[:8])
    for raw, native in zip(ESCAPED_FILTERS[:8], firsts):
        assert all(r[10] for r in native), raw  # every row judged: the job would not select again
        assert _keys(native) == _in_output_order(_reference(rows, "t", lo, lo + 160, raw)), raw


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
    for part in s["parts"]:  # each part: whole queues, sorted by (queue, inc, offset); its count recorded
        assert part["key"].endswith(".txt")  # records, uncompressed (the copier reads `.json`, `.json.gz` too)
        rs = manifest_rows(part["key"], (root / part["key"]).read_bytes())
        assert len(rs) == part["rows"]
        keys = [(r["queue"], r["inc"], r["offset"]) for r in rs]
        assert keys == sorted(keys)
        seen_queues += sorted({r["queue"] for r in rs})
        got += rs
    assert len(seen_queues) == len(set(seen_queues))  # a queue never spans two parts
    assert [p["key"] for p in s["parts"]] == sorted(p["key"] for p in s["parts"])
    got.sort(key=lambda r: (r["queue"], r["inc"], r["offset"]))
    assert [(r["queue"], r["inc"], r["offset"], r["id"], r["body"]) for r in got] == want
    assert {r["inc"] for r in got} == {0, 1}  # both incarnations, their shared offsets kept apart
    assert s["queues"] == {str(q): sum(1 for w in want if w[0] == q) for q in {w[0] for w in want}}
    assert json.loads(got[0]["properties"]) == next(r["properties"] for r in rows if r["id"] == got[0]["id"])
    # the sample (what a dry run shows): the first 20 rows in the copier's order (the parts in order,
    # each from its start), each a selected message with its body's size
    ordered = [x for p in s["parts"] for x in manifest_rows(p["key"], (root / p["key"]).read_bytes())]
    by_id = {w[3]: w for w in want}
    assert len(want) > R.SAMPLE_MAX and len(s["sample"]) == R.SAMPLE_MAX
    assert [(x["queue"], x["offset"], x["id"]) for x in s["sample"]] == [
        (r["queue"], r["offset"], r["id"]) for r in ordered[:R.SAMPLE_MAX]]
    for x in s["sample"]:
        assert set(x) == set(R.SAMPLE_FIELDS)
        w = by_id[x["id"]]
        assert (x["queue"], x["offset"], x["size"]) == (w[0], w[2], len(w[4].encode("utf-8")))
        assert x["produced_at"] == next(r["produced_at"] for r in rows if r["id"] == x["id"])



def _manifest_rows(root: Path, summary: dict) -> list[list[dict]]:
    out = []
    for part in summary["parts"]:
        out.append(manifest_rows(part["key"], (root / part["key"]).read_bytes()))
    return out


@pytest.mark.parametrize("raw", [None, {"conditions": [{"field": "k", "range": [0, 2]}], "tags": ["red"]}])
def test_the_counts_observed_during_the_write_are_the_manifest_read_back(spark, lake_dir, tmp_path, raw):
    """The summary from the write's observed counts equals the one read back from the manifest (the
    job before: gzipped parts, ``legacy=True``), part by part, with the same rows in each part; and
    both equal what the parts hold. Missing bodies are counted the same way."""
    root, rows = lake_dir
    lk = Lake(str(root))
    lo, hi = T0 + 600_000, T0 + 3 * H
    quiet = lambda *_: None  # noqa: E731
    new = R.run_replay(spark, lk, "obs", "t", lo, hi, Filter.of(raw), log=quiet, out=Lake(str(tmp_path / "a")))
    old = R.run_replay(spark, lk, "obs", "t", lo, hi, Filter.of(raw), log=quiet, out=Lake(str(tmp_path / "b")),
                       legacy=True)
    js = R.run_replay(spark, lk, "obs", "t", lo, hi, Filter.of(raw), log=quiet, out=Lake(str(tmp_path / "c")),
                      manifest="json")
    assert all(p["key"].endswith(".txt") for p in new["parts"]) and new["manifest_format"] == "records/1"
    assert all(p["key"].endswith(".json.gz") for p in old["parts"])
    assert all(p["key"].endswith(".json") for p in js["parts"]) and js["manifest_format"] == "json"
    strip = lambda s: {k: v for k, v in s.items()  # noqa: E731
                       if k not in ("seconds", "phases", "parts", "plan", "manifest_format")}
    assert strip(new) == strip(old) == strip(js) and new["found"] == len(_reference(rows, "t", lo, hi, raw)) > 10
    assert [p["rows"] for p in new["parts"]] == [p["rows"] for p in old["parts"]] == [p["rows"] for p in js["parts"]]
    got_new, got_old = _manifest_rows(tmp_path / "a", new), _manifest_rows(tmp_path / "b", old)
    assert got_new == got_old == _manifest_rows(tmp_path / "c", js)
    assert [len(x) for x in got_new] == [p["rows"] for p in new["parts"]]
    assert len(new["parts"]) > 1  # per-part counts really tested (3 queues, 2 shuffle partitions in these tests)



@pytest.mark.parametrize("codegen", [False, True])
def test_the_record_column_is_the_record_format_byte_for_byte(spark, tmp_path, codegen):
    """The job's record (:func:`R.record_column` through Spark's text writer) is
    :func:`replay_manifest.encode`'s, byte for byte, whatever the values: nulls, empty strings,
    line breaks, colons and commas, emoji, control characters, quotes, a claim, tags with any text;
    interpreted and with Spark's generated code."""
    from lakeq.store import replay_manifest as RM

    odd = ["", "a\nb", "x:y,z", "😀 line\nbreak \u0001 ok", '"q" \\ \'', "\u2028é", "-1,2:3"]
    rows = []
    for i in range(40):
        v = odd[i % len(odd)]
        rows.append({"queue": i % 5, "offset": 2**40 + i, "id": None if i % 9 == 0 else f"m{i}{v}",
                     "key": None if i % 3 == 0 else v, "tags": None if i % 4 == 0 else [v, "t"][: i % 3],
                     "properties": None if i % 7 == 0 else json.dumps({"s": v}, ensure_ascii=False),
                     "produced_at": None if i == 5 else T0 + i, "body": None if i % 6 == 0 else v * (i % 4),
                     "claim": json.dumps({"key": f"b/{i}", "size": 9}) if i % 8 == 1 else None,
                     "inc": None if i % 2 else i % 3})
    schema = ("queue long, offset long, id string, key string, tags array<string>, properties string, "
              "produced_at long, body string, claim string, inc long")
    keys = ("spark.sql.codegen.wholeStage", "spark.sql.codegen.factoryMode")
    before = {k: spark.conf.get(k) for k in keys}
    if codegen:
        spark.conf.set("spark.sql.codegen.wholeStage", "true")
        spark.conf.set("spark.sql.codegen.factoryMode", "CODEGEN_ONLY")
    try:
        df = spark.createDataFrame([tuple(r[c] for c in R.MANIFEST_COLUMNS) for r in rows], schema).coalesce(1)
        R._emit(df, str(tmp_path / "m"), dry_run=False)
    finally:
        for k, v in before.items():
            spark.conf.set(k, v)
    (part,) = [p for p in (tmp_path / "m").glob("part-*") if p.stat().st_size]
    assert part.name.endswith(RM.SUFFIX)
    assert part.read_bytes() == RM.encode_all(rows)
    assert RM.rows_of(part.read_bytes()) == [{c: r[c] for c in RM.COLUMNS if r[c] is not None} for r in rows]


def test_hash_partition_is_sparks(spark):
    """The summary's map from a queue to its part: Spark's own ``pmod(hash(queue), n)``."""
    from pyspark.sql import functions as F

    qs = list(range(0, 70)) + [2**31 - 1, 2**31, 2**40 + 3, -1, -(2**63)]
    for n in (1, 2, 3, 8, 200):
        got = {int(r["q"]): int(r["p"]) for r in spark.createDataFrame([(q,) for q in qs], "q long").select(
            "q", F.pmod(F.hash("q"), F.lit(n)).alias("p")).collect()}
        assert got == {q: R.hash_partition(q, n) for q in qs}

def test_the_summary_falls_back_to_reading_the_manifest_when_a_check_fails(spark, lake_dir, tmp_path, monkeypatch):
    """A queue number the observed counts do not cover (here: QUEUES_MAX lowered to 2, the lake has
    queues 0-2) → the summary is read back from the manifest, and is still exact."""
    root, rows = lake_dir
    lk = Lake(str(root))
    lo, hi = T0, T0 + 3 * H
    want = R.run_replay(spark, lk, "fb", "t", lo, hi, Filter.of(None), log=lambda *_: None,
                        out=Lake(str(tmp_path / "a")))
    monkeypatch.setattr(R, "QUEUES_MAX", 2)
    said = []
    got = R.run_replay(spark, lk, "fb", "t", lo, hi, Filter.of(None), log=said.append, out=Lake(str(tmp_path / "b")))
    assert any("outside 0..1: counting the manifest" in m for m in said)
    assert got["queues"] == want["queues"] and got["found"] == want["found"] == len(_reference(rows, "t", lo, hi, None))
    assert [p["rows"] for p in got["parts"]] == [p["rows"] for p in want["parts"]]
    assert set(want["queues"]) == {"0", "1", "2"}


def test_a_merged_per_queue_histogram_is_not_trusted(tmp_path):
    """The per-queue counts are one ``histogram_numeric`` (exact while it sees no more queues than
    bins): a merged bin (a centre between two queues, or a fractional count) sends the summary to
    the manifest, as does a total that disagrees with the row count."""
    said = []
    for bins, n in (([{"x": 0.5, "y": 4.0}], 4), ([{"x": 1, "y": 2.5}], 3), ([{"x": 1, "y": 3.0}], 4)):
        metrics = {"n": n, "missing": 0, "qmin": 0, "qmax": 1, "per_queue": json.dumps(bins)}
        assert R._summary_observed(Lake(str(tmp_path)), "h", metrics, 2, said.append) is None, bins
    merged = "the per-queue histogram merged queues: counting the manifest"
    assert [m.split(": ", 1)[1] for m in said] == [merged] * 2 + ["observed counts disagree: counting the manifest"]


def test_an_empty_selection_writes_an_empty_summary(spark, lake_dir, tmp_path):
    """Nothing in the range (and nothing archived at all): found 0, no parts, the write's
    observation does not wait for metrics that never come."""
    root, _ = lake_dir
    for lk in (Lake(str(root)), Lake(str(tmp_path / "nothing"))):
        s = R.run_replay(spark, lk, "e", "t", T0 + 30 * H, T0 + 31 * H, Filter.of(None), log=lambda *_: None,
                         out=Lake(str(tmp_path / "out")))
        assert (s["found"], s["missing_bodies"], s["parts"], s["queues"], s["sample"]) == (0, 0, [], {}, [])

# ------------------------------------------------------------------ the native filter vs the matcher
# Property values that a text comparison could confuse: types (1, 1.0, "1", true), -0.0 and 0,
# integers beyond a double's precision and beyond 18 digits, numbers in exponent form, strings
# with a quote, a backslash, a control character, non-ASCII, JSON-looking strings, and the values
# the API does not let through (null, lists, objects), which the UDF decides.
CONFUSABLE = [1, 1.0, "1", True, False, "true", 0, -0.0, 0.0, "0", -1, 2.5, "2.5", 7, "7", 7.0,
              2**53, 2**53 + 1, float(2**53), -(2**53) - 1, 10**18 - 1, 10**18, 10**20, 1e16, 1.5e-7,
              123456789.125, 1e300, -1e300, 0.1, "", "A", "AB", "ab", "a\"b", "a\\b", "tab\there", "é",
              "😀", "a\u2028b", ",", "{\"k\":1}", "a,\":1,\":", "[1]", "null", "x,\"k\":1",
              "😀x", "x😀y😀", "\u0001", "a\x1fb", "a\r\nb", "\b\f", "\\u0041", "\"😀\\",
              None, [1], {"x": 1}, 4, "4"]
FIELDS = ["k", "s", "kk", "n\"q", "a.b", "é", "x:y", "{", ":1,", "}", ",k", "a,", ":true"]


def _random_level(rng: random.Random) -> dict:
    field = rng.choice(FIELDS)
    scalars = [v for v in CONFUSABLE if isinstance(v, (str, int, float)) and v is not None]
    kind = rng.choice(["values", "anything_but", "range", "prefix", "exists"])
    if kind in ("values", "anything_but"):
        return {"field": field, kind: rng.sample(scalars, rng.randint(1, 3))}
    if kind == "range":
        nums = [v for v in scalars if isinstance(v, (int, float)) and not isinstance(v, bool)]
        lo, hi = sorted(rng.sample(nums, 2))
        return {"field": field, "range": [lo, hi]}
    if kind == "prefix":
        return {"field": field, "prefix": rng.choice(["", "A", "a", "1", "2.", "é", "😀", "a\"", "{", "t", "n",
                                                       "x😀", "\u0001", "a\r", "\\u", "\"😀"])}
    return {"field": field, "exists": rng.random() < 0.6}


def _random_props(rng: random.Random) -> dict:
    props = {}
    for f in FIELDS:
        if rng.random() < 0.45:
            props[f] = rng.choice(CONFUSABLE)
    return props


def test_native_filter_equals_the_matcher_on_generated_filters_and_properties(spark, tmp_path):
    """Every generated filter, on every row the native filter calls plain, decides as the pure
    matcher does on the properties the archiver wrote; the properties text is the one Spark's JSON
    reader gives the job (the archiver's encoding read with :data:`R.MESSAGES_RAW`)."""
    from pyspark.sql import functions as F

    from lakeq_lake import native_filter as NF

    rng = random.Random(1801)
    rows = []
    for i in range(1500):
        props = _random_props(rng)
        if rng.random() < 0.3:  # the usual shape: flat, plain strings and numbers
            props = {f: v for f, v in props.items() if isinstance(v, (int, float, str)) and "\\" not in json.dumps(v)}
        rows.append({"topic": "t", "queue": 0, "offset": i, "id": f"m{i}", "key": None, "size": 0, "tags": [],
                     "properties": props, "produced_at": T0 + i, "seq": str(i), "body": ""})
    rows.append({**rows[0], "offset": 1500, "id": "m1500", "properties": None})  # no properties at all
    # texts where `,":1,":true` is no key: the "," ends the string "9,", the quote after 1, opens ":true"
    # and values with quotes and backslashes, which a plain text spells escaped
    for j, props in enumerate([{"9,": 1, ":true": 2}, {"9,": 1, ":true": 2, "k": "{\"k\":1}"}, {":1,": True},
                               {"k": "a\\b"}, {"k": 'a"b'}, {"k": 'a\\"b', "s": "x\\"}, {"k": "x\\", "s": '"'},
                               {"k": 'a\\\\"b,"s":"1"'}, {"s": "\\", "k": "a\\b"},
                               # texts Java's regexes would recurse deep on: a string of 2,000 escapes (plain),
                               # one of 30,000 (too long), 200 pairs (plain), 300 and 1,000 (too many)
                               {"k": '"' * 2000, "s": "1"}, {"k": "\\" * 30000},
                               {f"p{i}": i for i in range(200)}, {**{f"p{i}": i for i in range(300)}, "k": 'a"b'},
                               {**{f"p{i}": 0 for i in range(1000)}, ":1,": True, "k": "a\\b"}]):
        rows.append({**rows[0], "offset": 1501 + j, "id": f"m{1501 + j}", "properties": props})
    _write(tmp_path, rows, ARN)
    msgs = R.read_slice(spark, Lake(str(tmp_path)), "messages", T0, T0 + H)
    filters = [Filter.of({"conditions": [_random_level(rng) for _ in range(rng.randint(1, 3))]}) for _ in range(150)]
    filters += [Filter.of({"conditions": [{"field": ":1,", "exists": True}]}),
                Filter.of({"conditions": [{"field": ":1,", "values": [True]}]})]
    filters += [Filter.of({"conditions": [lv]}) for lv in (
        {"field": "k", "values": ["a\\b"]}, {"field": "k", "values": ['a"b']}, {"field": "k", "values": ['a\\"b']},
        {"field": "k", "prefix": "a\\"}, {"field": "k", "prefix": 'a"'}, {"field": "k", "prefix": "x\\"},
        {"field": "s", "prefix": '"'}, {"field": "s", "values": ["\\"]},
        {"field": "k", "anything_but": ['a"b', "a\\b"]}, {"field": "s", "values": ["1"]})]
    # FILTERS' levels too (their tags are the job's business, not the native levels')
    filters += [Filter.of({"conditions": f["conditions"]}) for f in FILTERS if f and f.get("conditions")]
    # native_filter (the levels as lambdas: only the benchmark's plan before uses it) on every third
    # filter; with_levels (the job's) on all: building a filter's columns is ~300 calls into the JVM,
    # each a round trip that a busy machine makes ~1 ms long
    lambdas = range(0, len(filters), 3)
    cols = [F.col("offset"), NF.plain(F.col("properties")).alias("plain")]
    cols += [NF.native_filter(F.col("properties"), filters[i].levels).alias(f"f{i}") for i in lambdas]
    got = {r["offset"]: r.asDict() for r in msgs.select(*cols).collect()}
    # and as the job applies them (with_levels: the tokens in a projection, no lambda), 25 a query;
    # every other query with `plain` read from a stored column as the compaction writes it (the
    # compacted bodies' `plain`: native_filter.stored_plain, read back by plain_of), which must be
    # the regex's answer on every row
    for lo in range(0, len(filters), 25):
        df = msgs.withColumn("sp", NF.stored_plain(F.col("properties")))
        stored = {"stored": "sp"} if lo % 50 else {}
        for i in range(lo, min(lo + 25, len(filters))):
            df, keep, tokens = NF.with_levels(df, "properties", filters[i].levels, name=f"lv{i}",
                                              plain_as=f"p{i}", **stored)
            df = df.withColumn(f"w{i}", keep).drop(*tokens)
        for r in df.select("offset", *[c for c in df.columns if c[0] == "p" and c[1:].isdigit()]).collect():
            assert {r[c] for c in r.asDict() if c != "offset"} == {got[r["offset"]]["plain"]}, (stored, r)
        for r in df.select("offset", *[c for c in df.columns if c.startswith("w")]).collect():
            got[r["offset"]].update(r.asDict())
    assert len(got) == len(rows)
    plain = [r for r in rows if got[r["offset"]]["plain"]]
    # the plain rows: no escape in a key (Jackson escapes control characters and characters beyond
    # U+FFFF: such a key is not plain), no nested value, no integer of more than 18 digits; a value
    # may hold any character (its escapes decoded when compared)
    assert 300 < len(plain) < len(rows)
    escaped_plain = jackson_plain = 0
    for r in rows:
        props = r["properties"] or {}
        text = json.dumps(props, ensure_ascii=False)
        usual = all(v is None or isinstance(v, (float, str)) or isinstance(v, int) and abs(v) < 10**18
                    for v in props.values())
        usual = usual and all("\\" not in json.dumps(k, ensure_ascii=False) for k in props)
        usual = usual and all(ord(c) <= 0xFFFF for k in props for c in k)  # (Jackson escapes it)
        compact = json.dumps(props, ensure_ascii=False, separators=(",", ":"))  # Jackson's, but for numbers
        usual = usual and len(compact) <= NF.MAX_PLAIN and compact.count(":") <= NF.MAX_PAIRS
        assert got[r["offset"]]["plain"] == usual, str(r["properties"])[:200]
        escaped_plain += usual and "\\" in text
        jackson_plain += usual and any(ord(c) < 0x20 or ord(c) > 0xFFFF
                                       for v in props.values() if isinstance(v, str) for c in v)
    assert escaped_plain > 50  # values with a quote or a backslash are decided natively
    assert jackson_plain > 50  # and values holding a control character or an emoji
    kept_somewhere, dropped_somewhere = 0, 0
    for i, f in enumerate(filters):
        want = {r["offset"] for r in matching(f, plain)}
        for c in (f"w{i}", f"f{i}") if i in lambdas else (f"w{i}",):
            have = {r["offset"] for r in plain if got[r["offset"]][c]}
            wrong = sorted(want ^ have)[:3]
            assert have == want, (c, f.to_json(), wrong, [r["properties"] for r in plain if r["offset"] in wrong])
        kept_somewhere += bool(want)
        dropped_somewhere += len(want) < len(plain)
    assert kept_somewhere > 60 and dropped_somewhere > 60  # the filters really decide


def test_native_bounds_are_exact():
    from lakeq_lake.native_filter import double_bounds, int_bounds

    rng = random.Random(7)
    nums = [0, -0.0, 1, 1.0, 1.5, -2.5, 2**53, 2**53 + 1, float(2**53), 10**19, -(10**19), 1e300, 5e-324, 2**63,
            2**63 - 1, -(2**63), 0.1, 3]
    probes_i = [0, 1, -1, 2, 3, 2**53, 2**53 + 1, 2**53 - 1, 2**63 - 1, -(2**63), 10**18, 123]
    probes_d = [0.0, -0.0, 1.0, 1.5, 2.5, -2.5, float(2**53), float(2**53 + 2), 1e300, 5e-324, 0.1,
                float("inf"), float("-inf"), 9.223372036854776e18]
    for _ in range(400):
        lo, hi = sorted(rng.sample(nums, 2))
        ib, db = int_bounds(lo, hi), double_bounds(lo, hi)
        for v in probes_i:
            assert (lo <= v <= hi) == (ib is not None and ib[0] <= v <= ib[1]), (lo, hi, v)
        for v in probes_d:
            assert (lo <= v <= hi) == (db is not None and db[0] <= v <= db[1]), (lo, hi, v)


@pytest.mark.parametrize("how", [{}, {"one_sided": False}])
def test_a_dry_run_writes_no_manifest_and_counts_and_samples_as_the_replay(spark, lake_dir, tmp_path, how):
    """A dry run (``dry_run=True``, the job's ``--dry_run true``) writes ``selection.json`` alone —
    no manifest, so no bodies under ``replays/`` — with the replay's own count, missing bodies,
    queues and sample (the first rows the replay would copy). It once wrote the whole manifest,
    which nobody read or deleted."""
    root, _rows_ = lake_dir
    lk = Lake(str(root))
    raw = {"conditions": [{"field": "k", "range": [0, 2]}], "tags": ["red", "green"]}
    lo, hi = T0 + 600_000, T0 + 3 * H
    real_out, dry_out = tmp_path / "real", tmp_path / "dry"
    real = R.run_replay(spark, lk, "r1", "t", lo, hi, Filter.of(raw), out=Lake(str(real_out)),
                        log=lambda *_: None, **how)
    dry = R.run_replay(spark, lk, "r1", "t", lo, hi, Filter.of(raw), out=Lake(str(dry_out)),
                       log=lambda *_: None, dry_run=True, **how)
    assert sorted(str(p.relative_to(dry_out)) for p in dry_out.rglob("*") if p.is_file()) == [R.summary_key("r1")]
    assert json.loads((dry_out / R.summary_key("r1")).read_text()) == dry
    assert dry["dry_run"] is True and dry["parts"] == [] and dry["manifest"] is None
    assert len(real["sample"]) == R.SAMPLE_MAX and real["found"] > R.SAMPLE_MAX
    assert {k: dry[k] for k in ("found", "missing_bodies", "queues", "sample", "plan")} == {
        k: real[k] for k in ("found", "missing_bodies", "queues", "sample", "plan")}


def test_the_order_keys_sort_is_the_manifests_order_whatever_the_values(spark):
    """:func:`R.sort_order` (a packed ``bigint`` first, then :data:`R.KEYS`) sorts exactly as
    :data:`R.KEYS` alone — also for keys outside the packed ranges (a queue below 0 or of 64 and
    more, incarnations around 511, offsets below 0 and around 2^48, nulls), where the packed key
    saturates and ties: one partition, a few hundred rows, no job but the two collects."""
    rng = random.Random(32)
    edges = {"queue": [None, -(1 << 40), -1, 0, 1, 62, 63, 64, 1 << 40],
             "inc": [None, -5, 0, 1, 509, 510, 511, 512, 1 << 30],
             "offset": [None, -(1 << 50), -1, 0, 1, (1 << 48) - 2, (1 << 48) - 1, 1 << 48, (1 << 62)]}
    rows = [tuple(rng.choice(edges[k]) for k in ("queue", "inc", "offset")) + (i,) for i in range(600)]
    df = spark.createDataFrame(rows, "queue long, inc long, offset long, i long").coalesce(1)
    by_keys = [tuple(r) for r in df.sortWithinPartitions(*R.KEYS, "i").collect()]
    by_packed = [tuple(r) for r in df.sortWithinPartitions(*R.sort_order(), "i").collect()]
    assert by_packed == by_keys
    assert len({(q, i, o) for q, i, o, _ in rows}) > 300  # the edges' mixes, not a handful
