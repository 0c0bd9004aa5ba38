"""Crash injection: kill a handler right after its k-th store call, as a Lambda can die.

On AWS a function can be cut off between any two DynamoDB/S3 calls (timeout, out of memory, a
host going away): the calls it made stand, the rest never happen, and the client sees no response
(a 502/504 or a dropped connection) and retries. Here :class:`CrashAfter` is an
:mod:`infra.local.interceptor` hook that lets the ``k``-th call made *as a function* (see
``interceptor.acting_as``; set-up and checks made by the test itself are not counted) reach the
store, then raises :class:`Crash` — a ``BaseException``, so no ``except Exception`` in the code
under test can swallow it, exactly as nothing in a dead process runs.

Typical use, for every prefix of a write path::

    n = count_calls(lambda: api.call(...))           # calls made by one uncrashed run
    for k in range(1, n + 1):
        ... fresh tables ...
        with CrashAfter(k) as c:
            crashed = c.run(lambda: api.call(...))     # True when it died after call k
        ... the client retries without the hook, then the history checker runs ...
"""
from __future__ import annotations

import random
from typing import Any, Callable

from infra.local import interceptor
from infra.local.interceptor import Call


class Crash(BaseException):
    """The function's process died right after a store call."""


class CountCalls:
    """Hook: records every call made as a function (``call.function`` set)."""

    def __init__(self, functions: set[str] | None = None):
        self.functions = functions
        self.calls: list[Call] = []

    def _counts(self, call: Call) -> bool:
        return call.function is not None and (self.functions is None or call.function in self.functions)

    def before(self, call: Call) -> None:
        pass

    def after(self, call: Call, response: dict) -> dict:
        if self._counts(call):
            self.calls.append(call)
        return response

    def __enter__(self) -> "CountCalls":
        interceptor.add(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        interceptor.remove(self)


class CrashAfter(CountCalls):
    """Hook: the ``k``-th counted call (1-based) reaches the store, then :class:`Crash` is raised.
    Calls after a crash (there are none in the dead invocation) are not intercepted again: the
    hook fires once. ``fired`` tells whether it did."""

    def __init__(self, k: int, functions: set[str] | None = None):
        super().__init__(functions)
        self.k = k
        self.fired = False

    def after(self, call: Call, response: dict) -> dict:
        if self._counts(call) and not self.fired:
            self.calls.append(call)
            if len(self.calls) == self.k:
                self.fired = True
                raise Crash(f"crashed after call {self.k}: {call.service}.{call.operation}")
        return response

    def run(self, fn: Callable[[], Any]) -> tuple[bool, Any]:
        """``(crashed, result)``: ``fn()`` under this hook; a :class:`Crash` becomes ``(True, None)``."""
        try:
            return False, fn()
        except Crash:
            return True, None


def count_calls(fn: Callable[[], Any], functions: set[str] | None = None) -> tuple[int, Any]:
    """How many store calls ``fn()`` makes as functions, and its result."""
    with CountCalls(functions) as c:
        out = fn()
    return len(c.calls), out


def seeded_points(seed: int, n: int, k: int) -> list[int]:
    """``k`` crash points in ``1..n`` chosen by ``seed`` (all of them when ``n <= k``)."""
    if n <= k:
        return list(range(1, n + 1))
    return sorted(random.Random(seed).sample(range(1, n + 1), k))
