"""Issue 34 item 4: the local stack collects the EMF lines its functions print (as CloudWatch Logs
would) and serves them per minute at ``GET /_local/metrics``: a message driven to the dead-letter
topic moves the dead-letter metric the scheduled MetricsFunction publishes.

The stack runs no schedule (``--no-schedules``): MetricsFunction runs only when the test fires it,
so a scheduled run beside the test's cannot print a minute's later value (or a run of its own
between the test's two) and make ``last`` read another run's figure."""
from __future__ import annotations

import os
import time
import uuid

import pytest
import requests


@pytest.fixture(scope="module")
def stack(start_local_stack):
    st = start_local_stack(admin_key=os.environ.get("LAKEQ_E2E_ADMIN_KEY", "e2e-admin-key"), args=["--no-schedules"])
    yield st
    code = st.stop()
    assert code == 0, st.stderr[-3000:]


# the local stack's (template.yaml: lakeq/<stack name>, <stack name>; the stack is lakeq-local)
NAMESPACE, SERVICE = "lakeq/lakeq-local", "lakeq-local"


def series(st, name: str, **dims) -> list[dict]:
    r = requests.get(f"{st.url}/_local/metrics", params={"name": name, "namespace": NAMESPACE}, timeout=10)
    assert r.status_code == 200, r.text
    return [s for s in r.json()["series"] if s["dimensions"] == {**dims, "service": SERVICE}]


def last(st, name: str, **dims) -> float | None:
    found = series(st, name, **dims)
    assert len(found) <= 1, found
    return found[0]["points"][-1]["last"] if found else None


def publish(st) -> None:
    r = requests.post(f"{st.url}/_local/schedules/run", params={"name": "MetricsFunction"}, timeout=120)
    assert r.status_code == 200 and [x["ok"] for x in r.json()["runs"]] == [True], r.text


def publish_until(st, name: str, want: float, **dims) -> None:
    """Run MetricsFunction until the row shows ``want``: the publisher reads the queue items'
    ``max_offset`` hints, which the SegmentsTable stream's head mover moves seconds after an append
    (or a dead-letter copy)."""
    deadline = time.monotonic() + 60
    while True:
        publish(st)
        if last(st, name, **dims) == want or time.monotonic() > deadline:
            return
        time.sleep(1)


def test_a_dead_lettered_message_moves_the_dead_letter_metric(stack):
    st, admin = stack, stack.admin_headers()
    u = uuid.uuid4().hex[:8]
    topic, dlq, group, ops = f"m{u}", f"m{u}-dlq", f"g{u}", f"o{u}"
    for name in (topic, dlq):
        assert requests.post(f"{st.url}/v1/topics", json={"name": name, "queues": 1}, headers=admin).status_code == 201
    r = requests.post(f"{st.url}/v1/clients", headers=admin,
                      json={"name": f"p{u}", "role": "producer", "topics": [topic]})
    feed = {"Authorization": f"Bearer {r.json()['api_key']}"}
    r = requests.post(f"{st.url}/v1/clients", headers=admin,
                      json={"name": group, "role": "consumer", "topics": [topic], "dead_letter_topic": dlq})
    assert r.status_code == 201, r.text
    key = {"Authorization": f"Bearer {r.json()['api_key']}"}
    assert requests.post(f"{st.url}/v1/clients", headers=admin,
                         json={"name": ops, "role": "consumer", "topics": [dlq]}).status_code == 201
    r = requests.post(f"{st.url}/v1/topics/{topic}/messages", headers=feed,
                      json={"producer": f"p{u}", "messages": [{"body": "poison"}, {"body": "fine"}]})
    assert r.status_code == 200, r.text
    publish_until(st, "ApproximateNumberOfMessagesBacklog", 2, Topic=topic, Group=group)
    assert last(st, "NumberOfMessagesDeadLettered", Topic=topic, Group=group) == 0
    assert last(st, "ApproximateNumberOfMessagesBacklog", Topic=topic, Group=group) == 2
    before = last(st, "NumberOfMessagesDeadLettered")  # the deployment's total (other tests' too)
    b = requests.get(f"{st.url}/v1/topics/{topic}/messages", params={"group": group, "max": 1}, headers=key).json()
    assert [m["body"] for m in b["messages"]] == ["poison"]
    r = requests.post(f"{st.url}/v1/acks", headers=key,
                      json={"group": group, "receipt": b["receipt"], "reject": [b["messages"][0]["offset"]]})
    assert r.status_code == 200, r.text
    publish_until(st, "ApproximateNumberOfMessagesBacklog", 1, Topic=dlq, Group=ops)
    assert last(st, "NumberOfMessagesDeadLettered", Topic=topic, Group=group) == 1
    assert last(st, "ApproximateNumberOfMessagesBacklog", Topic=topic, Group=group) == 1
    assert last(st, "ApproximateNumberOfMessagesBacklog", Topic=dlq, Group=ops) == 1  # the copy waits
    assert last(st, "NumberOfMessagesDeadLettered") >= (before or 0) + 1
    # the request paths' counters are collected too (the produce function's flush)
    assert series(st, "NumberOfMessagesSent")
