"""The delivery ledger (issue 32.4): ``GET /v1/groups/{group}/ledger?topic=T`` serves the ledger
job's summary from the lake bucket (ReportsFunction's role: ``reports/ledger/latest/*`` only), with
the backlog report's checks (a key reads its own group's ledger on a topic granted to it; another
tenant's key gets 403); and the archiver's offsets and messages rows of a real run of the queue
(produce, pull, accept, release, reject into a dead-letter topic) carry what the ledger needs."""
from __future__ import annotations

import json
import os

import pytest

from lakeq.lake import archive as lake
from lakeq.lake.report_keys import ledger_key
from tests.handlers import ADMIN, segment_records, stream_records

REPORT = {"group": "risk", "topic": "quotes", "computed_at": 5, "as_of": 5, "from": 1, "to": 5,
          "produced": 3, "accepted": 3, "dead_lettered": 0, "pending": 0, "expired": 0, "skipped": 0, "lost": 0,
          "redelivered": 0, "deliveries": 3, "causes": {}, "lost_messages": [], "pending_messages": [],
          "line": "3 produced, 3 accepted, 0 dead-lettered, 0 pending, 0 lost, 0 redelivered"}


def _put(aws, key, obj):
    aws["s3"].put_object(Bucket=os.environ["LAKE_BUCKET"], Key=key, Body=json.dumps(obj).encode())


def test_the_ledger_is_the_object_the_job_wrote_for_the_groups_key_only(api, setup, aws):
    url = "/v1/groups/risk/ledger"
    s, b = api.call("GET", url, query={"topic": "quotes"}, key=setup["risk"])
    assert s == 404 and "no delivery ledger" in b["error"]["message"]
    _put(aws, ledger_key("risk", "quotes"), REPORT)
    _put(aws, ledger_key("audit", "quotes"), {**REPORT, "group": "audit"})
    assert api.call("GET", url, query={"topic": "quotes"}, key=setup["risk"]) == (200, REPORT)
    assert api.call("GET", url, query={"topic": "quotes"}, key=ADMIN) == (200, REPORT)
    # another tenant: a consumer granted the same topic reads its own ledger, never risk's
    s, audit = api.call("POST", "/v1/clients", {"name": "audit", "role": "consumer", "topics": ["quotes"]})
    assert s == 201
    assert api.call("GET", url, query={"topic": "quotes"}, key=audit["api_key"])[0] == 403
    assert api.call("GET", "/v1/groups/audit/ledger", query={"topic": "quotes"}, key=audit["api_key"])[0] == 200
    # a topic not granted to the group, a topic or group that does not exist, a bad or missing topic
    assert api.call("POST", "/v1/topics", {"name": "other", "queues": 1})[0] == 201
    assert api.call("GET", url, query={"topic": "other"}, key=setup["risk"])[0] == 403
    assert api.call("GET", url, query={"topic": "quotes/sh"}, key=setup["risk"])[0] == 404  # granted (under quotes)
    assert api.call("GET", url, query={"topic": "nope"}, key=setup["risk"])[0] == 404
    assert api.call("GET", "/v1/groups/ghost/ledger", query={"topic": "quotes"}, key=ADMIN)[0] == 404
    assert api.call("GET", url, query={}, key=setup["risk"])[0] == 400
    assert api.call("GET", url, query={"topic": "quotes"}, key=setup["feed"])[0] == 403  # a producer
    assert api.call("GET", url, query={"topic": "quotes"}, key=None)[0] == 401


def _offsets_records(aws) -> list[dict]:
    """Every OffsetsTable stream record so far, as the archiver receives them."""
    return stream_records(aws, "offsets")


@pytest.mark.moto  # reads DynamoDB Streams
def test_a_real_runs_rows_carry_its_settlements_deliveries_and_dead_letters(api, setup, aws, dlq, clock):
    assert api.call("PATCH", "/v1/clients/risk", {"dead_letter_topic": "dlq"})[0] == 200
    msgs = [{"id": f"m{i}", "body": f"m{i}", "key": "k"} for i in range(4)]
    s, b = api.call("POST", "/v1/topics/quotes/messages", {"producer": "feed", "messages": msgs}, key=setup["feed"])
    assert s == 200, b
    s, b = api.call("GET", "/v1/topics/quotes/messages", query={"group": "risk", "max": 10}, key=setup["risk"])
    assert s == 200 and len(b["messages"]) == 4, b
    q = b["messages"][0]["queue"]
    offs = [m["offset"] for m in b["messages"]]
    s, out = api.call("POST", "/v1/acks", {"group": "risk", "receipt": b["receipt"], "accept": offs[:2],
                                           "release": [offs[2]], "reject": [offs[3]]}, key=setup["risk"])
    assert s == 200, out
    s, b2 = api.call("GET", "/v1/topics/quotes/messages", query={"group": "risk", "max": 10}, key=setup["risk"])
    assert s == 200 and [m["offset"] for m in b2["messages"]] == [offs[2]], b2  # the released one, again
    assert api.call("POST", "/v1/acks", {"group": "risk", "receipt": b2["receipt"]}, key=setup["risk"])[0] == 200

    rows = [r for rec in _offsets_records(aws) for r in lake.offset_rows(rec)
            if r["group"] == "risk" and r["topic"] == "quotes" and r["queue"] == q]
    outcome: dict[int, tuple] = {}
    deliveries: dict[int, int] = {}
    for r in rows:
        for e in r["settled"]:
            for o in range(e["lo"], e["hi"]):
                outcome[o] = (e["outcome"], e["reason"])
        for o in r["delivered"]:
            deliveries[o] = deliveries.get(o, 0) + 1
    assert [r["start_offset"] for r in rows if r["start_offset"] is not None] == [0]  # the record's first lock
    assert outcome == {offs[0]: ("accepted", None), offs[1]: ("accepted", None), offs[2]: ("accepted", None),
                       offs[3]: ("dead_lettered", "rejected")}
    assert deliveries == {offs[0]: 1, offs[1]: 1, offs[2]: 2, offs[3]: 1}
    # the dead-letter topic's copy: its origin and cause on its messages row
    copies = [r for rec in segment_records(aws) for r in lake.message_rows(rec) if r["topic"] == "dlq"]
    assert [(c["dead_letter"]["topic"], c["dead_letter"]["queue"], c["dead_letter"]["offset"],
             c["dead_letter"]["group"], c["dead_letter"]["reason"]) for c in copies] == [
        ("quotes", q, offs[3], "risk", "rejected")]
