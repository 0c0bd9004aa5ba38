"""Messages up to 1 MiB (issue 18.2) end to end over the local stack: a body of exactly 1 MiB (ASCII,
and binary as base64) goes through the gateway, the produce function (its body put in the lake
bucket under its own role), the pull (fetched back and checked) and the ack; 1 MiB + 1 byte is a 413
with API.md's error shape and nothing is stored."""
from __future__ import annotations

import base64
import os
import uuid

import pytest
import requests

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
