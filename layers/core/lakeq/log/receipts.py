"""Receipts ``broker:queue:offset:next_offset:timestamp`` (SPEC §1). Pure.

``broker`` is the store instance name; ``queue`` identifies the queue in the server's own encoding:
``<log>@<queue number>`` for a topic queue (``<log>``: the topic's log name, the topic name or
``<topic>!<incarnation>`` for a topic created again after a deletion, lakeq.common.names.log_name; topic
names never contain ``@``, ``:`` or ``!``), ``~<id>``
for a subscription's list (topic names never start with ``~``), ``~r.<replay id>`` for a replay's hidden
list of a consumer group (issue 18.1: subscription ids are 32 hex digits, never ``r.…``). ``offset`` is the first offset
delivered, ``next_offset`` the offset after the batch, ``timestamp`` the lock timestamp (epoch ms).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from lakeq.common.errors import BadRequest
from lakeq.common.names import (
    is_list,
    is_log_name,
    is_name,
    list_log,
    replay_log,
    replay_of,
    subscription_of,
    topic_of_log,
)

_QUEUE_NUMBER = re.compile(r"[0-9]{1,4}")


def _queue_field_ok(queue: str) -> bool:
    """``<log>@<queue>`` or ``~<subscription id>``, names by :mod:`lakeq.common.names`' rule.

    >>> [_queue_field_ok(q) for q in ("quotes/sh@3", "~ab12", "a//b@1", "~a/b", "t@", "t@12345", "t!2@1", "t!0@1")]
    [True, True, False, False, False, False, True, False]
    """
    if is_list(queue):
        return is_name(queue[1:])
    log, at, q = queue.rpartition("@")
    return bool(at) and is_log_name(log) and _QUEUE_NUMBER.fullmatch(q) is not None
_MAX = 2**63 - 1


@dataclass(frozen=True)
class Receipt:
    broker: str
    queue: str
    offset: int
    next_offset: int
    timestamp: int

    def __str__(self) -> str:
        return f"{self.broker}:{self.queue}:{self.offset}:{self.next_offset}:{self.timestamp}"

    @property
    def subscription(self) -> str | None:
        """The subscription id when the receipt is for a subscription's list, else None."""
        return subscription_of(self.queue)

    @property
    def replay(self) -> str | None:
        """The replay id when the receipt is for a replay's hidden list of a group, else None.

        >>> parse("b:~r.rp_1:0:5:9").replay, parse("b:~r.rp_1:0:5:9").subscription, parse("b:~ab:0:5:9").replay
        ('rp_1', None, None)
        """
        return replay_of(self.queue)

    @property
    def topic_queue(self) -> tuple[str, int]:
        """``(topic, queue)`` for a topic queue's receipt; BadRequest for a subscription's.

        >>> parse("b:t!2@1:0:5:9").topic_queue, parse("b:t!2@1:0:5:9").log, parse("b:t@1:0:5:9").log
        (('t', 1), 't!2', 't')
        """
        if is_list(self.queue):
            raise BadRequest("receipt is for a subscription or replay list, not a topic queue")
        log, _, q = self.queue.rpartition("@")
        return topic_of_log(log), int(q)

    @property
    def log(self) -> str:
        """The log name of a topic queue's receipt (its topic's incarnation when it was issued)."""
        return self.queue.rpartition("@")[0]


def topic_queue_field(log: str, queue: int) -> str:
    """The queue field of a receipt for queue ``queue`` of log ``log`` (a topic's log name)."""
    return f"{log}@{queue}"


def subscription_field(sub_id: str) -> str:
    return list_log(sub_id)


def replay_field(replay_id: str) -> str:
    """The log name (and receipt queue field) of replay ``replay_id``'s hidden list.

    >>> replay_field("rp_1")
    '~r.rp_1'
    """
    return replay_log(replay_id)


def parse(text: object) -> Receipt:
    """Parse a receipt; BadRequest (400) when malformed. O(len(text))."""
    if not isinstance(text, str) or len(text) > 1024:
        raise BadRequest("receipt must be a string broker:queue:offset:next_offset:timestamp")
    parts = text.split(":")
    if len(parts) != 5:
        raise BadRequest("receipt must have five ':'-separated fields broker:queue:offset:next_offset:timestamp")
    broker, queue, off, nxt, ts = parts
    if not broker or not _queue_field_ok(queue):
        raise BadRequest("receipt has an empty broker or an invalid queue field")
    nums = []
    for name, raw in (("offset", off), ("next_offset", nxt), ("timestamp", ts)):
        if not raw.isdigit() or not raw.isascii() or int(raw) > _MAX:
            raise BadRequest(f"receipt {name} must be a non-negative integer")
        nums.append(int(raw))
    if nums[1] <= nums[0]:
        raise BadRequest("receipt next_offset must be greater than offset")
    return Receipt(broker, queue, nums[0], nums[1], nums[2])
