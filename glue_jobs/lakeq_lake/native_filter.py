"""The replay filter (the subscription condition language) as native Spark column expressions, for
the rows whose properties text is *plain* (:func:`plain`); the matcher UDF decides the others.

The properties arrive as the text Spark's JSON reader re-wrote with Jackson (compact, one object).
The Python UDF parses it with ``json.loads`` and asks the matcher; here the same decision is taken on
the text itself, where the text is simple enough for that to be exact:

* **plain** — null, empty (the UDF reads both as ``{}``), or a one-line flat object: ``{}`` or
  ``"key":value`` pairs separated by ``,``, each value a string, a JSON number whose integer part
  has at most 18 digits, ``true``, ``false`` or ``null``; no escape in a key; in a string value the
  escapes Jackson writes (:data:`_ESC`: ``\\"``, ``\\\\``, ``\\n`` and the other short forms,
  ``\\u00XX`` for a control character, a surrogate pair for a character beyond U+FFFF; never a lone
  surrogate); no whitespace, at most :data:`MAX_PLAIN` characters. Anything else — an escape in a
  key, a nested object or list, a long integer, ``NaN`` — is left to the UDF. Properties produced
  through the API are flat (API.md "Produce"), so in practice every row is plain (since
  2026-12-05 also a value holding an emoji or a control character: before, one such row in a slice
  sent the whole replay through a second pass, ~120 s instead of ~55 s at 10M).
* on a plain text the value of field ``f`` is the token after the **last** ``"f":`` key (``json.loads``
  keeps the last of duplicate keys), found by a plain search (exact there, :func:`value_regex`),
  done with string functions (:func:`_token`: ``substring_index``, no regex; for a field starting
  with ``:``, ``,`` or ``}`` a regex anchored at ``{`` that walks whole pairs), once per row and
  field in the job (:func:`with_levels`: token columns in a projection), once per row and level in
  :func:`native_filter` (a lambda over a one-element array; the plan before, and the tests). A
  field whose name needs an escape (a quote, a backslash, a control character) or is not valid
  UTF-8 is absent from every plain text.
* the token's JSON type is its first character (``"`` string, ``t``/``f`` boolean, ``n`` null, else a
  number) and the comparisons follow the matcher's (``matcher.index``): ``"1"`` ≠ ``1`` ≠ ``true``;
  numbers compare as numbers, exactly: an integer token as a ``bigint``, a token with a fraction or
  an exponent as a ``double`` (``json.loads`` gives ``float`` too, and Java's and Python's decimal →
  double conversions are both correctly rounded), against bounds converted exactly
  (:func:`int_bounds`, :func:`double_bounds`: ``2**53 + 1`` is no double, ``1.5`` no integer);
  ``null`` is present but equal to nothing, in no range and under no prefix; a string token
  without a backslash compares spelled (:func:`spelled`: the spelling escapes character by
  character, so a prefix is a prefix of the spelled text), one with a backslash decoded
  (:func:`_decoded`, a JVM expression evaluated only for such tokens).

:func:`native_filter` returns ``(plain, keep)``: a row with ``plain`` true is kept iff ``keep``. The
pure parts (bounds, the regexes) are plain Python; ``tests/spark/test_replay.py`` proves the whole
equal to the matcher on generated filters and properties (the type-confusable values included).
"""
from __future__ import annotations

import math
import sys
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

MAX_PLAIN = 16_384  # characters; longer texts go to the UDF
# Java's regex engine recurses once per repetition of a group: the pairs' loop overflowed a 1 MB
# thread stack at 500-600 pairs (a text the API never writes: 64 properties at most), which would
# kill the job. A plain text has at most MAX_PAIRS colons (so pairs); the strings' escape loops are
# possessive, which Java runs without recursion (500,000 escapes in one string matched).
MAX_PAIRS = 256
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1
_MAX_DOUBLE = sys.float_info.max

_KEY = r'"[^"\\\x00-\x1f]*"'  # a key: a string without escapes
# the escapes Jackson writes in a string (and json.dumps, but for the hex digits' case): a quote, a
# backslash, the short forms of five control characters, \u00XX for the other control characters,
# and a character beyond U+FFFF as its surrogate pair; never a lone surrogate (a text decoded from
# UTF-8 holds none; json.loads would keep one, Java would not: such a text goes to the UDF)
_ESC = r'\\(?:["\\/bfnrt]|u00[01][0-9a-fA-F]|u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2})'
# a string value: unrolled (no alternation per character), so a text without any escape costs what
# it did before; possessive (one parse only: the same matches), so Java does not recurse per escape
_STR = r'"[^"\\\x00-\x1f]*+(?:' + _ESC + r'[^"\\\x00-\x1f]*+)*+"'
_NUM = r"-?(?:0|[1-9][0-9]{0,17})(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?"
_VAL = f"(?:{_STR}|{_NUM}|true|false|null)"
_PAIR = f"{_KEY}:{_VAL}"
PLAIN = f"^\\{{(?:{_PAIR}(?:,{_PAIR})*)?\\}}$"
ESCAPED_STRING = f"^({_STR})"  # the string token at the start of a plain text's rest (:func:`_token`)


def value_regex(field: str) -> str | None:
    """A Java regex whose group 1 is the token of ``field``'s last pair in a plain text; None when
    ``field`` cannot appear in a plain text (its JSON spelling needs an escape, or it is not
    valid UTF-8).

    In a plain text the unescaped quotes open and close strings alternately, and a quote inside a
    string is escaped — preceded by a backslash, which neither ``f`` (free of quotes and
    backslashes) nor ``{`` / ``,`` is. ``{"f":`` or ``,"f":`` is then a key unless its first quote
    closes a string ending in ``{`` or ``,``: then the characters after that closing quote, ``f``
    itself, would start with ``:``, ``,`` or ``}`` (all that may follow a string in a flat
    object). So for any other ``f`` a plain search finds exactly the keys, the greedy ``.*`` the
    last one; for those three the regex walks whole pairs from the ``{``. (A bare ``"f":`` is a
    key too: its second quote is unescaped — ``f`` does not end in a backslash — so its first
    quote is unescaped as well (an escaped one would lie inside a value, which the second quote
    would then close before a ``:``); that first quote cannot close a string (``f`` does not start
    with ``:``, ``,`` or ``}``), so it opens one whose text is ``f``, closed by the second quote
    and followed by ``:`` — a key.)"""
    if not plain_string(field):
        return None
    key = _quote('"' + field + '"')
    if field[0] not in ":,}":
        return f"(?s)^.*[{{,]{key}:({_VAL})"  # (?s): a string may hold U+2028, a line end to Java
    # greedy (?:pair,)*: the longest run of whole pairs before the key, i.e. its last occurrence
    return f"^\\{{(?:{_PAIR},)*{key}:({_VAL})(?:,{_PAIR})*\\}}$"


def plain_string(s: str) -> bool:
    """True when ``s`` is spelled in JSON without an escape (so it can be a plain text's key):
    :func:`spelled` holds the rule for what a plain text can hold; here nothing may be escaped."""
    return spelled(s) == '"' + s + '"'


def spelled(s: str) -> str | None:
    r"""``s`` as a string value of a plain text spells it, quotes included (a quote and a backslash
    escaped, as Jackson and ``json.dumps`` write them), or None when no plain text holds it (a
    control character, which needs another escape; a lone surrogate, never in a text Spark decoded
    from UTF-8). A character beyond U+FFFF is spelled as itself: Jackson writes it as two ``\u``
    escapes (a token holding them is compared decoded, :func:`_decoded`), and a text holding it
    raw compares it raw. The spelling
    escapes character by character and no character's spelling is a prefix of another's, so
    ``spelled(p)[:-1]`` starts ``spelled(s)`` exactly when ``p`` starts ``s``: prefixes compare on
    the spelled text.

    >>> spelled('a"b'), spelled("a\\b"), spelled("tab\there"), spelled("😀"), spelled("\ud800")
    ('"a\\"b"', '"a\\\\b"', None, '"😀"', None)
    """
    if any(ord(c) < 0x20 or 0xD800 <= ord(c) <= 0xDFFF for c in s):
        return None
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _quote(s: str) -> str:
    """``s`` as a literal in a Java regex (``\\Q…\\E`` breaks on ``\\E``; ``s`` has no backslash)."""
    return "".join("\\" + c if c in ".^$|?*+()[]{}" else c for c in s)


def int_bounds(lo: int | float, hi: int | float) -> tuple[int, int] | None:
    """``[a, b]`` with, for every Python int ``v`` in the ``bigint`` range, ``lo <= v <= hi`` iff
    ``a <= v <= b`` (a, b in that range); None when no such ``v`` exists.

    >>> int_bounds(1.5, 4), int_bounds(2, 2.0), int_bounds(2.5, 2.7), int_bounds(-1e300, 1e300)[0] == -(2**63)
    ((2, 4), (2, 2), None, True)
    """
    a = lo if isinstance(lo, int) else math.ceil(lo)
    b = hi if isinstance(hi, int) else math.floor(hi)
    a, b = max(a, LONG_MIN), min(b, LONG_MAX)
    return (a, b) if a <= b else None


def _double_ceil(x: int | float) -> float | None:
    """The least finite double ``d`` with ``d >= x`` (exact comparison), None when none."""
    if isinstance(x, float):
        return x
    if x > int(_MAX_DOUBLE):
        return None
    if x < -int(_MAX_DOUBLE):
        return -_MAX_DOUBLE
    d = float(x)
    return math.nextafter(d, math.inf) if d < x else d


def _double_floor(x: int | float) -> float | None:
    if isinstance(x, float):
        return x
    if x < -int(_MAX_DOUBLE):
        return None
    if x > int(_MAX_DOUBLE):
        return _MAX_DOUBLE
    d = float(x)
    return math.nextafter(d, -math.inf) if d > x else d


def double_bounds(lo: int | float, hi: int | float) -> tuple[float, float] | None:
    """``[a, b]`` finite doubles with, for every double ``v`` (infinities included), ``lo <= v <= hi``
    (Python's exact comparison) iff ``a <= v <= b``; None when no double is in the range.

    >>> double_bounds(2**53 + 1, 2**53 + 1), double_bounds(1, 2.5), double_bounds(0, 0)
    (None, (1.0, 2.5), (0.0, 0.0))
    """
    a, b = _double_ceil(lo), _double_floor(hi)
    if a is None or b is None or a > b:
        return None
    return a, b


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _number_in(tok: Column, lo: int | float, hi: int | float) -> Column:
    """``tok`` (a plain value token) is a number in ``[lo, hi]``, compared exactly. The token is one
    of a plain text (:data:`PLAIN` checked it), so no regex is needed: its first character is ``"``
    (a string), ``t``, ``f``, ``n`` (a literal), ``-`` or a digit (a number) — a number is then
    the token between ``-`` and ``:`` in byte order (no character extracted) — and a number is an
    integer of at most 18 digits unless it holds ``.``, ``e`` or ``E``. Only one of the two casts
    runs (a ``CASE``: the ``double`` one only on a token with a fraction or an exponent), and an
    integer token's ``bigint`` cast needs no other test (a string, ``true``, ``null`` cast to null;
    Spark's cast reads ``1.5`` as 1, so a fraction takes the other branch). Tokens of rows that are
    not plain are never decided here (the caller's ``plain`` test); they cast to null or to some
    number, never an error (Spark's cast with ANSI mode off, its default and Glue's)."""
    number = (tok >= F.lit("-")) & (tok < F.lit(":"))
    fraction = tok.contains(".") | tok.contains("e") | tok.contains("E")
    ib, db = int_bounds(lo, hi), double_bounds(lo, hi)
    if ib is None and db is None:
        return F.lit(False)
    whole = tok.cast("bigint").between(F.lit(ib[0]), F.lit(ib[1])) if ib is not None else F.lit(False)
    part = tok.cast("double").between(F.lit(db[0]), F.lit(db[1])) if db is not None else F.lit(False)
    return number & F.when(fraction, part).otherwise(whole)


def _decoded(tok: Column) -> Column:
    """The text of string token ``tok`` with its escapes decoded (Jackson, as ``json.loads`` decodes
    them): asked only of a token holding a backslash, so a text without escapes never pays it."""
    return F.get_json_object(F.concat(F.lit('{"v":'), tok, F.lit("}")), "$.v")


def _by_text(tok: Column, decoded: Column, spelled_: Column) -> Column:
    """A string test on token ``tok``: ``decoded`` (a condition over :func:`_decoded`) when the
    token holds an escape, else ``spelled_`` (a condition on its spelling)."""
    return F.when(tok.contains("\\"), tok.startswith('"') & decoded).otherwise(spelled_)


def _lone_surrogate(s: str) -> bool:
    return any(0xD800 <= ord(c) <= 0xDFFF for c in s)


def _equals(tok: Column, v: Any) -> Column:
    """``tok`` is the JSON value ``v`` (matcher equality: type-sensitive, ``1`` = ``1.0``). A string
    token holding an escape is compared decoded (:func:`_decoded`: Jackson escapes a control
    character, and writes a character beyond U+FFFF as two escapes); any other by its spelling."""
    if isinstance(v, bool):
        return tok == F.lit("true" if v else "false")
    if _is_number(v):
        return _number_in(tok, v, v)
    if isinstance(v, str):
        if _lone_surrogate(v):  # no plain text holds one
            return F.lit(False)
        sp = spelled(v)
        raw = tok == F.lit(sp) if sp is not None else F.lit(False)
        return _by_text(tok, _decoded(tok) == F.lit(v), raw)
    return F.lit(False)


def _any(conds: list[Column]) -> Column:
    out = F.lit(False)
    for c in conds:
        out = out | c
    return out


def with_levels(df: DataFrame, props: str, levels: list[dict], name: str = "lakeq-native-levels",
                plain_as: str | None = None, stored: str | None = None) -> tuple[DataFrame, Column, list[str]]:
    """:func:`native_filter` for a filter over ``df``: ``df`` with one token column per field the
    ``levels`` name (each token computed once per row, in a projection), the levels' conjunction
    over those columns, and the columns to drop after the filter. Same decisions as
    :func:`native_filter` (the same :func:`_token` and :func:`_on_token`), without its lambdas:
    Spark evaluates a higher-order function row by row outside the generated code, which made
    three levels cost as much as reading the rows (docs/benchmarks.md "One side"). A named
    ``observe`` (a row count nobody reads) stands between the projection and the filter: without
    it the optimizer pushes the filter below the projection and writes each token into every
    condition that uses it (``name``: the observation's, unique within a query). ``plain_as``: also
    project :func:`plain` of ``props`` under that name (not in the columns to drop), so that the
    caller tests it, and carries it on, without evaluating the regex again; ``stored``: the column of
    ``df`` holding the compaction's answer (:func:`plain_of`), used where it is this version's."""
    regexes = {f: rx for f in dict.fromkeys(lv["field"] for lv in levels) if (rx := value_regex(f)) is not None}
    names = {f: f"__{name}_{i}" for i, f in enumerate(regexes)}
    text = F.coalesce(F.when(F.col(props) != F.lit(""), F.col(props)), F.lit("{}"))
    test = plain(F.col(props)) if stored is None else plain_of(F.col(stored), F.col(props))
    extra = [test.alias(plain_as)] if plain_as else []
    # each field's rest of the text after its last key (_rest) in a projection of its own, read by
    # the token's branches: written into them, it was searched for up to five times a row (Spark
    # keeps the two projections apart when the second reads a column of the first more than once)
    # a field that only `exists` levels name needs no token, only whether its key is in the text
    # (for a field not starting with `:`, `,` or `}`, exactly when _token is not "": a stand-in)
    present = {f for f in regexes if f[0] not in ":,}"
               and all("exists" in lv for lv in levels if lv["field"] == f)}
    rests = {f: f"__{name}_r{i}" for i, f in enumerate(regexes) if f[0] not in ":,}" and f not in present}
    cols = df.columns
    df = df.select("*", *[_rest(text, f).alias(r) for f, r in rests.items()])
    df = df.select(*cols, *[(F.when(text.contains(_key(f)), F.lit("?")).otherwise(F.lit("")) if f in present
                             else _token(text, f, rx, F.col(rests[f]) if f in rests else None)).alias(names[f])
                            for f, rx in regexes.items()], *extra)
    df = df.observe(name, F.count(F.lit(1)).alias("rows"))
    keep = F.lit(True)
    for lv in levels:
        if lv["field"] in names:
            keep = keep & _on_token(F.col(names[lv["field"]]), lv)
        else:  # the field is absent from every plain text
            keep = keep & F.lit(lv.get("exists") is False)
    return df, keep, list(names.values())


def level_column(text: Column, level: dict) -> Column:
    """One level of the condition language on a plain ``text`` (never null: ``{}`` for none)."""
    field = level["field"]
    rx = value_regex(field)
    if rx is None:  # the field is absent from every plain text
        return F.lit(level.get("exists") is False)
    # the token once per row: the level's condition is a lambda over a one-element array (Spark
    # does not share a repeated expression between a filter's conjuncts)
    return F.exists(F.array(_token(text, field, rx)), lambda tok: _on_token(tok, level))


def _key(field: str) -> str:
    """``"field":``, the spelling of ``field``'s key in a plain text (found by a plain search for a
    field not starting with ``:``, ``,`` or ``}``: :func:`value_regex`)."""
    return '"' + field + '":'


def _rest(text: Column, field: str) -> Column:
    """``text`` after the last ``"field":`` (all of it when there is none: :func:`_token` tests that)."""
    return F.substring_index(text, _key(field), -1)


def _token(text: Column, field: str, rx: str, rest: Column | None = None) -> Column:
    """The token of ``field``'s last pair in a plain ``text``, ``""`` when absent. For a field not
    starting with ``:``, ``,`` or ``}`` the last ``"field":`` is its last key (:func:`value_regex`),
    so string functions find it — the text after its last occurrence (``substring_index``), then
    up to the string's closing quote (the first quote after the opening one, unless the rest holds
    a backslash: then an escaped quote may come first, and the regex :data:`ESCAPED_STRING` reads
    the string) or to the next ``,`` / ``}`` (no other token holds one) — which costs a fraction of
    the regex; for the three others
    the regex walks whole pairs. Both are proved equal to the matcher by
    ``tests/spark/test_replay.py``."""
    if field[0] in ":,}":  # (a text that is not shallow is not plain: its token is never asked)
        return F.when(shallow(text), F.regexp_extract(text, rx, 1)).otherwise(F.lit(""))
    rest = _rest(text, field) if rest is None else rest  # (``rest``: the same, already computed)
    string = F.concat(F.lit('"'), F.substring_index(rest.substr(F.lit(2), F.length(rest)), '"', 1), F.lit('"'))
    escaped = F.regexp_extract(rest, ESCAPED_STRING, 1)
    other = F.substring_index(F.substring_index(rest, ",", 1), "}", 1)
    return (F.when(~text.contains(_key(field)), F.lit("")).when(~rest.startswith('"'), other)
            .when(rest.contains("\\"), escaped).otherwise(string))


def _on_token(tok: Column, level: dict) -> Column:
    present = tok != F.lit("")  # "" when absent (a present token is never empty)
    if "exists" in level:
        return present if level["exists"] else ~present
    if "values" in level:
        return _any([_equals(tok, v) for v in level["values"]])
    if "anything_but" in level:
        return present & ~_any([_equals(tok, v) for v in level["anything_but"]])
    if "range" in level:
        lo, hi = level["range"]
        return _number_in(tok, lo, hi)
    if "prefix" in level:
        p = level["prefix"]
        if _lone_surrogate(p):  # no plain text holds one
            return F.lit(False)
        sp = spelled(p)
        raw = tok.startswith(F.lit(sp[:-1])) if sp is not None else F.lit(False)
        return _by_text(tok, _decoded(tok).startswith(F.lit(p)), raw)
    raise ValueError(f"unknown level {level!r}")


def shallow(text: Column) -> Column:
    """``text`` is short enough for the pairs' regexes (:data:`MAX_PLAIN` characters, at most
    :data:`MAX_PAIRS` colons): they recurse once per pair, and only on such texts do they run. A
    pair takes 5 characters at least (``"":0,``), so a text of at most ``5 * MAX_PAIRS``
    characters — nearly every one — needs no count of its colons."""
    n = F.length(text)
    return (n <= 5 * MAX_PAIRS) | ((n <= MAX_PLAIN) & (n - F.length(F.translate(text, ":", "")) <= MAX_PAIRS))


def plain(props: Column) -> Column:
    """The rows whose properties text the native filter decides (see the module docstring)."""
    return props.isNull() | (props == F.lit("")) | (shallow(props) & props.rlike(PLAIN))


# The version of :func:`plain`'s definition (:data:`PLAIN`, :data:`MAX_PLAIN`, :data:`MAX_PAIRS`, the
# escapes): raise it with any change to them. The compaction stores each body row's answer as the
# column ``plain`` (:func:`stored_plain`: ``+PLAIN_VERSION`` plain, ``-PLAIN_VERSION`` not), computed
# once per message instead of by every replay (the regex was ~9-10 CPU-s of every 10M-row selection
# with levels, docs/benchmarks.md "The plain test read back"); a job reads it back with
# :func:`plain_of`, which trusts only its own version's answers and evaluates the regex on every
# other row (null: a raw row, or a file compacted before the column; another version: a file
# compacted by a job of another deploy).
PLAIN_VERSION = 1


def stored_plain(props: Column) -> Column:
    """:func:`plain` of ``props`` as the compaction stores it (``int``: ±:data:`PLAIN_VERSION`)."""
    return F.when(plain(props), F.lit(PLAIN_VERSION)).otherwise(F.lit(-PLAIN_VERSION)).cast("int")


def plain_of(stored: Column, props: Column) -> Column:
    """:func:`plain` of ``props``, taken from ``stored`` (:func:`stored_plain`'s column) when it
    holds this version's answer, else evaluated (the regex runs on those rows only)."""
    return (F.when(stored == F.lit(PLAIN_VERSION), F.lit(True))
            .when(stored == F.lit(-PLAIN_VERSION), F.lit(False)).otherwise(plain(props)))


def native_filter(props: Column, levels: list[dict]) -> Column:
    """The conjunction of ``levels`` on the plain rows' properties (null / empty read as ``{}``)."""
    text = F.coalesce(F.when(props != F.lit(""), props), F.lit("{}"))
    out = F.lit(True)
    for lv in levels:
        out = out & level_column(text, lv)
    return out

