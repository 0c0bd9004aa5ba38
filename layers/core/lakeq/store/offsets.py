"""The offsets' repository (:class:`OffsetRepo`): one record per owner (``g|group|topic``,
``b|group|client_id|topic`` or ``s|sub_id``: :class:`lakeq.store.models.OffsetModel`) and queue:
committed offset, lock, settlement, acknowledged receipts. Every lock, ack and offset move is one
conditional UpdateItem (:func:`lakeq.store.writes.update_if`), except :meth:`OffsetRepo.reset`'s
unconditional one. The container's copy of an owner's locks lives with the other copies in
:mod:`lakeq.store.queue_log` (its clock, ``_monotonic``, is read there: one seam for every copy).
"""
from __future__ import annotations

from collections.abc import Iterable

from pynamodb.exceptions import DoesNotExist

from lakeq.common.memo import keep
from lakeq.log.receipts import Receipt
from lakeq.log.selection import QueueView, ack_key, kept_acks
from lakeq.store import queue_log
from lakeq.store.models import OffsetModel
from lakeq.store.queue_log import _HELD, _WROTE, HELD_KEPT, HELD_MAX_AGE_S, WROTE_KEPT
from lakeq.store.writes import update_if


class OffsetRepo:
    @staticmethod
    def owner(group: str, topic: str, client_id: str | None = None) -> str:
        return f"b|{group}|{client_id}|{topic}" if client_id is not None else f"g|{group}|{topic}"

    @classmethod
    def held(cls, owner: str, now: int) -> frozenset[int]:
        """The queues whose record holds a lock live at ``now`` (epoch ms), a hint: from the
        container's copy of ``owner``'s locks when it is at most HELD_MAX_AGE_S old (no call; the
        copy follows this container's own reads and lock writes of ``owner``), else one eventually
        consistent Query of two attributes, kept as the copy (billed by the records' whole size, the
        projection does not lower it: 0.5 RRU per 4 KB read, e.g. a CreateQueue queue's 4 records)."""
        hit = _HELD.get(owner)
        if hit is None or queue_log._monotonic() - hit[0] > HELD_MAX_AGE_S:
            hit = cls._keep_held(owner, {int(r.queue): int(r.lock_until or 0) for r in OffsetModel.query(
                owner, attributes_to_get=["queue", "lock_until"])})
        return frozenset(q for q, until in hit[1].items() if until > now)

    @staticmethod
    def _keep_held(owner: str, locks: dict[int, int]) -> tuple[float, dict[int, int]]:
        return keep(_HELD, owner, (queue_log._monotonic(), locks), HELD_KEPT)

    @staticmethod
    def _held_moved(owner: str, queue: int, lock_until: int) -> None:
        """This container wrote ``owner``'s lock on ``queue``: its copy of the locks follows (only
        an owner whose locks a send asked for, :meth:`held`, has a copy). The copy is replaced,
        never changed in place: another thread (the local stack's) may be reading it."""
        hit = _HELD.get(owner)
        if hit is not None:
            _HELD[owner] = (hit[0], {**hit[1], queue: lock_until})

    @classmethod
    def records(cls, owner: str) -> dict[int, OffsetModel]:
        out = {int(r.queue): r for r in OffsetModel.query(owner, consistent_read=True)}
        if owner in _HELD:
            cls._keep_held(owner, {q: int(r.lock_until or 0) for q, r in out.items()})
        return out

    @staticmethod
    def records_of(wants: dict[str, Iterable[int]]) -> dict[str, dict[int, OffsetModel]]:
        """:meth:`records` of many owners at once, ``wants``: owner -> the queues to read (those the
        caller has queue items for), strongly consistent: an owner of one queue (a subscription
        list) by BatchGetItems of the ``(owner, queue)`` keys, 100 a call; an owner of more by its
        Query, as :meth:`records` (review_g). A BatchGetItem bills each key on its own, rounded up to
        4 KB, an absent record 1 unit too (a group has records only for the queues it pulled), where
        a Query bills its items' sum: 16 keys of a 16-queue topic are 16 RRU, its Query mostly 1. An
        absent record is left out, and records of queues not asked. The owners' lock copies
        (:meth:`held`) are left as they are (a copy is a hint that ages out by itself)."""
        asked = {o: set(int(q) for q in qs) for o, qs in wants.items()}
        out: dict[str, dict[int, OffsetModel]] = {o: {} for o in wants}
        keys = [{"owner": o, "queue": q} for o, qs in asked.items() if len(qs) == 1 for q in qs]
        for item in queue_log._batch_get(OffsetModel, keys, consistent=True):
            r = OffsetModel.from_raw_data(item)
            out[r.owner][int(r.queue)] = r
        for o, qs in asked.items():
            if len(qs) > 1:
                out[o] = {int(r.queue): r for r in OffsetModel.query(o, consistent_read=True) if int(r.queue) in qs}
        return out

    @staticmethod
    def get(owner: str, queue: int) -> OffsetModel | None:
        try:
            return OffsetModel.get(owner, queue, consistent_read=True)
        except DoesNotExist:
            return None

    @staticmethod
    def peek(owner: str, queue: int) -> OffsetModel | None:
        """The record as an eventually consistent GetItem finds it (0.5 RRU, half of :meth:`get`):
        for a reader whose every write is conditioned on the record being exactly as read
        (:meth:`_expect`), so a stale answer costs a lost condition, never a wrong write (the folded
        ack, :func:`lakeq.consume.reader.fold`, then settles the receipt on its own, reading
        consistently)."""
        try:
            return OffsetModel.get(owner, queue)
        except DoesNotExist:
            return None

    @staticmethod
    def known(owner: str, queue: int, now: int) -> OffsetModel | None:
        """The record as this container's last lock write of it left it (:meth:`write_state` keeps
        UpdateItem's ALL_NEW answer: no call, no unit), taken once, and only while that lock is live
        at ``now`` (epoch ms); else None (read it: :meth:`peek`). For the same readers as
        :meth:`peek`: every write is conditioned on the record being exactly as read (``sv``), so a
        copy that another container's write (an ack, a renew, a lock after expiry) made stale costs
        a lost condition, never a wrong write; this container's own other writes of the record drop
        it (issue 33 item 2: the folded pull's GetItem, 0.5 RRU and a call)."""
        rec = _WROTE.pop((owner, queue), None)
        if rec is None or int(rec.lock_until or 0) <= now:  # type: ignore[attr-defined]
            return None
        return rec  # type: ignore[return-value]

    @staticmethod
    def _expect(view: QueueView):
        """Condition: the record is still exactly as the pull saw it (``sv``: every write moves it)."""
        if view.committed is None:
            return OffsetModel.owner.does_not_exist()
        same = (OffsetModel.lock_ts == view.lock_ts) & (OffsetModel.committed_offset == view.committed)
        return same & (OffsetModel.sv.does_not_exist() if view.sv is None else OffsetModel.sv == view.sv)

    @staticmethod
    def view_of(rec: OffsetModel, min_offset: int = 0, max_offset: int = 0) -> QueueView:
        """A record as a :class:`QueueView` (the log's offsets when known)."""
        return QueueView(int(rec.queue), min_offset, max_offset, int(rec.committed_offset), int(rec.lock_ts),
                         int(rec.lock_until), int(rec.last_consumed_at), tuple(rec.acks or ()),
                         None if rec.lock_next is None else int(rec.lock_next), rec.settle,
                         None if rec.sv is None else int(rec.sv), int(rec.dead_lettered or 0), int(rec.run or 0))

    @classmethod
    def write_state(cls, owner: str, view: QueueView, state, meta: dict | None, now: int, *,
                    lock_owner: str | None = None, consumed: bool = False, ack: str | None = None,
                    run: int | None = None, bnd: int | None = None) -> bool:
        """Store a :class:`lakeq.log.settlement.State` on the record ``view`` was read from, if it is
        still exactly that (:meth:`_expect`): committed offset, lock, ``settle`` (removed in the
        simple form), ``dead_lettered``; ``lock_owner`` for a new lock (which also trims ``acks``),
        ``ack`` appended to ``acks`` (a whole-batch ack; with ``lock_owner``: the previous lock's
        ack folded into the new lock, :func:`lakeq.consume.reader.fold`), ``run`` the new lock's place in
        a run of folded locks (with ``lock_owner`` and no ``run``: the run ends), ``bnd`` the end of
        the newest segment the lock read (:attr:`lakeq.store.models.OffsetModel.bnd`). One conditional
        UpdateItem; False when the record moved meanwhile."""
        from lakeq.log.settlement import to_settle
        raw = to_settle(state)
        actions = [OffsetModel.committed_offset.set(state.committed), OffsetModel.lock_ts.set(state.lock_ts),
                   OffsetModel.lock_until.set(state.lock_until), OffsetModel.updated_at.set(now),
                   OffsetModel.sv.add(1),
                   (OffsetModel.lock_next.remove() if state.lock_next is None
                    else OffsetModel.lock_next.set(state.lock_next)),
                   OffsetModel.settle.remove() if raw is None else OffsetModel.settle.set(raw)]
        if state.dead_lettered or view.dead_lettered:
            actions.append(OffsetModel.dead_lettered.set(state.dead_lettered))
        if lock_owner is not None:
            actions.append(OffsetModel.lock_owner.set(lock_owner))
            actions.append(OffsetModel.run.remove() if run is None else OffsetModel.run.set(run))
            kept = kept_acks(view.acks, cls.ACKS_KEPT)
            if ack is not None:  # one path may be set once: the kept acks and the folded one together
                actions.append(OffsetModel.acks.set(list(view.acks if kept is None else kept) + [ack]))
            elif kept is not None:
                actions.append(OffsetModel.acks.set(kept))
        if consumed:
            actions.append(OffsetModel.last_consumed_at.set(now))
        if bnd is not None:
            actions.append(OffsetModel.bnd.set(bnd))
        if ack is not None and lock_owner is None:
            actions.append(OffsetModel.acks.set((OffsetModel.acks | []).append([ack])))
        if view.committed is None and meta:
            actions += [getattr(OffsetModel, k).set(v) for k, v in meta.items() if v is not None]
        item = OffsetModel(owner, view.queue)
        if not update_if(item, actions, cls._expect(view)):
            _WROTE.pop((owner, view.queue), None)
            return False
        if lock_owner is not None and raw is None:  # a lock in the simple form (no ``settle``: a record of
            # ~1 KiB, ~1 MiB at WROTE_KEPT): the fold that acknowledges it reads the record from here
            keep(_WROTE, (owner, view.queue), item, WROTE_KEPT)
        else:
            _WROTE.pop((owner, view.queue), None)
        cls._held_moved(owner, view.queue, int(state.lock_until))
        return True

    ACKS_KEPT = 8  # acknowledged receipts remembered per record (a retry window of 8 batches)

    @staticmethod
    def _receipt_lock(receipt: Receipt):
        """Condition: the record's lock is still ``receipt``'s, in the simple form (``lock_ts`` is
        unique per record; an acknowledged lock has no ``lock_next``)."""
        return ((OffsetModel.lock_ts == receipt.timestamp) & (OffsetModel.committed_offset == receipt.offset)
                & (OffsetModel.lock_next == receipt.next_offset) & OffsetModel.settle.does_not_exist())

    @classmethod
    def ack_fast(cls, owner: str, queue: int, receipt: Receipt, now: int) -> bool | OffsetModel | None:
        """A whole batch in the simple form acknowledged with one conditional UpdateItem (issue 9's
        fast path): commit ``receipt.next_offset``, unlock, and append the receipt to ``acks`` (the
        newest :attr:`ACKS_KEPT` are kept by each lock, so a retried acknowledgement can be told
        from a stale receipt). True: acknowledged. Otherwise the record as one consistent GetItem
        found it (None: absent), for the caller to decide (a retry found in ``acks``, a settle of
        the general form, stale)."""
        key = ack_key(receipt.offset, receipt.next_offset, receipt.timestamp)
        actions = [OffsetModel.committed_offset.set(receipt.next_offset), OffsetModel.lock_until.set(0),
                   OffsetModel.lock_next.remove(), OffsetModel.last_consumed_at.set(now),
                   OffsetModel.updated_at.set(now), OffsetModel.acks.set((OffsetModel.acks | []).append([key])),
                   OffsetModel.sv.add(1)]
        _WROTE.pop((owner, queue), None)
        if update_if(OffsetModel(owner, queue), actions, cls._receipt_lock(receipt)):
            return True
        return cls.get(owner, queue)

    @classmethod
    def set_visibility(cls, owner: str, queue: int, receipt: Receipt, lock_until: int, now: int) -> bool:
        """Set the lock's ``lock_until`` (0: unlocked now), if the lock still is the receipt's
        (:meth:`_receipt_lock`, as :meth:`ack_fast`). One conditional UpdateItem; a plain re-set, so
        a retry answers the same or a later expiry. False: stale."""
        _WROTE.pop((owner, queue), None)
        return update_if(OffsetModel(owner, queue),
                         [OffsetModel.lock_until.set(lock_until), OffsetModel.updated_at.set(now),
                          OffsetModel.sv.add(1)],
                         cls._receipt_lock(receipt))

    @staticmethod
    def reset(owner: str, queue: int, offset: int, meta: dict, now: int) -> None:
        """Set the committed offset, drop any lock and invalidate outstanding receipts
        (``lock_ts`` moves on). One unconditional UpdateItem."""
        actions = [OffsetModel.committed_offset.set(offset), OffsetModel.lock_until.set(0),
                   OffsetModel.lock_next.remove(), OffsetModel.lock_ts.add(1), OffsetModel.updated_at.set(now),
                   OffsetModel.settle.remove(), OffsetModel.sv.add(1)]
        actions += [getattr(OffsetModel, k).set(v) for k, v in meta.items() if v is not None]
        _WROTE.pop((owner, queue), None)
        OffsetModel(owner, queue).update(actions=actions)
