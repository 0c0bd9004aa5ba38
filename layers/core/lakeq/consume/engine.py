"""consume's engine API: the typed entry points the native routes (:mod:`lakeq.consume.service`) and
the SQS endpoint (:mod:`lakeq.sqs.messages`) drive the pull loop and settlement through. Nothing
here parses an HTTP request: a route parses its query or body into a :class:`PullRequest` (or a
receipt) and calls these; the SQS adapter builds them from its own parameters.

- :func:`pull_batch`: one pull of a group's batch from a topic (a piggybacked ack, the group's
  replays' lists first, then :func:`lakeq.consume.reader.consume` over the topic's queues);
- :func:`group_lock`: the one check of a group's receipt — the lock it names is this broker's and
  this incarnation's of the topic (409 ``stale_receipt`` otherwise) — and where its offsets live;
- :func:`settle_lock` and :func:`set_visibility`: settle offsets of a checked lock, set its expiry.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from lakeq.admin.auth import Principal, authorize, client_or_404
from lakeq.common import clock as _clock
from lakeq.common.errors import BadRequest, NotFound, StaleReceipt
from lakeq.common.names import log_of
from lakeq.common.payload import ByteBudget
from lakeq.consume import replays
from lakeq.consume import settle as settling
from lakeq.consume.reader import TopicLog, broker, consume, topic_reader
from lakeq.contract.validation import PullRequest
from lakeq.log.receipts import Receipt
from lakeq.log.receipts import parse as parse_receipt
from lakeq.log.selection import lock_until
from lakeq.log.settlement import Outcomes
from lakeq.store.catalog import TopicRepo
from lakeq.store.offsets import OffsetRepo
from lakeq.store.records import Client, Topic
from lakeq.store.replay_lists import active_replays

__all__ = ["STALE", "Lock", "PullRequest", "check_receipt", "group_lock", "instance", "pull_batch", "set_visibility",
           "settle_lock"]

STALE = "the receipt is stale: the queue was locked again, acknowledged or reset since"

MemberQueues = Callable[[Client, str, str], "set[int]"]


def _group_member_queues(group: Client, member_id: str, topic: str) -> set[int]:
    """The member's servable queues of ``topic`` (404 ``unknown_member``); reads, never writes."""
    from lakeq.store.groups import member_queues as served
    return served(group, member_id, topic)


member_queues: MemberQueues = _group_member_queues


def instance(group: Client, client_id: str | None) -> str | None:
    """Whose offsets a request uses: its ``client_id`` in broadcasting mode (400 without one),
    None in clustering mode (the group's own)."""
    if group.mode != "broadcasting":
        return None
    if client_id is None:
        raise BadRequest("client_id is required for a broadcasting group")
    return client_id


# --- a group's receipt ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Lock:
    """The lock a group's receipt names, checked (:func:`group_lock`): the offsets ``owner``, the
    ``topic`` and the ``queue`` of the receipt's batch."""

    owner: str
    topic: str
    queue: int
    receipt: Receipt


def group_lock(group: Client, t: Topic, receipt: Receipt, client_id: str | None = None) -> Lock:
    """The one check of "is this receipt this group's, this broker's, this incarnation's": the
    offsets owner of ``group`` (its ``client_id`` instance in broadcasting mode, 400 without one) on
    topic item ``t``; 409 ``stale_receipt`` for another broker's receipt or one of another
    incarnation of the topic (deleted and made again). The lock itself (locked again, settled,
    reset since) is checked by the conditional write that settles it. No store call."""
    owner = OffsetRepo.owner(group.name, log_of(t), instance(group, client_id))
    if receipt.broker != broker() or receipt.log != log_of(t):
        raise StaleReceipt(STALE)
    return Lock(owner, t.name, receipt.topic_queue[1], receipt)


def settle_lock(group: Client, lock: Lock, accept: tuple[int, ...], release: tuple[int, ...] = ()) -> dict:
    """Settle offsets of a checked lock: ``accept`` (done) and ``release`` (served again first).
    When ``accept`` is the lock's whole range ``[offset, next_offset)`` and nothing is released, the
    lock in the simple form is acknowledged with one conditional UpdateItem
    (:meth:`lakeq.store.offsets.OffsetRepo.ack_fast`); otherwise :func:`lakeq.consume.settle.settle_receipt`
    (consistent GetItem + conditional UpdateItem). ``{"committed_offset", "unsettled"}``; 409
    ``stale_receipt`` (locked again, settled, reset); 400 for an offset the batch did not deliver."""
    r = lock.receipt
    now = _clock.now()
    if not release and accept == tuple(range(r.offset, r.next_offset)) \
            and OffsetRepo.ack_fast(lock.owner, lock.queue, r, now) is True:
        return {"committed_offset": r.next_offset, "unsettled": []}
    return settling.settle_receipt(lock.owner, lock.queue, r, Outcomes(accept=accept, release=release),
                           settling.policy_of(group), topic_reader(r.log, None), now, STALE)


def set_visibility(lock: Lock, visibility_ms: int) -> int:
    """Set a checked lock's expiry ``visibility_ms`` from now (0: it ends now): one conditional
    UpdateItem in the simple form (:func:`lakeq.consume.settle.receipt_visibility`). The new expiry; 409
    ``stale_receipt`` when the lock is another's or holds nothing any more."""
    now = _clock.now()
    until = lock_until(now, visibility_ms)
    if not settling.receipt_visibility(lock.owner, lock.queue, lock.receipt, until, now):
        raise StaleReceipt(STALE)
    return until


def check_receipt(p: Principal, group: Client, client_id: str | None, receipt: Receipt, use: str,
                  known: Topic | None = None) -> Lock:
    """A native request's checks of a group's receipt (ack, visibility, a pull's ``ack``), in API.md's
    order: not a subscription's (400), its topic exists (404), the key may act (403), then
    :func:`group_lock`. ``known``: a topic item this request already read (a pull's), used when it
    is the receipt's; else one GetItem of the receipt's topic."""
    if receipt.subscription is not None:
        raise BadRequest(f"this receipt is for a subscription; {use} it with 'subscription'")
    topic, _ = receipt.topic_queue
    t = known if known is not None and known.name == topic else TopicRepo.get(topic)
    if t is None:
        raise NotFound(f"topic '{topic}' of the receipt does not exist")
    authorize(p, group, topic)
    return group_lock(group, t, receipt, client_id)


# --- pull -------------------------------------------------------------------------------------------
def pull_batch(p: Principal, t: Topic, req: PullRequest, *, ack: Receipt | None = None,
               budget: Callable[[], ByteBudget] = ByteBudget, with_replays: bool = True,
               hints_max_age_s: float = 0.0, suspects: str = "serve") -> dict:
    """One pull of ``req.group``'s batch from topic item ``t`` for caller ``p`` (404 for an unknown
    group or member, 403 when the key may not act). ``ack``: ``req.ack`` parsed (the route parses it
    with the request; parsed here when not given); ``budget``: the batch's byte budget
    (:func:`lakeq.consume.reader.consume`; the SQS endpoint's own); ``with_replays``: serve the
    group's replays' lists first (:mod:`lakeq.consume.replays`; the SQS endpoint's receive does
    not: its receipt handles name topic queues only); ``hints_max_age_s``: the queue items may come
    from the container's copy that young (:class:`lakeq.consume.reader.TopicLog`); ``suspects``:
    :func:`lakeq.consume.reader.consume`'s (the SQS endpoint's receive)."""
    ack_receipt = ack if ack is not None or req.ack is None else parse_receipt(req.ack)
    topic = t.name
    group = client_or_404(req.group, "consumer")
    allowed = member_queues(group, req.member_id, topic) if req.member_id is not None else None
    authorize(p, group, topic)
    client_id = instance(group, req.client_id)
    log = log_of(t)
    owner = OffsetRepo.owner(group.name, log, client_id)
    policy = settling.policy_of(group)
    # replays into this group (issue 18.1): named by the group's item, read above; none: no store call more
    active = active_replays(group, topic) if with_replays else []
    lock_owner = req.member_id or client_id or "-"
    folded = None
    if ack_receipt is not None and ack_receipt.replay is not None:  # an entry of a replay's list
        r_owner = replays.receipt_owner(p, group, client_id, ack_receipt, STALE)

        def ack_entry() -> dict:
            return settling.settle_receipt(r_owner, 0, ack_receipt, Outcomes(), policy,
                                   replays.replay_reader(ack_receipt.queue, None), _clock.now(), STALE)

        if ack_receipt.replay in active and not req.tags:
            folded = (ack_receipt, 0, ack_entry)  # folded into the list's next lock (reader.fold)
        else:
            ack_entry()
    elif ack_receipt is not None:
        # the receipt's checks (the pull's topic item serves them when it is the receipt's topic)
        lk = check_receipt(p, group, client_id, ack_receipt, "acknowledge", known=t)
        q, ack_owner = lk.queue, lk.owner

        def ack_alone() -> dict:
            return settling.settle_receipt(ack_owner, q, ack_receipt, Outcomes(), policy,
                                   topic_reader(ack_receipt.log, None), _clock.now(), STALE)

        if (not active and ack_owner == owner and ack_receipt.log == log and not req.tags
                and (allowed is None or q in allowed)):
            folded = (ack_receipt, q, ack_alone)  # the ack goes into this pull's lock write (reader.fold)
        else:
            ack_alone()
    vis = req.visibility_timeout_ms or int(group.visibility_timeout_ms)
    if active:  # the replays' lists first, without waiting; then the topic's queues as usual
        out = replays.pull_lists(group, topic, active, client_id, vis, req, policy, lock_owner, folded)
        if out is not None:
            return out
        folded = None  # (a list's piggybacked ack was settled by its poll)
    meta = {"group": group.name, "client_id": client_id, "topic": topic}
    return consume(TopicLog(log, owner, meta, int(t.queues), lock_owner, only=allowed,
                            hints_max_age_s=hints_max_age_s),
                   vis, req, allowed, policy=policy, folded=folded, budget=budget, suspects=suspects)
