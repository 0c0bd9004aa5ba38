"""Data lake end to end: produce and consume over HTTP, drain the streams, run both jobs the way
`make jobs` does (a `python -m glue_jobs.local` subprocess against the stack: its own SparkSession
and its own AWS environment, nothing leaks into this process), then check that the backlog report
equals the API's offsets, that the delivery ledger accounts for every message (nothing lost), and
that the published plan, applied by the group's next rebalance, assigns every queue exactly once."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import boto3
import pytest
import requests

from lakeq.rebalance import state as G

pytest.importorskip("pyspark")
ROOT = Path(__file__).resolve().parents[2]
TOPIC, GROUP, PRODUCER = "lake-e2e", "lake-grp", "lake-prod"


def bearer(key):
    return {"Authorization": f"Bearer {key}"}


# the jobs' subprocess (a JVM, both jobs) takes ~1 min on a quiet machine; it passed 300 s when the
# machine ran five other jobs (CI at 3115e95, load ~25): the bound is for a hung job, not a slow one
@pytest.mark.timeout(1500)
def test_lake_jobs_end_to_end(stack, tmp_path):
    url, admin = stack.url, bearer(stack.admin_key)
    assert requests.post(f"{url}/v1/topics", json={"name": TOPIC, "queues": 4}, headers=admin).status_code == 201
    pk = requests.post(f"{url}/v1/clients", json={"name": PRODUCER, "role": "producer", "topics": [TOPIC]},
                       headers=admin).json()["api_key"]
    gk = requests.post(f"{url}/v1/clients", json={"name": GROUP, "role": "consumer", "topics": [TOPIC]},
                       headers=admin).json()["api_key"]
    r = requests.get(f"{url}/v1/reports/backlog", params={"group": GROUP, "topic": TOPIC}, headers=bearer(gk))
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"

    # uneven traffic: one hot key, a few cold ones
    keys = ["hot"] * 30 + [f"k{i}" for i in range(10)]
    for i in range(0, len(keys), 10):
        r = requests.post(f"{url}/v1/topics/{TOPIC}/messages", headers=bearer(pk), json={
            "producer": PRODUCER,
            "messages": [{"body": f"m{i + j}", "key": k, "tags": ["A"], "properties": {"n": i + j}}
                         for j, k in enumerate(keys[i:i + 10])]})
        assert r.status_code == 200, r.text
    # consume a few batches (ack each), leave the rest as backlog
    receipt = None
    for _ in range(3):
        params = {"group": GROUP, "max": 7}
        if receipt:
            params["ack"] = receipt
        r = requests.get(f"{url}/v1/topics/{TOPIC}/messages", params=params, headers=bearer(gk))
        assert r.status_code == 200, r.text
        receipt = r.json()["receipt"]
    assert requests.post(f"{url}/v1/acks", json={"group": GROUP, "receipt": receipt},
                         headers=bearer(gk)).status_code == 200
    for mid in ("m1", "m2", "m3"):
        r = requests.post(f"{url}/v1/groups/{GROUP}/members", json={"member_id": mid, "topics": [TOPIC], "session_timeout_ms": 300000},
                          headers=bearer(gk))
        assert r.status_code == 200, r.text

    out = subprocess.run([sys.executable, "-m", "glue_jobs.local", "--port", str(stack.port),
                          "--lake-dir", str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=1200)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "backlog (newest):" in out.stdout and GROUP in out.stdout

    offsets = requests.get(f"{url}/v1/groups/{GROUP}/offsets", params={"topic": TOPIC}, headers=bearer(gk)).json()
    r = requests.get(f"{url}/v1/reports/backlog", params={"group": GROUP, "topic": TOPIC}, headers=bearer(gk))
    assert r.status_code == 200, r.text
    report = r.json()
    assert report["group"] == GROUP and report["topic"] == TOPIC and report["computed_at"] > 0
    api = {q["queue"]: (q["max_offset"], q["committed_offset"], q["backlog"]) for q in offsets["queues"]
           if q["max_offset"] > 0}
    got = {q["queue"]: (q["produced"], q["committed"], q["backlog"]) for q in report["queues"]}
    assert got == api
    assert sum(q["backlog"] for q in report["queues"]) == offsets["backlog"] > 0
    assert requests.get(f"{url}/v1/reports/backlog", params={"group": GROUP, "topic": TOPIC},
                        headers=admin).status_code == 200

    # the delivery ledger (issue 32.4): every message produced accounted for, nothing lost
    r = requests.get(f"{url}/v1/groups/{GROUP}/ledger", params={"topic": TOPIC}, headers=bearer(gk))
    assert r.status_code == 200, r.text
    led = r.json()
    committed = sum(q["committed_offset"] for q in offsets["queues"])
    assert (led["produced"], led["accepted"], led["pending"], led["lost"], led["dead_lettered"]) == (
        len(keys), committed, offsets["backlog"], 0, 0), led
    assert led["line"] == (f"{len(keys)} produced, {committed} accepted, 0 dead-lettered, "
                           f"{offsets['backlog']} pending, 0 lost, 0 redelivered")
    assert "delivery ledger (the last day):" in out.stdout

    described = requests.get(f"{url}/v1/groups/{GROUP}", headers=bearer(gk)).json()
    assert described["plan"]["published_at"] > 0 and described["plan"]["expected_imbalance"] is not None

    # the group's next rebalance applies the plan: every queue assigned exactly once
    info = requests.get(f"{url}/_local/info").json()
    ddb = boto3.client("dynamodb", endpoint_url=info["aws_endpoint_url"], region_name=info["region"],
                       aws_access_key_id="testing", aws_secret_access_key="testing")
    item = ddb.get_item(TableName=info["environment"]["GROUPS_TABLE"], Key={"group": {"S": GROUP}},
                        ConsistentRead=True)["Item"]
    from lakeq.rebalance.codec import unpack  # the header's stored form (JSON text or zlib bytes)
    st, _ = unpack(item.get("state", {}).get("S"), item.get("state_z", {}).get("B"))
    assert st.plan is not None and st.plan.assignment is not None
    after, _ = G.force_rebalance(st, st.plan.published_at + 1, {TOPIC: 4})
    owned = sorted(q for m in after.members.values() for q in m.target)
    assert owned == [(TOPIC, i) for i in range(4)]
    assert {m: sorted(x.target) for m, x in after.members.items()} == \
        {m: sorted(qs) for m, qs in st.plan.assignment.items()}
    assert after.plan.applied_generation == after.generation
