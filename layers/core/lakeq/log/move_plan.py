"""Moving messages from one log to others at a rate, with progress: the rules of a redrive (dead
letters back to their source, :mod:`lakeq.redrive.service`). Pure, and generic enough for any
copier that walks a source log queue by queue (ids derived from the source position, a rate, a
progress record of per-queue positions up to targets fixed at the start).

- :func:`move_id`: the copy's message id, derived from the source log, queue and offset only, so
  a retried or resumed copy is recognised by the destination's dedup items and never stored twice;
- :func:`destination`: where a message goes (the chosen topic, else the source its dead-letter
  record names);
- :class:`Progress`: positions ``pos`` → targets ``end`` per source queue (``remaining``,
  ``next_queue``, ``advance``);
- :func:`batch_size`, :func:`slot`: the rate (messages per second) as a schedule of batches: a
  batch of ``n`` starting at ``t`` lets the next start at ``t + n·1000/rate``, never earlier, with
  no credit saved up while idle, so over any interval at most ``rate × seconds + one batch`` move.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

RUNNING, CANCELLING, COMPLETED, CANCELLED, FAILED = "running", "cancelling", "completed", "cancelled", "failed"
FINAL = (COMPLETED, CANCELLED, FAILED)
MIN_RATE, MAX_RATE, DEFAULT_RATE = 1, 500, 100
MAX_BATCH = 50  # messages read and copied per step (one progress write each)
BATCH_WINDOW_MS = 200  # a batch is what the rate allows in this long (at least one message)


def move_id(log: str, queue: int, offset: int) -> str:
    """The moved copy's id: the same for every attempt to move that message.

    >>> move_id("dlq", 0, 5) == move_id("dlq", 0, 5) != move_id("dlq", 0, 6) != move_id("dlq!1", 0, 5)
    True
    >>> move_id("dlq", 0, 5)[:3], len(move_id("dlq", 0, 5))
    ('mv-', 43)
    """
    h = hashlib.sha256(f"move\n{log}\n{queue}\n{offset}".encode("utf-8")).hexdigest()
    return f"mv-{h[:40]}"


def destination(msg: dict, chosen: str | None) -> str | None:
    """The topic a message of the source goes to: ``chosen``, else the source topic its
    dead-letter record names; None when neither (it is not a dead-lettered copy).

    >>> destination({"dead_letter": {"topic": "orders"}}, None), destination({}, "x"), destination({}, None)
    ('orders', 'x', None)
    """
    if chosen is not None:
        return chosen
    dl = msg.get("dead_letter")
    t = dl.get("topic") if isinstance(dl, dict) else None
    return t if isinstance(t, str) and t else None


@dataclass(frozen=True)
class Progress:
    """Per source queue: the next offset to move (``pos``) and where to stop (``end``, the head
    when the move started: messages arriving later are not moved by it)."""

    pos: dict[int, int] = field(default_factory=dict)
    end: dict[int, int] = field(default_factory=dict)

    def remaining(self) -> int:
        """Messages left to move.

        >>> Progress({0: 3, 1: 9}, {0: 5, 1: 9}).remaining()
        2
        """
        return sum(max(0, e - self.pos.get(q, 0)) for q, e in self.end.items())

    def next_queue(self) -> int | None:
        """The lowest queue with something left (None: done).

        >>> Progress({0: 5, 1: 2}, {0: 5, 1: 4}).next_queue(), Progress({0: 5}, {0: 5}).next_queue()
        (1, None)
        """
        for q in sorted(self.end):
            if self.pos.get(q, 0) < self.end[q]:
                return q
        return None

    def advance(self, queue: int, to: int) -> "Progress":
        """``queue``'s position moved to ``to`` (never backwards, never past its end)."""
        pos = dict(self.pos)
        pos[queue] = max(pos.get(queue, 0), min(to, self.end.get(queue, to)))
        return Progress(pos, dict(self.end))

    def dump(self) -> tuple[str, str]:
        return (json.dumps({str(q): o for q, o in sorted(self.pos.items())}, separators=(",", ":")),
                json.dumps({str(q): o for q, o in sorted(self.end.items())}, separators=(",", ":")))

    @staticmethod
    def load(pos: str | None, end: str | None) -> "Progress":
        """The stored form back.

        >>> Progress.load(*Progress({0: 1}, {0: 4, 1: 2}).dump())
        Progress(pos={0: 1}, end={0: 4, 1: 2})
        """
        return Progress({int(q): int(o) for q, o in json.loads(pos or "{}").items()},
                        {int(q): int(o) for q, o in json.loads(end or "{}").items()})


def batch_size(rate: int, left: int) -> int:
    """How many messages one step moves: what ``rate`` allows in :data:`BATCH_WINDOW_MS` (at least
    one, at most :data:`MAX_BATCH`), and no more than ``left``.

    >>> batch_size(1, 100), batch_size(100, 100), batch_size(500, 100), batch_size(500, 3)
    (1, 20, 50, 3)
    """
    return max(0, min(left, MAX_BATCH, max(1, rate * BATCH_WINDOW_MS // 1000)))


def resume_refused(crashed: bool, last_write: int, now: int, window_ms: int) -> bool:
    """Whether a runner that finds its predecessor's lease still set (``crashed``: it neither
    released nor finished) must not go on. The batch in flight when it died was copied after
    ``last_write`` (its lease or its last progress write), so the copies' ids are remembered by the
    destination's dedup table until at least ``last_write`` + its TTL; past ``window_ms`` (the TTL
    less a margin) a second copy would no longer be caught.

    >>> H = 3_600_000
    >>> resume_refused(True, 0, 22 * H, 23 * H), resume_refused(True, 0, 23 * H, 23 * H)
    (False, True)
    >>> resume_refused(False, 0, 100 * H, 23 * H)  # a clean stop: any pause resumes
    False
    """
    return crashed and now - last_write >= window_ms


def slot(next_at: int, now: int, n: int, rate: int) -> tuple[int, int]:
    """A batch of ``n`` may start at ``start = max(now, next_at)``; the next one at
    ``start + n·1000/rate`` (ms, rounded up). Returns (start, next_at).

    >>> slot(0, 1000, 20, 100), slot(1500, 1000, 20, 100), slot(0, 1000, 1, 3)
    ((1000, 1200), (1500, 1700), (1000, 1334))
    """
    start = max(now, next_at)
    return start, start + -(-n * 1000 // rate)
