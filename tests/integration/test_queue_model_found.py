"""Examples the queue model (test_queue_model.py) found, replayed step by step without hypothesis,
each a deterministic test of what it showed."""
from __future__ import annotations

from collections import Counter

import pytest

from lakeq.consume.reader import ACTIVE_MS, PROBE_NET_MS
from tests.history import path
from tests.integration import test_queue_model as model
from tests.integration.test_queue_model import QueueModel

model_ctx = model.model_ctx  # the model's fixture (a fresh store, the set-up made or restored)


class Draws:
    """Stands for hypothesis's ``data``: hands out the given values in order, whatever is asked."""

    def __init__(self, *values):
        self.values = list(values)

    def draw(self, strategy, label=None):
        return self.values.pop(0)


def run(steps, maxd: int = model.MAXD) -> QueueModel:
    m = QueueModel()
    m.max_deliveries(maxd)
    for name, *values in steps:
        if name == "ack_batch":
            values = [m.live_receipts()[0]]
        getattr(m, name)(Draws(*values))
        m.lakeq_agrees()
    return m


# (2026-12-07, CI at 87a74dc) a message produced into a queue a pull had read, then more than 11.25 s
# of quiet: the pull probes no chain (the topic's change marker is not active and this container
# probed the log less than 60 s ago) and the queue item's max_offset is moved by the stream's head
# mover only, which the model did not run: the pull answered empty while m2 was servable
QUIET = [("produce", 1, "a", None, False),
         ("pull_batch", "A", 4, None),
         ("ack_batch",),
         ("time_passes", 1_600),
         ("produce", 1, "a", None, False),
         ("time_passes", 3_500), ("time_passes", 3_500), ("time_passes", 3_500), ("time_passes", 3_500),
         ("pull_batch", "A", 4, None)]


@pytest.mark.parametrize("model_ctx", ["memory"], indirect=True)
def test_a_quiet_topics_message_is_served_once_the_head_mover_ran(model_ctx):
    QueueModel.ctx = model_ctx
    m = run(QUIET)
    assert m.seen["head mover ran"] >= 4 and m.seen["pull served"] == 2, m.seen


@pytest.mark.parametrize("model_ctx", ["memory"], indirect=True)
def test_without_the_head_mover_the_model_sees_the_pull_empty(model_ctx, monkeypatch):
    """The model's check can fail: with the mover stalled, the same steps fail it."""
    QueueModel.ctx = model_ctx
    monkeypatch.setattr(model, "MOVER_LAG_MS", 10**12)
    with pytest.raises(AssertionError, match="empty pull .* while servable"):
        run(QUIET)


@pytest.mark.parametrize("model_ctx", ["memory"], indirect=True)
def test_a_stalled_head_mover_delays_a_quiet_queue_by_at_most_the_probe_net(model_ctx):
    """docs/design.md ("Why nothing is missed"): a message the head mover has not moved a head for
    is found by the next pull's probe within 11.25 s of the topic's marker, else by the container's
    safety net: its next probe of the log comes at most PROBE_NET_MS after its last."""
    QueueModel.ctx = model_ctx
    m = QueueModel()
    api, clock = m.api, m.clock

    def produce(body):
        s, b = api.call("POST", path(model.T), {"producer": "feed", "messages": [{"body": body, "key": "a"}]},
                        key=m.feed)
        assert s == 200, b

    def pull():
        s, b = api.call("GET", path(model.T), query={"group": model.G, "max": 4}, key=m.gkey)
        assert s == 200, b
        return b

    produce("m1")
    first = pull()  # probes: the marker is active; the container's safety net starts now
    probed_at = clock.t
    assert [x["body"] for x in first["messages"]] == ["m1"]
    assert api.call("POST", "/v1/acks", {"group": model.G, "receipt": first["receipt"]}, key=m.gkey)[0] == 200
    clock.t += 1_600
    produce("m2")
    clock.t += ACTIVE_MS + 1  # the marker is quiet; no head mover ran
    assert pull()["messages"] == []  # the accepted delay
    clock.t = probed_at + PROBE_NET_MS  # the safety net is due
    assert [x["body"] for x in pull()["messages"]] == ["m2"]


# (review_a, 2026-12-07) the model's mover moved every head within a second of clock time, 10 times
# sooner than the design's bound (HEADS_SETTLE_MS): a pull 1-11.25 s after a produce found the head
# on the queue item and never needed its probe, so a probe window shorter than the mover's lag (a
# real defect: such a pull answers empty) passed the model. Here the window is cut to 1.25 s.
SHORT_WINDOW = [("produce", 1, "a", None, False),
                ("pull_batch", "A", 4, None),
                ("ack_batch",),
                ("time_passes", 1_600),
                ("produce", 1, "a", None, False),
                ("time_passes", 1_600),
                ("pull_batch", "A", 4, None)]


@pytest.mark.parametrize("model_ctx", ["memory"], indirect=True)
def test_a_probe_window_shorter_than_the_head_movers_lag_fails_the_model(model_ctx, monkeypatch):
    """The model's mover lags as much as the design lets it (HEADS_SETTLE_MS), so a pull inside that
    lag finds a new message only by its probe: with the probe window cut below the lag, the model
    sees the pull empty while servable (with the model's 1-s mover it did not)."""
    from lakeq.consume import reader
    from lakeq.store.queue_log import CHANGE_EVERY_MS, CHANGE_SKEW_MS

    QueueModel.ctx = model_ctx
    QueueModel.seen = Counter()
    assert run(SHORT_WINDOW).seen["pull served"] == 2  # the window as designed: the probe finds it
    model_ctx["reset"]()
    reader.forget_probes()
    monkeypatch.setattr(reader, "ACTIVE_MS", CHANGE_EVERY_MS + CHANGE_SKEW_MS)  # the mover's lag left out
    with pytest.raises(AssertionError, match="empty pull .* while servable"):
        run(SHORT_WINDOW)
