"""A container's bounded memory of recent facts (copies, when it last did something), pure.

Each is a plain dict a module keeps; :func:`keep` writes one entry, and a full dict (``kept`` keys,
the entry's key new) is emptied first rather than trimmed: a forgotten fact costs a store read or a
probe, never a wrong answer, and no per-entry bookkeeping runs on the hot path.
"""
from __future__ import annotations

from typing import Hashable, MutableMapping, TypeVar

V = TypeVar("V")


def keep(memo: MutableMapping[Hashable, V], key: Hashable, value: V, kept: int) -> V:
    """``memo[key] = value``, after emptying ``memo`` when it holds ``kept`` keys and ``key`` is not
    one of them; returns ``value``.

    >>> m = {"a": 1, "b": 2}
    >>> keep(m, "a", 3, 2), m
    (3, {'a': 3, 'b': 2})
    >>> keep(m, "c", 4, 2), m
    (4, {'c': 4})
    """
    if len(memo) >= kept and key not in memo:
        memo.clear()
    memo[key] = value
    return value
