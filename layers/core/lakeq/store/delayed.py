"""Delayed messages' repository (:class:`DelayedRepo`): the DelayedTable items and the queue item's
``next_due`` / ``delayed`` / ``dver``, and their promotion into the log in one transaction
(:mod:`lakeq.store.writes`).
"""
from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timezone

from pynamodb.exceptions import UpdateError
from pynamodb.transactions import TransactWrite

from lakeq.log.delay_plan import Delayed, due_key, encode_message, id_of_due
from lakeq.log.produce_plan import TRANSACT_BYTES, Append, pq
from lakeq.store.models import DedupModel, DelayedModel, QueueModel, SegmentModel
from lakeq.store.queue_log import DEDUP_TTL_S
from lakeq.store.records import Queue, record_of
from lakeq.store.writes import conditional_failed, transact


class DelayedRepo:
    """Delayed messages (``delay_ms``, :mod:`lakeq.produce.delayed`): DelayedTable items and the queue item's
    ``next_due`` / ``delayed`` / ``dver``. Invariant: a queue with a delayed item has ``next_due`` at
    or before that item's ``deliver_at``; every write here moves ``dver``."""

    @staticmethod
    def add(topic: str, queue: int, part: list[Delayed], now: int, lower: bool) -> None:
        """Store ``part`` (one queue's delayed messages) in one transaction: the queue item
        (``delayed`` += n, ``dver`` += 1, and — ``lower`` — ``next_due`` := the part's earliest
        ``deliver_at`` if it is not earlier already; else conditioned on ``next_due`` being at or
        before it), each message's DelayedTable item (absent before), each client id's dedup item
        (absent before; no offset, its ``deliver_at``). Raises :class:`TransactionFailed`: index 0 =
        the queue is gone or ``next_due`` is on the other side (read again), 1..len(part) = a
        delayed item exists, then one per client id (in ``part`` order) = the id was recorded."""
        dmin = min(d.deliver_at for d in part)
        actions = [QueueModel.delayed.add(len(part)), QueueModel.dver.add(1)]
        if lower:
            actions.append(QueueModel.next_due.set(dmin))
            cond = QueueModel.topic.exists() & (QueueModel.next_due.does_not_exist() | (QueueModel.next_due >= dmin))
        else:
            cond = QueueModel.topic.exists() & (QueueModel.next_due <= dmin)
        pq_ = pq(topic, queue)
        expires = datetime.fromtimestamp(now // 1000 + DEDUP_TTL_S, timezone.utc)

        def build(t: TransactWrite) -> None:
            t.update(QueueModel(topic, queue), actions=actions, condition=cond)
            for d in part:
                t.save(DelayedModel(pq_, due_key(d.deliver_at, d.message.id, d.index), deliver_at=d.deliver_at,
                                    cid=d.cid, data=encode_message(d.message)),
                       condition=DelayedModel.pq.does_not_exist())
            for d in part:
                if d.cid:
                    t.save(DedupModel(topic, d.message.id, queue=queue, deliver_at=d.deliver_at, expires_at=expires),
                           condition=DedupModel.id.does_not_exist())
        transact(build)

    @staticmethod
    def due(topic: str, queue: int, now: int, limit: int, max_bytes: int = TRANSACT_BYTES) -> list[DelayedModel]:
        """The queue's first delayed items due at ``now``, in due order (a consistent Query from the
        partition's start): at most ``limit``, and no more once their messages pass ``max_bytes``
        (one transaction could not carry more; the Query reads at most one 1 MB page beyond)."""
        out: list[DelayedModel] = []
        size = 0
        for item in DelayedModel.query(pq(topic, queue), DelayedModel.due < due_key(now + 1, ""), consistent_read=True,
                                       limit=limit):
            out.append(item)
            size += len(item.data) if item.data is not None else len((item.msg or "").encode("utf-8"))
            if size > max_bytes:
                break
        return out

    @staticmethod
    def after(topic: str, queue: int, due: str | None) -> int | None:
        """``deliver_at`` of the queue's first delayed item after sort key ``due`` (from the start
        when None); None when there is none. One consistent Query of one item."""
        cond = DelayedModel.due > due if due is not None else None
        for item in DelayedModel.query(pq(topic, queue), cond, consistent_read=True, limit=1):
            return int(item.deliver_at)
        return None

    @staticmethod
    def due_queues(now: int) -> Iterator[Queue]:
        """The queue items whose ``next_due`` has come (``pq``, ``topic``, ``queue``, ``max_offset``,
        ``next_due`` only): one Scan of the queues table filtered on ``next_due <= now``, read page by
        page as the caller iterates (the scheduled promoter, :func:`lakeq.produce.delayed.sweep`)."""
        return (record_of(Queue, m) for m in QueueModel.scan(
            QueueModel.next_due <= now, attributes_to_get=["pq", "topic", "queue", "max_offset", "next_due"]))

    @staticmethod
    def _dver_is(seen: int | None):
        return QueueModel.dver.does_not_exist() if seen is None else QueueModel.dver == seen

    @classmethod
    def set_next_due(cls, topic: str, queue: int, seen: int | None, next_due: int | None) -> bool:
        """Repair ``next_due`` (it was earlier than every delayed item), if ``dver`` is still ``seen``."""
        action = QueueModel.next_due.set(next_due) if next_due is not None else QueueModel.next_due.remove()
        try:
            QueueModel(topic, queue).update(actions=[action, QueueModel.dver.add(1)],
                                            condition=QueueModel.topic.exists() & cls._dver_is(seen))
            return True
        except UpdateError as e:  # changed meanwhile, or a transaction in flight on it: read again
            if conditional_failed(e) or getattr(e, "cause_response_code", None) == "TransactionConflictException":
                return False
            raise

    @classmethod
    def promote(cls, topic: str, queue: int, base: int, part: Append, entries: list[DelayedModel],
                seen: int | None, next_due: int | None, now: int) -> None:
        """Append ``entries`` (due delayed items, in due order: ``part`` holds their segments at
        ``base``, the queue's head) in one transaction: the queue item (head to the part's end,
        ``delayed`` -= n, ``dver`` += 1, ``next_due`` := ``next_due``; conditioned on the head being at
        or before ``base`` and ``dver`` still ``seen``: nobody promoted nor delayed a message on this
        queue since it was read), the segments (absent before), each client id's offset (its dedup
        item, conditioned on having no offset yet) and the deletes of the delayed items
        (conditioned on existing). Two promoters racing: one transaction wins, the other is
        cancelled (TransactionFailed) and nothing of it is written."""
        assert part.segments[0].base == base
        pq_ = pq(topic, queue)
        end = part.segments[-1].end
        actions = [QueueModel.max_offset.set(end), QueueModel.last_produced_at.set(now),
                   QueueModel.delayed.add(-len(entries)), QueueModel.dver.add(1),
                   QueueModel.next_due.set(next_due) if next_due is not None else QueueModel.next_due.remove()]
        at = {id_of_due(e.due): int(e.deliver_at) for e in entries}
        expires = datetime.fromtimestamp(now // 1000 + DEDUP_TTL_S, timezone.utc)

        def build(t: TransactWrite) -> None:
            t.update(QueueModel(topic, queue), actions=actions,
                     condition=QueueModel.topic.exists() & (QueueModel.max_offset <= base) & cls._dver_is(seen))
            for s in part.segments:
                t.save(SegmentModel(pq_, s.base, end=s.end, count=s.count, idx=s.idx, data=s.data, z=s.compressed,
                                    produced_at=now), condition=SegmentModel.pq.does_not_exist())
            for mid, off in part.dedup:
                t.save(DedupModel(topic, mid, queue=queue, offset=off, deliver_at=at.get(mid), expires_at=expires),
                       condition=DedupModel.offset.does_not_exist())
            for e in entries:
                t.delete(DelayedModel(pq_, e.due), condition=DelayedModel.pq.exists())
        transact(build)
