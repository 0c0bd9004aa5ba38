"""The produce use case (``POST /v1/topics/{topic}/messages``): check, plan each message's queue,
append per queue with the one append-with-retry loop (:func:`lakeq.store.append.append_at_head`);
delayed messages go to :mod:`lakeq.produce.delayed`.

Check order (API.md): 401 → 400 (syntax) → 404 (named things) → 403 (the key may not act) → 413.
"""
from __future__ import annotations

import random
import uuid

from lakeq.admin.auth import (
    Principal,
    authorize,
    client_or_404,
    topic_or_404,
)
from lakeq.common import clock as _clock
from lakeq.common.errors import NotFound, PayloadTooLarge, Unavailable
from lakeq.common.names import check_topic, log_of, topic_of_log
from lakeq.contract import validation as v
from lakeq.log import segments as seg
from lakeq.log.produce_plan import plan_parts as _plan_parts
from lakeq.log.produce_plan import queue_for_key
from lakeq.produce import delayed as _delayed
from lakeq.store.append import Contended, append_at_head, bump_change, bump_change_hint
from lakeq.store.bodies import BodyStore
from lakeq.store.records import Topic


# --- produce --------------------------------------------------------------------------------
def produce(p: Principal, topic: str, raw: str | None, reserved_ok: bool = False,
            t: Topic | None = None, avoid: frozenset[int] = frozenset(), traces: tuple = ()) -> dict:
    """``reserved_ok``: the properties may use reserved names (only the SQS endpoint's own sends);
    ``t``: the topic's item when the caller has just read it (the SQS endpoint: one read an action);
    ``avoid``: queues the messages without a key go to only when every queue is in it (the SQS
    endpoint's: the queues its consumers hold locked, so a new message is not held behind one);
    ``traces``: X-Ray trace header candidates, best first (the request's ``X-Amzn-Trace-Id``, the
    invocation's ``_X_AMZN_TRACE_ID``): the first well-formed one (``validation.trace_header``) is
    kept with every message of the request, a malformed one ignored."""
    check_topic(topic)
    req = v.produce(v.json_body(raw), reserved_ok)
    # the topic item read eventually consistently (issue 33 item 2; not a container's copy: a produce
    # must not write into a deleted incarnation's log for seconds after another container re-made it)
    t = t if t is not None and t.name == topic else topic_or_404(topic, consistent=False)
    producer = client_or_404(req.producer, "producer")
    authorize(p, producer, topic)
    reason = req.too_large(len(raw.encode("utf-8")) if raw else 0)
    if reason:
        raise PayloadTooLarge(reason)

    trace = v.trace_header(*traces)
    now = _clock.now()
    n_queues = int(t.queues)
    log = log_of(t)  # the keys of this incarnation of the topic (lakeq.common.names.log_name)
    results: list[dict | None] = [None] * len(req.messages)
    known = _delayed.known_results(log, [m.id for m in req.messages if m.id])  # delayed ids too
    first_index: dict[str, int] = {}
    copies: list[tuple[int, int]] = []
    pending: dict[int, list[tuple[int, seg.Message, bool]]] = {}
    delayed: dict[int, list[_delayed.Delayed]] = {}  # delay_ms > 0: kept until due (lakeq.produce.delayed)
    spread = spread_queue(n_queues, avoid)
    for i, m in enumerate(req.messages):
        if m.id is not None:
            if m.id in known:
                results[i] = dict(known[m.id])
                continue
            if m.id in first_index:
                copies.append((i, first_index[m.id]))
                continue
            first_index[m.id] = i
        q = queue_for_key(m.key, n_queues) if m.key is not None else spread
        msg = seg.Message(id=m.id or str(uuid.uuid4()), body=m.body, key=m.key, tags=m.tags,
                          properties=m.properties, produced_at=now, trace=trace)
        msg = BodyStore.claim_checked(log, msg)
        if m.delay_ms:
            delayed.setdefault(q, []).append(_delayed.Delayed(i, msg, m.id is not None, now + m.delay_ms))
        else:
            pending.setdefault(q, []).append((i, msg, m.id is not None))
    for q, items in sorted(pending.items()):
        _append_queue(log, q, items, results, now)
    moved: list[int] = []  # the queues where a delayed message became the earliest due
    try:
        for q, ditems in sorted(delayed.items()):
            _delayed.produce_delayed(log, q, ditems, results, now, moved)
    except BaseException:
        # the request fails (503 contended) after storing some: an earlier due it set is signalled
        # now, as an append's (bump_change_hint), not left to the 60-s safety net (review_g)
        if moved:
            bump_change_hint(log, force=True)
        raise
    if delayed or any(m.id in known for m in req.messages if m.id):
        # a long poll waiting on the topic learns the new next_due from its marker (issue 33; the
        # appends above bumped it already, at most once a second); and a retry of ids already recorded
        # bumps too: its first attempt's bump may have been lost (a 503 after the appends, or the container
        # stopped after its appends), and a pull's empty look trusts the marker (review_c)
        # A delayed message that became its queue's earliest due bumps even within the container's
        # second (force): a pull answered from a young empty look (inside the marker's unsignalled
        # window) probes the chains for appends, but learns of an earlier next_due from the marker
        # alone (issue 33 item 2). One stored behind an earlier due does not: the look waits for
        # that one already (a marker write per delayed request throttled at ~1,000 a second a topic)
        # A retry of delayed ids forces too: its first attempt's forced bump may be the one that was
        # lost (503), and within the second the retry's bump wrote nothing (review_f)
        bump_change(log, force=bool(moved) or any(r.get("offset") is None for r in known.values()))
    for i, j in copies:
        results[i] = dict(results[j])  # type: ignore[arg-type]
    return {"results": results}


def spread_queue(n_queues: int, avoid: frozenset[int] = frozenset()) -> int:
    """The queue a request's messages without a key go to: one at random, outside ``avoid`` when
    any queue is.

    >>> {spread_queue(4, frozenset({0, 1, 3})) for _ in range(20)}
    {2}
    >>> spread_queue(2, frozenset({0, 1})) in (0, 1)
    True
    """
    free = [q for q in range(n_queues) if q not in avoid]
    return random.choice(free) if free else random.randrange(n_queues)


def _append_queue(topic: str, q: int, items: list[tuple[int, seg.Message, bool]], results: list, now: int) -> None:
    """Append ``items`` to queue ``q`` of log ``topic`` (a topic's log name) write by write
    (``_plan_parts``) with :func:`lakeq.store.append.append_at_head`; ids another request recorded
    meanwhile are answered with that request's result."""
    offsets: dict[int, int] = {}

    def plan(left: list, base: int) -> tuple:
        part, placed = _plan_parts(topic, q, left, base)[0]
        offsets.update(placed)
        return part, len(placed)

    def written(done: list, _part) -> None:
        for i, m, _ in done:
            results[i] = {"id": m.id, "queue": q, "offset": offsets[i]}

    def recorded(left: list, dup_ids: list[str]) -> list:
        found = _delayed.known_results(topic, dup_ids)  # (a delayed one: offset null, deliver_at)
        keep = []
        for i, m, cid in left:
            if cid and m.id in found:
                results[i] = dict(found[m.id])
            else:
                keep.append((i, m, cid))
        return keep

    try:
        if not append_at_head(topic, q, items, now, plan, written, recorded):
            raise NotFound(f"queue {q} of topic '{topic_of_log(topic)}' does not exist")
    except Contended:
        raise Unavailable("the queue is too contended; retry the request with the same message ids") from None
