"""Redrives: a dead-letter topic's messages moved back to their source topics (each dead-lettered
copy names it: ``dead_letter.topic``) or to a chosen topic, at a rate, with progress.

**What is moved.** A redrive reads its source (the dead-letter topic) as a *reserved consumer*
whose position per queue lives on the source's item in RedrivesTable (:mod:`lakeq.store.redrives`),
not in OffsetsTable: the source's consumer groups (and SQS consumers of a dead-letter queue) are
untouched and still see every message. It moves the messages from that position up to each
queue's head at the start (``end``); messages dead-lettered later wait for the next redrive, which
starts where this one stopped. At most one redrive of a source runs at a time (409).

**Exactly once.** Each copy's id is derived from its source position
(:func:`lakeq.log.move_plan.move_id`) and appended with the produce path's dedup items (one
transaction: head, segment, ids), so a batch copied again after a crash or a lost progress write
is found in the destination's dedup table and not stored twice (within the dedup TTL, 24 h; the
schedule resumes a crashed redrive within a minute; a run that finds a crashed predecessor's lease
older than the TTL less an hour fails the redrive, saying so, instead of copying that batch again:
:func:`lakeq.log.move_plan.resume_refused`). The position moves only after the batch's
copies are written (one conditional UpdateItem on the redrive's version), so nothing is skipped.

**Where it runs.** :func:`run_all`, invoked by the ``RedriveFunction`` schedule every minute (the
local stack runs the same schedule), takes each running redrive's lease (a conditional write) and
moves batches at its rate until its time budget ends; :func:`start` runs the first batches at once
within a short budget. Messages without a destination (not a dead-lettered copy and no
``destination`` given) or whose destination topic does not exist are skipped and counted in
``failed``.
"""
from __future__ import annotations

import logging
import time
import uuid

from lakeq.admin.auth import Principal, require_admin, topic_or_404
from lakeq.common import clock
from lakeq.common.errors import BadRequest, Conflict, NotFound, Unavailable, counted
from lakeq.common.names import check_name, check_topic, is_name, log_of
from lakeq.consume import topic_reader
from lakeq.contract import validation as v
from lakeq.log import move_plan as mp
from lakeq.log import segments as seg
from lakeq.store.append import Contended, append_copies
from lakeq.store.bodies import BodyStore
from lakeq.store.catalog import TopicRepo
from lakeq.store.queue_log import DEDUP_TTL_S, RESUME_WINDOW_MS, LogRepo
from lakeq.store.redrives import Redrive, RedriveRepo

logger = logging.getLogger("lakeq.redrive")
sleep = time.sleep  # the runner's wait for the rate's next slot (tests replace it)
START_BUDGET_MS = 2_000  # what a POST spends moving before it answers
LEASE_MARGIN_MS = 10_000


class RedriveRunning(Conflict):
    code = "redrive_running"


# --- views ----------------------------------------------------------------------------------
def view(r: Redrive) -> dict:
    prog = mp.Progress.load(r.pos, r.end)
    return {"id": r.id, "source": r.source, "destination": r.destination, "rate": int(r.rate or 0),
            "status": r.status, "total": int(r.total or 0), "moved": int(r.moved or 0),
            "failed": int(r.failed or 0), "remaining": prog.remaining() if r.status in (mp.RUNNING, mp.CANCELLING)
            else 0, "created_at": int(r.created_at or 0), "updated_at": int(r.updated_at or 0),
            "last_error": r.last_error, **({"origin": r.origin} if r.origin else {})}


def _redrive_or_404(rid: str) -> Redrive:
    r = RedriveRepo.get(rid) if is_name(rid) else None  # (no name holds "~": the "~src|" markers are not redrives)
    if r is None or r.source is None:
        raise NotFound(f"redrive '{rid}' does not exist")
    return r


# --- use cases --------------------------------------------------------------------------------
def start(p: Principal, raw: str | None, origin: str | None = None, budget_ms: int = START_BUDGET_MS) -> dict:
    """``POST /v1/redrives`` ``{"source", "destination"?, "rate"?}`` → 202 and the redrive."""
    body = v.json_body(raw)
    v.known_fields(body, ("source", "destination", "rate"))  # a typo is no default: "destinaton" → 400
    source = check_topic(body.get("source"), "source")
    dest = body.get("destination")
    if dest is not None:
        check_topic(dest, "destination")
        if dest == source:
            raise BadRequest("'destination' must not be the source")
    rate = v.int_field(body, "rate", mp.MIN_RATE, mp.MAX_RATE, mp.DEFAULT_RATE)
    t = topic_or_404(source)
    if dest is not None:
        topic_or_404(dest)
    require_admin(p)
    log = log_of(t)
    now = clock.now()
    src = RedriveRepo.source(log)
    if src is not None and src.active:
        raise RedriveRunning(f"redrive '{src.active}' of '{source}' is running; cancel it or wait")
    kept = mp.Progress.load(src.pos if src is not None else None, None).pos
    metas = LogRepo.queues(log, int(t.queues), consistent=True)
    end = {int(m.queue): int(m.max_offset) for m in metas}
    pos = {q: max(kept.get(q, 0), int(m.min_offset)) for q, m in ((int(m.queue), m) for m in metas)}
    prog = mp.Progress(pos, end)
    pos_s, end_s = prog.dump()
    r = Redrive(uuid.uuid4().hex, source=source, source_log=log, destination=dest, rate=rate,
                status=mp.RUNNING, origin=origin, created_at=now, updated_at=now, total=prog.remaining(),
                moved=0, failed=0, pos=pos_s, end=end_s, next_at=0, v=0)
    if not RedriveRepo.create(r):
        raise RedriveRunning(f"another redrive of '{source}' is running; cancel it or wait")
    if budget_ms > 0:
        run(r.id, budget_ms)
    return view(RedriveRepo.get(r.id) or r)


def get(p: Principal, rid: str) -> dict:
    check_name(rid, "redrive id")
    r = _redrive_or_404(rid)
    require_admin(p)
    return view(r)


def list_(p: Principal, params: dict) -> dict:
    """``GET /v1/redrives?source=&status=`` (a Scan of RedrivesTable: redrives are few)."""
    source = params.get("source")
    if source is not None:
        check_topic(source, "source")
    status = params.get("status")
    if status is not None and status not in (mp.RUNNING, mp.CANCELLING, *mp.FINAL):
        raise BadRequest("'status' must be one of running, cancelling, completed, cancelled, failed")
    require_admin(p)
    out = [view(r) for r in RedriveRepo.all()
           if (source is None or r.source == source) and (status is None or r.status == status)]
    return {"redrives": out}


def cancel(p: Principal, rid: str) -> dict:
    """``POST /v1/redrives/{id}/cancel``: a running redrive stops after its current batch (what it
    moved stays moved; its position is kept for the next redrive of that source). 409 when it has
    ended already."""
    check_name(rid, "redrive id")
    r = _redrive_or_404(rid)
    require_admin(p)
    # not backoff.cas: a lost write means the redrive moved on (status, lease) and the next read decides;
    # it settles within a round or two, so 5 rounds, no wait
    for _ in range(5):
        if r.status == mp.CANCELLING:
            return view(r)
        if r.status != mp.RUNNING:
            raise Conflict(f"redrive '{rid}' has ended ({r.status})")
        now = clock.now()
        if r.lease_until is None or int(r.lease_until) < now:  # no runner holds it: end it here
            if RedriveRepo.finish(r, int(r.v), mp.CANCELLED, r.pos or "{}", 0, 0, now):
                return view(RedriveRepo.get(rid) or r)
        elif RedriveRepo.request_cancel(rid):
            return view(RedriveRepo.get(rid) or r)
        r = _redrive_or_404(rid)
    raise Unavailable("the redrive changed too often; retry")


# --- the runner ---------------------------------------------------------------------------------
def _copy(dest: str, items: list[seg.Message], now: int) -> bool:
    """Append ``items`` (ids derived from their source positions) to topic ``dest`` once each:
    ids already in its dedup table are skipped, the rest go in with their ids
    (:func:`lakeq.store.append.append_copies`). False: no such topic."""
    t = TopicRepo.get(dest)
    if t is None:
        return False
    try:
        append_copies(log_of(t), int(t.queues), items, now)
    except Contended:
        raise Unavailable(f"topic '{dest}' is too contended; the redrive retries") from None
    return True


def _batch(r: Redrive, prog: mp.Progress, queue: int, n: int, now: int) -> tuple[int, int, int, str | None]:
    """Read up to ``n`` messages of source ``queue`` from its position and copy them. Returns
    (new position, moved, failed, error)."""
    start = prog.pos.get(queue, 0)
    msgs, after = topic_reader(r.source_log, None)(queue, start, n, prog.end[queue])
    if after == start:  # a gap: below the log's retained offsets, or not visible yet
        meta = LogRepo.queue(r.source_log, queue, exact=False)
        lo = int(meta.min_offset) if meta is not None else prog.end[queue]
        return (lo, 0, 0, None) if lo > start else (start, 0, 0, None)
    by_dest: dict[str, list[seg.Message]] = {}
    failed, error = 0, None
    for m in msgs:
        d = mp.destination(m, r.destination)
        if d is None or d == r.source:
            failed += 1
            error = f"message at {queue}:{m['_log_offset']} names no source topic to go back to"
            continue
        mid = mp.move_id(r.source_log, queue, m["_log_offset"])
        claim = m.get("claim")  # a body in the lake bucket (issue 18.2): the copy's own object (renewed)
        claim = BodyStore.renewed(r.source_log, mid, claim) if claim is not None else None
        by_dest.setdefault(d, []).append(seg.Message(
            id=mid, body="" if claim else m["body"], key=m.get("key"),
            tags=list(m.get("tags") or []), properties=dict(m.get("properties") or {}), produced_at=now,
            claim=claim, trace=m.get("trace")))
    moved = 0
    for d, items in by_dest.items():
        if _copy(d, items, now):
            moved += len(items)
        else:
            failed += len(items)
            error = f"topic '{d}' does not exist"
    return after, moved, failed, error


def run(rid: str, budget_ms: int) -> dict | None:
    """Move redrive ``rid``'s messages at its rate for at most ``budget_ms``: take its lease, then
    batch by batch read, copy, record progress (conditional on its version). A cancel request
    ends it after the batch in hand. Returns its view (None: not found)."""
    r = RedriveRepo.get(rid)
    if r is None or r.status not in (mp.RUNNING, mp.CANCELLING):
        return None if r is None else view(r)
    now = clock.now()
    deadline = now + budget_ms
    token = uuid.uuid4().hex
    if not RedriveRepo.lease(r, token, deadline + LEASE_MARGIN_MS, now):
        return view(RedriveRepo.get(rid) or r)
    ver = int(r.v) + 1
    prog = mp.Progress.load(r.pos, r.end)
    if r.status == mp.CANCELLING:
        RedriveRepo.finish(r, ver, mp.CANCELLED, prog.dump()[0], 0, 0, now)
        return view(RedriveRepo.get(rid) or r)
    last = int(r.updated_at or r.created_at or 0)
    if mp.resume_refused(r.lease_until is not None, last, now, RESUME_WINDOW_MS):
        RedriveRepo.finish(r, ver, mp.FAILED, prog.dump()[0], 0, 0, now, (
            f"resume refused: the runner stopped while moving a batch and the redrive was resumed "
            f"{(now - last) / 3_600_000:.1f} h later, past the {DEDUP_TTL_S // 3600} h in which the destination "
            f"drops a second copy; its position is kept, so a new redrive of '{r.source}' goes on from "
            f"there and may copy that one batch (at most {mp.MAX_BATCH} messages) twice"))
        return view(RedriveRepo.get(rid) or r)
    t = TopicRepo.get(r.source)
    if t is None or log_of(t) != r.source_log:
        RedriveRepo.finish(r, ver, mp.FAILED, prog.dump()[0], 0, 0, now, "the source topic was deleted")
        return view(RedriveRepo.get(rid) or r)
    next_at, rate = int(r.next_at or 0), int(r.rate or mp.DEFAULT_RATE)
    while True:
        q = prog.next_queue()
        now = clock.now()
        if q is None:
            RedriveRepo.finish(r, ver, mp.COMPLETED, prog.dump()[0], 0, 0, now)
            break
        n = mp.batch_size(rate, prog.end[q] - prog.pos.get(q, 0))
        at, following = mp.slot(next_at, now, n, rate)
        if at >= deadline:
            RedriveRepo.release(rid, ver, token)
            break
        if at > now:
            sleep((at - now) / 1000)
        before = prog.pos.get(q, 0)
        after, moved, failed, error = _batch(r, prog, q, n, at)
        if after == before:  # nothing readable yet: try again at the next invocation
            RedriveRepo.release(rid, ver, token)
            break
        prog = prog.advance(q, after)
        now = clock.now()
        next_at = following
        if RedriveRepo.progress(rid, ver, prog.dump()[0], moved, failed, next_at, now, error):
            ver += 1
            continue
        cur = RedriveRepo.get(rid)  # a cancel request: record this batch and end it
        if cur is not None and cur.status == mp.CANCELLING and int(cur.v) == ver:
            RedriveRepo.finish(cur, ver, mp.CANCELLED, prog.dump()[0], moved, failed, now, error)
        break
    return view(RedriveRepo.get(rid) or r)


def run_all(budget_ms: int, progress=None) -> dict:
    """The schedule's invocation: every running (or cancelling) redrive in turn, each given an equal
    share of the time left (a redrive moving a big dead-letter topic at a low rate uses its whole
    share, so the first one no longer takes the whole minute from the others). A redrive whose run
    raises is logged and counted in ``errors``, and the next one still runs: one redrive that keeps
    failing (a store error, a destination that refuses every write) does not stop the others; its
    lease lapses and the next invocation tries it again. ``progress``: called with each run
    redrive's view after its turn (the function prints it as a metric)."""
    deadline = clock.now() + budget_ms
    ids = [r.id for r in RedriveRepo.all() if r.status in (mp.RUNNING, mp.CANCELLING)]
    out: dict[str, int] = {"redrives": 0}
    for i, rid in enumerate(ids):
        left = deadline - clock.now()
        if left <= 0:
            break
        out["redrives"] += 1
        with counted(out, logger, "redrive %s: its run failed; the next invocation tries it again", rid):
            got = run(rid, left // (len(ids) - i))
            if got is not None and progress is not None:
                progress(got)
    return out
