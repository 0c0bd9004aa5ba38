"""A replay's dry run (issue 32, item 5; docs/api.md "POST /v1/replays"): ``"dry_run": true`` on
moto — the same checks and authorisation as a replay (a 4xx writes nothing, starts no job), the
same selection job (its start refused → 503, nothing written: dry runs count against the job's
concurrent runs like replays), then ``selected`` with the job's count and sample. It never copies,
never keeps copy state, never touches a target topic or group."""
from __future__ import annotations

import sys
import types

import pytest
from botocore.exceptions import ClientError

from lakeq.replay import service
from lakeq.store.replays import ReplayModel
from tests.integration import replay_harness as H
from tests.integration.test_replay_api import T0, produce, scan, start

pytestmark = pytest.mark.moto


@pytest.fixture
def replay(api, setup, clock, monkeypatch, aws):
    return H.into_topic(api, aws, clock, monkeypatch)


@pytest.fixture
def no_group_calls(monkeypatch):
    """lakeq.replay.group_target replaced by one that fails the test on any call."""
    import lakeq.replay as pkg

    def boom(*a, **k):
        raise AssertionError(f"a dry run called group_target with {a}")
    fake = types.ModuleType("lakeq.replay.group_target")
    fake.begin = fake.end = fake.sink = boom
    monkeypatch.setitem(sys.modules, "lakeq.replay.group_target", fake)
    monkeypatch.setattr(pkg, "group_target", fake, raising=False)


def test_a_dry_run_counts_and_samples_and_copies_nothing(api, setup, clock, replay, aws):
    produce(api, setup, clock, 30)
    lo, hi = T0, T0 + 30_000
    flt = {"tags": ["red"]}
    r = start(api, {"topic": "quotes/sh", "from": lo, "to": hi, "filter": flt, "target": {"topic": "replayed"},
                    "dry_run": True})
    assert (r["status"], r["dry_run"], r["sample"], r["found"]) == ("selecting", True, None, None)
    (run,) = H.job_runs()  # the replay's own selection job, with the replay's arguments
    assert {k: run["Arguments"][f"--{k}"] for k in ("topic", "from_ms", "to_ms", "dry_run")} == {
        "topic": "quotes/sh", "from_ms": str(lo), "to_ms": str(hi), "dry_run": "true"}  # no manifest written
    summary = H.write_manifest(aws, r["id"], "quotes/sh", lo, hi, flt)
    want = H.expected(aws, "quotes/sh", lo, hi, flt)
    assert len(want) == 15 and len(summary["sample"]) == 15
    assert H.run_schedule() == {"replays": 1, "selected": 1}
    got = api.call("GET", f"/v1/replays/{r['id']}")[1]
    assert (got["status"], got["found"], got["copied"], got["failed"], got["dry_run"]) == ("selected", 15, 0, 0, True)
    assert got["sample"] == summary["sample"]
    by_id = {w["id"]: w for w in want}
    for s in got["sample"]:  # each a selected message, as the lake holds it
        w = by_id[s["id"]]
        assert (s["queue"], s["offset"], s["key"], s["produced_at"]) == (w["queue"], w["offset"], w["key"],
                                                                          w["produced_at"])
        assert s["size"] == len(f"body {w['id'][1:]} é".encode())
    # nothing copied, no copy state, out of the schedule; ended (a cancel → 409)
    assert H.topic_messages("replayed") == {}
    item = ReplayModel.get(r["id"], consistent_read=True)
    assert (item.cursor, item.parts, item.send_at, item.inflight, item.live) == (0, None, None, None, None)
    assert H.run_schedule() == {"replays": 0}
    assert api.call("POST", f"/v1/replays/{r['id']}/cancel")[0] == 409
    listed = api.call("GET", "/v1/replays")[1]["replays"]
    assert [(x["id"], x["status"], x["found"]) for x in listed] == [(r["id"], "selected", 15)]


def test_a_dry_run_into_a_group_never_touches_the_group(api, setup, clock, replay, aws, no_group_calls):
    produce(api, setup, clock, 6)
    lo, hi = T0, T0 + 6_000
    before = api.call("GET", "/v1/groups/risk/pending", query={"topic": "quotes/sh"})
    r = start(api, {"topic": "quotes/sh", "from": lo, "to": hi, "target": {"group": "risk"}, "dry_run": True})
    H.write_manifest(aws, r["id"], "quotes/sh", lo, hi, None)
    r2 = start(api, {"topic": "quotes/sh", "from": lo, "to": hi, "target": {"group": "risk"}, "dry_run": True})
    assert api.call("POST", f"/v1/replays/{r2['id']}/cancel")[1]["status"] == "cancelled"
    r3 = start(api, {"topic": "quotes/sh", "from": lo, "to": hi, "target": {"group": "risk"}, "dry_run": True})
    H.write_error(aws, r3["id"], "boom")
    assert H.run_schedule() == {"replays": 2, "selected": 1, "failed": 1}
    got = api.call("GET", f"/v1/replays/{r['id']}")[1]
    assert (got["status"], got["found"], len(got["sample"])) == ("selected", 6, 6)
    assert api.call("GET", "/v1/groups/risk/pending", query={"topic": "quotes/sh"}) == before
    assert H.run_schedule() == {"replays": 0}


def test_a_dry_runs_bad_requests_and_auth_change_nothing(api, setup, clock, replay, aws, monkeypatch):
    produce(api, setup, clock, 3)
    ok = {"topic": "quotes/sh", "from": T0, "to": T0 + 10_000, "target": {"topic": "replayed"}, "dry_run": True}
    cases = [
        (api.call("POST", "/v1/replays", ok, key=None), 401),
        (api.call("POST", "/v1/replays", ok, key=setup["risk"]), 403),  # admin only, as a replay
        (api.call("POST", "/v1/replays", {**ok, "dry_run": "yes"}), 400),
        (api.call("POST", "/v1/replays", {**ok, "dry_run": 1}), 400),
        (api.call("POST", "/v1/replays", {**ok, "dry_run": None}), 400),
        (api.call("POST", "/v1/replays", {k: v for k, v in ok.items() if k != "target"}), 400),
        (api.call("POST", "/v1/replays", {**ok, "to": T0 + 401 * 86_400_000}), 400),  # the replay's limits
        (api.call("POST", "/v1/replays", {**ok, "rate": 0}), 400),
        (api.call("POST", "/v1/replays", {**ok, "filter": {"conditions": [{"field": "n"}]}}), 400),
        (api.call("POST", "/v1/replays", {**ok, "topic": "nosuch"}), 404),
        (api.call("POST", "/v1/replays", {**ok, "target": {"topic": "nosuch"}}), 404),
        (api.call("POST", "/v1/replays", {**ok, "target": {"group": "feed"}}), 404),
    ]
    for (status, body), want in cases:
        assert status == want, body
        assert set(body["error"]) == {"code", "message"}
    assert scan() == [] and H.job_runs() == []

    # the job's concurrent runs are full: refused like a replay, nothing written
    def full(args):
        raise ClientError({"Error": {"Code": "ConcurrentRunsExceededException", "Message": "full"}}, "StartJobRun")
    import lakeq.store.jobs as jobs
    monkeypatch.setattr(jobs, "start_replay_selection", full)
    s, b = api.call("POST", "/v1/replays", ok)
    assert s == 503 and scan() == []


def test_a_real_replays_selection_json_with_a_sample_still_copies(api, setup, clock, replay, aws):
    """The job's summary now carries ``sample``: a replay (not a dry run) ignores it and copies."""
    produce(api, setup, clock, 4)
    r = start(api, {"topic": "quotes/sh", "from": T0, "to": T0 + 4_000, "target": {"topic": "replayed"}})
    assert "dry_run" not in r and "sample" not in r
    H.write_manifest(aws, r["id"], "quotes/sh", T0, T0 + 4_000, None)
    assert H.run_schedule() == {"replays": 1, "done": 1}
    assert sum(len(v) for v in H.topic_messages("replayed").values()) == 4
    assert service.SAMPLE_MAX == 20


def test_a_replay_runs_its_job_without_dry_run_and_fails_one_that_would_outlast_its_manifest(
        api, setup, clock, replay, aws):
    """A replay's job is no dry run (it writes the manifest). Its scratch under ``replays/<id>/``
    expires after SCRATCH_DAYS (template.yaml expire-replays): a selection whose copy would take
    more than MAX_COPY_MS at the replay's rate fails instead of losing its manifest half-way."""
    import json
    import os

    from infra.local import template as tpl
    from lakeq.replay import rules

    lifecycle = tpl.load_template()["Resources"]["LakeBucket"]["Properties"]["LifecycleConfiguration"]["Rules"]
    assert {(x["Id"], x.get("Prefix")): x.get("ExpirationInDays") for x in lifecycle}[("expire-replays", "replays/")] \
        == rules.SCRATCH_DAYS
    produce(api, setup, clock, 10)
    lo, hi = T0, T0 + 10_000
    r = start(api, {"topic": "quotes/sh", "from": lo, "to": hi, "target": {"topic": "replayed"}, "rate": 1})
    (run,) = H.job_runs()
    assert "--dry_run" not in run["Arguments"]
    summary = H.write_manifest(aws, r["id"], "quotes/sh", lo, hi, None)
    too_many = rules.MAX_COPY_MS // 1000 + 1  # one more than a copy at 1/s does in that time
    summary["parts"][0]["rows"] += too_many - summary["found"]
    aws["s3"].put_object(Bucket=os.environ[H.BUCKET_ENV], Key=f"replays/{r['id']}/selection.json",
                         Body=json.dumps(summary).encode())
    H.run_schedule()
    got = api.call("GET", f"/v1/replays/{r['id']}")[1]
    assert got["status"] == "failed" and "raise the rate or narrow the range" in got["error"], got
    assert H.topic_messages("replayed") == {}
