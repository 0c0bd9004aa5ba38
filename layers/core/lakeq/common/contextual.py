"""A class attribute that is the current context's own while one is set, and the object's otherwise.

powertools keeps per-request state per process (the resolver's event and routing context, the
metrics provider's set): Lambda runs one request per execution environment at a time, but threads of
one process (the in-process tests, the local stack's ``--in-process`` mode) share it. Such an
attribute, declared as :class:`PerContext` on a subclass, reads and writes the slot ``slot`` of the
value of ``var`` while that is set (the request, the invocation), and the attribute ``outside`` of
``home(obj)`` when it is not (powertools' own place: the object itself, another of its attributes,
or a class).
"""
from __future__ import annotations

from contextvars import ContextVar
from typing import Any, Callable


class PerContext:
    def __init__(self, var: ContextVar, slot: str, outside: str | None = None, *,
                 home: Callable[[Any], Any] = lambda obj: obj):
        self.var, self.slot, self.outside, self.home = var, slot, outside or slot, home

    def __get__(self, obj: Any, owner: Any = None) -> Any:
        if obj is None:
            return self
        current = self.var.get()
        if current is not None:
            return getattr(current, self.slot)
        return getattr(self.home(obj), self.outside)

    def __set__(self, obj: Any, value: Any) -> None:
        current = self.var.get()
        if current is not None:
            setattr(current, self.slot, value)
        else:
            setattr(self.home(obj), self.outside, value)
