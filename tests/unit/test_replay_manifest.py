"""The copier's manifest reader (lakeq.replay.service.Manifest) and the copy of a manifest row
(copy_message), without AWS: parts given as lists. Hypothesis: any parts and any sequence of reads
(consecutive chunks, jumps back after a reload, jumps forward) give exactly the rows of the
concatenated parts with their positions, and a part is reopened only when a read does not continue
where the previous one stopped."""
from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from lakeq.replay.copier import Copy
from lakeq.replay.service import Manifest, copy_message


def _parts(sizes):
    parts, data, n = [], {}, 0
    for i, k in enumerate(sizes):
        key = f"replays/r/manifest/part-{i:05d}.json.gz"
        data[key] = [{"queue": i, "offset": j, "body": f"{i}-{j}"} for j in range(k)]
        parts.append({"key": key, "rows": k})
        n += k
    return parts, data, n


@given(st.lists(st.integers(0, 7), min_size=1, max_size=6),
       st.lists(st.tuples(st.integers(0, 50), st.integers(1, 9)), max_size=12))
def test_reads_are_the_concatenated_parts_with_positions(sizes, reads):
    parts, data, total = _parts(sizes)
    opened = []

    def open_part(key):
        opened.append(key)
        return iter(data[key])
    m = Manifest(parts, open_part)
    flat = [r for p in parts for r in data[p["key"]]]
    assert m.total == total
    for start, n in reads:
        got = m.read(start, start + n)
        want = [{**r, "pos": i} for i, r in enumerate(flat)][start:start + n]
        assert got == want


def test_consecutive_chunks_stream_each_part_once():
    parts, data, total = _parts([5, 0, 7, 3])
    opened = []
    m = Manifest(parts, lambda k: (opened.append(k), iter(data[k]))[1])
    rows = []
    for start in range(0, total, 2):
        rows += m.read(start, start + 2)
    assert [r["pos"] for r in rows] == list(range(15))
    assert opened == [parts[0]["key"], parts[2]["key"], parts[3]["key"]]  # the empty part never opened
    m.read(3, 5)  # back (a reload after a lost cursor write): the part is opened again, rows skipped
    assert opened[-1] == parts[0]["key"] and len(opened) == 4


def test_copy_message_keeps_key_tags_properties_and_carries_a_claim():
    row = {"queue": 1, "offset": 7, "id": "m1", "key": "k", "tags": ["a"], "properties": '{"n":1,"s":"1"}',
           "produced_at": 5, "body": "hello", "pos": 3}
    m = copy_message(Copy("rp-1-7-x", row), 99)
    assert (m.id, m.body, m.key, m.tags, m.properties, m.produced_at, m.claim) == \
        ("rp-1-7-x", "hello", "k", ["a"], {"n": 1, "s": "1"}, 99, None)
    claim = {"key": "bodies/a/b", "size": 400000, "sha256": "f" * 64}
    m = copy_message(Copy("rp-1-8-x", {**row, "body": "", "claim": json.dumps(claim), "key": None}), 99)
    assert (m.body, m.claim, m.key) == ("", claim, None)
    m = copy_message(Copy("rp-1-9-x", {"queue": 1, "offset": 9, "body": "b"}), 1)  # nulls left out by Spark
    assert (m.key, m.tags, m.properties) == (None, [], {})


# --- the record format (lakeq.store.replay_manifest, issue 32 item 3) ----------------------------
_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12) | st.sampled_from(
    ["", ":", ",", "\n", "a\nb:c,d", "😀 line\nbreak \u0001 ok", '"q"\\', "\u2028", "-1,2:"])
_row = st.fixed_dictionaries(
    {"queue": st.integers(0, 63), "offset": st.integers(0, 2**48), "inc": st.none() | st.integers(0, 600),
     "produced_at": st.none() | st.integers(0, 2**45)},
    optional={c: st.none() | _text for c in ("id", "key", "properties", "body", "claim")}
    | {"tags": st.none() | st.lists(_text, max_size=3)})


def _chunked(data: bytes, sizes):
    """``read(n)`` over ``data`` handing out pieces of the sizes drawn (1 byte upwards)."""
    at, i = 0, 0

    def read(n):
        nonlocal at, i
        k = min(n, sizes[i % len(sizes)]) if sizes else n
        i += 1
        out = data[at:at + k]
        at += len(out)
        return out
    return read


@given(st.lists(_row, max_size=8), st.lists(st.integers(1, 40), max_size=5))
def test_records_round_trip_whatever_the_values_and_the_reads(rows, sizes):
    """Any rows (newlines, colons, commas, emoji, control characters in any text; nulls; empty
    strings) come back as the JSON Lines manifest gave them — the non-null fields, tags as a list —
    however the stream cuts its reads."""
    from lakeq.store import replay_manifest as RM
    data = RM.encode_all(rows)
    want = [{c: r[c] for c in RM.COLUMNS if r.get(c) is not None} for r in rows]
    assert list(RM.iter_rows(_chunked(data, sizes))) == want
    # the same as the JSON manifest's rows (Spark leaves nulls out; tags a JSON array)
    assert want == [json.loads(json.dumps({c: r[c] for c in RM.COLUMNS if r.get(c) is not None})) for r in rows]


def test_records_refuse_a_truncated_or_foreign_part():
    import pytest

    from lakeq.store import replay_manifest as RM
    data = RM.encode_all([{"queue": 1, "offset": 2, "body": "hello"}, {"queue": 1, "offset": 3, "body": "x"}])
    for cut in (data[:-1], data[:-3], data[:5]):
        with pytest.raises(RM.BadRecord):
            RM.rows_of(cut)
    with pytest.raises(RM.BadRecord):  # a JSON Lines part read as records
        RM.rows_of(b'{"queue":1,"offset":2,"body":"hello"}\n')
    with pytest.raises(RM.BadRecord):  # lengths that do not end at a line break
        RM.rows_of(data.replace(b",5,", b",4,", 1))
    assert RM.rows_of(b"") == []


def _copy_all(parts_rows, chunk=3):
    """The copier's loop over record parts (``Manifest`` streaming each part from its bytes, the
    stored progress in memory): the copies produced, in order."""
    import io

    from lakeq.replay import copier
    from lakeq.store import replay_manifest as RM
    data, parts = {}, []
    for i, rows in enumerate(parts_rows):
        key = f"replays/r/manifest/part-{i:05d}-x-c000.txt"
        data[key] = RM.encode_all(rows)
        parts.append({"key": key, "rows": len(rows)})
    m = Manifest(parts, lambda k: RM.iter_rows(io.BytesIO(data[k]).read))
    stored = [copier.Progress(found=m.total)]
    got = []

    def save(old, new):
        if stored[0] != old:
            return False
        stored[0] = new
        return True

    def produce(copies):
        got.extend(copies)
        return len(copies)
    p = copier.run("src", lambda: stored[0], save, m.read, produce, rate=1000, chunk=chunk)
    return p, got


def test_the_copier_copies_exactly_the_selected_messages_from_record_parts():
    """Gaps in the offsets, a queue's run across chunks and across two parts, a single-message
    run, a row without a body, a body with line breaks: every selected message copied once, in the
    manifest's order, with its id derived from (queue, inc, offset), body, key, tags and properties."""
    from lakeq.replay.rules import copy_id

    def row(q, o, inc=0, **kw):
        return {"queue": q, "offset": o, "inc": inc, "id": f"m{q}-{o}", "key": f"k{o % 3}",
                "tags": ["red"] if o % 2 else [], "properties": json.dumps({"n": o}), "produced_at": 1000 + o,
                "body": f"body {q}/{o}\nline 2: é", **kw}
    part0 = [row(0, o) for o in (0, 1, 2, 5, 6, 7, 8, 20)] + [row(2, 41)]  # gaps; queue 2: one message
    part1 = [row(2, 42), row(2, 43, inc=1), row(5, 0, body=None), row(5, 3)]  # queue 2's run goes on here
    p, got = _copy_all([part0, part1])
    selected = [r for r in part0 + part1 if r["body"] is not None]
    assert [c.id for c in got] == [copy_id("src", r["queue"], r["offset"], r["inc"]) for r in selected]
    assert [(c.row["queue"], c.row["offset"], c.row.get("inc"), c.row["body"], c.row["key"], c.row["tags"],
             c.row["properties"]) for c in got] == \
        [(r["queue"], r["offset"], r["inc"], r["body"], r["key"], r["tags"], r["properties"]) for r in selected]
    assert (p.done, p.cursor, p.copied, p.failed) == (True, 13, 12, 1)
    assert [copy_message(c, 7).body for c in got][:1] == ["body 0/0\nline 2: é"]
    single, = _copy_all([[row(9, 123)]])[1]  # a selection of one message
    assert (single.row["queue"], single.row["offset"]) == (9, 123)
    p, got = _copy_all([])  # an empty selection: nothing read, nothing produced, done
    assert (got, p.done, p.cursor) == ([], True, 0)
    p, got = _copy_all([[], []])
    assert (got, p.done) == ([], True)
