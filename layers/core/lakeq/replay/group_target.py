"""The ``{"group": g}`` target of a replay (issue 18.1; /work contract REPLAY.md §4, docs/design.md
"Replay from the lake", "Into a group"): the copier (lakeq's ReplayFunction) calls :func:`begin`
once when the replay starts copying, :func:`sink` for its chunks, :func:`end` when the replay is done,
cancelled or failed. Storage: :mod:`lakeq.store.replay_lists`; the group's pulls read the list
(:mod:`lakeq.consume.replays`).

Store calls: ``begin`` one conditional PutItem (the list's queue item) + one UpdateItem (the
group's marker); a ``sink`` of a chunk one consistent GetItem of the list's queue item + one
TransactWriteItems per ≤ 3.5 MB / ≤ 99 segments of copies (usually one); ``end`` one conditional
UpdateItem (``ended_at``) + a GetItem of the group and of its record (to remove the marker at once
when the list is already drained) or, cancelled, one UpdateItem removing the marker.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace

from lakeq.common import backoff, clock
from lakeq.common.backoff import CAS_ATTEMPTS
from lakeq.common.errors import LakeqError
from lakeq.common.names import check_name, check_topic
from lakeq.log.produce_plan import plan_parts
from lakeq.replay.copier import Copy
from lakeq.replay.group_plan import entry, fresh, position
from lakeq.store.bodies import BodyStore
from lakeq.store.catalog import ClientRepo
from lakeq.store.offsets import OffsetRepo
from lakeq.store.replay_lists import LIST_TTL_S, ReplayListRepo, replay_log, replay_owner

log = logging.getLogger("lakeq.replay.group_target")

_MORE = object()  # an append won: the sink goes on with the copies left


class ListMissing(LakeqError):
    """A sink before :func:`begin` made the replay's list."""


def _check(replay_id: str, topic: str, group: str) -> None:
    check_name(replay_id, "replay id")
    check_topic(topic)
    check_name(group, "target.group")


def begin(replay_id: str, topic: str, group: str) -> None:
    """Make the replay's hidden list and tell ``group`` about it (both idempotent). The list
    exists before the marker, so a pull that sees the marker finds the list."""
    _check(replay_id, topic, group)
    ReplayListRepo.create(replay_id)
    if not ReplayListRepo.mark(group, replay_id, topic):
        log.warning("replay %s: group %s is not a consumer group (any more); nothing will pull its copies",
                    replay_id, group)


def sink(replay_id: str, topic: str, group: str) -> Callable[[list[Copy]], int]:
    """The copier's ``produce`` for this target: append the copies (in manifest order) to the list,
    each once, and answer how many were new. A copy whose position (``row["pos"]``) is below the
    list's ``rpos`` is already in (a chunk copied again after a crash between its sink and the
    cursor write); the rest go at the head, ``rpos`` moving with them in the same transaction."""
    _check(replay_id, topic, group)
    log_name = replay_log(replay_id)

    entries: dict[str, object] = {}

    def stored(c: Copy):
        """The list's entry for ``c``, a claim it carries renewed under the copy's own key (once)."""
        if c.id not in entries:
            e = entry(c, topic)
            entries[c.id] = e if e.claim is None else replace(e, claim=BodyStore.renewed(log_name, c.id, e.claim))
        return entries[c.id]

    def put(copies: list[Copy]) -> int:
        entries.clear()
        copies = sorted(copies, key=position)
        added = 0

        def attempt(_n: int):
            nonlocal added, copies
            q = ReplayListRepo.queue(replay_id)
            if q is None:
                raise ListMissing(f"replay {replay_id}: its list does not exist (begin was not called)")
            todo = fresh(copies, int(q.rpos or 0))
            if not todo:
                return added
            base = int(q.max_offset)
            items = [(i, stored(c), False) for i, c in enumerate(todo)]
            part, placed = plan_parts(log_name, 0, items, base)[0]
            now = clock.now()
            if ReplayListRepo.append(replay_id, base, int(q.rpos or 0), position(todo[len(placed) - 1]) + 1,
                                     part, now):
                added += len(placed)
                copies = todo[len(placed):]
                return _MORE  # the next append is a compare-and-set of its own
            return backoff.RETRY

        while True:
            out = backoff.cas(attempt, on_exhausted=contended)
            if out is not _MORE:
                return out

    def contended():
        raise LakeqError(f"replay {replay_id}: its list's head moved under {CAS_ATTEMPTS} appends in a row")
    return put


def drained(replay_id: str, group: str, client_id: str | None = None) -> bool:
    """Has the group (or its instance) settled every entry of the list? A consistent GetItem of the
    list's queue item and one of the record."""
    return _settled(ReplayListRepo.queue(replay_id), replay_id, group, client_id)


def _settled(q, replay_id: str, group: str, client_id: str | None = None) -> bool:
    """:func:`drained` on the list's queue item ``q`` already read (None: the list is gone)."""
    if q is None:
        return True
    rec = OffsetRepo.get(replay_owner(group, replay_id, client_id), 0)
    if rec is None:
        return int(q.max_offset) == 0
    return OffsetRepo.view_of(rec, int(q.min_offset), int(q.max_offset)).backlog == 0


def end(replay_id: str, topic: str, group: str, cancelled: bool) -> bool:
    """No more copies (done, failed, or ``cancelled``): the list is marked ended (once), and the
    group's marker is removed when it may be — at once when cancelled (the group stops seeing the
    list; the entries expire with its TTL) or the group is gone; for a clustering group once it
    settled every entry, or :data:`LIST_TTL_S` after the end if it never does (the entries it left
    have expired by then: the list would never drain, and the replay would stay live for ever); for
    a broadcasting group (its instances are not known) :data:`LIST_TTL_S` after the end. True when
    the marker is gone: the caller (ReplayFunction's
    schedule, :func:`lakeq.replay.service.run_all`) calls again on its next run until then.
    Idempotent; pulls never remove the marker (ConsumeFunction writes no client item)."""
    _check(replay_id, topic, group)
    now = clock.now()
    ReplayListRepo.end(replay_id, now)
    g = ClientRepo.get(group)
    if cancelled or g is None:
        release = True
    else:
        q = ReplayListRepo.queue(replay_id)
        release = q is None or now >= int(q.ended_at or now) + LIST_TTL_S * 1000
        if not release and g.mode != "broadcasting":
            release = _settled(q, replay_id, group)
    if release and g is not None:
        ReplayListRepo.unmark(group, replay_id, topic)
    return release
