"""Issue 14, item 5: delayed messages obey the same limits as the others. A body inside the old 256 KiB
limit (1 MiB since issue 18.2: the bodies over 300 KiB are claim-checked, test_big_messages.py) is accepted with or without ``delay_ms`` whatever it holds (a DelayedTable item used to keep
it JSON-escaped: a body of quotes, backslashes or control characters broke DynamoDB's 400 KB item
limit, 500 on every retry), and it is delivered unchanged when due."""
from __future__ import annotations

import pytest

from lakeq.contract import validation as v
from tests.history import path

T = "quotes/sh"
LIMIT = 256 * 1024

BODIES = {
    "quotes": '"' * LIMIT,
    "backslashes": "\\" * LIMIT,
    "controls": "".join(chr(i % 32) for i in range(LIMIT)),
    "multibyte": "é" * (LIMIT // 2),
    "astral": "\U0001f600" * (LIMIT // 4),
    "mixed_at_limit": "\"\\\x01é" * (LIMIT // 5) + "\x00" * (LIMIT % 5),  # 5 UTF-8 bytes a unit: exactly LIMIT
}


@pytest.mark.parametrize("kind", sorted(BODIES))
def test_delayed_body_at_the_limit_is_accepted_and_delivered(api, setup, clock, kind):
    body = BODIES[kind]
    assert len(body.encode("utf-8")) <= LIMIT
    assert kind != "mixed_at_limit" or len(body.encode("utf-8")) == LIMIT
    for delay in (0, 5):
        s, b = api.call("POST", path(T), {"producer": "feed", "messages": [{"body": body, "delay_ms": delay,
                                                                             "properties": {"q": '"\\' * 100}}]},
                        key=setup["feed"])
        assert s == 200, (kind, delay, s, str(b)[:300])
    clock.t += 10
    got = []
    for _ in range(4):
        s, b = api.call("GET", path(T), query={"group": "risk", "max": 100}, key=setup["risk"])
        assert s == 200, str(b)[:300]
        got += b["messages"]
        if b.get("receipt"):
            api.call("POST", "/v1/acks", {"group": "risk", "receipt": b["receipt"]}, key=setup["risk"])
        if len(got) >= 2:
            break
    assert [m["body"] == body for m in got] == [True, True]
    assert all(m["properties"] == {"q": '"\\' * 100} for m in got)


def test_over_the_limit_is_413_with_or_without_delay(api, setup):
    for delay in (0, 5):
        s, b = api.call("POST", path(T), {"producer": "feed", "messages": [{"body": "x" * (v.MAX_BODY_BYTES + 1),
                                                                             "delay_ms": delay}]}, key=setup["feed"])
        assert s == 413, (delay, s, b)


@pytest.mark.parametrize("body", ['"' * LIMIT, "\\" * LIMIT, "\t\n\r" * (LIMIT // 3), "é" * (LIMIT // 2)],
                         ids=["quotes", "backslashes", "tab_lf_cr", "multibyte"])
def test_sqs_send_with_delay_seconds_at_the_limit(aws, monkeypatch, clock, body):
    from lakeq.sqs import handler as sqs_service
    from tests.integration.sqs_harness import Harness, fake_auth
    monkeypatch.setattr(sqs_service, "authenticate_request", fake_auth)
    sqs = Harness().client("admin")
    url = sqs.create_queue(QueueName="big")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody=body, DelaySeconds=1)
    sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": "a", "MessageBody": body, "DelaySeconds": 1}])
    clock.t += 1000
    got = []
    for _ in range(8):
        got += sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
        if len(got) >= 2:
            break
    assert [m["Body"] == body for m in got] == [True, True]
