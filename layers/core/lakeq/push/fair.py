"""Fair scheduling of push endpoints inside one PushFunction run (issue 30 item 6): pure (threads
and a condition variable, no store).

A run's endpoints belong to clients (a subscription's endpoint to its subscriber, a group's to the
group). :class:`FairQueue` hands them to the run's worker threads round-robin by client, and lets
one client hold at most ``cap`` workers while another client has an endpoint waiting: so behind
any number of one client's endpoints, each other client's first endpoint is started in the first
wave (among the first ``number of clients`` taken), and a client whose endpoints never answer
holds ``cap`` workers, not the pool. With nobody else waiting a client may use every worker
(the pool is not left idle).

>>> q = FairQueue([("a", 1), ("a", 2), ("a", 3), ("b", 9)], cap=1)
>>> q.take(), q.take()
(('a', 1), ('b', 9))
>>> q.done("b"); q.take()  # b has nothing waiting: a may take a second worker
('a', 2)
"""
from __future__ import annotations

import threading
from collections import Counter, deque
from typing import Hashable, TypeVar

J = TypeVar("J")


class FairQueue:
    """Jobs ``[(owner, job)]`` (any order) taken by :meth:`take`, given back by :meth:`done`."""

    def __init__(self, jobs: list[tuple[Hashable, J]], cap: int):
        if cap < 1:
            raise ValueError("cap must be at least 1")
        self.cap = cap
        self._pending: dict[Hashable, deque] = {}
        for owner, job in jobs:
            self._pending.setdefault(owner, deque()).append(job)
        self._owners = list(self._pending)  # round-robin order: first appearance
        self._next = 0
        self._running: Counter = Counter()
        self._cv = threading.Condition()

    def _pick(self) -> Hashable | None:
        n = len(self._owners)
        waiting = [o for o in self._owners if self._pending[o]]
        for i in range(n):
            o = self._owners[(self._next + i) % n]
            if not self._pending[o]:
                continue
            if self._running[o] < self.cap or all(w == o for w in waiting):
                self._next = (self._owners.index(o) + 1) % n
                return o
        return None

    def take(self) -> tuple[Hashable, J] | None:
        """The next ``(owner, job)``; waits while every waiting owner is at its cap; None when no
        job is left."""
        with self._cv:
            while True:
                o = self._pick()
                if o is not None:
                    self._running[o] += 1
                    return o, self._pending[o].popleft()
                if not any(self._pending.values()):
                    return None
                self._cv.wait()

    def done(self, owner: Hashable) -> None:
        with self._cv:
            self._running[owner] -= 1
            self._cv.notify_all()
