"""The one wall clock of the core (milliseconds since the epoch). Pure.

Every use case reads time through :func:`now` looked up on this module, so a test fixes time in one
place (``monkeypatch.setattr(lakeq.common.clock, "now", fake)``) instead of patching a clock per module.
"""
from __future__ import annotations

import time
from typing import Callable


def system_ms() -> int:
    """Wall-clock milliseconds since the epoch.

    >>> system_ms() > 1_700_000_000_000
    True
    """
    return int(time.time() * 1000)


now: Callable[[], int] = system_ms
