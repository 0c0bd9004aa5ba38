"""Cold start (issue 16 item 5): each function's import time and first-invocation time in a fresh
process, next to a minimal powertools ``APIGatewayHttpResolver`` handler's.

For every function of ``template.yaml`` (its CodeUri, Handler, MemorySize; the layers' folders on
``sys.path`` as Lambda puts them on /opt/python):
- one fresh worker process per sample, from the function's folder, under ``python -X importtime``
  (as ``python -X importtime -c "import app"``; its small overhead is in every column): the total (``app``'s
  cumulative), the 5 heaviest imports under it by cumulative time (inclusive of what they import
  first: a module is charged to whoever imports it first) and the 5 heaviest top-level packages
  other than lakeq (inclusive: the largest cumulative of its modules; own: the sum of its modules'
  "self" time);
- in the same process: the handler module's import timed with ``perf_counter``, then it is invoked
  once (the first invocation: clients created, service models loaded, caches cold) and
  once more (warm), and its peak RSS read, with one sample event from ``events/`` (or a minimal event, listed) against
  moto's server (started once, tables of ``template.yaml``; loopback, ~ms a call: the invocation
  times include moto's latency, not DynamoDB's).
The baseline, side by side: a handler that is only ``APIGatewayHttpResolver`` with one route,
measured the same way with ``events/health.json``.

Samples are taken in rounds (every function once per round, the minimal handler first), so a change
of the machine's load hits every row alike; besides wall times, each worker reports its own CPU time
(``time.process_time``) for the import and the first invocation — moto's work runs in moto's
process and is not in it — and ``x min`` compares CPU times with the minimal handler's of the same
run. ``--baseline <checkout>``: the functions of that checkout (e.g. a worktree of an older commit:
its folders and layers) are sampled in the same rounds, against the same moto, and printed next to
this checkout's.

    python bench/coldstart.py [--quick] [--baseline /path/to/other/checkout]
    (--quick: 1 sample per function; otherwise the median of 3)
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# bench/queue.py is named like the standard library's ``queue``: keep this folder off the import path
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path[:0] = [str(ROOT), str(ROOT / "layers" / "core"), str(ROOT / "layers" / "matcher")]

ADMIN = "local-admin-key"
# function -> sample event (events/<file>, or a minimal one built below)
EVENTS = {
    "AdminFunction": "topics_list.json",
    "ProduceFunction": "produce.json",
    "ConsumeFunction": "pull.json",
    "SqsFunction": "minimal: POST / Action=ListQueues without a signature (403)",
    "GroupsFunction": "groups_describe.json",
    "GroupsSweepFunction": "groups_sweep_schedule.json",
    "PromoterFunction": "groups_sweep_schedule.json",
    "SubscriptionsFunction": "subscriptions_list.json",
    "FanoutFunction": "fanout_segments_stream.json",
    "UnsubscribeFunction": "minimal: {\"Records\": []}",
    "ArchiverFunction": "minimal: {\"Records\": []}",
    "ReportsFunction": "minimal: health.json routed to GET /v1/reports/backlog (admin)",
}

MINIMAL_APP = '''from aws_lambda_powertools.event_handler import APIGatewayHttpResolver

app = APIGatewayHttpResolver()


@app.get("/v1/health")
def health():
    return {"status": "ok"}


def lambda_handler(event, context):
    return app.resolve(event, context)
'''

DRIVER = r'''
import json, sys, time
c0, t0 = time.process_time(), time.perf_counter()
mod = __import__(sys.argv[1])  # the import statement's path (-X importtime logs it; importlib's not)
c1, t1 = time.process_time(), time.perf_counter()
handler = getattr(mod, sys.argv[2])
event = json.load(open(sys.argv[3]))

class Ctx:
    function_name = "bench"
    memory_limit_in_mb = 512
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:bench"
    aws_request_id = "req-bench"
    @staticmethod
    def get_remaining_time_in_millis():
        return 30000

def status(out):
    return out.get("statusCode") if isinstance(out, dict) else type(out).__name__

ev1 = json.loads(json.dumps(event))
c2, t2 = time.process_time(), time.perf_counter()
s1 = status(handler(ev1, Ctx()))
c3, t3 = time.process_time(), time.perf_counter()
s2 = status(handler(json.loads(json.dumps(event)), Ctx()))
t4 = time.perf_counter()
# peak RSS of this process image: VmHWM (ru_maxrss would keep the forking parent's peak across exec)
rss = int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0]) / 1024
print("BENCH" + json.dumps({"maxrss_mb": rss, "import_ms": (t1 - t0) * 1000, "first_ms": (t3 - t2) * 1000,
                            "import_cpu_ms": (c1 - c0) * 1000, "first_cpu_ms": (c3 - c2) * 1000,
                            "second_ms": (t4 - t3) * 1000, "status": [s1, s2]}))
'''

LINE = re.compile(r"^import time:\s+(\d+)\s+\|\s+(\d+)\s+\|(\s*)(\S+)")


def parse_importtime(stderr: str, module: str = "app") -> tuple[float, list, list]:
    """From ``-X importtime`` output: (the cumulative ms of ``module``'s line = the total of importing
    it, its heaviest imports: [(module, cumulative ms)] excluding ``module`` itself, heaviest first,
    [(top-level package, summed self ms)] heaviest first). Only ``module``'s subtree counts (the
    interpreter's start-up imports, site and the like, are printed before it and left out)."""
    block: list[tuple[str, int, int]] = []
    for line in stderr.splitlines():
        m = LINE.match(line)
        if not m:
            continue
        self_us, cum_us, name = int(m.group(1)), int(m.group(2)), m.group(4)
        depth = (len(m.group(3)) - 1) // 2
        if depth == 0 and name == module:
            total = cum_us
            break
        block.append((name, self_us, cum_us))
        if depth == 0:
            block = []
    else:
        raise ValueError(f"{module} not in the importtime output")
    seen: dict[str, int] = {}
    for n, _, c in block:  # a module printed twice (an import cycle) counts once, at its larger figure
        seen[n] = max(seen.get(n, 0), c)
    cumulative = sorted(((n, c / 1000) for n, c in seen.items()), key=lambda kv: -kv[1])
    packages: dict[str, list[int]] = {}  # top-level package -> [largest cumulative of its modules, summed self]
    for n, s_us, c in block:
        agg = packages.setdefault(n.split(".")[0], [0, 0])
        agg[0], agg[1] = max(agg[0], c), agg[1] + s_us
    by_package = sorted(((k, v[0] / 1000, v[1] / 1000) for k, v in packages.items() if k not in ("lakeq",)),
                        key=lambda kv: -kv[1])
    return total / 1000, cumulative, by_package


def event_for(logical_id: str, tmp: Path) -> Path:
    spec = EVENTS[logical_id]
    health = json.loads((ROOT / "events" / "health.json").read_text())
    if not spec.startswith("minimal"):
        return ROOT / "events" / spec
    if logical_id == "SqsFunction":
        ev = health
        ev["routeKey"] = ev["requestContext"]["routeKey"] = "POST /"
        ev["rawPath"] = ev["requestContext"]["http"]["path"] = "/"
        ev["requestContext"]["http"]["method"] = "POST"
        ev["headers"]["content-type"] = "application/x-www-form-urlencoded"
        ev["body"] = "Action=ListQueues&Version=2012-11-05"
        ev["isBase64Encoded"] = False
    elif logical_id == "ReportsFunction":
        ev = health
        ev["routeKey"] = ev["requestContext"]["routeKey"] = "GET /v1/reports/backlog"
        ev["rawPath"] = ev["requestContext"]["http"]["path"] = "/v1/reports/backlog"
        ev["headers"]["authorization"] = f"Bearer {ADMIN}"
    else:
        ev = {"Records": []}
    path = tmp / f"{logical_id}.json"
    path.write_text(json.dumps(ev))
    return path


def start_moto():
    import boto3

    from infra.local import template as tpl
    from infra.local.__main__ import free_port, start_moto, wait_for_moto

    port = free_port()
    proc = start_moto(port, f"/tmp/lakeq-bench-coldstart-moto-{port}.log")
    url = f"http://127.0.0.1:{port}"
    wait_for_moto(proc, url)
    template = tpl.load_template()
    ctx = tpl.make_context(template, tpl.LOCAL_STACK)
    kw = {"endpoint_url": url, "region_name": "us-east-1", "aws_access_key_id": "testing",
          "aws_secret_access_key": "testing"}
    tpl.create_tables(boto3.client("dynamodb", **kw), ctx)
    tpl.create_buckets(boto3.client("s3", **kw), ctx)
    tpl.create_queues(boto3.client("sqs", **kw), ctx)
    tpl.create_secrets(boto3.client("secretsmanager", **kw), ctx)
    return proc, url


def base_env(moto_url: str, root: Path = ROOT) -> dict:
    """The workers' environment; ``root``: the checkout whose layers go on ``PYTHONPATH``."""
    from infra.local import template as tpl

    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "POWERTOOLS_", "PYTHON"))}
    env.update({"AWS_ENDPOINT_URL": moto_url, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                "AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1",
                "AWS_ACCOUNT_ID_ENDPOINT_MODE": "disabled", "LAKEQ_ADMIN_KEY": ADMIN,
                "POWERTOOLS_TRACE_DISABLED": "true", "POWERTOOLS_METRICS_DISABLED": "true",
                "POWERTOOLS_LOG_LEVEL": "WARNING"})
    os.environ["LAKEQ_ADMIN_KEY"] = ADMIN
    env.update(tpl.environment(tpl.load_template(), tpl.LOCAL_STACK))
    env["PYTHONPATH"] = os.pathsep.join(str(root / Path(p).relative_to(ROOT)) for p in tpl.layer_dirs())
    return env


def sample(cwd: Path, module: str, attr: str, event: Path, env: dict) -> dict:
    """One fresh worker process under ``-X importtime``: import, first and second invocation."""
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-X", "importtime", "-c", DRIVER, module, attr, str(event)], cwd=cwd,
                       env=env, capture_output=True, text=True, timeout=120)
    wall = (time.perf_counter() - t0) * 1000
    out = [line for line in r.stdout.splitlines() if line.startswith("BENCH")]
    assert r.returncode == 0 and out, (r.stdout[-1000:], r.stderr[-2000:])
    total, top, by_self = parse_importtime(r.stderr, module)
    got = json.loads(out[-1][5:])
    got.update({"importtime_ms": total, "top": top, "by_self": by_self, "process_ms": wall})
    return got


KEYS = ("importtime_ms", "import_ms", "first_ms", "second_ms", "process_ms", "maxrss_mb", "import_cpu_ms",
        "first_cpu_ms")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="one sample per function (under a minute)")
    ap.add_argument("--baseline", type=Path, help="another checkout, sampled in the same rounds")
    args = ap.parse_args()
    n = 1 if args.quick else 3
    from infra.local import template as tpl

    specs = [s for s in tpl.functions(tpl.load_template()) if s.logical_id in EVENTS]
    moto, url = start_moto()
    load0 = os.getloadavg()
    checkouts = [("", ROOT)] + ([(" (baseline)", args.baseline.resolve())] if args.baseline else [])
    samples: dict[str, list] = {}
    try:
        with tempfile.TemporaryDirectory() as tmpd:
            tmp = Path(tmpd)
            mini = tmp / "minimal"
            mini.mkdir()
            (mini / "app.py").write_text(MINIMAL_APP)
            env = base_env(url)
            todo = [("minimal powertools handler", mini, "app.lambda_handler", ROOT / "events" / "health.json",
                     "health.json", env)]
            for s in specs:
                for tag, root in checkouts:
                    todo.append((s.logical_id + tag, root / Path(s.code_uri).relative_to(ROOT), s.handler,
                                 event_for(s.logical_id, tmp), EVENTS[s.logical_id], base_env(url, root)))
            for r in range(n):  # rounds: a change of load hits every row alike
                for name, cwd, handler, event, ev_name, fenv in todo:
                    print(f"# round {r + 1}/{n}: {name}...", file=sys.stderr, flush=True)
                    module, _, attr = handler.rpartition(".")
                    samples.setdefault(name, []).append(sample(cwd, module, attr, event, dict(fenv)))
    finally:
        moto.terminate()
    load1 = os.getloadavg()
    rows = []
    for name, _cwd, _h, _e, ev_name, _env in todo:
        xs = samples[name]
        rows.append((name, ev_name, {k: statistics.median(x[k] for x in xs) for k in KEYS}, xs[0], xs[0]["status"]))
    base = rows[0][2]
    print(f"# machine: {platform.machine()}, {os.cpu_count()} cpus, Python {platform.python_version()}, "
          f"{platform.platform()}; {n} sample(s) per function ({'median' if n > 1 else 'one run'}), in rounds; "
          f"load average (1 min) {load0[0]:.1f} at the start, {load1[0]:.1f} at the end")
    print()
    print("## cold start per function (ms; fresh process each)")
    print(f"{'function':<33} {'importtime':>10} {'import':>7} {'imp cpu':>7} {'x min':>6} {'1st inv':>8} "
          f"{'1st cpu':>7} {'2nd inv':>8} {'process':>8} {'x min':>6} {'RSS MB':>6}  status  event")
    for name, ev_name, m, _first, status in rows:
        print(f"{name:<33} {m['importtime_ms']:>10.0f} {m['import_ms']:>7.0f} {m['import_cpu_ms']:>7.0f} "
              f"{m['import_cpu_ms'] / base['import_cpu_ms']:>6.2f} "
              f"{m['first_ms']:>8.0f} {m['first_cpu_ms']:>7.0f} {m['second_ms']:>8.1f} {m['process_ms']:>8.0f} "
              f"{m['process_ms'] / base['process_ms']:>6.1f} {m['maxrss_mb']:>6.0f}  {status}  {ev_name}")
    print("importtime: the cumulative of `import app` under -X importtime; import / imp cpu: the handler module's "
          "import timed in that process (wall / the process's CPU time; under -X importtime), x min: imp cpu over "
          "the minimal handler's; 1st inv / 1st cpu: the first invocation (wall / CPU of the worker, moto's not "
          "included); 2nd inv: the second; process: the whole worker process (interpreter start, import, "
          "2 invocations, exit), x min: over the minimal handler's; RSS: the process's peak resident memory "
          "(Linux VmHWM, -X importtime's bookkeeping included)")
    print()
    print("## heaviest imports per function (first sample; ms under -X importtime)")
    for name, ev_name, m, first, status in rows:
        print(f"{name:<33} top 5 by cumulative: " + ", ".join(f"{k} {v:.0f}" for k, v in first["top"][:5]))
        print(f"{'':<33} top 5 packages (inclusive / own): "
              + ", ".join(f"{k} {c:.0f} / {o:.0f}" for k, c, o in first["by_self"][:5]))


if __name__ == "__main__":
    main()
