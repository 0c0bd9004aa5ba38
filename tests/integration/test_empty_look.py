"""An empty pull answered from the container's last empty look (issue 33 item 2,
:func:`lakeq.consume.reader._still_empty`): after a full round that found nothing to lock, the next
pull of the same group in the same container reads the group's records and the topic's change marker
(strongly consistent), not the queue items and the chains; and whatever made a message servable
since — a produce, another consumer's ack or release of a lock with messages behind it, a lock's
end — sends it to the full round, so an empty answer never hides a servable message."""
from __future__ import annotations

import pytest

from tests.integration.test_pull_ack_calls import Calls

T = "/v1/topics/quotes/messages"


def _produce(api, setup, n, key="k"):
    s, b = api.call("POST", T, {"producer": "feed", "messages": [{"body": f"m{i}", "key": key} for i in range(n)]},
                    key=setup["feed"])
    assert s == 200, b


def _pull(api, setup, **query):
    s, b = api.call("GET", T, query={"group": "risk", **query}, key=setup["risk"])
    assert s == 200, b
    return b


def test_an_empty_pull_after_an_empty_look_reads_the_marker_and_the_records(api, setup, clock):
    _produce(api, setup, 3)
    b = _pull(api, setup, max=3)
    clock.t += 2_000  # past the marker's unsignalled window
    assert _pull(api, setup, max=3, ack=b["receipt"])["messages"] == []  # the full round: kept as the look
    with Calls() as c:  # its probes were eventually consistent (the topic active): confirmed once, consistently
        assert _pull(api, setup, max=3)["messages"] == []
    assert c.calls == CONFIRMED, c.calls
    for _ in range(2):
        with Calls() as c:
            assert _pull(api, setup, max=3)["messages"] == []
        assert c.calls == [("Query", "offsets", True), ("GetItem", "queues", True)], c.calls


def test_a_produce_after_an_empty_look_is_served(api, setup, clock):
    _produce(api, setup, 1)
    b = _pull(api, setup, max=1)
    clock.t += 2_000
    assert _pull(api, setup, max=1, ack=b["receipt"])["messages"] == []
    assert _pull(api, setup, max=1)["messages"] == []  # answered from the look
    _produce(api, setup, 1, key="other")  # bumps the marker (this container bumped 2 s ago)
    assert [m["body"] for m in _pull(api, setup, max=1)["messages"]] == ["m0"]


@pytest.mark.parametrize("how", ["ack", "release", "expiry"])
def test_a_lock_with_messages_behind_it_that_ends_after_an_empty_look_is_served(api, setup, clock, how):
    """Another consumer holds a lock with more messages behind it in its queue; the group's pull
    finds nothing else (the look: it knew no head of that queue); the lock then ends without an
    append — acknowledged on its own (``POST /v1/acks``), released (visibility 0), or expired —
    and the next pull serves that queue."""
    _produce(api, setup, 6)
    held = _pull(api, setup, max=3, visibility_timeout_ms=10_000)
    assert [m["offset"] for m in held["messages"]] == [0, 1, 2]
    clock.t += 200
    assert _pull(api, setup, max=3)["messages"] == []  # a full round (the marker was bumped 200 ms ago)
    clock.t += 1_100  # the marker's window over: this round is kept
    assert _pull(api, setup, max=3)["messages"] == []
    with Calls() as c:
        assert _pull(api, setup, max=3)["messages"] == []
    assert c.calls == [("Query", "offsets", True), ("GetItem", "queues", True)], c.calls  # from the look
    if how == "expiry":  # the lock expired: its messages are served again first
        clock.t += 10_000
        want = [0, 1, 2]
    elif how == "ack":
        s, _ = api.call("POST", "/v1/acks", {"group": "risk", "receipt": held["receipt"]}, key=setup["risk"])
        assert s == 200
        want = [3, 4, 5]
    else:
        s, _ = api.call("POST", "/v1/visibility", {"group": "risk", "receipt": held["receipt"],
                                                   "visibility_timeout_ms": 0}, key=setup["risk"])
        assert s == 200
        want = [0, 1, 2]
    assert [m["offset"] for m in _pull(api, setup, max=3)["messages"]] == want


def test_a_pull_after_the_last_batch_was_acknowledged_on_its_own_reads_no_marker(api, setup, clock):
    """The consumer holding the last batch acknowledges it on ``POST /v1/acks`` after another pull kept
    an empty look: its queue was locked then (the look does not know its head), so the records alone
    send the next pull to the full round — no marker read first (a miss costs nothing). (Acknowledged
    by its holder's next pull, ``ack=``, the look answers: cost33f, below.)"""
    _produce(api, setup, 3)
    held = _pull(api, setup, max=3, visibility_timeout_ms=10_000)
    clock.t += 1_300
    assert _pull(api, setup, max=3)["messages"] == []  # the look, while the batch is held
    assert api.call("POST", "/v1/acks", {"group": "risk", "receipt": held["receipt"]}, key=setup["risk"])[0] == 200
    with Calls() as c:
        assert _pull(api, setup, max=3)["messages"] == []
    assert c.calls[:2] == [("Query", "offsets", True), ("BatchGetItem", "queues", False)], c.calls


def test_a_message_whose_bump_was_lost_is_served_within_the_safety_net_after_a_probed_look(
        api, setup, clock, monkeypatch):
    """A produce whose bump keeps failing answers 503 ``busy`` after its appends
    (``lakeq.store.append.bump_change``); a producer that never retries (or a container stopped
    between its appends and its bump) leaves the message unsignalled, and the container's 60-s
    safety net (``PROBE_NET_MS``) bounds how long it waits. A look kept by a round that probed (the
    topic active, ``trusted`` False) took no part in the net: every later pull of the group in the
    container was answered from it, its full round never came, and the message was never served
    (review_c)."""
    from lakeq.consume.reader import PROBE_NET_MS
    from lakeq.store.queue_log import LogRepo

    _produce(api, setup, 1)
    b = _pull(api, setup, max=1)
    clock.t += 2_000  # the topic still active: this round probes, and is kept as the look
    assert _pull(api, setup, max=1, ack=b["receipt"])["messages"] == []
    assert _pull(api, setup, max=1)["messages"] == []  # its heads confirmed (review_f): grown up

    def lost(*_a, **_k):
        raise RuntimeError("throttled")
    with monkeypatch.context() as m:
        m.setattr(LogRepo, "bump_change", staticmethod(lost))
        s, b = api.call("POST", T, {"producer": "feed", "messages": [{"body": "m0", "key": "other"}]},
                        key=setup["feed"])
        assert (s, b["error"]["code"]) == (503, "busy"), b  # appended; its bump lost
    assert _pull(api, setup, max=1)["messages"] == []  # within the net: the look may answer
    clock.t += PROBE_NET_MS + 1_000
    assert [m["body"] for m in _pull(api, setup, max=1)["messages"]] == ["m0"]


def test_a_push_runs_look_does_not_answer_a_pull_while_a_delayed_message_is_due(api, setup, clock):
    """A group's push endpoint pulls its topic as the group (the same owner) through
    ``PushTopicLog``, which promotes no delayed message: its empty look knows no delayed message
    ahead (``wake`` None). Kept under the native pull's key, it answered that pull empty while a
    delayed message was due (the pull's own round promotes it) until the promoter's sweep or the
    safety net (review_c). The looks are keyed by the log's kind too."""
    from lakeq.consume.reader import consume
    from lakeq.push.delivery import LOCK_OWNER, PushTopicLog, _req
    from lakeq.store.offsets import OffsetRepo

    s, b = api.call("POST", T, {"producer": "feed", "messages": [{"body": "late", "delay_ms": 30_000}]},
                    key=setup["feed"])
    assert s == 200, b
    clock.t += 2_000  # past the marker's window: the push run's empty round is kept as a look
    push = PushTopicLog("quotes", OffsetRepo.owner("risk", "quotes", None),
                        {"group": "risk", "client_id": None, "topic": "quotes"}, 4, LOCK_OWNER)
    assert consume(push, 1000, _req(1), None)["messages"] == []
    clock.t += 30_000  # the delayed message is due; no sweep ran
    assert [m["body"] for m in _pull(api, setup, max=1)["messages"]] == ["late"]


def test_a_look_whose_round_lost_the_lock_to_another_consumer_does_not_hide_the_rest_of_the_queue(
        api, setup, clock, monkeypatch):
    """Two segments past the group's frontier (two produces); the pull's round probes the queue
    (its hint lags: the segment starting at the frontier, 0.5 RRU, tells the end of that segment
    only), and another consumer of the group locks the first segment between the round's read and
    its lock write (the conditional write fails; nothing locked: the round is kept as the look).
    That consumer acknowledges its batch alone (``POST /v1/acks``): the records' frontier is the
    first segment's end, which the look took for the queue's head — so the next pull was answered
    empty with the second segment servable, until the safety net (review_c). A probe that found
    more than the hint is not a head the look knows."""
    from lakeq.store.offsets import OffsetRepo

    _produce(api, setup, 3)
    _produce(api, setup, 3)  # a second segment of the same queue
    clock.t += 2_000  # past the marker's window, the topic still active: the round probes
    real = OffsetRepo.write_state.__func__
    other = {}

    def racing(cls, owner, view, state, meta, now, **kw):
        if not other and kw.get("lock_owner") is not None:  # another container's pull wins the race
            other["held"] = None
            other["held"] = _pull(api, setup, max=3)
        return real(cls, owner, view, state, meta, now, **kw)
    monkeypatch.setattr(OffsetRepo, "write_state", classmethod(racing))
    assert _pull(api, setup, max=3)["messages"] == []  # lost the lock: the look
    monkeypatch.setattr(OffsetRepo, "write_state", classmethod(real))
    assert [m["offset"] for m in other["held"]["messages"]] == [0, 1, 2]
    s, _ = api.call("POST", "/v1/acks", {"group": "risk", "receipt": other["held"]["receipt"]}, key=setup["risk"])
    assert s == 200
    assert [m["offset"] for m in _pull(api, setup, max=3)["messages"]] == [3, 4, 5]


def test_a_push_runs_look_sends_it_to_a_full_round_once_a_delayed_message_is_due(api, setup, clock):
    """A push run promotes nothing (``PushTopicLog``): the promoter's sweep does, with a transaction
    that bumps no change marker. The push run's look knew of no delayed message ahead (its
    ``wake`` came from the promotions it does not make), so after the sweep promoted a due message
    the run's next pulls were answered empty from the look until the safety net (review_c). A look
    takes the earliest ``next_due`` of the queue items it saw as its wake too."""
    from lakeq.consume.reader import consume
    from lakeq.produce import delayed
    from lakeq.push.delivery import LOCK_OWNER, PushTopicLog, _req
    from lakeq.store.offsets import OffsetRepo

    def push():
        lg = PushTopicLog("quotes", OffsetRepo.owner("risk", "quotes", None),
                          {"group": "risk", "client_id": None, "topic": "quotes"}, 4, LOCK_OWNER)
        return consume(lg, 1000, _req(1), None)["messages"]

    s, b = api.call("POST", T, {"producer": "feed", "messages": [{"body": "late", "delay_ms": 30_000}]},
                    key=setup["feed"])
    assert s == 200, b
    clock.t += 2_000
    assert push() == []  # kept as the push run's look
    assert push() == []
    clock.t += 30_000
    assert delayed.sweep()["promoted"] == 1
    assert [m["body"] for m in push()] == ["late"]


def test_a_message_whose_first_bump_failed_is_served_by_the_next_pull_in_an_active_topic(
        api, setup, clock, monkeypatch):
    """A pull's empty look trusts the change marker alone. A produce answered 200 when its bump
    failed (a hint, logged), and its message then waited for the 60-s safety net where the full
    round before the look probed the active topic and served it at once (review_c). The bump is
    retried before the produce answers (``BUMP_ATTEMPTS``), so a transient failure hides nothing."""
    from lakeq.store.queue_log import LogRepo

    _produce(api, setup, 1)
    b = _pull(api, setup, max=1)
    clock.t += 2_000
    assert _pull(api, setup, max=1, ack=b["receipt"])["messages"] == []  # the look (probed: topic active)

    real, failed = LogRepo.bump_change, []

    def once(topic, now):
        if not failed:
            failed.append(topic)
            raise RuntimeError("throttled")
        return real(topic, now)
    with monkeypatch.context() as m:
        m.setattr(LogRepo, "bump_change", staticmethod(once))
        _produce(api, setup, 1, key="other")  # 200: appended, its first bump lost, the second landed
    assert failed == ["quotes"]
    clock.t += 100
    assert [m["body"] for m in _pull(api, setup, max=1)["messages"]] == ["m0"]


def test_a_produce_whose_bump_keeps_failing_answers_busy_and_its_retry_signals(api, setup, clock, monkeypatch):
    """A marker that cannot be written after ``BUMP_ATTEMPTS`` tries: 503 ``busy`` (the appends
    stand); the producer's retry with the same ids answers the original results, appends nothing
    and bumps, and the next pull serves the message."""
    from lakeq.store import append
    from lakeq.store.queue_log import LogRepo

    _produce(api, setup, 1)
    b = _pull(api, setup, max=1)
    clock.t += 2_000
    assert _pull(api, setup, max=1, ack=b["receipt"])["messages"] == []  # the look
    tries = []

    def lost(topic, now):
        tries.append(topic)
        raise RuntimeError("throttled")
    msg = {"producer": "feed", "messages": [{"body": "m0", "key": "other", "id": "late-1"}]}
    with monkeypatch.context() as m:
        m.setattr(LogRepo, "bump_change", staticmethod(lost))
        s, out = api.call("POST", T, msg, key=setup["feed"])
    assert (s, out["error"]["code"]) == (503, "busy"), out
    assert len(tries) == append.BUMP_ATTEMPTS
    s, out = api.call("POST", T, msg, key=setup["feed"])
    assert s == 200 and out["results"][0]["offset"] == 0, out  # the first attempt's append
    clock.t += 100
    assert [m["body"] for m in _pull(api, setup, max=1)["messages"]] == ["m0"]


def test_a_filtered_pulls_look_does_not_hide_what_another_filter_or_none_serves(api, setup, clock):
    """(Held, review_c.) A pull filtered on tag B finds only a released message tagged A (pending:
    a filter never skips past it) and locks nothing — kept as the look; a pull filtered on A, and
    one without a filter, are served it: the records show it pending, whatever the look's filter."""
    s, b = api.call("POST", T, {"producer": "feed", "messages": [{"body": "a", "key": "k", "tags": ["A"]}]},
                    key=setup["feed"])
    assert s == 200, b
    held = _pull(api, setup, max=1)
    s, _ = api.call("POST", "/v1/visibility", {"group": "risk", "receipt": held["receipt"],
                                               "visibility_timeout_ms": 0}, key=setup["risk"])
    assert s == 200
    clock.t += 2_000
    assert _pull(api, setup, max=1, tags="B")["messages"] == []  # the look
    assert _pull(api, setup, max=1, tags="B")["messages"] == []
    assert [m["body"] for m in _pull(api, setup, max=1, tags="A", visibility_timeout_ms=1000)["messages"]] == ["a"]
    clock.t += 1_000  # its lock expired
    assert _pull(api, setup, max=1, tags="B")["messages"] == []
    assert [m["body"] for m in _pull(api, setup, max=1)["messages"]] == ["a"]


def test_a_bump_landing_late_does_not_open_a_look_inside_another_containers_unsignalled_window(
        api, setup, clock):
    """The marker's ``at`` is the last write's (the bumping container's clock when it computed it).
    A bump that lands late (throttled and retried by botocore) over a more recent one leaves an old
    ``at``: the marker then looks settled while the container that bumped just before is inside
    its unsignalled second. A look kept then answered the next pull empty over that container's
    next append (no bump: its window), where a full round in the active topic probes and serves it
    (review_c). A look needs the marker's version seen by this container for the window too."""
    from lakeq.store import queue_log

    t0 = clock.t
    _produce(api, setup, 1)  # this container ("C2") bumps at t0
    held = _pull(api, setup, max=1)
    # C1's bump, computed at t0 - 1 s, lands now (after C2's): the marker reads at = t0 - 1 s
    mine = queue_log._BUMPED.pop("quotes")
    queue_log.LogRepo.bump_change("quotes", t0 - 1_000)
    queue_log._BUMPED["quotes"] = mine
    clock.t = t0 + 300  # at >= t0 - 1,000 + 1,250: the marker looks settled
    assert _pull(api, setup, max=1, ack=held["receipt"])["messages"] == []
    clock.t = t0 + 500
    _produce(api, setup, 1, key="other")  # C2 inside its second since its bump: no bump
    clock.t = t0 + 600
    assert [m["body"] for m in _pull(api, setup, max=1)["messages"]] == ["m0"]


def test_a_late_landing_bump_moves_the_version_but_never_the_time_back(api, setup, clock):
    """The marker's ``at`` only moves forward: a bump computed before another that lands after it
    (throttled, retried by botocore) moves the version — its container's appends are signalled —
    and leaves the later time, so a waiting long poll's rounds (``Log.settled_since``, which reads
    the marker's ``at`` alone) keep the later bumper's unsignalled second. It set ``at`` back by
    the delay, and a waiting round then took that window as closed (the late-bump weakness noted
    after review_c; the look's ``_seen_since`` covered only the look)."""
    from lakeq.store import queue_log

    t0 = clock.t
    assert queue_log.LogRepo.bump_change("quotes", t0)
    first = queue_log.LogRepo.change("quotes")
    queue_log._BUMPED.clear()  # another container's bump, computed a second earlier, lands now
    assert queue_log.LogRepo.bump_change("quotes", t0 - 1_000)
    late = queue_log.LogRepo.change("quotes")
    assert (late.version, late.at) == (first.version + 1, t0), (first, late)
    queue_log._BUMPED.clear()
    assert queue_log.LogRepo.bump_change("quotes", t0 + 5)
    assert queue_log.LogRepo.change("quotes").at == t0 + 5


def test_a_retried_produce_moves_the_marker_its_first_attempt_did_not(api, setup, clock, monkeypatch):
    """A produce whose bump failed (or whose container stopped between its appends and its bump)
    leaves the marker where it was; the producer, without an answer, retries with the same ids,
    which are all recorded: nothing is written, but the retry bumps the marker, so the message waits
    for no safety net once the retry answered."""
    from lakeq.store.queue_log import LogRepo

    msgs = [{"body": "r0", "key": "k", "id": "retry-0"}]
    s, _ = api.call("POST", T, {"producer": "feed", "messages": msgs}, key=setup["feed"])
    assert s == 200
    before = LogRepo.change("quotes")
    clock.t += 2_000

    def lost(*_a, **_k):
        raise RuntimeError("throttled")
    with monkeypatch.context() as m:
        m.setattr(LogRepo, "bump_change", staticmethod(lost))
        s, _ = api.call("POST", T, {"producer": "feed", "messages": [{"body": "r1", "key": "k", "id": "retry-1"}]},
                        key=setup["feed"])
        assert s == 503
    assert LogRepo.change("quotes") == before  # the first attempt's bump was lost
    clock.t += 2_000
    s, b = api.call("POST", T, {"producer": "feed", "messages": [{"body": "r1", "key": "k", "id": "retry-1"}]},
                    key=setup["feed"])
    assert s == 200 and b["results"][0]["offset"] == 1, b  # the original result: nothing appended
    after = LogRepo.change("quotes")
    assert after is not None and after != before and after.at == clock.t, (before, after)


def test_a_bump_from_a_clock_far_ahead_does_not_keep_every_look_off_for_as_long(api, setup, clock):
    """review_d: since ``wat`` never goes back, one bump from a container whose clock runs an hour
    ahead left ``at`` an hour in the future: every later bump moved the version alone, and every
    pull's round took the marker as inside an unsignalled window (``Log.settled_since``) for that
    hour — no look kept, a full round with probes each pull and waiting round, for every consumer
    of the topic. A window ends at most ``CHANGE_EVERY_MS`` after its bump landed, and a bump
    landed before this container first read the version it made: the round goes by whichever of
    the marker's ``at`` and that first read is earlier."""
    from lakeq.store import queue_log

    t0 = clock.t
    assert queue_log.LogRepo.bump_change("quotes", t0 + 3_600_000)  # a container an hour ahead
    queue_log._BUMPED.clear()
    _produce(api, setup, 3)  # this container's bump: the version alone (at stays an hour ahead)
    assert queue_log.LogRepo.change("quotes").at == t0 + 3_600_000
    b = _pull(api, setup, max=3)
    clock.t += 2_000
    assert _pull(api, setup, max=3, ack=b["receipt"])["messages"] == []
    clock.t += 2_000  # this container read that version 2 s ago: past any window it stands for
    assert _pull(api, setup, max=3)["messages"] == []  # a full round, kept as the look
    with Calls() as c:
        assert _pull(api, setup, max=3)["messages"] == []
    assert c.calls == [("Query", "offsets", True), ("GetItem", "queues", True)], c.calls
    _produce(api, setup, 1, key="other")  # a later append is still served
    assert [m["body"] for m in _pull(api, setup, max=1)["messages"]] == ["m0"]


def _retried_past_its_first_attempt(api, setup, monkeypatch, msg):
    """Produce ``msg`` (with ids) twice: the first attempt stores it with its marker bump lost (a 503),
    then the retry, whose first read of the dedup table ran before that write landed (it finds
    nothing: review_d's race), so its own write finds the ids recorded. Returns (status, body) of
    each attempt and the retry's dedup reads."""
    from lakeq.produce import service as produce_service
    from lakeq.store.queue_log import LogRepo

    def lost(*_a, **_k):
        raise RuntimeError("throttled")
    with monkeypatch.context() as m:
        m.setattr(LogRepo, "bump_change", staticmethod(lost))
        first = api.call("POST", T, msg, key=setup["feed"])
    real = produce_service._delayed.known_results
    reads = []

    def before_the_first_landed(log, ids):
        reads.append(ids)
        return {} if len(reads) == 1 else real(log, ids)
    with monkeypatch.context() as m:
        m.setattr(produce_service._delayed, "known_results", before_the_first_landed)
        retry = api.call("POST", T, msg, key=setup["feed"])
    return first, retry, reads


def test_a_retry_answered_by_its_write_losing_to_the_first_attempts_ids_signals(api, setup, clock, monkeypatch):
    """review_d: the producer's retry read the dedup table before its first attempt's append landed
    (a retry after a client timeout, the first attempt still running); its own write then failed on
    the ids recorded meanwhile and answered their results (``on_recorded``) — 200, nothing written,
    so no bump, and the service's bump runs only for ids its first read knew. The first attempt then
    failed at its bump (503 to a client that no longer waits): the message waited for a look's
    60-s safety net after a 200. An answer from ids recorded meanwhile bumps as one from the read."""
    _produce(api, setup, 1)
    b = _pull(api, setup, max=1)
    clock.t += 2_000
    assert _pull(api, setup, max=1, ack=b["receipt"])["messages"] == []  # the look
    msg = {"producer": "feed", "messages": [{"body": "m0", "key": "other", "id": "raced-1"}]}
    (s, out), (s2, out2), reads = _retried_past_its_first_attempt(api, setup, monkeypatch, msg)
    assert s == 503, out  # the first attempt: appended, its bump lost
    s, out = s2, out2  # the retry: its first read ran before the first attempt's append
    assert s == 200 and out["results"][0]["offset"] == 0, out
    assert len(reads) == 2, reads  # answered from the ids its write found recorded
    clock.t += 100
    assert [m["body"] for m in _pull(api, setup, max=1)["messages"]] == ["m0"]


# --- young looks: an empty round inside the marker's unsignalled window (issue 33 item 2, cost33e) ---
# a young look's pull: the records, then the marker (consistent) and the lockable queues' probes in one
# BatchGetItem (cost33f; before, a GetItem of the marker then a BatchGetItem of the probes: 3 calls)
PROBED = [("Query", "offsets", True), ("BatchGetItem", "queues,segments", (True, False))]
LOOKED = [("Query", "offsets", True), ("GetItem", "queues", True)]
# a young look grows up: the marker and its probes consistent, then its queue items' next_due
# consistently (review_g: after the marker, so no delayed produce's bump is read without its due)
CONFIRMED = [("Query", "offsets", True), ("BatchGetItem", "queues,segments", (True, True)),
             ("BatchGetItem", "queues", True)]


def _young_look(api, setup, clock):
    """Three messages on one queue served and acknowledged inside the marker's window: the pull with
    ``ack=`` finds nothing (a full round 200 ms after this container's bump), kept as a young look."""
    _produce(api, setup, 3)
    b = _pull(api, setup, max=3)
    clock.t += 100
    assert _pull(api, setup, max=3, ack=b["receipt"])["messages"] == []


def test_an_empty_pull_inside_the_markers_window_probes_the_chains_after_the_marker(
        api, setup, clock, frozen_caches):
    """A busy queue's consumers catch up within a second of a produce: their empty pulls fell
    inside the marker's unsignalled window, where no look was kept, and each was a full round
    (queue items + marker, records, probes: 4-5.5 RRU at 4 queues). From a young look: the records
    (Query), the marker (consistent GetItem), then one BatchGetItem of the lockable queues' segments
    at their frontiers (eventually consistent) — 1 + 1 + 0.5 x 4 RRU here."""
    _young_look(api, setup, clock)
    clock.t += 100
    for _ in range(2):
        with Calls() as c:
            assert _pull(api, setup, max=3)["messages"] == []
        assert c.calls == PROBED, c.calls


@pytest.mark.parametrize("many", [True, False])
def test_a_moved_marker_sends_a_young_looks_pull_to_the_full_round_without_the_probes(
        api, setup, clock, frozen_caches, monkeypatch, many):
    """A busy topic's marker moves every second: a young look's pull then pays the marker's GetItem
    and goes to the full round (with the records it read) — the lockable queues' probes are not paid
    first (at 64 queues 32 RRU before a full round that probes them again). With at most
    ``PROBES_WITH_MARKER`` queues to probe (4 here; ``many``: the bound lowered under them) the marker
    and the probes are one BatchGetItem: a moved marker wastes at most 2 RRU of probes (cost33f)."""
    from lakeq.consume import reader
    if many:
        monkeypatch.setattr(reader, "PROBES_WITH_MARKER", 3)
    _young_look(api, setup, clock)
    clock.t += 1_100  # this container's second is over: the next produce bumps
    _produce(api, setup, 1, key="other")
    with Calls() as c:
        assert [m["body"] for m in _pull(api, setup, max=3)["messages"]] == ["m0"]
    marker = ("GetItem", "queues", True) if many else ("BatchGetItem", "queues,segments", (True, False))
    assert c.calls[:3] == [("Query", "offsets", True), marker, ("BatchGetItem", "queues", False)], c.calls


def test_an_unsignalled_append_after_a_young_look_is_served(api, setup, clock):
    """The producing container bumped the marker 200 ms before: its next append moves no marker (its
    second), so the young look's marker is unchanged — the probe at the queue's frontier finds the
    new segment and the pull serves it."""
    from lakeq.store.queue_log import LogRepo

    _young_look(api, setup, clock)
    assert _pull(api, setup, max=3)["messages"] == []  # answered from the young look
    before = LogRepo.change("quotes")
    clock.t += 100
    _produce(api, setup, 1, key="other")
    assert LogRepo.change("quotes") == before  # unsignalled
    assert [m["body"] for m in _pull(api, setup, max=3)["messages"]] == ["m0"]


def test_an_unsignalled_append_to_the_acknowledged_queue_after_a_young_look_is_served(api, setup, clock):
    """The same on the queue the group just drained (its frontier the record's ``bnd``)."""
    _young_look(api, setup, clock)
    assert _pull(api, setup, max=3)["messages"] == []
    clock.t += 100
    _produce(api, setup, 2)  # key "k": the drained queue
    assert [m["body"] for m in _pull(api, setup, max=3)["messages"]] == ["m0", "m1"]


def test_a_young_look_past_the_window_is_kept_grown_up(api, setup, clock, frozen_caches):
    """The first pull past the window still probes (the young look's heads are not known for sure),
    and keeps the look grown up: the next reads the records and the marker alone."""
    _young_look(api, setup, clock)
    clock.t += 1_300
    with Calls() as c:
        assert _pull(api, setup, max=3)["messages"] == []
    assert c.calls == CONFIRMED, c.calls  # consistently: the probe that grows it up (review_f)
    with Calls() as c:
        assert _pull(api, setup, max=3)["messages"] == []
    assert c.calls == LOOKED, c.calls
    _produce(api, setup, 1, key="other")  # bumps: this container's last bump was 1.5 s ago
    assert [m["body"] for m in _pull(api, setup, max=3)["messages"]] == ["m0"]


def test_a_delayed_produce_bumps_the_marker_within_its_containers_second(api, setup, clock):
    """A young look's pull sees appends in the chains, not a delayed message's ``next_due``: every
    delayed produce moves the marker, even within a second of its container's last bump."""
    from lakeq.store.queue_log import LogRepo

    _produce(api, setup, 1)
    before = LogRepo.change("quotes")
    clock.t += 100
    s, b = api.call("POST", T, {"producer": "feed", "messages": [{"body": "late", "delay_ms": 50}]},
                    key=setup["feed"])
    assert s == 200, b
    after = LogRepo.change("quotes")
    assert after is not None and after.version == before.version + 1, (before, after)


def test_a_delayed_produce_behind_an_earlier_due_leaves_the_marker_within_the_second(api, setup, clock):
    """Only a delayed message that becomes its queue's earliest due forces the marker: one stored
    behind an earlier ``next_due`` changes nothing a look keeps (it waits for that earlier due), so
    a topic taking many delayed produces a second does not write its one marker item for each."""
    from lakeq.store.queue_log import LogRepo

    _produce(api, setup, 1)

    def delayed(body, ms):
        clock.t += 10
        s, b = api.call("POST", T, {"producer": "feed", "messages": [{"body": body, "key": "k", "delay_ms": ms}]},
                        key=setup["feed"])
        assert s == 200 and b["results"][0]["offset"] is None, b
        return LogRepo.change("quotes").version

    v0 = LogRepo.change("quotes").version
    assert delayed("d5000", 5_000) == v0 + 1  # the queue's first due: forced
    assert delayed("d6000", 6_000) == v0 + 1  # behind it: no write
    assert delayed("d6000b", 6_000) == v0 + 1
    assert delayed("d2000", 2_000) == v0 + 2  # earlier than next_due: forced


def test_delayed_messages_behind_an_earlier_due_are_served_in_due_order_after_a_young_look(api, setup, clock):
    """The young look's pulls learn of the earliest due from the forced bump; the later ones (no
    bump) are found when that due passes and its full round reads the queue's next ``next_due``."""
    _young_look(api, setup, clock)
    assert _pull(api, setup, max=3)["messages"] == []  # answered from the young look
    for body, ms in (("a", 300), ("c", 900), ("b", 600)):
        clock.t += 10
        s, b = api.call("POST", T, {"producer": "feed", "messages": [{"body": body, "key": "k", "delay_ms": ms}]},
                        key=setup["feed"])
        assert s == 200, b
    served = []
    for _ in range(12):
        clock.t += 100
        b = _pull(api, setup, max=3)
        served += [m["body"] for m in b["messages"]]
        if b["messages"]:
            _pull(api, setup, max=3, ack=b["receipt"])
    assert served == ["a", "b", "c"], served


def test_a_delayed_message_produced_inside_the_window_after_a_young_look_is_served_when_due(api, setup, clock):
    """The young look's pull learns of the delayed message from the marker its produce bumped (the
    chains show nothing: it is not appended before a pull or the sweep promotes it)."""
    _young_look(api, setup, clock)
    assert _pull(api, setup, max=3)["messages"] == []  # answered from the young look
    clock.t += 100
    s, b = api.call("POST", T, {"producer": "feed", "messages": [{"body": "late", "delay_ms": 50, "key": "k"}]},
                    key=setup["feed"])
    assert s == 200, b
    clock.t += 100  # due
    assert [m["body"] for m in _pull(api, setup, max=3)["messages"]] == ["late"]


def test_a_young_look_does_not_answer_for_a_queue_it_did_not_see(api, setup, clock):
    """A topic grown after the look: its new queue's append (unsignalled) is served — the young
    look's queues are not the topic's."""
    _young_look(api, setup, clock)
    from lakeq.log.produce_plan import queue_for_key

    s, b = api.call("PATCH", "/v1/topics/quotes", {"queues": 5})
    assert s == 200, (s, b)
    clock.t += 100
    assert queue_for_key("g0", 5) == 4  # the new queue
    _produce(api, setup, 1, key="g0")
    assert [(m["queue"], m["body"]) for m in _pull(api, setup, max=3)["messages"]] == [(4, "m0")]


# --- review_f: a probe's eventually consistent read right after the window ---
STALE_MS = 500  # a replica this far behind (DynamoDB: "usually within a second")


def _stale_replica(monkeypatch, clock):
    """``LogRepo.segments_at`` as a replica ``STALE_MS`` behind answers an eventually consistent read:
    a segment put less than that ago is not there yet; a strongly consistent read sees every one."""
    from lakeq.store.queue_log import LogRepo

    real = LogRepo.segments_at

    def segments_at(starts, consistent=False):
        if consistent:
            return real(starts, consistent=True)
        return {k: s for k, s in real(starts).items() if int(s.produced_at) <= clock.t - STALE_MS}
    monkeypatch.setattr(LogRepo, "segments_at", staticmethod(segments_at))
    real_with = LogRepo.change_and_segments_at

    def change_and_segments_at(topic, starts, consistent=False):  # the marker's read is consistent
        change, segs = real_with(topic, starts, consistent=consistent)
        return change, segs if consistent else {k: s for k, s in segs.items()
                                                 if int(s.produced_at) <= clock.t - STALE_MS}
    monkeypatch.setattr(LogRepo, "change_and_segments_at", staticmethod(change_and_segments_at))


def _drained_then_unsignalled(api, setup, clock, young: bool) -> list[str]:
    """The bump at t0 (3 messages, queue of key k), the marker read by a pull at t0 + 10, served at t0 + 500 (the replica caught up), then
    — ``young`` — acknowledged by a pull at t0 + 600 (a full round inside the window: a young look);
    at t0 + 900 one message more on another queue, unsignalled (this container bumped 900 ms ago);
    at t0 + 1,300 (past the window, t0 + 1,250) the first pull past the window: its probe is
    eventually consistent, and the replica does not have that segment yet. Returns what that pull served."""
    t0 = clock.t
    _produce(api, setup, 3)
    clock.t = t0 + 10  # a pull reads the marker at once (the replica does not have the segment yet)
    assert _pull(api, setup, max=3)["messages"] == []
    clock.t = t0 + 500
    b = _pull(api, setup, max=3)
    assert len(b["messages"]) == 3, b
    if young:
        clock.t = t0 + 600
        assert _pull(api, setup, max=3, ack=b["receipt"])["messages"] == []
    clock.t = t0 + 900
    _produce(api, setup, 1, key="other")
    clock.t = t0 + 1_300
    query = {} if young else {"ack": b["receipt"]}
    return [m["body"] for m in _pull(api, setup, max=3, **query)["messages"]]


def test_a_young_looks_probe_that_misses_a_segment_just_written_does_not_grow_it_up_over_it(
        api, setup, clock, monkeypatch):
    """review_f: the last append of the producing container's unsignalled second (no bump), then the
    first pull past the window: the young look's probe (eventually consistent) missed the segment
    written 400 ms before, and the look was kept grown up with the stale head — every later pull
    trusted the unchanged marker and answered empty until the 60-s safety net. The probe that grows
    a look up reads consistently, and when it finds a segment the full round's probe does too: the
    pull serves it at once (not once the replica has it)."""
    _stale_replica(monkeypatch, clock)
    # the consistent probe finds it, and the full round it sends the pull to reads it consistently too
    assert _drained_then_unsignalled(api, setup, clock, young=True) == ["m0"]


def test_a_full_rounds_probe_that_misses_a_segment_just_written_keeps_no_grown_up_look_over_it(
        api, setup, clock, monkeypatch):
    """review_f: the same through a full round, as before young looks (``YOUNG_LOOKS = False``: no
    look kept inside the window, so the first pull past it is a full round): its probe's eventually
    consistent read missed the segment, and the round was kept as a grown-up look with the stale
    head — the message waited for the 60-s safety net (since review_c's looks)."""
    from lakeq.consume import reader

    monkeypatch.setattr(reader, "YOUNG_LOOKS", False)
    _stale_replica(monkeypatch, clock)
    assert _drained_then_unsignalled(api, setup, clock, young=False) == []  # the replica is behind: a miss
    clock.t += 1_000
    assert [m["body"] for m in _pull(api, setup, max=3)["messages"]] == ["m0"]


def test_a_delayed_produce_retried_after_its_bump_failed_moves_the_marker_within_the_second(
        api, setup, clock, monkeypatch):
    """review_f: a delayed produce whose forced bump kept failing answers 503 (stored, unsignalled);
    the producer's retry with the same id answers the stored result and bumps — but without
    ``force``: within a second of this container's last bump it wrote nothing, and a young look's
    pulls (chains probed, the delayed message in none) and the look grown up from them answered
    empty past its due time until the 60-s safety net."""
    from lakeq.store.queue_log import LogRepo

    _young_look(api, setup, clock)  # this container bumped at t0; the look at t0 + 100
    msg = {"producer": "feed", "messages": [{"body": "late", "key": "k", "id": "d-1", "delay_ms": 50}]}

    def lost(*_a, **_k):
        raise RuntimeError("throttled")
    clock.t += 100
    with monkeypatch.context() as m:
        m.setattr(LogRepo, "bump_change", staticmethod(lost))
        s, b = api.call("POST", T, msg, key=setup["feed"])
    assert (s, b["error"]["code"]) == (503, "busy"), b  # stored, its bump lost
    clock.t += 100
    s, b = api.call("POST", T, msg, key=setup["feed"])  # the retry: the stored result
    assert s == 200 and b["results"][0]["offset"] is None, b
    served = []
    for step in (100, 2_000):  # due, then past the window (the look grown up)
        clock.t += step
        served += [m["body"] for m in _pull(api, setup, max=3, visibility_timeout_ms=60_000)["messages"]]
    assert served == ["late"], served


def test_a_delayed_due_its_rounds_replica_did_not_show_is_served_once_the_young_look_grows_up(
        api, setup, clock, monkeypatch):
    """review_g: a full round reads the queue items and the change marker in one eventually
    consistent BatchGetItem — two items, each from any replica. A delayed produce moves its queue's
    ``next_due`` earlier, then bumps (forced); a round just after it can read the marker with that
    bump and the queue item from a replica without the produce (no ``next_due``). Kept as a young look
    (wake None, the marker's version current), every later pull — the young look's probes (the
    chains show no delayed message) and the look grown up from them — trusted the unchanged marker
    and answered empty past the due until the 60-s safety net; and since a delayed produce behind
    that due forces no bump (9049cf3), the next delayed produces do not heal it either. The look
    grows up only on a strongly consistent read of its queue items' ``next_due`` too: the pull past
    the window serves it."""
    from lakeq.common.names import change_key, log_of
    from lakeq.store.catalog import TopicRepo
    from lakeq.store.queue_log import LogRepo

    _young_look(api, setup, clock)  # this container bumped at t0; a young look at t0 + 100
    log = log_of(TopicRepo.get("quotes"))
    real = LogRepo._items_and_change
    stale = [i for i in real(log, 4, None) if i["pq"]["S"] != change_key(log)]  # before the produce
    clock.t += 100
    s, b = api.call("POST", T, {"producer": "feed", "messages": [{"body": "late", "key": "k", "delay_ms": 50}]},
                    key=setup["feed"])
    assert s == 200 and b["results"][0]["offset"] is None, b  # next_due set, the marker bumped (forced)

    def behind(topic, n, only):  # the marker as it is, the queue items as before the produce
        fresh = real(topic, n, only)
        return [i for i in fresh if i["pq"]["S"] == change_key(topic)] + [
            i for i in stale if only is None or int(i["queue"]["N"]) in set(only)]
    clock.t += 10
    with monkeypatch.context() as m:
        m.setattr(LogRepo, "_items_and_change", staticmethod(behind))
        assert _pull(api, setup, max=3)["messages"] == []  # the marker moved: a full round, on the stale items
    served = []
    for step in (100, 2_000, 1_000):  # due (inside the window), past the window (grows up), then again
        clock.t += step
        b = _pull(api, setup, max=3)
        served += [m["body"] for m in b["messages"]]
        if b["messages"]:
            break
    assert served == ["late"], served


def test_a_delayed_retry_answered_by_its_write_losing_to_the_first_attempts_ids_forces_its_bump(
        api, setup, clock, monkeypatch):
    """review_g: review_d's race with a delayed message — the retry (after a client timeout, the
    first attempt still running) read the dedup table before the first attempt's transaction landed,
    then lost its own to the ids recorded meanwhile and answered their results (still delayed); the
    first attempt's forced bump failed (503 to a client that no longer waits). The retry stored
    nothing, so it moved no ``next_due`` and (since 9049cf3) did not force its bump: within its
    container's second it wrote nothing, and the young look's pulls answered empty past the due (until
    the look grew up). An answer from delayed ids recorded meanwhile forces, as one from the read."""
    _young_look(api, setup, clock)  # this container bumped at t0; a young look at t0 + 100
    msg = {"producer": "feed", "messages": [{"body": "late", "key": "k", "id": "raced-d", "delay_ms": 50}]}
    clock.t += 100
    (s, out), (s2, out2), reads = _retried_past_its_first_attempt(api, setup, monkeypatch, msg)
    assert (s, out["error"]["code"]) == (503, "busy"), out  # the first attempt: stored (next_due set), its bump lost
    s, out = s2, out2  # the retry: its first read ran before the first attempt's write
    assert s == 200 and out["results"][0]["offset"] is None, out
    assert len(reads) == 2, reads  # answered from the ids its write found recorded
    clock.t += 100  # due, inside the window: the marker is the young look's only news of it
    assert [m["body"] for m in _pull(api, setup, max=3)["messages"]] == ["late"]


def test_a_delayed_produce_that_fails_after_moving_a_due_earlier_signals_it(api, setup, clock, monkeypatch):
    """review_g: a request whose delayed messages go to two queues stores the first queue's (its
    ``next_due`` moved earlier) and answers 503 when the second's keeps losing its transaction
    (contended): the service's forced bump comes after every queue, so none was made — a grown-up
    look answered empty past the stored message's due until the 60-s safety net (and a retry without
    ids, its messages behind that due, forces nothing since 9049cf3). An append that fails after some
    writes signals them (``bump_change_hint``); the delayed path now does too, forced when a part
    moved a ``next_due`` earlier."""
    from lakeq.log.produce_plan import queue_for_key
    from lakeq.produce import delayed as delayed_mod

    _produce(api, setup, 1)
    b = _pull(api, setup, max=1)
    clock.t += 2_000
    assert _pull(api, setup, max=1, ack=b["receipt"])["messages"] == []  # the look
    assert _pull(api, setup, max=1)["messages"] == []  # its heads confirmed: grown up
    first, second = sorted({queue_for_key("k", 4), queue_for_key("other", 4)})
    key_of = {queue_for_key("k", 4): "k", queue_for_key("other", 4): "other"}
    assert first != second
    real = delayed_mod._add

    def contended_second(topic, q, part, results, now):
        if q == second:
            delayed_mod._contended()
        return real(topic, q, part, results, now)
    clock.t += 100
    with monkeypatch.context() as m:
        m.setattr(delayed_mod, "_add", contended_second)
        s, out = api.call("POST", T, {"producer": "feed", "messages": [
            {"body": "stored", "key": key_of[first], "delay_ms": 50},
            {"body": "lost", "key": key_of[second], "delay_ms": 50}]}, key=setup["feed"])
    assert (s, out["error"]["code"]) == (503, "busy"), out
    clock.t += 100  # due
    assert [m["body"] for m in _pull(api, setup, max=3)["messages"]] == ["stored"]


# --- cost33f: the bench's tail — the last queue held by one consumer, the others drained ---
# the pull whose ack= drains its queue, answered from the look: the fold's Query (segments from the
# frontier) and its ack (UpdateItem), the records, then the marker and the probes in one BatchGetItem
DRAINED_YOUNG = [("Query", "segments", False), ("UpdateItem", "offsets", False), ("Query", "offsets", True),
                 ("BatchGetItem", "queues,segments", (True, False))]
DRAINED_GROWN = [("Query", "segments", False), ("UpdateItem", "offsets", False), ("Query", "offsets", True),
                 ("BatchGetItem", "queues,segments", (True, True))]


def test_the_tails_empty_pull_reads_the_records_then_the_marker_and_probes_in_one_call(
        api, setup, clock, frozen_caches):
    """``bench/queue.py``'s tail: one consumer holds the only queue with messages left (more behind its
    lock), every other queue is drained; the others' pulls inside the marker's window (a young look)
    read the records, then the marker and the three drained queues' probes in one BatchGetItem —
    2 calls, 1 + 1 + 3 x 0.5 RRU (before cost33f 3 calls: the marker's GetItem, then the probes)."""
    _produce(api, setup, 3)
    _produce(api, setup, 3)  # a second segment behind the held lock
    held = _pull(api, setup, max=3, visibility_timeout_ms=10_000)
    assert [m["offset"] for m in held["messages"]] == [0, 1, 2]
    clock.t += 100
    assert _pull(api, setup, max=3)["messages"] == []  # a full round: kept as a young look
    for _ in range(2):
        clock.t += 100
        with Calls() as c:
            assert _pull(api, setup, max=3)["messages"] == []
        assert c.calls == PROBED, c.calls
    # the holder acknowledges with its next pull: the rest of its queue, folded
    s, b = api.call("GET", T, query={"group": "risk", "max": 3, "ack": held["receipt"]}, key=setup["risk"])
    assert s == 200 and [m["offset"] for m in b["messages"]] == [3, 4, 5]


def _held_then_looked(api, setup, clock, grown: bool, counted: bool = True) -> dict:
    """Three messages on queue k, held by one consumer; another pull finds nothing (a full round: a young
    look, not knowing queue k's head); ``grown``: past the window, one more pull grows the look up."""
    _produce(api, setup, 3)
    held = _pull(api, setup, max=3, visibility_timeout_ms=10_000)
    clock.t += 100
    assert _pull(api, setup, max=3)["messages"] == []
    if grown:
        clock.t += 1_300
        with Calls() as c:
            assert _pull(api, setup, max=3)["messages"] == []
        assert c.calls == CONFIRMED or not counted, c.calls
    clock.t += 100
    return held


@pytest.mark.parametrize("grown", [False, True])
def test_the_pull_that_drains_its_queue_by_its_ack_is_answered_from_the_look(api, setup, clock, frozen_caches, grown):
    """The consumer holding the last batch acknowledges it with its next pull (``ack=``) after another pull
    kept an empty look: its queue was locked then, so the look does not know its head, and the pull ran a
    full round (queue items + marker, probes: 4.5-5.5 RRU at 4 queues). Its fold has just read that queue's
    chain from the lock's end — the record's ``bnd``, a segment's end — and found nothing: the look
    answers with that queue probed at its frontier too (young: every lockable queue probed, eventually
    consistently; grown: that queue alone, consistently, then kept in the look: the next pull reads the
    records and the marker alone)."""
    held = _held_then_looked(api, setup, clock, grown)
    with Calls() as c:
        assert _pull(api, setup, max=3, ack=held["receipt"])["messages"] == []
    assert c.calls == (DRAINED_GROWN if grown else DRAINED_YOUNG), c.calls
    with Calls() as c:  # the look knows that queue's head now
        assert _pull(api, setup, max=3)["messages"] == []
    assert c.calls == (LOOKED if grown else PROBED), c.calls


@pytest.mark.parametrize("grown", [False, True])
def test_an_append_to_the_drained_queue_the_folds_read_missed_is_served(api, setup, clock, monkeypatch, grown):
    """The fold's read of the acknowledged queue is eventually consistent: a segment put 100 ms before
    (young: unsignalled, this container's second; grown: signalled) is not on the replica yet, so the
    fold finds nothing. Young: the look's probe at that frontier (eventually consistent) misses it
    too; grown: the marker moved, and the full round's probe (eventually consistent) misses it — the
    pull answers empty either way, as the full round did before cost33f; the next pull once the
    replica has it serves it (the look, young, keeps probing that queue)."""
    from lakeq.store.queue_log import LogRepo

    held = _held_then_looked(api, setup, clock, grown, counted=False)
    real_read = LogRepo.read.__func__

    def stale_read(cls, topic, queue, start, max_offsets, first=None):  # the new segment (base 3) not yet
        for s in real_read(cls, topic, queue, start, max_offsets, first):
            if s.base < 3 or clock.t >= put_at + STALE_MS:
                yield s
    monkeypatch.setattr(LogRepo, "read", classmethod(stale_read))
    _stale_replica(monkeypatch, clock)
    put_at = clock.t
    _produce(api, setup, 1)  # queue k, behind the held batch
    clock.t += 100
    assert _pull(api, setup, max=3, ack=held["receipt"])["messages"] == []
    clock.t += STALE_MS
    assert [m["body"] for m in _pull(api, setup, max=3)["messages"]] == ["m0"]


def test_a_look_the_marker_moved_past_is_dropped(api, setup, clock, frozen_caches):
    """A pull that finds the marker moved since the look (a produce) runs its full round, which here
    locks the new message and so keeps no look: the group's next pull in the container went through
    the old look again — the records, the marker (1 RRU, moved still) — before its own full round. The
    look is dropped on the first miss (cost33f): the next pull runs the full round at once."""
    _produce(api, setup, 3)
    b = _pull(api, setup, max=3)
    clock.t += 2_000
    assert _pull(api, setup, max=3, ack=b["receipt"])["messages"] == []
    assert _pull(api, setup, max=3)["messages"] == []  # grows the look up
    with Calls() as c:
        assert _pull(api, setup, max=3)["messages"] == []
    assert c.calls == LOOKED, c.calls
    _produce(api, setup, 1, key="other")  # bumps: this container's last bump was 2 s ago
    with Calls() as c:
        assert [m["body"] for m in _pull(api, setup, max=3)["messages"]] == ["m0"]
    assert c.calls[:3] == [("Query", "offsets", True), ("GetItem", "queues", True),
                           ("BatchGetItem", "queues", False)], c.calls
    with Calls() as c:  # that queue locked, the others drained: nothing
        assert _pull(api, setup, max=3)["messages"] == []
    assert c.calls[:2] == [("BatchGetItem", "queues", False), ("Query", "offsets", True)], c.calls
