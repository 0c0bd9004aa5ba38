"""The memory store: DynamoDB's data plane over dicts and one lock, for the fast tests (issue 31).

lakeq's store (``layers/core/lakeq/store/``) speaks DynamoDB through pynamodb; every lock, ack,
offset move and generation change is a condition or update *expression* sent with a call. An
in-memory twin at the store's own port names (``OffsetRepo``, ``LogRepo``, ...) would restate each
of those conditions a second time in Python, and the two spellings could drift apart. This twin
sits one seam lower instead, under the same interceptor as :mod:`infra.local.moto_direct`
(``infra/local/interceptor.py``'s ``direct`` transport): the store's code, its expressions and the
IAM and limit hooks run unchanged, and only the ten data-plane operations (:data:`OPERATIONS`) are
answered here, from dicts. Measured on this machine (issue 31, docs/benchmarks.md "The suite's
time"): moto spends 15-120 ms on an UpdateItem of the offsets record (it parses, validates and
deep-copies the expression's tree at every call); this twin parses an expression once per text
(:func:`_parse_condition`, :func:`_parse_update`, cached) and evaluates it on the item.

Semantics follow DynamoDB as moto implements it (the local stack's reference), checked by one
contract suite run against both stores (``tests/contract/``): generated sequences of calls on the
template's tables compared answer by answer and error by error, and the store's repositories' own
tests on each store. What it does not do, and says so with a :class:`NotSupported` error rather
than a silent answer: Streams (a test that reads a table's stream runs on moto), the legacy
parameters (``Expected``, ``KeyConditions``, ``QueryFilter``, ``ScanFilter``, ``AttributeUpdates``),
parallel scans, ``ReturnConsumedCapacity`` figures (the benches count request units from item sizes).

Where moto answers otherwise than DynamoDB documents, this twin follows DynamoDB and the contract
leaves the case out (the list: tests/contract/test_memory_store_probes.py's docstring): it refuses
an empty binary set or a set inside a list, an index key of the wrong type, an unused expression
value in a Query or Scan, begins_with on a number sort key, and it compares numbers in sets and
binary values by value, applies a TransactGetItems projection and AttributesToGet, and adds an
exponent ("1E+2").

Errors are botocore's ``ClientError`` with DynamoDB's codes and moto's messages
(``ConditionalCheckFailedException``, ``TransactionCanceledException`` with ``CancellationReasons``,
``ValidationException``), so pynamodb turns them into the same exceptions as on moto or AWS.
Every call runs under one lock: calls are linearizable, as each DynamoDB item's writes are.
"""
from __future__ import annotations

import copy
import re
import threading
from contextlib import contextmanager
from decimal import Decimal
from functools import lru_cache
from typing import Any, Callable, Iterable, Iterator, Mapping

from botocore.exceptions import ClientError
from botocore.validate import validate_parameters

from infra.local.aws_rules import ITEM_LIMIT, item_size
from infra.local.moto_direct import NOT_HANDLED

OPERATIONS = frozenset({"GetItem", "PutItem", "UpdateItem", "DeleteItem", "Query", "Scan", "BatchGetItem",
                        "BatchWriteItem", "TransactWriteItems", "TransactGetItems"})
SET_TYPES = ("SS", "NS", "BS")


class NotSupported(Exception):
    """A call the memory store does not answer (the test needs moto: Streams, legacy parameters)."""


# ------------------------------------------------------------------------------------- errors

def _error(operation: str, code: str, message: str, **extra: Any) -> ClientError:
    """botocore's error for a DynamoDB answer as moto writes it: its body's ``message`` (lower
    case) appears beside ``Error`` for every error but a ValidationException."""
    if code != "ValidationException" and "Message" not in extra:
        extra = {"message": message, **extra}
    return ClientError({"Error": {"Message": message, "Code": code}, **extra,
                        "ResponseMetadata": {"HTTPStatusCode": 400, "HTTPHeaders": {}, "RetryAttempts": 0}},
                       operation)


class _Validation(Exception):
    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class _ConditionFailed(Exception):
    def __init__(self, old: dict | None):
        super().__init__("The conditional request failed")
        self.old = old


# ------------------------------------------------------------------------------------- values

def _copy(av: Any) -> Any:
    """A deep copy of an attribute value (or an item: a dict of them)."""
    if isinstance(av, dict):
        return {k: _copy(v) for k, v in av.items()}
    if isinstance(av, list):
        return [_copy(v) for v in av]
    return av


def _blob(v: Any) -> bytes:
    return v.encode("utf-8") if isinstance(v, str) else bytes(v)


def _incoming(av: Any) -> Any:
    """An attribute value as the store keeps it: blobs as bytes (botocore may be handed str)."""
    (t, v), = av.items()
    if t == "B":
        return {"B": _blob(v)}
    if t == "BS":
        return {"BS": [_blob(x) for x in v]}
    if t == "L":
        return {"L": [_incoming(x) for x in v]}
    if t == "M":
        return {"M": {k: _incoming(x) for k, x in v.items()}}
    if t in ("SS", "NS"):
        return {t: list(v)}  # the caller's list is not the store's
    return {t: v}


def _item_in(item: Mapping) -> dict:
    return {k: _incoming(v) for k, v in item.items()}


def _num(v: str) -> Decimal:
    return Decimal(v)


def _scalar(av: Mapping) -> Any:
    """A key's hashable, ordered value: str, Decimal or bytes (a blob botocore was handed as str:
    its UTF-8 bytes, as on the wire)."""
    (t, v), = av.items()
    return _num(v) if t == "N" else _blob(v) if t == "B" else v


def _check_numbers(av: Any) -> None:
    """moto's number check of a put item (its ``_validate_item_types``): every "N" reached through
    maps (not inside lists or number sets) must read as a finite number within DynamoDB's range."""
    for t, v in av.items():
        if isinstance(v, dict):
            _check_numbers(v)
        if t == "N" and isinstance(v, str):
            bad = f"The parameter cannot be converted to a numeric value: {v}"
            try:
                f = float(v)
            except ValueError:
                raise _Validation(bad) from None
            if v != v.strip() or f != f or f in (float("inf"), float("-inf")):
                raise _Validation(bad)
            if f != 0.0 and abs(f) > 9.9999999999999999999999999999999999999e125:
                raise _Validation("Number overflow. Attempting to store a number with magnitude larger than "
                                  "supported range")
            if f != 0.0 and abs(f) < 1e-130:
                raise _Validation("Number underflow. Attempting to store a number with magnitude smaller than "
                                  "supported range")


def _check_no_empty_set(av: Any) -> None:
    """DynamoDB refuses an empty set anywhere in an item (moto: SS and NS, in PutItem only)."""
    (t, v), = av.items()
    if t in SET_TYPES and not v:
        kind = {"SS": "string", "NS": "number", "BS": "binary"}[t]
        raise _Validation(f"1 validation error detected: One or more parameter values were invalid: An {kind} set  "
                          "may not be empty")
    if t == "M":
        for x in v.values():
            _check_no_empty_set(x)
    elif t == "L":
        for x in v:
            _check_no_empty_set(x)


def _eq(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is b
    (ta, va), = a.items()
    (tb, vb), = b.items()
    if ta != tb:
        return False
    if ta == "N":
        return _num(va) == _num(vb)
    if ta == "NS":
        return {_num(x) for x in va} == {_num(x) for x in vb}
    if ta in ("SS", "BS"):
        return set(va) == set(vb)
    if ta == "L":
        return len(va) == len(vb) and all(_eq(x, y) for x, y in zip(va, vb))
    if ta == "M":
        return va.keys() == vb.keys() and all(_eq(va[k], vb[k]) for k in va)
    return va == vb


def _ordered(a: Any, b: Any) -> tuple[Any, Any] | None:
    """Both values as comparable Python values when they are the same ordered type, else None."""
    if a is None or b is None:
        return None
    (ta, va), = a.items()
    (tb, vb), = b.items()
    if ta != tb or ta not in ("S", "N", "B"):
        return None
    return (_num(va), _num(vb)) if ta == "N" else (va, vb)


def _size(av: Mapping) -> int | None:
    (t, v), = av.items()
    return len(v) if t in ("S", "B", "L", "M", *SET_TYPES) else None


def _number(total: Any) -> dict:
    return {"N": f"{total}"}


_INT = re.compile(r"[-+]?\d+")


def _operand_number(v: str) -> int | Decimal:
    """A number as moto's arithmetic reads it: an int when it is written as one, else a Decimal
    (an exponent, "1E+2", is a Decimal here: moto raises a Python ValueError, DynamoDB adds it)."""
    return int(v) if _INT.fullmatch(v.strip()) else Decimal(v)


def _arith(a: Any, b: Any, sign: int) -> dict:
    """moto's arithmetic: ints when neither side has a '.', else Decimals, printed with f"{}"."""
    if a is None or b is None:
        raise _Validation("The provided expression refers to an attribute that does not exist in the item")
    (ta, va), = a.items()
    (tb, vb), = b.items()
    if ta != "N" or tb != "N":
        raise _Validation("Invalid UpdateExpression: Incorrect operand type for operator or function; "
                          f"operator or function: {'+' if sign > 0 else '-'}, operand type: {ta if ta != 'N' else tb}")
    x, y = _operand_number(va), _operand_number(vb)
    return _number(x + y if sign > 0 else x - y)


# ------------------------------------------------------------------------------------- expressions

_TOKEN = re.compile(r"\s*(?:(<>|<=|>=|[=<>(),.\[\]+-])|(#[A-Za-z0-9_]+)|(:[A-Za-z0-9_]+)|(\d+)"
                    r"|([A-Za-z_][A-Za-z0-9_]*))")


def _tokens(text: str) -> list[tuple[str, str]]:
    out, pos, end = [], 0, len(text.rstrip())
    while pos < end:
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise _Validation(f"Invalid expression: syntax error near {text[pos:pos + 10]!r}")
        pos = m.end()
        kinds = ("op", "name", "value", "int", "word")
        for kind, tok in zip(kinds, m.groups()):
            if tok is not None:
                out.append((kind, tok))
                break
    out.append(("end", ""))
    return out


class _Parser:
    def __init__(self, text: str):
        self.toks = _tokens(text)
        self.i = 0

    def peek(self, k: int = 0) -> tuple[str, str]:
        return self.toks[min(self.i + k, len(self.toks) - 1)]

    def take(self) -> tuple[str, str]:
        t = self.toks[self.i]
        self.i += 1
        return t

    def expect(self, tok: str) -> None:
        kind, t = self.take()
        if t != tok:
            raise _Validation(f"Invalid expression: expected {tok!r}, found {t!r}")

    def word(self, *words: str) -> bool:
        kind, t = self.peek()
        return kind == "word" and t.upper() in words

    def end(self) -> None:
        if self.peek()[0] != "end":
            raise _Validation(f"Invalid expression: unexpected {self.peek()[1]!r}")

    # a path: name ('.' name | '[' int ']')*, as a tuple of str (a name or '#placeholder') and int
    def path(self) -> tuple:
        kind, t = self.take()
        if kind not in ("name", "word"):
            raise _Validation(f"Invalid expression: expected an attribute, found {t!r}")
        parts: list = [t]
        while True:
            if self.peek()[1] == ".":
                self.take()
                kind, t = self.take()
                if kind not in ("name", "word"):
                    raise _Validation(f"Invalid expression: expected an attribute, found {t!r}")
                parts.append(t)
            elif self.peek()[1] == "[":
                self.take()
                kind, t = self.take()
                if kind != "int":
                    raise _Validation("Invalid expression: a list index must be a number")
                parts.append(int(t))
                self.expect("]")
            else:
                return tuple(parts)

    # ----- conditions: ("or", a, b) ("and", a, b) ("not", a) ("cmp", op, x, y) ("between", x, lo, hi)
    # ("in", x, [ys]) ("fn", name, [args]); operands: ("path", p) ("value", ":v") ("size", p)
    def condition(self) -> tuple:
        left = self.conjunction()
        while self.word("OR"):
            self.take()
            left = ("or", left, self.conjunction())
        return left

    def conjunction(self) -> tuple:
        left = self.negation()
        while self.word("AND"):
            self.take()
            left = ("and", left, self.negation())
        return left

    def negation(self) -> tuple:
        if self.word("NOT"):
            self.take()
            return ("not", self.negation())
        return self.comparison()

    def comparison(self) -> tuple:
        if self.peek()[1] == "(":
            self.take()
            inner = self.condition()
            self.expect(")")
            if inner[0] == "paren":
                raise _Validation("Invalid ConditionExpression: The expression has redundant parentheses;")
            return ("paren", inner)
        kind, t = self.peek()
        if kind == "word" and self.peek(1)[1] == "(" and t in (
                "attribute_exists", "attribute_not_exists", "attribute_type", "begins_with", "contains"):
            self.take()
            self.take()
            args = [self.operand()]
            while self.peek()[1] == ",":
                self.take()
                args.append(self.operand())
            self.expect(")")
            arity = {"attribute_exists": 1, "attribute_not_exists": 1}.get(t, 2)
            if len(args) != arity or (t.startswith("attribute_") and args[0][0] != "path"):
                raise _Validation(f"Invalid ConditionExpression: wrong arguments to {t}")
            return ("fn", t, args)
        left = self.operand()
        kind, t = self.peek()
        if t in ("=", "<>", "<", "<=", ">", ">="):
            self.take()
            return ("cmp", t, left, self.operand())
        if self.word("BETWEEN"):
            self.take()
            lo = self.operand()
            if not self.word("AND"):
                raise _Validation("Invalid ConditionExpression: BETWEEN needs AND")
            self.take()
            return ("between", left, lo, self.operand())
        if self.word("IN"):
            self.take()
            self.expect("(")
            ys = [self.operand()]
            while self.peek()[1] == ",":
                self.take()
                ys.append(self.operand())
            self.expect(")")
            return ("in", left, ys)
        raise _Validation(f"Invalid ConditionExpression: unexpected {t!r}")

    def operand(self) -> tuple:
        kind, t = self.peek()
        if kind == "value":
            self.take()
            return ("value", t)
        if kind == "word" and t == "size" and self.peek(1)[1] == "(":
            self.take()
            self.take()
            p = self.path()
            self.expect(")")
            return ("size", p)
        return ("path", self.path())

    # ----- updates: [("set", path, value) | ("remove", path) | ("add", path, operand) | ("delete", path, operand)]
    # set values: ("plus"|"minus", a, b), ("if_not_exists", path, v), ("list_append", a, b), an operand
    def update(self) -> list:
        actions: list = []
        seen: set[str] = set()
        while self.peek()[0] != "end":
            kind, t = self.take()
            clause = t.upper()
            if kind != "word" or clause not in ("SET", "REMOVE", "ADD", "DELETE"):
                raise _Validation(f"Invalid UpdateExpression: Syntax error; token: {t!r}")
            if clause in seen:
                raise _Validation(f'1 validation error detected: Invalid UpdateExpression: The "{clause}" '
                                  "section can only be used once in an update expression;")
            seen.add(clause)
            while True:
                p = self.path()
                if clause == "SET":
                    self.expect("=")
                    actions.append(("set", p, self.set_value()))
                elif clause == "REMOVE":
                    actions.append(("remove", p))
                else:
                    kind, v = self.take()
                    if kind != "value":
                        raise _Validation(f"Invalid UpdateExpression: {clause} takes a value")
                    actions.append((clause.lower(), p, ("value", v)))
                if self.peek()[1] != ",":
                    break
                self.take()
        if not actions:
            raise _Validation("Invalid UpdateExpression: The expression can not be empty;")
        return actions

    def set_value(self) -> tuple:
        left = self.set_operand()
        if self.peek()[1] in ("+", "-"):
            op = "plus" if self.take()[1] == "+" else "minus"
            return (op, left, self.set_operand())
        return left

    def set_operand(self) -> tuple:
        kind, t = self.peek()
        if kind == "word" and self.peek(1)[1] == "(" and t in ("if_not_exists", "list_append"):
            self.take()
            self.take()
            if t == "if_not_exists":
                p = self.path()
                self.expect(",")
                v = self.set_value()
                self.expect(")")
                return ("if_not_exists", p, v)
            a = self.set_value()
            self.expect(",")
            b = self.set_value()
            self.expect(")")
            return ("list_append", a, b)
        if kind == "word" and self.peek(1)[1] == "(":  # no other function in an update (size() neither)
            raise _Validation(f'Invalid UpdateExpression: Syntax error; token: "(", near: "{t}({self.peek(2)[1]}"')
        return self.operand()

    def projection(self) -> list[tuple]:
        paths = [self.path()]
        while self.peek()[1] == ",":
            self.take()
            paths.append(self.path())
        return paths


@lru_cache(maxsize=8192)
def _parse(rule: str, text: str) -> Any:
    """``text`` parsed by the parser's ``rule`` (condition, update or projection), once per text."""
    p = _Parser(text)
    tree = getattr(p, rule)()
    p.end()
    return tree


def _parse_condition(text: str) -> tuple:
    return _parse("condition", text)


def _parse_update(text: str) -> list:
    return _parse("update", text)


def _parse_projection(text: str) -> list:
    return _parse("projection", text)


_REFS = re.compile(r"([#:][A-Za-z0-9_]+)")


@lru_cache(maxsize=4096)
def _refs_of(expr: str) -> tuple[str, ...]:
    return tuple(_REFS.findall(expr))


def _refs(expr: Any) -> Iterable[str]:
    """The ``#name`` / ``:value`` placeholders ``expr`` names; found once per expression text (an
    app sends a few dozen texts, each thousands of times)."""
    return _refs_of(expr) if type(expr) is str else _REFS.findall(expr)


class _Names:
    """The call's ExpressionAttributeNames and Values, checked against the placeholders its
    expressions name before anything is evaluated (as DynamoDB: an undefined or unused one is a
    ValidationException, whether or not an item is read)."""

    def __init__(self, p: Mapping, *fields: str, in_transaction: bool = False):
        self.names = p.get("ExpressionAttributeNames") or {}
        self.values = {k: _incoming(v) for k, v in (p.get("ExpressionAttributeValues") or {}).items()}
        # (a transaction's values are not checked here, as moto)
        checked = ((self.names, "Names"), ({} if in_transaction else self.values, "Values"))
        if not any(p.get(f) for f in fields):  # no expression at all: the maps are refused outright
            for provided, kind in checked:
                if provided:
                    raise _Validation(f"ExpressionAttribute{kind} can only be specified when using expressions")
        used = {r for f in fields if p.get(f) for r in _refs(p[f])}
        prefix = "" if in_transaction else "1 validation error detected: "
        for provided, kind in checked:
            unused = sorted(set(provided) - used)
            if unused:
                raise _Validation(f"{prefix}Value provided in ExpressionAttribute{kind} unused in expressions: "
                                  f"keys: {{{unused[0]}}}")
        for ref in sorted(used):
            if ref.startswith("#") and ref not in self.names:
                raise _Validation("An expression attribute name used in the document path is not defined; "
                                  f"attribute name: {ref}")
            if ref.startswith(":") and ref not in self.values:
                raise _Validation("An expression attribute value used in expression is not defined; "
                                  f"attribute value: {ref}")

    def name(self, part: str | int) -> str | int:
        return self.names[part] if isinstance(part, str) and part.startswith("#") else part

    def path(self, p: tuple) -> tuple:
        return tuple(self.name(x) for x in p)

    def value(self, ref: str) -> Any:
        return self.values[ref]


def _get(item: Mapping | None, path: tuple) -> Any:
    if item is None:
        return None
    cur: Any = {"M": item}
    for part in path:
        (t, v), = cur.items()
        if isinstance(part, int):
            if t != "L" or part >= len(v):
                return None
            cur = v[part]
        else:
            if t != "M" or part not in v:
                return None
            cur = v[part]
    return cur


def _operand(node: tuple, item: Mapping | None, names: _Names) -> Any:
    kind = node[0]
    if kind == "value":
        return names.value(node[1])
    if kind == "path":
        return _get(item, names.path(node[1]))
    if kind == "size":
        v = _get(item, names.path(node[1]))
        if v is None:
            return None
        n = _size(v)
        if n is None:
            raise _Validation("Invalid ConditionExpression: Incorrect operand type for operator or function; "
                              f"operator or function: size, operand type: {next(iter(v))}")
        return {"N": str(n)}
    raise _Validation(f"Invalid expression: {kind}")


def _holds(node: tuple, item: Mapping | None, names: _Names) -> bool:
    kind = node[0]
    if kind == "paren":
        return _holds(node[1], item, names)
    if kind == "and":
        return _holds(node[1], item, names) and _holds(node[2], item, names)
    if kind == "or":
        return _holds(node[1], item, names) or _holds(node[2], item, names)
    if kind == "not":
        return not _holds(node[1], item, names)
    if kind == "cmp":
        op, x, y = node[1], _operand(node[2], item, names), _operand(node[3], item, names)
        if op == "=":
            return x is not None and y is not None and _eq(x, y)
        if op == "<>":
            return not (x is not None and y is not None and _eq(x, y))
        pair = _ordered(x, y)
        if pair is None:
            return False
        a, b = pair
        return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]
    if kind == "between":
        x, lo, hi = (_operand(n, item, names) for n in node[1:])
        p1, p2 = _ordered(x, lo), _ordered(x, hi)
        return p1 is not None and p2 is not None and p1[1] <= p1[0] <= p2[1]
    if kind == "in":
        x = _operand(node[1], item, names)
        ys = [_operand(n, item, names) for n in node[2]]
        return x is not None and any(_eq(x, y) for y in ys)
    if kind == "fn":
        name, args = node[1], node[2]
        if name == "attribute_exists":
            return _get(item, names.path(args[0][1])) is not None
        if name == "attribute_not_exists":
            return _get(item, names.path(args[0][1])) is None
        x, y = _operand(args[0], item, names), _operand(args[1], item, names)
        if x is None or y is None:
            return False
        (tx, vx), = x.items()
        (ty, vy), = y.items()
        if name == "attribute_type":
            return tx == vy
        if name == "begins_with":
            return tx == ty and tx in ("S", "B") and vx.startswith(vy)
        if name == "contains":
            if tx == "S" and ty == "S":
                return vy in vx
            if tx == "B" and ty == "B":
                return vy in vx
            if tx in SET_TYPES and ty == tx[0]:
                return any(_eq({ty: e}, y) for e in vx)
            if tx == "L":
                return any(_eq(e, y) for e in vx)
            return False
    raise _Validation(f"Invalid ConditionExpression: {kind}")


def _set_value(node: tuple, item: Mapping | None, names: _Names) -> Any:
    kind = node[0]
    if kind in ("plus", "minus"):
        return _arith(_set_value(node[1], item, names), _set_value(node[2], item, names),
                      1 if kind == "plus" else -1)
    if kind == "if_not_exists":
        have = _get(item, names.path(node[1]))
        return have if have is not None else _set_value(node[2], item, names)
    if kind == "list_append":
        a, b = _set_value(node[1], item, names), _set_value(node[2], item, names)
        if a is None or b is None:
            raise _Validation("The provided expression refers to an attribute that does not exist in the item")
        if "L" not in a or "L" not in b:
            raise _Validation("An operand in the update expression has an incorrect data type")
        return {"L": [*_copy(a["L"]), *_copy(b["L"])]}
    v = _operand(node, item, names)
    if v is None:
        raise _Validation("The provided expression refers to an attribute that does not exist in the item")
    return _copy(v)


def _parent(item: dict, path: tuple) -> tuple[Any, Any]:
    """The container of ``path``'s last element (a dict for a name, a list for an index) and that
    element, or a validation error when the document path does not exist in the item."""
    cur: Any = item
    for part in path[:-1]:
        nxt = cur.get(part) if isinstance(cur, dict) and isinstance(part, str) else (
            cur[part] if isinstance(cur, list) and isinstance(part, int) and part < len(cur) else None)
        if nxt is None:
            raise _Validation("The document path provided in the update expression is invalid for update")
        (t, v), = nxt.items()
        cur = v
    last = path[-1]
    if isinstance(last, int) != isinstance(cur, list):
        raise _Validation("The document path provided in the update expression is invalid for update")
    return cur, last


def _overlap(paths: list[tuple]) -> None:
    for i, a in enumerate(paths):
        for b in paths[i + 1:]:
            n = min(len(a), len(b))
            if a[:n] == b[:n]:
                raise _Validation("1 validation error detected: Invalid UpdateExpression: Two document paths "
                                  "overlap with each other; must remove or rewrite one of these paths; path one: ["
                                  + ", ".join(map(str, a)) + "], path two: [" + ", ".join(map(str, b)) + "]")


def _apply_update(actions: list, item: dict, names: _Names, key_names: Iterable[str]) -> None:
    """Applies ``actions`` to ``item`` in place (values computed from the item as it was before)."""
    resolved = [(a[0], names.path(a[1]), a) for a in actions]
    _overlap([p for _, p, _ in resolved])
    keys = set(key_names)
    for _, p, _ in resolved:
        if p[0] in keys:
            raise _Validation("One or more parameter values were invalid: Cannot update attribute "
                              f"{p[0]}. This attribute is part of the key")
    before = _copy(item)
    for _, p, _ in resolved:  # every document path first (moto reports a bad path before a bad value)
        if len(p) > 1:
            _parent(before, p)
    planned = []
    for kind, p, a in resolved:
        if kind == "set":
            planned.append((kind, p, _set_value(a[2], before, names)))
        elif kind in ("add", "delete"):
            planned.append((kind, p, names.value(a[2][1])))
        else:
            planned.append((kind, p, None))
    removals = []
    for kind, p, value in planned:
        if kind == "remove":
            removals.append(p)
            continue
        container, last = _parent(item, p)
        current = (container[last] if isinstance(container, list) and last < len(container)
                   else container.get(last) if isinstance(container, dict) else None)
        if kind == "set":
            new = value
        elif kind == "add":
            (tv, vv), = value.items()
            if tv not in ("N",) + SET_TYPES:
                raise _Validation("Invalid UpdateExpression: Incorrect operand type for operator or function; "
                                  f"operator: ADD, operand type: {_type_name(tv)}")
            if current is None:  # as moto: a number is added to 0 ("-0" is then "0"), a set copied
                new = _number(_operand_number(vv)) if tv == "N" else _copy(value)
            else:
                (tc, vc), = current.items()
                if tc != tv:
                    raise _Validation("An operand in the update expression has an incorrect data type")
                if tc == "N":
                    new = _number(_operand_number(vc) + _operand_number(vv))
                else:
                    new = {tc: _set_union(tc, vc, vv)}
        else:  # delete
            (tv, vv), = value.items()
            if tv not in SET_TYPES:
                raise _Validation("Invalid UpdateExpression: Incorrect operand type for operator or function; "
                                  f"operator: DELETE, operand type: {_type_name(tv)}")
            if current is None:
                continue
            (tc, vc), = current.items()
            if tc != tv:
                raise _Validation("An operand in the update expression has an incorrect data type")
            drop = {_num(x) for x in vv} if tc == "NS" else set(vv)
            rest = [x for x in vc if (_num(x) if tc == "NS" else x) not in drop]
            if not rest:
                removals.append(p)
                continue
            new = {tc: rest}
        if isinstance(container, list):
            if last < len(container):
                container[last] = new
            else:
                container.append(new)
        else:
            container[last] = new
    # removals: list indexes from the highest down, so earlier ones keep their meaning
    for p in sorted(removals, key=lambda p: [x if isinstance(x, int) else -1 for x in p], reverse=True):
        container, last = _parent(item, p)  # a parent that is not there: invalid (a missing leaf: no-op)
        if isinstance(container, list):
            if last < len(container):
                del container[last]
        else:
            container.pop(last, None)


def _changed_parts(original: Any, changed: Any) -> Any:
    """moto's UPDATED_NEW: the parts of the new item's JSON that differ from the old one's."""
    if type(changed) is not type(original):
        return changed
    if isinstance(changed, dict):
        return {k: _changed_parts(original.get(k), v) for k, v in changed.items()
                if k not in original or v != original[k]}
    if isinstance(changed, list):
        if len(changed) != len(original):
            return changed
        return changed if any(c != o for c, o in zip(changed, original)) else original
    return changed


def _type_name(t: str) -> str:
    return {"S": "STRING", "N": "NUMBER", "B": "BINARY", "BOOL": "BOOLEAN", "NULL": "NULL", "L": "LIST",
            "M": "MAP", "SS": "STRING_SET", "NS": "NUMBER_SET", "BS": "BINARY_SET"}.get(t, t)


def _set_union(t: str, a: list, b: list) -> list:
    if t == "NS":
        have = {_num(x) for x in a}
        return [*a, *(x for x in b if _num(x) not in have and not have.add(_num(x)))]
    seen = set(a)
    return [*a, *(x for x in b if x not in seen and not seen.add(x))]


def _project(item: Mapping, paths: list[tuple]) -> dict:
    out: dict = {}
    for p in paths:
        v = _get(item, p)
        if v is None:
            continue
        if len(p) == 1:
            out[p[0]] = _copy(v)
            continue
        # a nested path: the top attribute keeps only the projected parts
        cur = out
        src: Any = item
        for part in p[:-1]:
            (t, inner), = src[part].items()
            if isinstance(part, str):
                cur = cur.setdefault(part, {t: {} if t == "M" else []})[t]
            else:
                while len(cur) <= part:
                    cur.append({t: {} if t == "M" else []})
                cur = cur[part][t]
            src = inner
        last = p[-1]
        if isinstance(cur, dict):
            cur[last] = _copy(v)
        else:
            cur.append(_copy(v))
    return out


def _empty_scalar(av: Mapping | None) -> bool:
    """An empty string or blob (``{"S": ""}``, ``{"B": b""}``): never a key's or an index key's value."""
    if not av:
        return False
    (t, v), = av.items()
    return t in ("S", "B") and len(v) == 0


# ------------------------------------------------------------------------------------- tables

class Table:
    """One table: its key schema, its global secondary indexes, its items by key."""

    def __init__(self, definition: Mapping):
        self.name = definition["TableName"]
        schema = {k["KeyType"]: k["AttributeName"] for k in definition["KeySchema"]}
        self.hash_key, self.range_key = schema["HASH"], schema.get("RANGE")
        self.types = {a["AttributeName"]: a["AttributeType"] for a in definition.get("AttributeDefinitions", [])}
        self.indexes: dict[str, tuple[str, str | None, str, list[str]]] = {}
        self.global_indexes = [g["IndexName"] for g in definition.get("GlobalSecondaryIndexes", [])]
        for gsi in [*definition.get("GlobalSecondaryIndexes", []), *definition.get("LocalSecondaryIndexes", [])]:
            s = {k["KeyType"]: k["AttributeName"] for k in gsi["KeySchema"]}
            proj = gsi.get("Projection") or {}
            self.indexes[gsi["IndexName"]] = (s["HASH"], s.get("RANGE"), proj.get("ProjectionType", "ALL"),
                                              list(proj.get("NonKeyAttributes") or []))
        self.items: dict[Any, dict[Any, dict]] = {}

    @property
    def key_names(self) -> tuple[str, ...]:
        return (self.hash_key,) + ((self.range_key,) if self.range_key else ())

    def key_of(self, key: Mapping, *, item: bool = False) -> tuple[Any, Any]:
        """(hash, range) of a Key parameter (or of an item's key attributes), validated as DynamoDB does."""
        names = self.key_names
        if not item and (set(key) != set(names)):
            raise _Validation("The provided key element does not match the schema")
        vals = []
        for n in names:
            av = key.get(n)
            if av is None:
                raise _Validation(f"One or more parameter values were invalid: Missing the key {n} in the item"
                                  if item else "The provided key element does not match the schema")
            (t, _), = av.items()
            if t != self.types.get(n, t):
                raise _Validation("One or more parameter values were invalid: Type mismatch for key "
                                  f"{n} expected: {self.types.get(n)} actual: {t}" if item else
                                  "The provided key element does not match the schema")
            if _empty_scalar(av):
                raise _Validation("One or more parameter values are not valid. The AttributeValue for a key "
                                  "attribute cannot contain an empty string value. "
                                  f"Key: {n}" if t == "S" else
                                  "One or more parameter values are not valid. The AttributeValue for a key "
                                  f"attribute cannot contain an empty binary value. Key: {n}")
            vals.append(_scalar(av))
        return vals[0], (vals[1] if self.range_key else None)

    def check_put(self, item: dict) -> tuple[Any, Any]:
        """A put item's key, after DynamoDB's checks of the item, in moto's order: an empty string
        or blob as a global index's key, the table's key, an empty set, a number."""
        for name in self.global_indexes:
            hk, rk, _, _ = self.indexes[name]
            for attr in (hk, rk):
                if attr and _empty_scalar(item.get(attr)):
                    raise _Validation("One or more parameter values are not valid. A value specified for a secondary "
                                      "index key is not supported. The AttributeValue for a key attribute cannot "
                                      f"contain an empty string value. IndexName: {self.global_indexes[0]}, "
                                      f"IndexKey: {attr}")
        k = self.key_of(item, item=True)
        for v in item.values():
            _check_no_empty_set(v)
        _check_numbers(item)
        return k

    def get(self, k: tuple[Any, Any]) -> dict | None:
        part = self.items.get(k[0])
        return part.get(k[1]) if part else None

    def put(self, k: tuple[Any, Any], item: dict) -> None:
        for name, (hk, rk, _, _) in self.indexes.items():
            for attr in (hk, rk):
                if attr and attr in item and next(iter(item[attr])) != self.types.get(attr):
                    raise _Validation("One or more parameter values were invalid: Type mismatch for Index Key "
                                      f"{attr} Expected: {self.types.get(attr)} Actual: {next(iter(item[attr]))} "
                                      f"IndexName: {name}")
        self.items.setdefault(k[0], {})[k[1]] = item

    def delete(self, k: tuple[Any, Any]) -> dict | None:
        part = self.items.get(k[0])
        if not part:
            return None
        old = part.pop(k[1], None)
        if not part:
            del self.items[k[0]]
        return old

    def all(self) -> Iterable[dict]:
        for part in self.items.values():
            yield from part.values()


def _order_of(t: Table, index: str | None) -> Callable[[Mapping], tuple]:
    """The sort order of a query's (or a scan's) items, as moto's: by hash key, range key; on an
    index by its own keys, then the table's (moto's order among equal index keys). Applied to a
    start key too (it holds every one of these attributes)."""
    if index is not None:
        names = [t.indexes[index][0], t.indexes[index][1], t.hash_key, t.range_key]
    else:  # (a query's partition has one hash key: a start key from another one sorts before or after all)
        names = [t.hash_key, t.range_key]

    def order(it: Mapping) -> tuple:
        return tuple((0, _scalar(it[n])) if n and n in it else (-1, 0) for n in names)
    return order


# ------------------------------------------------------------------------------------- the store

class MemoryDynamo:
    """The tables and the ten data-plane operations. ``call(operation, params)`` answers as botocore
    would (a dict, or a raised ``ClientError``)."""

    def __init__(self, definitions: Iterable[Mapping] = ()) -> None:
        """A store holding a table for each CreateTable definition given, empty."""
        self.tables: dict[str, Table] = {d["TableName"]: Table(d) for d in definitions}
        self.lock = threading.RLock()
        self.calls = 0

    # ----- set-up
    def create_table(self, definition: Mapping) -> None:
        with self.lock:
            self.tables[definition["TableName"]] = Table(definition)

    def reset(self) -> None:
        """Every table emptied (the state a test starts from)."""
        with self.lock:
            for t in self.tables.values():
                t.items.clear()

    def snapshot(self) -> dict[str, dict]:
        """Every table's items, copied (for :meth:`restore`: a test's set-up made once, reused)."""
        with self.lock:
            return {name: copy.deepcopy(t.items) for name, t in self.tables.items()}

    def restore(self, snapshot: Mapping[str, dict]) -> None:
        """The tables as :meth:`snapshot` saw them (copied again: the snapshot stays as it was)."""
        with self.lock:
            for name, t in self.tables.items():
                t.items = copy.deepcopy(snapshot.get(name, {}))

    def table(self, operation: str, name: str) -> Table:
        t = self.tables.get(name)
        if t is None:
            raise _error(operation, "ResourceNotFoundException", "Requested resource not found")
        return t

    # ----- the entry point
    def call(self, operation: str, params: Mapping) -> dict:
        with self.lock:
            self.calls += 1
            try:
                out = getattr(self, "_" + _snake(operation))(operation, params)
            except _Validation as e:
                raise _error(operation, "ValidationException", e.message) from None
            except _ConditionFailed as e:
                extra = {"Item": e.old} if e.old is not None else {}
                raise _error(operation, "ConditionalCheckFailedException", "The conditional request failed",
                             **extra) from None
        out["ResponseMetadata"] = {"HTTPStatusCode": 200, "HTTPHeaders": {}, "RetryAttempts": 0}
        return out

    @staticmethod
    def _legacy(params: Mapping, *names: str) -> None:
        for n in names:
            if params.get(n):
                raise NotSupported(f"the memory store does not take the legacy parameter {n}")

    def _check(self, operation: str, t: Table, k: tuple, params: Mapping, names: _Names) -> dict | None:
        """The stored item at ``k``, after the call's ConditionExpression held on it."""
        current = t.get(k)
        cond = params.get("ConditionExpression")
        if cond is not None and not _holds(_parse_condition(cond), current, names):
            old = _copy(current) if params.get("ReturnValuesOnConditionCheckFailure") == "ALL_OLD" and current \
                else None
            raise _ConditionFailed(old)
        return current

    # ----- single-item writes (``apply=False``: validate and check only, for transactions)
    def _put(self, op: str, p: Mapping, apply: bool = True, tx: bool = False) -> dict:
        self._legacy(p, "Expected")
        t = self.table(op, p["TableName"])
        item = _item_in(p["Item"])
        k = t.check_put(item)
        names = _Names(p, "ConditionExpression", in_transaction=tx)
        old = self._check(op, t, k, p, names)
        if item_size(item) > ITEM_LIMIT:
            raise _Validation("Item size has exceeded the maximum allowed size")
        if apply:
            t.put(k, item)
        return {"Attributes": _copy(old)} if old is not None and p.get("ReturnValues") == "ALL_OLD" else {}

    def _delete(self, op: str, p: Mapping, apply: bool = True, tx: bool = False) -> dict:
        self._legacy(p, "Expected")
        t = self.table(op, p["TableName"])
        k = t.key_of(p["Key"])
        names = _Names(p, "ConditionExpression", in_transaction=tx)
        old = self._check(op, t, k, p, names)
        if apply:
            t.delete(k)
        return {"Attributes": _copy(old)} if old is not None and p.get("ReturnValues") == "ALL_OLD" else {}

    def _update(self, op: str, p: Mapping, apply: bool = True, tx: bool = False) -> dict:
        self._legacy(p, "Expected", "AttributeUpdates")
        t = self.table(op, p["TableName"])
        key = _item_in(p["Key"])
        k = t.key_of(key)
        names = _Names(p, "UpdateExpression", "ConditionExpression", in_transaction=tx)
        expr = p.get("UpdateExpression")
        actions = _parse_update(expr) if expr is not None else []
        old = self._check(op, t, k, p, names)
        new = _copy(old) if old is not None else _copy(key)
        if actions:
            _apply_update(actions, new, names, t.key_names)
        for name in t.global_indexes:  # an index key set to an empty string or blob
            for attr in t.indexes[name][:2]:
                v = new.get(attr) if attr else None
                if _empty_scalar(v) and (old is None or not _eq(old.get(attr), v)):
                    raise _Validation("One or more parameter values are not valid. The update expression attempted "
                                      "to update a secondary index key to a value that is not supported. The "
                                      "AttributeValue for a key attribute cannot contain an empty string value.")
        if item_size(new) > ITEM_LIMIT:
            raise _Validation("Item size to update has exceeded the maximum allowed size")
        if apply:
            t.put(k, new)
        rv = p.get("ReturnValues") or "NONE"
        if rv == "ALL_NEW":
            return {"Attributes": _copy(new)}
        if rv == "ALL_OLD":
            return {"Attributes": _copy(old)} if old is not None else {}
        # UPDATED_*: as moto answers them (lakeq asks neither; pynamodb's update asks ALL_NEW)
        before = old or {}
        changed = set(before) | set(new)
        changed -= {a for a in before if before[a] == new.get(a)}
        if rv == "UPDATED_NEW":
            return {"Attributes": _changed_parts(before, _copy(new))}
        if rv == "UPDATED_OLD":
            got = {a: _copy(v) for a, v in before.items() if a in changed}
            return {"Attributes": got} if got else {}
        return {}

    def _condition_check(self, op: str, p: Mapping, apply: bool = True, tx: bool = False) -> dict:
        t = self.table(op, p["TableName"])
        k = t.key_of(p["Key"])
        names = _Names(p, "ConditionExpression", in_transaction=tx)
        self._check(op, t, k, p, names)
        return {}

    _put_item, _delete_item, _update_item = _put, _delete, _update

    # ----- reads
    @staticmethod
    def _projector(p: Mapping, names: _Names) -> Callable[[dict], dict]:
        """The call's projection as a function of an item (its names resolved now: used even when
        no item is read)."""
        if p.get("ProjectionExpression"):
            paths = [names.path(x) for x in _parse_projection(p["ProjectionExpression"])]
            return lambda item: _project(item, paths)
        if p.get("AttributesToGet"):
            wanted = list(p["AttributesToGet"])
            return lambda item: {a: _copy(item[a]) for a in wanted if a in item}
        return _copy

    def _get_item(self, op: str, p: Mapping) -> dict:
        t = self.table(op, p["TableName"])
        k = t.key_of(p["Key"])
        names = _Names(p, "ProjectionExpression")
        project = self._projector(p, names)
        item = t.get(k)
        return {"Item": project(item)} if item is not None else {}

    def _batch_get_item(self, op: str, p: Mapping) -> dict:
        responses: dict[str, list] = {}
        for name, req in p["RequestItems"].items():
            t = self.table(op, name)
            names = _Names(req, "ProjectionExpression")
            project = self._projector(req, names)
            got = responses.setdefault(name, [])
            keys = [t.key_of(key) for key in req["Keys"]]
            if len(set(keys)) < len(keys):
                raise _Validation("Provided list of item keys contains duplicates")
            for key in keys:
                item = t.get(key)
                if item is not None:
                    got.append(project(item))
        return {"Responses": responses, "UnprocessedKeys": {}}

    def _transact_get_items(self, op: str, p: Mapping) -> dict:
        out = []
        for entry in p["TransactItems"]:
            g = entry["Get"]
            t = self.table(op, g["TableName"])
            names = _Names(g, "ProjectionExpression")
            project = self._projector(g, names)
            item = t.get(t.key_of(g["Key"]))
            out.append({"Item": project(item)} if item is not None else {})
        return {"Responses": out}

    def _query(self, op: str, p: Mapping) -> dict:
        self._legacy(p, "KeyConditions", "QueryFilter")
        t = self.table(op, p["TableName"])
        names = _Names(p, "KeyConditionExpression", "FilterExpression", "ProjectionExpression")
        index = p.get("IndexName")
        if index is not None and index not in t.indexes:
            raise _Validation(f"The table does not have the specified index: {index}")
        self._index_read_checks(p, t, index)
        hk, rk = (t.indexes[index][0], t.indexes[index][1]) if index else (t.hash_key, t.range_key)
        kc = _parse_condition(p["KeyConditionExpression"])
        want = self._hash_value(kc, hk, names)
        self._key_condition_checks(kc, hk, rk, t, names)
        if index is None:
            part = t.items.get(_scalar(want) if want is not None else None, {})
            candidates = list(part.values())
        else:
            candidates = [it for it in t.all() if hk in it and _eq(it[hk], want) and (rk is None or rk in it)]
        candidates.sort(key=_order_of(t, index))
        if p.get("ScanIndexForward") is False:
            candidates.reverse()
        return self._page(op, t, p, names, candidates, kc, index)

    @staticmethod
    def _index_read_checks(p: Mapping, t: Table, index: str | None) -> None:
        """What DynamoDB refuses of a read on a global index (moto's checks, in its order)."""
        if index is None or index not in t.global_indexes:
            return
        if p.get("Select") == "ALL_ATTRIBUTES" and t.indexes[index][2] != "ALL":
            raise _Validation("One or more parameter values were invalid: Select type ALL_ATTRIBUTES is not "
                              f"supported for global secondary index {index} because its projection type is not ALL")
        if p.get("ConsistentRead"):
            raise _Validation("Consistent reads are not supported on global secondary indexes")

    @staticmethod
    def _key_condition_checks(kc: tuple, hk: str, rk: str | None, t: Table, names: _Names) -> None:
        """A key condition names the key's attributes only (an OR is refused by the parser's
        caller: no hash value is found under it), and begins_with takes a string or binary key."""
        nodes = [kc]
        while nodes:
            n = nodes.pop()
            if n[0] in ("and", "or", "not", "paren"):
                nodes += [x for x in n[1:] if isinstance(x, tuple)]
                continue
            operands = n[2] if n[0] == "fn" else [x for x in n[1:] if isinstance(x, tuple)]
            if n[0] == "in":
                operands = [n[1], *n[2]]
            for o in operands:
                if o[0] in ("path", "size") and names.path(o[1]) not in ((hk,), (rk,)):
                    raise _Validation("Query condition missed key schema element: " + (rk or hk))
            if n[0] == "fn" and n[1] == "begins_with" and t.types.get(rk) not in ("S", "B"):
                raise _Validation("Invalid KeyConditionExpression: Incorrect operand type for operator or function; "
                                  f"operator or function: begins_with, operand type: {t.types.get(rk)}")

    @staticmethod
    def _hash_value(kc: tuple, hk: str, names: _Names) -> Any:
        nodes = [kc]
        while nodes:
            n = nodes.pop()
            if n[0] == "and":
                nodes += [n[1], n[2]]
            elif n[0] == "paren":
                nodes.append(n[1])
            elif n[0] == "cmp" and n[1] == "=" and n[2][0] == "path" and names.path(n[2][1]) == (hk,) \
                    and n[3][0] == "value":
                return names.value(n[3][1])
        raise _Validation("Query condition missed key schema element: " + hk)

    def _scan(self, op: str, p: Mapping) -> dict:
        self._legacy(p, "ScanFilter")
        if p.get("TotalSegments") or p.get("Segment"):
            raise NotSupported("the memory store does not run parallel scans")
        t = self.table(op, p["TableName"])
        names = _Names(p, "FilterExpression", "ProjectionExpression")
        index = p.get("IndexName")
        if index is not None and index not in t.indexes:
            raise _Validation(f"The table does not have the specified index: {index}")
        self._index_read_checks(p, t, index)
        items = list(t.all())
        if index is not None:
            hk, rk = t.indexes[index][0], t.indexes[index][1]
            items = [it for it in items if hk in it and (rk is None or rk in it)]
        # in key order, so that a page's start key that is no longer there still marks a place
        items.sort(key=_order_of(t, index))
        return self._page(op, t, p, names, items, None, index)

    def _page(self, op: str, t: Table, p: Mapping, names: _Names, candidates: list, key_condition: tuple | None,
              index: str | None) -> dict:
        key_attrs = list(t.key_names) + ([a for a in t.indexes[index][:2] if a and a not in t.key_names]
                                         if index else [])
        start = p.get("ExclusiveStartKey")
        if start is not None:
            start = _item_in(start)
            for i, it in enumerate(candidates):
                if all(a in it and _eq(it[a], start.get(a)) for a in key_attrs):
                    candidates = candidates[i + 1:]
                    break
            else:  # the start key's item is gone (deleted since): the candidates ordered after it
                order = _order_of(t, index)
                pivot = order(start)
                forward = key_condition is None or p.get("ScanIndexForward") is not False
                candidates = [it for it in candidates if (order(it) > pivot if forward else order(it) < pivot)]
        limit = p.get("Limit")
        filt = _parse_condition(p["FilterExpression"]) if p.get("FilterExpression") else None
        project = self._projector(p, names)
        # as moto: the page ends at Limit items read when another item of the partition (or index
        # key) follows, whether or not that one meets the key condition; the filter applies after
        results: list = []
        scanned, last, last_read = 0, None, None
        for it in candidates:
            if limit is not None and scanned == limit:
                last = {a: _copy(last_read[a]) for a in key_attrs if a in last_read}
                break
            if key_condition is not None and not _holds(key_condition, it, names):
                continue
            scanned += 1
            last_read = it
            if filt is not None and not _holds(filt, it, names):
                continue
            results.append(it)
        if index is not None:
            hk, rk, ptype, extra = t.indexes[index]
            if ptype == "KEYS_ONLY":
                results = [{a: it[a] for a in key_attrs if a in it} for it in results]
            elif ptype == "INCLUDE":
                results = [{a: it[a] for a in [*key_attrs, *extra] if a in it} for it in results]
        out: dict = {"Count": len(results), "ScannedCount": scanned}
        if p.get("Select") != "COUNT":
            out["Items"] = [project(it) for it in results]
        if last is not None:
            out["LastEvaluatedKey"] = last
        return out

    # ----- batches and transactions
    def _batch_write_item(self, op: str, p: Mapping) -> dict:
        plans = []
        for name, reqs in p["RequestItems"].items():
            t = self.table(op, name)
            seen = set()
            for r in reqs:
                if "PutRequest" in r:
                    item = _item_in(r["PutRequest"]["Item"])
                    k = t.check_put(item)
                    if item_size(item) > ITEM_LIMIT:
                        raise _Validation("Item size has exceeded the maximum allowed size")
                    plans.append((t, k, item))
                else:
                    k = t.key_of(r["DeleteRequest"]["Key"])
                    plans.append((t, k, None))
                if k in seen:
                    raise _Validation("Provided list of item keys contains duplicates")
                seen.add(k)
        for t, k, item in plans:
            if item is None:
                t.delete(k)
            else:
                t.put(k, item)
        return {"UnprocessedItems": {}, "ItemCollectionMetrics": {}}

    def _transact_write_items(self, op: str, p: Mapping) -> dict:
        entries = p["TransactItems"]
        if len(entries) > 100:
            raise _Validation("1 validation error detected at 'transactItems' failed to satisfy constraint: "
                              "Member must have length less than or equal to 100.")
        seen = set()
        for entry in entries:
            (kind, body), = entry.items()
            # the request's own checks first, as moto: every expression parses, no name unused
            if body.get("ConditionExpression"):
                _parse_condition(body["ConditionExpression"])
            if body.get("UpdateExpression"):
                _parse_update(body["UpdateExpression"])
            _Names(body, "ConditionExpression", "UpdateExpression", in_transaction=True)
            t = self.table(op, body["TableName"])
            key = _item_in(body["Item"]) if kind == "Put" else body["Key"]
            k = (body["TableName"], t.key_of(key, item=kind == "Put"))
            if k in seen:
                raise _Validation("Transaction request cannot include multiple operations on one item")
            seen.add(k)
        reasons: list[tuple[str | None, str | None, dict | None]] = []
        run = {"Put": self._put, "Update": self._update, "Delete": self._delete,
               "ConditionCheck": self._condition_check}
        for entry in entries:
            (kind, body), = entry.items()
            try:
                run[kind](op, body, apply=False, tx=True)
                reasons.append((None, None, None))
            except _ConditionFailed as e:
                reasons.append(("ConditionalCheckFailed", "The conditional request failed", e.old))
        if any(code for code, _, _ in reasons):
            msg = ("Transaction cancelled, please refer cancellation reasons for specific reasons ["
                   + ", ".join(str(code) for code, _, _ in reasons) + "]")
            out = []
            for code, message, item in reasons:
                r: dict = {"Code": code, "Message": message} if code else {"Code": "None"}
                if item:
                    r["Item"] = item
                out.append(r)
            raise _error(op, "TransactionCanceledException", msg, Message=msg, CancellationReasons=out)
        for entry in entries:
            (kind, body), = entry.items()
            run[kind](op, body, apply=True, tx=True)
        return {"ItemCollectionMetrics": {}}


@lru_cache(maxsize=None)  # (an operation's name: ten of them; the re.sub per call was ~1 % of the queue model's CPU)
def _snake(name: str) -> str:
    return re.sub(r"(?<!^)([A-Z])", r"_\1", name).lower()


# ------------------------------------------------------------------------------------- the transport

_store: MemoryDynamo | None = None


def active() -> MemoryDynamo | None:
    return _store


def call(client: Any, operation: str, params: Mapping) -> Any:
    """The interceptor's ``direct`` transport: DynamoDB's data plane answered by the active memory
    store (:func:`use`); every other call to the wire (moto's mock for S3, SQS, the control plane)."""
    store = _store
    service = client.meta.service_model.service_name
    if store is None:
        return NOT_HANDLED
    if service == "dynamodbstreams":
        raise NotSupported("the memory store has no Streams: run this test on moto (mark it ``moto``)")
    if service != "dynamodb" or operation not in OPERATIONS:
        return NOT_HANDLED
    validate(client.meta.service_model, operation, params)
    return store.call(operation, params)


# ------------------------------------------------------------------------------------- parameter validation

# botocore's parameter validation of each call (what the client does before sending it) was ~8 % of
# the queue model's CPU: a generic walk of every value against the model. What it looks at is the
# params' *form*: each dict's keys, each list's length, each leaf's type, strings' lengths compared to
# the model's ``min`` (at most 3 in these operations), numbers against ``min``. So a form it passed
# once passes again: :func:`_form` reduces the params to exactly that (bools kept by value: one passes
# botocore's integer check, True = 1, False = 0; a string's length capped just
# above the operation's largest ``min``, numbers kept whole) and a form seen valid is not walked
# again. Anything else (a new form, an invalid call) goes through botocore's validator, so the errors
# are botocore's own, word for word. Operations whose model has timestamps or documents (values
# checked by parsing) are always validated in full.
_VALID_FORMS: dict[tuple, None] = {}
_OP_CAP: dict[tuple, int | None] = {}
_FORMS_KEPT = 100_000


def _string_cap(shape: Any) -> int | None:
    """1 + the largest string ``min`` in ``shape``'s model; None when a value is checked by parsing."""
    seen: set[str] = set()
    cap = 0
    todo = [shape]
    while todo:
        s = todo.pop()
        if s.name in seen:
            continue
        seen.add(s.name)
        if s.type_name in ("timestamp", "document") or s.metadata.get("document") or \
                getattr(s, "is_document_type", False) or s.serialization.get("jsonvalue"):
            return None
        if s.type_name == "string":
            cap = max(cap, int(s.metadata.get("min", 0)))
        if s.type_name == "structure":
            todo += s.members.values()
        elif s.type_name == "list":
            todo.append(s.member)
        elif s.type_name == "map":
            todo += (s.key, s.value)
    return cap + 1


class _NoForm(Exception):
    pass


def _form(v: Any, cap: int) -> Any:
    t = type(v)
    if t is str:
        n = len(v)
        return n if n < cap else cap
    if t is dict:
        return tuple((k if type(k) is str else _no_form(), _form(x, cap)) for k, x in v.items())
    if t is list or t is tuple:
        return (t, tuple(_form(x, cap) for x in v))
    if t is int or t is float or t is Decimal or t is bool:  # a bool passes botocore's integer check, by value
        return (t, v)
    if t is bytes or t is bytearray or v is None:
        return t
    return _no_form()


def _no_form() -> Any:
    raise _NoForm


def validate(service_model: Any, operation: str, params: Mapping) -> None:
    """botocore's ``validate_parameters`` of ``operation``'s input, walking a form only once (above)."""
    op = (service_model.service_name, service_model.api_version, operation)
    if op not in _OP_CAP:
        _OP_CAP[op] = _string_cap(service_model.operation_model(operation).input_shape)
    cap = _OP_CAP[op]
    try:
        key = None if cap is None else (op, _form(params, cap))
        if key is not None and key in _VALID_FORMS:
            return
    except (_NoForm, TypeError):  # TypeError: an unhashable value (Decimal("sNaN"))
        key = None
    validate_parameters(params, service_model.operation_model(operation).input_shape)
    if key is not None:
        if len(_VALID_FORMS) >= _FORMS_KEPT:
            _VALID_FORMS.clear()
        _VALID_FORMS[key] = None


def use(store: MemoryDynamo | None) -> None:
    """Answer DynamoDB's data plane from ``store`` (None: back to the wire / moto)."""
    global _store
    _store = store


@contextmanager
def using(store: MemoryDynamo | None) -> Iterator[MemoryDynamo | None]:
    """``use(store)`` inside the block, the store before it after."""
    before = _store
    use(store)
    try:
        yield store
    finally:
        use(before)


def from_template(template: Any, stack_name: str | None = None) -> MemoryDynamo:
    """A memory store holding the template's tables, empty."""
    from infra.local import template as tpl

    ctx = tpl._ctx(template, stack_name or tpl.LOCAL_STACK, None)
    return MemoryDynamo(tpl.table_definitions(ctx).values())
