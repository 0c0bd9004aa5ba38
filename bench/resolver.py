"""What keeping each request's state per request costs the HTTP functions (flake35).

``lakeq.api.http.LakeqResolver`` keeps a request's event, Lambda context and routing context in a
ContextVar (so threads of one process each read their own request) and ``make_app`` builds every
route's middleware stack before the first request. This bench resolves the same requests through an
app made by this checkout's ``lakeq/api/http.py`` and one made by a baseline's (default: ``git show
main:layers/core/lakeq/api/http.py``; ``--baseline FILE``), loaded side by side in one process, rounds
alternating, and prints the CPU time (``time.process_time``) per request of each and their ratio.

The route is the shape of ``POST /v1/acks``: authenticated (the key lookup replaced by a constant
caller: no store), reads its path argument, ``router.caller``, the body and the query. No AWS call is
made, so this is the resolver's whole cost, not a request's (a request's store calls take ms).

    python bench/resolver.py [--rounds 10] [--n 5000] [--baseline path/to/http.py]
"""
from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# (not this folder: bench/queue.py would stand in for the standard library's queue)
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path[:0] = [str(ROOT / "layers" / "core"), str(ROOT / "layers" / "matcher"), str(ROOT)]
os.environ.setdefault("POWERTOOLS_METRICS_NAMESPACE", "bench")
os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "true")


def load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def app_of(http):
    from bench.echo_app import echo_app
    from lakeq.admin.auth import Principal

    http.authenticate = lambda header: Principal(admin=False, client="risk")
    return echo_app(http)


def event(i: int) -> dict:
    ev = json.loads((ROOT / "events" / "health.json").read_text())
    path = f"/things/n{i}"
    ev["routeKey"] = ev["requestContext"]["routeKey"] = "POST /things/{name}"
    ev["rawPath"] = ev["requestContext"]["http"]["path"] = path
    ev["requestContext"]["http"]["method"] = "POST"
    ev["pathParameters"] = {"name": f"n{i}"}
    ev["rawQueryString"] = f"x={i}"
    ev["queryStringParameters"] = {"x": str(i)}
    ev["headers"]["authorization"] = "Bearer k"
    ev["body"] = json.dumps({"group": "risk", "receipt": "r", "accept": [i]})
    return ev


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--n", type=int, default=5000)
    ap.add_argument("--baseline", type=Path, default=None)
    a = ap.parse_args()
    base = a.baseline
    if base is None:
        text = subprocess.run(["git", "show", "main:layers/core/lakeq/api/http.py"], cwd=ROOT, check=True,
                              capture_output=True, text=True).stdout
        base = Path("/tmp") / f"bench_resolver_main_{os.getpid()}.py"
        base.write_text(text)
    apps = {"new": app_of(load("bench_http_new", ROOT / "layers/core/lakeq/api/http.py")),
            "baseline": app_of(load("bench_http_baseline", base))}
    events = [event(i) for i in range(16)]
    for name, app in apps.items():  # warm, and both answer alike
        out = app.resolve(copy.deepcopy(events[3]), None)
        assert out["statusCode"] == 200 and json.loads(out["body"])["name"] == "n3", (name, out)
    cpu: dict[str, list[float]] = {k: [] for k in apps}
    for r in range(a.rounds):
        for name in (("new", "baseline") if r % 2 == 0 else ("baseline", "new")):
            app = apps[name]
            batch = [events[i % 16] for i in range(a.n)]
            t0 = time.process_time()
            for ev in batch:
                app.resolve(ev, None)
            cpu[name].append((time.process_time() - t0) / a.n * 1e6)
    ru = resource.getrusage(resource.RUSAGE_SELF)
    med = {k: statistics.median(v) for k, v in cpu.items()}
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}  load {os.getloadavg()[0]:.2f}  "
          f"rounds {a.rounds} x {a.n} requests each, alternating; process CPU {ru.ru_utime + ru.ru_stime:.1f} s")
    for k in ("baseline", "new"):
        print(f"{k:9s} CPU µs/request: median {med[k]:.1f}  (rounds: {', '.join(f'{x:.1f}' for x in cpu[k])})")
    print(f"new / baseline: {med['new'] / med['baseline']:.3f}")


if __name__ == "__main__":
    main()
