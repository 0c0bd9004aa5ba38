"""The one name rule (API.md "Names"): clients, groups, members, subscription ids and topic
segments are 1-200 characters of ``A-Z a-z 0-9 . _ -``; a topic is segments joined by ``/``, at
most 200 characters in all. Every check of a name in the core goes through this module. Pure.

>>> is_name("risk-1.a_b"), is_name("a\\n"), is_name("a/b"), is_topic("quotes/sh"), is_topic("a//b")
(True, False, False, True, False)
"""
from __future__ import annotations

import re

from lakeq.common.errors import BadRequest

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


# --- topic incarnations (docs/design.md "Queue lifecycle: deletion and incarnations") ------------
# A topic deleted and created again is a new *incarnation* (the topic item's ``inc``: absent = 0).
# Every storage key derived from a topic uses its *log name*: the name itself for incarnation 0
# (so topics that were never deleted keep their keys), else ``<name>!<inc>``. ``!`` is in neither
# rule above, so a log name never equals a topic name of another incarnation or topic, and the
# plain name is recovered by cutting at the last ``!``.
LOG_SEP = "!"


def log_name(topic: str, inc: int | None = 0) -> str:
    """The log name of incarnation ``inc`` of ``topic``.

    >>> log_name("jobs"), log_name("jobs", None), log_name("a/b", 2)
    ('jobs', 'jobs', 'a/b!2')
    """
    return topic if not inc else f"{topic}{LOG_SEP}{int(inc)}"


def log_of(t) -> str:
    """The log name of a topic item or record ``t`` (anything with ``name`` and ``inc``, absent = 0).

    >>> class T: name, inc = "a/b", 2
    >>> log_of(T())
    'a/b!2'
    """
    return log_name(t.name, None if t.inc is None else int(t.inc))


def split_log(log: str) -> tuple[str, int]:
    """``(topic, incarnation)`` of a log name (a subscription's list ``~<id>`` is its own topic).

    >>> split_log("jobs"), split_log("a/b!2"), split_log("~s1")
    (('jobs', 0), ('a/b', 2), ('~s1', 0))
    """
    head, sep, tail = log.rpartition(LOG_SEP)
    if sep and tail.isdigit() and tail.isascii():
        return head, int(tail)
    return log, 0


def topic_of_log(log: str) -> str:
    """The topic a log name belongs to.

    >>> topic_of_log("a/b!12"), topic_of_log("a/b")
    ('a/b', 'a/b')
    """
    return split_log(log)[0]


def is_log_name(value: object) -> bool:
    """A topic name, or one with ``!<incarnation>`` (>= 1, no leading zero) appended.

    >>> [is_log_name(x) for x in ("jobs", "jobs!3", "jobs!0", "jobs!03", "jobs!", "!3", "a!b!2")]
    [True, True, False, False, False, False, False]
    """
    if not isinstance(value, str):
        return False
    topic, inc = split_log(value)
    return is_topic(topic) and log_name(topic, inc) == value


# --- the key grammar -------------------------------------------------------------------------------
# Every storage key lakeq composes from names is spelled and parsed here, nowhere else
# (tests/unit/test_architecture.py::test_the_key_grammar_is_spelled_in_one_module):
#   a queue's partition key (QueuesTable, SegmentsTable)   ``<log>#<queue>``       queue_key / split_queue_key
#   a topic's change marker (QueuesTable, issue 33)         ``<log>#w``             change_key
#   a subscription's message list, as a log                ``~<subscription id>``  list_log / subscription_of
#   a replay's hidden list of a group, as a log            ``~r.<replay id>``      replay_log / replay_of
# ``#`` and ``~`` are in no name rule, so these never collide with a topic's log name.
QUEUE_SEP = "#"
LIST_MARK = "~"
REPLAY_PREFIX = LIST_MARK + "r."


def queue_key(log: str, queue: int | str) -> str:
    """The partition key of queue ``queue`` of log ``log`` (a topic's log name, or a list's).

    >>> queue_key("quotes/sh", 3), queue_key("quotes!2", 0), queue_key(list_log("s1"), 0)
    ('quotes/sh#3', 'quotes!2#0', '~s1#0')
    """
    return f"{log}{QUEUE_SEP}{queue}"


def change_key(log: str) -> str:
    """The QueuesTable key of log ``log``'s change marker (issue 33: what a waiting long poll reads
    each round instead of every queue item; ``lakeq.store.queue_log.LogRepo.change``). ``w`` is no
    queue number, so it never names a queue.

    >>> change_key("quotes/sh"), change_key("quotes!2")
    ('quotes/sh#w', 'quotes!2#w')
    """
    return f"{log}{QUEUE_SEP}w"


def split_queue_key(pq: str) -> tuple[str, str]:
    """``(log, queue digits)`` of a queue's partition key; ``("", pq)`` when it has no ``#``.

    >>> split_queue_key("quotes/sh!2#3"), split_queue_key("~s1#0"), split_queue_key("nohash")
    (('quotes/sh!2', '3'), ('~s1', '0'), ('', 'nohash'))
    """
    log, _, q = pq.rpartition(QUEUE_SEP)
    return log, q


def is_list(log: str) -> bool:
    """Whether a log (or a queue key) is a list (a subscription's or a replay's), not a topic's.

    >>> is_list("~s1"), is_list("~r.rp_1#0"), is_list("quotes"), is_list("")
    (True, True, False, False)
    """
    return log.startswith(LIST_MARK)


def list_log(sub_id: str) -> str:
    """The log name of subscription ``sub_id``'s message list (its pseudo-topic, one queue: 0)."""
    return f"{LIST_MARK}{sub_id}"


def replay_log(replay_id: str) -> str:
    """The log name of replay ``replay_id``'s hidden list (also its receipts' queue field)."""
    return f"{REPLAY_PREFIX}{replay_id}"


def subscription_of(log: str) -> str | None:
    """The subscription id of a subscription list's log name, else None (a topic's, a replay's).

    >>> subscription_of(list_log("s1")), subscription_of(replay_log("rp_1")), subscription_of("quotes")
    ('s1', None, None)
    """
    return log[len(LIST_MARK):] if is_list(log) and not log.startswith(REPLAY_PREFIX) else None


def replay_of(log: str) -> str | None:
    """The replay id of a replay list's log name, else None.

    >>> replay_of(replay_log("rp_1")), replay_of(list_log("s1")), replay_of("quotes")
    ('rp_1', None, None)
    """
    return log[len(REPLAY_PREFIX):] if log.startswith(REPLAY_PREFIX) else None
