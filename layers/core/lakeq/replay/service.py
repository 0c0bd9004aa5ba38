"""Replays (issue 18.1; docs/design.md "Replay from the lake"): the routes' use cases and the copier
the ``ReplayFunction`` schedule runs.

**Start** (``POST /v1/replays``): the request checked (:func:`lakeq.replay.rules.parse_request`,
then the topic, the target topic or group: 404), the selection job started
(:func:`lakeq.store.jobs.start_replay_selection`, Glue) and the replay item written
(``selecting``). The job starts first: a 4xx or a refused start writes nothing; a crash between the
two leaves only objects under ``replays/<id>/`` that no item names.

**A dry run** (``"dry_run": true``): the same checks (400 → 404 → 403), the same job (so it counts
against the job's concurrent runs like a replay: a start refused → 503, nothing written), the item
marked ``dry_run``; its ``selection.json`` makes it ``selected`` (final) with ``found`` and the
job's ``sample``. It never reaches ``copying``: no cursor, no target begun or ended, nothing
copied. The job is started with ``dry_run`` and writes no manifest, only ``selection.json`` (the
count and the sample).

**The schedule** (:func:`run_all`, every minute): each live replay (the sparse index ``live``) —
``selecting``: ``error.json`` → ``failed``, ``selection.json`` → ``copying`` (with ``found`` and the
manifest's parts; nothing found → ``done``), neither within :data:`SELECT_TIMEOUT_MS` → ``failed``;
``copying``: :func:`lakeq.replay.copier.run` with the progress in the item (each cursor move a
conditional write on ``version`` and ``status``), the replay's rate and the invocation's time
left shared among them; the rows handed to a sink carry ``"pos"`` (their position in the
manifest's order).

**Sinks.** ``{"topic": t}``: the copies are appended to ``t``'s log with their derived ids
(:func:`lakeq.store.append.append_copies`: ids already in its dedup table are skipped, so a chunk
copied again after a crash is not stored twice), key, tags and properties kept, the body from the
manifest or — a body kept in the lake bucket — its claim. ``{"group": g}``:
:mod:`lakeq.replay.group_target` (imported when used).

**Ending** is an outbox: the final status is written first, the item stays ``live`` until the
target was told (``group_target.end``) and :meth:`ReplayRepo.unlive` took it out, so a crash in
between leaves the call to the next run; ``group_target.begin`` is called before the first chunk
(again after a crash there: it is idempotent).

**Cancel** sets ``cancelled`` without moving ``version``: the copier's next cursor write fails on
the status, records the chunk in hand on the cancelled item and stops.
"""
from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from lakeq.admin.auth import Principal, client_or_404, require_admin, topic_or_404
from lakeq.common import clock
from lakeq.common.errors import BadRequest, Conflict, LakeqError, NotFound, Unavailable, counted
from lakeq.common.names import covers, is_name
from lakeq.contract import validation as v
from lakeq.log import move_plan as mp
from lakeq.log import segments as seg
from lakeq.replay import copier, rules
from lakeq.store.bodies import BodyStore
from lakeq.store.queue_log import DEDUP_TTL_S, RESUME_WINDOW_MS
from lakeq.store.replays import FINAL, Replay, ReplayObjects, ReplayRepo

logger = logging.getLogger("lakeq.replay")
monotonic = time.monotonic  # the copier's clock and pace (tests replace them)
sleep = time.sleep
SELECT_TIMEOUT_MS = 6 * 3_600_000  # a selection job that wrote nothing by then has failed
CHUNK = 100  # manifest rows per cursor write (at most the rate)
LIST_LIMIT, LIST_MAX = 50, 100
SAMPLE_MAX = 20  # a dry run's sample (the job's summary: lakeq_lake.replay.SAMPLE_MAX)
SAMPLE_FIELDS = ("queue", "offset", "id", "key", "produced_at", "size")


class TargetGone(LakeqError):
    """The target topic was deleted while the replay copied."""


# --- views ----------------------------------------------------------------------------------
def view(r: Replay) -> dict:
    out = {"id": r.id, "topic": r.topic, "from": int(r.from_ms), "to": int(r.to_ms), "filter": json.loads(r.filter),
           "target": json.loads(r.target), "rate": int(r.rate), "status": r.status,
           "found": None if r.found is None else int(r.found), "copied": int(r.copied or 0),
           "failed": int(r.failed or 0), "duplicates": int(r.duplicates or 0),
           "created_at": int(r.created_at), "updated_at": int(r.updated_at)}
    if r.dry_run:
        out["dry_run"] = True
        out["sample"] = None if r.sample is None else json.loads(r.sample)
    if r.error:
        out["error"] = r.error
    return out


def _replay_or_404(rid: str) -> Replay:
    r = ReplayRepo.get(rid) if is_name(rid) else None
    if r is None:
        raise NotFound(f"replay '{rid}' does not exist")
    return r


# --- use cases --------------------------------------------------------------------------------
def _source_or_404(name: str) -> None:
    """A ``{"topic"}`` target's source: a topic, or one deleted through the SQS endpoint (its
    tombstone, ``TopicRepo.get_any``): the lake keeps a deleted queue's messages for its 400 days, so a
    queue deleted by mistake can be replayed into another topic. A name never made is 404."""
    from lakeq.store.catalog import TopicRepo

    if TopicRepo.get_any(name) is None:
        raise NotFound(f"topic '{name}' does not exist")


def start(p: Principal, raw: str | None) -> dict:
    """``POST /v1/replays`` → 202 and the replay (``selecting``). API.md's order: 400 → 404 → 403."""
    body = v.json_body(raw)
    target = body.get("target") if isinstance(body, Mapping) else None
    if isinstance(target, Mapping) and len(target) > 1 and {"group", "topic"} <= set(target):
        raise BadRequest("'target' names a group or a topic, not both")
    req = rules.parse_request(body)
    if req.target_topic is not None:
        _source_or_404(req.topic)
        topic_or_404(req.target_topic)
    else:
        topic_or_404(req.topic)
        g = client_or_404(req.target_group, "consumer")
        if not any(covers(t, req.topic) for t in g.topics):  # the group could never read these messages
            raise NotFound(f"consumer group '{req.target_group}' is not granted topic '{req.topic}'")
    require_admin(p)
    rid = f"rp_{uuid.uuid4().hex}"
    from botocore.exceptions import BotoCoreError, ClientError

    from lakeq.store.jobs import start_replay_selection
    try:
        start_replay_selection({"replay_id": rid, "topic": req.topic, "from_ms": str(req.from_ms),
                                "to_ms": str(req.to_ms),
                                "filter": "{}" if req.filter.empty else json.dumps(req.filter.to_json()),
                                **({"dry_run": "true"} if req.dry_run else {})})
    except (ClientError, BotoCoreError) as e:
        raise Unavailable(f"the selection job could not be started ({e}); retry") from None
    now = clock.now()
    js = req.to_json()
    r = Replay(rid, topic=req.topic, from_ms=req.from_ms, to_ms=req.to_ms,
               filter=json.dumps(js["filter"], separators=(",", ":")),
               target=json.dumps(js["target"], separators=(",", ":")), rate=req.rate, status="selecting",
               created_at=now, updated_at=now, cursor=0, copied=0, failed=0, duplicates=0, version=0, live="1",
               dry_run=1 if req.dry_run else None)
    if not ReplayRepo.create(r):  # pragma: no cover - a uuid4 collision
        raise Unavailable("replay id taken; retry")
    return view(r)


def get(p: Principal, rid: str) -> dict:
    r = _replay_or_404(rid)
    require_admin(p)
    return view(r)


def _cursor_of(r: Replay) -> str:
    return f"{int(r.created_at)}:{r.id}"


def list_(p: Principal, params: dict) -> dict:
    """``GET /v1/replays?limit=&next=``: newest first, ``next`` = where the next page starts."""
    limit = v.int_param(params, "limit", 1, LIST_MAX, LIST_LIMIT)
    after = params.get("next")
    key = None
    if after is not None:
        at, _, rid = after.partition(":")
        if not (at.isascii() and at.isdigit() and len(at) <= 16 and is_name(rid)):
            raise BadRequest("'next' must be a cursor from a previous page")
        key = (-int(at), rid)
    require_admin(p)
    items = ReplayRepo.all()
    if key is not None:
        items = [r for r in items if (-int(r.created_at), r.id) > key]
    page = items[:limit]
    out: dict[str, Any] = {"replays": [view(r) for r in page]}
    if len(items) > limit:
        out["next"] = _cursor_of(page[-1])
    return out


def cancel(p: Principal, rid: str) -> dict:
    """``POST /v1/replays/{id}/cancel``: a selecting or copying replay → ``cancelled`` (the copier
    stops at its next chunk; what was copied stays). 409 when it is done or failed; a cancelled
    one is answered as it is."""
    r = _replay_or_404(rid)
    require_admin(p)
    # not backoff.cas: a lost write means the replay moved on (status) and the next read decides; it
    # settles within a round or two, so 5 rounds, no wait
    for _ in range(5):
        if r.status == "cancelled":
            if r.live is not None:  # a cancel cut short before its close (or a copier's record of it):
                _close(r)           # the retry finishes it — the group's marker goes now, not a run later
                r = ReplayRepo.get(rid) or r
            return view(r)
        if r.status in FINAL:
            raise Conflict(f"replay '{rid}' has ended ({r.status})")
        if ReplayRepo.cancel(rid, clock.now()):  # the commit point; the close below is idempotent and
            r = ReplayRepo.get(rid) or r         # finished by a retried cancel or the schedule's next run
            continue
        r = _replay_or_404(rid)
    raise Unavailable("the replay changed too often; retry")  # pragma: no cover


# --- targets --------------------------------------------------------------------------------
def _target(r: Replay) -> tuple[str, str]:
    (kind, name), = json.loads(r.target).items()
    return kind, name


def _begin_target(r: Replay) -> None:
    kind, name = _target(r)
    if kind == "group":
        from lakeq.replay import group_target
        group_target.begin(r.id, r.topic, name)


def _close(r: Replay) -> None:
    """An ended replay still ``live``: tell its target (``group_target.end``, idempotent), then take
    it out of the schedule's index. Run after every ending and by each run for any left over. A
    group target whose marker cannot go yet (the group has entries of the list to settle) stays
    ``live``: each run asks again (two consistent GetItems) until the list is drained."""
    kind, name = _target(r)
    if kind == "group" and not r.dry_run:  # a dry run never began its target: nothing to tell
        from lakeq.replay import group_target
        if group_target.end(r.id, r.topic, name, r.status == "cancelled") is False:
            return
    ReplayRepo.unlive(r.id)


def copy_message(c: copier.Copy, now: int) -> seg.Message:
    """The message a manifest row's copy is: derived id, key, tags and properties kept, the body —
    or the claim of a body kept in the lake bucket (the original's object; the sinks store the copy
    under its own, :meth:`lakeq.store.bodies.BodyStore.stored_copy`)."""
    row = c.row
    claim = row.get("claim")
    claim = json.loads(claim) if isinstance(claim, str) else claim
    props = row.get("properties")
    props = json.loads(props) if isinstance(props, str) else props
    return seg.Message(id=c.id, body="" if claim else row["body"], key=row.get("key"),
                       tags=list(row.get("tags") or []), properties=dict(props or {}), produced_at=now,
                       claim=claim or None)


def topic_sink(name: str) -> Callable[[list[copier.Copy]], int]:
    """``produce`` for a ``{"topic": name}`` target: how many copies were new."""
    from lakeq.common.names import log_of
    from lakeq.store.append import Contended, append_copies
    from lakeq.store.catalog import TopicRepo

    def produce(copies: list[copier.Copy]) -> int:
        t = TopicRepo.get(name)
        if t is None:
            raise TargetGone(f"target topic '{name}' does not exist")
        log, now = log_of(t), clock.now()
        msgs = [BodyStore.stored_copy(log, copy_message(c, now)) for c in copies]
        try:
            return append_copies(log, int(t.queues), msgs, now)
        except Contended:
            raise Unavailable(f"topic '{name}' is too contended; the replay retries") from None
    return produce


def _sink(r: Replay) -> Callable[[list[copier.Copy]], int]:
    kind, name = _target(r)
    if kind == "topic":
        return topic_sink(name)
    from lakeq.replay import group_target
    return group_target.sink(r.id, r.topic, name)


# --- the manifest -----------------------------------------------------------------------------
class Manifest:
    """``read(start, stop)`` over the manifest's parts in order (positions across parts), each row
    with ``"pos"``. A part is streamed: consecutive reads continue the open part; a read elsewhere
    reopens it and skips (memory: one chunk, whatever the part's size)."""

    def __init__(self, parts: Sequence[Mapping[str, Any]],
                 open_part: Callable[[str], Iterator[dict]] = ReplayObjects.rows):
        self.parts, self.open_part = list(parts), open_part
        self.starts, n = [], 0
        for p in self.parts:
            self.starts.append(n)
            n += int(p["rows"])
        self.total = n
        self._it: Iterator[dict] | None = None
        self._at = (-1, -1)  # (part index, next position) of the open iterator

    def read(self, start: int, stop: int) -> list[dict]:
        out: list[dict] = []
        pos = start
        while pos < min(stop, self.total):
            i = max(k for k, s in enumerate(self.starts) if s <= pos and int(self.parts[k]["rows"]) > 0)
            if self._at != (i, pos):
                self._it = self.open_part(self.parts[i]["key"])
                for _ in range(pos - self.starts[i]):
                    next(self._it)
            end = min(stop, self.starts[i] + int(self.parts[i]["rows"]))
            while pos < end:
                row = next(self._it)  # type: ignore[arg-type]
                out.append({**row, "pos": pos})
                pos += 1
            self._at = (i, pos)
        return out


# --- the schedule -----------------------------------------------------------------------------
def _progress(r: Replay) -> copier.Progress:
    p = copier.Progress(found=int(r.found or 0), cursor=int(r.cursor or 0), copied=int(r.copied or 0),
                        duplicates=int(r.duplicates or 0), failed=int(r.failed or 0), version=int(r.version or 0),
                        inflight=r.inflight is None or bool(r.inflight))  # (absent: not known, so maybe)
    if r.status != "copying":  # cancelled (or ended elsewhere): nothing more to copy
        p = copier.Progress(found=p.cursor, cursor=p.cursor, copied=p.copied, duplicates=p.duplicates,
                            failed=p.failed, version=p.version)
    return p


def _found(selection: Mapping) -> int:
    return sum(int(p["rows"]) for p in selection.get("parts") or [])


def _copy_ms(selection: Mapping, r: Replay) -> float:
    """How long copying the selection takes at the replay's rate, at the least."""
    return _found(selection) * 1000 / max(1, int(r.rate or rules.DEFAULT_RATE))


def _select(r: Replay, now: int) -> Replay | None:
    """A selecting replay: its job's outcome, if any. The item as it is after (None: gone)."""
    selection, error = ReplayObjects.outcome(r.id)
    if error is not None:
        msg = str(error.get("error") or "the selection job failed")
        ReplayRepo.finish(r.id, int(r.version), "failed", now, f"selection: {msg}", expect="selecting")
    elif selection is not None and r.dry_run:
        sample = [{k: row.get(k) for k in SAMPLE_FIELDS} for row in (selection.get("sample") or [])[:SAMPLE_MAX]]
        found = int(selection["found"]) if "found" in selection else sum(
            int(p["rows"]) for p in selection.get("parts") or [])
        ReplayRepo.dry_selected(r.id, int(r.version), found, json.dumps(sample, separators=(",", ":")), now)
    elif selection is not None and _copy_ms(selection, r) > rules.MAX_COPY_MS:
        days = _copy_ms(selection, r) / 86_400_000
        ReplayRepo.finish(r.id, int(r.version), "failed", now,
                          f"selection: copying {_found(selection)} message(s) at {int(r.rate or rules.DEFAULT_RATE)}/s "
                          f"would take {days:.1f} days, over {rules.MAX_COPY_MS // 86_400_000} (the manifest "
                          f"expires {rules.SCRATCH_DAYS} days after the selection): raise the rate or narrow the range",
                          expect="selecting")
    elif selection is not None:
        parts = [{"key": p["key"], "rows": int(p["rows"])} for p in selection.get("parts") or []]
        found = sum(p["rows"] for p in parts)
        ReplayRepo.selected(r.id, int(r.version), found, json.dumps(parts, separators=(",", ":")), now)
    elif now - int(r.created_at) > SELECT_TIMEOUT_MS:
        ReplayRepo.finish(r.id, int(r.version), "failed", now,
                          "selection: the job wrote neither selection.json nor error.json in time",
                          expect="selecting")
    return ReplayRepo.get(r.id)


def _copy(r: Replay, budget_s: float) -> Replay | None:
    """Run the copier on a copying replay for at most ``budget_s``; end it when done."""
    rid = r.id
    if int(r.cursor or 0) == 0:  # (again after a crash before the first chunk: begin is idempotent)
        _begin_target(r)
    manifest = Manifest(json.loads(r.parts or "[]"))

    saved_at = [int(r.updated_at)]

    def load() -> copier.Progress:
        cur = ReplayRepo.get(rid)
        if cur is None:
            return copier.Progress(found=0)
        saved_at[0] = int(cur.updated_at)
        return _progress(cur)

    def save(old: copier.Progress, new: copier.Progress) -> bool:
        now = clock.now()
        if ReplayRepo.progress(rid, old.version, new.cursor, new.copied, new.failed, new.duplicates, now,
                               inflight=new.inflight):
            return True
        # lost: a cancel came (record the chunk in hand on the cancelled item), or another copier
        # moved the cursor (continue from its progress)
        ReplayRepo.progress(rid, old.version, new.cursor, new.copied, new.failed, new.duplicates, now,
                            status="cancelled", inflight=False)
        return False

    def stale(p: copier.Progress) -> bool:
        """A topic target forgets a copy's id DEDUP_TTL_S after it was written, and the chunk in
        flight was produced after the save of ``p`` (at ``updated_at``): safe while well within
        (the redrive runner's rule)."""
        return mp.resume_refused(p.inflight, saved_at[0], clock.now(), RESUME_WINDOW_MS)

    rate = int(r.rate)

    def claim(n: int) -> float:
        """The replay's sending slot for ``n`` rows (shared by every run: the rate holds across
        overlapping runs); 0, or the seconds until it frees."""
        now = clock.now()
        if ReplayRepo.claim_slot(rid, now, mp.slot(0, now, n, rate)[1]):
            return 0.0
        at = ReplayRepo.slot_free_at(rid)
        return max(1, (at or now) - now) / 1000

    kind, target = _target(r)
    try:
        copier.run(r.topic, load, save, manifest.read, _sink(r), rate, chunk=CHUNK, clock=monotonic,
                   sleep=sleep, budget_s=budget_s, stale=stale if kind == "topic" else None, claim=claim)
    except TargetGone as e:
        cur = ReplayRepo.get(rid)
        if cur is not None and cur.status == "copying":
            ReplayRepo.finish(rid, int(cur.version), "failed", clock.now(), str(e))
        return ReplayRepo.get(rid)
    except copier.ResumeRefused as e:
        p = e.progress
        span = rules.next_chunk(p.found, p.cursor, min(CHUNK, max(1, int(r.rate))))
        hours = (clock.now() - saved_at[0]) / 3_600_000
        ReplayRepo.finish(rid, p.version, "failed", clock.now(),
                          f"resume refused: the copier stopped while copying rows {span.start}-{span.stop - 1} "
                          f"and resumed {hours:.1f} h later, past the {DEDUP_TTL_S // 3600} h in which target "
                          f"topic '{target}' drops a copy made twice by its id: copying them again could "
                          f"duplicate them (copied {p.copied} of {p.found}; replay the rest with a new replay)")
        return ReplayRepo.get(rid)
    cur = ReplayRepo.get(rid)
    if cur is not None and cur.status == "copying" and int(cur.cursor or 0) >= int(cur.found or 0):
        ReplayRepo.finish(rid, int(cur.version), "done", clock.now())
        cur = ReplayRepo.get(rid)
    return cur


def run(rid: str, budget_ms: int) -> dict | None:
    """One replay's turn: its selection's outcome, then copying for at most ``budget_ms``."""
    r = ReplayRepo.get(rid)
    if r is None:
        return None
    if r.status == "selecting":
        r = _select(r, clock.now())
    if r is not None and r.status == "copying" and budget_ms > 0:
        r = _copy(r, budget_ms / 1000)
    if r is not None and r.status in FINAL and r.live:
        _close(r)
        r = ReplayRepo.get(rid) or r
    return None if r is None else view(r)


def run_all(budget_ms: int, progress=None) -> dict:
    """The schedule's invocation: every live replay in turn (oldest id first), each given an equal
    share of the time left. A replay whose turn raises is logged and counted in ``errors``, and the
    next one still gets its turn: a replay that keeps failing (a manifest part gone, a store error)
    does not stop the ones after it; the next invocation tries it again. ``progress``: called with
    each replay's view after its turn (the function prints it as a metric)."""
    t0 = monotonic()
    ids = ReplayRepo.live_ids()
    out: dict[str, int] = {"replays": len(ids)}
    for i, rid in enumerate(ids):
        left = budget_ms - (monotonic() - t0) * 1000
        with counted(out, logger, "replay %s: its turn failed; the next invocation tries it again", rid):
            got = run(rid, int(max(0, left) / (len(ids) - i)))
            if got is not None and progress is not None:
                progress(got)
            status = got["status"] if got else "gone"
            out[status] = out.get(status, 0) + 1
    return out
