"""Delayed delivery (issue 9, ``delay_ms``) through the real handlers on moto, with the clock seam
``lakeq.common.clock.now``: never delivered before ``deliver_at``, joins its queue when due (a pull or the
scheduled PromoterFunction), in due order then id, exactly once (retries, dedup, racing promoters,
concurrent delayed produces), and ``delayed`` counts in ``GET /v1/topics/{topic}``."""
from __future__ import annotations

import json
import threading

from infra.local import interceptor
from lakeq.admin.auth import Principal
from lakeq.consume import service
from lakeq.produce import delayed
from lakeq.produce import service as produce_service
from lakeq.store.models import QueueModel
from tests.handlers import Context, load_function, this_thread_sleep
from tests.history import drain, path

T = "quotes/sh"
P = path(T)


def produce(api, key, messages, topic=T):
    return api.call("POST", path(topic), {"producer": "feed", "messages": messages}, key=key)


def pull(api, key, group="risk", topic=T, **q):
    return api.call("GET", path(topic), query={"group": group, "max": 100, **q}, key=key)


def ack(api, key, receipt, group="risk"):
    s, b = api.call("POST", "/v1/acks", {"group": group, "receipt": receipt}, key=key)
    assert s == 200, b


def as_function(function, fn, *args, **kw):
    """Call the core as ``function`` (its IAM role applies): for threads, since the in-process
    handlers' routers keep the current event in module state (Lambda runs one request at a time)."""
    with interceptor.acting_as(function):
        return fn(*args, **kw)


def core_produce(client, messages, topic=T):
    return as_function("ProduceFunction", produce_service.produce, Principal(False, client), topic,
                       json.dumps({"producer": client, "messages": messages}))


def core_pull(client, group):
    return as_function("ConsumeFunction", service.pull, Principal(False, client), T, {"group": group, "max": "100"})


def detail(api, topic=T):
    s, b = api.call("GET", f"/v1/topics/{topic.replace('/', '%2F')}")
    assert s == 200, b
    return b


def test_delay_ms_bad_input_changes_nothing(api, setup):
    for bad in (-1, 900_001, 2.5, "5", True):
        s, b = produce(api, setup["feed"], [{"id": "a", "body": "x", "delay_ms": bad}])
        assert s == 400 and b["error"]["code"] == "bad_request", (bad, s, b)
        assert "delay_ms" in b["error"]["message"]
    assert detail(api)["produced"] == 0 and detail(api)["delayed"] == 0
    s, b = produce(api, setup["feed"], [{"id": "a", "body": "x"}])
    assert s == 200 and b["results"] == [{"id": "a", "queue": b["results"][0]["queue"], "offset": 0}]


def test_never_early_then_in_due_order(api, setup, clock):
    t0 = clock.t
    s, b = produce(api, setup["feed"], [
        {"id": "late", "body": "L", "key": "k", "delay_ms": 5000, "tags": ["x"], "properties": {"n": 1}},
        {"id": "b", "body": "B", "key": "k", "delay_ms": 3000},
        {"id": "a", "body": "A", "key": "k", "delay_ms": 3000},
        {"body": "now", "key": "k"},
        {"body": "zero", "key": "k", "delay_ms": 0},
    ])
    assert s == 200, b
    r = b["results"]
    q = r[0]["queue"]
    assert r[0] == {"id": "late", "queue": q, "offset": None, "deliver_at": t0 + 5000}
    assert r[1] == {"id": "b", "queue": q, "offset": None, "deliver_at": t0 + 3000}
    assert r[2] == {"id": "a", "queue": q, "offset": None, "deliver_at": t0 + 3000}
    assert [x["offset"] for x in r[3:]] == [0, 1] and all(x["queue"] == q for x in r[3:])
    gen = produce(api, setup["feed"], [{"body": "g", "key": "k", "delay_ms": 10}])[1]["results"][0]
    assert gen["offset"] is None and gen["id"] and gen["deliver_at"] == t0 + 10  # a generated id
    d = detail(api)
    assert d["delayed"] == 4 and d["queue_offsets"][q]["delayed"] == 4 and d["queue_offsets"][q]["next_due"] == t0 + 10

    s, got = pull(api, setup["risk"])
    assert [m["body"] for m in got["messages"]] == ["now", "zero"]
    ack(api, setup["risk"], got["receipt"])
    clock.t = t0 + 9
    assert pull(api, setup["risk"])[1]["messages"] == []
    clock.t = t0 + 10
    s, got = pull(api, setup["risk"])
    assert [m["body"] for m in got["messages"]] == ["g"] and got["messages"][0]["offset"] == 2
    ack(api, setup["risk"], got["receipt"])
    clock.t = t0 + 2999
    assert pull(api, setup["risk"])[1]["messages"] == []  # never before deliver_at
    assert detail(api)["delayed"] == 3
    clock.t = t0 + 3000
    s, got = pull(api, setup["risk"])
    msgs = got["messages"]
    assert [(m["id"], m["offset"]) for m in msgs] == [("b", 3), ("a", 4)]  # due order, then request order
    assert all(m["produced_at"] == t0 for m in msgs)  # produced_at: the produce time
    ack(api, setup["risk"], got["receipt"])
    clock.t = t0 + 4999
    assert pull(api, setup["risk"])[1]["messages"] == []
    clock.t = t0 + 7000
    s, got = pull(api, setup["risk"])
    (m,) = got["messages"]
    assert (m["id"], m["offset"], m["body"], m["key"], m["tags"], m["properties"], m["produced_at"]) == \
        ("late", 5, "L", "k", ["x"], {"n": 1}, t0)
    d = detail(api)
    assert d["delayed"] == 0 and d["queue_offsets"][q]["next_due"] is None and d["queue_offsets"][q]["max_offset"] == 6


def test_retry_answers_and_dedup(api, setup, clock):
    t0 = clock.t
    req = [{"id": "d1", "body": "one", "key": "k", "delay_ms": 1000},
           {"id": "d2", "body": "two", "key": "k2", "delay_ms": 2000}]
    s, first = produce(api, setup["feed"], req)
    assert s == 200
    clock.t = t0 + 500  # a retry later: the same answer (deliver_at from the first produce)
    assert produce(api, setup["feed"], req) == (200, first)
    # the same id again without a delay, or with another: answered from the record, not stored again
    s, b = produce(api, setup["feed"], [{"id": "d1", "body": "other", "key": "zz"},
                                        {"id": "d2", "body": "two", "key": "k2", "delay_ms": 5}])
    assert b["results"] == first["results"]
    clock.t = t0 + 1000
    s, got = pull(api, setup["risk"])
    assert [m["id"] for m in got["messages"]] == ["d1"]
    ack(api, setup["risk"], got["receipt"])
    s, after = produce(api, setup["feed"], req)
    q1, q2 = first["results"][0]["queue"], first["results"][1]["queue"]
    assert after["results"] == [{"id": "d1", "queue": q1, "offset": 0},
                                {"id": "d2", "queue": q2, "offset": None, "deliver_at": t0 + 2000}]
    clock.t = t0 + 2000
    log = drain(api, T, "risk", setup["risk"])
    assert [m["id"] for ms in log.values() for m in ms] == ["d2"]
    s, after = produce(api, setup["feed"], req)
    assert after["results"][1] == {"id": "d2", "queue": q2, "offset": 1 if q1 == q2 else 0}
    assert drain(api, T, "risk", setup["risk"]) == {}  # nothing stored twice
    assert detail(api)["produced"] == 2 and detail(api)["delayed"] == 0


def test_scheduled_promoter_without_consumers(api, setup, clock):
    """Nobody pulls: the PromoterFunction (as itself: its IAM role) moves due messages into their
    queues, in several transactions when there are many (49 client ids per transaction)."""
    promoter = load_function("PromoterFunction")
    t0 = clock.t
    msgs = [{"id": f"m{i:03d}", "body": f"b{i}", "key": "k", "delay_ms": 1000 + (i % 3)} for i in range(100)]
    assert produce(api, setup["feed"], msgs)[0] == 200
    assert produce(api, setup["feed"], [{"body": f"n{i}", "key": "k", "delay_ms": 1000} for i in range(30)])[0] == 200
    assert promoter({}, Context()) == {"queues": 0, "promoted": 0}
    assert detail(api)["delayed"] == 130
    clock.t = t0 + 1000
    assert promoter({}, Context()) == {"queues": 1, "promoted": 34 + 30}  # due at +1000: 34 ids, 30 without
    assert detail(api)["delayed"] == 66
    clock.t = t0 + 5000
    promoter({}, Context())
    d = detail(api)
    assert d["delayed"] == 0 and d["produced"] == 130
    log = drain(api, T, "risk", setup["risk"])
    (ms,) = log.values()
    got = [m.get("id") if m["body"].startswith("b") else m["body"] for m in ms]
    assert [m["offset"] for m in ms] == list(range(130))
    # due order, then id: +1000 holds m000, m003, ... and the 30 generated ids (any order among them)
    first = ms[:64]
    assert sorted(int(m["body"][1:]) for m in first if m["body"].startswith("b")) == list(range(0, 100, 3))
    assert len([m for m in first if m["body"].startswith("n")]) == 30
    assert [m["id"] for m in ms[64:]] == [f"m{i:03d}" for r in (1, 2) for i in range(100) if i % 3 == r]
    assert len(set(got)) == 130


def test_promotion_races_exactly_once(api, setup, clock):
    """Pullers and the scheduled promoter race to promote the same due messages: each joins once."""
    t0 = clock.t
    msgs = [{"id": f"r{i:02d}", "body": f"r{i}", "key": "k", "delay_ms": 100} for i in range(60)]
    msgs += [{"body": f"x{i}", "key": "k", "delay_ms": 100} for i in range(40)]
    assert produce(api, setup["feed"], msgs)[0] == 200
    clock.t = t0 + 100
    s, c = api.call("POST", "/v1/clients", {"name": "c2", "role": "consumer", "topics": ["quotes"]})
    promoter = load_function("PromoterFunction")
    errors = []

    def run(fn):
        try:
            fn()
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    workers = [lambda: core_pull("risk", "risk"), lambda: core_pull("c2", "c2"),
               lambda: promoter({}, Context()), lambda: as_function("PromoterFunction", delayed.sweep),
               lambda: core_pull("c2", "c2")]
    threads = [threading.Thread(target=run, args=(w,)) for w in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    d = detail(api)
    assert d["delayed"] == 0 and d["produced"] == 100
    log = drain(api, T, "probe", probe_key(api))
    (ms,) = log.values()
    assert [m["offset"] for m in ms] == list(range(100))
    assert len({m["id"] for m in ms}) == 100 and sorted(m["body"] for m in ms) == sorted(m["body"] for m in msgs)


def probe_key(api):
    s, c = api.call("POST", "/v1/clients", {"name": "probe", "role": "consumer", "topics": ["quotes"],
                                            "visibility_timeout_ms": 3_600_000})
    assert s == 201
    return c["api_key"]


def test_delayed_produces_racing_promotions_lose_no_timer(api, setup, clock):
    """Delayed produces with earlier and later due times race promotions of the same queue; whatever
    the interleaving, next_due never passes a waiting message: at the end every message joined."""
    t0 = clock.t
    n_threads, per = 4, 6
    errors = []

    def producer(w):
        try:
            for j in range(per):
                b = core_produce("feed", [{"id": f"w{w}-{j}", "body": f"w{w}-{j}", "key": "k",
                                           "delay_ms": 1 + ((w * 7 + j * 5) % 4)}])
                assert b["results"][0]["id"] == f"w{w}-{j}", b
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    def promoter():
        try:
            for k in range(per * 2):
                as_function("PromoterFunction", delayed.sweep, now=t0 + 1 + k % 5)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=producer, args=(w,)) for w in range(n_threads)]
    threads += [threading.Thread(target=promoter) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    clock.t = t0 + 10
    (m,) = [m for m in QueueModel.scan() if m.topic == T and (m.delayed or 0)] or [None]
    if m is not None:  # whatever still waits has a next_due at or before its deliver_at
        assert m.next_due is not None and int(m.next_due) <= t0 + 4
    log = drain(api, T, "probe", probe_key(api))
    ms = [x for v in log.values() for x in v]
    assert sorted(x["id"] for x in ms) == sorted(f"w{w}-{j}" for w in range(n_threads) for j in range(per))
    assert detail(api)["delayed"] == 0


def test_iam_least_privilege_roles(template):
    """Who may touch DelayedTable, and how (template.yaml, checked in every call by aws_rules)."""
    res = template["Resources"]

    def actions(fn):
        out = set()
        for pol in res[fn]["Properties"]["Policies"]:
            for st in (pol.get("Statement") or []) if isinstance(pol, dict) else []:
                r = st["Resource"]
                rs = r if isinstance(r, list) else [r]
                if {"Fn::GetAtt": ["DelayedTable", "Arn"]} in rs:
                    out |= set(st["Action"])
        return out
    assert actions("ProduceFunction") == {"dynamodb:PutItem"}
    assert actions("ConsumeFunction") == {"dynamodb:Query", "dynamodb:DeleteItem"}
    assert actions("PromoterFunction") == {"dynamodb:Query", "dynamodb:DeleteItem"}
    ev = res["PromoterFunction"]["Properties"]["Events"]["Promote"]
    assert ev["Type"] == "Schedule" and ev["Properties"]["Schedule"] == "rate(1 minute)"
    assert "TimeToLiveSpecification" not in res["DelayedTable"]["Properties"]  # nothing expires unpromoted


def test_promoted_messages_fan_out_like_any(api, setup, clock):
    """A promoted message is a segment like any other: its segment item is in SegmentsTable (the
    stream the fan-out and the archiver read) with the produce's fields."""
    from lakeq.store.models import SegmentModel
    t0 = clock.t
    produce(api, setup["feed"], [{"id": "f", "body": "F", "key": "k", "delay_ms": 50}])
    assert not [s for s in SegmentModel.scan() if s.pq.startswith(T + "#")]
    clock.t = t0 + 50
    delayed.sweep()
    segs = [s for s in SegmentModel.scan() if s.pq.startswith(T + "#")]
    assert len(segs) == 1 and int(segs[0].produced_at) == t0 + 50


class Before:
    """Interceptor hook: right before the first TransactWriteItems that ``match``es, run ``fn`` (once):
    another actor's whole request lands between a promoter's reads and its transaction."""

    def __init__(self, match, fn):
        self.match, self.fn, self.fired = match, fn, False

    def before(self, call):
        if not self.fired and call.operation == "TransactWriteItems" and self.match(call.params["TransactItems"]):
            self.fired = True
            self.fn()

    def after(self, call, response):
        return response


def _promotion(items) -> bool:
    return any("Delete" in it for it in items)


def test_a_promoter_overtaken_between_read_and_write_appends_nothing(api, setup, clock):
    """Promoter A has read the due messages; promoter B promotes them all before A's transaction:
    A's transaction is refused (the queue item moved on) and A finds nothing left to do."""
    t0 = clock.t
    r = produce(api, setup["feed"], [{"id": f"o{i}", "body": f"o{i}", "key": "k", "delay_ms": 5} for i in range(5)])[1]
    q = r["results"][0]["queue"]
    clock.t = t0 + 5
    hook = Before(_promotion, lambda: delayed.promote(T, q, clock.t))
    with interceptor.hooked(hook):
        head = delayed.promote(T, q, clock.t)
    assert hook.fired and head == 5
    log = drain(api, T, "probe", probe_key(api))
    assert [(m["id"], m["offset"]) for m in log[q]] == [(f"o{i}", i) for i in range(5)]
    assert detail(api)["delayed"] == 0


def test_a_delayed_produce_between_read_and_write_keeps_its_timer(api, setup, clock):
    """Promoter A read x (due) and y (due at +1000): it would set next_due to +1000. A delayed
    produce z (due at +500) lands before A's transaction; z must still join at +500, not at +1000:
    A's transaction is refused (``dver`` moved) and A, reading again, sets next_due to z's."""
    t0 = clock.t
    msgs = [{"id": "x", "body": "x", "key": "k", "delay_ms": 10},
            {"id": "y", "body": "y", "key": "k", "delay_ms": 1000}]
    q = produce(api, setup["feed"], msgs)[1]["results"][0]["queue"]
    clock.t = t0 + 10

    def late_produce():
        s, b = produce(api, setup["feed"], [{"id": "z", "body": "z", "key": "k", "delay_ms": 490}])
        assert s == 200 and b["results"][0]["deliver_at"] == t0 + 500, b

    hook = Before(_promotion, late_produce)
    with interceptor.hooked(hook):
        delayed.promote(T, q, clock.t)
    assert hook.fired
    assert detail(api)["queue_offsets"][q]["next_due"] == t0 + 500
    key = probe_key(api)
    assert [m["id"] for m in pull(api, key, group="probe")[1]["messages"]] == ["x"]
    clock.t = t0 + 500
    got = pull(api, key, group="probe")[1]["messages"]
    assert got == [] or [m["id"] for m in got] == ["z"]  # x's batch is still locked: ack it first
    log = drain(api, T, "risk", setup["risk"])
    assert [m["id"] for m in log[q]] == ["x", "z"]


def test_a_next_due_earlier_than_every_message_is_set_right(api, setup, clock):
    """``next_due`` may only be early, never late; an early one (nothing due yet) is repaired to the
    first waiting message's ``deliver_at`` by the next promotion, which appends nothing."""
    t0 = clock.t
    q = produce(api, setup["feed"], [{"id": "e", "body": "e", "key": "k", "delay_ms": 1000}])[1]["results"][0]["queue"]
    QueueModel(T, q).update(actions=[QueueModel.next_due.set(t0 + 1)])
    clock.t = t0 + 5
    assert delayed.promote(T, q, clock.t) == 0
    assert detail(api)["queue_offsets"][q]["next_due"] == t0 + 1000
    clock.t = t0 + 1000
    assert [m["id"] for m in pull(api, setup["risk"])[1]["messages"]] == ["e"]


def test_a_long_poll_wakes_when_a_delayed_message_is_due(api, setup, clock, monkeypatch):
    """The long poll sleeps until the earliest ``deliver_at`` it saw ahead, not until its next
    backed-off poll (50, 100, 200, 400, 500 ms...: a message due at +800 ms would wait for the poll at
    +1250). Deterministic: the fake clock moves only by the long poll's own sleeps."""
    from lakeq.consume import reader as logread
    slept = []

    def sleep(seconds):
        slept.append(round(seconds * 1000))
        clock.t += round(seconds * 1000)
    monkeypatch.setattr(logread.time, "sleep", this_thread_sleep(sleep))
    s, b = produce(api, setup["feed"], [{"id": "w", "body": "w", "key": "k", "delay_ms": 800}])
    due = b["results"][0]["deliver_at"]
    s, got = pull(api, setup["risk"], wait_ms=3000)
    assert [m["id"] for m in got["messages"]] == ["w"]
    assert slept == [50, 100, 200, 400, 55] and clock.t == due + 5, (slept, clock.t - due)


def test_big_delayed_messages_join_in_several_transactions(api, setup, clock):
    """28 messages of ~200 KB (5.6 MB) due together: the produce and the promotion each need several
    transactions under DynamoDB's 4 MB (enforced here by aws_rules); all join, in due then request order."""
    t0 = clock.t
    big = "x" * 200_000
    for r in range(2):
        s, b = produce(api, setup["feed"], [{"id": f"big{r}{j:02d}", "body": f"{j}{big}", "key": "k", "delay_ms": 10}
                                            for j in range(14)])
        assert s == 200, b
        clock.t += 1  # the second request a millisecond later (due 1 ms later)
    assert detail(api)["delayed"] == 28
    clock.t = t0 + 12
    log = drain(api, T, "probe", probe_key(api))
    (ms,) = log.values()
    assert [m["id"] for m in ms] == sorted(f"big{r}{j:02d}" for r in range(2) for j in range(14))
    assert all(len(m["body"]) == 200_002 or len(m["body"]) == 200_001 for m in ms)
    assert detail(api)["delayed"] == 0


def test_a_queue_whose_promotion_raises_does_not_stop_the_sweep(api, setup, clock, monkeypatch):
    """The promoter's queues come in the Scan's order: the first one's promotion raises (a store
    error); it is logged and counted in ``errors``, the other queues with due messages are still
    promoted in the same run, and the next run promotes the first."""
    t0 = clock.t
    msgs = [{"id": f"d{i}", "body": str(i), "key": f"k{i}", "delay_ms": 50} for i in range(12)]
    for topic in (T, "quotes"):
        s, b = produce(api, setup["feed"], msgs, topic=topic)
        assert s == 200, b
    due = sorted({(r.topic, int(r.queue)) for r in QueueModel.scan() if r.next_due is not None})
    assert len(due) >= 3
    clock.t = t0 + 50
    real, failing = delayed.promote, []

    def promote(topic, q, now, meta=None):
        if not failing:
            failing.append((topic, q))
        if (topic, q) == failing[0]:
            raise RuntimeError("the store refused")
        return real(topic, q, now, meta)
    monkeypatch.setattr(delayed, "promote", promote)
    out = as_function("PromoterFunction", delayed.sweep)
    assert (out["queues"], out["errors"]) == (len(due), 1)
    left = {(r.topic, int(r.queue)) for r in QueueModel.scan() if r.next_due is not None}
    assert left == {failing[0]}  # every other queue was promoted
    monkeypatch.setattr(delayed, "promote", real)
    out = as_function("PromoterFunction", delayed.sweep)
    assert out["queues"] == 1 and "errors" not in out
    assert not [r for r in QueueModel.scan() if r.next_due is not None]
