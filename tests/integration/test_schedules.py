"""infra.local.schedules: the template's Schedule events and Glue triggers on the local stack."""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from werkzeug.test import Client

from infra.local import interceptor
from infra.local.gateway import Gateway
from infra.local.handlers import HandlerCache
from infra.local.schedules import Cron, Rate, Scheduler, glue_script, sources
from lakeq.admin import auth as lq_auth
from tests.handlers import Api

EVENTS = Path(__file__).resolve().parents[2] / "events"


def by_name(template):
    return {s.name: s for s in sources(template)}


def test_every_schedule_of_the_template_is_read_from_it(template):
    srcs = by_name(template)
    raw = template["Resources"]
    # every Schedule event of every function is there, with the template's own expression
    expected = {f"{lid}.{ev}": e["Properties"]["Schedule"]
                for lid, r in raw.items() if r["Type"] == "AWS::Serverless::Function"
                for ev, e in (r["Properties"].get("Events") or {}).items() if e["Type"] == "Schedule"}
    assert {"GroupsSweepFunction.Sweep", "FanoutFunction.Redeliver"} <= set(expected)
    assert {n: s.expression.text for n, s in srcs.items() if s.kind == "function"} == expected
    assert isinstance(srcs["GroupsSweepFunction.Sweep"].expression, Rate)
    assert srcs["GroupsSweepFunction.Sweep"].expression.period_s == 60
    # every scheduled Glue trigger, with its jobs and their MaxConcurrentRuns
    triggers = {lid: r["Properties"] for lid, r in raw.items()
                if r["Type"] == "AWS::Glue::Trigger" and r["Properties"]["Type"] == "SCHEDULED"}
    assert set(triggers) == {"BacklogJobSchedule", "RebalancePlanJobSchedule", "CompactJobSchedule",
                             "LedgerJobSchedule"}
    for lid, props in triggers.items():
        s = srcs[lid]
        assert s.kind == "glue" and isinstance(s.expression, Cron)
        assert s.expression.text == props["Schedule"]
        assert list(s.targets) == [a["JobName"]["Ref"] for a in props["Actions"]]
        assert all(n == 1 for n in s.max_concurrent.values())
    # the job runner is told the job by its script's name (from Command.ScriptLocation)
    assert glue_script("BacklogJob", template) == "backlog"
    assert glue_script("RebalancePlanJob", template) == "rebalance_plan"
    assert glue_script("CompactJob", template) == "compact"
    assert glue_script("LedgerJob", template) == "ledger"


def test_scheduled_event_has_eventbridge_shape(template):
    seen = []
    sched = Scheduler(template, invoke=lambda spec, ev, ctx: seen.append((spec.logical_id, ev, ctx)))
    runs = sched.run_now("GroupsSweepFunction")
    assert [r["name"] for r in runs] == ["GroupsSweepFunction.Sweep"] and runs[0]["ok"]
    (lid, event, ctx), = seen
    sample = json.loads((EVENTS / "groups_sweep_schedule.json").read_text())
    assert lid == "GroupsSweepFunction"
    assert set(event) == set(sample)
    assert {k: event[k] for k in ("version", "detail-type", "source", "account", "region", "resources",
                                  "detail")} == \
        {k: sample[k] for k in ("version", "detail-type", "source", "account", "region", "resources", "detail")}
    assert ctx.function_name == "lakeq-local-GroupsSweepFunction"


def test_functions_are_invoked_under_their_own_role(template):
    acting = []
    sched = Scheduler(template, invoke=lambda spec, ev, ctx: acting.append(
        (spec.logical_id, interceptor.current_function())))
    sched.run_now()
    assert sorted(acting) == [("FanoutFunction", "FanoutFunction"),
                              ("GroupsSweepFunction", "GroupsSweepFunction"),
                              ("MetricsFunction", "MetricsFunction"),
                              ("PromoterFunction", "PromoterFunction"),
                              ("PushFunction", "PushFunction"),
                              ("RedriveFunction", "RedriveFunction"),
                              ("ReplayCopierFunction", "ReplayCopierFunction")]


def test_sweep_on_schedule_expires_a_silent_member(aws):
    """The real handler, in-process, with IAM enforced: the sweep alone removes a silent member.
    On the wall clock (the scheduler's run does not see the tests' fake clock in a whole-suite run:
    expired 0 there, 1 alone), with a 5-s session so that a loaded machine's stall between the join
    and the read below does not let that read expire the member first."""
    lq_auth.clear_caches()
    api = Api()
    assert api.call("POST", "/v1/topics", {"name": "quotes", "queues": 2})[0] == 201
    s, risk = api.call("POST", "/v1/clients", {"name": "risk", "role": "consumer", "topics": ["quotes"]})
    assert s == 201
    s, joined = api.call("POST", "/v1/groups/risk/members", {"member_id": "m1", "topics": ["quotes"],
                                                             "owned": [], "session_timeout_ms": 5000},
                         key=risk["api_key"])
    assert s == 200, joined
    before = api.call("GET", "/v1/groups/risk")
    time.sleep(5.3)  # past the session timeout
    sched = Scheduler(handler_cache=HandlerCache())
    runs = sched.run_now("GroupsSweepFunction")
    assert runs[0]["ok"], runs
    assert runs[0]["result"][0]["expired"] == 1
    assert [m["member_id"] for m in before[1]["members"]] == ["m1"]
    # the header is read without expiring anything (GET expires too; the sweep did it first)
    assert sched.runs["GroupsSweepFunction.Sweep"] == 1
    assert api.call("GET", "/v1/groups/risk")[1]["members"] == []
    lq_auth.clear_caches()


def _run_until(sched, done, timeout_s: float = 60.0) -> float:
    """Start ``sched``, wait until ``done()`` (at most ``timeout_s``: however slowly a loaded machine
    runs the schedules' threads), stop it; the real seconds it ran, from its creation (its virtual
    clock's origin) to after the stop (no run can start later)."""
    sched.start()
    deadline = time.monotonic() + timeout_s
    try:
        while not done() and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        sched.stop()
    return sched.clock() - sched._start_real


def test_time_compression_fires_rate_schedules_on_the_virtual_clock(template):
    """Every schedule fires, and never more often than the virtual clock allows. How many runs a
    given wall time holds depends on the machine's load (a late thread skips a run, as EventBridge
    does not catch up either), so the test waits for the runs and bounds them from above only."""
    calls: list[str] = []
    lock = threading.Lock()

    def invoke(spec, ev, ctx):
        with lock:
            calls.append(spec.logical_id)

    sched = Scheduler(template, invoke=invoke, scale=300)  # 1 minute = 0.2 s, 5 minutes = 1 s
    assert not any(s["active"] for s in sched.describe() if s["kind"] == "glue")  # no job runner
    ran_s = _run_until(sched, lambda: calls.count("GroupsSweepFunction") >= 6 and calls.count("FanoutFunction") >= 1)
    sweeps, redeliveries = calls.count("GroupsSweepFunction"), calls.count("FanoutFunction")
    assert sweeps >= 6 and redeliveries >= 1, calls
    # rate(1 minute) and rate(5 minutes), counted from the start: at most one run per elapsed period
    assert sweeps <= ran_s * 300 / 60 + 1, (ran_s, calls)
    assert redeliveries <= ran_s * 300 / 300 + 1, (ran_s, calls)


def test_glue_triggers_run_their_jobs_on_schedule(template):
    ran: list[str] = []
    sched = Scheduler(template, invoke=lambda *a: None, job_runner=lambda script: ran.append(script) or 0,
                      scale=3600)  # one virtual hour a second: each hourly trigger about once a second
    ran_s = _run_until(sched, lambda: ran.count("backlog") >= 1 and ran.count("rebalance_plan") >= 1)
    assert 1 <= ran.count("backlog") <= ran_s + 1, (ran_s, ran)
    assert 1 <= ran.count("rebalance_plan") <= ran_s + 1, (ran_s, ran)
    assert sched.runs["BacklogJobSchedule"] == ran.count("backlog")


def test_glue_jobs_every_overrides_the_triggers_schedule(template):
    ran: list[str] = []
    sched = Scheduler(template, invoke=lambda *a: None, job_runner=lambda s: ran.append(s) or 0,
                      jobs_every_s=0.3)
    ran_s = _run_until(sched, lambda: ran.count("backlog") >= 2 and ran.count("rebalance_plan") >= 2)
    assert 2 <= ran.count("backlog") <= ran_s / 0.3 + 1, (ran_s, ran)
    assert 2 <= ran.count("rebalance_plan") <= ran_s / 0.3 + 1, (ran_s, ran)


def test_a_running_job_is_not_started_again(template):
    release = threading.Event()
    started = threading.Event()

    def runner(script):
        started.set()
        release.wait(10)
        return 0

    sched = Scheduler(template, invoke=lambda *a: None, job_runner=runner)
    first = threading.Thread(target=sched.run_now, args=("BacklogJob",))
    first.start()
    assert started.wait(5)
    again = sched.run_now("BacklogJobSchedule")
    release.set()
    first.join(5)
    assert again == [{"name": "BacklogJobSchedule", "ok": True,
                      "result": [{"job": "BacklogJob", "started": False, "reason": "concurrent_runs_exceeded"}]}]
    assert sched.runs["BacklogJobSchedule"] == 2 and sched.skipped["BacklogJobSchedule"] == 1


def test_a_failing_job_is_reported(template):
    sched = Scheduler(template, invoke=lambda *a: None, job_runner=lambda s: 3)
    runs = sched.run_now("RebalancePlanJob")
    assert runs[0]["ok"] is False and "exited with 3" in runs[0]["error"]
    assert sched.failures["RebalancePlanJobSchedule"] == 1


def test_gateway_routes(template):
    seen = []
    sched = Scheduler(template, invoke=lambda spec, ev, ctx: seen.append(spec.logical_id) or {"ok": 1})
    client = Client(Gateway(template, scheduler=sched))
    r = client.post("/_local/schedules/run?name=FanoutFunction")
    assert r.status_code == 200
    assert r.get_json() == {"runs": [{"name": "FanoutFunction.Redeliver", "ok": True, "result": [{"ok": 1}]}]}
    assert seen == ["FanoutFunction"]
    r = client.post("/_local/schedules/run?name=NoSuchThing")
    assert r.status_code == 404 and r.get_json()["error"]["code"] == "not_found"
    assert client.get("/_local/schedules/run").status_code == 405
    listed = {s["name"]: s for s in client.get("/_local/schedules").get_json()["schedules"]}
    assert listed["FanoutFunction.Redeliver"]["runs"] == 1
    assert listed["BacklogJobSchedule"]["active"] is False  # no job runner: make run without WITH_JOBS
    # without a job runner, running "everything" runs the functions only
    assert [r["name"] for r in client.post("/_local/schedules/run").get_json()["runs"]] == \
        ["GroupsSweepFunction.Sweep", "PromoterFunction.Promote", "FanoutFunction.Redeliver", "PushFunction.Retry",
         "RedriveFunction.Run", "ReplayCopierFunction.Copy", "MetricsFunction.Publish"]


def test_a_trigger_firing_while_its_job_runs_is_skipped_not_queued(template):
    """Glue refuses a run beyond MaxConcurrentRuns: a job slower than its interval is not restarted
    back to back (which would also starve the other job of the one-at-a-time runner)."""
    starts: dict[str, list[float]] = {"backlog": [], "rebalance_plan": []}

    def runner(script):
        starts[script].append(time.monotonic())
        time.sleep(0.5)
        return 0

    sched = Scheduler(template, invoke=lambda *a: None, job_runner=runner, jobs_every_s=0.2)
    _run_until(sched, lambda: all(len(v) >= 2 for v in starts.values())
               and sched.skipped["BacklogJobSchedule"] and sched.skipped["RebalancePlanJobSchedule"])
    for job, trigger in (("backlog", "BacklogJobSchedule"), ("rebalance_plan", "RebalancePlanJobSchedule")):
        gaps = [b - a for a, b in zip(starts[job], starts[job][1:])]
        assert len(starts[job]) >= 2, starts
        assert min(gaps) >= 0.55, (job, gaps)  # 0.5 s run, then the next due time (0.2 s ticks)
        assert sched.skipped[trigger] >= 1
