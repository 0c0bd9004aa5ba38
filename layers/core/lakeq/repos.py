"""Repositories: the only code that talks to DynamoDB. Small classes over the pynamodb models.

Every lock, ack and offset move is a conditional write; every append to a queue's log is one
transaction that moves ``max_offset`` (conditioned on its old value), puts the segment items and
records the client-chosen message ids (conditioned on their absence). Costs per call are listed
in ``docs/design.md``.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

from pynamodb.connection import Connection
from pynamodb.exceptions import DoesNotExist, PutError, TransactWriteError, UpdateError
from pynamodb.transactions import TransactWrite

from . import segments as seg
from .models import (
    ClientModel,
    DedupModel,
    KeyModel,
    OffsetModel,
    QueueModel,
    SegmentModel,
    TopicModel,
)
from .receipts import Receipt
from .selection import QueueView

DEDUP_TTL_S = 24 * 3600
TRANSACT_ITEMS = 100
TRANSACT_BYTES = 3_500_000


def _conditional_failed(e: Exception) -> bool:
    cause = getattr(e, "cause_response_code", None)
    return cause == "ConditionalCheckFailedException"


def _reasons(e: TransactWriteError) -> list[str | None]:
    return [r.code if r is not None else None for r in (e.cancellation_reasons or [])]


class TransactionFailed(Exception):
    """A transaction was cancelled; ``reasons`` lists each item's cancellation code (or None)."""

    def __init__(self, reasons: list[str | None]):
        super().__init__(f"transaction cancelled: {reasons}")
        self.reasons = reasons


def _connection() -> Connection:
    return Connection(region=TopicModel.Meta.region)


def transact(build) -> None:
    """Run ``build(t)`` inside one TransactWrite; raise :class:`TransactionFailed` with reasons."""
    try:
        with TransactWrite(connection=_connection()) as t:
            build(t)
    except TransactWriteError as e:
        reasons = _reasons(e)
        if not reasons:
            raise
        raise TransactionFailed(reasons) from e


class TopicRepo:
    @staticmethod
    def get(name: str) -> TopicModel | None:
        try:
            return TopicModel.get(name, consistent_read=True)
        except DoesNotExist:
            return None

    @staticmethod
    def create(name: str, queues: int, parent: str | None, now: int) -> None:
        """Topic item + one queue item per queue, atomically; the parent must exist.
        Raises TransactionFailed: reason index 0 = topic exists, 1 = parent missing."""
        def build(t: TransactWrite) -> None:
            t.save(TopicModel(name, queues=queues, parent=parent, created_at=now),
                   condition=TopicModel.name.does_not_exist())
            if parent is not None:
                t.condition_check(TopicModel, parent, condition=TopicModel.name.exists())
            for q in range(queues):
                t.save(QueueModel(name, q, max_offset=0, min_offset=0, last_produced_at=0),
                       condition=QueueModel.topic.does_not_exist())
        transact(build)

    @staticmethod
    def all() -> list[TopicModel]:
        return sorted(TopicModel.scan(), key=lambda t: t.name)


class ClientRepo:
    @staticmethod
    def get(name: str) -> ClientModel | None:
        try:
            return ClientModel.get(name, consistent_read=True)
        except DoesNotExist:
            return None

    @staticmethod
    def create(client: ClientModel) -> None:
        """Client and its key item, atomically; index 0 failing = the name exists."""
        def build(t: TransactWrite) -> None:
            t.save(client, condition=ClientModel.name.does_not_exist())
            t.save(KeyModel(client.key_hash, client=client.name), condition=KeyModel.key_hash.does_not_exist())
        transact(build)

    @staticmethod
    def client_for_key(key_hash: str) -> str | None:
        try:
            return KeyModel.get(key_hash).client
        except DoesNotExist:
            return None


@dataclass
class Append:
    """One transaction's worth of a queue append."""

    segments: list[seg.Segment]
    dedup: list[tuple[str, int]]  # (message id, offset)


class LogRepo:
    @staticmethod
    def pq(topic: str, queue: int) -> str:
        return f"{topic}#{queue}"

    @staticmethod
    def queues(topic: str) -> list[QueueModel]:
        """Every queue item of a topic: one Query. Consistent: the pull and produce paths need
        ``max_offset`` as of now."""
        return list(QueueModel.query(topic, consistent_read=True))

    @staticmethod
    def queue(topic: str, queue: int) -> QueueModel | None:
        try:
            return QueueModel.get(topic, queue, consistent_read=True)
        except DoesNotExist:
            return None

    @staticmethod
    def dedup_lookup(topic: str, ids: list[str]) -> dict[str, tuple[int, int]]:
        out: dict[str, tuple[int, int]] = {}
        if not ids:
            return out
        for item in DedupModel.batch_get([(topic, i) for i in dict.fromkeys(ids)]):
            out[item.id] = (int(item.queue), int(item.offset))
        return out

    @classmethod
    def append(cls, topic: str, queue: int, expected_max: int, part: Append, now: int) -> None:
        """Put ``part`` at ``expected_max`` in one transaction. Raises TransactionFailed:
        index 0 = ``max_offset`` moved (someone appended first); indexes after the segments =
        the corresponding message id was recorded meanwhile."""
        new_max = part.segments[-1].end
        assert part.segments[0].base == expected_max

        def build(t: TransactWrite) -> None:
            t.update(QueueModel(topic, queue),
                     actions=[QueueModel.max_offset.set(new_max), QueueModel.last_produced_at.set(now)],
                     condition=QueueModel.max_offset == expected_max)
            for s in part.segments:
                t.save(SegmentModel(cls.pq(topic, queue), s.end, base=s.base, count=s.count, idx=s.idx,
                                    data=s.data, z=s.compressed, produced_at=now),
                       condition=SegmentModel.pq.does_not_exist())
            for mid, off in part.dedup:
                t.save(DedupModel(topic, mid, queue=queue, offset=off, expires_at=datetime.fromtimestamp(now // 1000 + DEDUP_TTL_S, timezone.utc)),
                       condition=DedupModel.id.does_not_exist())
        transact(build)

    @classmethod
    def read(cls, topic: str, queue: int, start: int, max_offsets: int):
        """Yield the segments holding offsets ``start..`` in order, until ``max_offsets`` offsets
        are covered. Query ``end > start`` (segments are keyed by their exclusive end), so the
        first item is the one containing ``start``. Consistent reads."""
        covered = 0
        for item in SegmentModel.query(cls.pq(topic, queue), SegmentModel.end > start, consistent_read=True,
                                       page_size=8):
            s = seg.Segment(int(item.base), int(item.count), item.idx, item.data, bool(item.z))
            yield s
            covered += s.end - max(start, s.base)
            if covered >= max_offsets:
                return


class OffsetRepo:
    @staticmethod
    def owner(group: str, topic: str, client_id: str | None = None) -> str:
        return f"b|{group}|{client_id}|{topic}" if client_id is not None else f"g|{group}|{topic}"

    @staticmethod
    def records(owner: str) -> dict[int, OffsetModel]:
        return {int(r.queue): r for r in OffsetModel.query(owner, consistent_read=True)}

    @staticmethod
    def get(owner: str, queue: int) -> OffsetModel | None:
        try:
            return OffsetModel.get(owner, queue, consistent_read=True)
        except DoesNotExist:
            return None

    @staticmethod
    def _expect(view: QueueView):
        """Condition: the record is still exactly as the pull saw it."""
        if view.committed is None:
            return OffsetModel.owner.does_not_exist()
        return (OffsetModel.lock_ts == view.lock_ts) & (OffsetModel.committed_offset == view.committed)

    @classmethod
    def lock(cls, owner: str, view: QueueView, lock_ts: int, lock_until: int, next_offset: int,
             lock_owner: str, meta: dict, now: int) -> bool:
        """Take the queue's lock for ``[view.start, next_offset)``. One conditional UpdateItem."""
        actions = [
            OffsetModel.lock_ts.set(lock_ts), OffsetModel.lock_until.set(lock_until),
            OffsetModel.lock_next.set(next_offset), OffsetModel.lock_owner.set(lock_owner),
            OffsetModel.updated_at.set(now),
        ]
        if view.committed is None or view.committed != view.start:
            actions.append(OffsetModel.committed_offset.set(view.start))
        if view.committed is None:
            actions += [getattr(OffsetModel, k).set(v) for k, v in meta.items() if v is not None]
        try:
            OffsetModel(owner, view.queue).update(actions=actions, condition=cls._expect(view))
            return True
        except UpdateError as e:
            if _conditional_failed(e):
                return False
            raise

    @classmethod
    def advance(cls, owner: str, view: QueueView, next_offset: int, meta: dict, now: int) -> bool:
        """Move the committed offset past messages a filtered pull skipped (no lock taken)."""
        actions = [OffsetModel.committed_offset.set(next_offset), OffsetModel.last_consumed_at.set(now),
                   OffsetModel.updated_at.set(now)]
        if view.committed is None:
            actions += [getattr(OffsetModel, k).set(v) for k, v in meta.items() if v is not None]
        try:
            OffsetModel(owner, view.queue).update(actions=actions, condition=cls._expect(view))
            return True
        except UpdateError as e:
            if _conditional_failed(e):
                return False
            raise

    @staticmethod
    def ack(owner: str, queue: int, receipt: Receipt, now: int) -> bool:
        """Commit ``receipt.next_offset`` and unlock, if the lock still carries the receipt's
        timestamp and batch and the committed offset is still the receipt's offset."""
        try:
            OffsetModel(owner, queue).update(
                actions=[OffsetModel.committed_offset.set(receipt.next_offset), OffsetModel.lock_until.set(0),
                         OffsetModel.lock_next.remove(), OffsetModel.last_consumed_at.set(now),
                         OffsetModel.updated_at.set(now)],
                condition=(OffsetModel.lock_ts == receipt.timestamp)
                & (OffsetModel.committed_offset == receipt.offset)
                & (OffsetModel.lock_next == receipt.next_offset),
            )
            return True
        except UpdateError as e:
            if _conditional_failed(e):
                return False
            raise

    @staticmethod
    def reset(owner: str, queue: int, offset: int, meta: dict, now: int) -> None:
        """Set the committed offset, drop any lock and invalidate outstanding receipts
        (``lock_ts`` moves on). One unconditional UpdateItem."""
        actions = [OffsetModel.committed_offset.set(offset), OffsetModel.lock_until.set(0),
                   OffsetModel.lock_next.remove(), OffsetModel.lock_ts.add(1), OffsetModel.updated_at.set(now)]
        actions += [getattr(OffsetModel, k).set(v) for k, v in meta.items() if v is not None]
        OffsetModel(owner, queue).update(actions=actions)


__all__ = ["TopicRepo", "ClientRepo", "LogRepo", "OffsetRepo", "Append", "TransactionFailed", "transact",
           "PutError"]
