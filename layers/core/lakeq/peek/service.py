"""Peek use cases: what an operator reads to see what is stuck, with no write at all.

- :func:`queue_messages` — ``GET /v1/topics/{topic}/queues/{queue}/messages?from=&limit=``: a
  topic queue's messages from an offset (admin, or a consumer granted the topic);
- :func:`group_pending` — ``GET /v1/groups/{group}/pending?topic=&queue=&client_id=&from=&limit=``:
  the messages a group has not settled (pending, locked, due, new), with their deliveries and
  lock state (admin, or the group's key);
- :func:`subscription_pending` — ``GET /v1/subscriptions/{id}/pending?from=&limit=``: the same for
  a subscription's list (admin, or the subscriber's key).

Reads only, through the pull's own readers (:func:`lakeq.consume.reader.topic_reader`,
:func:`~lakeq.consume.reader.list_reader`): eventually consistent segment Queries, the queue
items (eventually consistent) and the consumer's offset records (one consistent Query). Nothing
is locked, promoted, dead-lettered or counted: the function serving these routes has a read-only
role. Check order (API.md): 401 → 400 → 404 → 403.
"""
from __future__ import annotations

from typing import Callable, Iterable

from lakeq.admin.auth import Principal, authorize, cached_client, client_or_404, topic_or_404
from lakeq.common import clock
from lakeq.common.errors import BadRequest, Forbidden, NotFound
from lakeq.common.names import check_name, check_topic, covers, is_name, log_of
from lakeq.common.payload import ByteBudget
from lakeq.consume import list_reader, replay_reader, topic_reader
from lakeq.contract import validation as v
from lakeq.log import peek_plan as plan
from lakeq.log.selection import QueueView
from lakeq.log.settlement import upkept
from lakeq.store.offsets import OffsetRepo
from lakeq.store.queue_log import LogRepo
from lakeq.store.replay_lists import active_replays, replay_log, replay_owner
from lakeq.store.subscriptions import SubscriptionRepo, list_owner, list_topic

FIELDS = ("id", "topic", "queue", "offset", "body", "key", "tags", "properties", "produced_at")


def shown(m: dict) -> dict:
    """A peeked message: the pull's fields without ``deliveries`` (a peek is no delivery), and a
    dead-lettered copy's ``dead_letter``."""
    out = {k: m.get(k) for k in FIELDS}
    if m.get("dead_letter") is not None:
        out["dead_letter"] = m["dead_letter"]
    return out


def _limit(params: dict) -> int:
    return v.int_param(params, "limit", 1, plan.MAX_PEEK, plan.DEFAULT_PEEK)


def _may_read(p: Principal, topic: str) -> None:
    """Admin, or a consumer granted ``topic`` (403 otherwise)."""
    if p.admin:
        return
    c = cached_client(p.client or "")
    if c is None or c.role != "consumer" or not any(covers(g, topic) for g in c.topics):
        raise Forbidden(f"this key may not read topic '{topic}'")


def _take(reader, queue: int, offsets: Iterable[int], entry: Callable[[dict, int], dict],
          budget: ByteBudget) -> tuple[list[dict], int | None]:
    """The entries (``entry(message, offset)``) of the messages at ``offsets`` (ascending) while they
    fit ``budget``, the page's one byte budget: (entries, the offset of the first message that did
    not fit, or None). One read per run of consecutive offsets; a read that comes back short of its
    run (its own byte budget, or a message an eventually consistent read does not see yet) is read
    again from there, and a message that read does not return either is left out with the rest of
    its run (as the read stops at it)."""
    runs: list[list[int]] = []
    for o in offsets:
        if runs and runs[-1][-1] + 1 == o:
            runs[-1].append(o)
        else:
            runs.append([o])
    out: list[dict] = []
    for run in runs:
        at = run[0]
        while at <= run[-1]:
            msgs, _ = reader(queue, at, run[-1] + 1 - at, run[-1] + 1)
            if not msgs:
                break
            for m in msgs:
                e = entry(m, m["_log_offset"])
                if not budget.take(e):
                    return out, m["_log_offset"]
                out.append(e)
            at = msgs[-1]["_log_offset"] + 1
    return out, None


def _entry_of(shape, st, now: int) -> Callable[[dict, int], dict]:
    """A pending page's entry of message ``m`` at offset ``o``: as shown, with its state in ``st``."""
    return lambda m, o: {**shape(m), **plan.entry_state(st, o, now)}


def queue_messages(p: Principal, topic: str, queue_raw: str, params: dict) -> dict:
    """One page of a topic queue's messages from offset ``from`` (default: the oldest kept)."""
    check_topic(topic)
    if not (queue_raw.isascii() and queue_raw.isdigit() and len(queue_raw) <= 3):
        raise BadRequest("the queue must be a queue number")
    queue = int(queue_raw)
    start = v.int_param(params, "from", 0, 10**15, -1)
    limit = _limit(params)
    t = topic_or_404(topic)
    if queue >= int(t.queues):
        raise NotFound(f"topic '{topic}' has queues 0-{int(t.queues) - 1}")
    _may_read(p, topic)
    log = log_of(t)
    meta = LogRepo.queue(log, queue, consistent=False)
    lo_off, hi_off = (0, 0) if meta is None else (int(meta.min_offset), int(meta.max_offset))
    lo, hi = plan.window(None if start < 0 else start, limit, lo_off, hi_off)
    msgs, after = topic_reader(log, None)(queue, lo, hi - lo, hi) if hi > lo else ([], lo)
    return {"topic": topic, "queue": queue, "min_offset": lo_off, "max_offset": hi_off,
            "messages": [shown(m) for m in msgs], "next": plan.next_cursor(after, hi_off)}


def _entries(reader, queue: int, view: QueueView, start: int, limit: int, now: int, max_deliveries: int | None,
             shape=shown) -> tuple[list[dict], int | None]:
    """A consumer's unsettled messages of one queue from ``start``: (entries, next start or None)."""
    st = upkept(view.state(), now, max_deliveries)
    offsets, nxt = plan.unsettled(st, view.max_offset, max(start, view.min_offset), limit)
    out, cut = _take(reader, queue, offsets, _entry_of(shape, st, now), ByteBudget())
    return out, (nxt if cut is None else cut)


def _view(meta_min: int, meta_max: int, queue: int, rec) -> QueueView:
    return QueueView(queue, meta_min, meta_max) if rec is None else OffsetRepo.view_of(rec, meta_min, meta_max)


def _replay_shape(replay_id: str):
    """A replay copy as the group's pull shows it (the source's ``topic``/``queue``/``offset``),
    marked with its ``replay`` and ``list_offset`` (the cursor's unit in that list)."""
    def shape(msg: dict) -> dict:
        return {**shown(msg), "replay": replay_id, "list_offset": msg["_log_offset"]}
    return shape


def group_pending(p: Principal, group_name: str, params: dict) -> dict:
    """The group's unsettled messages of ``topic``: first the copies waiting in the hidden lists of
    the live replays of ``topic`` into the group (issue 18.1's ``{"group"}`` target; its pulls serve
    them first too), oldest replay id first, then the topic's queues (one ``queue`` or all; given
    ``queue``, that queue only). Paged by the cursor ``"~r.<replay id>:<list offset>"`` or
    ``"<queue>:<offset>"`` (:func:`lakeq.log.peek_plan.page`). ``backlog``: the topic's queues, as
    ``GET /v1/groups/{group}/offsets`` counts it; ``replays``: each live replay's ``id`` and the
    backlog of its list."""
    check_name(group_name, "group")
    topic = params.get("topic")
    check_topic(topic)
    client_id = params.get("client_id")
    if client_id is not None:
        check_name(client_id, "client_id")
    only = None
    if params.get("queue") is not None:
        only = v.int_param(params, "queue", 0, 999, 0)
    at, off0 = plan.parse_source_cursor(params.get("from"))
    limit = _limit(params)
    t = topic_or_404(topic)
    group = client_or_404(group_name, "consumer")
    if only is not None and only >= int(t.queues):
        raise NotFound(f"topic '{topic}' has queues 0-{int(t.queues) - 1}")
    authorize(p, group, topic)
    if group.mode == "broadcasting" and client_id is None:
        raise BadRequest("client_id is required for a broadcasting group")
    instance = client_id if group.mode == "broadcasting" else None
    log = log_of(t)
    recs = OffsetRepo.records(OffsetRepo.owner(group.name, log, instance))
    metas = LogRepo.queues(log, int(t.queues))
    now = clock.now()
    md = None if group.max_deliveries is None else int(group.max_deliveries)  # its pulls' policy
    # each source: (its key, state, min, max) for the page plan; (reader, queue, shape) to read it
    sources: list[tuple[plan.Source, object, int, int]] = []
    how: dict[plan.Source, tuple] = {}
    backlog = 0
    for m in metas:
        q = int(m.queue)
        view = _view(int(m.min_offset), int(m.max_offset), q, recs.get(q))
        if only is None or q == only:
            backlog += view.backlog
            src = plan.queue_source(q)
            sources.append((src, upkept(view.state(), now, md), view.min_offset, view.max_offset))
            how[src] = (topic_reader(log, None), q, shown)
    replays = []
    for rid in active_replays(group, topic):  # the group's item names them (no marker: no call)
        rlog = replay_log(rid)
        meta = LogRepo.queue(rlog, 0, consistent=False, exact=False)  # a list's head moves in its transactions
        if meta is None:  # (a marker whose list is gone)
            continue
        view = _view(int(meta.min_offset), int(meta.max_offset), 0,
                     OffsetRepo.get(replay_owner(group.name, rid, instance), 0))
        replays.append({"id": rid, "backlog": view.backlog})
        if only is None:
            src = plan.replay_source(rid)
            sources.append((src, upkept(view.state(), now, md), view.min_offset, view.max_offset))
            how[src] = (replay_reader(rlog, None), 0, _replay_shape(rid))
    chosen, nxt = plan.page(sources, at, off0, limit)
    states = {src: st for src, st, _, _ in sources}
    entries: list[dict] = []
    budget = ByteBudget()  # the page's, over every source: one Lambda response (as a pull's batch)
    for src, offsets in chosen:
        reader, q, shape = how[src]
        got, cut = _take(reader, q, offsets, _entry_of(shape, states[src], now), budget)
        entries += got
        if cut is not None:  # the next page starts at the first message this one could not carry
            nxt = plan.source_cursor(src, cut)
            break
    return {"group": group.name, "topic": topic, **({"client_id": client_id} if client_id else {}),
            "backlog": backlog, "replays": replays, "messages": entries, "next": nxt}


def subscription_pending(p: Principal, sub_id: str, params: dict) -> dict:
    """A subscription list's unsettled entries from list offset ``from``; each shows its source
    ``topic``/``queue``/``offset`` and its ``list_offset`` (the cursor's unit)."""
    check_name(sub_id, "subscription id")
    start = v.int_param(params, "from", 0, 10**15, 0)
    limit = _limit(params)
    s = SubscriptionRepo.get(sub_id) if is_name(sub_id) else None
    if s is None:
        raise NotFound(f"subscription '{sub_id}' does not exist")
    if not p.may_act_as(s.subscriber):
        raise Forbidden(f"this key may not act for '{s.subscriber}'")
    lt = list_topic(sub_id)
    metas = LogRepo.queues(lt, 1)
    if not metas:
        raise NotFound(f"subscription '{sub_id}' does not exist")
    m = metas[0]
    r = OffsetRepo.get(list_owner(sub_id), 0)
    view = (QueueView(0, int(m.min_offset), int(m.max_offset)) if r is None
            else OffsetRepo.view_of(r, int(m.min_offset), int(m.max_offset)))

    def shape(msg: dict) -> dict:
        return {**shown(msg), "list_offset": msg["_log_offset"]}

    md = None if s.max_deliveries is None else int(s.max_deliveries)  # its pulls' (and push's) policy
    entries, nxt = _entries(list_reader(lt), 0, view, start, limit, clock.now(), md, shape)
    return {"subscription": sub_id, "backlog": view.backlog, "messages": entries, "next": nxt}
