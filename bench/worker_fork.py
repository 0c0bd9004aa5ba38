"""CPU of the local stack's Lambda workers, forked (infra/local/forks.py) vs fresh interpreters
(``LAKEQ_WORKER_FORK=0``), measured side by side in one run, the two ways alternating.

``python -m bench.worker_fork --spawns 20 --rounds 2`` — per round, a pool (with the template's IAM
rules, as the stack's) starts ``--spawns`` workers of ``--function`` at once, waits until each has
loaded its handler, and closes: CPU-s of this process and of every process it waited for
(``getrusage`` SELF + CHILDREN: the fresh workers, or the fork server with the workers it reaped),
user + system. A forked round includes its server's start (its preload).

``python -m bench.worker_fork --e2e tests/e2e/test_local_stack_process.py --rounds 2`` — per round,
that pytest file in a child process (its local stacks and their workers beneath it); this process is
a child subreaper, so whatever a stack leaves behind is waited for too; CPU-s of all of them.

CPU seconds, not wall: the machine is shared. Run it with ``nice -n 5``.
"""
from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _cpu() -> float:
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def _stack_env() -> tuple[object, list, object]:
    """The environment, specs and rules the local stack gives its workers (no moto: nothing is
    called; a worker's start is its imports)."""
    sys.path.insert(0, str(REPO))
    from infra.local import aws_rules
    from infra.local import template as tpl

    template = tpl.load_template()
    ctx = tpl.make_context(template, "lakeq-local")
    os.environ.update({"AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_ACCESS_KEY_ID": "testing",
                       "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
                       "AWS_REGION": "us-east-1", "POWERTOOLS_TRACE_DISABLED": "true"})
    os.environ.update(tpl.environment(ctx))
    return tpl.layer_dirs(template), tpl.functions(ctx), aws_rules.AwsRules.from_template(ctx=ctx)


def spawns(n: int, rounds: int, function: str) -> None:
    from infra.local.worker import ProcessPool

    layers, specs, rules = _stack_env()
    spec = next(s for s in specs if s.logical_id == function)
    print(f"{n} workers of {function} per round, at once; CPU-s of this process and all it waited for")
    totals: dict[bool, list[float]] = {True: [], False: []}
    for r in range(rounds):
        for fork in (False, True) if r % 2 == 0 else (True, False):
            t0, w0 = _cpu(), time.monotonic()
            pool = ProcessPool(layers, rules=rules, max_per_function=n, use_forks=fork)
            with contextlib.ExitStack() as held:
                for _ in range(n):
                    held.enter_context(pool.instance(spec))
                workers = pool.workers(spec.logical_id)
                for w in workers:
                    w.wait_ready()
                assert len(workers) == n and all(w.ready for w in workers), "a worker did not load"
                assert all(w.forked == fork for w in workers)
            pool.close()
            cpu, wall = _cpu() - t0, time.monotonic() - w0
            totals[fork].append(cpu)
            print(f"round {r + 1} {'forked' if fork else 'fresh '}: {cpu:6.2f} CPU-s, "
                  f"{cpu / n:.3f} a worker, wall {wall:5.1f} s", flush=True)
    old, new = sum(totals[False]) / rounds, sum(totals[True]) / rounds
    print(f"mean: fresh {old:.2f} CPU-s ({old / n:.3f} a worker), forked {new:.2f} ({new / n:.3f} "
          f"a worker, its server's start included): forked/fresh = {new / old:.2f}")


def _orphans() -> dict[str, int]:
    """The processes reparented to this one (still running, or exited and not yet waited for), by
    their command's first words."""
    out: dict[str, int] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            if ppid != os.getpid():
                continue
            with open(f"/proc/{d}/cmdline", "rb") as fh:
                words = fh.read().split(b"\0")
            name = " ".join(Path(w.decode(errors="replace")).name for w in words[:3] if w)
            if not name:  # exited, not waited for yet: its command line is gone, its name is not
                with open(f"/proc/{d}/comm") as fh:
                    name = f"{fh.read().strip()} (exited)"
        except (OSError, IndexError, ValueError):
            continue
        out[name] = out.get(name, 0) + 1
    return out


def e2e(path: str, rounds: int, ways: tuple[str, ...] = ("0", "1")) -> None:
    if sys.platform.startswith("linux"):  # PR_SET_CHILD_SUBREAPER: orphans are ours to wait for
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(36, 1, 0, 0, 0)
    print(f"{path}, one pytest process a round; CPU-s of it and every process beneath it")
    totals: dict[str, list[float]] = {"1": [], "0": []}
    for r in range(rounds):
        for fork in ways if r % 2 == 0 else ways[::-1]:
            t0, w0 = _cpu(), time.monotonic()
            env = dict(os.environ, LAKEQ_WORKER_FORK=fork)
            proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", path],
                                  cwd=REPO, env=env, capture_output=True, text=True)
            left, kinds = 0, _orphans()
            while True:  # what the file's stacks left behind (nothing, when they stopped cleanly)
                try:
                    os.waitpid(-1, 0)
                    left += 1
                except ChildProcessError:
                    break
            cpu, wall = _cpu() - t0, time.monotonic() - w0
            totals[fork].append(cpu)
            last = (proc.stdout.strip().splitlines() or ["?"])[-1]
            print(f"round {r + 1} {'forked' if fork == '1' else 'fresh '}: {cpu:7.2f} CPU-s, wall "
                  f"{wall:6.1f} s, orphans waited for {left} {kinds}: {last}", flush=True)
    if len(ways) == 2:
        old, new = sum(totals["0"]) / rounds, sum(totals["1"]) / rounds
        print(f"mean: fresh {old:.2f} CPU-s, forked {new:.2f}: forked/fresh = {new / old:.2f}, "
              f"{old - new:.2f} CPU-s less a run")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--spawns", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--function", default="ProduceFunction")
    ap.add_argument("--e2e", metavar="TEST_PATH", default=None)
    ap.add_argument("--only", choices=["fresh", "forked"], default=None,
                    help="--e2e: run one way only (a whole folder once)")
    args = ap.parse_args(argv)
    if args.e2e:
        e2e(args.e2e, args.rounds, {"fresh": ("0",), "forked": ("1",), None: ("0", "1")}[args.only])
    else:
        spawns(args.spawns, args.rounds, args.function)
    return 0


if __name__ == "__main__":
    sys.exit(main())
