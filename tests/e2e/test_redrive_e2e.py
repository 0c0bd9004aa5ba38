"""Peek and redrive (issue 18.3) on the local stack: the functions run from template.yaml in their
own worker processes (PeekFunction's read-only role, RedriveFunction's routes and its schedule)."""
from __future__ import annotations

import time

import requests


def test_peek_dead_letters_then_redrive_them_on_the_schedule(stack):
    u, admin = stack.url, stack.admin_headers()
    for name in ("rq", "rq-dlq"):
        assert requests.post(f"{u}/v1/topics", json={"name": name, "queues": 1}, headers=admin).status_code == 201
    r = requests.post(f"{u}/v1/clients", json={"name": "rq-c", "role": "consumer", "topics": ["rq"]}, headers=admin)
    key = {"Authorization": f"Bearer {r.json()['api_key']}"}
    assert requests.patch(f"{u}/v1/clients/rq-c", json={"dead_letter_topic": "rq-dlq"}, headers=admin).ok
    r = requests.post(f"{u}/v1/clients", json={"name": "rq-p", "role": "producer", "topics": ["rq"]}, headers=admin)
    pkey = {"Authorization": f"Bearer {r.json()['api_key']}"}
    msgs = [{"body": f"b{i}", "key": "k"} for i in range(3)]
    assert requests.post(f"{u}/v1/topics/rq/messages", json={"producer": "rq-p", "messages": msgs}, headers=pkey).ok
    b = requests.get(f"{u}/v1/topics/rq/messages", params={"group": "rq-c", "max": 10}, headers=key).json()
    assert len(b["messages"]) == 3
    # the group's view while it holds them: locked, one delivery each
    p = requests.get(f"{u}/v1/groups/rq-c/pending", params={"topic": "rq"}, headers=key).json()
    assert [(m["state"], m["deliveries"]) for m in p["messages"]] == [("locked", 1)] * 3
    r = requests.post(f"{u}/v1/acks", json={"group": "rq-c", "receipt": b["receipt"], "reject": [0, 1, 2]},
                      headers=key)
    assert r.status_code == 200, r.text
    page = requests.get(f"{u}/v1/topics/rq-dlq/queues/0/messages", headers=admin).json()
    assert [m["body"] for m in page["messages"]] == ["b0", "b1", "b2"]
    assert all(m["dead_letter"]["topic"] == "rq" for m in page["messages"]) and page["next"] is None
    # one a second: the POST moves the first ones, the schedule the rest
    r = requests.post(f"{u}/v1/redrives", json={"source": "rq-dlq", "rate": 1}, headers=admin)
    assert r.status_code == 202, r.text
    rd = r.json()
    assert rd["total"] == 3 and 1 <= rd["moved"] <= 3
    deadline = time.monotonic() + 30
    while rd["status"] != "completed" and time.monotonic() < deadline:
        assert requests.post(f"{u}/_local/schedules/run", params={"name": "RedriveFunction"}).ok
        rd = requests.get(f"{u}/v1/redrives/{rd['id']}", headers=admin).json()
    assert (rd["status"], rd["moved"], rd["failed"]) == ("completed", 3, 0), rd
    back = requests.get(f"{u}/v1/topics/rq/queues/0/messages", headers=admin).json()
    assert [m["body"] for m in back["messages"]] == ["b0", "b1", "b2", "b0", "b1", "b2"]
    assert requests.get(f"{u}/v1/redrives", params={"source": "rq-dlq"}, headers=admin).json()["redrives"][0] == rd
