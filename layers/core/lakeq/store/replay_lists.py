"""A replay's hidden list for a consumer group (issue 18.1, the ``{"group": g}`` target; docs/design.md
"Replay from the lake", "Into a group").

The list is a pseudo-queue of the topic-queue machinery, as a subscription's list is: queue item
``pq="~r.<replay id>#0"`` (QueuesTable), segments ``pq="~r.<replay id>#0"`` (SegmentsTable, with a TTL
of :data:`LIST_TTL_S`), the group's offsets record ``owner="g|<group>|~r.<replay id>"`` (``b|…`` per
instance in broadcasting mode), queue 0. Two attributes of the list's queue item are its own:
``rpos`` — the manifest position after the last copy appended, moved in the same transaction as
the head and the segments, so a copy sent again (a chunk re-copied after a crash) is recognised by
its position alone — and ``ended_at``. The group learns of the list from its client item's
``replays`` string set (``"<replay id>|<topic>"``), which its pulls read anyway (cached 5 s).
"""
from __future__ import annotations

from datetime import datetime, timezone

from pynamodb.exceptions import PutError, UpdateError
from pynamodb.transactions import TransactWrite

from lakeq.log import segments as seg
from lakeq.log.produce_plan import Append
from lakeq.log.receipts import replay_field
from lakeq.store.models import ClientModel, QueueModel, SegmentModel
from lakeq.store.offsets import OffsetRepo
from lakeq.store.queue_log import LogRepo
from lakeq.store.records import Client, Queue
from lakeq.store.writes import TransactionFailed, conditional_failed, transact

LIST_TTL_S = 14 * 24 * 3600  # a replay's copies are kept this long after they were appended
SEP = "|"  # in a marker: topic names and replay ids never hold it


def replay_log(replay_id: str) -> str:
    """The log name of the replay's hidden list (its receipts' queue field too)."""
    return replay_field(replay_id)


def replay_marker(replay_id: str, topic: str) -> str:
    """The element of a group's ``replays`` set naming an active replay of ``topic``.

    >>> replay_marker("rp_1", "quotes/sh")
    'rp_1|quotes/sh'
    """
    return f"{replay_id}{SEP}{topic}"


def replay_markers(client: Client) -> dict[str, str]:
    """The group's active replays: replay id → topic (reads the item already in memory)."""
    out = {}
    for m in getattr(client, "replays", None) or ():
        rid, _, topic = m.partition(SEP)
        out[rid] = topic
    return out


def active_replays(client: Client, topic: str) -> list[str]:
    """The ids of the group's active replays of ``topic``, oldest id first (no store call)."""
    return sorted(rid for rid, t in replay_markers(client).items() if t == topic)


def replay_owner(group: str, replay_id: str, client_id: str | None = None) -> str:
    """The offsets owner of ``group``'s (or its broadcasting instance's) reading of the list."""
    return OffsetRepo.owner(group, replay_log(replay_id), client_id)


class ReplayListRepo:
    @staticmethod
    def create(replay_id: str) -> None:
        """The list's queue item (empty), unless it exists: one conditional PutItem."""
        try:
            QueueModel(replay_log(replay_id), 0, max_offset=0, min_offset=0, last_produced_at=0, rpos=0).save(
                condition=QueueModel.pq.does_not_exist())
        except PutError as e:
            if not conditional_failed(e):
                raise

    @staticmethod
    def queue(replay_id: str) -> Queue | None:
        """The list's queue item (consistent GetItem)."""
        return LogRepo.queue(replay_log(replay_id), 0, exact=False)  # its head moves in its transactions

    @staticmethod
    def mark(group: str, replay_id: str, topic: str) -> bool:
        """Add the replay to the group's ``replays`` set: one UpdateItem (ADD: idempotent),
        conditioned on the client being a consumer. False when it is not (any more)."""
        try:
            ClientModel(group).update(actions=[ClientModel.replays.add({replay_marker(replay_id, topic)})],
                                      condition=ClientModel.name.exists() & (ClientModel.role == "consumer"))
            return True
        except UpdateError as e:
            if conditional_failed(e):
                return False
            raise

    @staticmethod
    def unmark(group: str, replay_id: str, topic: str) -> None:
        """Remove the replay from the group's set (DELETE of a set element: idempotent; the
        attribute disappears with its last element). One UpdateItem; nothing when the group is gone."""
        try:
            ClientModel(group).update(actions=[ClientModel.replays.delete({replay_marker(replay_id, topic)})],
                                      condition=ClientModel.name.exists())
        except UpdateError as e:
            if not conditional_failed(e):
                raise

    @staticmethod
    def end(replay_id: str, now: int) -> None:
        """``ended_at`` on the list's queue item, once (conditional UpdateItem; a repeat changes nothing)."""
        try:
            QueueModel(replay_log(replay_id), 0).update(
                actions=[QueueModel.ended_at.set(now)],
                condition=QueueModel.topic.exists() & QueueModel.ended_at.does_not_exist())
        except UpdateError as e:
            if not conditional_failed(e):
                raise

    @staticmethod
    def append(replay_id: str, base: int, seen_rpos: int, next_rpos: int, part: Append, now: int) -> bool:
        """Put ``part``'s segments at the list's head ``base`` and move ``rpos`` from ``seen_rpos`` to
        ``next_rpos`` in one transaction: the queue item (head → the part's end, conditioned on the
        head still being ``base`` and ``rpos`` still ``seen_rpos``: nobody appended since it was
        read) and the segments (each absent before). False when that condition failed (read again)."""
        log = replay_log(replay_id)
        pq = LogRepo.pq(log, 0)
        end = part.segments[-1].end
        expires = datetime.fromtimestamp(now // 1000 + LIST_TTL_S, timezone.utc)

        def seg_item(s: seg.Segment) -> SegmentModel:
            return SegmentModel(pq, s.base, end=s.end, count=s.count, idx=s.idx, data=s.data, z=s.compressed,
                                produced_at=now, expires_at=expires)

        seen = QueueModel.rpos.does_not_exist() if not seen_rpos else QueueModel.rpos == seen_rpos
        if not seen_rpos:
            seen = seen | (QueueModel.rpos == 0)

        def build(t: TransactWrite) -> None:
            t.update(QueueModel(log, 0), actions=[QueueModel.max_offset.set(end), QueueModel.rpos.set(next_rpos),
                                                  QueueModel.last_produced_at.set(now)],
                     condition=QueueModel.topic.exists() & (QueueModel.max_offset == base) & seen)
            for s in part.segments:
                t.save(seg_item(s), condition=SegmentModel.pq.does_not_exist())
        try:
            transact(build)
        except TransactionFailed:  # appended meanwhile (or a conflicting transaction in flight): read again
            return False
        return True


__all__ = ["ReplayListRepo", "LIST_TTL_S", "replay_log", "replay_owner", "replay_marker", "replay_markers",
           "active_replays"]
