"""Poison isolation for every kind of consumer (issue 14 item 2), in-process on moto.

One poison message among ten: the consumer crashes (acks nothing; the lock expires), or releases
its whole batch (visibility 0), whenever its batch holds the poison. With ``max_deliveries`` only
the poison is dead-lettered; every other message is delivered, accepted once, never served again
after its accept, and never delivered more than ``max_deliveries`` times."""
from __future__ import annotations

from collections import Counter

import pytest

from tests.integration.test_settlement import ACKS, DLQ, T, dlq, dlq_messages, patch, pull  # noqa: F401

N, POISON = 10, 4


def produce_tagged(api, key, tags=("t",)):
    msgs = [{"id": f"m{i}", "body": "poison" if i == POISON else f"b{i}", "key": "k", "tags": [tags[i % len(tags)]]}
            for i in range(N)]
    s, b = api.call("POST", T, {"producer": "feed", "messages": msgs}, key=key)
    assert s == 200, b


def run(api, clock, key, style, maxd, group="risk", extra=None, rounds=60):
    """Drive one consumer of ``style`` until nothing is left; (accepted Counter, served Counter)."""
    extra = extra or {}
    accepted, served = Counter(), Counter()
    piggy = None
    for _ in range(rounds):
        q = {**extra}
        if piggy:
            q["ack"], piggy = piggy, None
        b = pull(api, key, group=group, **q)
        if not b["messages"]:
            clock.t += 1_000
            if not pull(api, key, group=group, **extra)["messages"]:
                break
            clock.t += 1_000  # that pull locked something: let it expire, go on
            continue
        offs = [m["offset"] for m in b["messages"]]
        for m in b["messages"]:
            served[m["offset"]] += 1
            assert m["deliveries"] == served[m["offset"]]
            assert m["deliveries"] <= maxd, (m["offset"], m["deliveries"])
        body = {"group": group, "receipt": b["receipt"], **({"client_id": extra["client_id"]}
                                                              if "client_id" in extra else {})}
        poisoned = POISON in offs
        if style == "settler":  # accept the innocent ones, release the poison
            out = {"accept": [o for o in offs if o != POISON], "release": [POISON] if poisoned else []}
            s, r = api.call("POST", ACKS, {**body, **out}, key=key)
            assert s == 200, r
            accepted.update(out["accept"])
            continue
        if poisoned:
            if style == "releaser":
                s, r = api.call("POST", "/v1/visibility", {**body, "visibility_timeout_ms": 0}, key=key)
                assert s == 200, r
            else:
                clock.t += 1_000  # crashed: the lock expires
            continue
        if style == "piggyback":
            piggy = b["receipt"]
        else:
            s, r = api.call("POST", ACKS, body, key=key)
            assert s == 200, r
        accepted.update(offs)
    return accepted, served


@pytest.mark.parametrize("style", ["crasher", "piggyback", "releaser", "settler"])
@pytest.mark.parametrize("maxd", [2, 3])
def test_only_the_poison_is_dead_lettered(api, setup, clock, dlq, style, maxd):  # noqa: F811
    assert patch(api, "risk", {"max_deliveries": maxd, "dead_letter_topic": "dlq"})[0] == 200
    produce_tagged(api, setup["feed"])
    accepted, served = run(api, clock, setup["risk"], style, maxd)
    assert accepted == Counter({o: 1 for o in range(N) if o != POISON}), (accepted, served)
    got = dlq_messages(api, dlq)
    assert [(m["dead_letter"]["offset"], m["body"]) for m in got] == [(POISON, "poison")]


def test_only_the_poison_is_dropped_without_a_dead_letter_topic(api, setup, clock):
    assert patch(api, "risk", {"max_deliveries": 3})[0] == 200
    produce_tagged(api, setup["feed"])
    accepted, _ = run(api, clock, setup["risk"], "crasher", 3)
    assert accepted == Counter({o: 1 for o in range(N) if o != POISON})
    s, o = api.call("GET", "/v1/groups/risk/offsets", query={"topic": "quotes/sh"}, key=setup["risk"])
    assert s == 200 and sum(q["dead_lettered"] for q in o["queues"]) == 1 and o["backlog"] == 0, o


def test_a_filtered_consumer(api, setup, clock, dlq):  # noqa: F811
    """Tags a/b alternate; the consumer pulls tag ``a`` (poison m4 is an ``a``) and crashes on it."""
    assert patch(api, "risk", {"max_deliveries": 3, "dead_letter_topic": "dlq"})[0] == 200
    produce_tagged(api, setup["feed"], tags=("a", "b"))
    accepted, _ = run(api, clock, setup["risk"], "crasher", 3, extra={"tags": "a"})
    assert accepted == Counter({o: 1 for o in range(0, N, 2) if o != POISON})
    assert [m["dead_letter"]["offset"] for m in dlq_messages(api, dlq)] == [POISON]


def test_broadcasting_clients(api, setup, clock, dlq):  # noqa: F811
    s, bc = api.call("POST", "/v1/clients", {"name": "bc", "role": "consumer", "topics": ["quotes"],
                                             "mode": "broadcasting", "visibility_timeout_ms": 1000,
                                             "max_deliveries": 3, "dead_letter_topic": "dlq"})
    assert s == 201, bc
    produce_tagged(api, setup["feed"])
    for cid, style in (("c1", "crasher"), ("c2", "releaser")):
        accepted, _ = run(api, clock, bc["api_key"], style, 3, group="bc", extra={"client_id": cid})
        assert accepted == Counter({o: 1 for o in range(N) if o != POISON}), cid
    got = dlq_messages(api, dlq)
    assert sorted(m["dead_letter"]["offset"] for m in got) == [POISON, POISON]


def test_store_calls_of_a_poisoned_batch(api, setup, clock, dlq):  # noqa: F811
    """The busy path is unchanged (a healthy batch: pull + one-UpdateItem ack); what a batch of 10
    that dies on its poison costs, max_deliveries 3, until everything is settled (docs/design.md)."""
    from collections import Counter as C

    from tests.crash import CountCalls
    assert patch(api, "risk", {"max_deliveries": 3, "dead_letter_topic": "dlq"})[0] == 200
    produce_tagged(api, setup["feed"])
    b = pull(api, setup["risk"], max=1)  # m0 alone: a healthy batch (fresh, simple form)
    with CountCalls() as c:
        s, _ = api.call("POST", ACKS, {"group": "risk", "receipt": b["receipt"]}, key=setup["risk"])
    assert s == 200
    ops = C(x.operation for x in c.calls)
    assert ops["UpdateItem"] == 1 and not ops["TransactWriteItems"], ops  # the ack: one conditional UpdateItem
    with CountCalls() as c:
        accepted, _ = run(api, clock, setup["risk"], "crasher", 3)
    assert sorted(accepted) == [o for o in range(1, N) if o != POISON]
    print("poisoned batch of 9 (incl. dead-lettering):", len(c.calls), C(x.operation for x in c.calls))
    assert len(c.calls) < 200


def test_a_subscription_consumer(api, setup, clock, dlq, fanout_handler):  # noqa: F811
    """A subscription's list, read by a whole-batch-acking consumer that crashes on one entry."""
    from tests.handlers import Context, sample
    from tests.integration.test_subscriptions_handlers import T_SAMPLE
    clock.t = T_SAMPLE - 1000
    api.routes.sort(key=lambda r: r[1].count("{"))  # as test_settlement's subscription test
    s, sub = api.call("POST", "/v1/subscriptions", {"subscriber": "risk", "topic": "quotes", "max_deliveries": 2,
                                                    "dead_letter_topic": "dlq"})  # (the admin's key grants dlq)
    assert s == 201, sub
    assert fanout_handler(sample("fanout_segments_stream.json"), Context()) == {"batchItemFailures": []}
    path = f"/v1/subscriptions/{sub['id']}/messages"
    ids, poison = None, None
    accepted, served = Counter(), Counter()
    for _ in range(40):
        s, b = api.call("GET", path, key=setup["risk"])
        assert s == 200, b
        if ids is None:
            ids = [m["id"] for m in b["messages"]]
            assert len(ids) >= 3, ids
            poison = ids[1]
        if not b["messages"]:
            clock.t += 3_600_000
            s, b2 = api.call("GET", path, key=setup["risk"])
            if not b2["messages"]:
                break
            clock.t += 3_600_000
            continue
        for m in b["messages"]:
            served[m["id"]] += 1
            assert m["deliveries"] == served[m["id"]] <= 2
        if poison in [m["id"] for m in b["messages"]]:
            clock.t += 3_600_000  # crashed: the lock expires
            continue
        s, out = api.call("POST", ACKS, {"subscription": sub["id"], "receipt": b["receipt"]}, key=setup["risk"])
        assert s == 200, out
        accepted.update(m["id"] for m in b["messages"])
    assert accepted == Counter({i: 1 for i in ids if i != poison}), (accepted, served)
    got = dlq_messages(api, dlq)
    assert [m["dead_letter"]["id"] for m in got] == [poison]
