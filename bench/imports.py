"""What each function imports at cold start, and what that costs, next to another checkout.

For every ``functions/<name>/app.py``: a fresh interpreter (as Lambda's: the function's folder and
the layers on ``sys.path``) imports the handler module; measured are the lakeq modules it loads, whether
it loads any HTTP use case or powertools' event handler, and the import's CPU time
(``time.process_time``: less sensitive than wall time to other jobs on a shared machine) and wall
time, the median of N samples. With ``--baseline <checkout>`` the same is measured on that checkout
(e.g. a worktree of an older commit), samples interleaved, and printed side by side with the ratio.
The first row is a minimal powertools handler (only ``APIGatewayHttpResolver`` with one route, as
in bench/coldstart.py), measured the same way: every function's CPU time is also given as a
multiple of it (``x min``, same checkout, same run).

Bytecode: by default each checkout's ``__pycache__`` is used (written once by an unmeasured warm-up
import). ``--no-pyc`` measures what Lambda does with lakeq's layers instead: SAM's Python build
leaves ``__pycache__`` and ``*.pyc`` out of the layers and functions it copies, and ``/opt`` is
read-only, so every cold start compiles lakeq's modules from source. There, the functions' and
layers' folders are copied (without ``__pycache__``) to a temporary folder and imported with
``PYTHONDONTWRITEBYTECODE=1`` (the installed packages keep their bytecode, as pip installs them).

``--clients``: instead, what making each AWS client lakeq makes outside the store costs in a fresh
process that has already imported ``pynamodb.connection`` (so botocore, as every function but the
archiver has at import): ``boto3.client(name)`` against botocore's
``session.get_session().create_client(name)`` (what lakeq uses), the CPU time of the import plus
the client, interleaved, median of N.

    python bench/imports.py [--quick] [--baseline /path/to/other/checkout] [--no-pyc]
    python bench/imports.py --clients [--quick]
    (--quick: 3 samples per function and checkout, ~40 s; default 7)
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from coldstart import MINIMAL_APP  # the same baseline handler as bench/coldstart.py (this folder is on sys.path)

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


MINIMAL = "(minimal powertools)"
NO_PYC = False


def probe(root: Path, function: str) -> dict:
    app = root / "functions" / function / "app.py"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # any value, "0" too, disables
    env.update({"AWS_DEFAULT_REGION": "us-east-1", "POWERTOOLS_SERVICE_NAME": "bench",
                "POWERTOOLS_METRICS_NAMESPACE": "bench"})
    if NO_PYC:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    out = subprocess.run([sys.executable, "-c", PROBE, str(app.parent), str(root / "layers" / "core"),
                          str(root / "layers" / "matcher"), str(app)], capture_output=True, text=True, env=env,
                         check=True)
    return json.loads(out.stdout)


def copy_checkout(root: Path, to: Path) -> Path:
    """The functions' and layers' sources of ``root`` (no ``__pycache__``) plus the minimal handler,
    under ``to``."""
    for sub in ("functions", "layers"):
        shutil.copytree(root / sub, to / sub, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    (to / "functions" / MINIMAL).mkdir()
    (to / "functions" / MINIMAL / "app.py").write_text(MINIMAL_APP)
    return to


def measure(roots: dict[str, Path], n: int) -> dict:
    functions = [MINIMAL] + sorted(p.parent.name for p in roots["this"].glob("functions/*/app.py")
                                   if p.parent.name != MINIMAL)
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
            "eh": "aws_lambda_powertools.event_handler" in mods, "pynamodb": "pynamodb" in mods,
            "boto3": "boto3" in mods}


CLIENT_PROBE = r'''
import os, sys, time
import pynamodb.connection  # botocore, as the functions have it at import
kind, name = sys.argv[1], sys.argv[2]
kw = {"endpoint_url": "https://example.invalid"} if name == "apigatewaymanagementapi" else {}
c0 = time.process_time()
if kind == "boto3":
    import boto3
    c = boto3.client(name, **kw)
else:
    import botocore.session
    c = botocore.session.get_session().create_client(name, **kw)
c1 = time.process_time()
print((c1 - c0) * 1000, "s3transfer" in sys.modules)
'''


def clients(n: int) -> None:
    env = {**os.environ, "AWS_DEFAULT_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    names = ("s3", "secretsmanager", "apigatewaymanagementapi")
    res: dict = {(k, nm): [] for k in ("boto3", "botocore") for nm in names}
    s3t: dict = {}
    for i in range(n + 1):  # the first round warms the bytecode caches, unmeasured
        for nm in names:
            for k in ("boto3", "botocore"):
                out = subprocess.run([sys.executable, "-c", CLIENT_PROBE, k, nm], capture_output=True, text=True,
                                     env=env, check=True).stdout.split()
                if i:
                    res[(k, nm)].append(float(out[0]))
                s3t[(k, nm)] = out[1] == "True"
    print(f"# making a client after botocore is imported: CPU ms (import + client), median of {n}, interleaved; "
          f"load average (1 min) {os.getloadavg()[0]:.1f}")
    print("client                  | boto3.client | botocore create_client | saved")
    for nm in names:
        b3, bc = statistics.median(res[("boto3", nm)]), statistics.median(res[("botocore", nm)])
        print(f"{nm:23} | {b3:.0f}{' (+s3transfer)' if s3t[('boto3', nm)] else ''} | {bc:.0f}"
              f"{' (+s3transfer)' if s3t[('botocore', nm)] else ''} | {b3 - bc:.0f} ms ({bc / b3:.2f}x)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--baseline", type=Path)
    ap.add_argument("--no-pyc", action="store_true", help="compile lakeq's modules on every import, as on Lambda")
    ap.add_argument("--clients", action="store_true", help="boto3 against botocore clients (see the docstring)")
    a = ap.parse_args()
    if a.clients:
        clients(3 if a.quick else 7)
        return
    global NO_PYC
    NO_PYC = a.no_pyc
    sources = {"this": ROOT}
    if a.baseline:
        sources = {"baseline": a.baseline.resolve(), "this": ROOT}
    n = 3 if a.quick else 7
    load0 = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmpd:
        roots = {lb: copy_checkout(root, Path(tmpd) / lb) for lb, root in sources.items()}
        res = measure(roots, n)
    load1 = os.getloadavg()
    print(f"# machine: {platform.machine()}, {os.cpu_count()} cpus, Python {platform.python_version()}; "
          f"{n} samples per function and checkout (median), interleaved; bytecode: "
          f"{'none for lakeq (compiled at every import, as on Lambda)' if NO_PYC else 'cached'}; "
          f"load average (1 min) {load0[0]:.1f} before, {load1[0]:.1f} after")
    print("function             | " + " | ".join(f"{lb}: cpu ms (x min), wall ms, modules (lakeq), HTTP use cases"
                                                 for lb in roots) + (" | cpu this/baseline" if a.baseline else ""))
    mins = {lb: summary(res[lb][MINIMAL])["cpu"] for lb in roots}
    for f in res["this"]:
        cells, cpus = [], []
        for lb in roots:
            if not res[lb][f]:
                cells.append("—")
                continue
            s = summary(res[lb][f])
            cpus.append(s["cpu"])
            flags = "".join(f" +{k}" for k, on in (("event_handler", s["eh"]), ("pynamodb", s["pynamodb"]),
                                                    ("boto3", s["boto3"])) if on)
            cells.append(f"{s['cpu']:.0f} ({s['cpu'] / mins[lb]:.2f}), {s['wall']:.0f}, {s['modules']} ({s['lakeq']}), "
                         f"{len(s['uses'])}{flags}")
        ratio = f" | {cpus[1] / cpus[0]:.2f}x" if a.baseline and len(cpus) == 2 else ""
        print(f"{f:20} | " + " | ".join(cells) + ratio)
    print("HTTP use cases loaded (this checkout):")
    for f in res["this"]:
        print(f"  {f:20} {', '.join(summary(res['this'][f])['uses']) or '(none)'}")


if __name__ == "__main__":
    main()
