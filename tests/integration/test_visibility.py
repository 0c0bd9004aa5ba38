"""``POST /v1/visibility`` (issue 9, renew): extend or end a receipt's lock, in-process on moto.

The service's clock is the fake ``clock`` fixture (tests/integration/conftest.py): it moves only
when a test sets it, so "before / after the new expiry" is exact."""
from __future__ import annotations

import pytest

from lakeq.store.models import OffsetModel
from tests.crash import CrashAfter, count_calls
from tests.handlers import Context, sample
from tests.integration.test_subscriptions_handlers import T_SAMPLE

T = "/v1/topics/quotes%2Fsh/messages"
VIS = "/v1/visibility"
pytestmark = pytest.mark.usefixtures("fresh_matcher")


def produce(api, key, msgs):
    return api.call("POST", T, {"producer": "feed", "messages": msgs}, key=key)


def pull(api, key, **q):
    q.setdefault("group", "risk")
    return api.call("GET", T, query=q, key=key)


def renew(api, key, receipt, ms, **extra):
    return api.call("POST", VIS, {"group": "risk", "receipt": receipt, "visibility_timeout_ms": ms, **extra},
                    key=key)


def offsets():
    return sorted((r.owner, int(r.queue), int(r.committed_offset), int(r.lock_ts), int(r.lock_until),
                   r.lock_next, list(r.acks or [])) for r in OffsetModel.scan(consistent_read=True))


@pytest.fixture
def batch(api, setup, clock):
    """Three messages on one queue, pulled (locked for risk's 1000 ms) at ``clock.t``."""
    assert produce(api, setup["feed"], [{"body": str(i), "key": "k"} for i in range(3)])[0] == 200
    s, b = pull(api, setup["risk"])
    assert s == 200 and len(b["messages"]) == 3
    return b


def test_extend_holds_the_batch_until_the_new_expiry(api, setup, clock, batch):
    t0 = clock.t
    s, out = renew(api, setup["risk"], batch["receipt"], 60_000)
    assert s == 200 and out == {"topic": "quotes/sh", "queue": batch["messages"][0]["queue"],
                                "locked_until": t0 + 60_000}
    clock.t = t0 + 5_000  # past the original 1000 ms, before the new expiry: nothing served
    assert pull(api, setup["risk"])[1] == {"messages": [], "receipt": None}
    clock.t = t0 + 59_999
    assert pull(api, setup["risk"])[1]["messages"] == []
    clock.t = t0 + 60_000  # expired: the same batch again, under a new receipt
    s, again = pull(api, setup["risk"])
    assert [m["id"] for m in again["messages"]] == [m["id"] for m in batch["messages"]]
    assert again["receipt"] != batch["receipt"]
    assert api.call("POST", "/v1/acks", {"group": "risk", "receipt": batch["receipt"]}, key=setup["risk"])[0] == 409


def test_extend_then_ack_commits(api, setup, clock, batch):
    assert renew(api, setup["risk"], batch["receipt"], 10_000)[0] == 200
    s, a = api.call("POST", "/v1/acks", {"group": "risk", "receipt": batch["receipt"]}, key=setup["risk"])
    assert s == 200 and a["committed_offset"] == 3
    # acknowledged: the receipt's lock is gone, renewing it is stale and changes nothing
    before = offsets()
    s, e = renew(api, setup["risk"], batch["receipt"], 10_000)
    assert s == 409 and e["error"]["code"] == "stale_receipt"
    assert offsets() == before


def test_zero_ends_the_lock_now(api, setup, clock, batch):
    s, out = renew(api, setup["risk"], batch["receipt"], 0)
    assert s == 200 and out["locked_until"] == 0
    s, again = pull(api, setup["risk"])  # same instant: served again at once
    assert [m["id"] for m in again["messages"]] == [m["id"] for m in batch["messages"]]
    assert [m["offset"] for m in again["messages"]] == [0, 1, 2]
    s, e = api.call("POST", "/v1/acks", {"group": "risk", "receipt": batch["receipt"]}, key=setup["risk"])
    assert s == 409 and e["error"]["code"] == "stale_receipt"
    assert api.call("POST", "/v1/acks", {"group": "risk", "receipt": again["receipt"]}, key=setup["risk"])[0] == 200


def test_stale_receipts_are_409_and_change_nothing(api, setup, clock, batch):
    r = batch["receipt"]
    broker, q, off, nxt, ts = r.split(":")
    before = offsets()
    for bad in (f"{broker}:{q}:{off}:{nxt}:{int(ts) - 1}",        # another lock's timestamp
                f"{broker}:{q}:{off}:{int(nxt) + 1}:{ts}",        # another batch
                f"{broker}:{q}:{int(off) + 1}:{nxt}:{ts}",        # another committed offset
                f"other:{q}:{off}:{nxt}:{ts}"):                   # another store
        s, e = renew(api, setup["risk"], bad, 30_000)
        assert s == 409 and e["error"]["code"] == "stale_receipt", (bad, s, e)
    assert offsets() == before
    clock.t += 1_000  # expired and locked again by another pull: the first receipt is stale
    s, second = pull(api, setup["risk"])
    assert len(second["messages"]) == 3
    before = offsets()
    assert renew(api, setup["risk"], r, 30_000)[0] == 409
    assert offsets() == before


def test_renew_after_expiry_without_relock_succeeds(api, setup, clock, batch):
    """As an ack after expiry does: the lock is still this receipt's until another pull takes it."""
    clock.t += 5_000
    s, out = renew(api, setup["risk"], batch["receipt"], 2_000)
    assert s == 200 and out["locked_until"] == clock.t + 2_000
    assert pull(api, setup["risk"])[1]["messages"] == []


def test_bad_input_400_and_changes_nothing(api, setup, clock, batch):
    r = batch["receipt"]
    before = offsets()
    for body in [{"receipt": r, "visibility_timeout_ms": 1000},                       # no group
                 {"group": "risk", "visibility_timeout_ms": 1000},                    # no receipt
                 {"group": "risk", "receipt": r},                                     # no timeout
                 {"group": "risk", "receipt": r, "visibility_timeout_ms": None},
                 {"group": "risk", "receipt": r, "visibility_timeout_ms": -1},
                 {"group": "risk", "receipt": r, "visibility_timeout_ms": 43_200_001},
                 {"group": "risk", "receipt": r, "visibility_timeout_ms": "1000"},
                 {"group": "risk", "receipt": r, "visibility_timeout_ms": 1.5},
                 {"group": "risk", "receipt": r, "visibility_timeout_ms": True},
                 {"group": "risk", "receipt": "garbage", "visibility_timeout_ms": 1000},
                 {"group": "risk", "receipt": "", "visibility_timeout_ms": 1000},
                 {"group": "risk", "receipt": 5, "visibility_timeout_ms": 1000},
                 {"group": "risk", "subscription": "s", "receipt": r, "visibility_timeout_ms": 1000},
                 {"group": "a b", "receipt": r, "visibility_timeout_ms": 1000}]:
        s, e = api.call("POST", VIS, body, key=setup["risk"])
        assert s == 400 and e["error"]["code"] == "bad_request", (body, s, e)
    for raw in ("not json", "[]"):
        s, e = api.call("POST", VIS, raw_body=raw, key=setup["risk"])
        assert s == 400, (raw, s, e)
    assert offsets() == before
    assert renew(api, setup["risk"], r, 43_200_000)[1]["locked_until"] == clock.t + 43_200_000  # the bound itself


def test_an_unknown_field_is_400_and_changes_nothing(api, setup, clock, batch):
    """The body's ack fields were parsed whole, so ``"reject": [0]`` (an ack's outcome) or a misspelt
    field was accepted and ignored: the lock was ended (or extended) and nothing rejected."""
    before = offsets()
    for extra in ({"reject": [0]}, {"release": [1]}, {"visibility_timout": 5}):
        s, e = renew(api, setup["risk"], batch["receipt"], 0, **extra)
        assert s == 400, (extra, e)
        assert set(e) == {"error"} and e["error"]["code"] == "bad_request" and next(iter(extra)) in e["error"]["message"]
    assert offsets() == before
    assert pull(api, setup["risk"])[1]["messages"] == []  # still locked


def test_auth_not_found_forbidden(api, setup, clock, batch):
    r = batch["receipt"]
    broker, q, off, nxt, ts = r.split(":")
    before = offsets()
    assert api.call("POST", VIS, {"group": "risk", "receipt": r, "visibility_timeout_ms": 1000}, key=None)[0] == 401
    assert api.call("POST", VIS, {"group": "risk", "receipt": r, "visibility_timeout_ms": 1000},
                    key="lq_nope")[0] == 401
    # 401 comes before 400
    assert api.call("POST", VIS, {"group": "risk", "receipt": "garbage"}, key="lq_nope")[0] == 401
    assert renew(api, setup["risk"], r, 1000, group="nobody")[0] == 404
    assert renew(api, setup["risk"], f"{broker}:nope@0:{off}:{nxt}:{ts}", 1000)[0] == 404
    assert renew(api, setup["feed"], r, 1000)[0] == 403  # a producer's key
    s, other = api.call("POST", "/v1/clients", {"name": "other", "role": "consumer", "topics": ["quotes"]})
    assert renew(api, other["api_key"], r, 1000)[0] == 403  # another group's key
    # 404 before 403: an unknown group with a foreign key is 404
    assert renew(api, other["api_key"], r, 1000, group="nobody")[0] == 404
    assert offsets() == before
    assert renew(api, setup["risk"], r, 1000)[0] == 200


def test_broadcasting_needs_client_id(api, setup, clock):
    s, g = api.call("POST", "/v1/clients", {"name": "bc", "role": "consumer", "topics": ["quotes"],
                                            "mode": "broadcasting", "visibility_timeout_ms": 1000})
    k = g["api_key"]
    produce(api, setup["feed"], [{"body": "x", "key": "k"}])
    s, b = pull(api, k, group="bc", client_id="c1")
    body = {"group": "bc", "receipt": b["receipt"], "visibility_timeout_ms": 0}
    before = offsets()
    s, e = api.call("POST", VIS, body, key=k)
    assert s == 400 and e["error"]["code"] == "bad_request"
    assert api.call("POST", VIS, {**body, "client_id": "c2"}, key=k)[0] == 409  # not c2's lock
    assert offsets() == before
    assert api.call("POST", VIS, {**body, "client_id": "c1"}, key=k) == (
        200, {"topic": "quotes/sh", "queue": b["messages"][0]["queue"], "locked_until": 0})
    s, again = pull(api, k, group="bc", client_id="c1")
    assert [m["id"] for m in again["messages"]] == [m["id"] for m in b["messages"]]


def test_crash_after_the_update_then_retry(api, setup, clock, batch):
    """The function dies right after each of its store calls; the client retries the same request:
    200 with the same (fake clock) or a later ``locked_until``, and the lock holds until then."""
    t0 = clock.t
    req = {"group": "risk", "receipt": batch["receipt"], "visibility_timeout_ms": 30_000}
    n, (s, out) = count_calls(lambda: api.call("POST", VIS, req, key=setup["risk"]))
    assert s == 200 and out["locked_until"] == t0 + 30_000 and n >= 1
    for k in range(1, n + 1):
        clock.t += 10
        with CrashAfter(k) as c:
            crashed, _ = c.run(lambda: api.call("POST", VIS, req, key=setup["risk"]))
        assert crashed and c.fired, k
        rec = OffsetModel.get("g|risk|quotes/sh", batch["messages"][0]["queue"], consistent_read=True)
        if any(call.operation == "UpdateItem" for call in c.calls):
            assert int(rec.lock_until) == clock.t + 30_000  # the write stood; the client never heard
        s, out = api.call("POST", VIS, req, key=setup["risk"])  # the retry
        assert s == 200 and out["locked_until"] == clock.t + 30_000
    held = clock.t + 30_000
    clock.t = held - 1
    assert pull(api, setup["risk"])[1]["messages"] == []
    clock.t = held
    assert [m["id"] for m in pull(api, setup["risk"])[1]["messages"]] == [m["id"] for m in batch["messages"]]


def test_subscription_receipts(api, setup, clock, fanout_handler):
    clock.t = T_SAMPLE - 1000
    s, sub = api.call("POST", "/v1/subscriptions", {"subscriber": "risk", "topic": "quotes"}, key=setup["risk"])
    assert s == 201, sub
    assert fanout_handler(sample("fanout_segments_stream.json"), Context()) == {"batchItemFailures": []}
    path = f"/v1/subscriptions/{sub['id']}/messages"
    s, b = api.call("GET", path, key=setup["risk"])
    assert s == 200 and b["messages"]
    body = {"subscription": sub["id"], "receipt": b["receipt"], "visibility_timeout_ms": 20_000}
    s, out = api.call("POST", VIS, body, key=setup["risk"])
    assert s == 200 and out == {"subscription": sub["id"], "queue": 0, "locked_until": clock.t + 20_000}
    clock.t += 19_999
    assert api.call("GET", path, key=setup["risk"])[1] == {"messages": [], "receipt": None}
    assert api.call("POST", VIS, {**body, "visibility_timeout_ms": 0}, key=setup["risk"])[1]["locked_until"] == 0
    s, again = api.call("GET", path, key=setup["risk"])
    assert [m["id"] for m in again["messages"]] == [m["id"] for m in b["messages"]]
    s, e = api.call("POST", VIS, body, key=setup["risk"])  # locked again since
    assert s == 409 and e["error"]["code"] == "stale_receipt"
    s, other = api.call("POST", "/v1/clients", {"name": "other", "role": "consumer", "topics": ["quotes"]})
    assert api.call("POST", VIS, {**body, "receipt": again["receipt"]}, key=other["api_key"])[0] == 403
    assert api.call("POST", VIS, {**body, "subscription": "0" * 32}, key=setup["risk"])[0] == 404
    assert api.call("POST", VIS, {**body, "receipt": "lakeq-local:quotes@0:0:1:1"}, key=setup["risk"])[0] == 400
