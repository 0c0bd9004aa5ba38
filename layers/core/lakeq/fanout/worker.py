"""Fan-out (SPEC §3 delivery): new topic segments from SegmentsTable's stream → subscription lists.

Per Lambda batch (records in order per shard; one source queue's records are always in one shard):

1. :meth:`Matcher.refresh` reads the subscriptions' version item (one consistent GetItem) and,
   when it moved, re-reads the subscriptions changed since the container's version (the item keeps
   the last ``CHANGES_KEPT`` changes, each written in the transaction that bumped the version) with
   a consistent BatchGetItem and updates the cached :class:`~matcher.SubscriptionIndex` (and their
   parked source queues) in place; when a change in between is not kept (too far behind) it
   rebuilds everything from a consistent Scan. A subscription whose create returned before a
   message was produced is therefore always in the index when that message's record is handled.
   If this fails the invocation raises: a function error, retried by the event source mapping.
2. Every ``INSERT`` of a topic segment (``pq`` not starting with ``~``: list segments never fan out
   again) is decoded; each message is matched, and kept for a subscription when its offset is at
   or past its queue's head recorded at the subscription's creation (no clocks compared:
   :class:`lakeq.store.subscriptions.Start`). A record that cannot be decoded or matched
   is a *poison record*: the records before it are fanned out and it (with the rest of the batch,
   to keep the shard's order) is reported in ``batchItemFailures``; when it is first in a batch
   of several the invocation raises instead, so ``BisectBatchOnFunctionError`` isolates it without
   spending retries. Alone, it fails ``MaximumRetryAttempts`` times and its metadata goes to the
   mapping's on-failure queue (template.yaml ``StreamFailureQueue``); the shard moves on.
3. Per subscription, the kept messages are appended to its list in record order with
   :meth:`LogRepo.append`: one transaction = list queue item head move + list segment(s) + one
   dedup item per *source segment* (``<topic>@<queue>:<base>`` under topic ``~<id>``). A
   redelivered record finds its dedup item, that source segment is dropped and the rest retried:
   nothing is added twice, and a source segment's matches land atomically.
4. **Parking** (one failing subscription must not block the others). When appending to a
   subscription fails (after the SDK's and our own retries: throttling of its list's partition,
   an item it cannot take…), the subscription is *parked* for each source queue still to deliver:
   ``parked`` on its item (JSON ``{"<topic>#<queue>": {"from": <first source segment base not
   delivered>, "seq": <its stream sequence number>, "reason", "since", "at", "attempts"}}``),
   written with the version bump in one transaction (:class:`ParkRepo`), *before* the batch is
   acknowledged. The other subscriptions get their messages and the batch succeeds. While
   parked for a source queue, that queue's messages are not appended directly (that would
   break the list's order): every later batch holding a record of that queue *catches up* —
   reads the source segments from ``from`` to the batch's newest one (consistent Query of
   SegmentsTable), appends the subscription's matches in order (idempotent by the dedup items),
   and on success un-parks (conditional on the entry being unchanged). A failed catch-up bumps
   ``attempts``; a scheduled sweep (:func:`redeliver_parked`, every 5 minutes) does the same up
   to the queue's head, for source queues that went quiet. ``GET /v1/subscriptions`` shows
   ``parked``. Invariant: every source segment of
   an acknowledged record that matches a subscription is in its list, or at or after the
   ``from`` of a park entry of its source queue. If the park write itself fails, the record is
   reported failed (Lambda retries it; nothing is acknowledged undelivered and unparked).
   Limit: catching up needs the source segments, kept until their TTL (``expires_at``) if any.
5. A failure is reported as ``batchItemFailures``: the earliest record whose work is not done
   and every later record of the batch; Lambda retries from there and the dedup items make the
   repeat harmless.

A crash after any store call leaves either appended groups (their dedup items commit with the
head move, so the redelivered batch skips them), or a park entry (the redelivered batch catches
up from it), never a message acknowledged but neither delivered nor parked: the stream redelivers
the batch, as Lambda does after a crashed invocation (tests/integration/test_crash_fanout.py).
"""
from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field

from lakeq.common import backoff
from lakeq.common.errors import LakeqError
from lakeq.common.names import ancestors, split_queue_key, topic_of_log
from lakeq.log import segments as seg
from lakeq.log.fanout_plan import (  # noqa: F401
    CHUNK_BYTES,
    CHUNK_GROUPS,
    Group,
    ListMessage,
    Plan,
    _chunk,
    _source_base,
    _source_pq,
    decode_record,
    group_messages,
    parked_view,
    parse_parked,
    plan,
)
from lakeq.log.produce_plan import Append
from lakeq.store.append import Contended, append_at_head
from lakeq.store.queue_log import LogRepo
from lakeq.store.subscriptions import (
    ParkRepo,
    Start,
    SubscriptionRepo,
    list_topic,
)
from matcher.index import SubscriptionIndex

log = logging.getLogger("lakeq.fanout.worker")

# compare-and-set rounds (lakeq.common.backoff.cas) on a subscription's park entries before giving up; not
# CAS_ATTEMPTS: a give-up raises into the stream's retry of the whole batch (an outer retry with its own
# backoff), so the shorter bound (kept from before the shared loop) ends a stuck batch sooner
PARK_ATTEMPTS = 20
CATCH_UP_ROUNDS = 3  # catch-up + un-park rounds per parked source queue and batch
# bytes of subscription starts not parsed yet that a log's first match after a rebuild parses to
# bound every start on it (Matcher._bound): STARTS_BUDGET, or STARTS_PER_SUB a covering subscription
# when more (one start on a 64-queue topic: ~520 B; 10k subscriptions of an 8-queue topic ~740 KB)
STARTS_BUDGET = 2_000_000
STARTS_PER_SUB = 1024
# ... and walks them only when they are at most WALK_PER_MATCH x the ids its first match returned
# + WALK_MIN (~0.35-0.45 µs a subscription: 10k covering ones were ~4 ms per child log seen after
# each rebuild, for one matched id); else the bound is folded from the matched ids
WALK_PER_MATCH = 16
WALK_MIN = 256


class Matcher:
    """The per-container index cache: updated when the subscriptions' version moves (every create,
    delete, park and un-park bumps it and logs the subscription's id): in place from the changed
    subscriptions when every change since its version is kept, else rebuilt from a Scan."""

    def __init__(self) -> None:
        self.version: int | None = None
        self.index = SubscriptionIndex()
        self.created: dict[str, Start] = {}  # sub id -> where it starts
        self.parked: dict[str, dict[str, dict]] = {}  # sub id -> {"<topic>#<queue>": entry}
        self.rebuild_ms = 0.0
        # topic -> the ids subscribed to it (a dict as an ordered set: O(1) removal in apply)
        self._by_topic: dict[str, dict[str, None]] = {}
        # source log -> [per queue the highest head recorded on it by the subscriptions counted,
        # the ids counted (None: every subscription that can match the log), the ones among them
        # under the rule before starts (produced_at), per id counted its start heads on that log
        # ([] when none: every message; None: the rule before starts)]: see match and _bound;
        # forgotten by a rebuild
        self._bounds: dict[str, list] = {}
        self._topic: dict[str, str] = {}  # sub id -> its topic (for _by_topic on a removal)
        self.rebuilds = 0  # full rebuilds (Scans) and in-place updates done by refresh
        self.updates = 0

    def refresh(self) -> bool:
        cur = SubscriptionRepo.changes()
        ver = cur.version
        if ver == self.version:
            return False
        t0 = time.perf_counter()
        ids = cur.since(self.version) if self.version is not None else None
        if ids is not None:
            # read after the version: each at least as new as the change logged (a later change
            # read too is read again with its own entry next time: apply is idempotent)
            self.apply(ids, SubscriptionRepo.some(ids))
            self.updates += 1
            what = f"{len(ids)} changed subscription(s) updated"
        else:
            self.load(SubscriptionRepo.all())
            self.rebuilds += 1
            what = "index rebuilt"
        self.version = ver  # read before the reads: a change during them is applied again next time
        self.rebuild_ms = (time.perf_counter() - t0) * 1000
        log.info("subscriptions: %s: version %s, %d subscriptions, %.1f ms",
                 what, ver, len(self.index), self.rebuild_ms)
        return True

    def apply(self, ids, subs) -> None:
        """Update the index in place: every id of ``ids`` as it is in ``subs`` (the ones read;
        an id not among them is deleted). Ends in the state :meth:`load` of every subscription
        would (tests/unit/test_fanout_apply.py), ``_bounds`` kept valid."""
        found = {s.id: s for s in subs}
        for sid in ids:
            if sid in self.created:
                self._drop(sid)
            s = found.get(sid)
            if s is not None:
                self._put(s)

    def _drop(self, sid: str) -> None:
        self.index.remove(sid)
        del self.created[sid]
        self.parked.pop(sid, None)
        topic = self._topic.pop(sid)
        ids = self._by_topic.get(topic)
        if ids is not None:
            del ids[sid]
            if not ids:
                del self._by_topic[topic]
        for _hi, seen, legacy, heads in self._bounds.values():
            # (a bound raised by it stays: higher than needed only sends messages to the per-id test)
            if seen is not None:
                seen.discard(sid)
            legacy.discard(sid)
            heads.pop(sid, None)

    def _put(self, s) -> None:
        try:
            self.index.add(s.id, s.topic, json.loads(s.conditions or "[]"), list(s.tags or []))
        except (ValueError, TypeError):
            log.exception("subscription %s not indexable; skipped", s.id)
            return
        start = self.created[s.id] = Start.of(s)
        self._topic[s.id] = s.topic
        self._by_topic.setdefault(s.topic, {})[s.id] = None
        entries = parse_parked(getattr(s, "parked", None))
        if entries:
            self.parked[s.id] = entries
        for source, (hi, seen, legacy, _heads) in self._bounds.items():
            if seen is not None or s.topic not in ancestors(topic_of_log(source)):
                continue  # folding entries take it in when a match returns it
            h = start.heads
            if h is None:
                legacy.add(s.id)
            else:
                _raise_to(hi, h.get(source) or ())

    def load(self, subs) -> None:
        """Rebuild from every subscription (``subs``): each taken in as :meth:`apply` takes one, into
        fresh state swapped in at the end (a failure half-way leaves the index as it was), the level
        order learned from traffic kept; ``_bounds`` forgotten."""
        fresh = Matcher()
        fresh.index.adopt(self.index)  # keep the level order learned from traffic across rebuilds
        for s in subs:
            fresh._put(s)  # (no bound yet: only the index and the per-id maps)
        self.index, self.created, self.parked = fresh.index, fresh.created, fresh.parked
        self._by_topic, self._bounds, self._topic = fresh._by_topic, {}, fresh._topic

    def match(self, source: str, msg: dict, queue: int = 0) -> list[str]:
        """The subscriptions that keep ``msg`` of queue ``queue`` of ``source`` (a topic's log name:
        subscriptions match its topic name; their starts are per log)."""
        created = self.created
        ids = self.index.match(topic_of_log(source), msg.get("properties") or {}, msg.get("tags") or ())
        off = msg.get("offset")
        if not ids or off is None:
            return [sid for sid in ids if created[sid].delivers(source, queue, msg)]
        # past every start on this queue (the common case: a subscription's start only filters the
        # messages produced before it was created): every id delivers, no work per id (this
        # filter was half the plan's matching at ~900 matches a message). The bound: see _bound;
        # past its budget, the ids matched on the log so far (one C-level superset test a message,
        # the ids not seen yet folded in once per log and rebuild)
        b = self._bounds.get(source)
        if b is None:
            b = self._bounds[source] = self._bound(source, len(ids))
        hi, seen, legacy, heads = b
        if seen is not None and not seen.issuperset(ids):
            for sid in ids:
                if sid not in seen:
                    seen.add(sid)
                    h = created[sid].heads
                    if h is None:
                        heads[sid] = None
                        legacy.add(sid)
                        continue
                    hs = heads[sid] = h.get(source) or []
                    _raise_to(hi, hs)
        if (queue >= len(hi) or off >= hi[queue]) and (not legacy or legacy.isdisjoint(ids)):
            return ids
        # Start.delivers per id, its heads on this log looked up once per subscription and log
        # (a method call, a property and two look-ups per matched id were ~45 % of the match);
        # kept for the ids matched only (not every covering one: a log's entry stays O(matches))
        if seen is None:
            for sid in [sid for sid in ids if sid not in heads]:
                h = created[sid].heads
                heads[sid] = None if h is None else h.get(source) or []
        get = heads.get
        return [sid for sid in ids
                if ((hs := get(sid)) is not None and (queue >= len(hs) or off >= hs[queue]))
                or (hs is None and created[sid].delivers(source, queue, msg))]

    def _bound(self, source: str, matched: int) -> list:
        """``source``'s entry of ``_bounds`` (a log name): per queue the highest head any
        subscription that can match its messages (its topic is the log's topic or an ancestor:
        the index's rule) recorded on it, ``None`` for the ids counted (all of them), those under
        the rule before starts, and (filled by ``match``) the matched ones' heads on the log:
        O(subscriptions on the topic and its ancestors), once per source log and rebuild (17-21
        ms at 10k, docs/benchmarks.md); what it keeps is O(queues + legacy ids), not per id.
        Unless their starts not parsed yet exceed ``STARTS_BUDGET`` bytes (or ``STARTS_PER_SUB`` a
        subscription, when more: the parse stays O(the subscriptions walked)): a tenant's
        subscriptions that never match can carry MAX_STARTS_BYTES each (one head list per
        descendant log), and parsing them all cost 1-2 s CPU per 100 of ~249 KB and rebuild
        (matched or not); nor when they are over ``WALK_PER_MATCH`` x ``matched`` (the ids of the
        first match) + ``WALK_MIN``: a walk per child log and rebuild for a few matched ids. Then
        the entry starts empty and ``match`` folds in the ids it returns."""
        names = ancestors(topic_of_log(source))
        created, by_topic = self.created, self._by_topic
        if sum(len(by_topic.get(name, ())) for name in names) > WALK_PER_MATCH * matched + WALK_MIN:
            return [[], set(), set(), {}]
        covering = [sid for name in names for sid in by_topic.get(name, ())]
        if sum(created[sid].unparsed for sid in covering) > max(STARTS_BUDGET, STARTS_PER_SUB * len(covering)):
            return [[], set(), set(), {}]
        hi: list[int] = []
        legacy: set = set()
        for sid in covering:
            h = created[sid].heads
            if h is None:
                legacy.add(sid)
                continue
            _raise_to(hi, h.get(source) or ())
        return [hi, None, legacy, {}]  # heads: those of the ids matched below the bound (match)


def _raise_to(hi: list[int], heads) -> None:
    """``hi`` := the per-queue maximum of ``hi`` and ``heads`` (a subscription's start heads on a
    log), grown to ``heads``' length.

    >>> hi = [3, 0]; _raise_to(hi, [1, 5, 2]); hi
    [3, 5, 2]
    """
    if len(heads) > len(hi):
        hi.extend([0] * (len(heads) - len(hi)))
    for q, x in enumerate(heads):
        if x > hi[q]:
            hi[q] = x


matcher = Matcher()


def change_parked(sub_id: str, fn) -> dict[str, dict] | None:
    """Apply ``fn(entries) -> entries`` until it sticks. Returns the entries written (or
    unchanged), None when the subscription does not exist."""
    def attempt(_n: int):
        exists, raw = ParkRepo.read(sub_id)
        if not exists:
            return None
        cur = parse_parked(raw)
        new = fn({k: dict(v) for k, v in cur.items()})
        if new == cur:
            return cur
        if ParkRepo.write(sub_id, raw, json.dumps(new, sort_keys=True, separators=(",", ":")) if new else None):
            return new
        return backoff.RETRY
    return backoff.cas(attempt, PARK_ATTEMPTS, lambda: _park_contended(sub_id))


def _park_contended(sub_id: str):
    raise RuntimeError(f"could not update the park entries of subscription {sub_id}")


class AppendFailed(LakeqError):
    """Appending stopped: ``remaining`` groups (in order) are not in the list."""

    def __init__(self, remaining: list[Group], cause: BaseException):
        super().__init__(f"{len(remaining)} group(s) not appended: {type(cause).__name__}: {cause}")
        self.remaining = remaining
        self.cause = cause


def append_groups(sub_id: str, groups: list[Group], now: int) -> int:
    """Append ``groups`` to the subscription's list in order, idempotently (each group's key is
    its dedup key), with :func:`lakeq.store.append.append_at_head`. Returns the messages actually
    added (0 for groups already there, or when the subscription was deleted). Raises
    :class:`AppendFailed` with the groups not known to be in the list."""
    lt = list_topic(sub_id)
    added = 0
    left = groups

    def plan(items: list[Group], base: int) -> tuple[Append, int]:
        chunk = _chunk(items)
        segments = []
        offset = base
        for run in seg.split([x for g in chunk for x in g.messages]):
            segments.append(seg.encode(run, offset))
            offset += len(run)
        dedup = []
        offset = base
        for g in chunk:
            dedup.append((g.key, offset))
            offset += len(g.messages)
        return Append(segments, dedup), len(chunk)

    def written(done: list[Group], _part: Append) -> None:
        nonlocal added, left
        added += sum(len(g.messages) for g in done)
        left = left[len(done):]

    def recorded(items: list[Group], keys: list[str]) -> list[Group]:
        nonlocal left
        dup = set(keys)
        left = [g for g in items if g.key not in dup]
        return left

    try:
        if not append_at_head(lt, 0, groups, now, plan, written, recorded):
            return added  # unsubscribed: the list is gone
    except Contended as e:
        raise AppendFailed(e.remaining, e.cause) from e.cause
    except Exception as e:  # noqa: BLE001 - throttled, too large…: the caller parks
        raise AppendFailed(left, e) from e
    if added and LogRepo.queue(lt, 0, exact=False) is None:
        # Unsubscribed while we appended: the delete's purge may have run before our put. Purge
        # again; any put that came later than this read saw no head and wrote nothing.
        SubscriptionRepo.purge_list(sub_id)
        return 0
    return added


@dataclass
class Outcome:
    """What one invocation did (for the handler's response, logs and metrics)."""

    failed_at: int | None = None  # earliest record index not done (reported with all after it)
    added: int = 0
    parked: list[tuple[str, str]] = field(default_factory=list)  # (sub id, "<topic>#<queue>")
    unparked: list[tuple[str, str]] = field(default_factory=list)
    poison: int | None = None

    def fail(self, i: int) -> None:
        self.failed_at = i if self.failed_at is None else min(self.failed_at, i)


class PoisonBatch(LakeqError):
    """The first record of a batch of several cannot be fanned out: fail the invocation so that
    ``BisectBatchOnFunctionError`` splits the batch (free) until the record is alone."""


def _reason(e: BaseException) -> str:
    """What went wrong, for the park entry and the logs (the store's error code when there is one)."""
    cause = getattr(e, "cause", None) or e
    code = getattr(cause, "cause_response_code", None)  # pynamodb wraps the botocore error
    if code:
        return f"{code}: {getattr(cause, 'cause_response_message', None) or cause}"[:500]
    return f"{type(cause).__name__}: {cause}"[:500]


def park(sub_id: str, remaining: list[Group], seqs: list[str], reason: str, now: int) -> list[str]:
    """Record ``sub_id`` as parked for every source queue of ``remaining`` from its first group
    there (keeping an earlier ``from``). Returns the source queues parked. Raises when it cannot
    be written (the caller then fails those records)."""
    firsts: dict[str, Group] = {}
    for g in remaining:
        pq = _source_pq(g.key)
        firsts.setdefault(pq, g)

    def merge(entries: dict[str, dict]) -> dict[str, dict]:
        for pq, g in firsts.items():
            base = _source_base(g.key)
            e = entries.get(pq)
            if e is None:
                entries[pq] = {"from": base, "seq": seqs[g.record], "reason": reason, "since": now,
                               "at": now, "attempts": 1}
            else:
                if base < int(e["from"]):
                    e["from"], e["seq"] = base, seqs[g.record]
                e.update(reason=reason, at=now, attempts=int(e.get("attempts", 0)) + 1)
        return entries

    if change_parked(sub_id, merge) is not None:
        log.error("subscription %s parked for %s: %s", sub_id, sorted(firsts), reason)
    return sorted(firsts)


def catch_up(sub_id: str, pq: str, upto: int, m: Matcher, now: int) -> int:
    """Append the subscription's matches of source queue ``pq`` from its park entry's ``from`` to
    the source segment at base ``upto``, then un-park it (if the entry did not change meanwhile).
    Returns the messages added. Raises :class:`AppendFailed` (or a store error) on failure."""
    topic, q = split_queue_key(pq)
    added = 0
    for _ in range(CATCH_UP_ROUNDS):
        exists, raw = ParkRepo.read(sub_id)
        entry = parse_parked(raw).get(pq) if exists else None
        if entry is None:
            return added  # deleted, or un-parked by someone else
        start = int(entry["from"])
        groups: list[Group] = []
        if start <= upto:
            for s in LogRepo.segments_between(topic, int(q), start, upto):
                g = group_messages(topic, int(q), s, m, 0, only=sub_id).get(sub_id)
                if g is not None:
                    groups.append(g)
        added += append_groups(sub_id, groups, now)

        def drop(entries: dict[str, dict], seen=entry) -> dict[str, dict]:
            if entries.get(pq) == seen:
                del entries[pq]
            return entries
        left = change_parked(sub_id, drop)
        if left is None or pq not in left:
            log.warning("subscription %s un-parked for %s (%d message(s) caught up)", sub_id, pq, added)
            return added
        # the entry changed meanwhile (an earlier ``from``): catch up again from there
    raise RuntimeError(f"subscription {sub_id} still parked for {pq} after {CATCH_UP_ROUNDS} rounds")


def handle_batch(event: dict, now: int, m: Matcher | None = None) -> Outcome:
    """The handler's logic. Raises (a function error) when the subscriptions cannot be read or the
    first of several records is poison; otherwise says which records failed."""
    m = m or matcher
    records = event.get("Records") or []
    out = Outcome()
    if not records:
        return out
    seqs = [str((r.get("dynamodb") or {}).get("SequenceNumber", "")) for r in records]
    m.refresh()
    p = plan(records, m)
    if p.poison is not None:
        out.poison = p.poison
        if p.poison == 0 and len(records) > 1:
            raise PoisonBatch(f"record {seqs[0]} cannot be fanned out: {p.error}")
        out.fail(p.poison)
    last_base = {pq: max(b for _, b in recs) for pq, recs in p.queues.items()}
    first_rec = {pq: min(i for i, _ in recs) for pq, recs in p.queues.items()}

    # subscriptions parked for a source queue of this batch: catch up (covers this batch's groups)
    for sid, entries in list(m.parked.items()):
        for pq in sorted(entries):
            if pq not in last_base:
                continue
            try:
                # groups before the entry's ``from`` (a batch redelivered after a crash or bisected
                # may hold some) are not the catch-up's: appended first, in order (no-ops if there)
                before = [g for g in p.pending.get(sid, []) if _source_pq(g.key) == pq
                          and _source_base(g.key) < int(entries[pq]["from"])]
                if before:
                    out.added += append_groups(sid, before, now)
                out.added += catch_up(sid, pq, last_base[pq], m, now)
                out.unparked.append((sid, pq))
            except Exception as e:  # noqa: BLE001 - still parked: bump its attempts
                log.warning("catch-up of subscription %s for %s failed: %s", sid, pq, _reason(e))
                groups = [g for g in p.pending.get(sid, []) if _source_pq(g.key) == pq]
                try:
                    src, q = split_queue_key(pq)
                    park(sid, groups or [Group(f"{src}@{q}:{entries[pq]['from']}", first_rec[pq])],
                         seqs, _reason(e), now)
                except Exception:  # noqa: BLE001
                    log.exception("could not record the failed catch-up of %s for %s", sid, pq)
                    out.fail(first_rec[pq])

    for sid, groups in p.pending.items():
        held = set(m.parked.get(sid, {}))
        groups = [g for g in groups if _source_pq(g.key) not in held]
        if not groups:
            continue
        try:
            out.added += append_groups(sid, groups, now)
        except AppendFailed as e:
            log.error("appending to subscription %s failed: %s", sid, _reason(e))
            try:
                out.parked += [(sid, pq) for pq in park(sid, e.remaining, seqs, _reason(e), now)]
            except Exception:  # noqa: BLE001 - neither delivered nor parked: retry those records
                log.exception("could not park subscription %s", sid)
                out.fail(min(g.record for g in e.remaining))
    return out


def redeliver_parked(now: int, m: Matcher | None = None) -> Outcome:
    """The scheduled sweep (template.yaml ``FanoutFunction`` ``Redeliver`` event): catch every
    parked subscription up to its source queue's current head and un-park it, so a source queue
    that went quiet does not hold its messages back until its next record. Safe alongside the
    stream invocations: appends are idempotent and in order, an un-park is conditional on the
    entry being unchanged, and a failed catch-up (here or there) bumps the entry."""
    m = m or matcher
    out = Outcome()
    m.refresh()
    for sid, entries in list(m.parked.items()):
        for pq, entry in sorted(entries.items()):
            topic, q = split_queue_key(pq)
            try:
                head = LogRepo.head(topic, int(q), fresh=True)
                out.added += catch_up(sid, pq, head if head is not None else int(entry["from"]), m, now)
                out.unparked.append((sid, pq))
            except Exception as e:  # noqa: BLE001 - stays parked; the next sweep or record retries
                log.warning("redelivery of subscription %s for %s failed: %s", sid, pq, _reason(e))
                try:
                    park(sid, [Group(f"{topic}@{q}:{entry['from']}", 0)], [str(entry.get("seq", ""))],
                         _reason(e), now)
                except Exception:  # noqa: BLE001
                    log.exception("could not record the failed redelivery of %s for %s", sid, pq)
    return out


def response(out: Outcome, records: list[dict]) -> dict:
    """``{"batchItemFailures": [...]}``: the earliest record not done and every later one."""
    if out.failed_at is None:
        return {"batchItemFailures": []}
    return {"batchItemFailures": [{"itemIdentifier": r["dynamodb"]["SequenceNumber"]}
                                  for r in records[out.failed_at:]]}


def handle(event: dict, now: int, m: Matcher | None = None) -> dict:
    """:func:`handle_batch` → the Lambda response (``{"batchItemFailures": [...]}``)."""
    return response(handle_batch(event, now, m), event.get("Records") or [])
