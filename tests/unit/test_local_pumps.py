"""The local stack's drain route drains every stream pump (infra.local.streams.Pumps): a push run
started by the latency-bound pump was still in flight after a drain of the other pump alone and
pulled a message produced after it (tests/e2e/test_push_group_stream_e2e.py, once on a loaded CI)."""
from infra.local.streams import Pumps


class FakePump:
    """Holds ``queue`` records; a drain delivers them all, and each may make ``feeds`` another
    pump's records (a handler writing a table another pump reads)."""

    def __init__(self, name, log, ok=True):
        self.name, self.log, self.ok = name, log, ok
        self.queue: list = []
        self.feeds = None

    def drain(self, timeout):
        n = len(self.queue)
        for rec in self.queue:
            self.log.append((self.name, rec))
            if self.feeds is not None and rec < 3:
                self.feeds.queue.append(rec + 1)
        self.queue = []
        return self.ok, n


def test_every_pump_is_drained_until_no_round_moves_a_record():
    log: list = []
    a, b = FakePump("a", log), FakePump("b", log)
    a.feeds, b.feeds = b, a
    b.queue = [0]  # the latency-bound pump's record (a push), not the first pump's
    assert Pumps(a, None, b).drain(5) == (True, 4)
    assert log == [("b", 0), ("a", 1), ("b", 2), ("a", 3)]
    assert a.queue == b.queue == []


def test_a_pump_that_does_not_drain_fails_the_drain():
    log: list = []
    a, b = FakePump("a", log), FakePump("b", log, ok=False)
    b.queue = [7, 8]
    assert Pumps(a, b).drain(5) == (False, 2)
