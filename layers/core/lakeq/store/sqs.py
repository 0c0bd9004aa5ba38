"""Storage of the SQS face of topics (lakeq.sqs.queues): a queue is a topic item (its ``sqs`` JSON:
attributes, tags) + its queue items + the queue's own consumer group (and a producer client the
admin sends as). Every write is conditional or one transaction; costs in docs/design.md.
"""
from __future__ import annotations

import hashlib
import json
import secrets

from pynamodb.exceptions import DoesNotExist
from pynamodb.transactions import TransactWrite

from lakeq.common.names import log_name
from lakeq.store.catalog import ClientRepo, TopicRepo, inc_of, topic_inc_is, topic_live
from lakeq.store.models import ClientModel, DelayedModel, KeyModel, QueueModel, TopicModel, queue_key
from lakeq.store.records import Client, Topic
from lakeq.store.writes import TransactionFailed, transact, transact_if_first, update_if

GROUP_PREFIX = "sqs."
PRODUCER_SUFFIX = ".send"


def group_name(queue: str) -> str:
    """The consumer group an SQS queue is read through.

    >>> group_name("jobs"), producer_name("jobs.fifo")
    ('sqs.jobs', 'sqs.jobs.fifo.send')
    """
    return GROUP_PREFIX + queue


def producer_name(queue: str) -> str:
    """The producer client the admin's SendMessage calls produce as."""
    return GROUP_PREFIX + queue + PRODUCER_SUFFIX


def _unusable_key_hash() -> str:
    """A key hash nobody holds the key of (the SQS clients are used through the SQS endpoint only)."""
    return hashlib.sha256(("sqs-internal:" + secrets.token_hex(32)).encode()).hexdigest()


def _clients(queue: str, now: int, redrive: tuple[str, int] | None = None) -> list[ClientModel]:
    """The queue's consumer group (with its dead-letter settings when ``redrive`` = (topic,
    max_deliveries)) and producer client."""
    out = []
    for name, role in ((group_name(queue), "consumer"), (producer_name(queue), "producer")):
        c = ClientModel(name, role=role, topics=[queue], mode="clustering", visibility_timeout_ms=30_000,
                        key_hash=_unusable_key_hash(), created_at=now)
        if role == "consumer" and redrive is not None:
            c.dead_letter_topic, c.max_deliveries = redrive
        c.key_map = json.dumps({c.key_hash[:16]: c.key_hash})
        c.key_version = 1
        out.append(c)
    return out


DELAYED_CLEANUP_MAX = 250  # delayed items of a deleted queue deleted by one DeleteQueue (best effort)


class SqsRepo:
    @staticmethod
    def get(name: str) -> Topic | None:
        return TopicRepo.get(name)

    @staticmethod
    def create(name: str, queues: int, sqs: str, now: int,
               redrive: tuple[str, int] | None = None) -> None:
        """One transaction: the topic item (with its ``sqs`` JSON), its queue items, the queue's
        consumer group (with its dead-letter settings) and producer client and their key items.
        Over a tombstone (a deleted queue of this name) the topic is its next incarnation
        (TopicRepo.create's rule): new keys, so the deleted queue's messages, delayed messages and
        deduplication ids are never seen. Raises TransactionFailed: index 0 = the topic exists (or
        changed meanwhile), 1 + queues / +2 = a client of that name exists."""
        old = TopicRepo.get_any(name)
        inc = TopicRepo.next_inc(old)
        log = log_name(name, inc)
        clients = _clients(name, now, redrive)

        def build(t: TransactWrite) -> None:
            t.save(TopicModel(name, queues=queues, parent=None, created_at=now, sqs=sqs, inc=inc),
                   condition=TopicRepo.create_condition(old))
            for q in range(queues):
                t.save(QueueModel(log, q, max_offset=0, min_offset=0, last_produced_at=0),
                       condition=QueueModel.pq.does_not_exist())
            for c in clients:
                t.save(c, condition=ClientModel.name.does_not_exist())
            for c in clients:
                t.save(KeyModel(c.key_hash, client=c.name, key_id=c.key_hash[:16], created_at=now),
                       condition=KeyModel.key_hash.does_not_exist())
        transact(build)

    @staticmethod
    def ensure_clients(name: str, now: int) -> None:
        """The SQS clients of a topic made by lakeq's own API, made on first SQS use (each with its key
        item, one transaction per client; an existing one is kept)."""
        for c in _clients(name, now):
            if ClientRepo.get(c.name) is not None:
                continue
            try:
                ClientRepo.create(c)
            except TransactionFailed as e:
                if not e.failed(0):  # else a concurrent first use made it: fine
                    raise

    @staticmethod
    def set_sqs(name: str, old: str | None, new: str, inc: int = 0) -> bool:
        """Replace the topic's ``sqs`` JSON if it is still ``old`` in incarnation ``inc``
        (compare-and-set). One conditional UpdateItem; False when it changed meanwhile or the topic
        is gone."""
        cond = topic_live() & topic_inc_is(inc) & (TopicModel.sqs.does_not_exist() if old is None
                                                   else TopicModel.sqs == old)
        return update_if(TopicModel(name), [TopicModel.sqs.set(new)], cond)

    @staticmethod
    def delete(t: Topic, now: int) -> bool:
        """Delete the queue ``t`` (the topic item read): one transaction replaces the topic item by
        its tombstone (condition: still that live incarnation; the tombstone keeps ``inc`` and the
        queue count) and deletes its queue items, the SQS clients and their key items. Then its
        delayed items go, best effort (:meth:`purge_delayed`). Everything else of the incarnation
        (segments, dedup items, offset records) is unreachable from here on — a topic created
        again is the next incarnation, with other keys — and goes by TTL or stays as a few orphaned
        bytes (docs/design.md "Queue lifecycle"). False when the topic was already gone."""
        name, inc, queues = t.name, inc_of(t), int(t.queues)
        log = log_name(name, inc)
        keys = []
        for cname in (group_name(name), producer_name(name)):
            c = ClientRepo.get(cname)
            if c is not None:
                keys.append(c.key_hash)
                keys.extend(h for h in json.loads(c.key_map or "{}").values() if h != c.key_hash)
                # SQS credentials the admin may have issued to it (lakeq.sqs.keys: "sqs:<access key id>")
                keys.extend("sqs:" + k for k in json.loads(getattr(c, "sqs_keys", None) or "[]"))

        def build(tw: TransactWrite) -> None:
            tw.save(TopicModel(name, queues=queues, parent=t.parent, created_at=int(t.created_at), inc=inc or None,
                               deleted_at=now),
                    condition=topic_live() & topic_inc_is(inc))
            for q in range(queues):
                tw.delete(QueueModel(log, q))
            for cname in (group_name(name), producer_name(name)):
                tw.delete(ClientModel(cname))
            for h in dict.fromkeys(keys):
                tw.delete(KeyModel(h))
        if not transact_if_first(build):
            return False
        SqsRepo.purge_delayed(log, queues)
        return True

    @staticmethod
    def purge_delayed(log: str, queues: int, limit: int = DELAYED_CLEANUP_MAX) -> int:
        """Delete the delayed items of a deleted incarnation's queues (log name ``log``), at most
        ``limit``: they are unreachable (no queue item points at them, no later incarnation shares
        their keys), this only frees their space. A consistent Query per queue + a DeleteItem each.
        Returns how many were deleted."""
        n = 0
        for q in range(queues):
            for item in DelayedModel.query(queue_key(log, q), consistent_read=True, attributes_to_get=["pq", "due"]):
                if n >= limit:
                    return n
                item.delete()
                n += 1
        return n

    @staticmethod
    def set_credentials(client: Client, version: int | None, live: list[str],
                        add: tuple[str, str] | None = None, remove: str | None = None, now: int = 0) -> None:
        """The client's SQS credentials (:mod:`lakeq.sqs.keys`) in one transaction: its ``sqs_keys``
        := ``live`` (JSON), conditioned on ``key_version`` still being ``version`` (and moving it),
        and the credential's KeysTable item added (``add`` = (its key, the access key id), absent
        before) or removed (``remove`` = its key; absent, or this client's). Raises
        TransactionFailed: index 0 = the client is gone or its keys moved meanwhile, 1 = the added
        item exists."""
        cond = ClientModel.name.exists() & (ClientModel.key_version.does_not_exist() if version is None
                                            else ClientModel.key_version == version)

        def build(t: TransactWrite) -> None:
            t.update(ClientModel(client.name), actions=[ClientModel.sqs_keys.set(json.dumps(live)),
                                      ClientModel.key_version.set((version or 0) + 1)], condition=cond)
            if add is not None:
                t.save(KeyModel(add[0], client=client.name, key_id=add[1], created_at=now),
                       condition=KeyModel.key_hash.does_not_exist())
            if remove is not None:
                t.delete(KeyModel(remove),
                         condition=KeyModel.key_hash.does_not_exist() | (KeyModel.client == client.name))
        transact(build)


def key_owner(key_id: str) -> str | None:
    """The client a key item (``KeyTable``) names: one consistent GetItem; None when there is none."""
    try:
        return KeyModel.get(key_id, consistent_read=True).client
    except DoesNotExist:
        return None
