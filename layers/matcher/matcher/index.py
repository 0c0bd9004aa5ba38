"""Subscription matcher (SPEC §3): which subscriptions does a published message match?

A *subscription* is ``(sub_id, topic, conditions, tags)``. ``conditions`` is a list of *levels*
(API.md "Subscriptions"); each level is a dict with ``field`` and exactly one of

=================  ==========================================================================
``values``         list of JSON scalars (str / int / float / bool); the field equals one of them
``range``          ``[lo, hi]`` numbers, inclusive; the field is a number (not a bool) in it
``prefix``         string; the field is a string starting with it
``anything_but``   list of JSON scalars; the field is present and equal to none of them
``exists``         bool; ``true``: the field is present, ``false``: the field is absent
=================  ==========================================================================

Levels are ANDed, values within a level ORed, and ``tags`` (optional) is any-of against the
message's tag list. A level on a field the message lacks fails, except ``exists: false``. Values
compare as JSON values: ``"1"`` is not ``1``, ``true`` is not ``1``, ``1`` is ``1.0``. Message
values that are not scalars (``null``, lists, objects) are *present* (they satisfy ``exists: true``
and ``anything_but``) but never equal, in a range or under a prefix.

A subscription to ``quotes`` covers messages published on ``quotes``, ``quotes/sh``,
``quotes/sh/star`` (``/``-separated segments), not ``quotesx`` and not a parent.

Structure
---------
One trie per subscribed topic. A subscription's levels — and its tag list, which is one more level
(any-of over the message's tags) — are put in a canonical order, and the subscription is one path
from the topic's root: one node per level, the edge into a node being the level itself (field +
predicate). Subscriptions with equal leading levels share the path, and a subscription ends at the
node of its last level, so a node holds "the subscriptions ending here" and "the next levels" — the
seed's skip-list node, where a path simply has no node for a field the subscription does not
constrain (that is the "skip"). Each node keeps its outgoing edges in per-kind indexes:

* exact values: one ``dict`` keyed ``(field, value_key)`` → child (or a list of children when
  several distinct value sets at that node contain the value). A level with several values is one
  child, reachable under each of its values — no cross product of alternatives.
* prefix: per field a ``dict`` prefix → child plus a count of prefixes per length; a string's
  matching prefixes are one dict look-up per distinct prefix length (``O(d)``, ``d`` <= the longest
  prefix). A bisect walk over a ``SortedDict`` of prefixes was tried first; on ``bench/matcher.py``
  it made whole matches ~3x slower (~46 vs ~15 µs per message at 1k subscriptions).
* range: per field up to 16 ranges scanned directly, beyond that one sorted Python list of
  ``(lo, hi)`` per width class (``hi - lo`` in ``[2**(e-1), 2**e)``) and the class's widest range
  ``w``: a range of the class holding ``x`` has ``lo`` in ``[x - w, x]``, so a stab bisects that
  window per class (C ``bisect``) and scans at most about twice what it pushes; a class where no
  range lies strictly inside another (e.g. all of one width: ``hi`` sorted with ``lo``) needs no
  scan: two bisects and one slice of its children, pushed with one ``extend``. Ranges entirely
  above or below ``x`` are never touched.
* exists: per field dicts for ``true`` / ``false``; anything-but: per field a dict value-set →
  child plus, per value, how many sets exclude it, and a kept split of the children into leaves
  (their ids) and the others: a value no set excludes emits every leaf id with one C-level
  ``extend`` and pushes the others with another; otherwise two comprehensions.
* tags: per node a ``dict`` tag → tag-set children (like multi-value sets), so a message only looks
  up its own tags; a child reached under two of the message's tags is pushed once.

Per node and kind the scan is over the smaller of "the fields with edges of that kind" and "the
message's fields", so ``exists: true`` on 5,000 distinct absent fields costs nothing.

Matching walks the roots of the topic and its ancestors and, from each visited node, follows only
the edges the message satisfies. A node is visited only if the message satisfies every level on the
path to it, so the cost is ``O(T + V * F)`` hash look-ups plus the output, where ``T`` is the
topic's depth, ``V`` the number of visited nodes and ``F = min(fields in the message, edges at the
node)``, plus per visited node and field ``O(d)`` for ``d`` distinct prefix lengths, ``O(c log r)``
+ pushed for ``r`` ranges in ``c`` width classes, and ``O(a)`` for ``a`` anything-but sets only
when some set excludes the message's value. ``V`` is what the order decides.

Tails: a node with one subscription below it (``count == 1``) keeps that subscription's id and
remaining levels (``_Node.tail``, built on first visit by :func:`_tail`, dropped by every add /
remove through the node; a leaf's tail has no levels); visiting it tests those levels inline —
the same predicates as the edges — and emits the id, so a chain of ``k`` levels costs one visit,
not ``k``, and a leaf is one check.

Bit blocks: once the order has been learned from traffic, the subscriptions that match often
(every level passes at least ``_DENSE`` of the sampled messages — two levels on one field too,
ANDed in slots — and some sampled message matches the whole subscription when it should have,
``_EXPECT``) leave the trie for their topic's
:class:`_Block`: Python ints as bitsets over their positions, one per value / prefix / excluded
value / tag / range cell, ANDed per field and decoded in C (gmpy2's set-bit scan, then one list index
per output id; one ``compress`` without gmpy2). Per message and block ``O(F x B / 30)`` word
operations plus the decode (``O(B / 64 + output)``; ``O(B)`` by ``compress``) for ``B`` members;
the subscriptions that rarely match stay in the trie, so never-matching ones cost the blocks nothing.
Before any traffic the static estimates decide (every level's at least
``_STATIC``; fields few members constrain stay in the trie), so a fresh index answers its dense part
from bitsets from its first match. ``add`` only *stages* a subscription that qualifies (in no
structure yet); the next ``match`` files the staged ones — into their blocks when they are many (a
bulk build: the dense part never goes through the trie), else into the trie to wait for a block
(``_pending``). A re-order keeps a block whose membership changes by less than ``B >> _KEEP_SHIFT``
(members leaving become dead bits; a block's bits do not depend on the level order) and rebuilds it
otherwise. See :meth:`SubscriptionIndex._eligible` and docs/design.md "Bit blocks".

The order (:func:`_canonical`)
------------------------------
``V`` counts every node whose path the message satisfies; a subscription whose *first* level a
message passes costs a visit even when a later level fails. So the level most messages fail should
come first. Two sources of that estimate:

1. **Before any traffic** (static): the *bounded* kinds first — one value, a prefix, ``exists:
   true``: a message passes at most one such edge per field (a prefix: one per length) at a node,
   so even a broad one costs one visit shared by every subscription under it — then the unbounded
   kinds (value sets, ranges, anything-but, ``exists: false``, tag sets), each of which a message
   can pass through arbitrarily many distinct edges at one node. Within each group: an exact
   ``values`` level lets through ``len(values) / distinct values subscribed on that field now``, a
   prefix of length ``k`` ``0.2 ** k``, a range 0.3, ``exists`` 0.75 / 0.5, ``anything_but`` 0.9,
   tags 1; ties by kind, field name, argument.
2. **From traffic** (learned): ``match`` keeps the properties and tags of the last 256 messages
   and counts visits that output nothing ("waste"). When the waste since the last re-order exceeds
   ``max(20 000, 2 x subscriptions) x 2**reorders`` (and at least 32 messages were seen),
   :meth:`SubscriptionIndex.reorder` measures every level's pass rate on that sample
   (:class:`_Learned`: per field counts, sorted numbers and strings; ``O(values + log S)`` per
   level) and re-inserts every subscription with its levels ordered by measured pass rate (then the
   static key; an unbounded level's rate counts twice, so it goes before a bounded one only when
   it passes under half as often: a bounded level's node is shared by every subscription starting
   with it, so levels that each pass half the time and never together stay on one shared path,
   ``_UNBOUNDED_W``). The doubling budget bounds the total re-order work by a constant times the waste it
   removes. Subscriptions added afterwards use the learned rates too.

Static guesses can be fooled: ``[px in [0, 900], vol in [10**6, 10**9]]`` (a wide range and one
above every value) and ``[kind anything-but [x], exists: false on an always-present field]`` both
look fine statically and cost a visit per subscription per message; learned rates put the never-
passing level first. Why not a fixed order by field name: with ``[level in {1, 4}, sym in {code}]``
ordered by field name, every ``level`` value set at the root is a node a message with ``level: 4``
visits; as subscriptions grow, more distinct value sets appear and ``V`` grows with ``n``. Which
subscriptions match never depends on the order (levels are ANDed); only path sharing and ``V`` do.

Every public method states its complexity; :meth:`SubscriptionIndex._check` verifies the invariants
(counts, back references, index consistency, no empty node or container after removals).
"""
from __future__ import annotations

import gc
import math
from bisect import bisect_left, bisect_right
from collections.abc import Mapping
from itertools import compress
from typing import Any, Hashable, Iterable

__all__ = ["SubscriptionIndex", "validate_conditions", "validate_tags", "validate_topic", "value_key"]

KINDS = ("values", "range", "prefix", "anything_but", "exists")
_INF = math.inf
_SMALL = 16  # up to this many ranges per node and field: a plain scan
_SAMPLE = 256  # messages whose properties are kept to measure pass rates
_MIN_SAMPLE = 32  # no re-order before this many messages
_MIN_WASTE = 20_000  # visits without output before the first re-order (at least 2 per subscription)
_DENSE = 0.008  # a subscription whose every level passes at least this often goes to its topic's bit block
_BLOCK_MIN = 32  # subscriptions waiting for a block (or dead in one) before it is rebuilt
_MEMO = 1 << 18  # memoised pass rates kept per sample, counted in the values their labels hold (labels churn
# across adopted rebuilds: a bound on entries alone let 2**18 labels of deleted subscriptions, up to 64 KiB each, stay)
_EXPECT = 3.0  # a block member expected to match this many sampled messages and matching none leaves
_UNBOUNDED_W = 2.0  # learned order: weight of an unbounded level's pass rate
_KEEP_SHIFT = 5  # a re-order keeps a block when fewer than B >> this members leave or join it (else rebuilt)
_WASTE_SHIFT = 7  # a block's members that output nothing count (B - found) >> this visits of waste
_CELLS = 256  # at most this many cells per range field of a block
_STATIC = 0.1  # no traffic yet: a subscription whose every level's static estimate is at least this: to a block
_SLOT_MIN = 64  # no traffic yet: a block member's fields each constrained by 1/_SLOT_MIN of the block (or 4)
_BITS = bytes.maketrans(b"01", b"\x00\x01")  # bin() digits -> compress() selectors
# gmpy2.xmpz when gmpy2 is installed (a set-bit scan in C: O(output) per decode instead of O(B)),
# imported by the first block built (_scan), not at import: a cold start that builds no block pays nothing
_xmpz: Any = None
_scan_tried = False


def _scan() -> None:
    """Import gmpy2's ``xmpz`` once, if installed (the fallback is ``compress``, same answers)."""
    global _xmpz, _scan_tried
    if not _scan_tried:
        _scan_tried = True
        try:
            from gmpy2 import xmpz
        except ImportError:  # pragma: no cover - gmpy2 is a dependency; kept working without it
            xmpz = None
        _xmpz = xmpz


class _BoolKey:
    """Key of a JSON boolean: distinct from every number (in Python ``True == 1``)."""

    __slots__ = ("value",)

    def __init__(self, value: bool):
        self.value = value

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return "true" if self.value else "false"

    def __reduce__(self) -> str:
        # Keys are compared by identity: a copied or unpickled index must get the module's two
        # singletons back, not new objects equal to nothing.
        return "_TRUE" if self.value else "_FALSE"


_TRUE = _BoolKey(True)
_FALSE = _BoolKey(False)


class _NoKey:
    __slots__ = ()

    def __reduce__(self) -> str:
        return "_NOKEY"

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return "<unmatchable>"


_NOKEY = _NoKey()  # key of a non-scalar message value: equal to nothing


def value_key(value: Any) -> Hashable:
    """Hashable key with JSON equality: ``"1"`` ≠ ``1``, ``True`` ≠ ``1``, ``1`` = ``1.0``. O(1).

    Non-scalar values (``None``, lists, dicts, NaN) get a key equal to no condition value.
    """
    t = type(value)
    if t is str or t is int:
        return value
    if t is bool:
        return _TRUE if value else _FALSE
    if t is float:
        return value if value == value else _NOKEY
    if isinstance(value, str):
        return str(value)
    if isinstance(value, bool):
        return _TRUE if value else _FALSE
    if isinstance(value, (int, float)):
        return value if value == value else _NOKEY
    return _NOKEY


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _finite(value: int | float) -> bool:
    """True for every int (exact, whatever its size: ``math.isfinite`` would overflow on one beyond
    float range) and for floats other than inf / NaN."""
    return isinstance(value, int) or math.isfinite(value)


def _scalar_ok(value: Any) -> bool:
    if isinstance(value, (str, bool)):
        return True
    return _is_number(value) and _finite(value)


# ----------------------------------------------------------------------------------- validation
def validate_topic(topic: Any) -> str:
    """Return ``topic`` if it is a non-empty ``/``-separated name without empty segments. O(len)."""
    if not isinstance(topic, str) or not topic:
        raise ValueError("topic must be a non-empty string")
    if topic[0] == "/" or topic[-1] == "/" or "//" in topic:
        raise ValueError(f"topic {topic!r} has an empty segment (leading, trailing or double '/')")
    return topic


def validate_tags(tags: Any) -> tuple[str, ...]:
    """Return the subscription's tags as a de-duplicated tuple (``()`` = no tag filter). O(len).

    ``None`` and ``[]`` both mean "no tag filter". Each tag must be a non-empty string.
    """
    if tags is None:
        return ()
    if isinstance(tags, (str, bytes)) or not isinstance(tags, (list, tuple)):
        raise ValueError("tags must be a list of strings")
    out: dict[str, None] = {}
    for i, tag in enumerate(tags):
        if not isinstance(tag, str) or not tag:
            raise ValueError(f"tags[{i}] must be a non-empty string, got {tag!r}")
        out[tag] = None
    return tuple(out)


def _dedupe_scalars(where: str, kind: str, values: Any) -> list:
    if not isinstance(values, (list, tuple)):
        raise ValueError(f"{where}: '{kind}' must be a list of JSON scalars (strings, numbers, booleans)")
    if not values:
        raise ValueError(f"{where}: '{kind}' must not be empty")
    seen: dict[Hashable, Any] = {}
    for j, v in enumerate(values):
        if not _scalar_ok(v):
            raise ValueError(
                f"{where}: {kind}[{j}] must be a string, a finite number or a boolean, got {v!r}"
            )
        seen.setdefault(value_key(v), v)
    return list(seen.values())


def _plain_level(level: dict) -> dict | None:
    """The normalised copy of a valid level ``{"field": ..., kind: ...}`` (exactly those two keys)
    with plain ``list`` / ``str`` / ``int`` / ``float`` / ``bool`` arguments, as
    :func:`validate_conditions` makes it; ``None`` for anything else (valid or not), which the full
    checks then handle with their messages. O(size)."""
    field = level.get("field")
    if type(field) is not str or not field:
        return None
    for kind, arg in level.items():
        if kind != "field":
            break
    ta = type(arg)
    if kind == "range":
        if (ta is list or ta is tuple) and len(arg) == 2:
            lo, hi = arg
            tl, th = type(lo), type(hi)
            if ((tl is int or (tl is float and math.isfinite(lo)))
                    and (th is int or (th is float and math.isfinite(hi))) and lo <= hi):
                return {"field": field, "range": [lo, hi]}
        return None
    if kind == "values" or kind == "anything_but":
        if (ta is not list and ta is not tuple) or not arg:
            return None
        seen: dict[Hashable, Any] = {}
        for v in arg:
            tv = type(v)
            if tv is str or tv is int:
                seen.setdefault(v, v)
            elif tv is bool:
                seen.setdefault(_TRUE if v else _FALSE, v)
            elif tv is float and math.isfinite(v):
                seen.setdefault(v, v)
            else:
                return None
        return {"field": field, kind: list(seen.values())}
    if kind == "prefix":
        return {"field": field, "prefix": arg} if ta is str else None
    if kind == "exists":
        return {"field": field, "exists": arg} if ta is bool else None
    return None


def validate_conditions(conditions: Any) -> list[dict]:
    """Validate API conditions and return a normalised copy. O(total size).

    The copy keeps the caller's level order; each level is a new dict with exactly ``field`` and
    its one kind; ``values`` / ``anything_but`` lose duplicates (JSON equality, first spelling
    kept); ``range`` becomes a two-item list. ``None`` is treated as ``[]`` (match everything).
    Raises :class:`ValueError` with a human-readable message naming the offending level.
    """
    if conditions is None:
        return []
    if isinstance(conditions, (str, bytes, Mapping)) or not isinstance(conditions, (list, tuple)):
        raise ValueError("conditions must be a list of levels")
    out: list[dict] = []
    for i, level in enumerate(conditions):
        if type(level) is dict and len(level) == 2:  # the common shape: checked without the messages
            norm = _plain_level(level)
            if norm is not None:
                out.append(norm)
                continue
        where = f"conditions[{i}]"
        if not isinstance(level, Mapping):
            raise ValueError(f"{where} must be an object with 'field' and one condition")
        unknown = sorted(str(k) for k in level if k != "field" and k not in KINDS)
        if unknown:
            raise ValueError(
                f"{where}: unknown key(s) {', '.join(unknown)}; a level has 'field' and one of "
                + ", ".join(KINDS)
            )
        if "field" not in level:
            raise ValueError(f"{where}: missing 'field'")
        field = level["field"]
        if not isinstance(field, str) or not field:
            raise ValueError(f"{where}: 'field' must be a non-empty string")
        where = f"{where} (field {field!r})"
        kinds = [k for k in KINDS if k in level]
        if not kinds:
            raise ValueError(f"{where}: needs one of {', '.join(KINDS)}")
        if len(kinds) > 1:
            raise ValueError(f"{where}: has several conditions ({', '.join(kinds)}); use one per level")
        kind = kinds[0]
        arg = level[kind]
        if kind in ("values", "anything_but"):
            norm: Any = _dedupe_scalars(where, kind, arg)
        elif kind == "range":
            if not isinstance(arg, (list, tuple)) or len(arg) != 2:
                raise ValueError(f"{where}: 'range' must be [lo, hi]")
            lo, hi = arg
            for name, bound in (("lo", lo), ("hi", hi)):
                if not _is_number(bound):
                    raise ValueError(f"{where}: range {name} must be a number, got {bound!r}")
                if not _finite(bound):
                    raise ValueError(f"{where}: range {name} must be finite, got {bound!r}")
            if lo > hi:
                raise ValueError(f"{where}: range is inverted: lo {lo!r} > hi {hi!r}")
            norm = [lo, hi]
        elif kind == "prefix":
            if not isinstance(arg, str):
                raise ValueError(f"{where}: 'prefix' must be a string, got {arg!r}")
            norm = arg
        else:  # exists
            if not isinstance(arg, bool):
                raise ValueError(f"{where}: 'exists' must be true or false, got {arg!r}")
            norm = arg
        out.append({"field": field, kind: norm})
    return out


# Canonical order (:func:`_canonical`): estimated selectivity, then kind rank values 0, prefix 1,
# range 2, exists 3, anything-but 4, then field name.
# Internal edge kinds.
_V, _P, _R, _A, _E, _G, _ROOT = "v", "p", "r", "a", "e", "g", "T"
_TAGF = ("tags",)  # the field of a tags edge: a tuple, so no JSON field name can equal it


# Estimated fraction of messages a level lets through, for kinds whose value distribution the
# index does not track (exact ``values`` use the number of distinct values subscribed on the field).
# prefix (per character), range, exists true, exists false, anything-but:
_EST_P, _EST_R, _EST_ET, _EST_EF, _EST_A = 0.2, 0.3, 0.75, 0.5, 0.9


def _labels(levels: list[dict]) -> list[tuple]:
    """Levels (normalised by :func:`validate_conditions`) as de-duplicated edge labels
    ``(kind, field, arg)`` in the caller's order. O(total size)."""
    labels: dict[tuple, None] = {}
    for level in levels:
        for kind, arg in level.items():
            if kind != "field":
                break
        field = level["field"]
        if kind == "values":
            keys = frozenset([value_key(v) for v in arg])
            label = (_V, field, next(iter(keys)) if len(keys) == 1 else keys)
        elif kind == "anything_but":
            label = (_A, field, frozenset([value_key(v) for v in arg]))
        elif kind == "range":
            label = (_R, field, (arg[0], arg[1]))
        elif kind == "prefix":
            label = (_P, field, arg)
        else:
            label = (_E, field, arg)
        labels[label] = None  # equal levels collapse (A and A = A)
    return list(labels)


def _static_estimate(label: tuple, seen: dict | None) -> float:
    """The guessed fraction of messages passing ``label`` (no message statistics). O(values)."""
    kind, field, arg = label
    if kind == _V:
        known = seen.get(field) if seen is not None else None
        if known is None:  # no other subscription has values on this field (yet)
            return 1.0
        if type(arg) is frozenset:
            return len(arg) / (len(known) + sum(1 for k in arg if k not in known))
        return 1 / (len(known) + (arg not in known))
    if kind == _P:
        return _EST_P ** len(arg)
    if kind == _R:
        return _EST_R
    if kind == _E:
        return _EST_ET if arg else _EST_EF
    if kind == _G:
        return 1.0  # unknown without traffic: after every condition, as the tag check used to be
    return _EST_A


_RANK = {_V: 0, _P: 1, _R: 2, _E: 3, _A: 4, _G: 5}


def _unbounded(label: tuple) -> bool:
    """True for the kinds a message can satisfy through arbitrarily many distinct edges at one node
    (value sets, ranges, anything-but, exists false); one value, a prefix (one edge per prefix
    length) and exists true let a message through at most a few edges per field."""
    kind, _, arg = label
    return type(arg) is frozenset or kind in (_R, _A, _G) or (kind == _E and not arg)


def _canonical(levels: list[dict] | None, seen: dict | None = None, learned: "_Learned | None" = None,
               labels: list[tuple] | None = None) -> list[tuple]:
    """Levels (normalised by :func:`validate_conditions`, or ``labels`` from :func:`_labels`) as
    sorted, de-duplicated edge labels ``(kind, field, arg)``. O(L log L + values).

    Without message statistics (``learned`` None) the order is: the *bounded* kinds first (one
    value, prefix, exists true: a message passes at most a few such edges per field at a node, so a
    broad one costs a visit or two, shared by every subscription under it), then the unbounded
    ones (:func:`_unbounded`); within each, the estimated selectivity: ``values`` lets through
    ``len(values) / distinct values subscribed on that field, this level's included`` (``seen``:
    field → {value key: subscriptions with that value}, kept by the index), a prefix of length ``k``
    ``0.2 ** k``, the other kinds fixed guesses (``_EST_*``). With statistics learned from the
    messages matched so far (:class:`_Learned`) the measured pass rate comes first, then the same.
    The order only decides how paths are shared and how many nodes a message visits, never what
    matches: levels are ANDed in any order. Ties: kind rank, field name, then the argument.
    """
    if labels is None:
        labels = _labels(levels or [])
    if len(labels) < 2:
        return list(labels)
    keyed = []
    for label in labels:
        est = _static_estimate(label, seen)
        unb = _unbounded(label)
        # learned: an unbounded level goes first only when it passes under half as often as a bounded
        # one (a bounded level's node is shared by every subscription that starts with it)
        first: tuple = (unb,) if learned is None else (learned.rate(label, est) * (_UNBOUNDED_W if unb else 1), unb)
        keyed.append((first + (est, _RANK[label[0]], str(label[1])), label))
    orders = [k for k, _ in keyed]
    if len(set(orders)) < len(orders):  # equal estimates on the same kind and field: order by argument
        keyed = [(k + (_sort_repr(label[2]),), label) for k, label in keyed]
    keyed.sort(key=lambda kl: kl[0])
    return [label for _, label in keyed]


class _Learned:
    """Pass rates of edge labels measured on a sample of matched messages' properties.

    Per field: how many sample messages carry it, their value keys counted, their numbers and
    strings sorted. :meth:`rate` is ``(passing sample messages + prior) / (sample size + 1)``, so a
    level no sampled message passes ranks by its static guess among the other never-passing ones.
    Building: O(S x fields); :meth:`rate`: O(values + log S) the first time per label (a tag set:
    one OR of per-tag bitsets over the sample), then O(1) (memoised).
    """

    __slots__ = ("size", "present", "keys", "nums", "strs", "tagbits", "memo", "held", "views")

    def __init__(self, sample: list[Mapping]) -> None:
        self.size = len(sample)
        self.memo: dict[tuple, int] = {}  # label -> sample messages passing it
        self.held = 0  # the values (set members, prefix characters; 1 otherwise) the memo's labels hold
        self.present: dict[str, int] = {}
        self.keys: dict[str, dict[Hashable, int]] = {}
        nums: dict[str, list] = {}
        strs: dict[str, list] = {}
        self.tagbits: dict[str, int] = {}  # tag -> the sample messages carrying it, as bits
        # each sample message as a match sees it, (kmap, nums, strs, tags): the blocks' sample checks
        self.views = [_message_views({f: v for f, v in props.items() if f != _TAGF}) + (props.get(_TAGF, ()),)
                      for props in sample]
        for i, props in enumerate(sample):
            for t in props.get(_TAGF, ()):
                self.tagbits[t] = self.tagbits.get(t, 0) | 1 << i
        for props in sample:
            for f, v in props.items():
                if f == _TAGF:
                    continue
                self.present[f] = self.present.get(f, 0) + 1
                k = value_key(v)
                per = self.keys.setdefault(f, {})
                per[k] = per.get(k, 0) + 1
                if isinstance(v, str):
                    strs.setdefault(f, []).append(v)
                elif type(v) is not bool and isinstance(v, (int, float)) and v == v:
                    nums.setdefault(f, []).append(v)
        self.nums = {f: sorted(v) for f, v in nums.items()}
        self.strs = {f: sorted(v) for f, v in strs.items()}

    def rate(self, label: tuple, prior: float) -> float:
        hits = self.memo.get(label)
        if hits is None:
            hits = self.hits(label)
        return (hits + prior) / (self.size + 1)

    def hits(self, label: tuple) -> int:
        """How many sample messages pass ``label``, memoised (the labels kept hold at most ``_MEMO``
        values, set members and prefix characters counted: then cleared)."""
        arg = label[2]
        weight = len(arg) or 1 if type(arg) is frozenset or type(arg) is str else 1
        if self.held + weight > _MEMO:
            self.memo.clear()
            self.held = 0
        hits = self.memo[label] = self._hits(label)
        self.held += weight
        return hits

    def _hits(self, label: tuple) -> int:
        """How many sample messages pass ``label``."""
        kind, field, arg = label
        if kind == _G:
            get = self.tagbits.get
            bits = 0
            for t in arg:
                bits |= get(t, 0)
            hits = bits.bit_count()
        elif kind == _E:
            have = self.present.get(field, 0)
            hits = have if arg else self.size - have
        elif kind == _V or kind == _A:
            counts = self.keys.get(field, {})
            inside = sum(counts.get(k, 0) for k in (arg if type(arg) is frozenset else (arg,)))
            hits = inside if kind == _V else self.present.get(field, 0) - inside
        elif kind == _R:
            xs = self.nums.get(field, ())
            hits = bisect_right(xs, arg[1]) - bisect_left(xs, arg[0]) if xs else 0
        else:  # prefix
            xs = self.strs.get(field, ())
            if not xs:
                hits = 0
            elif arg:
                last = ord(arg[-1])
                end = bisect_left(xs, arg[:-1] + chr(last + 1)) if last < 0x10FFFF else len(xs)
                hits = end - bisect_left(xs, arg)
            else:
                hits = len(xs)
        return hits

    def pass_rate(self, label: tuple) -> float:
        """:meth:`rate` without a prior (a level no sampled message passes: 0); the hits memoised
        per label (bounded, see :meth:`hits`): O(1) after the first call."""
        hits = self.memo.get(label)
        if hits is None:
            hits = self.hits(label)
        return hits / (self.size + 1)


def _sort_repr(arg: Any) -> str:
    if isinstance(arg, frozenset):
        return repr(sorted(repr(a) for a in arg))
    return repr(arg)


# ----------------------------------------------------------------------------------- the trie
class _Node:
    """One level of one or more subscription paths.

    ``kind``/``field``/``arg`` label the edge from ``parent``; ``count`` is the number of
    subscriptions whose path goes through (or ends at) this node; ``ends`` the untagged
    subscriptions ending here (``None``, one id, or a ``set`` of ids); ``exact`` the exact-value
    edges; ``more`` the rarer parts (``None`` or a dict with keys ``'t'`` tags → ids, ``'p'``
    prefix, ``'r'`` range, ``'a'`` anything-but, ``'+'`` / ``'-'`` exists true / false).
    """

    __slots__ = ("parent", "kind", "field", "arg", "count", "ends", "exact", "more", "tail")

    def __init__(self, parent: "_Node | None", kind: str, field: Any, arg: Any):
        self.parent = parent
        self.kind = kind
        self.field = field
        self.arg = arg
        self.count = 0
        self.ends: Any = None
        self.exact: dict | None = None
        self.more: dict | None = None
        # when count == 1: (its one subscription's id, the labels below this node; () for a leaf),
        # built by the first match that visits the node (:func:`_tail`), dropped by every
        # add / remove through it
        self.tail: tuple | None = None


def _width_class(lo: float, hi: float) -> int | None:
    """``e`` with ``hi - lo`` in ``[2**(e-1), 2**e)``; ``None`` beyond float range (huge ints)."""
    try:
        return math.frexp(hi - lo)[1]
    except OverflowError:
        return None


class _Ranges:
    """The range edges of one node and field: stabbing queries over inclusive intervals.

    Up to ``_SMALL`` ranges are scanned directly. Beyond that the ranges are grouped by width class
    (``hi - lo`` in ``[2**(e-1), 2**e)``, :func:`_width_class`). A class is ``[los, his, kids,
    inversions]``: its ranges as a sorted ``list`` of ``(lo, hi)`` and, in the same order, their
    ``hi`` values and child nodes, plus the number of adjacent pairs whose ``hi`` values are out of
    order. All bisects are the C ``bisect`` module's; an add or remove moves up to ``r`` pointers
    with one ``memmove`` per list.

    * A class with no inversion (``his`` sorted too: no range of the class strictly inside another,
      e.g. all of one width) is stabbed exactly by two bisects: the ranges with ``lo <= x`` are a
      prefix of the order, those with ``hi >= x`` a suffix, so the children to push are one slice
      of ``kids`` — pushed with one C-level ``extend``, no Python step per range.
    * Otherwise the widest ``hi - lo`` ever filed in the class (``wide``; not lowered by removals, an
      upper bound is enough) bounds the window: a range of the class containing ``x`` has
      ``x - wide[e] <= lo <= x``, so a stab bisects that window and checks ``hi >= x`` there — at
      most about twice the ranges it pushes (every range with ``lo >= x - 2**(e-1)`` in the window
      contains ``x``), plus ``O(log r)``.

    Ranges far above (or below) every value are never scanned. A :class:`sortedcontainers.SortedList`
    per class was used before; its Python-level bisects and ``islice`` cost more per stab.
    """

    __slots__ = ("classes", "child", "wide")

    def __init__(self) -> None:
        self.classes: dict[int | None, list] | None = None  # once there are more than _SMALL
        self.child: dict[tuple, _Node] = {}
        self.wide: dict[int | None, float] = {}

    def add(self, lo: float, hi: float, child: _Node) -> None:
        self.child[(lo, hi)] = child
        if self.classes is not None:
            self._file(lo, hi, child)
        elif len(self.child) > _SMALL:
            self.classes = {}
            self.wide = {}
            for lo_hi, c in self.child.items():
                self._file(lo_hi[0], lo_hi[1], c)

    def _file(self, lo: float, hi: float, child: _Node) -> None:
        e = _width_class(lo, hi)
        cl = self.classes.get(e)  # type: ignore[union-attr]
        if cl is None:
            cl = self.classes[e] = [[], [], [], 0]  # type: ignore[index]
        los, his, kids = cl[0], cl[1], cl[2]
        i = bisect_left(los, (lo, hi))
        if 0 < i < len(his):  # the pair (i - 1, i) stops being adjacent
            cl[3] -= his[i - 1] > his[i]
        if i > 0:
            cl[3] += his[i - 1] > hi
        if i < len(his):
            cl[3] += hi > his[i]
        los.insert(i, (lo, hi))
        his.insert(i, hi)
        kids.insert(i, child)
        if e is not None and hi - lo > self.wide.get(e, -1):
            self.wide[e] = hi - lo

    def discard(self, lo: float, hi: float) -> None:
        del self.child[(lo, hi)]
        classes = self.classes
        if classes is not None:
            if len(self.child) <= _SMALL // 2:
                self.classes = None
                self.wide = {}
            else:
                e = _width_class(lo, hi)
                cl = classes[e]
                los, his, kids = cl[0], cl[1], cl[2]
                i = bisect_left(los, (lo, hi))
                n = len(his)
                if i > 0:
                    cl[3] -= his[i - 1] > hi
                if i + 1 < n:
                    cl[3] -= hi > his[i + 1]
                if 0 < i < n - 1:  # (i - 1, i + 1) become adjacent
                    cl[3] += his[i - 1] > his[i + 1]
                del los[i], his[i], kids[i]
                if not los:
                    del classes[e]
                    self.wide.pop(e, None)

    def stab(self, x: float, stack: list) -> None:
        """Push every child whose [lo, hi] contains x: O(c log r + pushed) for c width classes."""
        if self.classes is None:
            for (lo, hi), c in self.child.items():
                if lo <= x <= hi:
                    stack.append(c)
            return
        wide = self.wide
        for e, (los, his, kids, inversions) in self.classes.items():
            end = bisect_right(los, (x, _INF))  # lo <= x: a prefix of the order
            if not inversions:  # his sorted as well: hi >= x is a suffix
                start = bisect_left(his, x)
                if start < end:
                    stack += kids[start:end]
                continue
            start = 0
            if e is not None:
                w = wide[e]
                try:  # lo >= x - w, with a margin for the rounding of hi - lo and of the subtraction
                    start = bisect_left(los, (x - (w + w * 1e-9 + 4 * math.ulp(x) + 4 * math.ulp(w)), -_INF))
                except OverflowError:  # a huge int: scan every lo <= x
                    pass
            for i in range(start, end):
                if his[i] >= x:
                    stack.append(kids[i])


class _Excluded:
    """The anything-but edges of one node and field: excluded set → child, and per value how many
    sets exclude it. A message value no set excludes satisfies every edge.

    ``split`` (built on first use, dropped by every add / discard here and by every add / remove
    through one of the children, see :meth:`SubscriptionIndex._insert`) separates the children
    that are leaves (one subscription, ending there) from the others: a match (inline, see
    :meth:`SubscriptionIndex.match`) emits the leaves' ids with one C-level ``extend`` when no set
    excludes the message's value (else one comprehension) instead of visiting each leaf."""

    __slots__ = ("child", "hits", "split")

    def __init__(self) -> None:
        self.child: dict[frozenset, _Node] = {}
        self.hits: dict[Hashable, int] = {}
        # (leaf ids, other children, [(excluded, leaf id)], [(excluded, other child)]) or None
        self.split: tuple | None = None

    def add(self, excluded: frozenset, child: _Node) -> None:
        self.child[excluded] = child
        self.split = None
        hits = self.hits
        for k in excluded:
            hits[k] = hits.get(k, 0) + 1

    def discard(self, excluded: frozenset) -> None:
        del self.child[excluded]
        self.split = None
        hits = self.hits
        for k in excluded:
            left = hits[k] - 1
            if left:
                hits[k] = left
            else:
                del hits[k]

    def _split(self) -> tuple:
        """Build :attr:`split`: O(children)."""
        leaf_pairs = []
        other_pairs = []
        for excluded, c in self.child.items():
            if c.count == 1 and c.ends is not None:  # a leaf: ends is its one id
                leaf_pairs.append((excluded, c.ends))
            else:
                other_pairs.append((excluded, c))
        split = self.split = ([i for _, i in leaf_pairs], [c for _, c in other_pairs], leaf_pairs, other_pairs)
        return split


class _Prefixes:
    """The prefix edges of one node and field: prefix → child, and how many prefixes per length."""

    __slots__ = ("child", "lens")

    def __init__(self) -> None:
        self.child: dict[str, _Node] = {}
        self.lens: dict[int, int] = {}

    def add(self, prefix: str, child: _Node) -> None:
        self.child[prefix] = child
        n = len(prefix)
        self.lens[n] = self.lens.get(n, 0) + 1

    def discard(self, prefix: str) -> None:
        del self.child[prefix]
        n = len(prefix)
        left = self.lens[n] - 1
        if left:
            self.lens[n] = left
        else:
            del self.lens[n]

    def prefixes_of(self, s: str, push) -> None:
        """Push the child of every prefix of ``s``. O(distinct prefix lengths)."""
        get = self.child.get
        ls = len(s)
        for n in self.lens:
            if n <= ls:
                c = get(s[:n])
                if c is not None:
                    push(c)


def _children(node: _Node) -> list:
    """The distinct children of ``node``. O(edges at the node)."""
    out = _bucket_nodes(node.exact) if node.exact is not None else []
    for key, per in (node.more or {}).items():
        if key == "g":
            out += _bucket_nodes(per)
        elif key == "+" or key == "-":
            out += per.values()
        else:
            for x in per.values():
                out += x.child.values()
    return out


def _tail(node: _Node) -> tuple:
    """``(id, labels)`` of the one subscription in the subtree of ``node`` (``count == 1``): the
    edge labels from below ``node`` down to where it ends. O(levels x edges at those nodes)."""
    labels = []
    while node.ends is None:
        (node,) = _children(node)  # count == 1: one path, one child per node
        labels.append((node.kind, node.field, node.arg))
    return node.ends, tuple(labels)


def _path(leaf: _Node) -> tuple:
    """``(topic, labels)`` of the subscription ending at ``leaf``, labels from the leaf up. O(L)."""
    labels = []
    node = leaf
    while node.parent is not None:
        labels.append((node.kind, node.field, node.arg))
        node = node.parent
    return node.arg, labels


def _pairs(per: dict, props: Mapping) -> list:
    """The ``(field, entry)`` pairs of ``per`` for the message's fields: O(fields in the message)."""
    get = per.get
    return [(f, e) for f in props if (e := get(f)) is not None]


def _count_values(seen: dict, labels: Iterable[tuple], d: int) -> None:
    """Add ``d`` to ``seen``'s count of every value of the ``values`` labels among ``labels`` (the
    index's field -> {value key: subscriptions}, see :func:`_canonical`). O(values)."""
    for kind, field, arg in labels:
        if kind == _V:
            known = seen.get(field)
            if known is None:
                known = seen[field] = {}
            for k in (arg if type(arg) is frozenset else (arg,)):
                left = known.get(k, 0) + d
                if left:
                    known[k] = left
                else:
                    del known[k]
            if not known:
                del seen[field]


def _bucket_nodes(d: dict) -> list:
    """The distinct nodes of a bucket dict (values: a node or a list of nodes). O(size)."""
    return list({id(c): c for b in d.values() for c in (b if type(b) is list else [b])}.values())


def _bucket_add(d: dict, key: Any, item: Any) -> None:
    cur = d.get(key)
    if cur is None:
        d[key] = item
    elif type(cur) is list:
        cur.append(item)
    else:
        d[key] = [cur, item]


def _bucket_remove(d: dict, key: Any, item: Any) -> None:
    cur = d[key]
    if type(cur) is list:
        cur.remove(item)
        if len(cur) == 1:
            d[key] = cur[0]
    else:
        if cur is not item:
            raise KeyError(key)
        del d[key]


def _ids_add(holder: Any, sub_id: Hashable) -> Any:
    """``ends``-style container: None → id → set of ids."""
    if holder is None:
        return sub_id
    if type(holder) is set:
        holder.add(sub_id)
        return holder
    return {holder, sub_id}


def _ids_remove(holder: Any, sub_id: Hashable) -> Any:
    if type(holder) is set:
        holder.remove(sub_id)
        if len(holder) == 1:
            return next(iter(holder))
        return holder
    if holder is None or holder != sub_id:
        raise KeyError(sub_id)
    return None


def _ids_iter(holder: Any) -> Iterable:
    if holder is None:
        return ()
    if type(holder) is set:
        return holder
    return (holder,)


# ----------------------------------------------------------------------------------- bit blocks
def _bits(positions: list[int], nbytes: int) -> int:
    """The int with exactly the bits ``positions`` set. O(nbytes + positions); a few positions
    (most of a block's excluded values and prefixes): O(positions x nbytes / 30) in C, no buffer."""
    if len(positions) < 8:  # type: ignore[arg-type]
        x = 0
        for p in positions:
            x |= 1 << p
        return x
    ba = bytearray(nbytes)
    for p in positions:
        ba[p >> 3] |= 1 << (p & 7)
    return int.from_bytes(ba, "little")


class _Block:
    """The dense subscriptions of one topic as bitsets (Python ints) over their positions.

    A subscription goes here (instead of the topic's trie) when the pass rates measured on the
    traffic sample make it likely to match (:meth:`SubscriptionIndex._eligible`: every level passes
    at least ``_DENSE`` of the sample; see also :meth:`SubscriptionIndex._make_block`).
    Position ``p`` is bit ``p`` of every int; ``ids[p]`` / ``labels[p]`` its subscription
    (``labels[p]`` is ``None`` once removed: an id may be ``None``), ``alive`` the live
    positions. Per constrained field one tuple ``(field, absent, base, eq, ab, abx, pre, lens, rg)``
    (per *slot*: a subscription with two levels on one field puts the second in the field's slot 1,
    where every position without a second level passes; ``slots`` lists ``(field, j)`` in order):

    * ``absent``: the positions that pass when the message lacks the field (no level on it, or
      ``exists: false``); ``base``: those that pass whatever value it has (no level, ``exists: true``);
    * ``eq``: value key -> positions whose ``values`` contain it; ``ab`` the positions with an
      ``anything_but`` and ``abx`` value key -> those of them excluding it;
    * ``pre``: prefix -> positions, ``lens`` the distinct prefix lengths;
    * ``rg``: ``(cuts, full, part)``: the ranges' endpoints (at most ``_CELLS`` of them as cuts)
      split the line into cells; ``full[i]`` the positions whose range covers cell ``i`` entirely,
      ``part[i]`` the ``(lo, hi, position)`` of those with an endpoint inside it (at most two cells
      per range), tested one by one.

    Tags: ``tags = (untagged positions, tag -> positions)`` or ``None``. A message's answer is
    ``alive`` AND, per field, the OR of what its value passes, then decoded in C
    (:func:`_block_match`). The ints are never updated after the build but
    for ``alive`` (a removal clears the bit): stale bits of dead positions are masked by it. Memory:
    O(B / 8) bytes per distinct value, prefix, excluded value, tag and range cell, B = positions.
    """

    __slots__ = ("topic", "ids", "labels", "alive", "count", "fields", "slots", "tags")

    def __init__(self, topic: str, members: list[tuple]) -> None:
        if not _scan_tried:
            _scan()
        self.topic = topic
        self.ids = [sid for sid, _ in members]
        self.labels = [labels for _, labels in members]
        n = len(members)
        self.count = n
        self.alive = (1 << n) - 1
        nb = (n + 7) >> 3
        # one pass over the members' levels: per slot (a field's j-th level, j > 0 keyed (field, j))
        # [has, eq, ab, abx, pre, ranges, exists true, exists false] positions
        per: dict[Any, tuple] = {}
        tagged: dict[str, list] = {}
        tag_pos: list[int] = []
        for pos, labels in enumerate(self.labels):
            nth: dict | None = None  # several levels on one field: the j-th goes to slot (field, j), ANDed
            for kind, field, arg in labels:
                if kind == _G:
                    tag_pos.append(pos)
                    for t in arg:
                        tagged.setdefault(t, []).append(pos)
                    continue
                if nth is None or field not in nth:
                    slot = field
                    if nth is None:
                        nth = {field: 1}
                    else:
                        nth[field] = 1
                else:
                    j = nth[field]
                    nth[field] = j + 1
                    slot = (field, j)
                sl = per.get(slot)
                if sl is None:
                    sl = per[slot] = ([], {}, [], {}, {}, [], [], [])
                sl[0].append(pos)
                if kind == _R:
                    sl[5].append((arg[0], arg[1], pos))
                elif kind == _A:
                    sl[2].append(pos)
                    abx = sl[3]
                    for k in arg:
                        x = abx.get(k)
                        if x is None:
                            abx[k] = [pos]
                        else:
                            x.append(pos)
                elif kind == _P:
                    x = sl[4].get(arg)
                    if x is None:
                        sl[4][arg] = [pos]
                    else:
                        x.append(pos)
                elif kind == _V:
                    eq = sl[1]
                    for k in (arg if type(arg) is frozenset else (arg,)):
                        eq.setdefault(k, []).append(pos)
                else:
                    sl[6 if arg else 7].append(pos)
        self.tags = None
        if tag_pos:
            self.tags = (self.alive & ~_bits(tag_pos, nb), {t: _bits(ps, nb) for t, ps in tagged.items()})
        fields = []
        self.slots = [(slot, 0) if type(slot) is not tuple else slot for slot in per]
        for (field, _), (has, eq, ab, abx, pre, ranges, et, ef) in zip(self.slots, per.values()):
            none = self.alive & ~_bits(has, nb)
            fields.append((
                field,
                none | _bits(ef, nb),
                none | _bits(et, nb),
                {k: _bits(ps, nb) for k, ps in eq.items()} or None,
                _bits(ab, nb),
                {k: _bits(ps, nb) for k, ps in abx.items()},
                {k: _bits(ps, nb) for k, ps in pre.items()} or None,
                sorted({len(k) for k in pre}),
                _grid(ranges, nb) if ranges else None,
            ))
        self.fields = fields

    def discard(self, pos: int) -> None:
        """Drop the subscription at ``pos``: O(B / 30)."""
        self.alive &= ~(1 << pos)
        self.ids[pos] = None
        self.labels[pos] = None
        self.count -= 1


def _grid(ranges: list[tuple], nb: int) -> tuple:
    """``(cuts, full, part)`` of :class:`_Block` for ranges ``(lo, hi, position)``, one per position.

    Cell 0 is ``(-inf, cuts[0])``, cell ``i`` ``[cuts[i-1], cuts[i])``, the last ``[cuts[-1], inf)``;
    a value's cell is ``bisect_right(cuts, x)``. A range covers cell ``i`` iff ``lo <= cuts[i-1]``
    and ``cuts[i] <= hi``: the cells ``fa..fb`` below; it meets at most its end cells otherwise.
    Built by a sweep over the cells (one OR and one AND-NOT each): O(cells x B / 30 + r log r)."""
    ends = sorted({x for lo, hi, _ in ranges for x in (lo, hi)})
    m = min(_CELLS, len(ranges) // 4 + 1)
    if len(ends) > m:
        step = len(ends) / m
        cuts = [ends[int(i * step)] for i in range(m)]
    else:
        cuts = ends
    ncell = len(cuts) + 1
    starts: list[list] = [[] for _ in range(ncell)]
    stops: list[list] = [[] for _ in range(ncell)]
    part: list[list] = [[] for _ in range(ncell)]
    for lo, hi, pos in ranges:
        fa = bisect_left(cuts, lo) + 1
        fb = bisect_right(cuts, hi) - 1
        if fa <= fb:
            starts[fa].append(pos)
            stops[fb].append(pos)
        a = bisect_right(cuts, lo)  # the cells of lo and hi: tested one by one unless covered
        if not fa <= a <= fb:
            part[a].append((lo, hi, pos))
        if fb + 1 != a:  # hi's cell (fb + 1) is never covered: hi < its end
            part[fb + 1].append((lo, hi, pos))
    full = []
    cur = 0
    for i in range(ncell):
        if starts[i]:
            cur |= _bits(starts[i], nb)
        full.append(cur)
        if stops[i]:
            cur &= ~_bits(stops[i], nb)
    return cuts, full, part


def _block_match(blk: _Block, kmap: dict, nums: dict, strs: dict, tag_list: Any) -> list:
    """The ids of ``blk``'s subscriptions the message passes, by position: O(F x B / 30 + prefix
    lengths + partial range cells) in C-level int operations, where F is the number of fields
    constrained in the block, then the decode: with gmpy2, its set-bit scan (``xmpz.iter_set``,
    O(B / 64) in C) and one list index per output id; without, one ``compress`` over ``ids``
    (O(B) in C, ~6.5 ns a member: ~2x the scan at ~900 outputs of ~8,000 members)."""
    m = _block_bits(blk, kmap, nums, strs, tag_list)
    if not m:
        return []
    if _xmpz is not None:
        ids = blk.ids
        return [ids[i] for i in _xmpz(m).iter_set()]
    return list(compress(blk.ids, bin(m)[:1:-1].encode().translate(_BITS)))


def _block_bits(blk: _Block, kmap: dict, nums: dict, strs: dict, tag_list: Any) -> int:
    """The positions of ``blk`` the message passes, as an int: O(F x B / 30 + prefix lengths +
    partial range cells)."""
    m = blk.alive
    for f, absent, base, eq, ab, abx, pre, lens, rg in blk.fields:
        k = kmap.get(f, kmap)
        if k is kmap:
            m &= absent
        else:
            p = base
            if eq is not None:
                x = eq.get(k)
                if x is not None:
                    p |= x
            if ab:
                x = abx.get(k)
                p |= ab if x is None else ab & ~x
            if pre is not None:
                v = strs.get(f)
                if v is not None:
                    get = pre.get
                    for n in lens:
                        if n > len(v):
                            break
                        x = get(v[:n])
                        if x is not None:
                            p |= x
            if rg is not None:
                v = nums.get(f)
                if v is not None:
                    cuts, full, part = rg
                    i = bisect_right(cuts, v)
                    p |= full[i]
                    for lo, hi, pos in part[i]:
                        if lo <= v <= hi:
                            p |= 1 << pos
            m &= p
        if not m:
            return 0
    tags = blk.tags
    if tags is not None:
        p = tags[0]
        if tag_list:
            get = tags[1].get
            for t in tag_list:
                x = get(t)
                if x is not None:
                    p |= x
        m &= p
    return m


def _message_views(props: Mapping) -> tuple:
    """``(kmap, nums, strs)`` of a message's properties as :meth:`SubscriptionIndex.match` builds
    them: field -> value key, the numbers (not bools, not NaN), the strings. O(fields)."""
    kmap = {f: value_key(v) for f, v in props.items()}
    nums = {f: v for f, v in props.items() if type(v) is not bool and isinstance(v, (int, float)) and v == v}
    strs = {f: v for f, v in props.items() if isinstance(v, str)}
    return kmap, nums, strs


class _no_gc:
    """Pause the cyclic garbage collector (if it runs) for a bulk rebuild: re-inserting 10k
    subscriptions allocates enough tuples and nodes to trigger full collections over the whole
    heap, about half of a re-order's time at 10k (measured 443 ms with, 233 ms without). The
    structures built hold no garbage cycles; collection resumes afterwards."""

    def __enter__(self) -> None:
        self.was = gc.isenabled()
        gc.disable()

    def __exit__(self, *exc: object) -> None:
        if self.was:
            gc.enable()


class SubscriptionIndex:
    """Index of subscriptions answering "which subscriptions match this message?".

    >>> idx = SubscriptionIndex()
    >>> _ = idx.add("s1", "quotes", [{"field": "type", "values": ["A"]},
    ...                              {"field": "stock_code", "values": ["000000", "111111"]}])
    >>> sorted(idx.match("quotes/sh", {"type": "A", "stock_code": "000000"}))
    ['s1']
    >>> sorted(idx.match("quotes/sh", {"type": "B", "stock_code": "000000"}))
    []

    ``add`` of an id that is already present **replaces** that subscription (validation happens
    first, so a rejected ``add`` leaves the old subscription in place). ``remove`` of an unknown id
    raises :class:`KeyError`. Not thread-safe — ``match`` too updates state (the traffic sample it
    learns the level order from, and now and then a re-order): guard with a lock if shared.
    """

    def __init__(self) -> None:
        self._roots: dict[str, _Node] = {}
        self._leaf: dict[Hashable, _Node] = {}
        # field → {value key: number of subscriptions whose path has a ``values`` edge with it}
        self._seen: dict[str, dict[Hashable, int]] = {}
        # learning the order from traffic (see match): the last _SAMPLE messages' properties, the
        # pass rates measured on them at the last re-order, visits that output nothing since then
        self._sample: list[dict] = []
        self._matched = 0
        self._learned: _Learned | None = None
        self._waste = 0
        self._reorders = 0
        self._visits = 0
        # dense subscriptions as bitsets, per topic (:class:`_Block`); id -> (block, position); ids
        # in the trie that qualify for a block (added since the last build); removed block positions
        self._blocks: dict[str, _Block] = {}
        self._inblock: dict[Hashable, tuple] = {}
        self._pending: set = set()
        self._dead = 0
        # id -> (topic, labels): added since the last match and eligible for a block, in no structure
        # yet (their ``values`` counted in ``_seen``); the next match files them (:meth:`_file_staged`)
        self._staged: dict[Hashable, tuple] = {}

    def adopt(self, other: "SubscriptionIndex") -> None:
        """Take over what ``other`` learned from traffic (its message sample, measured pass rates and
        re-order budget), so an index rebuilt from scratch orders the levels it is given as
        ``other`` would, instead of starting from the static guesses. Call it before :meth:`add`.
        Never changes answers. O(sample size)."""
        self._sample = list(other._sample)
        self._matched = other._matched
        self._learned = other._learned
        self._reorders = other._reorders

    # ------------------------------------------------------------------------------ size
    def __len__(self) -> int:
        """Number of subscriptions. O(1)."""
        return len(self._leaf) + len(self._inblock) + len(self._staged)

    def __contains__(self, sub_id: Hashable) -> bool:
        """True when ``sub_id`` is indexed. O(1)."""
        return sub_id in self._leaf or sub_id in self._inblock or sub_id in self._staged

    def topics(self) -> list[str]:
        """The topics that have at least one subscription. O(topics)."""
        return list({**dict.fromkeys(self._roots), **dict.fromkeys(self._blocks),
                     **dict.fromkeys(topic for topic, _ in self._staged.values())})

    # ------------------------------------------------------------------------------ add
    def add(self, sub_id: Hashable, topic: str, conditions: Any, tags: Any = None) -> list[dict]:
        """Index a subscription (replacing one with the same id) and return its normalised conditions.

        Complexity: O(L log L + sum over levels of (number of values + log r)) where L is the number
        of levels and r the number of prefix / range edges at a node; independent of how many other
        subscriptions are indexed (amortised dict costs; a range's width class list moves up to r pointers in C).
        A subscription that qualifies for a bit block (:meth:`_eligible`) is only staged: the next
        :meth:`match` builds the blocks from every staged one when they are many (a bulk build: they
        never enter the trie), else puts them in the trie to wait for a block (amortised O(1)).
        Raises :class:`ValueError` for a bad topic, malformed conditions or bad tags, or an id that is
        None or not hashable.
        """
        validate_topic(topic)
        levels = validate_conditions(conditions)
        tag_tuple = validate_tags(tags)
        try:
            hash(sub_id)
        except TypeError:
            raise ValueError(f"subscription id must be hashable, got {sub_id!r}") from None
        if sub_id is None:  # the trie's leaves use None for "no subscription ends here"
            raise ValueError("subscription id must not be None")
        labels = _labels(levels)
        if tag_tuple:
            labels.append((_G, _TAGF, frozenset(tag_tuple)))
        if sub_id in self:
            self.remove(sub_id)
        if self._eligible(labels):  # a block's bits do not depend on the level order: not sorted
            self._staged[sub_id] = (topic, tuple(labels))  # filed by the next match (_file_staged)
            _count_values(self._seen, labels, 1)
        else:
            self._insert(sub_id, topic, _canonical(None, self._seen, self._learned, labels))
        return levels

    def _expected(self, labels: tuple) -> float:
        """The product of the levels' measured pass rates: O(L) after the rates are memoised."""
        p = 1.0
        for label in labels:
            p *= self._learned.pass_rate(label)  # type: ignore[union-attr]
        return p

    def _eligible(self, labels: list[tuple] | tuple) -> bool:
        """True when a subscription belongs in its topic's bit block. Before any traffic: it has
        levels and each one's static estimate (:func:`_static_estimate`) is at least ``_STATIC``
        (re-checked when it is moved, see :meth:`_rebuild_blocks`). Once traffic was measured: it
        has levels, every level passed at least one sampled message (so the
        product of the pass rates, its expected match rate with levels taken as independent, is not
        0) and the least passing level passes at least ``_DENSE`` of them. In the trie such a
        subscription costs about a visit whenever its first (least passing) level passes; in a
        block one bit test (~1/100 of a visit) per message. O(L) after the rates are memoised."""
        if not labels:
            return False
        learned = self._learned
        if learned is None:  # no traffic yet: the static estimates (see _canonical), re-checked by _rebuild_blocks
            seen = self._seen
            for label in labels:
                if _static_estimate(label, seen) < _STATIC:
                    return False
            return True
        # every level passes some sampled message (the product of the rates is not 0) and at least
        # _DENSE of them: compared as counts of sample messages, the memo read inline
        get = learned.memo.get
        need = _DENSE * (learned.size + 1)
        for label in labels:
            h = get(label)
            if h is None:
                h = learned.hits(label)
            if not h or h < need:
                return False
        return True

    def _insert(self, sub_id: Hashable, topic: str, labels: list[tuple]) -> None:
        node = self._roots.get(topic)
        if node is None:
            node = self._roots[topic] = _Node(None, _ROOT, None, topic)
        node.count += 1
        node.tail = None
        seen = self._seen
        for kind, field, arg in labels:
            parent = node
            node = self._child(node, kind, field, arg)
            node.count += 1
            node.tail = None
            if kind == _A:  # the child may stop being a leaf: its parent's leaf split is stale
                parent.more["a"][field].split = None  # type: ignore[index]
            if kind == _V:
                known = seen.get(field)
                if known is None:
                    known = seen[field] = {}
                for k in (arg if type(arg) is frozenset else (arg,)):
                    known[k] = known.get(k, 0) + 1
        node.ends = _ids_add(node.ends, sub_id)
        self._leaf[sub_id] = node

    # ------------------------------------------------------------------------------ re-order
    def reorder(self) -> None:
        """Re-index every subscription with its levels ordered by the pass rates measured on the
        last matched messages (:class:`_Learned`); :meth:`match` calls it by itself (see there).
        Answers never change, only which nodes a message visits. O(n x L log L) plus O(S x fields).
        The cyclic garbage collector is paused meanwhile (:func:`_no_gc`).
        """
        with _no_gc():
            self._reorder()

    def _reorder(self) -> None:
        """The trie is rebuilt with the new order; a block is kept as it is unless more than
        ``B >> _KEEP_SHIFT`` of its B members (``_BLOCK_MIN`` at least) leave or join it: members
        that no longer qualify or that no sampled message matched (:meth:`_evict`) leave it as dead
        bits, subscriptions that now qualify wait in the trie (``_pending``). A block's bits do not
        depend on the level order, so rebuilding an unchanged block (about half a re-order's time at
        10k) buys nothing; a changed one is rebuilt, compact, with every newcomer in it (dead bits
        and waiting broad subscriptions cost every message)."""
        learned = self._learned = _Learned(self._sample) if self._sample else None
        subs = [(sid,) + _path(leaf) for sid, leaf in self._leaf.items()]
        subs += [(sid, topic, list(labels)) for sid, (topic, labels) in self._staged.items()]
        self._roots, self._leaf, self._seen, self._staged, self._pending = {}, {}, {}, {}, set()
        rest: list[tuple] = []
        dense: dict[str, list] = {}
        for sid, topic, labels in subs:
            if self._eligible(labels):
                dense.setdefault(topic, []).append((sid, tuple(labels)))
            else:
                rest.append((sid, topic, labels))
        for topic, blk in list(self._blocks.items()):
            rest += [(sid, topic, list(labels)) for sid, labels in self._evict(blk)]
            join = dense.pop(topic, [])
            if self._blocks.get(topic) is not blk:  # emptied: a new block of the joiners (below)
                if join:
                    dense[topic] = join
                continue
            if len(join) + len(blk.ids) - blk.count > max(_BLOCK_MIN, blk.count >> _KEEP_SHIFT):
                # the members left were checked against the sample by _evict: only the joiners are
                members = self._common_fields(topic, self._drop_block(blk) + self._vet(topic, join))
                if members:
                    new = _Block(topic, members)
                    self._adopt_block(new, members)
            else:
                for sid, labels in join:  # a few: they wait in the trie for the next block rebuild
                    self._insert(sid, topic, _canonical(None, self._seen, learned, list(labels)))
                    self._pending.add(sid)
        for topic, members in dense.items():
            self._make_block(topic, members)
        for sid, topic, labels in rest:
            self._insert(sid, topic, _canonical(None, self._seen, learned, labels))
        self._waste = 0
        self._reorders += 1

    def _evict(self, blk: _Block) -> list[tuple]:
        """Clear the bits of ``blk``'s members that no longer qualify (:meth:`_eligible`) and, with
        a traffic sample, of those expected to match ``_EXPECT`` sampled messages and matching none
        (as :meth:`_make_block`); return them as ``(id, labels)``. O(B x L + sample x F x B / 30)."""
        out = []
        labels_of = blk.labels
        for pos, labels in enumerate(labels_of):
            if labels is not None and not self._eligible(labels):
                out.append((blk.ids[pos], labels))
                self._discard(blk, pos)
        if self._learned is not None and blk.count:
            hit = self._sample_hits(blk)
            if hit != blk.alive:
                size = len(self._learned.views)
                for pos, labels in enumerate(labels_of):
                    if labels is not None and not hit >> pos & 1 and self._expected(labels) * size >= _EXPECT:
                        out.append((blk.ids[pos], labels))
                        self._discard(blk, pos)
        return out

    def _vet(self, topic: str, members: list[tuple]) -> list[tuple]:
        """The ``members`` :meth:`_make_block` would keep in a block (the sample check), the others
        put in the trie. O(B x (labels + sample x F / 30))."""
        if not members or self._learned is None:
            return members
        return self._vetted(topic, members)[0]

    def _vetted(self, topic: str, members: list[tuple]) -> tuple[list[tuple], _Block]:
        """The sample check of :meth:`_make_block` and :meth:`_vet`: the ``members`` kept (a member no
        sampled message passes goes to the trie when it was expected to match at least ``_EXPECT``
        of them) and the block of the kept ones (``members`` non-empty)."""
        blk = _Block(topic, members)
        if self._learned is None:
            return members, blk
        hit = self._sample_hits(blk)
        if hit == blk.alive:
            return members, blk
        keep = []
        size = len(self._learned.views)
        for pos, (sid, labels) in enumerate(members):
            if hit >> pos & 1 or self._expected(labels) * size < _EXPECT:
                keep.append((sid, labels))
            else:
                self._insert(sid, topic, _canonical(None, self._seen, self._learned, list(labels)))
        if not keep or len(keep) == len(members):  # none kept, or every member: the block as built
            return keep, blk
        return keep, _Block(topic, keep)

    def _discard(self, blk: _Block, pos: int) -> None:
        """Clear the member at ``pos`` of ``blk`` (a dead bit; the block goes with its last member)."""
        del self._inblock[blk.ids[pos]]
        blk.discard(pos)
        self._dead += 1
        if not blk.count:
            del self._blocks[blk.topic]
            self._dead -= len(blk.ids)

    def _drop_block(self, blk: _Block) -> list[tuple]:
        """Take ``blk`` out of the index; return its live members ``(id, labels)``."""
        members = [(sid, labels) for sid, labels in zip(blk.ids, blk.labels) if labels is not None]
        del self._blocks[blk.topic]
        self._dead -= len(blk.ids) - blk.count
        inblock = self._inblock
        for sid, _ in members:
            del inblock[sid]
        return members

    def _sample_hits(self, blk: _Block) -> int:
        """The positions of ``blk`` some message of the traffic sample (as of the last re-order: the
        one the pass rates were measured on) passes. O(sample x F x B / 30)."""
        hit = 0
        alive = blk.alive
        for kmap, nums, strs, tags in self._learned.views:  # type: ignore[union-attr]
            hit |= _block_bits(blk, kmap, nums, strs, tags)
            if hit == alive:
                break
        return hit

    def _make_block(self, topic: str, members: list[tuple]) -> None:
        """Build ``topic``'s block of ``members`` (``(id, labels)``, each eligible), keeping out the
        ones no message of the traffic sample matches: levels that each pass often can still never
        pass together (correlated fields), which no per-level rate shows; those go to the trie,
        where such subscriptions share paths. Only when the sample had room for evidence: a member
        expected (levels taken as independent) to match at least ``_EXPECT`` sampled messages and
        matching none; a rarer one missing the sample is no sign of it and stays.
        O(B x (labels + sample x F / 30))."""
        members = self._common_fields(topic, members)  # out: members with a level on a field few constrain
        if not members:
            return
        members, blk = self._vetted(topic, members)
        if members:
            self._adopt_block(blk, members)

    def _adopt_block(self, blk: _Block, members: list[tuple]) -> None:
        self._blocks[blk.topic] = blk
        inblock = self._inblock
        for pos, (sid, _) in enumerate(members):
            inblock[sid] = (blk, pos)

    def _common_fields(self, topic: str, members: list[tuple]) -> list[tuple]:
        """The ``members`` whose every level is on a field that at least ``max(4, len(members) /
        _SLOT_MIN)`` members constrain; the others go (back) to the trie. A block costs a few Python
        steps per constrained field and message whatever its members, so 5,000 subscriptions each on
        a field of its own (``exists: true`` on fields messages never carry) would cost 5,000 steps a
        message there and about nothing in the trie. Before any traffic and after it: ``exists:
        false`` on fields no message carries passes every sampled message (review_b: a tenant's 100
        subscriptions of 64 such levels were 6,400 slots). O(B x L)."""
        per: dict = {}
        get = per.get
        for _, labels in members:
            for label in labels:
                f = label[1]
                per[f] = get(f, 0) + 1
        least = max(4, len(members) // _SLOT_MIN)
        rare = {f for f, c in per.items() if c < least}
        if not rare:  # every field common: all stay
            return members
        keep = []
        for sid, labels in members:
            if all(label[1] not in rare for label in labels):
                keep.append((sid, labels))
            else:
                self._insert(sid, topic, _canonical(None, self._seen, self._learned, list(labels)))
        return keep

    def _rebuild_blocks(self) -> None:
        """Move the pending subscriptions out of the trie into their topics' blocks and rebuild the
        blocks they join or that hold dead positions (no re-measuring: see :meth:`reorder`).
        O(pending x L + size of the rebuilt blocks); the cyclic garbage collector paused."""
        with _no_gc():
            self._rebuild_blocks_now()

    def _file_staged(self) -> None:
        """Put the staged subscriptions in the trie, each waiting for a block (``_pending``): a few
        added since the last match, too few for a block rebuild. O(staged x L)."""
        staged, self._staged = self._staged, {}
        seen = self._seen
        learned = self._learned
        for sid, (topic, labels) in staged.items():
            _count_values(seen, labels, -1)  # counted again by _insert
        for sid, (topic, labels) in staged.items():
            # the order (and, before any traffic, the static estimates) with every value seen since
            labels = _canonical(None, seen, learned, list(labels))
            self._insert(sid, topic, labels)
            if learned is not None or self._eligible(labels):
                self._pending.add(sid)

    def _rebuild_blocks_now(self) -> None:
        moved: dict[str, list] = {}
        static = self._learned is None
        staged, self._staged = self._staged, {}
        seen = self._seen
        # the static estimates moved (more values seen): re-checked with every staged one counted
        late = [sid for sid, (_, labels) in staged.items() if not self._eligible(labels)] if static else ()
        for sid, (topic, labels) in staged.items():
            _count_values(seen, labels, -1)
        for sid in late:
            topic, labels = staged.pop(sid)
            self._insert(sid, topic, _canonical(None, seen, None, list(labels)))
        for sid, (topic, labels) in staged.items():
            moved.setdefault(topic, []).append((sid, labels))
        for sid in self._pending:
            topic, labels = _path(self._leaf[sid])
            if static and not self._eligible(labels):  # the static estimates moved (more values seen)
                continue
            self._trie_remove(sid)
            moved.setdefault(topic, []).append((sid, tuple(labels)))
        self._pending = set()
        for topic in list(self._blocks):
            blk = self._blocks[topic]
            if topic in moved or blk.count < len(blk.ids):
                moved[topic] = self._drop_block(blk) + moved.get(topic, [])
        for topic, members in moved.items():
            if members:
                self._make_block(topic, members)

    def _child(self, node: _Node, kind: str, field: str, arg: Any) -> _Node:
        """Find or create the child of ``node`` along the edge ``(kind, field, arg)``."""
        if kind == _V:
            exact = node.exact
            if exact is None:
                exact = node.exact = {}
            multi = type(arg) is frozenset
            some = next(iter(arg)) if multi else arg
            cur = exact.get((field, some))
            for c in (cur if type(cur) is list else () if cur is None else (cur,)):
                if c.field == field and c.arg == arg:
                    return c
            child = _Node(node, kind, field, arg)
            for v in (arg if multi else (arg,)):
                _bucket_add(exact, (field, v), child)
            return child

        more = node.more
        if more is None:
            more = node.more = {}
        if kind == _G:
            by_tag = more.get("g")
            if by_tag is None:
                by_tag = more["g"] = {}
            cur = by_tag.get(next(iter(arg)))
            for c in (cur if type(cur) is list else () if cur is None else (cur,)):
                if c.arg == arg:
                    return c
            child = _Node(node, kind, field, arg)
            for t in arg:
                _bucket_add(by_tag, t, child)
            return child
        if kind == _P:
            per = more.setdefault("p", {})
            pf = per.get(field)
            if pf is None:
                pf = per[field] = _Prefixes()
            child = pf.child.get(arg)
            if child is None:
                child = _Node(node, kind, field, arg)
                pf.add(arg, child)
            return child
        if kind == _R:
            per = more.setdefault("r", {})
            rg = per.get(field)
            if rg is None:
                rg = per[field] = _Ranges()
            child = rg.child.get(arg)
            if child is None:
                child = _Node(node, kind, field, arg)
                rg.add(arg[0], arg[1], child)
            return child
        if kind == _A:
            per = more.setdefault("a", {})
            sets = per.get(field)
            if sets is None:
                sets = per[field] = _Excluded()
            child = sets.child.get(arg)
            if child is None:
                child = _Node(node, kind, field, arg)
                sets.add(arg, child)
            return child
        # exists
        per = more.setdefault("+" if arg else "-", {})
        child = per.get(field)
        if child is None:
            child = per[field] = _Node(node, kind, field, arg)
        return child

    # ------------------------------------------------------------------------------ remove
    def remove(self, sub_id: Hashable) -> None:
        """Remove a subscription; :class:`KeyError` if unknown.

        Complexity: O(L * (values per level + log r)): walks the subscription's path back to its
        root through parent links and unlinks nodes that no longer carry any subscription; a
        subscription in a bit block: O(B / 30) (its bit cleared; the block is rebuilt by a later
        match once enough are gone, amortised O(1) per removal).
        """
        staged = self._staged.pop(sub_id, None)
        if staged is not None:  # O(L): not filed anywhere yet
            _count_values(self._seen, staged[1], -1)
            return
        where = self._inblock.get(sub_id)
        if where is not None:  # O(B / 30): clear its bit; a later match rebuilds the block
            self._discard(*where)
            return
        self._pending.discard(sub_id)
        self._trie_remove(sub_id)

    def _trie_remove(self, sub_id: Hashable) -> None:
        leaf = self._leaf.pop(sub_id)  # KeyError for an unknown id
        leaf.ends = _ids_remove(leaf.ends, sub_id)
        node: _Node | None = leaf
        seen = self._seen
        while node is not None:
            node.count -= 1
            node.tail = None
            parent = node.parent
            if node.kind == _A:  # the child may become a leaf (or go): its parent's leaf split is stale
                parent.more["a"][node.field].split = None  # type: ignore[union-attr]
            if node.kind == _V:
                field, arg = node.field, node.arg
                known = seen[field]
                for k in (arg if type(arg) is frozenset else (arg,)):
                    left = known[k] - 1
                    if left:
                        known[k] = left
                    else:
                        del known[k]
                if not known:
                    del seen[field]
            if node.count == 0:
                self._unlink(node)
            node = parent

    def _unlink(self, node: _Node) -> None:
        parent = node.parent
        kind, field, arg = node.kind, node.field, node.arg
        node.parent = None
        if parent is None:
            del self._roots[arg]
            return
        if kind == _V:
            exact = parent.exact
            for v in (arg if type(arg) is frozenset else (arg,)):
                _bucket_remove(exact, (field, v), node)  # type: ignore[arg-type]
            if not exact:
                parent.exact = None
            return
        more = parent.more
        if kind == _G:
            per = more["g"]  # type: ignore[index]
            for t in arg:
                _bucket_remove(per, t, node)
            key = "g"
        elif kind == _P:
            per = more["p"]  # type: ignore[index]
            pf = per[field]
            pf.discard(arg)
            if not pf.child:
                del per[field]
            key = "p"
        elif kind == _R:
            per = more["r"]  # type: ignore[index]
            rg = per[field]
            rg.discard(arg[0], arg[1])
            if not rg.child:
                del per[field]
            key = "r"
        elif kind == _A:
            per = more["a"]  # type: ignore[index]
            per[field].discard(arg)
            if not per[field].child:
                del per[field]
            key = "a"
        else:
            key = "+" if arg else "-"
            per = more[key]  # type: ignore[index]
            del per[field]
        if not per:
            del more[key]  # type: ignore[index]
            if not more:
                parent.more = None

    # ------------------------------------------------------------------------------ match
    def match(self, topic: str, properties: Mapping[str, Any] | None, tags: Iterable[str] = ()) -> list:
        """Return the ids of the subscriptions matching a message, each once, in no set order.

        ``topic`` is the topic the message was published on (its ancestors' subscriptions are
        included), ``properties`` the message's field → JSON value mapping, ``tags`` its tags.

        Complexity: O(T + K + sum over visited nodes of min(F, E)) plus the non-hash terms described
        in the module docstring, where T is the topic depth, K the number of message fields, F the
        number of message fields, E the number of exact edges at the node, and a node is visited
        only when the message satisfies every level on its path. For exact-value levels that is
        O(T + K + levels x matching paths) — independent of the number of subscriptions. Plus, per
        bit block of the topic and its ancestors, O(F x B / 30 + B) C-level steps for its B
        members and F constrained fields (:func:`_block_match`), and now and then a rebuild of the
        blocks after changes (amortised O(1) per add / remove, see :meth:`_rebuild_blocks`).
        Also records the message's properties and tags (a 256-message sample) and, when visits
        without output have exceeded a doubling budget, calls :meth:`reorder` (O(n) once in a
        while, amortised against the waste it removes; see the module docstring).
        """
        roots = self._roots
        blocks = self._blocks
        if self._staged or self._pending or self._dead:
            if len(self._staged) + len(self._pending) + self._dead > max(_BLOCK_MIN, len(self._inblock) >> 1):
                self._rebuild_blocks()
                blocks = self._blocks
            elif self._staged:
                self._file_staged()
        if not roots and not blocks:
            return []
        starts = []
        bstarts = []
        pos = topic.find("/")
        while pos != -1:
            r = roots.get(topic[:pos])
            if r is not None:
                starts.append(r)
            if blocks:
                b = blocks.get(topic[:pos])
                if b is not None:
                    bstarts.append(b)
            pos = topic.find("/", pos + 1)
        r = roots.get(topic)
        if r is not None:
            starts.append(r)
        if blocks:
            b = blocks.get(topic)
            if b is not None:
                bstarts.append(b)
        if not starts and not bstarts:
            return []

        props = properties if properties is not None else {}
        mkeys = [(f, value_key(v)) for f, v in props.items()]
        nkeys = len(mkeys)
        kmap = dict(mkeys)  # field → value key (anything-but)
        nums = {f: v for f, v in props.items()  # range candidates: numbers, not bools, not NaN
                if type(v) is not bool and isinstance(v, (int, float)) and v == v}
        strs = {f: v for f, v in props.items() if isinstance(v, str)}  # prefix candidates
        keyset = None  # built on demand
        tag_list = tags if isinstance(tags, (list, tuple)) else list(tags) if tags else ()

        out: list = []
        waste = 0  # visits that output nothing (learning, below)
        for b in bstarts:  # the dense subscriptions: bitsets (see _Block)
            found = _block_match(b, kmap, nums, strs, tag_list)
            out += found
            waste += (b.count - len(found)) >> _WASTE_SHIFT  # a member ~12 ns, a node visit ~1.5 µs
        stack = starts
        push = stack.append
        pop = stack.pop
        while stack:
            n = pop()
            t = n.tail
            if t is not None or n.count == 1:
                # One subscription below (a leaf: no labels left): test its remaining levels
                # directly instead of visiting a node per level (the same predicates as the edges
                # below, see _tail), and emit its id.
                if t is None:
                    t = n.tail = _tail(n)
                for kind, f, arg in t[1]:
                    if kind == "a":
                        k = kmap.get(f, kmap)
                        if k is kmap or k in arg:
                            break
                    elif kind == "e":
                        if (f in props) is not arg:
                            break
                    elif kind == "v":
                        k = kmap.get(f, kmap)
                        if k is kmap or (k not in arg if type(arg) is frozenset else k != arg):
                            break
                    elif kind == "g":
                        if not tag_list or arg.isdisjoint(tag_list):
                            break
                    elif kind == "r":
                        v = nums.get(f)
                        if v is None or not arg[0] <= v <= arg[1]:
                            break
                    else:  # prefix
                        v = strs.get(f)
                        if v is None or not v.startswith(arg):
                            break
                else:
                    out.append(t[0])
                    continue
                waste += 1
                continue
            e = n.ends
            if e is not None:
                if type(e) is set:
                    out.extend(e)
                else:
                    out.append(e)
            else:
                waste += 1
            ex = n.exact
            if ex is not None:
                if len(ex) < nkeys:
                    if keyset is None:
                        keyset = set(mkeys)
                    for k, b in ex.items():
                        if k in keyset:
                            if type(b) is list:
                                stack.extend(b)
                            else:
                                push(b)
                else:
                    get = ex.get
                    for k in mkeys:
                        b = get(k)
                        if b is not None:
                            if type(b) is list:
                                stack.extend(b)
                            else:
                                push(b)
            more = n.more
            if more is None:
                continue
            for key, per in more.items():  # only the kinds present at this node
                if key == "g":  # tag sets: a node reachable under several of the message's tags once
                    if tag_list:
                        if len(tag_list) == 1:
                            b = per.get(tag_list[0])
                            if b is not None:
                                if type(b) is list:
                                    stack.extend(b)
                                else:
                                    push(b)
                        else:
                            found: dict = {}
                            for t in tag_list:
                                b = per.get(t)
                                if b is not None:
                                    if type(b) is list:
                                        for c in b:
                                            found[id(c)] = c
                                    else:
                                        found[id(b)] = b
                            stack.extend(found.values())
                elif key == "r":
                    if nums:
                        for f, rg in (per.items() if len(per) <= len(nums) else _pairs(per, nums)):
                            v = nums.get(f)
                            if v is not None:
                                if rg.classes is None:  # a few ranges: scan inline
                                    for (lo, hi), c in rg.child.items():
                                        if lo <= v <= hi:
                                            push(c)
                                else:
                                    rg.stab(v, stack)
                elif key == "a":
                    for f, sets in (per.items() if len(per) <= nkeys else _pairs(per, kmap)):
                        k = kmap.get(f, kmap)
                        if k is not kmap:
                            split = sets.split  # inline: no call per edge set
                            if split is None:
                                split = sets._split()
                            if k in sets.hits:
                                out += [i for excluded, i in split[2] if k not in excluded]
                                stack += [c for excluded, c in split[3] if k not in excluded]
                            else:  # no set excludes the value: every leaf id, every other child
                                out += split[0]
                                stack += split[1]
                elif key == "p":
                    if strs:
                        for f, pf in (per.items() if len(per) <= len(strs) else _pairs(per, strs)):
                            v = strs.get(f)
                            if v is not None:
                                pf.prefixes_of(v, push)
                elif key == "+":
                    if len(per) <= nkeys:
                        for f, c in per.items():
                            if f in props:
                                push(c)
                    else:
                        for f in props:
                            c = per.get(f)
                            if c is not None:
                                push(c)
                else:  # "-"
                    for f, c in per.items():
                        if f not in props:
                            push(c)
        # Learn from traffic: keep the last _SAMPLE messages' properties; count visits that output
        # nothing. When that waste exceeds a budget (proportional to n, doubling after each
        # re-order so re-orders cost O(waste) amortised), re-order by measured pass rates.
        self._matched += 1
        self._visits = len(out) + waste  # the last match's work: ids output + visits without output (tests count it)
        sample = self._sample
        seen_props = dict(props)
        if tag_list:
            seen_props[_TAGF] = frozenset(tag_list)
        if len(sample) < _SAMPLE:
            sample.append(seen_props)
        else:
            sample[self._matched % _SAMPLE] = seen_props
        if waste > 0:
            self._waste += waste
            if (self._waste > max(_MIN_WASTE, 2 * len(self._leaf)) << min(self._reorders, 30)
                    and len(sample) >= _MIN_SAMPLE):
                self.reorder()
        return out

    # ------------------------------------------------------------------------------ invariants
    def _check(self) -> None:
        """Verify every invariant of the structure; raise AssertionError on the first violation.
        O(size of the index). The checks live in :mod:`matcher._invariants` (tests only: not
        compiled with this module on a cold start)."""
        from matcher._invariants import check

        check(self)
