"""The one backoff of the core: how long a retry waits after losing a race or being throttled.

Exponential with a cap and *full jitter* (AWS Architecture Blog, "Exponential Backoff And
Jitter"): attempt ``n`` (0-based) waits a uniform random time in ``[0, min(cap, base * 2**n)]``.
Full jitter spreads racing writers apart, so the next round usually has one winner.

Defaults (:data:`BASE_S`, :data:`CAP_S`) suit conditional writes on one item or one queue head
(a few ms, at most 50 ms); callers waiting on a throttled table pass a larger ``base``/``cap``.
Tests that want no waiting patch :func:`sleep` here (the one place every retry sleeps through).

The one compare-and-set loop is :func:`cas` here, bounded by the one :data:`CAS_ATTEMPTS`: a round
reads, decides and writes conditionally; a lost round (:data:`RETRY`) waits :func:`sleep` and runs
again, up to :data:`CAS_ATTEMPTS` rounds, then the caller's ``on_exhausted`` answers.

>>> all(0 <= delay(n) <= CAP_S for n in range(100))
True
>>> delay(3, rand=lambda a, b: b)  # the upper bound: base * 2**3
0.016
>>> delay(50, base=0.01, cap=1.0, rand=lambda a, b: b)
1.0
"""
from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Callable, NoReturn, TypeVar

from lakeq.common.errors import Unavailable

T = TypeVar("T")

CAS_ATTEMPTS = 40  # rounds of a compare-and-set before it gives up (the one bound; see cas)
BASE_S = 0.002  # first retry's upper bound
CAP_S = 0.05    # no retry waits longer

_MAX_DOUBLINGS = 30  # 2**30 * any sane base is past any cap: keeps the float finite


def delay(attempt: int, base: float = BASE_S, cap: float = CAP_S,
          rand: Callable[[float, float], float] = random.uniform) -> float:
    """Seconds to wait before retry ``attempt`` (0-based): uniform in ``[0, min(cap, base * 2**attempt)]``."""
    return rand(0, min(cap, base * 2 ** min(max(attempt, 0), _MAX_DOUBLINGS)))


def sleep(attempt: int, base: float = BASE_S, cap: float = CAP_S) -> None:
    """Wait :func:`delay` seconds."""
    time.sleep(delay(attempt, base, cap))


@dataclass(frozen=True)
class Retry:
    """What a :func:`cas` round returns when it lost (its conditional write failed): run another
    round, after :func:`sleep` when ``wait`` (else at once: the lost round still made progress)."""

    wait: bool = True


RETRY = Retry()               # lost: wait, then read again
AT_ONCE = Retry(wait=False)   # lost, but made progress (e.g. answered ids recorded meanwhile): go on now


def _contended() -> NoReturn:
    raise Unavailable("the item is too contended; retry")


def cas(attempt: Callable[[int], "T | Retry"], attempts: int = CAS_ATTEMPTS,
        on_exhausted: Callable[[], T] = _contended, base: float = BASE_S, cap: float = CAP_S) -> T:
    """The one compare-and-set loop: ``attempt(n)`` for rounds ``n = 0, 1, ...`` until it returns
    anything but a :class:`Retry` (that is the answer; an exception from it propagates). After
    lost round ``n`` it waits :func:`sleep` ``(n, base, cap)`` unless the round said
    :data:`AT_ONCE` or it was the last one. After ``attempts`` lost rounds, ``on_exhausted()``
    answers: it raises (default: 503 :class:`~lakeq.common.errors.Unavailable`) or returns the
    caller's quiet give-up value. ``attempt`` reads fresh when ``n > 0`` (someone wrote meanwhile).

    >>> rounds = []
    >>> cas(lambda n: rounds.append(n) or (RETRY if n < 2 else "won"), base=0, cap=0), rounds
    ('won', [0, 1, 2])
    >>> cas(lambda n: RETRY, attempts=3, on_exhausted=lambda: "gave up", base=0, cap=0)
    'gave up'
    """
    for n in range(attempts):
        out = attempt(n)
        if not isinstance(out, Retry):
            return out
        if out.wait and n + 1 < attempts:
            sleep(n, base, cap)
    return on_exhausted()
