"""Reading logs: the one pull loop over topic queues and subscription lists (SPEC §1).

A *log* is a topic queue (``topic``, ``queue``) or a subscription's message list (pseudo-topic
``~<id>``, queue 0): segments in SegmentsTable, head and tail offsets in QueuesTable, the consumer's
record in OffsetsTable. A :data:`LogReader` reads one log from an offset; :func:`topic_reader` and
:func:`list_reader` are the two kinds, both built on :func:`read_log` (contiguous offsets, a tag
filter, at most one Lambda response of messages). :func:`consume` chooses a log, reads, locks it
with a conditional write and answers, long-polling until ``wait_ms`` passes.
"""
from __future__ import annotations

import os
import time
from array import array
from dataclasses import dataclass, replace
from typing import Callable, Iterable, NamedTuple

from lakeq.admin.auth import topic_or_404
from lakeq.common import clock
from lakeq.common.memo import keep
from lakeq.common.names import is_list, topic_of_log
from lakeq.common.payload import ByteBudget
from lakeq.consume.settle import Policy, flush_due
from lakeq.contract import validation as v
from lakeq.log import segments as seg
from lakeq.log import settlement
from lakeq.log.receipts import Receipt, topic_queue_field
from lakeq.log.selection import QueueView, ack_entry, ack_key, candidates, lagging, may_fold, next_lock_ts
from lakeq.log.selection import acked as remembered
from lakeq.store.bodies import BodyStore
from lakeq.store.offsets import OffsetRepo
from lakeq.store.queue_log import CHANGE_EVERY_MS, CHANGE_SKEW_MS, LogRepo
from lakeq.store.records import Change

SCAN_FACTOR = 10  # a filtered pull examines at most max * SCAN_FACTOR (>= 1000) offsets per queue
POLL_MIN_MS, POLL_MAX_MS = 50, 500
# The long poll's waiting rounds on a topic (issue 33; docs/design.md "The long poll's waiting rounds"):
# while the topic's change marker (lakeq.store.queue_log.LogRepo.change) stands still, a round reads
# it alone, every WAIT_ROUND_MS (a new message is found within that of its produce's bump, + a full round)
WAIT_ROUND_MS = 1000
# ... every WAIT_ROUND_ACTIVE_MS while the topic is active (its marker bumped within ACTIVE_MS: the
# window in which full rounds probe the chains too), so a message produced right after a round read
# the marker is answered within 1 s of its produce's answer, a full round included (issue 33: 1 s + a
# round at WAIT_ROUND_MS). A quiet topic's idle poll reads the marker once a second as before.
WAIT_ROUND_ACTIVE_MS = 250
# a topic bumped more than this long ago: every append before it is taken as shown by the queue
# items' max_offset (the stream's head mover runs within seconds), so a full round probes no chain
HEADS_SETTLE_MS = 10_000
# ... but each container still probes each (log, owner, queues) at least this often (a late mover,
# an append that could not bump): such a message waits at most this long, never forever
PROBE_NET_MS = 60_000
_PROBED: dict[tuple, int] = {}  # (log, owner, only) -> when this container last probed (epoch ms)
PROBED_KEPT = 4096
# log -> (the change marker a full round read, when this container first read that version: epoch ms).
# An empty look needs the version's window over by this container's reading too, not only by the
# marker's ``at``: a bump that lands late (retried) over a newer one leaves an old ``at`` while the
# container that bumped just before is inside its unsignalled second (review_c)
_SEEN: dict[str, tuple] = {}
SEEN_KEPT = 4096
ACTIVE_MS = CHANGE_EVERY_MS + CHANGE_SKEW_MS + HEADS_SETTLE_MS
# A full round that found nothing inside the marker's unsignalled window is kept as a *young* look
# (issue 33 item 2): the next pull reads the marker and probes the chains at its lockable queues'
# frontiers instead of a full round (_probed_empty). False: the code before (no look kept in the window;
# bench/queue.py --ab measures both in one process)
YOUNG_LOOKS = True
# Leaner empty pulls (issue 33 item 2, cost33f; docs/design.md "Young looks"): a young look's pull reads
# the marker and at most PROBES_WITH_MARKER probes in one BatchGetItem (2 calls, not 3; the same units),
# and the pull whose ack= left its queue drained at a segment's end is answered from the look (that queue
# probed at its frontier) instead of a full round. False: the code before (bench/queue.py --ab)
LEAN_EMPTIES = True
PROBES_WITH_MARKER = 4  # more: the marker first, so a moved marker does not pay the probes (cost33e)

# (queue, start, limit, max_offset) -> (messages, next_offset)
LogReader = Callable[[int, int, int, int], "tuple[list[dict], int]"]


def broker() -> str:
    return os.environ.get("LAKEQ_BROKER") or "lakeq"


def message_out(m: dict) -> dict:
    """A delivered message as API.md shows it (field order fixed).

    >>> list(message_out({"offset": 3, "id": "a", "extra": 1}))
    ['id', 'topic', 'queue', 'offset', 'body', 'key', 'tags', 'properties', 'produced_at', 'deliveries']
    >>> list(message_out({"dead_letter": {}}))[-1]
    'dead_letter'
    >>> list(message_out({"trace": "Root=1-5759e988-bd862e3fe1be46a994272793"}))[-1]
    'trace'
    """
    out = {k: m.get(k) for k in ("id", "topic", "queue", "offset", "body", "key", "tags", "properties",
                                 "produced_at")}
    out["deliveries"] = m.get("deliveries", 1)
    if m.get("dead_letter") is not None:  # a dead-lettered copy (issue 9)
        out["dead_letter"] = m["dead_letter"]
    if m.get("trace") is not None:  # the producer's X-Ray trace header (issue 34)
        out["trace"] = m["trace"]
    return out


def views(topic: str, owner: str, n_queues: int | None = None, recs: dict | None = None) -> list[QueueView]:
    """Each queue's log offsets and ``owner``'s record: BatchGetItem of the ``n_queues`` queue
    items (a subscription's list ``~<id>`` has one; a topic's count is read when not given) and
    one Query of the owner's records (``recs``: those records when the caller already read them).
    Reads only."""
    if n_queues is None:
        n_queues = 1 if is_list(topic) else int(topic_or_404(topic).queues)
    return views_of(LogRepo.queues(topic, n_queues), OffsetRepo.records(owner) if recs is None else recs)


def views_of(metas: list, recs: dict) -> list[QueueView]:
    """The :class:`~lakeq.log.selection.QueueView` of each queue item in ``metas`` with its record in
    ``recs`` (queue → offset record)."""
    out = []
    for m in metas:
        r = recs.get(int(m.queue))
        if r is None:
            out.append(QueueView(int(m.queue), int(m.min_offset), int(m.max_offset)))
        else:  # the hint, or the end of the newest segment the record's locks read when that is further
            out.append(OffsetRepo.view_of(r, int(m.min_offset), max(int(m.max_offset), int(r.bnd or 0))))
    return out


def _bnd(fresh: list[dict]) -> int | None:
    """The end of the segment the last of a lock's fresh messages came from (None: no fresh message)."""
    return fresh[-1].get("_seg_end") if fresh else None


class Log:
    """What the pull loop (:func:`consume`) reads and locks: consumer ``owner``'s log ``name``
    with ``n_queues`` queues; ``meta``: what its offset records keep (``group``, ``topic``…);
    ``lock_owner``: who a lock names; ``only``: the queues a poll reads at all (a group member's
    assigned ones; None: every queue). The kinds differ in the receipt's queue field, the reader,
    and whether a poll first promotes delayed messages (:meth:`promote`): :class:`TopicLog`,
    :class:`ListLog`."""

    def __init__(self, name: str, owner: str, meta: dict, n_queues: int, lock_owner: str = "-",
                 only: set[int] | None = None):
        self.name, self.owner, self.meta, self.n_queues, self.lock_owner = name, owner, meta, n_queues, lock_owner
        self.only = only
        self._first: dict[int, object] = {}  # queue -> the segment the last probe found at its frontier
        # the next probe reads strongly consistently (once): a young look's consistent probe found a
        # segment an eventually consistent one may not show yet (review_f)
        self.probe_consistently = False
        # queue -> frontier: this pull's folded ack left that queue drained there, the chain read from a
        # segment's end finding nothing (fold); the look may answer for it after a probe (_still_empty)
        self.drained: dict[int, int] = {}

    def queue_field(self, queue: int) -> str:
        """The receipt's queue field for ``queue``."""
        raise NotImplementedError

    def reader(self, tags: list[str] | None) -> LogReader:
        """A reader of this log's queues, filtered by ``tags`` where the kind allows it."""
        raise NotImplementedError

    def queues(self) -> list:
        """The queue items (one BatchGetItem; with :attr:`only`, of those queues alone: a member of
        a group whose queues are spread over many members reads its own, not the topic's every
        queue item): offsets, and delayed messages' ``next_due``; their ``max_offset`` as stored (a
        hint, see :meth:`probe`)."""
        return LogRepo.queues(self.name, self.n_queues, exact=False, only=self.only)

    def probe(self, views: list[QueueView], now: int, allowed: set[int] | None) -> list[QueueView]:
        """``views`` with the heads a pull needs (issue 16 item 3): each queue the pull could lock
        whose ``max_offset`` hint shows nothing to read (:func:`lakeq.log.selection.lagging`) is
        probed in its chain, so a pull right after a produce's answer finds the message whether
        or not the stream's head mover ran. At a frontier equal to the hint (a segment's end, so a
        boundary: the queue item's ``max_offset``, or the end of the newest segment the record's
        locks read when further, ``OffsetModel.bnd`` — a consumer that keeps up stands there
        while the stream's head mover is behind it) the segment starting there, for all such queues in one BatchGetItem
        (:meth:`lakeq.store.queue_log.LogRepo.segments_at`, whole segments, the one the poll locks then
        read from there: 0.5 RRU a queue when there is none, the
        common case of a drained queue; one round trip however many queues: a 64-queue topic's
        probes were 64 sequential Queries); at a frontier past the hint (it read past it, possibly
        into the middle of a segment) the newest segment, one Query each
        (:meth:`lakeq.store.queue_log.LogRepo.chain_end`)."""
        lag = {v.queue: (LogRepo.pq(self.name, v.queue), v.state().frontier)
               for v in views if lagging(v, now, allowed)}
        hints = {v.queue: v.max_offset for v in views}
        at_hint = {}  # the lagging queues whose frontier is their hint: one BatchGetItem for them all
        for q, (pq_, frontier) in lag.items():
            if frontier == hints[q]:
                at_hint[pq_] = frontier
        consistent, self.probe_consistently = self.probe_consistently, False
        segs = LogRepo.segments_at(at_hint, consistent=consistent) if at_hint else {}
        # the segments found: the read of the queue this poll locks starts from there, not a Query
        self._first.clear()
        self._first.update({q: segs[pq_] for q, (pq_, _) in lag.items() if pq_ in segs})
        out = []
        for view in views:
            if view.queue in lag:
                pq_, frontier = lag[view.queue]
                if pq_ in at_hint:
                    end = int(segs[pq_].end) if pq_ in segs else None
                else:
                    end = LogRepo.chain_end(pq_, consistent=consistent)
                if end is not None and end > view.max_offset:
                    view = replace(view, max_offset=end)
            out.append(view)
        return out

    def promote(self, metas: list) -> None:
        """A poll's write step before it reads: nothing for this kind."""

    def views(self, metas: list, recs: dict | None = None) -> list[QueueView]:
        """The queues' views with the owner's records (one Query; ``recs``: those records when this
        pull read them already); kept as :attr:`last_views`."""
        self._recs = OffsetRepo.records(self.owner) if recs is None else recs
        self.last_views = views_of(metas, self._recs)
        return self.last_views

    last_views: list[QueueView] = []

    def refreshed(self) -> list[QueueView] | None:
        """The last :meth:`views` again from queue items read now, when those views ranked by a
        copy of them (:class:`TopicLog`'s ``hints_max_age_s``), the same records; None otherwise."""
        return None

    def wake_at(self) -> int | None:
        """When the long poll should look again at the latest (None: its own backoff)."""
        return None


class TopicLog(Log):
    """A topic's queues (``name``: its log name): receipts name ``<topic>@<queue>``, a pull may
    filter by tags, and each poll first promotes the delayed messages that are due
    (:func:`lakeq.produce.delayed.promote_due`: free to find, the poll reads the queue items anyway).
    ``hints_max_age_s`` > 0: the polls take the queue items from the container's copy when younger
    than that (:meth:`lakeq.store.queue_log.LogRepo.queue_hints`; the SQS endpoint's receives)."""

    _wake: int | None = None

    def __init__(self, name: str, owner: str, meta: dict, n_queues: int, lock_owner: str = "-",
                 only: set[int] | None = None, hints_max_age_s: float = 0.0):
        super().__init__(name, owner, meta, n_queues, lock_owner, only)
        self.hints_max_age_s = hints_max_age_s
        # a long poll waits on the topic's change marker (issue 33): the native pull's and the SQS
        # endpoint's receives (whose marker comes with the copy of the queue items, as old as they are)
        self.waits_on_change = True
        self.change = None  # the marker as the last full round read it (None: never bumped)
        self.moved = False  # a waiting round saw the marker move: the next full round reads the items
        self._heads: dict[int, int] | None = None  # the round's exact heads (probe), for an EmptyLook
        self._trusted = False  # ... taken from the hints (no probe was due: a quiet topic)

    _copied = False

    def queues(self) -> list:
        if self.hints_max_age_s <= 0:  # the queue items and the change marker: one BatchGetItem
            metas, self.change = LogRepo.queues_and_change(self.name, self.n_queues, only=self.only)
            _seen_since(self.name, self.change, clock.now())
            return metas
        metas, self.change, self._copied = LogRepo.queue_hints(self.name, self.n_queues, self.hints_max_age_s,
                                                               only=self.only, refresh=self.moved)
        self.moved = False
        return metas

    def probe(self, views: list[QueueView], now: int, allowed: set[int] | None) -> list[QueueView]:
        """:meth:`Log.probe` when the chains may hold more than the hints show: the topic was bumped
        less than ``CHANGE_EVERY_MS + CHANGE_SKEW_MS + HEADS_SETTLE_MS`` ago (its recent appends,
        signalled or not, may not be on the queue items yet), or this container has not probed this
        log for this owner for :data:`PROBE_NET_MS`. A quiet topic's pull probes nothing: its
        queue items' ``max_offset`` are its heads (issue 33). A pull ranked by the container's copy
        of the queue items (the SQS endpoint's) probes as before."""
        if self.hints_max_age_s > 0:
            return super().probe(views, now, allowed)
        if _must_probe(self, now):
            out = super().probe(views, now, allowed)
            # what the probes found is each probed queue's head (the chain read now), for an EmptyLook:
            # a probe that found nothing past the hint. One that found a segment at the frontier
            # knows that segment's end, not whether more follow; the round tried that queue, and
            # when it locked nothing there (another consumer's lock won the race) the look must not
            # take that end for the head (review_c: its ack alone left the rest of the queue unseen)
            self._heads = {p.queue: p.max_offset for p, v in zip(out, views)
                           if lagging(v, now, allowed) and p.max_offset <= v.max_offset}
            self._trusted = False
            return out
        self._heads = {v.queue: v.max_offset for v in views}  # a quiet topic: the hints are taken as heads
        self._trusted = True
        return views

    def settled_since(self, now: int) -> bool:
        """Whether every append the marker read by the last full round may stand for happened
        before ``now - CHANGE_SKEW_MS`` and past its unsignalled window: a round at ``now`` that
        finds the marker unchanged has nothing new to look for.

        The window is counted from the marker's ``at`` or from when this container first read its
        version (:func:`_seen_since`), whichever is earlier: every bump the version stands for
        landed before that read, and a container's unsignalled window ends ``CHANGE_EVERY_MS`` of
        its clock after its own bump. A bump from a clock far ahead leaves ``at`` in the future
        (it never goes back: :meth:`LogRepo.bump_change`), which kept every look off until the
        other clocks caught up (review_d)."""
        c = self.change
        return c is None or now >= _bumped_by(self.name, c) + CHANGE_EVERY_MS + CHANGE_SKEW_MS

    def refreshed(self) -> list[QueueView] | None:
        """When the poll ranked by the container's copy of the queue items and neither the copy's
        hints nor the probes found anything to lock: the items read now (and the copy renewed), due
        delayed messages promoted, the views rebuilt on the poll's records (one BatchGetItem; no
        second Query). A probe is exact from the chain, so the fresh items add only what a
        promotion brings; a poll comes back empty only after they said so too."""
        if not self._copied:
            return None
        metas, self.change, self._copied = LogRepo.queue_hints(self.name, self.n_queues, self.hints_max_age_s,
                                                               only=self.only, refresh=True)
        self.promote(metas)
        return views_of(metas, self._recs)

    def queue_field(self, queue: int) -> str:
        return topic_queue_field(self.name, queue)

    def reader(self, tags: list[str] | None) -> LogReader:
        return topic_reader(self.name, tags, self._first)

    def promote(self, metas: list) -> None:
        """Due delayed messages join their queues (a write), and ``metas``' heads move past them
        in memory so this very poll reads them; remembers the earliest ``deliver_at`` still ahead
        (:meth:`wake_at`)."""
        from lakeq.produce.delayed import promote_due
        self._wake = promote_due(self.name, metas)

    def wake_at(self) -> int | None:
        at, self._wake = self._wake, None
        return at


def _keeps_looks(log: Log) -> bool:
    """Whether ``log``'s pulls keep and use empty looks: a native pull's topic log (not the SQS
    endpoint's, which ranks by its copy of the queue items; not a subscription's list)."""
    return isinstance(log, TopicLog) and log.hints_max_age_s <= 0


def _probe_key(log: "TopicLog") -> tuple:
    return log.name, log.owner, None if log.only is None else frozenset(log.only)


def _net_due(log: "TopicLog", now: int) -> bool:
    """Whether a full round of ``log`` at ``now`` would probe for the container's safety net
    (:func:`_must_probe`), without noting it."""
    last = _PROBED.get(_probe_key(log))
    return last is None or not 0 <= now - last < PROBE_NET_MS


class _Seen(NamedTuple):
    """What an :class:`EmptyLook` keeps of a queue item: what :func:`views_of` reads."""

    queue: int
    min_offset: int
    max_offset: int


@dataclass(frozen=True)
class EmptyLook:
    """What a full round of a native pull (:class:`TopicLog` without a copy of the queue items) that
    found nothing to lock saw (issue 33 item 2): the change marker it read (``change``) when the
    round began (``at``), the queue items it ranked by and each queue's head as the round knew it
    for sure (the probes' — or every hint when no probe was due, ``trusted``): ``rows``, four
    int64 a queue (queue, min_offset, max_offset, head or -1; :meth:`seen`),
    and the earliest delayed message still ahead (``wake``); ``young``: the round read the marker inside
    its unsignalled window (its heads are not trusted without a probe). Kept per (the log's kind, log, owner,
    queues, the queues a member may serve) in the container (:meth:`LogRepo.note_look`) for :func:`_still_empty`."""

    change: Change | None
    at: int
    rows: array
    trusted: bool
    wake: int | None
    young: bool = False  # kept inside the marker's unsignalled window: each use probes (_still_empty)

    def seen(self) -> tuple[list[_Seen], dict[int, int]]:
        """The queue items' offsets (what :func:`views_of` reads) and the heads known, from ``rows``."""
        r = self.rows
        metas = [_Seen(r[i], r[i + 1], r[i + 2]) for i in range(0, len(r), 4)]
        return metas, {r[i]: r[i + 3] for i in range(0, len(r), 4) if r[i + 3] >= 0}


def _look_key(log: "TopicLog", allowed: set[int] | None) -> tuple:
    # the log's kind too: a group's push endpoint (lakeq.push.delivery.PushTopicLog) pulls as the
    # group but promotes nothing, so its look knows no delayed message ahead (review_c)
    return (type(log).__name__, log.name, log.owner, None if log.only is None else frozenset(log.only),
            None if allowed is None else frozenset(allowed))


def _note_empty(log: "TopicLog", at: int, metas: list, allowed: set[int] | None) -> None:
    """After a full round at ``at`` that locked nothing: keep what it saw (:class:`EmptyLook`) when
    the round knows its heads (it ranked with probes allowed); else drop the look kept before. The
    look is *young* when the marker it read was inside its unsignalled window, by its ``at`` or by
    when this container first read that version (:func:`_seen_since`): appends the marker does not
    show may follow, so a pull answered from it probes the chains (:func:`_still_empty`); a round
    that took the hints as heads (``trusted``) is never young (it probed nothing)."""
    key = _look_key(log, allowed)
    young = not _window_over(log, at, _seen_since(log.name, log.change, clock.now()))
    # a round that probed an active topic's chains read them eventually consistently, shortly after
    # appends: a segment put within the replicas' lag may be missing from its heads — kept young, the
    # next pull's probe confirms them (consistently once past the window) before the marker alone
    # answers (review_f: kept grown up, the stale head hid the message until the safety net)
    young = young or (not log._trusted and active(log.change, at, log.name))
    if log._heads is None or (young and (log._trusted or not YOUNG_LOOKS)):
        LogRepo.note_look(key, None)
        return
    # the wake: the earliest delayed message ahead as the round's promotions saw it, and as the queue
    # items say (a push run promotes nothing, and the sweep's promotions bump no marker: review_c)
    dues = [int(m.next_due) for m in metas if getattr(m, "next_due", None) is not None]
    wake = min([w for w in (log._wake, *dues) if w is not None], default=None)
    # the queue items' offsets and heads alone, packed (a look of a 64-queue topic kept whole items
    # and a dict of heads, ~24 KiB: 4,096 looks ~97 MiB of a 512-MB container, keys a tenant's
    # broadcasting client_ids alone can fill; review_c)
    rows = array("q")
    for m in metas:
        rows.extend((int(m.queue), int(m.min_offset), int(m.max_offset), log._heads.get(int(m.queue), -1)))
    LogRepo.note_look(key, EmptyLook(log.change, at, rows, log._trusted, wake, young))


def _window_over(log: "TopicLog", at: int, first: int) -> bool:
    """Whether every append the marker ``log.change`` stands for, signalled or not, was visible at
    ``at`` (:meth:`TopicLog.settled_since`), by this container's first read of that version
    (``first``) too (review_c). A marker never bumped (None) stands for no append: any bump, late
    or not, creates it, so it has no window."""
    return log.change is None or (log.settled_since(at) and at >= first + CHANGE_EVERY_MS + CHANGE_SKEW_MS)


def _still_empty(log: "TopicLog", now: int, allowed: set[int] | None) -> tuple[bool, dict | None]:
    """Whether a pull at ``now`` has nothing to lock for sure, from the container's last empty look
    (:class:`EmptyLook`) of the same owner and queues, the owner's records (the consistent Query every
    ranked pull makes) and, when they show nothing lockable, one strongly consistent GetItem of the
    change marker (1 RRU), instead of the queue items (0.5 RRU each), the records and the probes
    (issue 33 item 2). (True, records):
    answer empty — the views are set as a full round's (:attr:`Log.last_views`, the marker) for a
    long poll's waiting rounds; (False, records or None): run the full round (with those records).

    Why an empty answer then hides nothing: the marker unchanged since the look, which read it outside
    its unsignalled window, means no append since (every append bumps it, or falls in that window:
    :func:`_wait_for_change`'s argument), so each head the look knew is still the head; the records,
    read now, tell every lock, pending and due offset as a full round would; a queue the pull could
    lock whose head the look did not know (locked then, or a hint a probe would check now) sends the
    pull to the full round, as does any queue with something to serve, a delayed message due, or
    the container's safety-net probe due (any look: a request that failed between its appends and
    its bump shows in no marker) — but the queue this pull's own ``ack=`` just left drained at its lock's
    ``bnd`` (:attr:`Log.drained`) is probed there instead (:func:`_probed_empty`). Locks, acks and nacks on
    any route show in the records; a member's queues are part of the key. A young look (kept inside
    the marker's unsignalled window) answers only after probing the lockable queues' chains too
    (:func:`_probed_empty`)."""
    look = LogRepo.look(_look_key(log, allowed))
    if not isinstance(look, EmptyLook) or now < look.at:
        return False, None
    # the safety net bounds every look, a probed one too: an append whose request failed before its
    # bump (lakeq.store.append.bump_change) shows in no marker, and only a full round finds it (review_c)
    if (look.wake is not None and now >= look.wake) or _net_due(log, now):
        return False, None
    drained, log.drained = log.drained, {}
    recs = OffsetRepo.records(log.owner)
    views = []
    metas, heads = look.seen()
    unknown = set()  # lockable queues whose head the look does not know, drained by this pull's fold
    for view in views_of(metas, recs):
        head = heads.get(view.queue)
        if head is not None and head > view.max_offset:
            view = replace(view, max_offset=head)
        if head is None and lagging(view, now, allowed):
            if drained.get(view.queue) != view.state().frontier or view.max_offset != view.state().frontier:
                return False, recs
            unknown.add(view.queue)
        views.append(view)
    if candidates(views, now, allowed):
        return False, recs
    if look.young or unknown:
        return _probed_empty(log, look, now, allowed, views, recs, unknown)
    # the records first: a pull the look cannot answer (a lock ended, its own drained queue just
    # acknowledged) pays no marker read. The marker after them: unchanged, no append happened
    # between the look and this read, so the heads at the records' read were the look's
    change = LogRepo.change(log.name)
    if change != look.change:
        return _outdated(log, allowed, look), recs
    log.change, log.last_views, log._recs, log._wake = change, views, recs, look.wake
    return True, recs


def _outdated(log: "TopicLog", allowed: set[int] | None, look: EmptyLook) -> bool:
    """The marker moved since ``look``: drop it (unless another pull kept a newer one meanwhile), so the
    group's next pulls in this container do not pay the marker's read to learn it again before their
    full rounds (when this pull's round locks something, it keeps no look; cost33f). False."""
    key = _look_key(log, allowed)
    if LEAN_EMPTIES and LogRepo.look(key) is look:
        LogRepo.note_look(key, None)
    return False


def _probed_empty(log: "TopicLog", look: EmptyLook, now: int, allowed: set[int] | None, views: list[QueueView],
                  recs: dict, unknown: set[int] = frozenset()) -> tuple[bool, dict | None]:
    """:func:`_still_empty` from a young look (kept inside the marker's unsignalled window, when a
    container that bumped may append for up to ``CHANGE_EVERY_MS`` more without bumping again):
    the records showed nothing lockable with the look's heads; now every queue the pull could lock
    (:func:`lakeq.log.selection.lagging`) is probed at its frontier (one BatchGetItem of the segment
    keys, :meth:`LogRepo.segments_at`: 0.5 RRU a queue) after the marker is read (1 RRU; moved: the
    full round, the probes not paid), instead of the queue items, the marker and the probes of a
    full round.

    Why an empty answer then hides nothing: a queue's frontier equal to its view's ``max_offset`` —
    the hint, the record's ``bnd`` or the look's head, each a segment's end — is a segment boundary,
    so the segment starting there exists exactly when anything was appended past it (segments
    never change and each starts where another ends: the full round's probe, :meth:`Log.probe`); a
    lagging queue whose frontier is anywhere else, or a queue the look did not see (a topic grown,
    a queue item created since), sends the pull to the full round. Appends need no marker then. (A
    lagging queue whose head the look does not know — locked by another consumer at its round —
    went to the full round already, as from a grown-up look: its hint in the look is old, so a probe
    there mostly finds the rest of the queue, and the full round would read it again; except the
    queue this pull's fold just acknowledged and found drained at its lock's ``bnd``, a segment's
    end (``unknown``: probed with the others, and its head noted in the look; a grown look probes
    those alone, consistently, its other heads standing on the unchanged marker — cost33f.) The
    marker is for what the chains do not show: a delayed message's ``next_due`` on a queue item —
    every delayed produce that moves a ``next_due`` earlier (or sets it) bumps it, even within its
    container's second (``force``, :meth:`LogRepo.bump_change`), so an unchanged marker means no
    earlier due since the look's round read the queue items (its ``wake`` still stands). Promotions
    by the sweep append (the probes see them). With at most :data:`PROBES_WITH_MARKER` queues to
    probe, the marker and the probes are one BatchGetItem
    (:meth:`LogRepo.change_and_segments_at`): the two reads unordered, which the argument does not
    need (the probes see every append at a boundary whenever read; the marker says no earlier due
    since the look). The round read the queue items and the marker eventually consistently, two
    items from any replicas: the pull that grows a young look up reads the items' ``next_due``
    strongly consistently after the marker (:meth:`LogRepo.next_dues`, review_g), so a bump read
    without its ``next_due`` costs at most the window.

    Once the version's window is over (by its ``at`` and by this container's first read of it), the
    look is kept grown up at ``now``: its heads those just probed, the others unknown (a full round
    when they are lockable), as a full round past the window would have kept it."""
    metas, _ = look.seen()
    want = range(log.n_queues) if log.only is None else (q for q in log.only if 0 <= q < log.n_queues)
    if {m.queue for m in metas} != set(want):
        return False, recs
    only = None if look.young else unknown  # a grown look probes only the queues it did not know
    starts: dict[str, int] = {}
    for view in views:
        if lagging(view, now, allowed) and (only is None or view.queue in only):
            frontier = view.state().frontier
            if frontier != view.max_offset:
                return False, recs
            starts[LogRepo.pq(log.name, view.queue)] = frontier
    log.change = look.change
    # the version's window over (as the marker is read unchanged below): the probe grows the look up
    grown = _window_over(log, now, _seen_at(log.name, look.change, now))
    # the probe that grows the look up reads consistently (1 RRU a key, not 0.5): an eventually
    # consistent read may miss a segment put within the replicas' lag — the last unsignalled append
    # of the window, a moment before — and the grown-up look trusted that stale head, answering every
    # pull empty over it until the safety net (review_f). A grown look's probe of the queues it did not
    # know (``only``) is noted in it, so it reads consistently too
    consistent = grown or only is not None
    if starts and LEAN_EMPTIES and len(starts) <= PROBES_WITH_MARKER:
        # the marker and the probes in one BatchGetItem (the same units, one round trip fewer): a
        # moved marker wastes at most PROBES_WITH_MARKER probes' units
        change, found = LogRepo.change_and_segments_at(log.name, starts, consistent=consistent)
        if change != look.change:
            return _outdated(log, allowed, look), recs
    else:
        # the marker first: moved (a busy topic's next bump), the miss costs its 1 RRU, not the probes too
        change = LogRepo.change(log.name)
        if change != look.change:
            return _outdated(log, allowed, look), recs
        found = LogRepo.segments_at(starts, consistent=consistent) if starts else {}
    _seen_since(log.name, change, now)
    if found:
        # the full round's probe reads them consistently too: else it could miss what this one found
        # and answer empty until the replica has it
        log.probe_consistently = consistent
        return False, recs
    wake = look.wake
    if grown and look.young:
        # the queue items' next_due, read strongly consistently after the marker: the round's
        # eventually consistent BatchGetItem may have read the marker with a delayed produce's bump
        # and its queue item from a replica without it (review_g: the look then waited for no due,
        # and the grown-up look answered empty past it until the safety net)
        dues = [d for d in LogRepo.next_dues(log.name, [m.queue for m in metas]).values() if d is not None]
        wake = min([w for w in (wake, *dues) if w is not None], default=None)
        if wake is not None and now >= wake:
            return False, recs
    log.last_views, log._recs, log._wake = views, recs, wake
    if grown or (unknown and look.young):  # (a grown look's probe noted only while its window reads over)
        probed = {v.queue: v.max_offset for v in views if LogRepo.pq(log.name, v.queue) in starts}
        rows = array("q", look.rows)
        for i in range(0, len(rows), 4):
            if grown and only is None:
                rows[i + 3] = probed.get(rows[i], -1)
            elif rows[i] in unknown:  # a young look still probes it at each use; a grown one trusts it
                rows[i + 3] = probed[rows[i]]
        if grown:
            look = replace(look, at=now, young=False, wake=wake)
        LogRepo.note_look(_look_key(log, allowed), replace(look, rows=rows))
    return True, recs


def _must_probe(log: "TopicLog", now: int) -> bool:
    """Whether a full round of ``log`` (a :class:`TopicLog` waiting on its change marker) probes
    its lagging queues' chains (:meth:`TopicLog.probe`): the topic was bumped recently, or the
    container's safety net is due (its first pull of a (log, owner, queues), then every
    :data:`PROBE_NET_MS`)."""
    key = _probe_key(log)
    recent = active(log.change, now, log.name)
    net = _net_due(log, now)
    if recent or net:
        keep(_PROBED, key, now, PROBED_KEPT)
    return recent or net


def active(change, now: int, name: str | None = None) -> bool:
    """Whether a topic whose marker reads ``change`` was bumped less than :data:`ACTIVE_MS` before
    ``now``: its recent appends may not be on the queue items yet (a full round probes the chains),
    and more may follow (a waiting round reads the marker every :data:`WAIT_ROUND_ACTIVE_MS`).
    ``name``: the log's, when known (the bump's time as :func:`_bumped_by` bounds it)."""
    return change is not None and now < (change.at if name is None else _bumped_by(name, change)) + ACTIVE_MS


def wait_round_ms(change, now: int, name: str | None = None) -> int:
    """The time between a long poll's waiting rounds at ``now`` on a topic whose marker reads
    ``change``: :data:`WAIT_ROUND_ACTIVE_MS` while it is :func:`active`, else :data:`WAIT_ROUND_MS`."""
    return WAIT_ROUND_ACTIVE_MS if active(change, now, name) else WAIT_ROUND_MS


def _bumped_by(name: str, change) -> int:
    """The latest time the bumps marker ``change`` of log ``name`` stands for can have been made, on
    this container's clock: the marker's ``at``, or when this container first read that version
    (:func:`_seen_since`) if earlier — every bump the version counts landed before that read. A
    bump from a clock far ahead leaves ``at`` in the future, and ``at`` never goes back
    (:meth:`LogRepo.bump_change`): read alone, it kept every look off and every round probing until
    the other clocks caught up (review_d)."""
    seen = _SEEN.get(name)
    if seen is not None and seen[0] == change and seen[1] < change.at:
        return seen[1]
    return change.at


def forget_probes() -> None:
    """Drop when this container last probed each log, and first read each marker version (tests:
    a fresh store)."""
    _PROBED.clear()
    _SEEN.clear()


def _seen_at(name: str, change, now: int) -> int:
    """:func:`_seen_since` without noting (``now`` when this container has not read that version)."""
    got = _SEEN.get(name)
    return got[1] if got is not None and got[0] == change else now


def _seen_since(name: str, change, now: int) -> int:
    """When this container first read version ``change`` of log ``name``'s marker (``now``, noted,
    when this is the first or it moved since)."""
    got = _SEEN.get(name)
    if got is not None and got[0] == change:
        return got[1]
    keep(_SEEN, name, (change, now), SEEN_KEPT)
    return now


class ListLog(Log):
    """A subscription's message list ``~<id>`` (one queue): receipts name ``field``, no tag filter,
    nothing delayed; its head is exact (every append to a list is a transaction that moves it), so
    nothing is probed."""

    def __init__(self, name: str, owner: str, meta: dict, field: str):
        super().__init__(name, owner, meta, 1)
        self.field = field

    def probe(self, views: list[QueueView], now: int, allowed: set[int] | None) -> list[QueueView]:
        return views

    def queue_field(self, queue: int) -> str:
        return self.field

    def reader(self, tags: list[str] | None) -> LogReader:
        return list_reader(self.name)


def _sleep_ms(ms: int, wake_at: int | None) -> int:
    """The long poll's sleep: no longer than until ``wake_at`` (the earliest delayed message the
    last poll saw ahead), so a long-polling consumer is served it as soon as it is due."""
    return ms if wake_at is None else min(ms, max(wake_at - clock.now(), 0) + 5)


def read_log(log: str, queue: int, start: int, limit: int, max_offset: int, shape: Callable[[dict, int], None],
             tags: list[str] | None = None, scan: int | None = None, first=None) -> tuple[list[dict], int]:
    """Read log (``log``, ``queue``) from ``start``: up to ``limit`` deliverable messages among at
    most ``scan`` offsets (default ``limit``), contiguous offsets only (stop at a gap: never deliver
    n+1 before n), and no more than fit one Lambda response (:class:`lakeq.common.payload.ByteBudget`;
    always at least one). ``shape(message, offset)`` fills in the delivered fields in place.
    Returns (messages, next_offset): ``next_offset`` is after the last offset examined (skipped
    ones included); when the byte budget cuts the batch, right after the last message returned,
    so the lock covers exactly what the response carries. ``next_offset == start``: nothing yet.
    A message whose body is in the lake bucket (a ``claim``, :mod:`lakeq.log.claims`) is fetched
    (one GetObject, size and digest checked) when it is read, before the byte budget measures it;
    small messages cost no S3 call. ``first``: the segment at ``start`` when the caller has it
    (:meth:`lakeq.store.queue_log.LogRepo.read`)."""
    budget = min(scan or limit, max_offset - start)
    size = ByteBudget()
    out: list[dict] = []
    nxt = after = start
    for s in LogRepo.read(log, queue, start, budget, first=first):
        if s.base > nxt:
            break
        for off, msg in seg.read(s, nxt, budget - (nxt - start), tags):
            if msg is not None:
                msg["_log_offset"] = off  # the message's offset in this log (a list entry's "offset" is its source's)
                msg["_seg_end"] = int(s.end)  # (a lock records the last one: OffsetModel.bnd)
                shape(msg, off)
                if msg.get("claim") is not None:  # a body in the lake bucket (issue 18.2): one GetObject,
                    msg["body"] = BodyStore.get(msg["claim"])  # checked; "claim" stays for copies of it
                if not size.take(message_out(msg)):
                    return out, after
                out.append(msg)
                after = off + 1
            nxt = off + 1
            if msg is not None and len(out) >= limit:
                return out, nxt
        if nxt - start >= budget:
            break
    return out, nxt


class BoundReader:
    """One log's reader: ``reader(queue, start, limit, max_offset) -> (messages, next offset)`` (a
    :data:`LogReader`), and :meth:`min_offset`, where that log's retained offsets begin (the
    dead-letter path asks it about a message it cannot read, :func:`lakeq.consume.settle.flush_due`)."""

    __slots__ = ("_log", "_read", "_queue")

    def __init__(self, log: str, read: LogReader, queue: int | None = None):
        self._log, self._read, self._queue = log, read, queue  # queue: a list's one queue (0)

    def __call__(self, queue: int, start: int, limit: int, max_offset: int) -> tuple[list[dict], int]:
        return self._read(queue, start, limit, max_offset)

    def min_offset(self, queue: int) -> int | None:
        """One consistent GetItem of the queue item (:func:`min_offset`)."""
        return min_offset(self._log, queue if self._queue is None else self._queue)


def topic_reader(log: str, tags: list[str] | None, first: dict | None = None) -> BoundReader:
    """A topic's queues (``log``: its log name, lakeq.common.names.log_name), filtered by ``tags`` (any
    of; skipped messages count as read). Messages name the topic itself. ``first``: queue -> a
    segment already read (:meth:`Log.probe`'s), used once by the next read of that queue when it
    starts there."""
    topic = topic_of_log(log)

    def read(queue: int, start: int, limit: int, max_offset: int) -> tuple[list[dict], int]:
        def shape_q(msg: dict, off: int) -> None:
            msg["topic"], msg["queue"] = topic, queue
        scan = limit if not tags else max(1000, limit * SCAN_FACTOR)
        return read_log(log, queue, start, limit, max_offset, shape_q, tags, scan,
                        first=first.pop(queue, None) if first else None)
    return BoundReader(log, read)


def list_reader(log: str) -> BoundReader:
    """A subscription's message list ``~<id>`` (queue 0): each entry keeps its source ``topic``,
    ``queue`` and ``offset`` (= the source offset)."""
    def shape(msg: dict, _off: int) -> None:
        msg["offset"] = msg.pop("source_offset")

    def read(queue: int, start: int, limit: int, max_offset: int) -> tuple[list[dict], int]:
        return read_log(log, 0, start, limit, max_offset, shape)
    return BoundReader(log, read, queue=0)


def min_offset(log: str, queue: int) -> int | None:
    """The log's ``min_offset`` (consistent GetItem of its queue item): offsets below it are gone.
    None when the queue item is gone too (the log was deleted: every offset is)."""
    m = LogRepo.queue(log, queue, exact=False)
    return None if m is None else int(m.min_offset)


def _runs(offsets: Iterable[int]) -> list[list[int]]:
    """Runs of consecutive offsets.

    >>> _runs([1, 2, 3, 7, 9, 10])
    [[1, 2, 3], [7], [9, 10]]
    """
    out: list[list[int]] = []
    for o in offsets:
        if out and out[-1][-1] + 1 == o:
            out[-1].append(o)
        else:
            out.append([o])
    return out


def redeliver(reader: LogReader, queue: int, offsets: Iterable[int], budget: ByteBudget) -> tuple[list[dict], bool]:
    """The pending ``offsets`` (ascending) read again: one read per run of consecutive offsets
    (usually one: a batch). A message the pull's tag filter skips is not served (it stays pending).
    Returns (messages in offset order, whether every offset was read: False when the byte budget
    ran out)."""
    out: list[dict] = []
    for run in _runs(offsets):
        msgs, _ = reader(queue, run[0], len(run), run[-1] + 1)
        for m in msgs:
            if not budget.take(message_out(m)):
                return out, False
            out.append(m)
    return out, True


def _answer(log: Log, queue: int, new: settlement.State, batch: list[dict]) -> dict:
    """A pull's answer: ``batch`` as locked by ``new`` (its deliveries from the state)."""
    for m in batch:
        m["deliveries"] = new.pend[m["_log_offset"]]
    receipt = Receipt(broker(), log.queue_field(queue), new.lock_from, new.lock_next, new.lock_ts)
    return {"messages": [message_out(m) for m in batch], "receipt": str(receipt)}


def fold(log: Log, receipt: Receipt, queue: int, ack_alone: Callable[[], object], visibility_ms: int,
         req: v.PullRequest, max_deliveries: int | None = None) -> dict | None:
    """A pull's piggybacked ack (``ack=``, a whole-batch ack of ``receipt``, a lock of ``queue`` of
    this very log) folded into the pull's lock of the same queue: one conditional UpdateItem that
    commits the receipt's batch and locks the next one, instead of an ack write, the reads of every
    queue item and record, and a lock write.

    Reads: the record (as this container's lock write left it, :meth:`OffsetRepo.known`, else an
    eventually consistent GetItem, :meth:`OffsetRepo.peek`: a stale answer — a
    record older than the receipt's lock, or than a write since — fails the settle below or the
    write's condition, and the ack is then settled on its own from a consistent read, as when the
    record moved; issue 33 item 2) and the segments from its frontier (the Query every
    read makes), not the queue item: the segment chain itself tells what follows the frontier (a
    segment exists only once its conditional put succeeded; reading at or past a lagging
    ``max_offset`` finds exactly the messages the log holds), and a frontier below ``min_offset``
    (retention) meets a gap and reads nothing. The ack is applied to the record's state in memory
    (:func:`lakeq.log.settlement.settle`, as ``POST /v1/acks`` would); when it leaves nothing
    unsettled, the record's run of folded locks may go on (:func:`lakeq.log.selection.may_fold`) and
    the queue has fresh messages, they are locked in one write conditioned on the record being
    exactly as read (``sv``): the receipt's lock still there, so nobody locked, settled or reset
    the queue meanwhile. The write also appends the receipt to the record's ``acks``, so a retried
    ack is still told from a stale one. Otherwise the ack is written alone (one conditional
    UpdateItem) and the pull goes on as usual (None). Delayed messages are not promoted by a folded
    pull (it reads no queue item): the pulls that rank the queues, at least every
    :data:`lakeq.log.selection.FOLD_RUN` + 1 locks of a queue, and the scheduled sweep do it.

    Whenever the receipt is not the record's lock, or the record moved between the read and the
    write, ``ack_alone()`` settles it as ``POST /v1/acks`` does: it raises its error (409
    ``stale_receipt``, the pull serves nothing, as API.md says) or answers a remembered retry, and
    the pull goes on as usual (None). Nothing is locked without its ack: the two are one write."""
    now = clock.now()
    rec = OffsetRepo.known(log.owner, queue, now) or OffsetRepo.peek(log.owner, queue)
    if rec is None:
        ack_alone()
        return None
    view = OffsetRepo.view_of(rec)
    try:
        out = settlement.settle(view.state(), receipt.timestamp, receipt.offset, receipt.next_offset)
    except (settlement.Stale, settlement.NotInBatch):
        ack_alone()
        return None
    key = ack_key(receipt.offset, receipt.next_offset, receipt.timestamp)
    drained = None
    if not out.changed:  # a retry of an ack already written: nothing to write; an ack that found
        if remembered(view.acks, key) is None:  # nothing left to settle is remembered as POST /v1/acks
            ack_alone()                         # remembers it (its retry after a relock: 200)
        return None
    acked = out.state
    key = ack_entry(key, acked.committed)
    settled = acked.lock_next is None and not acked.pend and not acked.due
    if settled and may_fold(view.run):
        if rec.bnd is not None:  # the end of the newest segment the lock read: a segment boundary
            LogRepo.note_end(log.name, queue, int(rec.bnd))
        # max_deliveries 1: every batch one message (lakeq.log.settlement.plan; found by the queue model)
        limit = 1 if max_deliveries == 1 else req.max
        fresh, frontier = log.reader(None)(queue, acked.frontier, limit, acked.frontier + limit)
        if fresh:
            new = settlement.lock(acked, next_lock_ts(now, acked.lock_ts), now + visibility_ms, [],
                                  [m["_log_offset"] for m in fresh], frontier)
            if OffsetRepo.write_state(log.owner, view, new, log.meta, now, lock_owner=log.lock_owner,
                                      consumed=True, ack=key, run=view.run + 1, bnd=_bnd(fresh)):
                return _answer(log, queue, new, fresh)
            ack_alone()  # the record moved since it was read: settle the receipt on its own
            return None
        if rec.bnd is not None and frontier == acked.frontier == int(rec.bnd) and LEAN_EMPTIES:
            drained = frontier  # read from a segment's end (a boundary): nothing there, as this read saw
    if not OffsetRepo.write_state(log.owner, view, acked, None, now, consumed=True, ack=key):
        ack_alone()
    elif drained is not None:
        log.drained = {queue: drained}
    return None


def _ranked(log: Log, views_: list[QueueView], now: int, allowed: set[int] | None, probe: bool = True):
    """The queues a poll tries, best first (:func:`lakeq.log.selection.candidates`): those the
    ``max_offset`` hints rank first; only when none of them was locked (the caller stops at its
    first lock), the queues whose chain probe (:meth:`Log.probe`) shows more than their hint; then,
    when the hints came from the container's copy (:meth:`Log.refreshed`), those that queue items
    read now show (a delayed message promoted since), not tried yet. So a
    busy poll pays no probe, and a poll comes back empty only after the probes said every
    lockable queue is drained (read-after-write); a queue whose hint lags ranks by its hint until
    the stream's head mover ran (issue 16 item 3). Every round of a long poll probes: probing
    at most once a second was tried and measured (bench/idle.py): it halved an idle poll's probes
    but tripled a waiting consumer's produce-to-delivery p50 (247 → 785 ms), since the mover's
    1-s batching window is then what shows new messages. ``probe=False`` (the pull's ``probe=false``:
    a safety-net look, e.g. the WebSocket client's fallback pull, issue 16): the hints alone."""
    tried: dict[int, int] = {}  # queue -> the max_offset it was tried with
    for view in candidates(views_, now, allowed):
        tried[view.queue] = view.max_offset
        yield view
    if probe:
        probed = log.probe(views_, now, allowed)
        for view in candidates([p for p, v in zip(probed, views_) if p is not v], now, allowed):
            tried[view.queue] = view.max_offset
            yield view
    fresh = log.refreshed()  # ranked by a copy of the queue items, and nothing locked: by fresh ones
    if fresh is not None:  # (a queue tried already, again only when it grew since: a promotion)
        yield from (view for view in candidates(fresh, now, allowed)
                    if view.max_offset > tried.get(view.queue, -1))


def consume(log: Log, visibility_ms: int, req: v.PullRequest, allowed: set[int] | None,
            policy: Policy | None = None, folded: tuple[Receipt, int, Callable[[], object]] | None = None,
            budget: Callable[[], ByteBudget] = ByteBudget, suspects: str = "serve") -> dict:
    """The pull loop shared by topic queues and subscription lists (SPEC §1): per poll, promote
    (:meth:`Log.promote`), choose, read, lock with a conditional write, answer; long-poll until
    ``wait_ms`` passes.

    Per queue (issue 9, :mod:`lakeq.log.settlement`): pending messages (released, or whose lock
    ended) are served first, lowest offset first, then fresh ones from the frontier; with
    ``max_deliveries``, the suspects of a lock that ended unsettled one at a time (poison
    isolation, :mod:`lakeq.log.settlement`); entries due for the dead-letter path are finished
    first (:func:`lakeq.consume.settle.flush_due`). ``policy``: the consumer's dead-letter settings.
    ``folded``: (receipt, its queue, the ack on its own) of a piggybacked ack to fold into this
    pull's lock (:func:`fold`) before the first poll. ``budget()``: a new batch's byte budget (the
    SQS endpoint's receive passes what is left of its one response, in its own encoding's measure).
    ``suspects`` (the SQS endpoint's receive, which gathers several pulls into one answer, issue 30
    item 7): ``"serve"`` as above; ``"mark"`` as above, the answer telling in ``alone`` whether it
    is a suspect served alone (the receive then adds nothing to it); ``"skip"``: a queue whose next
    batch would be a suspect alone is passed over (it waits for a pull of its own), so a suspect
    never joins other messages in one answer."""
    policy = policy or Policy()
    if folded is not None:
        receipt, queue, ack_alone = folded
        out = fold(log, receipt, queue, ack_alone, visibility_ms, req, policy.max_deliveries)
        if out is not None:
            return out
    whole = log.reader(None)  # unfiltered: the dead-letter path copies any message
    reader = log.reader(req.tags)
    deadline = clock.now() + req.wait_ms
    poll = POLL_MIN_MS
    # a native pull's first round may be answered from the container's last empty look (issue 33 item 2)
    first = _keeps_looks(log)
    while True:
        now = clock.now()
        empty, recs = _still_empty(log, now, allowed) if first else (False, None)  # type: ignore[arg-type]
        first = False
        if not empty:
            again, out = _round(log, now, visibility_ms, req, allowed, policy, whole, reader, budget, suspects, recs)
            if again:
                continue  # it moved something (dead-lettered, skipped): look again at once
            if out is not None:
                return out
        remaining = deadline - clock.now()
        if remaining <= 0:
            return {"messages": [], "receipt": None}
        if getattr(log, "waits_on_change", False):  # a topic (native pull, SQS receive): wait on its change marker
            if not _wait_for_change(log, now, deadline, allowed, poll):
                return {"messages": [], "receipt": None}
        else:
            time.sleep(_sleep_ms(min(poll, remaining), log.wake_at()) / 1000)  # delayed delivery: wake when one is due
        poll = min(POLL_MAX_MS, poll * 2)


def _round(log: Log, now: int, visibility_ms: int, req: v.PullRequest, allowed: set[int] | None, policy: Policy,
           whole: BoundReader, reader: BoundReader, budget: Callable[[], ByteBudget], suspects: str,
           recs: dict | None) -> tuple[bool, dict | None]:
    """One full round of :func:`consume`'s pull loop at ``now``: promote, rank, lock. Returns
    (again, answer): the answer, or None when nothing was locked; again when it moved something
    without locking (look again at once). A native pull's round that locks nothing is kept as the
    container's empty look (:func:`_note_empty`). ``recs``: the owner's records, read already."""
    owner, meta = log.owner, log.meta
    progressed = False
    metas = log.queues()
    log.promote(metas)  # the poll's write step: due delayed messages join their queues first
    for view in _ranked(log, log.views(metas, recs), now, allowed, req.probe):
        p = settlement.plan(view.state(), now, req.max, policy.max_deliveries)
        if p.upkeep:  # dead-letter what is due first, then look again
            moved = p.state != view.state()
            if not moved or OffsetRepo.write_state(owner, view, p.state, meta, now):
                after = flush_due(owner, view.queue, policy, whole, now)
                # a due message not readable yet stays due: look again at the next poll, not now
                progressed |= moved or after is None or after.due != p.state.due
            continue
        if p.alone and suspects == "skip":  # a suspect is never answered with others
            continue
        batch_budget = budget()
        if req.tags and p.alone:  # poison isolation: the lowest suspect this filter matches, alone
            found, _ = redeliver(reader, view.queue, sorted(p.state.suspect), ByteBudget())
            if found:
                p = replace(p, redeliver=(found[0]["_log_offset"],))
            else:  # it matches none of them: a batch of the rest (the suspects wait for their pulls)
                p = settlement.plan(view.state(), now, req.max, policy.max_deliveries, isolate=False)
        offer = p.redeliver
        if req.tags and not p.alone and len(offer) < len(p.state.pend):  # the filter may skip the lowest pending
            found, _ = redeliver(reader, view.queue, sorted(p.state.pend), ByteBudget())  # ones: offer
            offer = tuple(m["_log_offset"] for m in found)[:len(offer)] or offer  # those it matches
        again, complete = redeliver(reader, view.queue, offer, batch_budget)
        if not p.alone and p.state.suspect and policy.max_deliveries is not None:
            # a filtered batch's fallback: a suspect that was not readable a moment ago is never
            # served with others (it waits for a pull of its own)
            again = [m for m in again if m["_log_offset"] not in p.state.suspect]
        frontier, fresh = p.state.frontier, []
        if p.fresh and complete and frontier < view.max_offset:
            # the hint bounds nothing: the chain past it holds exactly what was appended
            bound = max(view.max_offset, frontier + max(1000, p.fresh * SCAN_FACTOR))
            read, frontier = reader(view.queue, frontier, p.fresh, bound)
            for m in read:
                if not batch_budget.take(message_out(m)):
                    frontier = m["_log_offset"]  # the lock covers exactly what the response carries
                    break
                fresh.append(m)
        if not again and not fresh:
            if frontier > p.state.frontier:  # only skipped messages: move past them ourselves
                progressed |= OffsetRepo.write_state(owner, view, settlement.advance(p.state, frontier), meta,
                                                     now, consumed=True)
            continue
        ts = next_lock_ts(now, p.state.lock_ts)
        new = settlement.lock(p.state, ts, now + visibility_ms, [m["_log_offset"] for m in again],
                              [m["_log_offset"] for m in fresh], frontier)
        if not OffsetRepo.write_state(owner, view, new, meta, now, lock_owner=log.lock_owner, bnd=_bnd(fresh)):
            continue
        out = _answer(log, view.queue, new, again + fresh)
        if suspects == "mark":
            out["alone"] = p.alone
        return False, out
    if progressed:
        return True, None
    if _keeps_looks(log):
        _note_empty(log, now, metas, allowed)
    return False, None


def _wait_for_change(log: TopicLog, full_at: int, deadline: int, allowed: set[int] | None, poll: int) -> bool:
    """A long poll's waiting rounds on a topic after a full round at ``full_at`` found nothing to
    lock (issue 33): sleep until something may have changed, then True (the caller runs a full
    round); False when ``deadline`` passed first.

    - The full round read the marker inside its unsignalled window (a bump less than
      ``CHANGE_EVERY_MS + CHANGE_SKEW_MS`` before it: appends the bumping container did not signal
      may follow): sleep ``poll`` (the 50 ms doubling to 500 ms rounds) and run a full round again.
    - The SQS endpoint's receive (``hints_max_age_s > 0``) saw a queue locked by another receiver: the
      same (a lock ended early — DeleteMessage, ChangeMessageVisibility to 0 — bumps no marker).
    - Otherwise every ``WAIT_ROUND_MS``, or ``WAIT_ROUND_ACTIVE_MS`` while the topic is active
      (:func:`wait_round_ms`; sooner when a delayed message is due or a lock ends):
      a delayed message due (:meth:`Log.wake_at`) or a queue lockable now that was not at the full
      round (a lock that ended: :func:`lakeq.log.selection.candidates` on the same views) → True;
      else one strongly consistent GetItem of the marker (:meth:`LogRepo.change`): moved → True.
    Every append to a topic's queue bumps the marker after its write (at most once a second per
    container, :meth:`LogRepo.bump_change`), so a round that finds it unchanged and outside its
    window has no message to look for that the full round did not see."""
    wake = log.wake_at()
    views = log.last_views
    tried = {v.queue for v in candidates(views, full_at, allowed)}
    while True:
        now = clock.now()
        remaining = deadline - now
        if remaining <= 0:
            return False
        if not log.settled_since(full_at) or (log.hints_max_age_s > 0 and any(v.lock_until > now for v in views)):
            # ... and the SQS endpoint's receive while another receiver holds a lock it saw (review 33):
            # a DeleteMessage with more behind it or a ChangeMessageVisibility to 0 ends it early with
            # no append to bump the marker, and SQS answers a waiting receive once a message is visible
            time.sleep(_sleep_ms(min(poll, remaining), wake) / 1000)
            return clock.now() < deadline
        step = min(wait_round_ms(log.change, now, log.name), remaining)
        ends = [v.lock_until for v in views if v.lock_until > now]
        for at in ([wake] if wake is not None else []) + ([min(ends)] if ends else []):
            step = min(step, max(at - now, 0) + 5)
        time.sleep(step / 1000)
        now = clock.now()
        if now >= deadline:
            return False
        if wake is not None and now >= wake:
            return True
        if any(v.queue not in tried for v in candidates(views, now, allowed)):
            return True
        if log.hints_max_age_s <= 0 and deadline - now <= wait_round_ms(log.change, now, log.name):
            # the native poll's last round: the topic item too, for the next poll
            change = LogRepo.change_and_topic(log.name, topic_of_log(log.name))
        else:
            change = LogRepo.change(log.name)
        if change != log.change:
            log.moved = True
            return True
