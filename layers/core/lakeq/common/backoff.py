"""The one backoff of the core: how long a retry waits after losing a race or being throttled.

Exponential with a cap and *full jitter* (AWS Architecture Blog, "Exponential Backoff And
Jitter"): attempt ``n`` (0-based) waits a uniform random time in ``[0, min(cap, base * 2**n)]``.
Full jitter spreads racing writers apart, so the next round usually has one winner.

Defaults (:data:`BASE_S`, :data:`CAP_S`) suit conditional writes on one item or one queue head
(a few ms, at most 50 ms); callers waiting on a throttled table pass a larger ``base``/``cap``.
Tests that want no waiting patch :func:`sleep` here (the one place every retry sleeps through).

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
from typing import Callable

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
