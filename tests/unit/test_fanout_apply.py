"""The fan-out's in-place index update (lakeq.fanout.worker.Matcher.apply) ends where a full rebuild
(Matcher.load) of the same subscriptions would: seeded random sequences of create / delete / park /
un-park, applied a few changes at a time, matches interleaved (so the per-log bounds are cached
and must follow the changes)."""
import json
import random
from types import SimpleNamespace

from lakeq.fanout.worker import Matcher
from lakeq.store.subscriptions import CHANGES_KEPT, Changes

TOPICS = ["q", "q/a", "q/a/b", "r"]
SOURCES = ["q@1", "q/a@1", "q/a/b@1", "r@1"]  # log names: topic@incarnation


def _sub(rnd: random.Random, i: int) -> SimpleNamespace:
    levels = [{"field": "k", "values": rnd.sample(range(6), rnd.randint(1, 3))}] if rnd.random() < 0.7 else []
    r = rnd.random()
    if r < 0.15:
        starts, created_at = None, rnd.randint(0, 20)  # the rule before starts (produced_at)
    else:
        starts = json.dumps({s: [rnd.randint(0, 30) for _ in range(rnd.randint(0, 3))]
                             for s in rnd.sample(SOURCES, rnd.randint(0, 3))})
        created_at = 0
    return SimpleNamespace(id=f"{i:032x}", topic=rnd.choice(TOPICS), conditions=json.dumps(levels),
                           tags=["t"] if rnd.random() < 0.1 else None, starts=starts,
                           created_at=created_at, parked=None)


def _state(m: Matcher, msgs) -> tuple:
    return (set(m.created), m.parked, {t: sorted(ids) for t, ids in m._by_topic.items()}, m._topic,
            [sorted(m.match(src, msg, q)) for src, msg, q in msgs])


def _messages(rnd: random.Random, n: int) -> list:
    return [(rnd.choice(SOURCES), {"properties": {"k": rnd.randrange(7)}, "tags": ["t"] if rnd.random() < 0.2 else [],
                                   "offset": rnd.randint(0, 35), "produced_at": rnd.randint(0, 25)}, rnd.randrange(3))
            for _ in range(n)]


def test_in_place_updates_equal_a_full_rebuild():
    for seed in range(12):
        rnd = random.Random(seed)
        live: dict[str, SimpleNamespace] = {}
        made = 0
        for _ in range(rnd.randint(0, 12)):
            s = _sub(rnd, made)
            made += 1
            live[s.id] = s
        m = Matcher()
        m.load(list(live.values()))
        msgs = _messages(rnd, 40)
        for _round in range(15):
            changed = set()
            for _ in range(rnd.randint(1, 4)):
                op = rnd.random()
                if op < 0.4 or not live:
                    s = _sub(rnd, made)
                    made += 1
                    live[s.id] = s
                elif op < 0.65:
                    s = live.pop(rnd.choice(sorted(live)))
                else:  # park or un-park: the same subscription, its ``parked`` changed
                    old = live[rnd.choice(sorted(live))]
                    parked = None if old.parked else json.dumps({f"{old.topic}#0": {"from": rnd.randint(0, 9)}})
                    s = live[old.id] = SimpleNamespace(**{**vars(old), "parked": parked})
                changed.add(s.id)
            m.apply(changed, [live[i] for i in changed if i in live])
            fresh = Matcher()
            fresh.load(list(live.values()))
            assert _state(m, msgs) == _state(fresh, msgs), (seed, _round)


def test_changes_since():
    c = Changes(7, {5: "a", 6: "b", 7: "a"})
    assert c.since(4) == {"a", "b"} and c.since(6) == {"a"} and c.since(7) == set()
    assert c.since(3) is None  # change 4 is not kept
    assert Changes(7 + CHANGES_KEPT, {}).since(6) is None  # too far behind
    assert c.since(8) is None  # ahead (the item went back: another table): rebuild
