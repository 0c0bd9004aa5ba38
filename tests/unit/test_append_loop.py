"""Issue 15 item 3 (one append-with-retry loop): :func:`lakeq.store.append.append_at_head` against a fake
LogRepo — lost races plan again at the fresh head, recorded ids are answered, the queue gone stops,
40 lost races in a row give up with the items left."""
from __future__ import annotations

import pytest

from lakeq.common import backoff
from lakeq.log.produce_plan import Append
from lakeq.store import append as A
from lakeq.store.writes import CONDITION_FAILED, TransactionFailed


class FakeLog:
    def __init__(self, head, failures, bump_failures=0):
        self.head_at, self.failures, self.calls = head, list(failures), []
        self.bump_failures, self.bumps = bump_failures, []

    def bump_change(self, log, now):
        self.bumps.append(log)
        if self.bump_failures:
            self.bump_failures -= 1
            raise RuntimeError("throttled (injected)")
        return True

    def head(self, log, queue, fresh=False, past=None):
        self.calls.append(("head", fresh) if past is None else ("head", fresh, past))
        return self.head_at

    def append(self, log, queue, base, part, now):
        self.calls.append(("append", base, [k for k, _ in part.dedup]))
        if self.failures:
            reasons = self.failures.pop(0)
            self.head_at += 1  # someone else appended
            raise TransactionFailed(reasons)
        self.head_at = base + len(part.dedup)


def plan_two(items, base):
    """Up to two items per write, each with its dedup key."""
    chunk = items[:2]
    return Append([], [(k, base + i) for i, k in enumerate(chunk)]), len(chunk)


@pytest.fixture(autouse=True)
def no_sleep(monkeypatch):
    slept = []
    monkeypatch.setattr(backoff.time, "sleep", slept.append)
    return slept


def test_writes_in_order_and_retries_a_lost_race_at_the_fresh_head(monkeypatch, no_sleep):
    fake = FakeLog(5, [[CONDITION_FAILED, None, None]])
    monkeypatch.setattr(A, "LogRepo", fake)
    written = []
    assert A.append_at_head("t", 0, ["a", "b", "c"], 0, plan_two, lambda done, _p: written.append(done))
    assert written == [["a", "b"], ["c"]]
    assert fake.calls == [("head", False), ("append", 5, ["a", "b"]), ("head", True), ("append", 6, ["a", "b"]),
                          ("head", False), ("append", 8, ["c"])]
    assert len(no_sleep) == 1


def test_ids_recorded_meanwhile_are_answered_and_not_written_again(monkeypatch, no_sleep):
    fake = FakeLog(0, [[CONDITION_FAILED, None, CONDITION_FAILED]])  # head moved and "b" was recorded
    monkeypatch.setattr(A, "LogRepo", fake)
    answered = []

    def recorded(items, keys):
        answered.extend(keys)
        return [i for i in items if i not in keys]
    assert A.append_at_head("t", 0, ["a", "b"], 0, plan_two, on_recorded=recorded)
    assert answered == ["b"] and fake.calls[-1] == ("append", 1, ["a"]) and no_sleep == []


def test_a_gone_queue_stops(monkeypatch):
    fake = FakeLog(None, [])
    monkeypatch.setattr(A, "LogRepo", fake)
    assert A.append_at_head("t", 0, ["a"], 0, plan_two) is False


def test_gives_up_after_the_attempts_with_the_items_left(monkeypatch):
    fake = FakeLog(0, [[CONDITION_FAILED]] * 100)
    monkeypatch.setattr(A, "LogRepo", fake)
    with pytest.raises(A.Contended) as e:
        A.append_at_head("t", 0, ["a", "b", "c"], 0, plan_two)
    assert e.value.remaining == ["a", "b", "c"] and isinstance(e.value.cause, TransactionFailed)
    assert sum(1 for c in fake.calls if c[0] == "append") == backoff.CAS_ATTEMPTS


class LearningLog(FakeLog):
    """A lost single put says where the head went (``TransactionFailed.head``, as ``LogRepo.append``'s
    PutItem does with ``ReturnValuesOnConditionCheckFailure``)."""

    def append(self, log, queue, base, part, now):
        self.calls.append(("append", base, [k for k, _ in part.dedup]))
        if self.failures:
            self.failures.pop(0)
            self.head_at += 1  # someone else appended one offset at ``base``
            raise TransactionFailed([CONDITION_FAILED], head=self.head_at)
        self.head_at = base + max(1, len(part.dedup))


def plan_one(items, base):
    return Append([], []), 1


def test_a_lost_put_that_says_the_head_retries_there_at_once(monkeypatch, no_sleep):
    fake = LearningLog(5, [True])
    monkeypatch.setattr(A, "LogRepo", fake)
    assert A.append_at_head("t", 0, ["a"], 0, plan_one)
    assert fake.calls == [("head", False), ("append", 5, []), ("append", 6, [])]
    assert no_sleep == []


def test_later_lost_rounds_of_a_write_wait_and_read_the_head_fresh(monkeypatch, no_sleep):
    """Past AT_ONCE_LOSSES lost rounds a write steps aside (the backoff) and reads the head fresh, as
    the loop before issue 33 did: a head learned before a wait is stale after it. The fresh read is
    told the end its last lost put returned (``past``: the chain's Query alone when it reaches it)."""
    fake = LearningLog(5, [True, True, True])
    monkeypatch.setattr(A, "LogRepo", fake)
    assert A.append_at_head("t", 0, ["a"], 0, plan_one)
    assert A.AT_ONCE_LOSSES == 1
    assert fake.calls == [("head", False), ("append", 5, []), ("append", 6, []), ("head", True, 7), ("append", 7, []),
                          ("head", True, 8), ("append", 8, [])]
    assert len(no_sleep) == 2


def test_a_lost_transaction_reads_the_head_fresh_without_a_known_end(monkeypatch, no_sleep):
    """A lost transaction says no head (``TransactionFailed.head`` None): its next round reads the
    queue item and the chain, as before."""
    fake = FakeLog(5, [[CONDITION_FAILED, None, None]])
    monkeypatch.setattr(A, "LogRepo", fake)
    assert A.append_at_head("t", 0, ["a", "b"], 0, plan_two)
    assert ("head", True) in fake.calls and not any(len(c) == 3 and c[0] == "head" for c in fake.calls)


def test_learned_heads_still_give_up_after_the_attempts(monkeypatch, no_sleep):
    fake = LearningLog(0, [True] * 100)
    monkeypatch.setattr(A, "LogRepo", fake)
    with pytest.raises(A.Contended) as e:
        A.append_at_head("t", 0, ["a", "b"], 0, plan_one)
    assert e.value.remaining == ["a", "b"]
    assert sum(1 for c in fake.calls if c[0] == "append") == backoff.CAS_ATTEMPTS
    assert sum(1 for c in fake.calls if c[0] == "head") == backoff.CAS_ATTEMPTS - A.AT_ONCE_LOSSES


def test_the_marker_is_bumped_once_after_the_writes_and_retried_before_answering(monkeypatch, no_sleep):
    """A pull's empty look trusts the topic's change marker: the loop bumps it once after its
    writes (not per write), retries a failed bump, and raises 503 ``busy`` when it keeps failing —
    the writes stand (issue 33, review_c). A list's log has no marker; nothing written, no bump."""
    from lakeq.common.errors import Unavailable

    fake = FakeLog(0, [], bump_failures=2)
    monkeypatch.setattr(A, "LogRepo", fake)
    assert A.append_at_head("t", 0, ["a", "b", "c"], 0, plan_two)
    assert fake.bumps == ["t", "t", "t"] and len(no_sleep) == 2
    fake = FakeLog(0, [], bump_failures=A.BUMP_ATTEMPTS)
    monkeypatch.setattr(A, "LogRepo", fake)
    with pytest.raises(Unavailable):
        A.append_at_head("t", 0, ["a"], 0, plan_two)
    assert fake.head_at == 1 and fake.bumps == ["t"] * A.BUMP_ATTEMPTS  # written, then 503
    fake = FakeLog(0, [])
    monkeypatch.setattr(A, "LogRepo", fake)
    assert A.append_at_head("~l1", 0, ["a"], 0, plan_two) and fake.bumps == []  # a list: no marker
    assert A.append_at_head("t", 0, [], 0, plan_two) and fake.bumps == []


def test_a_request_failing_after_some_writes_tries_the_bump_once_and_raises_its_own_error(monkeypatch, no_sleep):
    """Writes then an exception (the second write lost every race): the marker is tried once (a
    hint on a failing path) and the caller gets the original error, even when the bump fails too."""
    fake = FakeLog(0, [], bump_failures=1)
    fails = iter([False, True, True, True])

    def append(log, queue, base, part, now):
        fake.calls.append(("append", base))
        if next(fails, True):
            raise TransactionFailed([CONDITION_FAILED, None, None])
        fake.head_at = base + len(part.dedup)
    fake.append = append
    monkeypatch.setattr(A, "LogRepo", fake)
    with pytest.raises(A.Contended) as e:
        A.append_at_head("t", 0, ["a", "b", "c"], 0, plan_two, attempts=3)
    assert e.value.remaining == ["c"] and fake.bumps == ["t"]


def test_copies_all_recorded_already_bump_the_marker(monkeypatch, no_sleep):
    """Redrive and replay copies (``append_copies``) made by an attempt that failed before its bump
    (a 503) are found recorded by the retry, which appends nothing: it must bump then, or the
    copies stay unsignalled to a pull's empty look. Nothing recorded and nothing to copy: no bump."""
    from lakeq.log import segments as seg

    fake = FakeLog(0, [])
    fake.dedup_lookup = lambda log, ids: {i: {} for i in ids}
    monkeypatch.setattr(A, "LogRepo", fake)
    msgs = [seg.Message(id="c1", body="x", key=None, tags=[], properties={}, produced_at=0)]
    assert A.append_copies("t", 2, msgs, 0) == 0
    assert fake.bumps == ["t"] and fake.calls == []
    fake.dedup_lookup = lambda log, ids: {}
    assert A.append_copies("t", 2, [], 0) == 0 and fake.bumps == ["t"]
