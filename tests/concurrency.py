"""Forcing a race in a test: both requests read before either writes.

:class:`FirstCallsMeet` wraps a read (a repository's count, say) so that each thread's first call
returns only once ``parties`` threads have made theirs: the requests then all decide on the same
value, and only the conditional write can tell them apart. ``broken`` says whether the meeting
failed (the test's premise did not hold). The barrier waits up to 60 s: it is released in
milliseconds, but a loaded machine may take seconds to start the other thread (10 s broke once).
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Iterable


class FirstCallsMeet:
    def __init__(self, real: Callable[..., Any], parties: int = 2, timeout: float = 60.0):
        self.real = real
        self.barrier = threading.Barrier(parties, timeout=timeout)
        self._waited: set[int] = set()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        out = self.real(*args, **kwargs)
        me = threading.get_ident()
        if me not in self._waited:  # each thread's first call waits for the others'
            self._waited.add(me)
            try:
                self.barrier.wait()
            except threading.BrokenBarrierError:
                pass
        return out

    @property
    def broken(self) -> bool:
        return self.barrier.broken


def in_threads(fn: Callable[[Any], Any], items: Iterable[Any]) -> None:
    """``fn(item)`` for each item, each in its own thread, all started before any is joined; returns
    when every one has ended (what a test's requests at once are, with :class:`FirstCallsMeet`)."""
    threads = [threading.Thread(target=fn, args=(item,)) for item in items]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
