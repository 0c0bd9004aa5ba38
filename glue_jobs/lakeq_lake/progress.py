"""A progress bar for a local job: a thread polls Spark's status tracker and redraws one line on
stderr with the running stages' completed / total tasks (Spark's own console bar prints one line
per stage and is off in the jobs' sessions). Off on Glue, where the job's progress is in its logs
and the Spark UI."""
from __future__ import annotations

import sys
import threading
import time
from contextlib import contextmanager


def bar(done: int, total: int, width: int = 30) -> str:
    """``[#########---------]``: ``done`` of ``total`` in ``width`` characters.

    >>> bar(1, 4, 8)
    '[##------]'
    """
    n = 0 if total <= 0 else min(width, done * width // total)
    return "[" + "#" * n + "-" * (width - n) + "]"


@contextmanager
def progress(spark, label: str, enabled: bool = True, every_s: float = 0.5, out=None):
    """Draw ``label [bar] done/total tasks (stages …) t s`` while the block runs; one final line."""
    out = out or sys.stderr
    if not enabled:
        yield
        return
    sc, stop, t0 = spark.sparkContext, threading.Event(), time.perf_counter()
    seen: dict[int, tuple[int, int]] = {}

    def draw(final: bool = False) -> None:
        st = sc.statusTracker()
        for sid in st.getActiveStageIds():
            info = st.getStageInfo(sid)
            if info is not None:
                seen[sid] = (info.numCompletedTasks, info.numTasks)
        done = sum(d for d, _ in seen.values())
        total = sum(t for _, t in seen.values())
        if final:
            done = total
        out.write(f"\r{label} {bar(done, total)} {done}/{total} tasks, {len(seen)} stages, "
                  f"{time.perf_counter() - t0:5.1f} s" + ("\n" if final else ""))
        out.flush()

    def loop() -> None:
        while not stop.wait(every_s):
            try:
                draw()
            except Exception:  # noqa: BLE001 - a progress line must never fail the job
                pass

    th = threading.Thread(target=loop, daemon=True, name="lakeq-progress")
    th.start()
    try:
        yield
    finally:
        stop.set()
        th.join()
        try:
            draw(final=sys.exc_info()[0] is None)  # a failed block keeps its last real count
        except Exception:  # noqa: BLE001
            pass
