"""The template's scheduled event sources on the local stack: EventBridge schedules and Glue triggers.

Everything is read from ``template.yaml`` (nothing hard-coded):

- every ``Type: Schedule`` (and ``ScheduleV2``) event of an ``AWS::Serverless::Function``, and every
  ``AWS::Events::Rule`` with a ``ScheduleExpression`` targeting a function of the template: the
  function is invoked on the schedule with an EventBridge scheduled-event payload (or the event's
  ``Input``), under its own IAM role (``interceptor.acting_as``; a worker process acts as its
  function by itself), like the streams pump does;
- every ``AWS::Glue::Trigger`` of ``Type: SCHEDULED``: its actions' jobs are started on the
  schedule by a job runner (``make run WITH_JOBS=1`` / ``LAKEQ_WITH_JOBS=1``: ``glue_jobs.local
  --job <script stem>`` against the running stack); a job already running is not started again
  (``ExecutionProperty.MaxConcurrentRuns``, default 1), like Glue refuses a concurrent run.

Expressions: ``rate(N minute|minutes|hour|hours|day|days)`` and EventBridge / Glue 6-field
``cron(minutes hours day-of-month month day-of-week year)`` (UTC; ``*``, ``?``, lists, ranges,
``/`` steps, month and weekday names; ``L``, ``W`` and ``#`` are refused with a ValueError).

Time can be compressed for tests and demos: ``scale`` (``LAKEQ_SCHEDULE_SCALE``, default 1) makes a
virtual clock run ``scale`` times faster than the wall clock (``rate(1 minute)`` at scale 60 fires
every second; cron expressions follow the same virtual clock); ``jobs_every_s``
(``LAKEQ_JOBS_EVERY``, seconds) replaces the Glue triggers' schedules by a fixed wall-clock interval.
:meth:`Scheduler.run_now` (``POST /_local/schedules/run[?name=…]`` on the gateway) fires sources at
once, synchronously.
"""
from __future__ import annotations

import calendar
import json
import logging
import os
import re
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Mapping

from . import interceptor
from . import template as tpl_mod
from .handlers import HandlerCache, LambdaContext

log = logging.getLogger("lakeq.local.schedules")

# ------------------------------------------------------------------------------- expressions

_RATE = re.compile(r"^rate\(\s*(\d+)\s+(minute|minutes|hour|hours|day|days)\s*\)$")
_CRON = re.compile(r"^cron\((.*)\)$")
_UNIT_S = {"minute": 60, "hour": 3600, "day": 86400}
_MONTHS = {m.upper(): i for i, m in enumerate(calendar.month_abbr) if m}
_DAYS = {d: i for i, d in enumerate(["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"], start=1)}


class Expression:
    """A parsed schedule expression: :meth:`next_after` gives the next fire time (UTC, aware)."""

    text: str

    def next_after(self, t: datetime) -> datetime:  # pragma: no cover - abstract
        raise NotImplementedError


@dataclass(frozen=True)
class Rate(Expression):
    text: str
    period_s: int
    origin: datetime = datetime(1970, 1, 1, tzinfo=timezone.utc)

    def next_after(self, t: datetime) -> datetime:
        """Fires every ``period_s`` from ``origin`` (the scheduler starts it at its own start)."""
        n = int((t - self.origin).total_seconds() // self.period_s) + 1
        return self.origin + timedelta(seconds=n * self.period_s)


def _field(text: str, lo: int, hi: int, names: Mapping[str, int] | None = None) -> frozenset[int] | None:
    """One cron field → the allowed values, or None for ``*`` / ``?`` (anything)."""
    if text in ("*", "?"):
        return None
    if any(c in text.upper() for c in "LW#") and not (
            names and all(p.upper() in names or p.isdigit() for p in re.split(r"[,\-/]", text))):
        raise ValueError(f"cron field {text!r}: L, W and # are not supported locally")

    def num(s: str) -> int:
        s = s.upper()
        if names and s in names:
            return names[s]
        if not s.isdigit():
            raise ValueError(f"cron field {text!r}: {s!r} is not a number")
        return int(s)

    out: set[int] = set()
    for part in text.split(","):
        step = 1
        if "/" in part:
            part, step_s = part.split("/", 1)
            step = num(step_s)
            if step < 1:
                raise ValueError(f"cron field {text!r}: step must be ≥ 1")
        if part in ("*", "?", ""):
            a, b = lo, hi
        elif "-" in part:
            a_s, b_s = part.split("-", 1)
            a, b = num(a_s), num(b_s)
        else:
            a = num(part)
            b = hi if step != 1 else a
        if not (lo <= a <= hi and lo <= b <= hi) or a > b:
            raise ValueError(f"cron field {text!r}: values must be within {lo}-{hi}")
        out.update(range(a, b + 1, step))
    return frozenset(out)


@dataclass(frozen=True)
class Cron(Expression):
    text: str
    minutes: frozenset[int] | None
    hours: frozenset[int] | None
    days: frozenset[int] | None
    months: frozenset[int] | None
    weekdays: frozenset[int] | None  # 1 = Sunday … 7 = Saturday (EventBridge / Glue)
    years: frozenset[int] | None

    def _day_ok(self, d: datetime) -> bool:
        if self.days is not None and d.day not in self.days:
            return False
        if self.weekdays is not None and (d.isoweekday() % 7) + 1 not in self.weekdays:
            return False
        return True

    def next_after(self, t: datetime) -> datetime:
        c = t.replace(second=0, microsecond=0) + timedelta(minutes=1)
        limit = t + timedelta(days=366 * 5)
        while c <= limit:
            if self.years is not None and c.year not in self.years:
                c = datetime(c.year + 1, 1, 1, tzinfo=timezone.utc)
            elif self.months is not None and c.month not in self.months:
                c = (datetime(c.year + 1, 1, 1, tzinfo=timezone.utc) if c.month == 12
                     else datetime(c.year, c.month + 1, 1, tzinfo=timezone.utc))
            elif not self._day_ok(c):
                c = c.replace(hour=0, minute=0) + timedelta(days=1)
            elif self.hours is not None and c.hour not in self.hours:
                c = c.replace(minute=0) + timedelta(hours=1)
            elif self.minutes is not None and c.minute not in self.minutes:
                c += timedelta(minutes=1)
            else:
                return c
        raise ValueError(f"{self.text} never fires within five years of {t.isoformat()}")


def parse(expression: str) -> Expression:
    """``rate(…)`` or ``cron(…)`` → an :class:`Expression` (ValueError when not understood)."""
    text = " ".join(str(expression).split())
    m = _RATE.match(text)
    if m:
        n, unit = int(m.group(1)), m.group(2)
        if n < 1:
            raise ValueError(f"{text}: the rate must be at least 1")
        if (n == 1) != (not unit.endswith("s")):
            raise ValueError(f"{text}: use the singular unit for 1 and the plural otherwise")
        return Rate(text, n * _UNIT_S[unit.rstrip("s")])
    m = _CRON.match(text)
    if m:
        parts = m.group(1).split()
        if len(parts) != 6:
            raise ValueError(f"{text}: cron takes 6 fields (minutes hours day-of-month month "
                             "day-of-week year)")
        mi, h, dom, mon, dow, yr = parts
        if (dom == "?") == (dow == "?"):
            raise ValueError(f"{text}: exactly one of day-of-month and day-of-week must be '?'")
        return Cron(text, _field(mi, 0, 59), _field(h, 0, 23), _field(dom, 1, 31),
                    _field(mon, 1, 12, _MONTHS), _field(dow, 1, 7, _DAYS), _field(yr, 1970, 2199))
    raise ValueError(f"{expression!r} is neither rate(…) nor cron(…)")


# ------------------------------------------------------------------------------ the template


@dataclass
class Source:
    """One scheduled event source of the template."""

    name: str  # "GroupsSweepFunction.Sweep", "BacklogJobSchedule"
    kind: str  # "function" | "glue"
    targets: tuple[str, ...]  # function logical id, or the Glue jobs' logical ids
    expression: Expression
    enabled: bool = True
    rule_name: str = ""  # the EventBridge rule / Glue trigger's (local) name
    input: Any = None  # the event's Input (already parsed), sent instead of the scheduled event
    max_concurrent: dict[str, int] = field(default_factory=dict)  # glue job → MaxConcurrentRuns


def _name_of(value: Any, ctx: tpl_mod.Context) -> str:
    v = tpl_mod.resolve(value, ctx)
    return "" if v is None else str(v)


def _enabled(props: Mapping[str, Any], ctx: tpl_mod.Context) -> bool:
    if "Enabled" in props:
        return bool(tpl_mod.resolve(props["Enabled"], ctx))
    state = tpl_mod.resolve(props.get("State", "ENABLED"), ctx)
    return str(state).upper() == "ENABLED"


def _input(props: Mapping[str, Any], ctx: tpl_mod.Context) -> Any:
    raw = tpl_mod.resolve(props.get("Input"), ctx)
    return json.loads(raw) if isinstance(raw, str) else raw


def sources(template: Mapping | tpl_mod.Context | None = None, stack_name: str = tpl_mod.LOCAL_STACK,
            parameters: Mapping[str, Any] | None = None) -> list[Source]:
    """Every schedule of the template: functions' Schedule events, rules, Glue triggers."""
    ctx = tpl_mod._ctx(template, stack_name, parameters)
    tpl = ctx.template
    out: list[Source] = []
    functions = tpl_mod.resources_of_type(tpl, "AWS::Serverless::Function")
    for lid, res in functions.items():
        for ev_name, ev in (((res.get("Properties") or {}).get("Events")) or {}).items():
            etype = (ev or {}).get("Type")
            props = (ev or {}).get("Properties") or {}
            if etype == "Schedule":
                expr = tpl_mod.resolve(props.get("Schedule"), ctx)
            elif etype == "ScheduleV2":
                expr = tpl_mod.resolve(props.get("ScheduleExpression"), ctx)
            else:
                continue
            out.append(Source(f"{lid}.{ev_name}", "function", (lid,), parse(expr), _enabled(props, ctx),
                              _name_of(props.get("Name"), ctx) or f"{ctx.stack_name}-{lid}{ev_name}",
                              _input(props, ctx)))
    for lid, res in tpl_mod.resources_of_type(tpl, "AWS::Events::Rule").items():
        props = res.get("Properties") or {}
        if not props.get("ScheduleExpression"):
            continue
        for target in props.get("Targets") or []:
            arn = target.get("Arn")
            fn = (arn.get("Fn::GetAtt") or [None])[0] if isinstance(arn, dict) else None
            if isinstance(fn, str) and "." in fn:
                fn = fn.split(".", 1)[0]
            if fn not in functions:
                log.warning("%s: target %r is not a function of the template; skipped", lid, arn)
                continue
            out.append(Source(f"{lid}.{target.get('Id', fn)}", "function", (fn,),
                              parse(tpl_mod.resolve(props["ScheduleExpression"], ctx)),
                              _enabled(props, ctx), _name_of(props.get("Name"), ctx) or f"{ctx.stack_name}-{lid}",
                              _input(target, ctx)))
    jobs = tpl_mod.resources_of_type(tpl, "AWS::Glue::Job")
    job_ids = {_name_of((r.get("Properties") or {}).get("Name"), ctx) or lid: lid for lid, r in jobs.items()}
    for lid, res in tpl_mod.resources_of_type(tpl, "AWS::Glue::Trigger").items():
        props = res.get("Properties") or {}
        if str(props.get("Type", "")).upper() != "SCHEDULED":
            continue
        targets = []
        for action in props.get("Actions") or []:
            job = action.get("JobName")
            ref = job.get("Ref") if isinstance(job, dict) else None
            jid = ref if ref in jobs else job_ids.get(_name_of(job, ctx))
            if jid is None:
                log.warning("%s: job %r is not in the template; skipped", lid, job)
                continue
            targets.append(jid)
        limits = {j: int(tpl_mod.resolve(((jobs[j].get("Properties") or {}).get("ExecutionProperty") or {})
                                         .get("MaxConcurrentRuns", 1), ctx)) for j in targets}
        out.append(Source(lid, "glue", tuple(targets), parse(tpl_mod.resolve(props["Schedule"], ctx)),
                          bool(tpl_mod.resolve(props.get("StartOnCreation", False), ctx)),
                          _name_of(props.get("Name"), ctx) or f"{ctx.stack_name}-{lid}", None, limits))
    return out


def glue_script(job_logical_id: str, template: Mapping | tpl_mod.Context | None = None,
                stack_name: str = tpl_mod.LOCAL_STACK) -> str:
    """The stem of a Glue job's ``Command.ScriptLocation`` (``backlog`` for ``…/backlog.py``)."""
    ctx = tpl_mod._ctx(template, stack_name, None)
    props = tpl_mod.resources_of_type(ctx.template, "AWS::Glue::Job")[job_logical_id].get("Properties") or {}
    loc = str(tpl_mod.resolve((props.get("Command") or {}).get("ScriptLocation"), ctx))
    return loc.rstrip("/").rsplit("/", 1)[-1].removesuffix(".py")


def scheduled_event(source: Source, at: datetime, ctx: tpl_mod.Context) -> dict[str, Any]:
    """What EventBridge sends for a scheduled rule (or the event's ``Input``)."""
    if source.input is not None:
        return source.input
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": ctx.account_id,
        "time": at.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": ctx.region,
        "resources": [f"arn:aws:events:{ctx.region}:{ctx.account_id}:rule/{source.rule_name}"],
        "detail": {},
    }


# --------------------------------------------------------------------------------- runners


def glue_runner(port: int, extra_args: tuple[str, ...] = ()) -> Callable[[str], int]:
    """Runs one Glue job (by script stem) as ``python -m glue_jobs.local --job <stem>`` against the
    stack on ``port`` (a local SparkSession; the job's output goes to this process's stderr). Runs
    are serialised: they share the local lake folder, and one JVM at a time is enough for a laptop."""
    root = str(tpl_mod.REPO_ROOT)
    one_at_a_time = threading.Lock()
    current: list[subprocess.Popen] = []
    stopped = threading.Event()

    def run(script: str) -> int:
        env = {k: v for k, v in os.environ.items() if k != "AWS_ENDPOINT_URL"}
        cmd = [sys.executable, "-m", "glue_jobs.local", "--port", str(port), "--job", script, *extra_args]
        with one_at_a_time:
            if stopped.is_set():
                return 0
            proc = subprocess.Popen(cmd, cwd=root, env=env, stdin=subprocess.DEVNULL, stdout=sys.stderr,
                                    stderr=sys.stderr)
            current.append(proc)
            try:
                return proc.wait()
            finally:
                current.remove(proc)

    def stop() -> None:
        """Stop the running job (its Spark JVM goes with it) and start no other."""
        stopped.set()
        for proc in list(current):
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()

    run.stop = stop  # type: ignore[attr-defined]
    return run


class Scheduler:
    """Fires the template's schedules (a daemon thread, :meth:`start`) or on demand (:meth:`run_now`).

    ``invoke(spec, event, context)`` overrides how a function is called (default: the handler cache,
    under the function's role); ``job_runner(script_stem) -> exit code`` runs a Glue job — without
    one the Glue triggers are listed but never fire (``make run`` without ``WITH_JOBS``).
    """

    def __init__(self, template: Any = None, *, stack_name: str = tpl_mod.LOCAL_STACK,
                 parameters: Mapping[str, Any] | None = None, handler_cache: Any = None,
                 invoke: Callable[[Any, dict, Any], Any] | None = None,
                 job_runner: Callable[[str], int] | None = None, scale: float | None = None,
                 jobs_every_s: float | None = None, clock: Callable[[], float] = time.time):
        self.template = tpl_mod.load_template(template)
        self.ctx = tpl_mod.make_context(self.template, stack_name, parameters)
        self.specs = {s.logical_id: s for s in tpl_mod.functions(self.ctx)}
        self.sources = sources(self.ctx)
        self.handler_cache = handler_cache or HandlerCache()
        self._invoke = invoke
        self.job_runner = job_runner
        self.scale = float(scale if scale is not None else os.environ.get("LAKEQ_SCHEDULE_SCALE") or 1)
        if self.scale <= 0:
            raise ValueError("the schedule scale must be positive")
        every = jobs_every_s if jobs_every_s is not None else os.environ.get("LAKEQ_JOBS_EVERY")
        self.jobs_every_s = float(every) if every else None
        self.clock = clock
        self.runs: dict[str, int] = {s.name: 0 for s in self.sources}
        self.failures: dict[str, int] = {s.name: 0 for s in self.sources}
        self.skipped: dict[str, int] = {s.name: 0 for s in self.sources}
        self._running_jobs: dict[str, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._start_real = self.clock()
        self._next: dict[str, float] = {}

    # ----- time: a virtual clock running `scale` times as fast as the wall clock
    def virtual_now(self) -> datetime:
        real = self.clock()
        return datetime.fromtimestamp(self._start_real + (real - self._start_real) * self.scale, timezone.utc)

    def _to_real(self, virtual: datetime) -> float:
        return self._start_real + (virtual.timestamp() - self._start_real) / self.scale

    def active(self) -> list[Source]:
        """The sources that fire by themselves: enabled, and Glue triggers only with a job runner."""
        return [s for s in self.sources if s.enabled and (s.kind == "function" or self.job_runner)]

    def _first(self, s: Source, now: datetime) -> float:
        if s.kind == "glue" and self.jobs_every_s:
            return self.clock() + self.jobs_every_s
        expr = s.expression
        if isinstance(expr, Rate):  # a rate rule counts from its creation (here: now)
            expr = Rate(expr.text, expr.period_s, now)
        return self._to_real(expr.next_after(now))

    def _after(self, s: Source, fired_real: float) -> float:
        if s.kind == "glue" and self.jobs_every_s:
            return fired_real + self.jobs_every_s
        virtual = datetime.fromtimestamp(self._start_real + (fired_real - self._start_real) * self.scale,
                                         timezone.utc)
        expr = s.expression
        if isinstance(expr, Rate):
            expr = Rate(expr.text, expr.period_s, virtual)
        return self._to_real(expr.next_after(virtual))

    # ----- running
    def start(self) -> "Scheduler":
        now = self.virtual_now()
        for s in self.active():
            self._next[s.name] = self._first(s, now)
            t = threading.Thread(target=self._loop, args=(s,), name=f"schedule-{s.name}", daemon=True)
            self._threads.append(t)
            t.start()
            log.info("schedule %s (%s) → %s", s.name, s.expression.text, ", ".join(s.targets))
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop firing; wait at most ``timeout`` seconds in all for the schedules' threads (one per
        schedule: a join of ``timeout`` each made the stack's stop grow with the number of schedules,
        past 20 s when every thread was still in its first invocation on a loaded machine). A thread
        still invoking is a daemon; the workers it talks to are killed next."""
        self._stop.set()
        if hasattr(self.job_runner, "stop"):
            self.job_runner.stop()
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))

    def _loop(self, s: Source) -> None:
        while not self._stop.is_set():
            wait = self._next[s.name] - self.clock()
            if wait > 0:
                if self._stop.wait(min(wait, 1.0)):
                    return
                continue
            fired = self._next[s.name]
            self._next[s.name] = self._after(s, max(fired, self.clock()))
            try:
                self.fire(s)
            except Exception:  # noqa: BLE001 - a failing run is logged; the schedule goes on
                if not self._stop.is_set():
                    log.exception("scheduled %s failed", s.name)
            if s.kind == "glue":
                # the trigger fired again while the job ran: Glue refuses that run (MaxConcurrentRuns)
                missed = 0
                while self._next[s.name] <= self.clock():
                    missed += 1
                    self._next[s.name] = self._after(s, self._next[s.name])
                if missed:
                    with self._lock:
                        self.skipped[s.name] += missed
                    log.warning("%s: %d run(s) skipped while the job was still running", s.name, missed)

    def fire(self, s: Source) -> list[Any]:
        """One scheduled run of ``s`` now (what EventBridge or the Glue trigger does)."""
        at = self.virtual_now()
        results = []
        for target in s.targets:
            try:
                if s.kind == "function":
                    results.append(self._call(s, target, at))
                else:
                    results.append(self._job(s, target))
            except Exception:
                with self._lock:
                    self.failures[s.name] += 1
                raise
        with self._lock:
            self.runs[s.name] += 1
        return results

    def _call(self, s: Source, lid: str, at: datetime) -> Any:
        spec = self.specs[lid]
        event = scheduled_event(s, at, self.ctx)
        context = LambdaContext(spec, self.ctx.region, self.ctx.account_id)
        # the invocation runs as the function: its AWS calls are checked against its role
        with interceptor.acting_as(lid):
            if self._invoke is not None:
                return self._invoke(spec, event, context)
            with self.handler_cache.instance(spec) as handler:
                return handler(event, context)

    def _job(self, s: Source, job: str) -> Any:
        if self.job_runner is None:
            raise RuntimeError(f"{s.name}: no Glue job runner (start the stack with --with-jobs)")
        limit = s.max_concurrent.get(job, 1)
        with self._lock:
            if self._running_jobs.get(job, 0) >= limit:
                self.skipped[s.name] += 1
                log.warning("%s: %s is already running (MaxConcurrentRuns %d); not started", s.name, job, limit)
                return {"job": job, "started": False, "reason": "concurrent_runs_exceeded"}
            self._running_jobs[job] = self._running_jobs.get(job, 0) + 1
        script = glue_script(job, self.ctx)
        started = time.monotonic()
        try:
            log.info("%s: starting Glue job %s (%s)", s.name, job, script)
            code = self.job_runner(script)
        finally:
            with self._lock:
                self._running_jobs[job] -= 1
        took = time.monotonic() - started
        (log.info if code == 0 else log.error)("%s: Glue job %s exited %s after %.1fs", s.name, job, code, took)
        if code != 0:
            raise RuntimeError(f"Glue job {job} ({script}) exited with {code}")
        return {"job": job, "started": True, "exit_code": code, "seconds": round(took, 1)}

    def matching(self, name: str | None) -> list[Source]:
        """Sources named ``name`` (a source name, a function / trigger / job logical id), or all."""
        if not name:
            return [s for s in self.sources if s.kind == "function" or self.job_runner]
        return [s for s in self.sources if name == s.name or name in s.targets
                or name == s.name.split(".", 1)[0] or name == s.rule_name]

    def run_now(self, name: str | None = None) -> list[dict[str, Any]]:
        """Fire the matching sources at once (in this thread): ``[{"name", "ok", "result"|"error"}]``."""
        out = []
        for s in self.matching(name):
            try:
                out.append({"name": s.name, "ok": True, "result": self.fire(s)})
            except Exception as exc:  # noqa: BLE001
                log.exception("%s failed", s.name)
                out.append({"name": s.name, "ok": False, "error": f"{type(exc).__name__}: {exc}"})
        return out

    def describe(self) -> list[dict[str, Any]]:
        active = {s.name for s in self.active()}
        return [{"name": s.name, "kind": s.kind, "targets": list(s.targets), "expression": s.expression.text,
                 "enabled": s.enabled, "active": s.name in active, "runs": self.runs[s.name],
                 "failures": self.failures[s.name], "skipped": self.skipped[s.name],
                 "next_in_s": (round(self._next[s.name] - self.clock(), 3) if s.name in self._next else None)}
                for s in self.sources]
