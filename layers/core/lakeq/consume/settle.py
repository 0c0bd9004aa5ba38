"""Settling receipts and dead-lettering, over the store (issue 9). The rules are
:mod:`lakeq.log.settlement` (pure); this module reads a record, applies them and writes the result
with a conditional write, for group receipts (:mod:`lakeq.consume.service`) and subscription receipts
(:mod:`lakeq.subscriptions.service`) alike, and by the pull loop (:func:`lakeq.consume.reader.consume`) for
entries due for the dead-letter path.

Store calls:

- whole-batch ack of a simple-form batch: one conditional UpdateItem (as before issue 9);
- any other settle: one consistent GetItem + one conditional UpdateItem (compare-and-set on the
  record's ``sv``; a concurrent write — another settle of the same batch, a renew — makes it read
  again and re-apply, so concurrent settles of different offsets all land);
- dead-lettering (rejected, or ``max_deliveries`` reached): the settle above records the offsets
  as *due* first; then, per due message, a GetItem of the dead-letter topic, a BatchGetItem of
  its dedup items, the segment Query, and the append (one transaction with the copy's dedup item)
  — unless its deterministic id is already there; then one conditional UpdateItem settles them.
  A crash anywhere leaves them due on the record: the next settle or pull of that log finishes
  the job, and the copy's id (:func:`copy_id`) makes the second append a no-op.
"""
from __future__ import annotations

import hashlib
import logging
import zlib
from dataclasses import dataclass, field
from typing import Callable, Protocol, runtime_checkable

from lakeq.common import backoff
from lakeq.common import metric_names as M
from lakeq.common.errors import BadRequest, StaleReceipt, Unavailable
from lakeq.common.names import log_of
from lakeq.common.obs import emit
from lakeq.log import segments as seg
from lakeq.log import settlement as S
from lakeq.log.produce_plan import plan_parts, queue_for_key
from lakeq.log.receipts import Receipt
from lakeq.log.selection import ack_entry, ack_key, acked
from lakeq.log.settlement import Outcomes
from lakeq.store.append import Contended, append_at_head, bump_change
from lakeq.store.catalog import ClientRepo, TopicRepo
from lakeq.store.offsets import OffsetRepo
from lakeq.store.queue_log import LogRepo

log = logging.getLogger("lakeq.consume.settle")
# (queue, start, limit, max_offset) -> (messages, next_offset), as lakeq.consume.reader.LogReader
Reader = Callable[[int, int, int, int], "tuple[list[dict], int]"]


@runtime_checkable
class MinOffset(Protocol):
    """A reader that also tells where its log's retained offsets begin (below it a due message is
    gone): :class:`lakeq.consume.reader.BoundReader`."""

    def min_offset(self, queue: int) -> int | None: ...


@dataclass(frozen=True)
class Policy:
    """A consumer's dead-letter settings: ``max_deliveries`` (None: unlimited), the
    ``dead_letter_topic`` (None: dead-lettered messages are dropped and counted), the
    consumer's name as the copy's ``dead_letter.group`` shows it, and ``granted_by``: None when
    the admin chose the topic (a group's settings, a subscription created with the admin key), else
    the client whose own dead-letter setting must still name it when a message is dead-lettered
    (:func:`granted`); ``alarmed``: whether its dead letters count for the deployment's alarm (the
    client's ``alarms_muted`` unset), None when not known yet (a subscription's: its subscriber's
    client item is read when one is dead-lettered, :func:`count_dead_letters`)."""

    max_deliveries: int | None = None
    dead_letter_topic: str | None = None
    group: str | None = None
    granted_by: str | None = None
    alarmed: bool | None = None


def policy_of(client, group: str | None = None) -> Policy:
    md = getattr(client, "max_deliveries", None)
    return Policy(None if md is None else int(md), getattr(client, "dead_letter_topic", None), group or client.name,
                  alarmed=not getattr(client, "alarms_muted", False))


def subscription_policy(s) -> Policy:
    """A subscription's: its own settings; its dead-letter topic granted by the admin when the admin
    key named it (``dead_letter_by`` ``"admin"``), else checked against the subscriber's setting."""
    md = s.max_deliveries
    return Policy(None if md is None else int(md), s.dead_letter_topic, s.subscriber,
                  None if getattr(s, "dead_letter_by", None) == "admin" else s.subscriber)


def granted(policy: Policy) -> bool:
    """Whether lakeq may write dead letters to ``policy.dead_letter_topic`` now (issue 30.4): the
    admin chose it, or ``granted_by``'s client (one GetItem) still names it as its own dead-letter
    topic. A grant moved or revoked after registration: False (the messages are dropped and
    counted, as without a dead-letter topic — never written where no grant is)."""
    if policy.granted_by is None:
        return True
    c = ClientRepo.get(policy.granted_by)
    return c is not None and c.dead_letter_topic == policy.dead_letter_topic


def loops(topic: str, msg: dict) -> bool:
    """Whether dead-lettering ``msg`` to ``topic`` loops: the topic is the message's own, or the one
    a dead-lettered copy came from (A → B → A). Longer chains (A → B → C → A) are not detected;
    every link of one is a topic the admin chose.

    >>> loops("a", {"topic": "a"}), loops("a", {"topic": "b", "dead_letter": {"topic": "a"}})
    (True, True)
    >>> loops("c", {"topic": "b", "dead_letter": {"topic": "a"}})
    False
    """
    dl = msg.get("dead_letter")
    return topic == msg.get("topic") or (isinstance(dl, dict) and topic == dl.get("topic"))


@dataclass(frozen=True)
class _Write:
    """A round's decision to write ``new`` over the record read (``view``): ``then()`` answers once
    the write won; ``kw``: :meth:`OffsetRepo.write_state`'s extra arguments."""

    view: object
    new: S.State
    then: Callable[[], object]
    kw: dict = field(default_factory=dict)


_UNREAD = object()


def _on_record(owner: str, queue: int, now: int, step: Callable[[object], object], rec: object = _UNREAD):
    """The one compare-and-set of the offsets record ``owner``/``queue`` (:func:`lakeq.common.backoff.cas`):
    a round is one consistent GetItem (round 0 may use ``rec``, read by the caller) and ``step(rec)``,
    which answers or returns a :class:`_Write`: one conditional UpdateItem on the record's ``sv``;
    a lost write reads again. 503 after :data:`~lakeq.common.backoff.CAS_ATTEMPTS` lost rounds."""
    def attempt(n: int):
        r = rec if n == 0 and rec is not _UNREAD else OffsetRepo.get(owner, queue)
        out = step(r)
        if not isinstance(out, _Write):
            return out
        if OffsetRepo.write_state(owner, out.view, out.new, None, now, **out.kw):
            return out.then()
        return backoff.RETRY
    return backoff.cas(attempt, on_exhausted=_contended)


def _contended():
    raise Unavailable("the queue's offsets are too contended; retry")


def settle_receipt(owner: str, queue: int, receipt: Receipt, outcomes: Outcomes, policy: Policy, reader: Reader,
           now: int, stale: str) -> dict:
    """Settle ``outcomes`` of ``receipt``'s batch; ``{"committed_offset", "unsettled"}``.
    409 ``stale_receipt`` (message ``stale``) when the receipt is not the record's lock (a retried
    whole-batch ack found in the record's ``acks`` answers 200 with the committed offset it answered
    first, :func:`lakeq.log.selection.acked`); 400 for an offset not in the batch."""
    full = outcomes.accept is None
    key = ack_key(receipt.offset, receipt.next_offset, receipt.timestamp)
    if full:
        rec = OffsetRepo.ack_fast(owner, queue, receipt, now)
        if rec is True:
            return {"committed_offset": receipt.next_offset, "unsettled": []}
    else:
        rec = OffsetRepo.get(owner, queue)

    def step(rec) -> dict | _Write:
        if rec is None:
            raise StaleReceipt(stale)
        view = OffsetRepo.view_of(rec)
        st = view.state()
        if full and (first := acked(rec.acks, key)) is not None:  # a retry: the first answer's body
            # While the lock is still the receipt's, the committed offset never went down since the
            # ack, so this min is the first answer; an entry without "=" written before entries
            # carried their answer may have answered less than the receipt's end: not claimed here.
            if st.lock_ts == receipt.timestamp:
                first = min(first, st.committed)
            return {"committed_offset": first, "unsettled": []}
        try:
            out = S.settle(st, receipt.timestamp, receipt.offset, receipt.next_offset, outcomes.accept,
                           outcomes.release, outcomes.reject, policy.max_deliveries)
        except S.Stale:
            raise StaleReceipt(stale) from None
        except S.NotInBatch:
            raise BadRequest("an offset in 'accept', 'release' or 'reject' was not delivered with this "
                             f"receipt (its batch: {list(st.batch)})") from None

        def done() -> dict:
            new = out.state
            if new.due:
                flushed = flush_due(owner, queue, policy, reader, now) or new
                if not full:  # a whole-batch ack answers what its own write left (remembered for retries)
                    new = flushed
            return {"committed_offset": new.committed, "unsettled": out.unsettled}
        if not out.changed:
            if full:  # answered 200, so remembered: its retry after a relock answers the same (one write)
                return _Write(view, out.state, done, {"ack": ack_entry(key, out.state.committed)})
            return done()
        ack = ack_entry(key, out.state.committed) if full else None
        return _Write(view, out.state, done, {"consumed": True, "ack": ack})
    return _on_record(owner, queue, now, step, rec)


def receipt_visibility(owner: str, queue: int, receipt: Receipt, until: int, now: int) -> bool:
    """Set the receipt's lock expiry. Simple form: one conditional UpdateItem; otherwise GetItem +
    conditional UpdateItem. False: stale (the lock is another's, or holds nothing any more)."""
    if OffsetRepo.set_visibility(owner, queue, receipt, until, now):
        return True

    def step(rec) -> bool | _Write:
        if rec is None or rec.settle is None:
            return False
        view = OffsetRepo.view_of(rec)
        try:
            new = S.visibility(view.state(), receipt.timestamp, receipt.offset, receipt.next_offset, until)
        except S.Stale:
            return False
        return _Write(view, new, lambda: True)
    return _on_record(owner, queue, now, step)


# --- dead letters ---------------------------------------------------------------------------------
def copy_id(owner: str, queue: int, offset: int, message_id: str) -> str:
    """The dead-lettered copy's message id: the same for every attempt to dead-letter that
    delivery of that message by that consumer, so the dedup table keeps one copy.

    >>> copy_id("g|risk|t", 0, 5, "m1") == copy_id("g|risk|t", 0, 5, "m1") != copy_id("g|risk|t", 0, 6, "m1")
    True
    """
    h = hashlib.sha256(f"{owner}\n{queue}\n{offset}\n{message_id}".encode("utf-8")).hexdigest()
    return f"dl-{h[:40]}"


def dead_letter_copy(owner: str, queue: int, log_offset: int, msg: dict, reason: str, deliveries: int,
                     policy: Policy, now: int) -> seg.Message:
    """The copy of delivered message ``msg`` (its ``topic``, ``queue``, ``offset`` as consumers
    saw them; ``log_offset``: its offset in the consumer's log) for the dead-letter topic."""
    info = {"topic": msg["topic"], "queue": msg["queue"], "offset": msg["offset"], "id": msg["id"],
            "group": policy.group, "deliveries": deliveries, "reason": reason, "at": now}
    claim = msg.get("claim")  # a body in the lake bucket: the copy names the same object (issue 18.2)
    return seg.Message(id=copy_id(owner, queue, log_offset, msg["id"]), body="" if claim else msg["body"],
                       key=msg.get("key"), tags=list(msg.get("tags") or []),
                       properties=dict(msg.get("properties") or {}), produced_at=now, dead_letter=info, claim=claim,
                       trace=msg.get("trace"))


def append_copy(topic: str, m: seg.Message, now: int) -> bool:
    """Append ``m`` to ``topic`` once (its id recorded in the dedup table in the same transaction).
    False when the topic does not exist (the copy is dropped)."""
    t = TopicRepo.get(topic)
    if t is None:
        return False
    topic = log_of(t)  # its current incarnation's keys (docs/design.md "Queue lifecycle")
    n = int(t.queues)
    q = queue_for_key(m.key, n) if m.key is not None else zlib.crc32(m.id.encode()) % n
    if LogRepo.dedup_lookup(topic, [m.id]):  # copied by an attempt that may have failed before its bump
        bump_change(topic)
        return True

    def plan(items: list, base: int) -> tuple:
        part, placed = plan_parts(topic, q, items, base)[0]
        return part, len(placed)

    try:  # an id recorded meanwhile: appended by someone else (nothing left to do)
        return append_at_head(topic, q, [(0, m, True)], now, plan, on_recorded=lambda _items, _ids: [])
    except Contended:
        raise Unavailable("the dead-letter topic's queue is too contended; retry") from None


def flush_due(owner: str, queue: int, policy: Policy, reader: Reader, now: int) -> S.State | None:
    """Dead-letter the record's due entries: copy each to the dead-letter topic (or drop it), then
    settle them with a conditional write. Returns the record's new state (None: no record).

    A due message whose read comes back empty (an eventually consistent Query that does not see
    its segment yet) stays due, uncounted, for the next settle or pull to retry: it is settled
    without a copy only when its offset is below the log's ``min_offset`` (gone with retention;
    ``reader.min_offset(queue)`` of a :class:`MinOffset` reader, a consistent GetItem, asked only
    then), and not counted."""
    def step(rec) -> S.State | None | _Write:
        if rec is None:
            return None
        view = OffsetRepo.view_of(rec)
        st = view.state()
        if not st.due:
            return st
        done: list[int] = []
        missing: list[int] = []
        allowed = policy.dead_letter_topic is not None and granted(policy)
        if policy.dead_letter_topic is not None and not allowed:
            log.warning("dead-letter topic no longer granted: dead letters dropped",
                        extra={"owner": owner, "topic": policy.dead_letter_topic, "granted_by": policy.granted_by})
        for off, (reason, n) in sorted(st.due.items()):
            if not allowed:
                done.append(off)
                continue
            msgs, _ = reader(queue, off, 1, off + 1)  # exactly that offset
            if msgs:
                if loops(policy.dead_letter_topic, msgs[0]):
                    log.warning("dead letter dropped: it would loop back",
                                extra={"owner": owner, "topic": policy.dead_letter_topic})
                else:
                    append_copy(policy.dead_letter_topic,
                                dead_letter_copy(owner, queue, off, msgs[0], reason, n, policy, now), now)
                done.append(off)
            else:
                missing.append(off)
        gone: list[int] = []
        if missing and isinstance(reader, MinOffset):
            lo = reader.min_offset(queue)
            gone = [o for o in missing if lo is None or o < lo]  # None: the log itself is gone
        new = S.gone(S.dead_lettered(st, done), gone)
        if new == st:
            return st  # nothing readable yet: left due

        def written() -> S.State:
            count_dead_letters(policy, len(done))
            return new
        return _Write(view, new, written)
    return _on_record(owner, queue, now, step)


def count_dead_letters(policy: Policy, n: int) -> None:
    """``AlarmedMessagesDeadLettered`` += ``n`` (a written settlement's dead letters: copied or
    dropped), for the deployment's dead-letter alarm, unless the consumer's client is left out of
    the alarms (``policy.alarmed``; a subscription's policy does not know: one GetItem of its
    subscriber, only when something was dead-lettered). Its own EMF document, ``service`` only
    (never a request's per-row dimension set)."""
    if n <= 0:
        return
    alarmed = policy.alarmed
    if alarmed is None:
        client = ClientRepo.get(policy.group) if policy.group else None
        alarmed = client is None or not getattr(client, "alarms_muted", False)
    if alarmed:
        emit({}, {M.ALARMED_DEAD_LETTERS: n})
