"""What each function imports at cold start, and what that costs, next to another checkout.

For every ``functions/<name>/app.py``: a fresh interpreter (as Lambda's: the function's folder and
the layers on ``sys.path``) imports the handler module; measured are the lakeq modules it loads, whether
it loads any HTTP use case or powertools' event handler, and the import's CPU time
(``time.process_time``: less sensitive than wall time to other jobs on a shared machine) and wall
time, the median of N samples. With ``--baseline <checkout>`` the same is measured on that checkout
(e.g. a worktree of an older commit), samples interleaved, and printed side by side with the ratio.

    python bench/imports.py [--quick] [--baseline /path/to/other/checkout]
    (--quick: 3 samples per function and checkout, ~40 s; default 7)
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROBE = r'''
import importlib.util as u, json, sys, time
sys.path[:0] = [sys.argv[1], sys.argv[2], sys.argv[3]]
c0, w0 = time.process_time(), time.perf_counter()
s = u.spec_from_file_location("app", sys.argv[4]); m = u.module_from_spec(s); s.loader.exec_module(m)
c1, w1 = time.process_time(), time.perf_counter()
pk = sorted(k for k, v in list(sys.modules.items()) if hasattr(v, "__path__"))
print(json.dumps({"cpu_ms": (c1 - c0) * 1000, "wall_ms": (w1 - w0) * 1000, "modules": sorted(sys.modules),
                  "packages": pk}))
'''

USE_CASE = ("lakeq.service", "lakeq.subscriptions", "lakeq.group_service", "lakeq.sqs_service", "lakeq.http",
            "lakeq.reports", "lakeq.monitor", "lakeq.lake.reports", "lakeq.console.monitor", "lakeq.sqs.handler",
            "lakeq.sqs.queues", "lakeq.sqs.messages")


def use_cases(mods: list[str], packages: frozenset[str] = frozenset()) -> list[str]:
    """The HTTP use cases and routes among ``mods`` (either layout: flat modules or packages; a
    package's ``__init__`` is not one)."""
    return sorted(m for m in mods if m.startswith("lakeq.") and m not in packages and (
        m.endswith(".service") or m.startswith("lakeq.api.") or m in USE_CASE))


def probe(root: Path, function: str) -> dict:
    app = root / "functions" / function / "app.py"
    env = {**os.environ, "AWS_DEFAULT_REGION": "us-east-1", "POWERTOOLS_SERVICE_NAME": "bench",
           "POWERTOOLS_METRICS_NAMESPACE": "bench", "PYTHONDONTWRITEBYTECODE": "0"}
    out = subprocess.run([sys.executable, "-c", PROBE, str(app.parent), str(root / "layers" / "core"),
                          str(root / "layers" / "matcher"), str(app)], capture_output=True, text=True, env=env,
                         check=True)
    return json.loads(out.stdout)


def measure(roots: dict[str, Path], n: int) -> dict:
    functions = sorted(p.parent.name for p in roots["this"].glob("functions/*/app.py"))
    res: dict = {label: {f: [] for f in functions} for label in roots}
    for label, root in roots.items():  # warm the bytecode caches once, unmeasured
        for f in functions:
            if (root / "functions" / f / "app.py").exists():
                probe(root, f)
    for _ in range(n):
        for f in functions:
            for label, root in roots.items():
                if (root / "functions" / f / "app.py").exists():
                    res[label][f].append(probe(root, f))
    return res


def summary(samples: list[dict]) -> dict:
    mods = samples[0]["modules"]
    lakeq = [m for m in mods if m == "lakeq" or m.startswith("lakeq.")]
    return {"cpu": statistics.median(s["cpu_ms"] for s in samples),
            "wall": statistics.median(s["wall_ms"] for s in samples),
            "lakeq": len(lakeq), "uses": use_cases(mods, frozenset(samples[0]["packages"])), "modules": len(mods),
            "eh": "aws_lambda_powertools.event_handler" in mods, "pynamodb": "pynamodb" in mods}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--baseline", type=Path)
    a = ap.parse_args()
    roots = {"this": ROOT}
    if a.baseline:
        roots = {"baseline": a.baseline.resolve(), "this": ROOT}
    n = 3 if a.quick else 7
    print(f"# machine: {platform.machine()}, {os.cpu_count()} cpus, Python {platform.python_version()}; "
          f"{n} samples per function and checkout (median), interleaved; load average {os.getloadavg()[0]:.1f}")
    res = measure(roots, n)
    print("function       | " + " | ".join(f"{lb}: cpu ms, wall ms, modules (lakeq), HTTP use cases" for lb in roots)
          + (" | cpu this/baseline" if a.baseline else ""))
    for f in res["this"]:
        cells, cpus = [], []
        for lb in roots:
            if not res[lb][f]:
                cells.append("—")
                continue
            s = summary(res[lb][f])
            cpus.append(s["cpu"])
            cells.append(f"{s['cpu']:.0f}, {s['wall']:.0f}, {s['modules']} ({s['lakeq']}), "
                         f"{len(s['uses'])}{' +event_handler' if s['eh'] else ''}{' +pynamodb' if s['pynamodb'] else ''}")
        ratio = f" | {cpus[1] / cpus[0]:.2f}x" if a.baseline and len(cpus) == 2 else ""
        print(f"{f:14} | " + " | ".join(cells) + ratio)
    print("HTTP use cases loaded (this checkout):")
    for f in res["this"]:
        print(f"  {f:14} {', '.join(summary(res['this'][f])['uses']) or '(none)'}")


if __name__ == "__main__":
    main()
