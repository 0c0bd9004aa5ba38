"""The group header's stored form (lakeq.rebalance.codec): lossless, compact, reads the old form."""
from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from lakeq.rebalance import codec
from lakeq.rebalance import state as g

TOPICS = ["quotes", "quotes/sh", "quotes/sz", "orders", "x" * 200]


@st.composite
def groups(draw):
    """A state reached by random joins, syncs, heartbeats, leaves and time passing."""
    state = g.new_group("risk", draw(st.sampled_from(["sticky", "range", "round_robin"])))
    counts = {t: draw(st.integers(1, 6)) for t in TOPICS}
    now = 1_800_000_000_000
    subs = {}
    for _ in range(draw(st.integers(0, 12))):
        now += draw(st.integers(0, 20_000))
        op = draw(st.sampled_from(["join", "join", "sync", "heartbeat", "leave"]))
        mids = sorted(state.members)
        try:
            if op == "join" or not mids:
                mid = draw(st.sampled_from(["a", "b", "c", "d", "e"]))
                ts = sorted(draw(st.sets(st.sampled_from(TOPICS), min_size=1)))
                state, _ = g.join(state, mid, ts, None, draw(st.sampled_from([None, 1000, 45_000])), now, counts)
                subs[mid] = ts[:1]
            else:
                mid = draw(st.sampled_from(mids))
                m = state.members[mid]
                if op == "sync":
                    state, _ = g.sync(state, mid, m.generation, now, counts)
                elif op == "heartbeat":
                    state, _ = g.heartbeat(state, mid, m.generation, None, now, counts)
                else:
                    state, _ = g.leave(state, mid, now, counts)
        except g.GroupError as e:
            state = e.state or state
    if draw(st.booleans()) and state.members:
        state, _ = g.set_plan(state, now, weights={(TOPICS[0], 0): 2.5}, expected_imbalance=0.1)
    return state, {m: ts for m, ts in subs.items() if m in state.members}


@settings(max_examples=150, deadline=None)
@given(groups())
def test_round_trip_is_lossless(case):
    state, subs = case
    text, z = codec.pack(state, subs)
    back, back_subs = codec.unpack(text, z, None, "risk")
    assert back.to_dict() == state.to_dict()
    assert back_subs == {m: sorted(ts) for m, ts in subs.items()}
    assert codec.legacy_dict(text, z) == state.to_dict()


def test_topic_names_and_topic_sets_are_stored_once():
    counts = {f"feed/{'c' * 180}{i:03d}": 1 for i in range(100)}
    state = g.new_group("wide")
    now = 1_800_000_000_000
    for i in range(50):
        state, _ = g.join(state, f"m{i:03d}", sorted(counts), None, None, now, counts)
    text = codec.dumps(state, {m: ["feed"] for m in state.members})
    d = json.loads(text)
    assert len(d["sets"]) == 2 and len(d["topics"]) == 101  # the 100 children + "feed"
    assert len(text) < 40_000  # the one-item form repeated 100 long names per member: ~1 MB
    assert len(json.dumps(state.to_dict())) > 900_000


def test_large_states_are_compressed_and_the_old_form_still_reads():
    state = g.new_group("big")
    now = 1_800_000_000_000
    for i in range(200):
        state, _ = g.join(state, f"member-{i:04d}", ["quotes"], None, None, now, {"quotes": 64})
    text, z = codec.pack(state, {})
    assert text is None and len(z) < codec.COMPRESS_ABOVE
    import base64
    assert codec.unpack(None, base64.b64encode(z).decode())[0].to_dict() == state.to_dict()  # a stream's B
    v1 = json.dumps(state.to_dict())
    back, subs = codec.unpack(v1, None, json.dumps({"member-0000": ["quotes"]}))
    assert back.to_dict() == state.to_dict() and subs == {"member-0000": ["quotes"]}
    assert codec.unpack(None, None, None, "empty")[0].to_dict() == g.new_group("empty").to_dict()
