"""The invariants of :class:`matcher.index.SubscriptionIndex`, checked by its ``_check()`` (the tests
call it after every kind of change). Kept out of ``matcher.index`` so a cold start does not compile
them: a Lambda layer ships sources, and the fan-out function compiles ``matcher.index`` at import.
"""
from __future__ import annotations

from typing import Hashable

from matcher.index import (
    _A,
    _E,
    _G,
    _INF,
    _P,
    _R,
    _ROOT,
    _SMALL,
    _TAGF,
    _V,
    _bucket_nodes,
    _count_values,
    _ids_iter,
    _Node,
    _path,
    _tail,
    _width_class,
    validate_topic,
)


def check(self) -> None:
    """Verify every invariant of the structure; raise AssertionError on the first violation.

    O(size of the index). Checks: each root is keyed by its topic; each child's back reference
    and edge label match where its parent indexes it; exact buckets hold 1 node or a list of
    ≥ 2; range lists and dicts agree; ``count`` = subscriptions ending in the subtree and is
    > 0 (no empty node survives a removal); no empty container is left; the id → leaf map and
    tag map agree with the nodes; total = ``len(self)``; ``_seen`` counts each exact value's
    subscriptions.
    """
    check_blocks(self)
    seen: dict[Hashable, _Node] = {}
    total = 0
    for topic, root in self._roots.items():
        assert root.parent is None and root.kind == _ROOT and root.arg == topic, topic
        total += check_node(self, root, seen)
    assert total == len(self._leaf) == len(seen), (total, len(self._leaf), len(seen))
    for sid, leaf in self._leaf.items():
        assert seen.get(sid) is leaf, sid
    for sid in self._pending:  # waiting for a block: in the trie, and it would qualify (statically:
        # qualified when added; the estimates move as values are added, re-checked when moved)
        assert sid in self._leaf and (self._learned is None or self._eligible(_path(self._leaf[sid])[1])), sid
    for sid, (topic, labels) in self._staged.items():  # staged: in no structure, would qualify
        assert sid not in self._leaf and sid not in self._inblock and sid not in self._pending, sid
        validate_topic(topic)
        assert type(labels) is tuple and labels and (self._learned is None or self._eligible(labels)), sid
    recount: dict[str, dict[Hashable, int]] = {}
    _count_values(recount, (lb for _, labels in self._staged.values() for lb in labels), 1)
    stack = list(self._roots.values())
    while stack:
        node = stack.pop()
        if node.kind == _V:
            per = recount.setdefault(node.field, {})
            for k in (node.arg if type(node.arg) is frozenset else (node.arg,)):
                per[k] = per.get(k, 0) + node.count
        if node.exact:
            stack.extend({id(c): c for b in node.exact.values() for c in (b if type(b) is list else [b])}.values())
        for key, per_field in (node.more or {}).items():
            if key == "g":
                stack.extend(_bucket_nodes(per_field))
                continue
            for x in per_field.values():
                if key == "p":
                    stack.extend(x.child.values())
                elif key == "r":
                    stack.extend(x.child.values())
                elif key == "a":
                    stack.extend(x.child.values())
                else:
                    stack.append(x)
    assert recount == self._seen, "value statistics (_seen) disagree with the trie"

def check_blocks(self) -> None:
    """The bit blocks' invariants: the id map, ``alive`` / ``count`` against the live positions,
    and for every live position and field structure that its bit is set exactly where its own
    levels say (values, excluded values, prefixes, exists, range cells covered or tested, tags).
    O(B x (structures + levels)) per block."""
    assert not set(self._inblock) & set(self._leaf), "an id both in a block and in the trie"
    live = 0
    dead = 0
    for topic, blk in self._blocks.items():
        assert blk.topic == topic and blk.count > 0, topic
        assert len(blk.ids) == len(blk.labels)
        lives = [p for p, lb in enumerate(blk.labels) if lb is not None]
        assert blk.alive == sum(1 << p for p in lives) and blk.count == len(lives), "alive bits"
        dead += len(blk.ids) - len(lives)
        for p in lives:
            sid, labels = blk.ids[p], blk.labels[p]
            assert self._inblock.get(sid) == (blk, p), sid
            assert labels, "a block member without levels"
            live += 1

        def bit(x: int, p: int) -> bool:
            return bool(x >> p & 1)

        own: dict = {}
        for p in lives:
            nth: dict = {}
            own[p] = {}
            for lb in blk.labels[p]:
                j = nth[lb[1]] = nth.get(lb[1], -1) + 1
                own[p][lb[1], j] = lb
        assert len(blk.slots) == len(blk.fields) and len(set(blk.slots)) == len(blk.slots)
        for slot, (f, absent, base, eq, ab, abx, pre, lens, rg) in zip(blk.slots, blk.fields):
            assert slot[0] == f
            for p in lives:
                lb = own[p].get(slot)
                kind, arg = (lb[0], lb[2]) if lb is not None else (None, None)
                assert bit(absent, p) == (lb is None or (kind == _E and not arg)), (f, p)
                assert bit(base, p) == (lb is None or (kind == _E and arg)), (f, p)
                vals = (arg if type(arg) is frozenset else (arg,)) if kind == _V else ()
                for k, x in (eq or {}).items():
                    assert bit(x, p) == (k in vals), (f, p, k)
                for k in vals:
                    assert eq is not None and k in eq
                assert bit(ab, p) == (kind == _A), (f, p)
                for k, x in abx.items():
                    assert bit(x, p) == (kind == _A and k in arg), (f, p, k)
                for k, x in (pre or {}).items():
                    assert bit(x, p) == (kind == _P and arg == k), (f, p, k)
                if kind == _P:
                    assert pre is not None and arg in pre and len(arg) in lens
                if rg is None:
                    assert kind != _R, (f, p)
                    continue
                cuts, full, part = rg
                assert len(full) == len(part) == len(cuts) + 1 and cuts == sorted(set(cuts))
                for i in range(len(full)):
                    tested = [t for t in part[i] if t[2] == p]
                    if kind != _R:
                        assert not bit(full[i], p) and not tested, (f, p, i)
                        continue
                    lo, hi = arg
                    covers = 0 < i < len(cuts) and lo <= cuts[i - 1] and cuts[i] <= hi
                    start = cuts[i - 1] if i else -_INF
                    end = cuts[i] if i < len(cuts) else _INF
                    meets = lo < end and hi >= start
                    assert bit(full[i], p) == covers, (f, p, i)
                    assert tested == ([] if covers or not meets else [(lo, hi, p)]), (f, p, i)
        slots = set(blk.slots)
        for p in lives:
            assert {sl for sl in own[p] if sl[0] != _TAGF} <= slots, p
            g = own[p].get((_TAGF, 0))
            if blk.tags is None:
                assert g is None, p
                continue
            assert bit(blk.tags[0], p) == (g is None), p
            for t, x in blk.tags[1].items():
                assert bit(x, p) == (g is not None and t in g[2]), (p, t)
    assert live == len(self._inblock) and dead == self._dead, "block ids / dead count"

def check_node(self, node: _Node, seen: dict) -> int:
    own = 0
    for sid in _ids_iter(node.ends):
        assert sid not in seen, f"{sid!r} ends twice"
        seen[sid] = node
        own += 1
    if type(node.ends) is set:
        assert len(node.ends) >= 2, "a one-id set should be stored as the id"
    children: list[_Node] = []
    if node.exact is not None:
        assert node.exact, "empty exact dict left"
        for (field, v), b in node.exact.items():
            group = b if type(b) is list else [b]
            if type(b) is list:
                assert len(b) >= 2 and len(set(map(id, b))) == len(b), "bad bucket"
            for c in group:
                assert isinstance(c, _Node) and c.kind == _V and c.field == field
                assert (v in c.arg) if type(c.arg) is frozenset else v == c.arg
        uniq = {id(c): c for b in node.exact.values() for c in (b if type(b) is list else [b])}
        for c in uniq.values():
            keys = c.arg if type(c.arg) is frozenset else (c.arg,)
            if type(c.arg) is frozenset:
                assert len(c.arg) >= 2, "single-value set should be stored as the value"
            for v in keys:
                b = node.exact[(c.field, v)]
                assert c is b or (type(b) is list and any(c is x for x in b))
            children.append(c)
    if node.more is not None:
        more = node.more
        assert more, "empty more dict left"
        assert set(more) <= {"g", "p", "r", "a", "+", "-"}, set(more)
        for key, per in more.items():
            assert per, f"empty {key!r} index left"
        by_tag = more.get("g", {})
        for t, b in by_tag.items():
            if type(b) is list:
                assert len(b) >= 2 and len(set(map(id, b))) == len(b), "bad tag bucket"
            for c in (b if type(b) is list else [b]):
                assert c.kind == _G and c.field == _TAGF and t in c.arg
        for c in {id(c): c for b in by_tag.values() for c in (b if type(b) is list else [b])}.values():
            assert type(c.arg) is frozenset and c.arg
            for t in c.arg:
                b = by_tag[t]
                assert c is b or (type(b) is list and any(c is x for x in b))
            children.append(c)
        for field, pf in more.get("p", {}).items():
            assert pf.child
            lens: dict[int, int] = {}
            for p in pf.child:
                lens[len(p)] = lens.get(len(p), 0) + 1
            assert lens == pf.lens, "prefix length counts"
            for p, c in pf.child.items():
                assert c.kind == _P and c.field == field and c.arg == p
                children.append(c)
        for field, rg in more.get("r", {}).items():
            assert rg.child
            if rg.classes is None:
                assert len(rg.child) <= _SMALL, "large range set without its width classes"
            else:
                filed = []
                for e, (sl, his, kids, inversions) in rg.classes.items():
                    assert sl, "empty width class left"
                    assert all(a < b for a, b in zip(sl, sl[1:])), "width class not sorted"
                    assert his == [hi for _, hi in sl] and len(kids) == len(sl), "width class lists"
                    assert all(rg.child[lo_hi] is c for lo_hi, c in zip(sl, kids)), "width class children"
                    assert inversions == sum(a > b for a, b in zip(his, his[1:])), "inversion count"
                    for lo, hi in sl:
                        assert _width_class(lo, hi) == e
                        filed.append((lo, hi))
                assert sorted(filed) == sorted(rg.child) and len(filed) > _SMALL // 2
            for (lo, hi), c in rg.child.items():
                assert c.kind == _R and c.field == field and c.arg == (lo, hi) and lo <= hi
                children.append(c)
        for field, sets in more.get("a", {}).items():
            assert sets.child
            hits: dict = {}
            for excluded in sets.child:
                for k in excluded:
                    hits[k] = hits.get(k, 0) + 1
            assert hits == sets.hits, "anything-but value counts"
            kept = sets.split
            if kept is not None:  # a kept leaf split must be what a fresh one would be
                fresh = sets._split()
                sets.split = kept
                assert kept == fresh, "stale anything-but leaf split"
            for excluded, c in sets.child.items():
                assert c.kind == _A and c.field == field and c.arg == excluded
                children.append(c)
        for key, flag in (("+", True), ("-", False)):
            for field, c in more.get(key, {}).items():
                assert c.kind == _E and c.field == field and c.arg is flag
                children.append(c)
    total = own
    for c in children:
        assert c.parent is node, "broken back reference"
        total += check_node(self, c, seen)
    assert node.count == total and total > 0, (node.kind, node.field, node.arg, node.count, total)
    if node.tail is not None:  # a tail is kept only while it describes the one path below
        assert node.count == 1 and node.tail == _tail(node), "stale tail"
    return total
