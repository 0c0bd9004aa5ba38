"""Issue 31 item 2: consume/settle.py's three compare-and-set loops on the offsets record are one
(:func:`lakeq.consume.settle._on_record` over :func:`lakeq.common.backoff.cas`). Against a fake
OffsetRepo: round 0 may use the caller's record, every later round is one GetItem + one conditional
write, and CAS_ATTEMPTS lost rounds answer 503."""
from __future__ import annotations

import pytest

from lakeq.common import backoff
from lakeq.common.errors import Unavailable
from lakeq.consume import settle


class FakeOffsets:
    def __init__(self, wins_after):
        self.calls, self.wins_after = [], wins_after

    def get(self, owner, queue):
        self.calls.append("get")
        return {"rec": len(self.calls)}

    def view_of(self, rec):
        return rec

    def write_state(self, owner, view, new, _none, now, **kw):
        self.calls.append(("write", kw))
        return sum(1 for c in self.calls if c != "get") > self.wins_after


@pytest.fixture(autouse=True)
def no_sleep(monkeypatch):
    slept = []
    monkeypatch.setattr(backoff, "sleep", lambda n, base, cap: slept.append(n))
    return slept


def step(rec):
    return settle._Write(rec, "new", lambda: "won", {"consumed": True})


def test_round_zero_uses_the_callers_record_later_rounds_read_again(monkeypatch, no_sleep):
    fake = FakeOffsets(wins_after=2)
    monkeypatch.setattr(settle, "OffsetRepo", fake)
    assert settle._on_record("o", 0, 1, step, {"rec": 0}) == "won"
    w = ("write", {"consumed": True})
    assert fake.calls == [w, "get", w, "get", w] and no_sleep == [0, 1]


def test_without_a_record_every_round_reads_first(monkeypatch):
    fake = FakeOffsets(wins_after=1)
    monkeypatch.setattr(settle, "OffsetRepo", fake)
    assert settle._on_record("o", 0, 1, step) == "won"
    assert [c if c == "get" else "write" for c in fake.calls] == ["get", "write", "get", "write"]


def test_an_answer_without_a_write_ends_the_loop(monkeypatch):
    fake = FakeOffsets(wins_after=0)
    monkeypatch.setattr(settle, "OffsetRepo", fake)
    assert settle._on_record("o", 0, 1, lambda rec: False) is False and fake.calls == ["get"]


def test_cas_attempts_lost_rounds_answer_503(monkeypatch, no_sleep):
    fake = FakeOffsets(wins_after=10 ** 6)
    monkeypatch.setattr(settle, "OffsetRepo", fake)
    with pytest.raises(Unavailable, match="offsets are too contended"):
        settle._on_record("o", 0, 1, step)
    assert fake.calls.count("get") == backoff.CAS_ATTEMPTS
    assert len(fake.calls) - fake.calls.count("get") == backoff.CAS_ATTEMPTS
    assert no_sleep == list(range(backoff.CAS_ATTEMPTS - 1))
