"""The local stack fires template.yaml's schedules by itself (worker processes, each function as itself)."""
from __future__ import annotations

import json
import time

import requests


def test_the_stack_sweeps_groups_on_its_own_schedule(start_local_stack):
    st = start_local_stack(admin_key="sched-admin", extra_env={"LAKEQ_SCHEDULE_SCALE": "60"})  # 1 min = 1 s
    try:
        admin = st.admin_headers()
        assert requests.post(f"{st.url}/v1/topics", json={"name": "quotes", "queues": 2}, headers=admin).status_code == 201
        r = requests.post(f"{st.url}/v1/clients", json={"name": "risk", "role": "consumer", "topics": ["quotes"]},
                          headers=admin)
        key = {"Authorization": f"Bearer {r.json()['api_key']}"}
        r = requests.post(f"{st.url}/v1/groups/risk/members", headers=key,
                          json={"member_id": "m1", "topics": ["quotes"], "owned": [], "session_timeout_ms": 1000})
        assert r.status_code == 200, r.text
        # nobody touches the group: only the scheduled sweep can expire m1
        deadline = time.monotonic() + 30
        swept = []
        while time.monotonic() < deadline and not swept:
            time.sleep(0.5)
            swept = [json.loads(line) for line in st.stderr.splitlines()
                     if '"groups swept"' in line and '"expired":1' in line.replace(" ", "")]
        assert swept, st.stderr[-3000:]
        assert swept[0]["function_name"].endswith("GroupsSweepFunction")
        def listed_now() -> dict:
            return {s["name"]: s for s in requests.get(f"{st.url}/_local/schedules").json()["schedules"]}
        listed = listed_now()
        while listed["GroupsSweepFunction.Sweep"]["runs"] < 2 and time.monotonic() < deadline:
            time.sleep(0.5)  # on a loaded machine the first run may already be the one that expired m1
            listed = listed_now()
        assert listed["GroupsSweepFunction.Sweep"]["runs"] >= 2
        assert listed["PromoterFunction.Promote"]["runs"] >= 1 and listed["PromoterFunction.Promote"]["failures"] == 0
        assert listed["GroupsSweepFunction.Sweep"]["failures"] == 0
        assert listed["BacklogJobSchedule"]["active"] is False  # no LAKEQ_WITH_JOBS
        assert requests.get(f"{st.url}/v1/groups/risk", headers=key).json()["members"] == []
        r = requests.post(f"{st.url}/_local/schedules/run", params={"name": "FanoutFunction"})
        assert r.status_code == 200 and [x["ok"] for x in r.json()["runs"]] == [True], r.text
    finally:
        assert st.stop() == 0, st.stderr[-3000:]
