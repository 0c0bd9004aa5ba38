"""A dead letter is never counted without its copy (issue 14 item 3).

The segment read that fetches a rejected or max-delivered message for its dead-letter copy is
eventually consistent and may come back empty. :class:`EmptyReads` makes every segment read of
one log come back empty while it is on; the message must then stay due (not counted, not
settled), and be copied by a later settle or pull once reads see it again. Only an offset below
the queue's ``min_offset`` is gone (settled without a copy, not counted)."""
from __future__ import annotations

import pytest

from lakeq.store.models import OffsetModel, QueueModel, queue_key
from lakeq.store.queue_log import LogRepo
from tests.integration.test_settlement import T, ack, dlq, dlq_messages, offsets, patch, produce, pull  # noqa: F401


class EmptyReads:
    """``LogRepo.read`` of ``topic`` yields no segment while ``on`` (an eventually consistent Query
    that does not see the segment yet)."""

    def __init__(self, monkeypatch, topic: str):
        self.on, self.topic, self.calls = False, topic, 0
        real = LogRepo.read.__func__

        def read(cls, topic, queue, start, max_offsets, first=None):
            if self.on and topic == self.topic:  # (a segment the pull's probe found is not seen either)
                self.calls += 1
                return iter(())
            return real(cls, topic, queue, start, max_offsets, first=first)
        monkeypatch.setattr(LogRepo, "read", classmethod(read))


@pytest.fixture
def empty(monkeypatch):
    return EmptyReads(monkeypatch, "quotes/sh")


def queue_of(api, key, q):
    return next(x for x in offsets(api, key)["queues"] if x["queue"] == q)


def test_a_reject_whose_read_comes_back_empty_is_copied_later(api, setup, clock, dlq, empty):  # noqa: F811
    assert patch(api, "risk", {"dead_letter_topic": "dlq"})[0] == 200
    produce(api, setup["feed"], 3)
    b = pull(api, setup["risk"])
    q = b["messages"][0]["queue"]
    empty.on = True
    s, out = ack(api, setup["risk"], b["receipt"], accept=[0, 2], reject=[1])
    assert s == 200 and out["unsettled"] == [] and out["committed_offset"] == 1, out  # 1: still to dead-letter
    assert empty.calls >= 1
    assert queue_of(api, setup["risk"], q)["dead_lettered"] == 0
    assert dlq_messages(api, dlq) == []
    assert pull(api, setup["risk"])["messages"] == []  # still unreadable: nothing served, nothing counted
    assert queue_of(api, setup["risk"], q)["dead_lettered"] == 0
    empty.on = False
    assert pull(api, setup["risk"])["messages"] == []  # the pull finishes the dead letter
    qq = queue_of(api, setup["risk"], q)
    assert qq["dead_lettered"] == 1 and qq["committed_offset"] == 3 and qq["backlog"] == 0, qq
    got = dlq_messages(api, dlq)
    assert [(m["body"], m["dead_letter"]["offset"], m["dead_letter"]["reason"]) for m in got] == [
        ("b1", 1, "rejected")]


def test_a_max_delivered_message_whose_read_comes_back_empty_is_copied_later(api, setup, clock, dlq, empty):  # noqa: F811
    assert patch(api, "risk", {"dead_letter_topic": "dlq", "max_deliveries": 1})[0] == 200
    produce(api, setup["feed"], 1)
    b = pull(api, setup["risk"])
    q = b["messages"][0]["queue"]
    clock.t += 1_000  # expired at its last delivery: due at the next pull
    empty.on = True
    assert pull(api, setup["risk"])["messages"] == []
    assert queue_of(api, setup["risk"], q)["dead_lettered"] == 0
    empty.on = False
    assert pull(api, setup["risk"])["messages"] == []
    assert queue_of(api, setup["risk"], q)["dead_lettered"] == 1
    assert [m["dead_letter"]["reason"] for m in dlq_messages(api, dlq)] == ["max_deliveries"]


def test_only_an_offset_below_min_offset_is_gone(api, setup, clock, dlq, empty):  # noqa: F811
    assert patch(api, "risk", {"dead_letter_topic": "dlq"})[0] == 200
    produce(api, setup["feed"], 3)
    b = pull(api, setup["risk"])
    q = b["messages"][0]["queue"]
    empty.on = True
    assert ack(api, setup["risk"], b["receipt"], accept=[0, 2], reject=[1])[0] == 200
    item = QueueModel.get(queue_key("quotes/sh", q))
    item.update(actions=[QueueModel.min_offset.set(2)])  # retention moved past it
    s, out = ack(api, setup["risk"], b["receipt"])  # a retry settles what is gone
    assert s == 200
    qq = queue_of(api, setup["risk"], q)
    assert qq["dead_lettered"] == 0 and qq["committed_offset"] == 3 and qq["backlog"] == 0, qq
    rec = OffsetModel.get("g|risk|quotes/sh", q, consistent_read=True)
    assert int(rec.committed_offset) == 3 and '"d"' not in (rec.settle or ""), rec.settle  # settled in the record
    assert dlq_messages(api, dlq) == []


class HiddenSegment:
    """``LogRepo.read`` of ``topic`` does not see the segment holding offset ``hide`` while ``on``
    (an eventually consistent Query that sees a later segment but not that one)."""

    def __init__(self, monkeypatch, topic: str, hide: int):
        self.on, self.topic, self.hide = False, topic, hide
        real = LogRepo.read.__func__

        def read(cls, topic, queue, start, max_offsets, first=None):
            segs = real(cls, topic, queue, start, max_offsets, first=first)
            if not (self.on and topic == self.topic):
                return segs
            return (s for s in segs if not s.base <= self.hide < s.end)
        monkeypatch.setattr(LogRepo, "read", classmethod(read))


@pytest.mark.parametrize("tags", [None, "t"])
def test_a_pull_whose_read_misses_a_segment_skips_nothing(api, setup, clock, monkeypatch, tags):
    """Siblings: a pull (unfiltered, or tag-filtered: skipped messages move its frontier) whose
    read misses the first segment but sees the next one neither delivers past the gap nor marks
    the missing messages as read."""
    produce(api, setup["feed"], 2)  # segment [0, 2)
    produce(api, setup["feed"], 2, start=2)  # segment [2, 4)
    hidden = HiddenSegment(monkeypatch, "quotes/sh", 0)
    hidden.on = True
    q = {"tags": tags} if tags else {}
    assert pull(api, setup["risk"], **q)["messages"] == []
    hidden.on = False
    b = pull(api, setup["risk"], **q)
    assert [m["offset"] for m in b["messages"]] == [0, 1, 2, 3]


def test_a_dead_letter_copy_whose_bump_failed_is_signalled_when_the_settle_is_retried(
        api, setup, clock, dlq, monkeypatch):  # noqa: F811
    """The copy's append bumps the dead-letter topic's change marker before the settle answers
    (a pull's empty look on that topic trusts it); a bump that keeps failing answers 503 with the
    copy stored and the offset still due. The next settle finds the copy recorded and must bump
    then — it answered from the dedup table without a bump, so the copy stayed unsignalled."""
    assert patch(api, "risk", {"dead_letter_topic": "dlq"})[0] == 200
    produce(api, setup["feed"], 1)
    b = pull(api, setup["risk"])
    q = b["messages"][0]["queue"]
    real = LogRepo.bump_change

    def throttled(topic, now):
        if topic == "dlq":
            raise RuntimeError("throttled (injected)")
        return real(topic, now)
    with monkeypatch.context() as m:
        m.setattr(LogRepo, "bump_change", staticmethod(throttled))
        s, out = ack(api, setup["risk"], b["receipt"], reject=[0])
    assert (s, out["error"]["code"]) == (503, "busy"), out
    assert queue_of(api, setup["risk"], q)["dead_lettered"] == 0  # still due
    before = LogRepo.change("dlq")
    clock.t += 2_000
    assert pull(api, setup["risk"])["messages"] == []  # the pull finishes the dead letter
    assert queue_of(api, setup["risk"], q)["dead_lettered"] == 1
    after = LogRepo.change("dlq")
    assert after is not None and after != before, (before, after)
    assert [m["dead_letter"]["reason"] for m in dlq_messages(api, dlq)] == ["rejected"]  # one copy
