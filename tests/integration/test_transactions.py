"""Cancellation reasons come back in the order the items were added (pynamodb reorders them);
a cancellation that is only TransactionConflict is sent again."""
import pytest
from pynamodb.exceptions import CancellationReason, TransactWriteError

from lakeq.store import writes
from lakeq.store.catalog import TopicRepo
from lakeq.store.writes import TransactionFailed


def test_existing_child_topic_is_409_not_404(api):
    assert api.call("POST", "/v1/topics", {"name": "quotes"})[0] == 201
    assert api.call("POST", "/v1/topics", {"name": "quotes/sh", "queues": 2})[0] == 201
    s, b = api.call("POST", "/v1/topics", {"name": "quotes/sh", "queues": 2})
    assert s == 409 and b["error"]["code"] == "topic_exists"
    try:
        TopicRepo.create("quotes/sh", 2, "quotes", 1)
    except TransactionFailed as e:  # topic put, parent check, queue puts — as added
        assert e.reasons[:2] == ["ConditionalCheckFailed", None]


def test_concurrent_growth_is_detected_on_the_count(api):
    assert api.call("POST", "/v1/topics", {"name": "t", "queues": 2})[0] == 201
    TopicRepo.grow("t", 2, 3)
    try:
        TopicRepo.grow("t", 2, 4)  # the count is no longer 2
        raise AssertionError("grow on a stale count succeeded")
    except TransactionFailed as e:
        assert e.reasons[0] == "ConditionalCheckFailed"


class _Cancelled(TransactWriteError):
    """A TransactWrite cancelled with the given reason codes (as DynamoDB's TransactionCanceled)."""

    def __init__(self, codes):
        super().__init__("cancelled")
        self._codes = codes

    @property
    def cancellation_reasons(self):
        return [None if c is None else CancellationReason(code=c) for c in self._codes]


def _flaky_transact_write(monkeypatch, codes_per_attempt):
    """writes.TransactWrite whose first sends are cancelled with ``codes_per_attempt[i]`` (nothing
    written), then the real one; returns the list of attempts made."""
    real = writes.TransactWrite
    attempts: list[int] = []

    class Flaky(real):
        def __exit__(self, *exc):
            attempts.append(1)
            if exc[0] is None and len(attempts) <= len(codes_per_attempt):
                raise _Cancelled(codes_per_attempt[len(attempts) - 1])
            return super().__exit__(*exc)

    monkeypatch.setattr(writes, "TransactWrite", Flaky)
    monkeypatch.setattr(writes.backoff, "sleep", lambda *a, **k: None)
    return attempts


def test_a_transaction_conflict_is_sent_again(api, monkeypatch):
    """Another transaction in flight on an item cancels ours with TransactionConflict and writes
    nothing; it was a 500 on the routes that met it (push settings). Now sent again."""
    attempts = _flaky_transact_write(monkeypatch, [[None, "TransactionConflict"], ["TransactionConflict", None]])
    s, b = api.call("POST", "/v1/topics", {"name": "quotes", "queues": 2})
    assert s == 201, b
    assert len(attempts) == 3 and TopicRepo.get("quotes") is not None


def test_conflicts_that_persist_and_condition_failures_are_not_retried_forever(api, monkeypatch):
    attempts = _flaky_transact_write(monkeypatch, [["TransactionConflict"]] * 10)
    with pytest.raises(TransactionFailed) as e:
        TopicRepo.create("quotes", 2, None, 0)
    assert len(attempts) == writes.TRANSACT_ATTEMPTS and "TransactionConflict" in e.value.reasons
    assert TopicRepo.get("quotes") is None
    attempts = _flaky_transact_write(monkeypatch, [["ConditionalCheckFailed", "TransactionConflict"]])
    with pytest.raises(TransactionFailed):
        TopicRepo.create("quotes", 2, None, 0)
    assert len(attempts) == 1  # a failed condition is an answer, not a transient
