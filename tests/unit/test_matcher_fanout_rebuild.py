"""The fan-out's index cache keeps the level order its index learned from traffic when a
subscription change makes it rebuild the index (matcher.SubscriptionIndex.adopt)."""
import json
import random
from types import SimpleNamespace

from lakeq.fanout.worker import Matcher


def _subs(n: int) -> list:
    rng = random.Random(3)
    out = [SimpleNamespace(id=f"s{i}", topic="t", tags=None, parked=None, starts=None, created_at=0,
                           conditions=json.dumps([{"field": "px", "range": [rng.uniform(0, 50), 950]},
                                                  {"field": "vol", "range": [10**6 + i, 10**9]}]))
           for i in range(n)]
    out.append(SimpleNamespace(id="hit", topic="t", tags=None, parked=None, starts=None, created_at=0,
                               conditions=json.dumps([{"field": "px", "range": [0, 1000]}])))
    return out


def test_rebuild_keeps_the_learned_order(monkeypatch):
    import matcher.index as index_mod

    monkeypatch.setattr(index_mod, "_STATIC", float("inf"))  # the trie's order is compared: no static blocks
    m = Matcher()
    subs = _subs(400)
    m.load(subs)
    msg = {"properties": {"px": 500, "vol": 10}, "produced_at": 1, "offset": 0}
    for _ in range(100):
        assert m.match("t", msg) == ["hit"]
    learned = m.index
    assert learned._reorders >= 1
    m.load(subs + [SimpleNamespace(id="new", topic="u", tags=None, parked=None, starts=None, created_at=0,
                                   conditions="[]")])  # a subscription change: rebuilt from scratch
    assert m.index is not learned and m.match("t", msg) == ["hit"]
    assert m.index._visits <= 2, "the rebuilt index should test the never-passing level first"
    fresh = Matcher()
    fresh.load(subs)
    assert fresh.match("t", msg) == ["hit"] and fresh.index._visits > 100  # static order: px first
