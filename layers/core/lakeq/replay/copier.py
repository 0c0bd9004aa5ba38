"""The copier's loop (issue 18.1), pure: storage and produce are passed in, so the same loop runs on
DynamoDB + the produce use case (not wired yet: docs/design.md "Replay") and in the tests.

A replay's manifest is a sequence of rows in per-queue order; the copier copies it in chunks from
``Progress.cursor`` (the number of rows already copied *and recorded*): produce the chunk's copies
with ids derived from ``(source topic, queue, offset)``, then move the cursor with a conditional
write (``save(old, new)`` true only if the stored progress still is ``old``). A crash between the
produce and the cursor write makes the next run copy that chunk again with the same ids, which the
produce's id dedup drops; a lost conditional write (another copier moved the cursor) makes this
one reload and continue from the stored cursor. Pacing: never faster than ``rate`` rows/s, across
every run of the replay: each chunk first claims the replay's sending slot (``claim``,
:mod:`lakeq.store.slots`), so two overlapping runs (a schedule's event delivered twice) share the rate.

**A resume after the dedup window.** The produce's id dedup forgets an id 24 h after it was written,
so a chunk copied again later than that would be copied twice. The stored progress says whether a
chunk may be in flight (``Progress.inflight``: set by the write after which the copier produces the
chunk at ``cursor`` — every cursor write while not done, or a write of its own at the start of a
run — and cleared by one write when a run stops on its time budget). A run whose loaded progress is
in flight asks ``stale(progress)`` (the caller knows when that write was made and the target's
window); true → :class:`ResumeRefused`, nothing produced: the caller fails the replay, saying so.
A clean stop leaves nothing in flight, so a resume after any pause is safe; a target whose own
records never expire (a group's list: its ``rpos``) passes no ``stale``.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from lakeq.common.errors import LakeqError
from lakeq.replay.rules import copy_id, next_chunk, pace_seconds


@dataclass(frozen=True)
class Progress:
    found: int
    cursor: int = 0  # manifest rows done (copied, or failed for good)
    copied: int = 0  # manifest rows whose copy exists (produced now, or earlier and dropped as a duplicate)
    duplicates: int = 0  # copies the produce dropped by id: a chunk re-copied after a crash
    failed: int = 0  # rows that cannot be copied (no body)
    version: int = 0  # bumped by every save: the conditional write's expected value
    inflight: bool = False  # the chunk at ``cursor`` may have been produced after this save

    @property
    def done(self) -> bool:
        return self.cursor >= self.found


class ResumeRefused(LakeqError):
    """A chunk may have been produced before a stop, and resuming now could copy it twice unseen."""

    def __init__(self, progress: Progress):
        super().__init__(f"a chunk from row {progress.cursor} may have been produced before the copier stopped")
        self.progress = progress


@dataclass(frozen=True)
class Copy:
    id: str
    row: Mapping[str, Any]


def run(topic: str, load: Callable[[], Progress], save: Callable[[Progress, Progress], bool],
        read: Callable[[int, int], Sequence[Mapping[str, Any]]],
        produce: Callable[[list[Copy]], int], rate: int, chunk: int = 100,
        clock: Callable[[], float] = lambda: 0.0, sleep: Callable[[float], None] = lambda s: None,
        budget_s: float | None = None, stale: Callable[[Progress], bool] | None = None,
        claim: Callable[[int], float] | None = None) -> Progress:
    """Copy until done (or ``budget_s`` of ``clock`` elapsed: a Lambda's time left); return the
    stored progress. ``read(start, stop)`` = manifest rows ``[start, stop)``; ``produce(copies)`` =
    how many were new (the rest were dropped as duplicates by id). ``stale(p)``: true when a chunk
    produced before the save of ``p`` may no longer be recognised by the target (raises
    :class:`ResumeRefused` before anything is produced). ``claim(n)``: take the replay's shared
    sending slot for a chunk of ``n`` rows — 0: go now; more: seconds until it frees (then the stored
    progress is read again, as another run copied meanwhile). With it the pace is the slot's, kept
    across every run of the replay (two overlapping runs copy at ``rate`` together); without it, this
    run's own pace."""
    p = load()
    if not p.done and p.inflight and stale is not None and stale(p):
        raise ResumeRefused(p)
    t0, sent = clock(), 0
    while not p.done:
        if budget_s is not None and clock() - t0 >= budget_s:
            if p.inflight:  # a clean stop: nothing in flight (the next run may come at any time)
                idle = replace(p, inflight=False, version=p.version + 1)
                p = idle if save(p, idle) else load()
            break
        if not p.inflight:  # say so before producing the chunk at the cursor
            nxt = replace(p, inflight=True, version=p.version + 1)
            p = nxt if save(p, nxt) else load()
            continue
        span = next_chunk(p.found, p.cursor, min(chunk, max(1, rate)))
        if claim is not None:
            wait = claim(span.stop - span.start)
            if wait > 0:  # another run holds the slot: wait for it (not past the budget), then reload
                left = wait if budget_s is None else budget_s - (clock() - t0)
                sleep(max(0.0, min(wait, left)))
                p = load()
                continue
        rows = read(span.start, span.stop)
        copies = [Copy(copy_id(topic, int(r["queue"]), int(r["offset"]), int(r.get("inc") or 0)), r)
                  for r in rows if r.get("body") is not None]
        new = produce(copies) if copies else 0
        nxt = replace(p, cursor=span.stop, copied=p.copied + len(copies), duplicates=p.duplicates + len(copies) - new,
                      failed=p.failed + len(rows) - len(copies), version=p.version + 1,
                      inflight=span.stop < p.found)
        if not save(p, nxt):
            p = load()  # someone else moved it: continue from theirs
            continue
        p = nxt
        sent += len(rows)
        wait = 0.0 if claim is not None else pace_seconds(sent, rate, clock() - t0)
        if wait > 0:
            sleep(wait)
    return p
