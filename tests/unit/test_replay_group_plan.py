"""The ``{"group"}`` target's pure rules (lakeq.replay.group_plan): a manifest row → a list entry that
reads back as the source message (through the segment encoding a pull decodes), and which copies of a
chunk sent again are new."""
from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from lakeq.log import segments as seg
from lakeq.replay.copier import Copy
from lakeq.replay.group_plan import entry, fresh, position

texts = st.text(st.characters(blacklist_categories=("Cs",)), max_size=20)
props = st.dictionaries(st.text(min_size=1, max_size=5), st.one_of(st.integers(), st.booleans(), texts, st.none()),
                        max_size=3)


@given(rows=st.lists(st.fixed_dictionaries({
    "queue": st.integers(0, 99), "offset": st.integers(0, 2**40), "id": st.text(min_size=1, max_size=30),
    "key": st.one_of(st.none(), texts), "tags": st.lists(st.text(min_size=1, max_size=8), max_size=3),
    "properties": props, "produced_at": st.integers(0, 2**45), "body": texts,
    "claim": st.one_of(st.none(), st.fixed_dictionaries({"key": texts, "size": st.integers(0, 2**20),
                                                         "sha256": st.just("00")}))}), min_size=1, max_size=8),
       base=st.integers(0, 1000))
def test_an_entry_reads_back_as_the_source_message(rows, base):
    copies = [Copy(f"c{i}", {**r, "pos": i, "properties": json.dumps(r["properties"]),
                             "claim": None if r["claim"] is None else json.dumps(r["claim"])})
              for i, r in enumerate(rows)]
    s = seg.encode([entry(c, "quotes/sh") for c in copies], base)
    back = [m for _, m in seg.read(s, base, len(rows))]
    for r, m in zip(rows, back):
        assert (m["id"], m["topic"], m["queue"], m["source_offset"], m["key"], m["tags"], m["properties"],
                m["produced_at"]) == (r["id"], "quotes/sh", r["queue"], r["offset"], r["key"], r["tags"],
                                      r["properties"], r["produced_at"])
        assert m.get("claim") == r["claim"]
        assert m["body"] == ("" if r["claim"] else r["body"])  # a claimed body stays in the lake bucket


@given(positions=st.lists(st.integers(0, 200), unique=True, max_size=30), rpos=st.integers(0, 220))
def test_fresh_keeps_the_copies_at_or_past_the_watermark(positions, rpos):
    cs = [Copy(str(p), {"pos": p}) for p in sorted(positions)]
    assert [position(c) for c in fresh(cs, rpos)] == [p for p in sorted(positions) if p >= rpos]
