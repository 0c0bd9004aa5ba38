"""Per-message settlement, batch acks, dead letters (issue 9), in-process on moto.

The service's clock is the fake ``clock`` fixture (tests/integration/conftest.py); risk's
visibility timeout is 1000 ms. Every message is produced with key "k" (one queue of quotes/sh)."""
from __future__ import annotations

import threading

import pytest

from lakeq.store.models import OffsetModel
from tests.handlers import make_dlq

T = "/v1/topics/quotes%2Fsh/messages"
DLQ = "/v1/topics/dlq/messages"
ACKS = "/v1/acks"


def produce(api, key, n, start=0, path=T, **extra):
    msgs = [{"id": f"m{i}", "body": f"b{i}", "key": "k", "tags": ["t"], "properties": {"n": i}, **extra}
            for i in range(start, start + n)]
    s, b = api.call("POST", path, {"producer": "feed", "messages": msgs}, key=key)
    assert s == 200, b
    return b


def pull(api, key, group="risk", path=T, **q):
    s, b = api.call("GET", path, query={"group": group, **q}, key=key)
    assert s == 200, b
    return b


def ack(api, key, receipt, group="risk", **outcomes):
    return api.call("POST", ACKS, {"group": group, "receipt": receipt, **outcomes}, key=key)


def records():
    return sorted((r.owner, int(r.queue), int(r.committed_offset), int(r.lock_ts), int(r.lock_until), r.lock_next,
                   r.settle, list(r.acks or []), r.dead_lettered) for r in OffsetModel.scan(consistent_read=True))


def offsets(api, key, group="risk", topic="quotes/sh"):
    s, b = api.call("GET", f"/v1/groups/{group}/offsets", query={"topic": topic}, key=key)
    assert s == 200, b
    return b


@pytest.fixture
def dlq(api, setup):
    """Topic ``dlq`` (1 queue), consumer ``dlqc`` reading it; risk dead-letters there."""
    return make_dlq(api, "dlqc")


def patch(api, name, body, key=None):
    return api.call("PATCH", f"/v1/clients/{name}", body, **({"key": key} if key else {}))


def dlq_messages(api, key):
    return pull(api, key, group="dlqc", path=DLQ, max=100)["messages"]


def test_deliveries_partial_settle_and_unsettled(api, setup, clock):
    produce(api, setup["feed"], 5)
    b = pull(api, setup["risk"])
    assert [m["deliveries"] for m in b["messages"]] == [1] * 5
    r = b["receipt"]
    s, out = ack(api, setup["risk"], r, accept=[0, 1])
    assert s == 200 and out == {"topic": "quotes/sh", "queue": b["messages"][0]["queue"], "committed_offset": 2,
                                "unsettled": [2, 3, 4]}
    assert pull(api, setup["risk"])["messages"] == []  # the lock stays on the rest
    s, again = ack(api, setup["risk"], r, accept=[0, 1])  # a retry: a no-op
    assert (s, again) == (200, out)
    s, out = ack(api, setup["risk"], r, accept=[3])
    assert out["committed_offset"] == 2 and out["unsettled"] == [2, 4]
    s, out = ack(api, setup["risk"], r)  # the whole batch: what is left
    assert s == 200 and out["committed_offset"] == 5 and out["unsettled"] == []
    assert ack(api, setup["risk"], r)[0] == 200  # retried
    assert offsets(api, setup["risk"])["backlog"] == 0
    produce(api, setup["feed"], 1, start=5)
    assert [m["offset"] for m in pull(api, setup["risk"])["messages"]] == [5]


def test_release_is_served_again_first(api, setup, clock):
    produce(api, setup["feed"], 3)
    b = pull(api, setup["risk"], max=3)
    produce(api, setup["feed"], 2, start=3)
    s, out = ack(api, setup["risk"], b["receipt"], accept=[0, 2], release=[1])
    assert s == 200 and out["committed_offset"] == 1 and out["unsettled"] == []
    b2 = pull(api, setup["risk"])  # at once: the lock ended (everything settled)
    assert [(m["offset"], m["deliveries"]) for m in b2["messages"]] == [(1, 2), (3, 1), (4, 1)]
    s, out = ack(api, setup["risk"], b2["receipt"])
    assert s == 200 and out["committed_offset"] == 5


def test_reject_dead_letters_once_with_the_dead_letter_field(api, setup, clock, dlq):
    assert patch(api, "risk", {"dead_letter_topic": "dlq"})[0] == 200
    produce(api, setup["feed"], 3)
    b = pull(api, setup["risk"])
    s, out = ack(api, setup["risk"], b["receipt"], reject=[1])
    assert s == 200 and out["unsettled"] == [0, 2] and out["committed_offset"] == 0
    assert ack(api, setup["risk"], b["receipt"], reject=[1]) == (200, out)  # retried: no second copy
    s, out = ack(api, setup["risk"], b["receipt"])
    assert out["committed_offset"] == 3
    got = dlq_messages(api, dlq)
    assert len(got) == 1
    m = got[0]
    src = b["messages"][1]
    assert (m["body"], m["key"], m["tags"], m["properties"]) == (src["body"], src["key"], src["tags"],
                                                                 src["properties"])
    assert m["dead_letter"] == {"topic": "quotes/sh", "queue": src["queue"], "offset": 1, "id": "m1",
                                "group": "risk", "deliveries": 1, "reason": "rejected", "at": clock.t}
    assert list(m)[-1] == "dead_letter" and m["deliveries"] == 1
    q = next(x for x in offsets(api, setup["risk"])["queues"] if x["queue"] == src["queue"])
    assert q["dead_lettered"] == 1 and q["committed_offset"] == 3


def test_max_deliveries_by_expiry_and_visibility_zero(api, setup, clock, dlq):
    assert patch(api, "risk", {"max_deliveries": 2, "dead_letter_topic": "dlq"})[0] == 200
    produce(api, setup["feed"], 2)
    b = pull(api, setup["risk"])
    assert [m["deliveries"] for m in b["messages"]] == [1, 1]
    clock.t += 1_000  # expired: isolated, the lowest alone
    b = pull(api, setup["risk"])
    assert [(m["offset"], m["deliveries"]) for m in b["messages"]] == [(0, 2)]
    s, _ = api.call("POST", "/v1/visibility", {"group": "risk", "receipt": b["receipt"], "visibility_timeout_ms": 0},
                    key=setup["risk"])
    assert s == 200
    b = pull(api, setup["risk"])  # 0 was delivered twice: dead-lettered; 1 alone next
    assert [(m["offset"], m["deliveries"]) for m in b["messages"]] == [(1, 2)]
    assert ack(api, setup["risk"], b["receipt"])[1]["committed_offset"] == 2
    got = dlq_messages(api, dlq)
    assert [(m["dead_letter"]["offset"], m["dead_letter"]["reason"], m["dead_letter"]["deliveries"]) for m in got] \
        == [(0, "max_deliveries", 2)]


def test_without_a_dead_letter_topic_dropped_and_counted(api, setup, clock):
    produce(api, setup["feed"], 3)
    b = pull(api, setup["risk"])
    assert len(b["messages"]) == 3
    assert patch(api, "risk", {"max_deliveries": 1})[0] == 200  # (with 1 from the start: batches of one)
    s, out = ack(api, setup["risk"], b["receipt"], accept=[0], release=[1], reject=[2])
    assert s == 200 and out == {"topic": "quotes/sh", "queue": b["messages"][0]["queue"], "committed_offset": 3,
                                "unsettled": []}
    q = next(x for x in offsets(api, setup["risk"])["queues"] if x["queue"] == b["messages"][0]["queue"])
    assert q["dead_lettered"] == 2 and q["backlog"] == 0
    assert pull(api, setup["risk"])["messages"] == []


def test_bad_lists_are_400_and_change_nothing(api, setup, clock):
    produce(api, setup["feed"], 3)
    b = pull(api, setup["risk"])
    r = b["receipt"]
    before = records()
    for bad in ({"accept": [7]}, {"reject": [3]}, {"accept": [0], "release": [0]}, {"accept": "0"},
                {"accept": [-1]}, {"release": [1.5]}, {"reject": [True]}, {"accept": [0] * 101},
                {"accept": [None]}):
        s, e = ack(api, setup["risk"], r, **bad)
        assert s == 400 and e["error"]["code"] == "bad_request", (bad, s, e)
    for bad in ({"group": "risk", "receipt": r, "acks": [{"receipt": r}]}, {"group": "risk", "acks": []},
                {"group": "risk", "acks": [{"receipt": r}] * 101}, {"group": "risk", "acks": {"receipt": r}},
                {"acks": [{"receipt": r}]}):
        s, e = api.call("POST", ACKS, bad, key=setup["risk"])
        assert s == 400 and e["error"]["code"] == "bad_request", (bad, s, e)
    assert records() == before
    assert ack(api, setup["risk"], r, accept=[0, 1, 2])[1]["committed_offset"] == 3


def test_batch_acks_mixed_results(api, setup, clock):
    produce(api, setup["feed"], 2)
    b = pull(api, setup["risk"])
    s, other = api.call("POST", "/v1/clients", {"name": "other", "role": "consumer", "topics": ["quotes"]})
    stale = b["receipt"].rsplit(":", 1)[0] + ":1"
    body = {"group": "risk", "acks": [{"receipt": b["receipt"], "accept": [0]}, {"receipt": stale},
                                      {"receipt": "garbage"}, {"receipt": b["receipt"], "accept": [9]},
                                      {"receipt": b["receipt"], "accept": [1]}, 5]}
    s, out = api.call("POST", ACKS, body, key=setup["risk"])
    assert s == 200 and len(out["results"]) == 6
    r = out["results"]
    assert r[0] == {"topic": "quotes/sh", "queue": b["messages"][0]["queue"], "committed_offset": 1, "unsettled": [1]}
    assert r[1]["error"]["code"] == "stale_receipt"
    assert r[2]["error"]["code"] == "bad_request" and r[3]["error"]["code"] == "bad_request"
    assert r[4]["committed_offset"] == 2 and r[4]["unsettled"] == []
    assert r[5]["error"]["code"] == "bad_request" and "acks[5]" in r[5]["error"]["message"]
    # another group's key: each entry 403, the request 200
    s, out = api.call("POST", ACKS, {"group": "risk", "acks": [{"receipt": b["receipt"]}]}, key=other["api_key"])
    assert s == 200 and out["results"][0]["error"]["code"] == "forbidden"
    assert api.call("POST", ACKS, {"group": "nobody", "acks": [{"receipt": b["receipt"]}]}, key=setup["risk"])[0] == 404


def test_patch_client(api, setup, clock, dlq):
    before = api.call("GET", "/v1/clients")[1]
    assert patch(api, "risk", {})[0] == 400
    assert patch(api, "risk", {"max_deliveries": 0})[0] == 400
    assert patch(api, "risk", {"max_deliveries": 101})[0] == 400
    assert patch(api, "risk", {"dead_letter_topic": "a//b"})[0] == 400
    assert patch(api, "risk", {"visibility_timeout_ms": 5000})[0] == 400
    assert patch(api, "a b", {"max_deliveries": 3})[0] == 400
    assert patch(api, "nobody", {"max_deliveries": 3})[0] == 404
    assert patch(api, "risk", {"dead_letter_topic": "nope"})[0] == 404
    assert patch(api, "risk", {"max_deliveries": 3}, key=setup["risk"])[0] == 403
    assert patch(api, "nobody", {"max_deliveries": 3}, key=setup["risk"])[0] == 404  # 404 before 403
    assert patch(api, "feed", {"max_deliveries": 3})[0] == 400  # a producer
    assert api.call("GET", "/v1/clients")[1] == before  # refused: nothing changed
    s, v = patch(api, "risk", {"max_deliveries": 3, "dead_letter_topic": "dlq"})
    assert s == 200 and v["max_deliveries"] == 3 and v["dead_letter_topic"] == "dlq" and v["name"] == "risk"
    s, v = patch(api, "risk", {"max_deliveries": None})
    assert s == 200 and "max_deliveries" not in v and v["dead_letter_topic"] == "dlq"
    s, c = api.call("POST", "/v1/clients", {"name": "c2", "role": "consumer", "topics": ["quotes"],
                                            "max_deliveries": 5, "dead_letter_topic": "dlq"})
    assert s == 201 and c["max_deliveries"] == 5 and c["dead_letter_topic"] == "dlq"
    assert api.call("POST", "/v1/clients", {"name": "c3", "role": "consumer", "topics": ["quotes"],
                                            "dead_letter_topic": "nope"})[0] == 404
    assert api.call("POST", "/v1/clients", {"name": "c4", "role": "producer", "topics": ["quotes"],
                                            "max_deliveries": 2})[0] == 400


def test_patch_reaches_other_containers_within_the_cache_ttl(api, setup, clock, monkeypatch):
    from lakeq.admin import auth
    t = [1000.0]
    monkeypatch.setattr(auth, "monotonic", lambda: t[0])
    assert auth.client_or_404("risk", "consumer").max_deliveries is None
    from lakeq.store.catalog import ClientRepo
    ClientRepo.set_settings("risk", {"max_deliveries": 4})  # as another container's PATCH
    assert auth.client_or_404("risk", "consumer").max_deliveries is None  # cached
    t[0] += auth.CLIENT_CACHE_TTL_S
    assert auth.client_or_404("risk", "consumer").max_deliveries == 4


def test_pull_visibility_timeout_ms(api, setup, clock):
    produce(api, setup["feed"], 1)
    for bad in ("999", "43200001", "x", ""):
        s, e = api.call("GET", T, query={"group": "risk", "visibility_timeout_ms": bad}, key=setup["risk"])
        assert s == 400, bad
    b = pull(api, setup["risk"], visibility_timeout_ms="5000")
    assert b["messages"]
    clock.t += 4_999
    assert pull(api, setup["risk"])["messages"] == []
    clock.t += 1
    assert [m["deliveries"] for m in pull(api, setup["risk"])["messages"]] == [2]


def test_full_ack_retried_after_a_relock_and_stale_partials(api, setup, clock):
    produce(api, setup["feed"], 2)
    b = pull(api, setup["risk"])
    assert ack(api, setup["risk"], b["receipt"])[0] == 200
    produce(api, setup["feed"], 1, start=2)
    b2 = pull(api, setup["risk"])
    assert [m["offset"] for m in b2["messages"]] == [2]
    s, out = ack(api, setup["risk"], b["receipt"])  # the lock ended long ago: remembered
    assert s == 200
    s, e = ack(api, setup["risk"], b["receipt"], accept=[0])  # a partial one after a relock is stale
    assert s == 409 and e["error"]["code"] == "stale_receipt"


def test_retried_full_ack_answers_the_first_body_after_the_queue_moved_on(api, setup, clock):
    """shared/API.md (Ack): a retry of an ack that succeeded answers the same body, also after
    later settles moved the committed offset (the queue model found 0 first, 3 on the retry)."""
    produce(api, setup["feed"], 3)
    b = pull(api, setup["risk"])
    assert ack(api, setup["risk"], b["receipt"], accept=[], release=[0])[0] == 200
    s, first = ack(api, setup["risk"], b["receipt"])  # 1 and 2: 0 is still pending
    assert s == 200 and first["committed_offset"] == 0 and first["unsettled"] == [], first
    assert ack(api, setup["risk"], b["receipt"]) == (200, first)  # the lock is still this receipt's
    b2 = pull(api, setup["risk"])
    assert [m["offset"] for m in b2["messages"]] == [0]
    assert ack(api, setup["risk"], b2["receipt"])[1]["committed_offset"] == 3
    assert ack(api, setup["risk"], b["receipt"]) == (200, first)  # after a relock and a drain
    produce(api, setup["feed"], 1, start=3)
    b3 = pull(api, setup["risk"], ack=b["receipt"])  # as the pull's ack: the same, and it pulls
    assert [m["offset"] for m in b3["messages"]] == [3]


def test_retried_ack_of_a_folded_pull_answers_what_it_left(api, setup, clock):
    """A pull's ``ack=`` that settles a batch while a released offset stays pending writes the ack
    without folding a new lock; a later ``POST /v1/acks`` retry answers the committed offset that
    write left, not the receipt's end."""
    produce(api, setup["feed"], 3)
    b = pull(api, setup["risk"])
    assert ack(api, setup["risk"], b["receipt"], accept=[], release=[1])[0] == 200
    b2 = pull(api, setup["risk"], ack=b["receipt"])  # acks 0 and 2; 1 is pending: served again
    assert [m["offset"] for m in b2["messages"]] == [1]
    assert ack(api, setup["risk"], b2["receipt"])[1]["committed_offset"] == 3
    s, again = ack(api, setup["risk"], b["receipt"])
    assert s == 200 and again["committed_offset"] == 1 and again["unsettled"] == [], again


def test_whole_batch_ack_that_changed_nothing_is_remembered_for_its_retry(api, setup, clock):
    """shared/API.md (Ack): a whole-batch ack answered 200 must answer the same body when retried,
    also when it found nothing left to settle (every offset settled one by one, or all released)
    and the queue was locked again since: it was answered 200, so its retry is not stale."""
    produce(api, setup["feed"], 3)
    b = pull(api, setup["risk"])
    assert ack(api, setup["risk"], b["receipt"], accept=[0, 1, 2])[0] == 200  # the lock ends settled
    s, first = ack(api, setup["risk"], b["receipt"])  # the whole batch: nothing left, 200
    assert s == 200 and first["committed_offset"] == 3 and first["unsettled"] == [], first
    produce(api, setup["feed"], 1, start=3)
    b1 = pull(api, setup["risk"])
    assert [m["offset"] for m in b1["messages"]] == [3]  # locked again
    assert ack(api, setup["risk"], b["receipt"]) == (200, first)
    assert ack(api, setup["risk"], b1["receipt"])[0] == 200
    # all released, then the whole batch: nothing held, all pending; a pull serves them again
    produce(api, setup["feed"], 3, start=4)
    b2 = pull(api, setup["risk"])
    assert [m["offset"] for m in b2["messages"]] == [4, 5, 6], b2
    assert ack(api, setup["risk"], b2["receipt"], accept=[], release=[4, 5, 6])[0] == 200
    s, first2 = ack(api, setup["risk"], b2["receipt"])
    assert s == 200 and first2["committed_offset"] == 4 and first2["unsettled"] == [], first2
    assert [m["offset"] for m in pull(api, setup["risk"])["messages"]] == [4, 5, 6]  # locked again
    assert ack(api, setup["risk"], b2["receipt"]) == (200, first2)


def test_retried_ack_of_an_entry_written_before_acks_carried_their_answer(api, setup, clock):
    """An ``acks`` entry without ``=<committed>`` (written before the entries carried their
    answer) may be a general-form ack that answered a committed offset below the receipt's end:
    while the lock is still the receipt's, its retry must not claim the receipt's end as committed
    while an offset below it is still pending."""
    produce(api, setup["feed"], 3)
    b = pull(api, setup["risk"])
    assert ack(api, setup["risk"], b["receipt"], accept=[], release=[0])[0] == 200
    s, first = ack(api, setup["risk"], b["receipt"])
    assert s == 200 and first["committed_offset"] == 0, first
    (rec,) = list(OffsetModel.scan(consistent_read=True))
    assert rec.acks[-1].endswith("=0"), rec.acks
    rec.update(actions=[OffsetModel.acks.set([a.partition("=")[0] for a in rec.acks])])  # as before
    assert ack(api, setup["risk"], b["receipt"]) == (200, first)  # 0 is still pending: not 3


@pytest.mark.parametrize("form", ["simple", "general", "nothing_left"])
def test_concurrent_whole_batch_acks_of_one_receipt_answer_one_body(api, setup, clock, form):
    """shared/API.md (Ack): the same whole-batch ack sent several times at once (a client retrying
    before the first answer came) answers 200 with one body for all of them, in the simple form
    (the fast path), the general form (a released offset stays pending) and when nothing is left."""
    produce(api, setup["feed"], 3)
    r = pull(api, setup["risk"])["receipt"]
    if form == "general":
        assert ack(api, setup["risk"], r, accept=[], release=[0])[0] == 200
    elif form == "nothing_left":
        assert ack(api, setup["risk"], r, accept=[0, 1, 2])[0] == 200
    results: list = []
    threads = [threading.Thread(target=lambda: results.append(ack(api, setup["risk"], r))) for _ in range(6)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert len(results) == 6 and all(x == results[0] for x in results), results
    assert results[0][0] == 200 and results[0][1]["committed_offset"] == (0 if form == "general" else 3)
    produce(api, setup["feed"], 1, start=3)
    assert pull(api, setup["risk"])["messages"]  # locked again: the retry is still the same answer
    assert ack(api, setup["risk"], r) == results[0]
    (rec,) = list(OffsetModel.scan(consistent_read=True))
    assert len([a for a in rec.acks if a.partition("=")[0] == r.split(":", 2)[2]]) == 1, rec.acks


def test_concurrent_settles_of_one_batch_all_land(api, setup, clock):
    produce(api, setup["feed"], 12)
    b = pull(api, setup["risk"])
    r = b["receipt"]
    results: list = []

    def settle(o):
        # 503 "busy" is the API's "retry": twelve writers on one offsets item may exhaust a writer's
        # compare-and-set rounds on a loaded machine (a client retries it, so the test does too)
        for _ in range(5):
            s, out = ack(api, setup["risk"], r, accept=[o])
            if s != 503:
                break
        results.append((s, out))
    threads = [threading.Thread(target=settle, args=(o,)) for o in range(12)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert [s for s, _ in results] == [200] * 12, results
    assert sorted(len(out["unsettled"]) for _, out in results) == list(range(12))
    assert offsets(api, setup["risk"])["backlog"] == 0


def test_two_settles_inside_one_function_at_once_each_settle_their_own_offset(api, setup, clock, monkeypatch):
    """The race behind test_concurrent_settles_of_one_batch_all_land's one failure (flake35: two
    answers with the same ``unsettled`` count, none with 0), made certain: both requests are inside
    the consume function at once, each authenticated and neither yet reading its body. powertools'
    resolver kept the request's event on ``BaseRouter`` (one per process) and its context on the app,
    so both read the body set last: one offset was settled twice and the other never (or a request
    found its caller cleared by the other's end: a 500). Each request reads its own now
    (lakeq.api.http.LakeqResolver)."""
    from lakeq.api import http
    from tests.concurrency import FirstCallsMeet, in_threads
    produce(api, setup["feed"], 3)
    r = pull(api, setup["risk"])["receipt"]
    meet = FirstCallsMeet(http.authenticate)
    monkeypatch.setattr(http, "authenticate", meet)
    results: dict = {}

    def settle(o):
        results[o] = ack(api, setup["risk"], r, accept=[o])
    in_threads(settle, (0, 1))
    assert not meet.broken, "the two requests did not meet"
    assert {o: s for o, (s, _) in results.items()} == {0: 200, 1: 200}, results
    assert all(o not in out["unsettled"] for o, (_, out) in results.items()), results
    assert sorted(len(out["unsettled"]) for _, out in results.values()) == [1, 2], results
    monkeypatch.setattr(http, "authenticate", meet.real)
    s, out = ack(api, setup["risk"], r, accept=[2])
    assert (s, out["unsettled"]) == (200, []), out
    assert offsets(api, setup["risk"])["backlog"] == 0


def test_two_settles_that_read_the_record_at_once_both_land(api, setup, clock, monkeypatch):
    """The flake's first suspect, the offsets record's compare-and-set, made to race for certain: two
    settles of one batch both read the record (the same ``sv``) before either writes. One conditional
    UpdateItem wins, the other's condition fails (seen: exactly one lost write), it reads again and
    applies its offset on the winner's state: both land, and each answer is what its own write left
    (distinct ``unsettled``). It held on main: the flake was the resolver's (the test above)."""
    from lakeq.store.offsets import OffsetRepo
    from tests.concurrency import FirstCallsMeet, in_threads
    produce(api, setup["feed"], 3)
    r = pull(api, setup["risk"])["receipt"]
    meet = FirstCallsMeet(OffsetRepo.get)  # each settle's first (consistent) read waits for the other's
    monkeypatch.setattr(OffsetRepo, "get", meet)
    real_write, wrote = OffsetRepo.write_state, []

    def write_state(*args, **kwargs):
        ok = real_write(*args, **kwargs)
        wrote.append(ok)
        return ok
    monkeypatch.setattr(OffsetRepo, "write_state", write_state)
    results: dict = {}

    def settle(o):
        results[o] = ack(api, setup["risk"], r, accept=[o])
    in_threads(settle, (0, 1))
    assert not meet.broken, "the two settles did not read at once"
    assert sorted(wrote) == [False, True, True], wrote  # one lost the race, then wrote on a fresh read
    assert {o: s for o, (s, _) in results.items()} == {0: 200, 1: 200}, results
    assert sorted(len(out["unsettled"]) for _, out in results.values()) == [1, 2], results
    assert all(o not in out["unsettled"] for o, (_, out) in results.items()), results
    monkeypatch.setattr(OffsetRepo, "get", meet.real)
    s, out = ack(api, setup["risk"], r, accept=[2])
    assert (s, out["unsettled"]) == (200, []), out
    assert offsets(api, setup["risk"])["backlog"] == 0


@pytest.mark.usefixtures("fresh_matcher")
def test_subscription_settlement_and_dead_letters(api, setup, clock, dlq, fanout_handler):
    from tests.handlers import Context, sample
    from tests.integration.test_subscriptions_handlers import T_SAMPLE
    clock.t = T_SAMPLE - 1000
    # API Gateway prefers the most specific route (POST /v1/subscriptions over the SQS endpoint's
    # POST /{account}/{queue}); tests.handlers.Api takes the first match, so order them that way here
    api.routes.sort(key=lambda r: r[1].count("{"))
    body = {"subscriber": "risk", "topic": "quotes", "max_deliveries": 2, "dead_letter_topic": "dlq"}
    for bad, code in (({**body, "max_deliveries": 0}, 400), ({**body, "dead_letter_topic": "nope"}, 404)):
        assert api.call("POST", "/v1/subscriptions", bad, key=setup["risk"])[0] == code
    assert api.call("POST", "/v1/subscriptions", body, key=setup["risk"])[0] == 403  # dlq: not granted to risk
    s, sub = api.call("POST", "/v1/subscriptions", body)  # the admin's key grants it
    assert s == 201 and sub["max_deliveries"] == 2 and sub["dead_letter_topic"] == "dlq", sub
    assert fanout_handler(sample("fanout_segments_stream.json"), Context()) == {"batchItemFailures": []}
    path = f"/v1/subscriptions/{sub['id']}/messages"
    s, b = api.call("GET", path, key=setup["risk"])
    assert s == 200 and len(b["messages"]) >= 2 and all(m["deliveries"] == 1 for m in b["messages"])
    _, _, off, nxt, _ = b["receipt"].split(":")
    first = int(off)
    s, out = api.call("POST", ACKS, {"subscription": sub["id"], "receipt": b["receipt"], "reject": [first],
                                     "accept": list(range(first + 1, int(nxt)))}, key=setup["risk"])
    assert s == 200 and out["subscription"] == sub["id"] and out["unsettled"] == [] \
        and out["committed_offset"] == int(nxt), out
    got = dlq_messages(api, dlq)
    src = b["messages"][0]
    assert [(m["id"] != src["id"], m["body"], m["dead_letter"]["topic"], m["dead_letter"]["offset"],
             m["dead_letter"]["reason"], m["dead_letter"]["group"]) for m in got] == [
        (True, src["body"], src["topic"], src["offset"], "rejected", "risk")]
    s, o = api.call("GET", f"/v1/subscriptions/{sub['id']}/offsets", key=setup["risk"])
    assert s == 200 and o["queues"][0]["dead_lettered"] == 1


def test_store_calls_per_settle(api, setup, clock, dlq):
    """The figures docs/design.md's cost table quotes (calls made as ConsumeFunction)."""
    ops = lambda calls: [c.operation for c in calls]  # noqa: E731
    produce(api, setup["feed"], 7)
    assert ack(api, setup["risk"], pull(api, setup["risk"], max=1)["receipt"])[0] == 200  # warm the caches
    b = pull(api, setup["risk"], max=3)
    assert [m["offset"] for m in b["messages"]] == [1, 2, 3], b
    from tests.crash import CountCalls
    with CountCalls() as c:
        s, out = ack(api, setup["risk"], b["receipt"])  # whole batch, simple form: the fast path
    assert s == 200 and ops(c.calls) == ["GetItem", "UpdateItem"], ops(c.calls)  # topic, the record
    b = pull(api, setup["risk"], max=3)
    assert [m["offset"] for m in b["messages"]] == [4, 5, 6], b
    with CountCalls() as c:
        s, out = ack(api, setup["risk"], b["receipt"], accept=[b["messages"][0]["offset"]])
    assert s == 200 and ops(c.calls) == ["GetItem", "GetItem", "UpdateItem"], ops(c.calls)  # topic, record, CAS
    assert patch(api, "risk", {"dead_letter_topic": "dlq"})[0] == 200
    with CountCalls() as c:
        s, out = ack(api, setup["risk"], b["receipt"], reject=[b["messages"][1]["offset"]])
    assert s == 200 and out["unsettled"] == [b["messages"][2]["offset"]], (b, out)
    # client (re-read after the PATCH), topic, record, CAS (due) | record, 1 segment Query (the
    # message, inside the newest segment this container read there: the Query from its base, issue
    # 33 item 2; 2 before, the second newest first for the segment around it), dlq topic, dedup BatchGetItem, dlq head (issue 16 item 3: the
    # newest segment's Query, and the queue item's GetItem since the dlq's chain is empty),
    # append TransactWriteItems, the dlq's change marker (UpdateItem, issue 33: a long poll of the
    # dlq waits on it), CAS (settled)
    assert len(c.calls) == 13, [(x.operation, x.params.get("TableName")) for x in c.calls]
    with CountCalls() as c:
        s, out = ack(api, setup["risk"], b["receipt"])  # the rest
    assert s == 200 and out["unsettled"] == [], out
    # topic, the fast path's UpdateItem refused (not counted: the hook sees answered calls), record, CAS
    assert ops(c.calls) == ["GetItem", "GetItem", "UpdateItem"], ops(c.calls)


@pytest.mark.usefixtures("fresh_matcher")
def test_a_subscription_to_the_dead_letter_topic_sees_dead_letter(api, setup, clock, dlq):
    from lakeq.store.models import SegmentModel
    from tests.handlers import Context, load_function
    assert patch(api, "risk", {"dead_letter_topic": "dlq"})[0] == 200
    s, sub = api.call("POST", "/v1/subscriptions", {"subscriber": "dlqc", "topic": "dlq"}, key=dlq)
    assert s == 201, sub
    produce(api, setup["feed"], 1)
    b = pull(api, setup["risk"])
    assert ack(api, setup["risk"], b["receipt"], reject=[0])[0] == 200
    fan = load_function("FanoutFunction")
    for n, item in enumerate(SegmentModel.query("dlq#0")):  # the stream's INSERT of the copy's segment
        image = item.serialize()
        rec = {"eventID": f"e{n}", "eventName": "INSERT", "eventSource": "aws:dynamodb",
               "dynamodb": {"Keys": {"pq": image["pq"], "base": image["base"]}, "NewImage": image,
                            "SequenceNumber": str(n + 1), "StreamViewType": "NEW_IMAGE"},
               "eventSourceARN": "arn:aws:dynamodb:us-east-1:123456789012:table/x/stream/1"}
        assert fan({"Records": [rec]}, Context()) == {"batchItemFailures": []}
    s, got = api.call("GET", f"/v1/subscriptions/{sub['id']}/messages", key=dlq)
    assert s == 200 and len(got["messages"]) == 1, got
    assert got["messages"][0]["dead_letter"]["reason"] == "rejected"
    assert got["messages"][0]["dead_letter"]["topic"] == "quotes/sh"


@pytest.mark.parametrize("later", [7, 8, 10])
def test_a_retried_ack_is_remembered_for_the_queues_next_locks(api, setup, clock, later):
    """docs/api.md: the newest 8 whole-batch acks are remembered per queue (a new lock keeps 8, its
    own ack makes 9). A retry after up to 8 more locks and acks of that queue answers the first
    body; after more it is 409: the queue model's premise for retry_ack (409 only after >= 8)."""
    produce(api, setup["feed"], 1 + later)
    b = pull(api, setup["risk"], max=1)
    s, first = ack(api, setup["risk"], b["receipt"])
    assert s == 200
    for _ in range(later):
        nxt = pull(api, setup["risk"], max=1)
        assert len(nxt["messages"]) == 1
        assert ack(api, setup["risk"], nxt["receipt"])[0] == 200
    s, again = ack(api, setup["risk"], b["receipt"])
    if later <= 8:
        assert (s, again) == (200, first)
    else:
        assert s == 409 and again["error"]["code"] == "stale_receipt", again
