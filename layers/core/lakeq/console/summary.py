"""The operator's summary (``GET /v1/summary``, issue 18 item 3): what the console shows first.

Totals over every topic and every clustering consumer group the caller may see (the admin key: all;
a group's key: its own grants), then one row per topic and per (group, topic):

- ``produced`` — offsets ever handed out (the sum of the queues' ``max_offset``);
- ``consumed`` — offsets settled by a group (the sum of its queues' committed offsets);
- ``backlog`` / ``dead_lettered`` — as ``GET /v1/groups/{g}/offsets`` counts them;
- ``oldest_unconsumed_at`` — ``produced_at`` of the oldest message a group has not settled (the
  message at its committed offset, one per queue with a backlog; ``null`` with no backlog, or when
  that message is no longer readable), and ``oldest_unconsumed_age_ms`` from it;
- per subscription of those consumers, its message list's ``backlog``, ``dead_lettered`` and oldest
  unconsumed entry (the time it was produced to its source topic). The totals count groups and
  subscription lists alike.

Rates are not stored anywhere: the console derives produce and consume rates from two summaries
(``Δproduced / Δcomputed_at``, ``Δconsumed / Δcomputed_at``), and a script can do the same.
Broadcasting groups keep offsets per ``client_id``: they are listed with ``"mode": "broadcasting"``
and no counts (``GET /v1/groups/{g}/offsets?client_id=`` has them per instance).

Store calls (all reads; nothing here writes), each kind batched over every row (console35; it read
per row before: a Query per (group, topic), per queue of each topic and per queue with a backlog):
the topics' Scan (admin) or GetItems, the clients' Scan (admin) or one GetItem; one BatchGetItem of
every topic's and subscription list's queue items and their exact ends
(:meth:`~lakeq.store.queue_log.LogRepo.queues_of`); every clustering row's offset records by its
consistent Query and every list's by consistent BatchGetItems
(:meth:`~lakeq.store.offsets.OffsetRepo.records_of`: a BatchGetItem bills each key, an absent record
too, so a row's keys cost 4-52x its Query's RRU, review_g); one
BatchGetItem of the segment at each backlog's start
(:meth:`~lakeq.store.queue_log.LogRepo.first_segments`: a start inside a segment takes one Query
for that queue); the consumers' subscriptions in one Scan (one consumer: its Query of the
``by-subscriber`` index) of at most ``MAX_PAIRS`` + 100 items — a table holding more (the Scan reads
every tenant's) is read a Query a consumer until the cap, as before (review_g). 100 keys a
BatchGetItem: a few calls plus ceil(keys / 100) per kind. The work is bounded by the cap
:data:`MAX_PAIRS` (200), whatever the caller sees: at most that many topics (the first by name) are
read, and over them at most that many group rows ((group, topic) pairs, broadcasting ones included)
and subscription lists together; once the cap is reached nothing
more is read (not even the consumers' subscriptions, when the group rows reached it) and
``truncated`` is true (more rows may exist). Worst case: 200 topics' queue items (≤ 64 queues
each), 200 rows' offset records and start segments, plus the Scans.
"""
from __future__ import annotations

from lakeq.admin.auth import Principal
from lakeq.common import clock as _clock
from lakeq.common.names import covers, log_of
from lakeq.consume import views_of
from lakeq.log import segments as seg
from lakeq.store.catalog import ClientRepo, TopicRepo
from lakeq.store.offsets import OffsetRepo
from lakeq.store.queue_log import LogRepo
from lakeq.store.records import Client, Topic
from lakeq.store.subscriptions import SubscriptionRepo, list_owner, list_topic

MAX_PAIRS = 200  # topics read, and group rows + subscription lists counted, per call
# lakeq.subscriptions.service.MAX_SUBSCRIPTIONS_PER_CLIENT: the most one consumer's Query reads
SUBSCRIPTIONS_PER_CLIENT = 100


def _visible(p: Principal) -> tuple[list[Topic], list[Client]]:
    if p.admin:
        return list(TopicRepo.all()), ClientRepo.all()
    c = ClientRepo.get(p.client) if p.client else None
    if c is None:
        return [], []
    # a client's grants are name prefixes: matched over every topic, from the container's copy of the
    # list (at most one Scan of the topics table per container per TopicRepo's LISTED_S, whatever a
    # key's request rate; the admin reads it fresh)
    topics = [t for t in TopicRepo.all_listed() if any(covers(g, t.name) for g in c.topics)]
    return topics, [c]


def oldest_at(log: str, queue: int, start: int, max_offset: int) -> int | None:
    """When the first readable message at or after ``start`` (below ``max_offset``) joined its
    queue: ``produced_at``, or a delayed message's ``visible_at`` (its deliver time: a 900-s delay is
    not 900 s of backlog). One Query of the segment holding ``start``. None when there is none to read."""
    if start >= max_offset:
        return None
    return oldest_in(next(iter(LogRepo.read(log, queue, start, 1)), None), start)


def oldest_in(s: seg.Segment | None, start: int) -> int | None:
    """:func:`oldest_at` from the segment already read (``s``: the first :meth:`LogRepo.read` yields
    for ``start``, None when there is none)."""
    if s is None:
        return None
    for _off, msg in seg.read(s, start, 1, None):
        if msg is not None:
            return msg.get("visible_at") or msg.get("produced_at")
    return None


def _counts(vs: list, oldest: list, now: int) -> dict:
    """One consumer's figures over its queue views ``vs``: what it settled, its backlog, its dead
    letters and its oldest unsettled message (``oldest``: each queue's with a backlog, None left out)."""
    first = min(oldest) if oldest else None
    return {"consumed": sum(v.start for v in vs), "backlog": sum(v.backlog for v in vs),
            "dead_lettered": sum(v.dead_lettered for v in vs), "oldest_unconsumed_at": first,
            "oldest_unconsumed_age_ms": None if first is None else max(0, now - int(first))}


def _rows(topics: list[Topic], consumers: list[Client], truncated: bool) -> tuple[list, list, bool]:
    """The rows the cap lets in, before any read of them: the (consumer, topic) pairs, then the
    (consumer, subscription) pairs (the subscriptions read only when the cap leaves room, in one
    Scan for many consumers, one Query for one), and whether the cap cut any."""
    pairs: list[tuple[Client, Topic]] = []
    for c in consumers:
        for t in topics:
            if not any(covers(g, t.name) for g in c.topics):
                continue
            if len(pairs) >= MAX_PAIRS:
                truncated = True
                break
            pairs.append((c, t))
    subs: list[tuple[Client, object]] = []
    if consumers and len(pairs) >= MAX_PAIRS:  # no consumer is asked for its subscriptions
        return pairs, subs, True
    # many consumers: one Scan of the table, while it holds no more than the consumers' Queries up
    # to the cap would read at most (the cap's rows, the last consumer's 100 past it); a table
    # holding more (every tenant's subscriptions: a Scan's cost is the table's) is read as before,
    # a Query a consumer until the cap (review_g: a Scan of 10k subscriptions each summary)
    by = SubscriptionRepo.of_subscribers([c.name for c in consumers], most=MAX_PAIRS + SUBSCRIPTIONS_PER_CLIENT) \
        if len(consumers) > 1 else None
    for c in consumers:
        if len(pairs) + len(subs) >= MAX_PAIRS:
            truncated = True
            break
        for sub in (by[c.name] if by is not None else SubscriptionRepo.of_subscriber(c.name)):
            if len(pairs) + len(subs) >= MAX_PAIRS:
                truncated = True
                break
            subs.append((c, sub))
    return pairs, subs, truncated


def summary(p: Principal) -> dict:
    now = _clock.now()
    visible, clients = _visible(p)
    # the store work is bounded by the cap: the first MAX_PAIRS topics (by name) are read, and over
    # them at most MAX_PAIRS group rows and subscription lists; nothing past the cap is read
    topics = visible[:MAX_PAIRS]
    consumers = [c for c in clients if c.role == "consumer"]
    pairs, subs, truncated = _rows(topics, consumers, len(visible) > len(topics))
    # the reads, each kind batched over every row (console35): the queue items of every topic and
    # list; the offset records of every clustering row; the segment at each backlog's start
    metas = LogRepo.queues_of({**{log_of(t): int(t.queues) for t in topics},
                               **{list_topic(sub.id): 1 for _c, sub in subs}})
    counted = [(OffsetRepo.owner(c.name, log_of(t)), log_of(t)) for c, t in pairs if c.mode != "broadcasting"] \
        + [(list_owner(sub.id), list_topic(sub.id)) for _c, sub in subs]
    records = OffsetRepo.records_of({owner: [int(m.queue) for m in metas[log]] for owner, log in counted})
    views = {owner: views_of(metas[log], records[owner]) for owner, log in counted}
    starts = [(log, v.queue, v.start) for owner, log in counted for v in views[owner]
              if v.backlog > 0 and v.start < v.max_offset]
    segments = LogRepo.first_segments(starts)

    def figures(owner: str, log: str) -> dict:
        vs = views[owner]
        oldest = [o for o in (oldest_in(segments[(log, v.queue, v.start)], v.start)
                              for v in vs if v.backlog > 0 and v.start < v.max_offset) if o is not None]
        return _counts(vs, oldest, now)

    topic_rows = []
    for t in topics:
        qs = metas[log_of(t)]
        topic_rows.append({"topic": t.name, "queues": int(t.queues),
                           "produced": sum(int(m.max_offset) for m in qs),
                           "retained": sum(int(m.max_offset) - int(m.min_offset) for m in qs),
                           "delayed": sum(int(m.delayed or 0) for m in qs),
                           "last_produced_at": max((int(m.last_produced_at or 0) for m in qs), default=0) or None})
    group_rows: list[dict] = []
    for c, t in pairs:
        if c.mode == "broadcasting":
            group_rows.append({"group": c.name, "topic": t.name, "mode": "broadcasting"})
            continue
        owner = OffsetRepo.owner(c.name, log_of(t))
        group_rows.append({"group": c.name, "topic": t.name, "mode": c.mode, **figures(owner, log_of(t)),
                           "locked_queues": sum(1 for v in views[owner] if v.locked(now))})
    sub_rows = [{"subscription": sub.id, "subscriber": c.name, "topic": sub.topic,
                 **figures(list_owner(sub.id), list_topic(sub.id))} for c, sub in subs]
    counted_rows = [g for g in group_rows if "backlog" in g] + sub_rows
    oldest_all = [g["oldest_unconsumed_at"] for g in counted_rows if g["oldest_unconsumed_at"] is not None]
    first_all = min(oldest_all) if oldest_all else None
    return {
        "computed_at": now,
        "totals": {"topics": len(topic_rows), "groups": len({g["group"] for g in group_rows}),
                   "produced": sum(r["produced"] for r in topic_rows),
                   "consumed": sum(g["consumed"] for g in counted_rows if "group" in g),
                   "backlog": sum(g["backlog"] for g in counted_rows),
                   "dead_lettered": sum(g["dead_lettered"] for g in counted_rows),
                   "oldest_unconsumed_at": first_all,
                   "oldest_unconsumed_age_ms": None if first_all is None else max(0, now - int(first_all))},
        "topics": topic_rows, "groups": group_rows, "subscriptions": sub_rows, "truncated": truncated}
