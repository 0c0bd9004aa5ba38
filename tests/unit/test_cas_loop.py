"""Issue 31 item 2 (one compare-and-set loop): :func:`lakeq.common.backoff.cas` with a fake sleep —
rounds counted, the backoff between lost rounds, exhaustion, exceptions propagate."""
from __future__ import annotations

import pytest

from lakeq.common import backoff
from lakeq.common.backoff import AT_ONCE, CAS_ATTEMPTS, RETRY, cas
from lakeq.common.errors import Unavailable


@pytest.fixture(autouse=True)
def slept(monkeypatch):
    calls = []
    monkeypatch.setattr(backoff, "sleep", lambda n, base, cap: calls.append((n, base, cap)))
    return calls


def lose(times, answer="won"):
    rounds = []

    def attempt(n):
        rounds.append(n)
        return RETRY if len(rounds) <= times else answer
    return attempt, rounds


def test_the_first_won_round_answers_without_waiting(slept):
    attempt, rounds = lose(0)
    assert cas(attempt) == "won" and rounds == [0] and slept == []


def test_each_lost_round_waits_the_backoff_of_its_index(slept):
    attempt, rounds = lose(3)
    assert cas(attempt, base=0.01, cap=0.5) == "won"
    assert rounds == [0, 1, 2, 3]
    assert slept == [(0, 0.01, 0.5), (1, 0.01, 0.5), (2, 0.01, 0.5)]


def test_defaults_are_the_one_backoff_and_the_one_bound(slept):
    attempt, rounds = lose(10 ** 6)
    with pytest.raises(Unavailable):
        cas(attempt)
    assert CAS_ATTEMPTS == 40 and len(rounds) == CAS_ATTEMPTS
    # no wait after the last lost round: the give-up comes at once
    assert slept == [(n, backoff.BASE_S, backoff.CAP_S) for n in range(CAS_ATTEMPTS - 1)]


def test_exhaustion_answers_the_callers_way(slept):
    attempt, rounds = lose(10 ** 6)
    assert cas(attempt, attempts=5, on_exhausted=lambda: "quiet") == "quiet"
    assert rounds == [0, 1, 2, 3, 4] and len(slept) == 4

    class Mine(Exception):
        pass

    def boom():
        raise Mine()
    with pytest.raises(Mine):
        cas(lose(10 ** 6)[0], attempts=2, on_exhausted=boom)


def test_a_round_that_lost_but_progressed_goes_on_at_once_and_still_counts(slept):
    outs = iter([AT_ONCE, RETRY, AT_ONCE])
    rounds = []

    def attempt(n):
        rounds.append(n)
        return next(outs)
    assert cas(attempt, attempts=3, on_exhausted=lambda: None) is None
    assert rounds == [0, 1, 2] and slept == [(1, backoff.BASE_S, backoff.CAP_S)]


def test_an_exception_from_a_round_propagates_and_ends_the_loop(slept):
    rounds = []

    def attempt(n):
        rounds.append(n)
        if n == 1:
            raise KeyError("gone")
        return RETRY
    with pytest.raises(KeyError):
        cas(attempt)
    assert rounds == [0, 1] and len(slept) == 1


def test_falsy_answers_are_answers():
    for answer in (None, False, 0, []):
        assert cas(lambda n, a=answer: a) == answer


# --- the callers' give-up answers: a client or topic deleted while the last round lost is 404, as
# before the one loop (the old loops read again after every lost round, the last one included)
def _always_lost():
    from lakeq.store.writes import CONDITION_FAILED, TransactionFailed
    return TransactionFailed([CONDITION_FAILED])


@pytest.mark.parametrize("gone", [True, False])
def test_a_key_set_change_that_never_wins_is_404_when_the_client_went_else_503(monkeypatch, gone):
    from types import SimpleNamespace

    from lakeq.admin import auth
    from lakeq.common.errors import NotFound
    reads = []

    def get(name):
        reads.append(name)
        return None if gone and len(reads) >= CAS_ATTEMPTS else SimpleNamespace(key_version=1)
    monkeypatch.setattr(auth.ClientRepo, "get", staticmethod(get))
    tries = []

    def attempt(c, version):
        tries.append(version)
        raise _always_lost()
    with pytest.raises(NotFound if gone else Unavailable):
        auth.change_key_set("c1", SimpleNamespace(key_version=1), attempt)
    assert len(tries) == CAS_ATTEMPTS and len(reads) == CAS_ATTEMPTS


@pytest.mark.parametrize("gone", [True, False])
def test_a_topic_growth_that_never_wins_is_404_when_the_topic_went_else_503(monkeypatch, gone):
    from types import SimpleNamespace

    from lakeq.admin import service
    from lakeq.common.errors import NotFound
    reads = []

    def topic_or_404(name):
        reads.append(name)
        if gone and len(reads) > CAS_ATTEMPTS:
            raise NotFound(f"topic '{name}' does not exist")
        return SimpleNamespace(queues=2, parent=None, inc=None)
    monkeypatch.setattr(service, "topic_or_404", topic_or_404)
    monkeypatch.setattr(service, "require_admin", lambda p: None)
    grows = []

    def grow(*a):
        grows.append(a)
        raise _always_lost()
    monkeypatch.setattr(service.TopicRepo, "grow", staticmethod(grow))
    with pytest.raises(NotFound if gone else Unavailable):
        service.grow_topic(None, "t", '{"queues": 4}')
    assert len(grows) == CAS_ATTEMPTS and len(reads) == CAS_ATTEMPTS + 1  # the first read, one per lost round
