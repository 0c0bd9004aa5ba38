"""The one name rule (API.md "Names"): clients, groups, members, subscription ids and topic
segments are 1-200 characters of ``A-Z a-z 0-9 . _ -``; a topic is segments joined by ``/``, at
most 200 characters in all. Every check of a name in the core goes through this module. Pure.

>>> is_name("risk-1.a_b"), is_name("a\\n"), is_name("a/b"), is_topic("quotes/sh"), is_topic("a//b")
(True, False, False, True, False)
"""
from __future__ import annotations

import re

from .errors import BadRequest

NAME_RULE = "1-200 characters of A-Z a-z 0-9 . _ -"
TOPIC_RULE = NAME_RULE + " with '/' between segments"
_NAME = re.compile(r"[A-Za-z0-9._-]{1,200}")
_TOPIC = re.compile(r"[A-Za-z0-9._-]+(?:/[A-Za-z0-9._-]+)*")


def is_name(value: object) -> bool:
    return isinstance(value, str) and _NAME.fullmatch(value) is not None


def is_topic(value: object) -> bool:
    return isinstance(value, str) and 1 <= len(value) <= 200 and _TOPIC.fullmatch(value) is not None


def check_name(value: object, what: str) -> str:
    if not is_name(value):
        raise BadRequest(f"{what} must be {NAME_RULE}")
    return value  # type: ignore[return-value]


def check_topic(value: object, what: str = "topic") -> str:
    if not is_topic(value):
        raise BadRequest(f"{what} must be {TOPIC_RULE}")
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
