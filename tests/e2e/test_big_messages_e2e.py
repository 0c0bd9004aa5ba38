"""Messages up to 1 MiB (issue 18.2) end to end over the local stack: a body of exactly 1 MiB (ASCII,
and binary as base64) goes through the gateway, the produce function (its body put in the lake
bucket under its own role), the pull (fetched back and checked) and the ack; 1 MiB + 1 byte is a 413
with API.md's error shape and nothing is stored. The same with multi-byte UTF-8 (a body's size is its
UTF-8 bytes): 1 MiB of é, of emoji and of both round-trips byte for byte, one byte more is a 413,
over lakeq's API and over the SQS endpoint."""
from __future__ import annotations

import base64
import json
import os
import uuid

import pytest
import requests

from tests.e2e.test_sqs_e2e import sqs  # noqa: F401 (boto3's SQS client with the admin credential)

pytestmark = pytest.mark.e2e
MIB = 1024 * 1024


def H(key):
    return {"Authorization": f"Bearer {key}"}


def test_exactly_1_mib_round_trips_and_one_byte_more_is_413(stack):
    tag = uuid.uuid4().hex[:8]
    admin = H(stack.admin_key)
    topic = f"big{tag}"
    assert requests.post(f"{stack.url}/v1/topics", json={"name": topic, "queues": 2}, headers=admin).status_code == 201
    prod = requests.post(f"{stack.url}/v1/clients", json={"name": f"p{tag}", "role": "producer", "topics": [topic]},
                         headers=admin).json()
    cons = requests.post(f"{stack.url}/v1/clients", json={"name": f"g{tag}", "role": "consumer", "topics": [topic]},
                         headers=admin).json()
    url = f"{stack.url}/v1/topics/{topic}/messages"
    raw = os.urandom(MIB // 4 * 3)
    bodies = {"ascii": "a" * (MIB - 1) + "z", "binary": base64.b64encode(raw).decode()}
    assert all(len(b.encode()) == MIB for b in bodies.values())
    for name, body in bodies.items():
        r = requests.post(url, headers=H(prod["api_key"]), timeout=60,
                          json={"producer": prod["name"], "messages": [{"id": name, "body": body, "key": "k"}]})
        assert r.status_code == 200, r.text
    r = requests.post(url, headers=H(prod["api_key"]), timeout=60,
                      json={"producer": prod["name"], "messages": [{"id": "over", "body": "a" * (MIB + 1)}]})
    assert r.status_code == 413, r.text
    err = r.json()["error"]
    assert err["code"] == "payload_too_large" and set(err) == {"code", "message"} and "1048576" in err["message"]
    got = {}
    for _ in range(6):
        r = requests.get(url, headers=H(cons["api_key"]), params={"group": cons["name"], "max": 10}, timeout=60)
        assert r.status_code == 200, r.text
        b = r.json()
        got.update({m["id"]: m["body"] for m in b["messages"]})
        if b["receipt"]:
            a = requests.post(f"{stack.url}/v1/acks", headers=H(cons["api_key"]), timeout=30,
                              json={"group": cons["name"], "receipt": b["receipt"]})
            assert a.status_code == 200, a.text
        if len(got) == 2:
            break
    assert sorted(got) == ["ascii", "binary"]  # "over" was never stored
    assert got["ascii"] == bodies["ascii"] and base64.b64decode(got["binary"]) == raw
    r = requests.get(url, headers=H(cons["api_key"]), params={"group": cons["name"]}, timeout=60)
    assert r.status_code == 200 and r.json()["messages"] == []


def _utf8_json(payload) -> bytes:
    """The request as ``lakeq_client`` sends it: compact JSON, non-ASCII unescaped, UTF-8."""
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


# Multi-byte UTF-8 (docs/api.md "Limits": a body counts its UTF-8 bytes, not its characters)
AT_LIMIT = {"two_byte": "é" * (MIB // 2),  # 524,288 characters
            "four_byte": "\U0001f600" * (MIB // 4),  # 262,144 emoji
            "mixed": "\U0001f600é" * (MIB // 6) + "€" + "a"}  # 4 + 2 bytes, then 3 + 1: ends on the limit
OVER = {"two_byte_over": "é" * (MIB // 2) + "x",
        "four_byte_over": "\U0001f600" * (MIB // 4) + "x",
        "last_char_straddles": "\U0001f600" * (MIB // 4 - 1) + "€é"}  # its last é ends 1 byte past


def test_multi_byte_utf8_at_1_mib_round_trips_and_one_byte_more_is_413(stack):
    assert all(len(b.encode()) == MIB for b in AT_LIMIT.values())
    assert all(len(b.encode()) == MIB + 1 and len(b) < MIB // 2 + 2 for b in OVER.values())
    tag = uuid.uuid4().hex[:8]
    topic, prod, group = f"bigu{tag}", f"pu{tag}", f"gu{tag}"
    stack.call("POST", "/v1/topics", json={"name": topic, "queues": 2}, status=201)
    pk = stack.call("POST", "/v1/clients", json={"name": prod, "role": "producer", "topics": [topic]},
                    status=201)["api_key"]
    ck = stack.call("POST", "/v1/clients", json={"name": group, "role": "consumer", "topics": [topic]},
                    status=201)["api_key"]
    url = f"{stack.url}/v1/topics/{topic}/messages"
    headers = {**H(pk), "Content-Type": "application/json"}

    def produce(mid: str, body: str, data: bytes | None = None) -> requests.Response:
        payload = {"producer": prod, "messages": [{"id": mid, "body": body}]}
        return requests.post(url, headers=headers, data=data or _utf8_json(payload), timeout=60)

    for mid, body in AT_LIMIT.items():
        r = produce(mid, body)
        assert r.status_code == 200, (mid, r.text)
    for mid, body in OVER.items():
        r = produce(mid, body)
        assert r.status_code == 413, (mid, r.text)
        err = r.json()["error"]
        assert err["code"] == "payload_too_large" and "body is larger than 1048576 bytes" in err["message"], err
    # the same 1 MiB of é sent \u-escaped (Python's json.dumps default) is a 3 MiB request: the
    # request limit (3,000,000 bytes), as docs/api.md says; nothing stored either
    escaped = json.dumps({"producer": prod, "messages": [{"id": "escaped", "body": AT_LIMIT["two_byte"]}]}).encode()
    assert len(escaped) > 3_000_000
    r = produce("escaped", "", data=escaped)
    assert r.status_code == 413 and "3000000" in r.json()["error"]["message"], r.text

    got: dict[str, str] = {}
    for _ in range(8):
        b = stack.call("GET", f"/v1/topics/{topic}/messages", ck, params={"group": group, "max": 10}, timeout=60)
        got.update({m["id"]: m["body"] for m in b["messages"]})
        if b["receipt"]:
            stack.call("POST", "/v1/acks", ck, json={"group": group, "receipt": b["receipt"]})
        if len(got) == len(AT_LIMIT):
            break
    assert sorted(got) == sorted(AT_LIMIT)  # none of the refused ones was stored
    for mid, body in AT_LIMIT.items():
        assert got[mid].encode("utf-8") == body.encode("utf-8"), mid  # byte for byte
    assert stack.call("GET", f"/v1/topics/{topic}")["produced"] == len(AT_LIMIT)
    assert stack.call("GET", f"/v1/topics/{topic}/messages", ck, params={"group": group})["messages"] == []


def test_multi_byte_utf8_at_1_mib_over_the_sqs_endpoint(stack, sqs):  # noqa: F811
    """SendMessage counts body + attributes in UTF-8 bytes against MaximumMessageSize (1048576):
    boto3 (JSON protocol, \\u-escaped) sends 1 MiB of é or emoji; one byte more is refused."""
    from botocore.exceptions import ClientError

    url = sqs.create_queue(QueueName=f"bigu-{uuid.uuid4().hex[:8]}")["QueueUrl"]
    for body in AT_LIMIT.values():
        sqs.send_message(QueueUrl=url, MessageBody=body)  # boto3 checks MD5OfMessageBody
    for body in OVER.values():
        with pytest.raises(ClientError) as e:
            sqs.send_message(QueueUrl=url, MessageBody=body)
        err = e.value.response["Error"]
        assert err["Code"] in ("InvalidParameterValue", "InvalidParameterValueException"), err
        assert "shorter than 1048576 bytes" in err["Message"], err
    got = []
    for _ in range(10):
        ms = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1).get("Messages", [])
        for m in ms:
            got.append(m["Body"])
            sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
        if len(got) >= len(AT_LIMIT):
            break
    assert sorted(b.encode("utf-8") for b in got) == sorted(b.encode("utf-8") for b in AT_LIMIT.values())
    assert sqs.receive_message(QueueUrl=url, WaitTimeSeconds=1).get("Messages", []) == []
    sqs.delete_queue(QueueUrl=url)
