"""Pure rules of a replay (issue 18.1; docs/design.md "Replay"): no AWS, no Spark.

* :func:`parse_request` — ``POST /v1/replays``'s body → :class:`ReplayRequest` (400 otherwise).
* :class:`Filter` — the subscription condition language (levels and tags, API.md "Subscriptions")
  evaluated by the matcher layer's own :class:`matcher.index.SubscriptionIndex` on one message's
  properties and tags: the same semantics as a subscription by construction, not a re-implementation.
  :meth:`Filter.matches_json` takes the properties as the archiver wrote them (JSON text), so the
  typed values (``1`` vs ``"1"`` vs ``true``) survive the trip through the lake.
* :func:`field_needles` — for a cheap pre-filter in Spark: every field a level requires present,
  spelled as it appears in the archiver's JSON (``"field":``); a row lacking one cannot match.
* :func:`hour_bounds` — the ``dt``/``hour`` partitions a time range reads.
* :func:`copy_id` — the id of the copy of ``(topic, queue, offset)``: a retried or restarted copy
  carries the same id, and the produce's id dedup drops it.
* :func:`next_chunk`, :func:`pace_seconds` — the copier's cursor step and its rate.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lakeq.common.errors import BadRequest
from lakeq.common.names import check_name, check_topic, log_name
from lakeq.contract.validation import known_fields

MAX_RANGE_MS = 400 * 24 * 3_600_000  # the lake keeps raw/ 400 days
MAX_RATE = 1_000  # messages per second a copier may be asked for (REPLAY.md: 1..1000)
DEFAULT_RATE = 100
SCRATCH_DAYS = 30  # the lake bucket's expire-replays rule: replays/<id>/ (manifest, selection.json) goes then
MAX_COPY_MS = SCRATCH_DAYS * 24 * 3_600_000 // 2  # a copy planned longer (found / rate) fails at selection


@dataclass(frozen=True)
class Filter:
    """Levels (``conditions``) and ``tags`` (any-of), validated by the matcher layer."""
    conditions: tuple = ()
    tags: tuple = ()

    @staticmethod
    def of(raw: Any) -> "Filter":
        """``{"conditions": [...], "tags": [...]}`` (both optional) or None → a Filter. ValueError
        with the matcher's message on a bad level."""
        from matcher.index import validate_conditions, validate_tags

        if raw is None:
            return Filter()
        if not isinstance(raw, Mapping):
            raise ValueError("filter must be an object with 'conditions' and/or 'tags'")
        unknown = sorted(str(k) for k in raw if k not in ("conditions", "tags"))
        if unknown:
            raise ValueError(f"filter: unknown key(s) {', '.join(unknown)}")
        conds = validate_conditions(raw.get("conditions"))
        return Filter(tuple(json.dumps(c, sort_keys=True) for c in conds), validate_tags(raw.get("tags")))

    @property
    def levels(self) -> list[dict]:
        return [json.loads(c) for c in self.conditions]

    @property
    def empty(self) -> bool:
        return not self.conditions and not self.tags

    def to_json(self) -> dict:
        return {"conditions": self.levels, "tags": list(self.tags)}

    def index(self):
        """A one-subscription index on the topic ``"r"``: ``match("r", …)`` is this filter."""
        from matcher.index import SubscriptionIndex

        ix = SubscriptionIndex()
        ix.add(0, "r", self.levels, list(self.tags) or None)
        return ix

    def predicate(self):
        """``(properties: dict | None, tags: list) -> bool``, the index built once."""
        ix = self.index()
        return lambda props, tags: bool(ix.match("r", props or {}, tags or ()))

    def json_predicate(self):
        """``(properties JSON text | None, tags) -> bool``: what the Spark job calls per row."""
        p = self.predicate()

        def f(props_json: str | None, tags: Sequence[str] | None) -> bool:
            props = json.loads(props_json) if props_json else {}
            return p(props if isinstance(props, dict) else {}, list(tags or ()))
        return f


def _spelled(v: Any) -> str | None:
    """``v`` as the lake's JSON text spells it, when that is certain: the archiver writes compact JSON
    with ``ensure_ascii=False`` and Spark's reader re-writes an object's text with Jackson, which
    agrees except for ``\\uXXXX`` escapes (hex case) and for a character beyond U+FFFF (an emoji),
    which Jackson writes as two ``\\u`` escapes where ``json.dumps`` writes it as is: those are left
    out (a needle spelled the other way would drop every row holding the value).

    >>> _spelled("é"), _spelled("a\\nb"), _spelled("\\u0001"), _spelled("😀"), _spelled("\\ud800")
    ('"é"', '"a\\\\nb"', None, None, None)
    """
    t = json.dumps(v, ensure_ascii=False)
    if "\\u" in t or any(ord(c) > 0xFFFF or 0xD800 <= ord(c) <= 0xDFFF for c in t):
        return None
    return t


def field_needles(f: Filter) -> list[list[str]]:
    """A pre-filter for Spark, as substrings of a row's properties text: per level, a list of
    needles of which the text must contain one (``[]`` levels are left out). Every level but
    ``exists: false`` needs its field present (``"field":``); a ``values`` level of strings needs
    ``"field":"value"`` for one of its values, a ``prefix`` level ``"field":"prefix``. Only a
    necessary condition (a value may contain the text): the matcher decides.

    >>> field_needles(Filter.of({"conditions": [{"field": "sym", "values": ["A", "B"]},
    ...                                          {"field": "x", "exists": False}]}))
    [['"sym":"A"', '"sym":"B"']]
    >>> field_needles(Filter.of({"conditions": [{"field": "px", "range": [1, 2]}, {"field": "s", "prefix": "ab"}]}))
    [['"px":'], ['"s":"ab']]
    """
    out = []
    for lv in f.levels:
        if lv.get("exists") is False:
            continue
        key = _spelled(lv["field"])
        if key is None:
            continue
        if "values" in lv and all(isinstance(v, str) for v in lv["values"]):
            vals = [_spelled(v) for v in lv["values"]]
            if all(v is not None for v in vals):
                out.append(sorted(f"{key}:{v}" for v in vals))
                continue
        if "prefix" in lv:
            pre = _spelled(lv["prefix"])
            if pre is not None:
                out.append([f"{key}:{pre[:-1]}"])  # without the closing quote
                continue
        out.append([f"{key}:"])
    return out


def hour_bounds(from_ms: int, to_ms: int) -> tuple[str, str]:
    """The first and last ``"YYYY-MM-DD HH"`` partition (UTC) holding ``from_ms <= t < to_ms``.

    >>> hour_bounds(1767225600000, 1767232800000)
    ('2026-01-01 00', '2026-01-01 01')
    """
    def key(ms: int) -> str:
        return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).strftime("%Y-%m-%d %H")
    return key(from_ms), key(max(from_ms, to_ms - 1))


def copy_id(topic: str, queue: int, offset: int, inc: int = 0) -> str:
    """The id of the replayed copy of message ``(topic, inc, queue, offset)``: deterministic, ≤ 200
    characters (``MAX_ID_LEN``), so a copy produced twice (a copier restarted between its produce
    and its cursor write) is dropped by the produce's id dedup. ``inc``: the topic's incarnation
    (the lake's ``inc``; the hash is of its log name, so incarnation 0 keeps the ids it always had
    and a topic made again, whose offsets restart at 0, never shares an id with the deleted one).

    >>> copy_id("quotes/sh", 3, 17)
    'rp-3-17-84126f9b10e3e35d'
    >>> copy_id("quotes/sh", 3, 17, 0) == copy_id("quotes/sh", 3, 17) != copy_id("quotes/sh", 3, 17, 1)
    True
    """
    h = hashlib.sha256(log_name(topic, inc).encode("utf-8")).hexdigest()[:16]
    return f"rp-{int(queue)}-{int(offset)}-{h}"


@dataclass(frozen=True)
class ReplayRequest:
    topic: str
    from_ms: int
    to_ms: int
    filter: Filter = field(default_factory=Filter)
    target_group: str | None = None
    target_topic: str | None = None
    rate: int = DEFAULT_RATE
    dry_run: bool = False

    def to_json(self) -> dict:
        return {"topic": self.topic, "from": self.from_ms, "to": self.to_ms, "filter": self.filter.to_json(),
                "target": {"group": self.target_group} if self.target_group else {"topic": self.target_topic},
                "rate": self.rate}


def _int(body: Mapping, name: str, lo: int, hi: int, default: int | None = None) -> int:
    v = body.get(name, default)
    if v is None:
        raise BadRequest(f"'{name}' is required")
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise BadRequest(f"'{name}' must be an integer in [{lo}, {hi}]")
    return v


def parse_request(body: Any) -> ReplayRequest:
    """``{"topic", "from", "to", "filter"?, "target": {"group"} | {"topic"}, "rate"?, "dry_run"?}`` →
    :class:`ReplayRequest`; :class:`BadRequest` (400) on anything else. ``from``/``to`` epoch ms,
    ``from < to``, at most 400 days apart; ``rate`` messages/s in [1, 1000] (default 100)."""
    if not isinstance(body, Mapping):
        raise BadRequest("body must be a JSON object")
    known_fields(body, ("topic", "from", "to", "filter", "target", "rate", "dry_run"))
    dry = body.get("dry_run", False)
    if not isinstance(dry, bool):
        raise BadRequest("'dry_run' must be true or false")
    topic = check_topic(body.get("topic"))
    lo = _int(body, "from", 0, 2**53)
    hi = _int(body, "to", 0, 2**53)
    if hi <= lo:
        raise BadRequest("'to' must be after 'from'")
    if hi - lo > MAX_RANGE_MS:
        raise BadRequest("a replay covers at most 400 days (the lake's retention)")
    try:
        flt = Filter.of(body.get("filter"))
    except ValueError as e:
        raise BadRequest(str(e)) from None
    target = body.get("target")
    if not isinstance(target, Mapping) or len(target) != 1 or next(iter(target)) not in ("group", "topic"):
        raise BadRequest("'target' must be {\"group\": name} or {\"topic\": name}")
    (kind, name), = target.items()
    if kind == "topic":
        check_topic(name, "target.topic")
    else:
        check_name(name, "target.group")
    rate = _int(body, "rate", 1, MAX_RATE, DEFAULT_RATE)
    return ReplayRequest(topic, lo, hi, flt, name if kind == "group" else None,
                         name if kind == "topic" else None, rate, dry)


def next_chunk(total: int, cursor: int, size: int) -> range:
    """The manifest positions the copier copies next from ``cursor`` (the count already copied and
    recorded), at most ``size``; empty when done.

    >>> next_chunk(10, 8, 5), next_chunk(10, 10, 5)
    (range(8, 10), range(10, 10))
    """
    return range(min(cursor, total), min(total, cursor + max(1, size)))


def pace_seconds(copied: int, rate: int, elapsed_s: float) -> float:
    """How long to wait before copying more so that ``copied`` messages took at least
    ``copied / rate`` seconds (0 when behind).

    >>> pace_seconds(100, 50, 1.5), pace_seconds(100, 50, 3.0)
    (0.5, 0.0)
    """
    return max(0.0, copied / max(1, rate) - elapsed_s)


def matching(f: Filter, rows: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The rows (``properties`` dict, ``tags``) the filter keeps: the reference the Spark job is
    tested against."""
    p = f.predicate()
    return [r for r in rows if p(r.get("properties"), r.get("tags"))]
