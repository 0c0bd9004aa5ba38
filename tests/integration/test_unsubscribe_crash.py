"""Issue 8 item 8 (c): unsubscribe's purge survives a crash.

``DELETE /v1/subscriptions/{id}`` is killed after each of its store calls in turn (every prefix);
the client then retries the DELETE (or gives up), the UnsubscribeFunction (SubscriptionsTable
stream, REMOVE records) runs through the stream pump and is itself killed once at a seeded point
and retried as the event source mapping does. Checked: no item of a deleted subscription's list
is left (segments, offsets record, dedup items, list queue item), the subscription is gone (404),
and a live subscription's list is untouched."""
from __future__ import annotations

import pytest

from lakeq.store.models import DedupModel, OffsetModel, SegmentModel
from lakeq.store.queue_log import LogRepo
from lakeq.store.subscriptions import SubscriptionModel
from tests.crash import CrashAfter, count_calls, seeded_points

SEED = 8


# moto: these tests read DynamoDB Streams (the stream pump, the fan-out, the archiver), which the memory store has not
pytestmark = [pytest.mark.moto, pytest.mark.usefixtures("fresh_matcher")]


def handler(logical_id):
    from tests.handlers import load_function
    return load_function(logical_id)


@pytest.fixture
def pump(aws):
    from infra.local.streams import StreamPump
    names = ("FanoutFunction", "UnsubscribeFunction")
    p = StreamPump(stack_name="lakeq-local", dynamodb_client=aws["dynamodb"], streams_client_=aws["dynamodbstreams"],
                   handlers={n: handler(n) for n in names})
    p.mappings = [m for m in p.mappings if m.spec.logical_id in names]
    assert {m.spec.logical_id for m in p.mappings} == set(names)
    return p


def left_of(sid: str) -> dict:
    lt = f"~{sid}"
    return {"segments": len(list(SegmentModel.query(f"{lt}#0", consistent_read=True))),
            "offsets": len(list(OffsetModel.query(f"s|{sid}", consistent_read=True))),
            "dedup": len(list(DedupModel.query(lt, consistent_read=True))),
            "queue": int(LogRepo.queue(lt, 0) is not None),
            "subscription": int(SubscriptionModel.count(sid, consistent_read=True))}


NOTHING = {"segments": 0, "offsets": 0, "dedup": 0, "queue": 0, "subscription": 0}


def subscribed_with_a_list(api, setup, pump, n=2, topic="quotes") -> str:
    """A subscription whose list holds messages, a pulled and acknowledged batch (offsets record)."""
    s, sub = api.call("POST", "/v1/subscriptions", {"subscriber": "risk", "topic": topic}, key=setup["risk"])
    assert s == 201
    for i in range(n):
        s, _ = api.call("POST", f"/v1/topics/{topic.replace('/', '%2F')}/messages",
                        {"producer": "feed", "messages": [{"id": f"{sub['id']}-{i}", "body": str(i), "key": str(i)}]},
                        key=setup["feed"])
        assert s == 200
    assert pump.drain(30)[0]
    s, b = api.call("GET", f"/v1/subscriptions/{sub['id']}/messages", query={"max": 1}, key=setup["risk"])
    assert s == 200 and b["messages"]
    assert api.call("POST", "/v1/acks", {"subscription": sub["id"], "receipt": b["receipt"]}, key=setup["risk"])[0] == 200
    left = left_of(sub["id"])
    assert left["segments"] and left["offsets"] and left["dedup"] and left["queue"] and left["subscription"]
    return sub["id"]


def delete(api, setup, sid):
    return api.call("DELETE", f"/v1/subscriptions/{sid}", key=setup["risk"])


def drain_with_purge_crash(pump, j: int) -> bool:
    """The stream pump, its UnsubscribeFunction killed after its j-th store call; then the event
    source mapping's retry. Returns whether the crash fired."""
    with CrashAfter(j, {"UnsubscribeFunction"}) as c:
        fired, _ = c.run(lambda: pump.drain(30))
    assert pump.drain(30)[0]
    return fired


def test_unsubscribe_survives_a_crash_after_each_store_call(api, setup, pump, monkeypatch):
    from lakeq.admin import auth
    monkeypatch.setattr(auth, "KEY_CACHE_TTL_S", 3600.0)  # the same calls in every run
    keep = subscribed_with_a_list(api, setup, pump, topic="quotes/sh")  # not covering the others' topic
    kept = left_of(keep)

    probe = subscribed_with_a_list(api, setup, pump)
    n, (status, _) = count_calls(lambda: delete(api, setup, probe), {"SubscriptionsFunction"})
    assert status == 204 and n >= 3  # get, transaction, purge queries / batch deletes
    assert pump.drain(30)[0] and left_of(probe) == NOTHING

    runs = 0
    for k in range(1, n + 1):
        for client_retries in (True, False):
            sid = subscribed_with_a_list(api, setup, pump)
            with CrashAfter(k, {"SubscriptionsFunction"}) as c:
                crashed, _ = c.run(lambda: delete(api, setup, sid))
            assert crashed, k
            committed = any(x.operation == "TransactWriteItems" for x in c.calls)
            if not client_retries and not committed:
                continue  # nothing was deleted: only a retried DELETE can do it (the other run)
            if client_retries:
                status, body = delete(api, setup, sid)
                # 204 when the crash came before the delete transaction committed, else 404
                assert status == (404 if committed else 204), (k, status, body)
            j = seeded_points(SEED + k, 6, 1)[0]
            drain_with_purge_crash(pump, j)
            assert left_of(sid) == NOTHING, (k, client_retries)
            assert api.call("GET", f"/v1/subscriptions/{sid}/messages", key=setup["risk"])[0] == 404
            runs += 1
    assert runs >= n + 1
    assert left_of(keep) == kept


def test_purge_of_a_long_list_finishes_through_the_stream(api, setup, pump, monkeypatch):
    """An inline purge stopped by its time budget leaves the rest to the UnsubscribeFunction."""
    from lakeq.subscriptions import service as subscriptions
    sid = subscribed_with_a_list(api, setup, pump, n=30)
    monkeypatch.setattr(subscriptions, "PURGE_INLINE_S", -1.0)  # the inline purge stops at once
    assert delete(api, setup, sid)[0] == 204
    assert left_of(sid)["dedup"] > 0  # stopped after the first 25 deletes
    assert pump.drain(30)[0]
    assert left_of(sid) == NOTHING


def test_purge_removed_ignores_other_records():
    from lakeq.subscriptions.purge import purge_removed
    rec = {"eventName": "MODIFY", "dynamodb": {"Keys": {"id": {"S": "~version"}}, "SequenceNumber": "1"}}
    assert purge_removed({"Records": [rec]}) == {"batchItemFailures": []}
    rec2 = {"eventName": "REMOVE", "dynamodb": {"Keys": {"id": {"S": "~version"}}, "SequenceNumber": "2"}}
    assert purge_removed({"Records": [rec2]}) == {"batchItemFailures": []}
