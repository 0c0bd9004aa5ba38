"""Storage of the SQS face of topics (lakeq.sqs_service): a queue is a topic item (its ``sqs`` JSON:
attributes, tags) + its queue items + the queue's own consumer group (and a producer client the
admin sends as). Every write is conditional or one transaction; costs in docs/design.md.
"""
from __future__ import annotations

import hashlib
import json
import secrets

from pynamodb.transactions import TransactWrite

from .models import ClientModel, KeyModel, OffsetModel, QueueModel, SegmentModel, TopicModel, queue_key
from .repos import ClientRepo, TopicRepo, TransactionFailed, transact, transact_if_first, update_if

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


class SqsRepo:
    @staticmethod
    def get(name: str) -> TopicModel | None:
        return TopicRepo.get(name)

    @staticmethod
    def log_ends(name: str, queues: int) -> list[int]:
        """Where each queue's log of an earlier topic of this name ended (0: none): a queue created
        again starts there, so the segments of a deleted queue (kept) are never read again. One
        consistent Query (newest segment) per queue."""
        ends = []
        for q in range(queues):
            end = 0
            for item in SegmentModel.query(queue_key(name, q), scan_index_forward=False, limit=1,
                                           consistent_read=True):
                end = int(item.end)
            ends.append(end)
        return ends

    @staticmethod
    def create(name: str, queues: int, sqs: str, now: int, ends: list[int],
               redrive: tuple[str, int] | None = None) -> None:
        """One transaction: the topic item (with its ``sqs`` JSON), its queue items (starting at
        ``ends``), the queue's consumer group (with its dead-letter settings) and producer client and
        their key items. Raises TransactionFailed: index 0 = the topic exists, 1 + queues / +2 = a
        client of that name exists."""
        clients = _clients(name, now, redrive)

        def build(t: TransactWrite) -> None:
            t.save(TopicModel(name, queues=queues, parent=None, created_at=now, sqs=sqs),
                   condition=TopicModel.name.does_not_exist())
            for q in range(queues):
                t.save(QueueModel(name, q, max_offset=ends[q], min_offset=ends[q], last_produced_at=0),
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
    def set_sqs(name: str, old: str | None, new: str) -> bool:
        """Replace the topic's ``sqs`` JSON if it is still ``old`` (compare-and-set). One conditional
        UpdateItem; False when it changed meanwhile or the topic is gone."""
        cond = TopicModel.name.exists() & (TopicModel.sqs.does_not_exist() if old is None else TopicModel.sqs == old)
        return update_if(TopicModel(name), [TopicModel.sqs.set(new)], cond)

    @staticmethod
    def delete(name: str, queues: int) -> bool:
        """Delete the queue: first the SQS group's offset records (Query + a DeleteItem each: a crash
        after them leaves the queue in place with its messages to be served again), then one
        transaction: the topic item (condition: it exists), its queue items, the SQS clients and their
        key items. Segments, dedup items and other groups' offset records stay (see docs/design.md).
        False when the topic was already gone."""
        for r in OffsetModel.query(f"g|{group_name(name)}|{name}", consistent_read=True):
            r.delete()
        keys = []
        for cname in (group_name(name), producer_name(name)):
            c = ClientRepo.get(cname)
            if c is not None:
                keys.append(c.key_hash)
                keys.extend(h for h in json.loads(c.key_map or "{}").values() if h != c.key_hash)
                # SQS credentials the admin may have issued to it (lakeq.sqs_keys: "sqs:<access key id>")
                keys.extend("sqs:" + k for k in json.loads(getattr(c, "sqs_keys", None) or "[]"))

        def build(t: TransactWrite) -> None:
            t.delete(TopicModel(name), condition=TopicModel.name.exists())
            for q in range(queues):
                t.delete(QueueModel(name, q))
            for cname in (group_name(name), producer_name(name)):
                t.delete(ClientModel(cname))
            for h in dict.fromkeys(keys):
                t.delete(KeyModel(h))
        return transact_if_first(build)
