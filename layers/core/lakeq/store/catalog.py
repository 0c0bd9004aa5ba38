"""The catalog's repositories: topics (:class:`TopicRepo`: the topic item, its queue items made with
it, tombstones and incarnations) and clients (:class:`ClientRepo`: the client item and its key
items). Every write is a conditional write or a transaction (:mod:`lakeq.store.writes`).
"""
from __future__ import annotations

import dataclasses
import time

from pynamodb.exceptions import DoesNotExist
from pynamodb.transactions import TransactWrite

from lakeq.common.names import log_name
from lakeq.store.models import ClientModel, KeyModel, QueueModel, TopicModel
from lakeq.store.queue_log import LogRepo
from lakeq.store.records import Client, Topic, record_of
from lakeq.store.writes import transact, update_if

# The container's copy of the topic list (TopicRepo.all_listed): "all" -> (monotonic read time, topics)
_LISTED: dict[str, tuple[float, list[Topic]]] = {}
LISTED_S = 5.0  # the console refreshes every 5 s: one Scan per container per refresh, whatever the request rate
_monotonic = time.monotonic


def topic_live():
    """Condition: the topic item exists and is no tombstone (docs/design.md "Queue lifecycle")."""
    return TopicModel.name.exists() & TopicModel.deleted_at.does_not_exist()


def topic_inc_is(inc: int):
    """Condition: the topic item's incarnation is ``inc`` (absent = 0)."""
    return TopicModel.inc.does_not_exist() if not inc else TopicModel.inc == inc


def inc_of(t: Topic | TopicModel | None) -> int:
    """A topic item's (or tombstone's) incarnation; 0 for none."""
    return 0 if t is None or t.inc is None else int(t.inc)


class TopicRepo:
    @staticmethod
    def get(name: str, consistent: bool = True) -> Topic | None:
        """The topic item; None when there is none or it is a tombstone (a deleted topic).
        ``consistent=False``: an eventually consistent GetItem (0.5 RRU; the native produce); a miss
        (none, or a tombstone) is read again strongly consistently, so a topic just made (or made
        again) is never answered as absent."""
        t = TopicRepo.get_any(name, consistent)
        if not consistent and (t is None or t.deleted_at is not None):
            t = TopicRepo.get_any(name)
        return None if t is None or t.deleted_at is not None else t

    @staticmethod
    def get_any(name: str, consistent: bool = True) -> Topic | None:
        """The topic item or its tombstone (consistent GetItem unless ``consistent`` is False)."""
        try:
            return record_of(Topic, TopicModel.get(name, consistent_read=consistent))
        except DoesNotExist:
            return None

    @staticmethod
    def create_condition(old: Topic | None):
        """Condition of a topic item put over ``old`` (what a read found): absent then, or the same
        tombstone (a live topic fails it)."""
        if old is None:
            return TopicModel.name.does_not_exist()
        return TopicModel.deleted_at.exists() & topic_inc_is(inc_of(old))

    @staticmethod
    def next_inc(old: Topic | None) -> int | None:
        """The incarnation of a topic created over ``old``: 0 (absent) when there was none, else
        the tombstone's + 1."""
        return None if old is None else inc_of(old) + 1

    @staticmethod
    def create(name: str, queues: int, parent: str | None, now: int) -> None:
        """Topic item + one queue item per queue, atomically; the parent must exist. Over a
        tombstone (a deleted topic of this name) the topic is its next incarnation: new keys, so
        nothing of the deleted one is seen. Raises TransactionFailed: reason index 0 = topic exists
        (or was deleted or created meanwhile), 1 = parent missing."""
        old = TopicRepo.get_any(name)
        inc = TopicRepo.next_inc(old)
        log = log_name(name, inc)

        def build(t: TransactWrite) -> None:
            t.save(TopicModel(name, queues=queues, parent=parent, created_at=now, inc=inc),
                   condition=TopicRepo.create_condition(old))
            if parent is not None:
                t.condition_check(TopicModel, parent, condition=topic_live())
            for q in range(queues):
                t.save(QueueModel(log, q, max_offset=0, min_offset=0, last_produced_at=0),
                       condition=QueueModel.pq.does_not_exist())
        try:
            transact(build)
        finally:
            LogRepo.forget_topic(name)  # this container's next produce or pull reads it as stored
            _LISTED.clear()

    @staticmethod
    def grow(name: str, old: int, new: int, inc: int = 0) -> None:
        """Queue count ``old`` → ``new`` and the new queue items, atomically, in incarnation
        ``inc`` (the one read). Raises TransactionFailed: reason index 0 = the count is no longer
        ``old`` or the topic is no longer that incarnation."""
        log = log_name(name, inc)

        def build(t: TransactWrite) -> None:
            t.update(TopicModel(name), actions=[TopicModel.queues.set(new)],
                     condition=topic_live() & topic_inc_is(inc) & (TopicModel.queues == old))
            for q in range(old, new):
                t.save(QueueModel(log, q, max_offset=0, min_offset=0, last_produced_at=0),
                       condition=QueueModel.pq.does_not_exist())
        try:
            transact(build)
        finally:
            LogRepo.forget_topic(name)
            _LISTED.clear()

    @staticmethod
    def all() -> list[Topic]:
        """Every topic (tombstones left out), by name."""
        return sorted((record_of(Topic, t) for t in TopicModel.scan() if t.deleted_at is None), key=lambda t: t.name)

    @classmethod
    def all_listed(cls) -> list[Topic]:
        """:meth:`all` from the container's copy while it is younger than :data:`LISTED_S`
        (monotonic), else a fresh Scan kept as the copy. For a client key's console
        summary (``lakeq.console.summary``): its grants are name prefixes, matched over every topic, so
        each of its summaries read the whole topics table — at any request rate. With the copy, at
        most one Scan per container per :data:`LISTED_S`; a topic created or deleted elsewhere shows
        within that. O(topics) per copy."""
        now = _monotonic()
        hit = _LISTED.get("all")
        if hit is not None and 0 <= now - hit[0] < LISTED_S:
            return list(hit[1])
        topics = cls.all()
        _LISTED["all"] = (now, topics)
        return list(topics)

    @staticmethod
    def forget_listed() -> None:
        """Drop the container's copy of the topic list (tests: a fresh store)."""
        _LISTED.clear()


class ClientRepo:
    @staticmethod
    def all(attributes: list[str] | None = None) -> list[Client]:
        """Every client, by name: one Scan of the clients table (all its pages). ``attributes``:
        only these are read (a ProjectionExpression; the others are None or their default in the
        records): a reader that needs no key or push secret reads none."""
        return sorted((record_of(Client, c) for c in ClientModel.scan(attributes_to_get=attributes)),
                      key=lambda c: c.name)

    @staticmethod
    def get(name: str) -> Client | None:
        try:
            return record_of(Client, ClientModel.get(name, consistent_read=True))
        except DoesNotExist:
            return None

    @staticmethod
    def model(client: Client) -> ClientModel:
        """The item of ``client`` as a model to put (its absent attributes left out)."""
        return ClientModel(client.name, **{k: v for k, v in dataclasses.asdict(client).items()
                                           if k != "name" and v is not None})

    @staticmethod
    def create(client: Client | ClientModel) -> None:
        """Client and its key item, atomically; index 0 failing = the name exists."""
        item = client if isinstance(client, ClientModel) else ClientRepo.model(client)

        def build(t: TransactWrite) -> None:
            t.save(item, condition=ClientModel.name.does_not_exist())
            t.save(KeyModel(client.key_hash, client=client.name, key_id=client.key_hash[:16],
                            created_at=client.created_at),
                   condition=KeyModel.key_hash.does_not_exist())
        transact(build)

    @staticmethod
    def client_for_key(key_hash: str) -> str | None:
        """Strongly consistent: a key revoked a moment ago is not found (0.5 RCU more than an
        eventually consistent read, paid once per key and container per cache TTL)."""
        try:
            return KeyModel.get(key_hash, consistent_read=True).client
        except DoesNotExist:
            return None

    @staticmethod
    def set_keys(client: Client, version: int | None, key_map: str, add: tuple[str, str, int] | None = None,
                 remove: str | None = None) -> None:
        """The client's key set ``key_map`` (conditioned on ``key_version`` still being ``version``)
        and the key item added (``add`` = (key hash, key id, created at), absent before) or removed
        (``remove`` = its key hash), in one transaction. Raises TransactionFailed: reason
        index 0 = the client is gone or its keys changed meanwhile (read again)."""
        cond = ClientModel.name.exists() & (ClientModel.key_version.does_not_exist() if version is None
                                            else ClientModel.key_version == version)

        def build(t: TransactWrite) -> None:
            t.update(ClientModel(client.name), actions=[ClientModel.key_map.set(key_map),
                                      ClientModel.key_version.set((version or 0) + 1)], condition=cond)
            if add is not None:
                t.save(KeyModel(add[0], client=client.name, key_id=add[1], created_at=add[2]),
                       condition=KeyModel.key_hash.does_not_exist())
            if remove is not None:
                t.delete(KeyModel(remove),
                         condition=KeyModel.key_hash.does_not_exist() | (KeyModel.client == client.name))
        transact(build)


    @staticmethod
    def set_settings(name: str, changes: dict) -> Client | None:
        """A consumer's ``max_deliveries`` / ``dead_letter_topic`` (None removes): one conditional
        UpdateItem (the client exists and is a consumer). None when it is not (any more)."""
        actions = [getattr(ClientModel, k).remove() if val is None else getattr(ClientModel, k).set(val)
                   for k, val in changes.items()]
        c = ClientModel(name)
        written = update_if(c, actions, ClientModel.name.exists() & (ClientModel.role == "consumer"))
        return record_of(Client, c) if written else None
