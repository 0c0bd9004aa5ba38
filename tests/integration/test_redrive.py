"""Redrive (issue 18.3) on moto: dead letters moved back to their source topics (or a chosen one)
at a rate, with progress; crash and restart without a duplicate or a loss; cancel; auth and bad
input changing nothing; the schedule running it as RedriveFunction (its IAM role applies)."""
from __future__ import annotations

import pytest

from infra.local import interceptor
from lakeq.log import move_plan as mp
from lakeq.redrive import service as redrive
from lakeq.store.models import SegmentModel
from lakeq.store.redrives import RedriveModel
from tests.crash import CrashAfter
from tests.handlers import Context, expire_dedup, load_function, make_dlq

T = "/v1/topics/quotes%2Fsh/messages"


def produce(api, key, n, start=0):
    msgs = [{"id": f"m{i}", "body": f"b{i}", "key": f"k{i}", "properties": {"n": i}} for i in range(start, start + n)]
    s, b = api.call("POST", T, {"producer": "feed", "messages": msgs}, key=key)
    assert s == 200, b
    return b


def dead_letter(api, setup, n, start=0):
    """``n`` messages produced to quotes/sh and rejected by risk: ``n`` copies in ``dlq``."""
    produce(api, setup["feed"], n, start)
    left = n
    while left > 0:
        s, b = api.call("GET", T, query={"group": "risk", "max": 100}, key=setup["risk"])
        assert s == 200 and b["messages"], b
        s, out = api.call("POST", "/v1/acks", {"group": "risk", "receipt": b["receipt"],
                                               "reject": [m["offset"] for m in b["messages"]]}, key=setup["risk"])
        assert s == 200, out
        left -= len(b["messages"])


@pytest.fixture
def dlq(api, setup, clock, monkeypatch):
    """Topic ``dlq`` (2 queues) that risk dead-letters to; consumer ``dlqc`` reads it; the
    runner's sleep moves the fake clock (``slept`` lists the waits, ms)."""
    dlqc = make_dlq(api, "dlqc", queues=2)
    assert api.call("PATCH", "/v1/clients/risk", {"dead_letter_topic": "dlq"})[0] == 200
    slept: list[int] = []
    hooks: list = []

    def sleep(seconds: float) -> None:
        ms = round(seconds * 1000)
        slept.append(ms)
        clock.t += ms
        for h in hooks:
            h()
    monkeypatch.setattr(redrive, "sleep", sleep)
    return {"dlqc": dlqc, "slept": slept, "on_sleep": hooks}


def copies(topic_log="quotes/sh"):
    """Every message of the topic's queues: (id, body, key, dead_letter?, produced_at)."""
    from lakeq.log import segments as seg
    out = []
    for item in SegmentModel.scan(consistent_read=True):
        if item.pq.rsplit("#", 1)[0] != topic_log:
            continue
        s = seg.Segment(int(item.base), int(item.count), item.idx, item.data, bool(item.z))
        out += [(m["id"], m["body"], m["key"], m.get("dead_letter"), m["produced_at"]) for m in seg.all_headers(s)]
    return out


def moved(topic_log="quotes/sh"):
    return sorted((i, b) for i, b, _, _, _ in copies(topic_log) if i.startswith("mv-"))


def start(api, body, status=202):
    s, b = api.call("POST", "/v1/redrives", body)
    assert s == status, b
    return b


def test_dead_letters_go_back_to_their_source(api, setup, dlq):
    dead_letter(api, setup, 5)
    r = start(api, {"source": "dlq"})
    assert r["status"] == "completed" and (r["total"], r["moved"], r["failed"], r["remaining"]) == (5, 5, 0, 0)
    assert r["rate"] == mp.DEFAULT_RATE and r["source"] == "dlq" and r["destination"] is None
    got = [c for c in copies() if c[0].startswith("mv-")]
    assert sorted(b for _, b, _, _, _ in got) == [f"b{i}" for i in range(5)]
    assert all(dl is None for _, _, _, dl, _ in got)  # back in their topic: no dead_letter record
    assert sorted(k for _, _, k, _, _ in got) == [f"k{i}" for i in range(5)]  # key kept: same queue as before
    s, view = api.call("GET", f"/v1/redrives/{r['id']}")
    assert s == 200 and view == r
    # the dead-letter topic's own consumers are untouched: dlqc still reads all five
    s, b = api.call("GET", "/v1/groups/dlqc/offsets", query={"topic": "dlq"}, key=dlq["dlqc"])
    assert s == 200 and b["backlog"] == 5
    # risk is served the moved messages again
    served = []
    while True:
        s, b = api.call("GET", T, query={"group": "risk", "max": 100}, key=setup["risk"])
        if not b["messages"]:
            break
        served += [m["body"] for m in b["messages"]]
        assert api.call("POST", "/v1/acks", {"group": "risk", "receipt": b["receipt"]}, key=setup["risk"])[0] == 200
    assert sorted(served) == [f"b{i}" for i in range(5)]
    # a second redrive starts where the first stopped: nothing to move, nothing moved twice
    r2 = start(api, {"source": "dlq"})
    assert (r2["status"], r2["total"], r2["moved"]) == ("completed", 0, 0)
    dead_letter(api, setup, 1, start=10)
    r3 = start(api, {"source": "dlq"})
    assert (r3["total"], r3["moved"]) == (1, 1)
    assert len(moved()) == 6
    s, lst = api.call("GET", "/v1/redrives", query={"source": "dlq"})
    assert s == 200 and sorted(x["id"] for x in lst["redrives"]) == sorted([r["id"], r2["id"], r3["id"]])
    assert api.call("GET", "/v1/redrives", query={"source": "other"})[1] == {"redrives": []}


def test_to_a_chosen_destination_and_what_cannot_go_back(api, setup, dlq):
    assert api.call("POST", "/v1/topics", {"name": "retry", "queues": 1})[0] == 201
    dead_letter(api, setup, 3)
    r = start(api, {"source": "dlq", "destination": "retry"})
    assert (r["moved"], r["failed"]) == (3, 0)
    assert sorted(b for _, b in moved("retry")) == ["b0", "b1", "b2"] and moved() == []
    # a message that is no dead-lettered copy has nowhere to go back to: skipped, counted failed
    s, _ = api.call("POST", "/v1/clients", {"name": "dlqfeed", "role": "producer", "topics": ["dlq"]})
    s, b = api.call("POST", "/v1/topics/dlq/messages", {"producer": "dlqfeed", "messages": [{"body": "stray"}]})
    assert s == 200
    r = start(api, {"source": "dlq"})
    assert (r["status"], r["moved"], r["failed"]) == ("completed", 0, 1) and "no source topic" in r["last_error"]


def test_bad_requests_and_auth_change_nothing(api, setup, dlq):
    dead_letter(api, setup, 2)
    before = sorted(str(i.attribute_values) for i in RedriveModel.scan())
    cases = [
        (api.call("POST", "/v1/redrives", {"source": "dlq"}, key="nope"), 401),
        (api.call("POST", "/v1/redrives", {"source": "dlq"}, key=setup["risk"]), 403),
        (api.call("POST", "/v1/redrives", raw_body="{"), 400),
        (api.call("POST", "/v1/redrives", {"source": "dlq", "rate": 0}), 400),
        (api.call("POST", "/v1/redrives", {"source": "dlq", "rate": 501}), 400),
        (api.call("POST", "/v1/redrives", {"source": "dlq", "destination": "dlq"}), 400),
        (api.call("POST", "/v1/redrives", {"source": "a//b"}), 400),
        (api.call("POST", "/v1/redrives", {"source": "nosuch"}), 404),
        (api.call("POST", "/v1/redrives", {"source": "dlq", "destination": "nosuch"}), 404),
        (api.call("GET", "/v1/redrives/0123"), 404),
        (api.call("GET", "/v1/redrives", key=setup["risk"]), 403),
        (api.call("GET", "/v1/redrives", query={"status": "x"}), 400),
        (api.call("POST", "/v1/redrives/0123/cancel"), 404),
    ]
    for (status, body), want in cases:
        assert status == want, body
        assert set(body["error"]) == {"code", "message"}
    assert sorted(str(i.attribute_values) for i in RedriveModel.scan()) == before == []
    assert moved() == []


def test_an_unknown_field_is_400_and_changes_nothing(api, setup, dlq):
    """A typo of ``destination`` was ignored: the redrive started (202) and sent the messages back to
    their sources instead of to ``retry``."""
    assert api.call("POST", "/v1/topics", {"name": "retry", "queues": 1})[0] == 201
    dead_letter(api, setup, 2)
    segments = sorted(str(i.attribute_values) for i in SegmentModel.scan(consistent_read=True))
    for body in ({"source": "dlq", "destinaton": "retry"}, {"source": "dlq", "rate": 5, "speed": 1}):
        s, b = api.call("POST", "/v1/redrives", body)
        assert s == 400, b
        assert set(b) == {"error"} and b["error"]["code"] == "bad_request"
        assert ("destinaton" if "destinaton" in body else "speed") in b["error"]["message"]
    assert sorted(str(i.attribute_values) for i in RedriveModel.scan()) == []  # no redrive, no kept position
    assert sorted(str(i.attribute_values) for i in SegmentModel.scan(consistent_read=True)) == segments
    assert moved() == moved("retry") == []
    s, b = api.call("POST", "/v1/redrives", {"source": "dlq", "destination": "retry"})  # as meant: 202
    assert s == 202 and b["moved"] == 2 and len(moved("retry")) == 2, b


def _start_later(body: dict) -> str:
    """A redrive created without running it (the schedule will)."""
    import json

    from lakeq.admin.auth import Principal
    return redrive.start(Principal(admin=True), json.dumps(body), budget_ms=0)["id"]


def _run(rid: str, budget_ms: int = 20_000):
    with interceptor.acting_as("RedriveFunction"):  # its role applies
        return redrive.run(rid, budget_ms)


def test_a_crash_after_any_store_call_neither_duplicates_nor_loses(api, setup, dlq, clock, monkeypatch):
    monkeypatch.setattr(mp, "MAX_BATCH", 3)  # several batches
    dead_letter(api, setup, 7)
    rid = _start_later({"source": "dlq", "rate": 500})
    k = 1
    crashes = 0
    while True:
        with CrashAfter(k, {"RedriveFunction"}) as c:
            crashed, _ = c.run(lambda: _run(rid))
        if not crashed:
            break
        crashes += 1
        clock.t += 40_000  # the dead runner's lease runs out
        k += 1  # the next run dies one call later
    assert crashes >= 5
    r = RedriveModel.get(rid)
    assert r.status == "completed" and int(r.moved) == 7 and int(r.failed) == 0
    assert sorted(b for _, b in moved()) == [f"b{i}" for i in range(7)]  # each exactly once


def test_every_prefix_of_one_batch(api, setup, dlq, clock):
    """Crash after each store call of a one-batch run, then restart: one copy each, all moved.
    Between prefixes the redrive is set back to its start (the copies stay: the restart must find
    them in the dedup table and not append them again)."""
    from lakeq.store.redrives import M, source_key
    dead_letter(api, setup, 2)
    rid = _start_later({"source": "dlq"})
    snap = RedriveModel.get(rid)  # the item itself (RedriveRepo hands out records), put back below
    k = 1
    while True:
        with CrashAfter(k, {"RedriveFunction"}) as c:
            crashed, _ = c.run(lambda: _run(rid))
        if not crashed:
            break
        clock.t += 40_000  # the dead runner's lease runs out
        _run(rid)  # the restart finishes it
        r = RedriveModel.get(rid)
        assert r.status == "completed" and int(r.moved) == 2, (k, r.attribute_values)
        assert sorted(b for _, b in moved()) == ["b0", "b1"], k
        snap.save()
        M(source_key("dlq"), active=rid).save()
        k += 1
    assert k > 5  # the run made that many store calls, each a crash point
    assert sorted(b for _, b in moved()) == ["b0", "b1"]


def test_the_rate_is_kept(api, setup, dlq, clock):
    dead_letter(api, setup, 12)
    rid = _start_later({"source": "dlq", "rate": 10})  # batches of 2, one every 200 ms
    t0 = clock.t
    times: list[int] = []
    real_copy = redrive._copy

    def timed(dest, items, now):
        times.extend([clock.t] * len(items))
        return real_copy(dest, items, now)
    mpatch = pytest.MonkeyPatch()
    mpatch.setattr(redrive, "_copy", timed)
    try:
        r = _run(rid, 60_000)
    finally:
        mpatch.undo()
    assert r["status"] == "completed" and r["moved"] == 12
    for i, t in enumerate(sorted(times)):  # the i-th message no sooner than the rate allows
        assert t >= t0 + (i // 2) * 200, (i, t - t0)
    assert clock.t - t0 >= 1000  # 12 messages at 10/s: at least 1 s (the first batch goes at once)
    assert sum(dlq["slept"]) >= 1000


def test_a_budget_ends_a_run_and_the_next_goes_on(api, setup, dlq, clock):
    dead_letter(api, setup, 6)
    rid = _start_later({"source": "dlq", "rate": 1})  # one message a second
    r = _run(rid, 2_500)
    assert r["status"] == "running" and r["moved"] == 3 and r["remaining"] == 3
    clock.t += 20_000
    r = _run(rid, 60_000)
    assert r["status"] == "completed" and r["moved"] == 6


def test_cancel(api, setup, dlq, clock):
    dead_letter(api, setup, 6)
    rid = _start_later({"source": "dlq", "rate": 1})  # one message a second
    answers = []

    def cancel_once():  # the operator cancels while the runner waits for its second slot
        if not answers:
            answers.append(api.call("POST", f"/v1/redrives/{rid}/cancel"))
            answers.append(api.call("POST", "/v1/redrives", {"source": "dlq"}))
    dlq["on_sleep"].append(cancel_once)
    r = _run(rid, 60_000)
    dlq["on_sleep"].clear()
    assert answers[0][0] == 200 and answers[0][1]["status"] == "cancelling"
    assert answers[1][0] == 409 and answers[1][1]["error"]["code"] == "redrive_running"
    # the runner recorded the batch in hand, then ended it
    assert r["status"] == "cancelled" and r["moved"] == 2 and r["remaining"] == 0
    assert api.call("POST", f"/v1/redrives/{rid}/cancel")[0] == 409
    # a new redrive moves the rest, nothing twice
    r2 = start(api, {"source": "dlq", "rate": 500})
    assert (r2["status"], r2["total"], r2["moved"]) == ("completed", 4, 4)
    assert sorted(b for _, b in moved()) == [f"b{i}" for i in range(6)]
    # cancel with no runner holding it: cancelled at once
    rid3 = _start_later({"source": "dlq"})
    s, b = api.call("POST", f"/v1/redrives/{rid3}/cancel")
    assert s == 200 and b["status"] == "cancelled" and b["moved"] == 0
    assert start(api, {"source": "dlq"})["status"] == "completed"  # the source is free again


def test_the_schedule_runs_redrives_as_the_function(api, setup, dlq, capsys):
    from tests.emf import documents, problems
    dead_letter(api, setup, 3)
    rid = _start_later({"source": "dlq"})
    fn = load_function("RedriveFunction")
    capsys.readouterr()
    out = fn({"source": "aws.events", "detail-type": "Scheduled Event", "resources": [], "detail": {}}, Context())
    assert out == {"redrives": 1}
    assert RedriveModel.get(rid).status == "completed" and len(moved()) == 3
    # its progress as metrics, per redrive (issue 34)
    (doc,) = [d for d in documents(capsys.readouterr().out) if "Redrive" in d]
    assert problems(doc) == [] and doc["Redrive"] == rid
    assert (doc["RedriveMessagesMoved"], doc["RedriveMessagesTotal"]) == ([3.0], [3.0])


def _crash_before_progress(rid: str, monkeypatch) -> None:
    """One run that dies after appending its batch's copies and before recording its progress."""
    from lakeq.store.redrives import RedriveRepo

    class Died(Exception):
        pass

    def die(*a, **k):
        raise Died()
    with monkeypatch.context() as m:
        m.setattr(RedriveRepo, "progress", staticmethod(die))
        with pytest.raises(Died):
            _run(rid)


@pytest.mark.parametrize("hours, refused", [(22, False), (25, True)])
def test_a_crashed_batch_resumed_past_the_dedup_window_is_refused_not_copied_twice(
        api, setup, dlq, clock, monkeypatch, hours, refused):
    """The copies' ids are dropped as duplicates only while the destination's dedup items live
    (24 h): a runner resumed later than that after a crash between a batch's copies and its
    progress write would copy the batch again. Within the window it finishes exactly once; past
    it the redrive fails saying why, and nothing is copied twice."""
    dead_letter(api, setup, 3)
    rid = _start_later({"source": "dlq"})
    _crash_before_progress(rid, monkeypatch)
    assert sorted(b for _, b in moved()) == ["b0", "b1", "b2"]  # copied, progress not recorded
    clock.t += hours * 3_600_000
    assert expire_dedup(clock.t) == (9 if refused else 0)  # the produce's, the dead letters' and the copies' ids
    _run(rid)
    r = RedriveModel.get(rid)
    assert sorted(b for _, b in moved()) == ["b0", "b1", "b2"]  # each exactly once
    if refused:
        assert r.status == "failed" and "resume refused" in r.last_error, r.attribute_values
        assert int(r.moved) == 0 and r.lease_until is None
    else:
        assert r.status == "completed" and int(r.moved) == 3, r.attribute_values


def test_a_clean_stop_resumes_after_any_pause(api, setup, dlq, clock, monkeypatch):
    monkeypatch.setattr(mp, "MAX_BATCH", 2)
    dead_letter(api, setup, 5)
    rid = _start_later({"source": "dlq", "rate": 2})  # a batch of 2 a second
    _run(rid, budget_ms=1_500)  # the budget ends the run: its lease is given back
    r = RedriveModel.get(rid)
    assert r.status == "running" and r.lease_until is None and 0 < int(r.moved) < 5, r.attribute_values
    clock.t += 72 * 3_600_000
    expire_dedup(clock.t)
    _run(rid, budget_ms=60_000)
    r = RedriveModel.get(rid)
    assert r.status == "completed" and int(r.moved) == 5, r.attribute_values
    assert sorted(b for _, b in moved()) == [f"b{i}" for i in range(5)]


@pytest.mark.parametrize("failing", [False, True])
def test_the_schedule_shares_its_time_and_a_failing_redrive_stops_none(api, setup, dlq, clock, monkeypatch,
                                                                       failing):
    """Running redrives of two sources (three with ``failing``) at 1 message a second, one
    invocation of 6 s: the one whose batches raise is logged and counted in ``errors``; the two
    others each get their share of the time (before, the first took the whole budget and the
    second moved nothing; and a raise ended the invocation)."""
    dead_letter(api, setup, 6)
    for name in ("dlq2", "dlq3"):
        assert api.call("POST", "/v1/topics", {"name": name, "queues": 1})[0] == 201
        assert api.call("POST", "/v1/clients", {"name": f"{name}feed", "role": "producer",
                                                "topics": [name]})[0] == 201
        msgs = [{"body": f"{name}-{i}"} for i in range(6)]
        assert api.call("POST", f"/v1/topics/{name}/messages", {"producer": f"{name}feed", "messages": msgs})[0] == 200
    ids = {"dlq": _start_later({"source": "dlq", "rate": 1}),
           "dlq2": _start_later({"source": "dlq2", "destination": "quotes/sh", "rate": 1})}
    if failing:
        ids["dlq3"] = _start_later({"source": "dlq3", "destination": "quotes/sh", "rate": 1})
    real = redrive._batch

    def batch(r, *a, **k):
        if r.source == "dlq3":
            raise RuntimeError("this destination refuses every write")
        return real(r, *a, **k)
    monkeypatch.setattr(redrive, "_batch", batch)
    with interceptor.acting_as("RedriveFunction"):
        out = redrive.run_all(6_000)
    assert out == ({"redrives": 3, "errors": 1} if failing else {"redrives": 2})
    got = {s: RedriveModel.get(rid) for s, rid in ids.items()}
    if failing:
        assert got["dlq3"].status == mp.RUNNING and int(got["dlq3"].moved or 0) == 0
    moved_ = {s: int(got[s].moved or 0) for s in ("dlq", "dlq2")}
    # (the order is the ids': a share is 2 or 3 s, a message a second, the first at once; a run
    # that stops before its share's end (its next slot past it) leaves the rest to those after it)
    assert min(moved_.values()) >= 2 and sum(moved_.values()) <= 7, moved_
    assert all(got[s].status == mp.RUNNING for s in moved_)  # the rest waits for the next minute
