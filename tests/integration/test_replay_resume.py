"""The copier's resume after a long stop (issue 18.1 follow-up): a topic target's copies are kept
once by their derived ids in the target's dedup table, whose items expire 24 h after they were
written (DynamoDB TTL). A copier that dies between a chunk's produce and its cursor write and
resumes later than that would copy the chunk again unseen. On moto, with the fake clock and the
TTL applied by hand (moto does not expire items): past the window the replay refuses to resume
(``failed``, saying why) and nothing is duplicated; within it, or after a clean stop of any length,
it resumes and every copy is there exactly once."""
from __future__ import annotations

import pytest

from lakeq.replay import service
from lakeq.store.replays import ReplayModel
from tests.crash import Crash
from tests.handlers import expire_dedup
from tests.integration import replay_harness as H
from tests.integration.test_replay_api import T0, check_delivered, produce, start

# moto: these tests read DynamoDB Streams (the stream pump, the fan-out, the archiver), which the memory store has not
pytestmark = pytest.mark.moto

HOUR = 3_600_000
_real_sink = service.topic_sink


@pytest.fixture
def replay(api, setup, clock, monkeypatch, aws):
    """The Glue job in moto, target topic ``replayed`` (3 queues), a fake copier clock, chunks of 3."""
    return H.into_topic(api, aws, clock, monkeypatch, chunk=3)


def replay_of(api, setup, clock, aws, n=12) -> tuple[dict, list[dict]]:
    produce(api, setup, clock, n)
    lo, hi = T0, T0 + n * 1000
    r = start(api, {"topic": "quotes/sh", "from": lo, "to": hi, "target": {"topic": "replayed"}, "rate": 1000})
    H.write_manifest(aws, r["id"], "quotes/sh", lo, hi, None, parts=2)
    return r, H.expected(aws, "quotes/sh", lo, hi, None)


def test_a_crash_resumed_past_the_dedup_window_refuses_and_duplicates_nothing(api, setup, clock, replay, aws,
                                                                             monkeypatch):
    r, want = replay_of(api, setup, clock, aws)
    H.crash_after_produce(monkeypatch, 2)
    with pytest.raises(Crash):
        H.run_schedule()
    monkeypatch.setattr(service, "topic_sink", _real_sink)
    clock.t += 25 * HOUR  # the ReplayFunction schedule did not run for a day
    assert expire_dedup(clock.t, "replayed") == 6  # the two chunks' copies' ids (and no more)
    H.run_schedule()
    msgs = H.topic_messages("replayed")
    ids = [m["id"] for q in msgs.values() for m in q]
    assert len(ids) - len(set(ids)) == 0  # (the old copier: 3, chunk 2 copied again unseen)
    assert len(ids) == 6  # chunks 1 and 2, each copy once
    got = api.call("GET", f"/v1/replays/{r['id']}")[1]
    assert got["status"] == "failed", got
    assert (got["copied"], got["duplicates"]) == (3, 0)  # the first chunk's cursor write; the second's never came
    assert "rows 3-5" in got["error"] and "24 h" in got["error"] and "25.0 h" in got["error"], got["error"]
    assert H.run_schedule() == {"replays": 0}  # ended


def test_a_crash_resumed_within_the_window_completes_exactly_once(api, setup, clock, replay, aws, monkeypatch):
    r, want = replay_of(api, setup, clock, aws)
    H.crash_after_produce(monkeypatch, 2)
    with pytest.raises(Crash):
        H.run_schedule()
    monkeypatch.setattr(service, "topic_sink", _real_sink)
    clock.t += 22 * HOUR
    assert expire_dedup(clock.t, "replayed") == 0
    H.run_schedule()
    got = api.call("GET", f"/v1/replays/{r['id']}")[1]
    assert (got["status"], got["copied"], got["duplicates"]) == ("done", 12, 3), got  # chunk 2 again, dropped
    check_delivered(want)


def test_a_clean_stop_resumed_days_later_completes(api, setup, clock, replay, aws):
    """A run that ends on its time budget leaves no chunk in flight: a resume of any delay is safe."""
    r, want = replay_of(api, setup, clock, aws)
    ReplayModel(r["id"]).update(actions=[ReplayModel.rate.set(3)])  # 1 s of the copier's clock per chunk
    H.run_schedule(budget_ms=6500)  # (the handler keeps 5 s of it)
    got = api.call("GET", f"/v1/replays/{r['id']}")[1]
    assert got["status"] == "copying" and 0 < got["copied"] < 12, got
    clock.t += 3 * 24 * HOUR
    assert expire_dedup(clock.t, "replayed") == got["copied"]
    H.run_schedule()
    got = api.call("GET", f"/v1/replays/{r['id']}")[1]
    assert (got["status"], got["copied"], got["duplicates"]) == ("done", 12, 0), got
    check_delivered(want)

