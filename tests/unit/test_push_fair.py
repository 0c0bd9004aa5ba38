"""The fair schedule of a push run (issue 30 item 6): round-robin by client, at most ``cap`` workers
per client while another client waits, the pool kept busy when nobody else does."""
from __future__ import annotations

import threading

import pytest

from lakeq.push.fair import FairQueue


def test_behind_a_hundred_endpoints_of_one_client_another_clients_is_taken_second():
    q = FairQueue([("hostile", i) for i in range(100)] + [("healthy", "h")], cap=4)
    taken = [q.take() for _ in range(2)]
    assert taken == [("hostile", 0), ("healthy", "h")]


def test_a_client_holds_at_most_cap_workers_while_another_waits():
    q = FairQueue([("a", i) for i in range(10)] + [("b", i) for i in range(10)] + [("c", 0)], cap=2)
    first = [q.take()[0] for _ in range(5)]
    assert first == ["a", "b", "c", "a", "b"]
    assert q._pick() is None  # a and b at their cap, both waiting: nobody may take a third
    got = []
    t = threading.Thread(target=lambda: got.append(q.take()))
    t.start()
    t.join(0.2)
    assert got == []          # the sixth worker waits…
    q.done("c")
    t.join(0.2)
    assert got == []          # …c has nothing left: still a and b at their cap
    q.done("a")
    t.join(5)
    assert got == [("a", 2)]  # a worker of a came back: a takes its next


def test_with_nobody_else_waiting_one_client_may_use_every_worker():
    q = FairQueue([("a", i) for i in range(6)] + [("b", 0)], cap=1)
    assert [q.take() for _ in range(7)] == [("a", 0), ("b", 0)] + [("a", i) for i in range(1, 6)]
    assert q.take() is None


def test_cap_must_be_positive():
    with pytest.raises(ValueError):
        FairQueue([], cap=0)
