"""The copier's loop (issue 18.1), pure: storage and produce are passed in, so the same loop runs on
DynamoDB + the produce use case (not wired yet: docs/design.md "Replay") and in the tests.

A replay's manifest is a sequence of rows in per-queue order; the copier copies it in chunks from
``Progress.cursor`` (the number of rows already copied *and recorded*): produce the chunk's copies
with ids derived from ``(source topic, queue, offset)``, then move the cursor with a conditional
write (``save(old, new)`` true only if the stored progress still is ``old``). A crash between the
produce and the cursor write makes the next run copy that chunk again with the same ids, which the
produce's id dedup drops; a lost conditional write (another copier moved the cursor) makes this
one reload and continue from the stored cursor. Pacing: never faster than ``rate`` rows/s.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from lakeq.replay.rules import copy_id, next_chunk, pace_seconds


@dataclass(frozen=True)
class Progress:
    found: int
    cursor: int = 0  # manifest rows done (copied, or failed for good)
    copied: int = 0  # manifest rows whose copy exists (produced now, or earlier and dropped as a duplicate)
    duplicates: int = 0  # copies the produce dropped by id: a chunk re-copied after a crash
    failed: int = 0  # rows that cannot be copied (no body)
    version: int = 0  # bumped by every save: the conditional write's expected value

    @property
    def done(self) -> bool:
        return self.cursor >= self.found


@dataclass(frozen=True)
class Copy:
    id: str
    row: Mapping[str, Any]


def run(topic: str, load: Callable[[], Progress], save: Callable[[Progress, Progress], bool],
        read: Callable[[int, int], Sequence[Mapping[str, Any]]],
        produce: Callable[[list[Copy]], int], rate: int, chunk: int = 100,
        clock: Callable[[], float] = lambda: 0.0, sleep: Callable[[float], None] = lambda s: None,
        budget_s: float | None = None) -> Progress:
    """Copy until done (or ``budget_s`` of ``clock`` elapsed: a Lambda's time left); return the
    stored progress. ``read(start, stop)`` = manifest rows ``[start, stop)``; ``produce(copies)`` =
    how many were new (the rest were dropped as duplicates by id)."""
    p = load()
    t0, sent = clock(), 0
    while not p.done:
        if budget_s is not None and clock() - t0 >= budget_s:
            break
        span = next_chunk(p.found, p.cursor, min(chunk, max(1, rate)))
        rows = read(span.start, span.stop)
        copies = [Copy(copy_id(topic, int(r["queue"]), int(r["offset"])), r)
                  for r in rows if r.get("body") is not None]
        new = produce(copies) if copies else 0
        nxt = replace(p, cursor=span.stop, copied=p.copied + len(copies), duplicates=p.duplicates + len(copies) - new,
                      failed=p.failed + len(rows) - len(copies), version=p.version + 1)
        if not save(p, nxt):
            p = load()  # someone else moved it: continue from theirs
            continue
        p = nxt
        sent += len(rows)
        wait = pace_seconds(sent, rate, clock() - t0)
        if wait > 0:
            sleep(wait)
    return p
