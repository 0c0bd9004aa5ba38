"""Plain records: what the repositories hand to the use cases outside ``store``.

The pynamodb models (:mod:`lakeq.store.models`) are private to ``store``; a repository reads a model
and returns its record (same attribute names and values, the item's absent attributes ``None``). A
topic's and a client's records are frozen: a use case changes an item only through a repository
call. A queue item's record is not: a pull moves the heads of the queue records it read in memory
(``max_offset``: :meth:`lakeq.store.queue_log.LogRepo.queues`, :func:`lakeq.produce.delayed.promote_due`),
and writes nothing back from them. A repository that needs the model of a record passed back in
(a write keyed by it) makes it from the key, inside ``store``.
"""
from __future__ import annotations

import dataclasses
import functools
import json
from dataclasses import dataclass, fields
from typing import Any, Callable, TypeVar

from lakeq.common.names import log_of

__all__ = ["Change", "Client", "Queue", "Topic", "log_of", "model_of", "queue_from_item", "record_of"]


@dataclass(frozen=True, slots=True)
class Topic:
    """A topic item (or its tombstone: ``deleted_at`` set); ``inc`` absent = incarnation 0."""
    name: str
    queues: int
    parent: str | None = None
    created_at: int = 0
    sqs: str | None = None
    inc: int | None = None
    deleted_at: int | None = None


@dataclass(frozen=True, slots=True, eq=False)  # eq and hash by identity, as the model's (lists inside)
class Client:
    """A client item: its role, topics and consumer settings, keys, and a group's push endpoint."""
    name: str
    role: str
    topics: list[str]
    key_hash: str
    created_at: int
    mode: str = "clustering"
    visibility_timeout_ms: int = 30_000
    key_map: str | None = None
    key_version: int | None = None
    sqs_keys: str | None = None
    max_deliveries: int | None = None
    dead_letter_topic: str | None = None
    push: str | None = None
    push_secrets: str | None = None
    push_paused: bool | None = None
    push_state: str | None = None
    push_failures: int | None = None
    push_delivered: int | None = None
    push_dead_lettered: int | None = None
    push_send_at: int | None = None
    push_leases: dict | None = None
    push_endpoints: int | None = None
    subscriptions: int | None = None
    alarms_muted: bool | None = None
    replays: set[str] | None = None


@dataclass(slots=True, eq=False)  # eq and hash by identity, as the model's
class Queue:
    """A queue item (``pq`` = ``<log>#<queue>``): the log's offsets, delayed delivery's and a replay
    list's counters. Not frozen: a pull moves ``max_offset`` in memory (nothing writes it back)."""
    pq: str
    topic: str | None = None
    queue: int | None = None
    max_offset: int = 0
    min_offset: int = 0
    last_produced_at: int = 0
    next_due: int | None = None
    delayed: int | None = None
    dver: int | None = None
    rpos: int | None = None
    ended_at: int | None = None
    wv: int | None = None  # a topic's change marker's (key ``<log>#w``, issue 33; read as :class:`Change`)
    wat: int | None = None


@dataclass(frozen=True, slots=True)
class Change:
    """A topic's change marker (issue 33, ``lakeq.store.queue_log.LogRepo.change``): ``version``
    moves on every bump, ``at`` is the latest bump's time (epoch ms, the bumping container's clock)."""
    version: int = 0
    at: int = 0


_QUEUE_SET = frozenset(f.name for f in fields(Queue))
R = TypeVar("R")
M = TypeVar("M")


@functools.cache
def _fields(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls))


def _plain(value: Any) -> Any:
    """A raw map attribute (pynamodb's ``MapAttribute``) as a dict; anything else as it is."""
    as_dict = getattr(value, "as_dict", None)
    return as_dict() if callable(as_dict) else value


def record_of(cls: type[R], m: Any) -> R:
    """The record ``cls`` (a dataclass whose fields are attributes of the model) of the model
    instance ``m``: every field read from ``m``, a raw map attribute as a dict. The one way a
    repository turns an item into what it hands out (:class:`Topic`, :class:`Client`,
    :class:`Queue`, :class:`lakeq.store.redrives.Redrive`, :class:`lakeq.store.replays.Replay`)."""
    return cls(**{f: _plain(getattr(m, f)) for f in _fields(cls)})


def model_of(model: Callable[..., M], rec: Any) -> M:
    """The inverse of :func:`record_of` for a record keyed by ``id``: the model item ``model(rec.id,
    ...)`` with the record's other fields that are set (None: the attribute stays absent)."""
    return model(rec.id, **{k: v for k, v in dataclasses.asdict(rec).items() if k != "id" and v is not None})


def queue_from_item(item: dict) -> Queue:
    """The record of a raw queue item (``{"pq": {"S": …}, "max_offset": {"N": "5"}, …}``, as
    BatchGetItem returns it) without a model in between: what ``QueueModel.from_raw_data`` reads
    (numbers as ``json.loads`` decodes them, an absent or NULL attribute its default), in a
    fraction of its time — a pull reads every queue item of a topic each round."""
    kw = {}
    for k, v in item.items():
        if k in _QUEUE_SET and v and "NULL" not in v:
            kw[k] = v["S"] if "S" in v else json.loads(v["N"])
    return Queue(**kw)
