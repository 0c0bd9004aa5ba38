"""Names of topics, clients and groups (API.md "Names"). Pure."""
from __future__ import annotations

import re

from .errors import BadRequest

_NAME = re.compile(r"[A-Za-z0-9._-]{1,200}")
_TOPIC = re.compile(r"[A-Za-z0-9._-]+(?:/[A-Za-z0-9._-]+)*")


def is_name(value: object) -> bool:
    return isinstance(value, str) and _NAME.fullmatch(value) is not None


def is_topic(value: object) -> bool:
    return isinstance(value, str) and 1 <= len(value) <= 200 and _TOPIC.fullmatch(value) is not None


def check_name(value: object, what: str) -> str:
    if not is_name(value):
        raise BadRequest(f"{what} must be 1-200 characters of A-Z a-z 0-9 . _ -")
    return value  # type: ignore[return-value]


def check_topic(value: object, what: str = "topic") -> str:
    if not is_topic(value):
        raise BadRequest(f"{what} must be 1-200 characters of A-Z a-z 0-9 . _ - with '/' between segments")
    return value  # type: ignore[return-value]


def parent_of(topic: str) -> str | None:
    """``quotes/sh`` -> ``quotes``; a root topic has no parent."""
    head, sep, _ = topic.rpartition("/")
    return head if sep else None


def ancestors(topic: str) -> list[str]:
    """The topic itself and every ancestor, nearest first: ``a/b/c`` -> ``[a/b/c, a/b, a]``."""
    out = [topic]
    while (p := parent_of(out[-1])) is not None:
        out.append(p)
    return out


def covers(granted: str, topic: str) -> bool:
    """A grant (or subscription) on ``granted`` covers ``topic`` itself and all its descendants."""
    return topic == granted or topic.startswith(granted + "/")
