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
