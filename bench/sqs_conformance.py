"""moto's own SQS suite against lakeq's SQS endpoint: how many of its tests pass (docs/api.md "SQS
conformance").

    python -m bench.sqs_conformance MOTO_ROOT [--port P] [--junit FILE] [-k EXPR]

``--port``: default 5000 when free (moto's own server's; some tests expect queue URLs on
``http://localhost:5000``), else any. ``MOTO_ROOT``: a checkout or unpacked sdist of moto 5.2.5
(the folder holding ``tests/__init__.py``, ``tests/conftest.py`` and ``tests/test_sqs/``); nothing
is fetched at run time, and without it the script says so and exits 0 (skipped). Get one, e.g., with
``pip download moto==5.2.5 --no-deps --no-binary :all:`` and ``tar xzf moto-5.2.5.tar.gz``.
moto's test modules need ``freezegun`` (``pip install freezegun``; PYTHONPATH is passed on).

It starts the local stack as ``python -m infra.local --port P --sqs-any-signature`` (``make run
SQS_ANY_SIGNATURE=1``: any well-formed signature is accepted, the access key id ``test`` acts as the
admin), waits for ``GET /v1/health``, runs ``tests/test_sqs/test_sqs.py`` and
``tests/test_sqs/test_sqs_message_attributes.py`` with moto's server mode pointed at it
(``TEST_SERVER_MODE=true``, ``TEST_SERVER_MODE_ENDPOINT``), prints pytest's summary and the
failed tests, and stops the stack. moto calls ``POST /moto-api/reset`` before each test: in this
mode the stack answers it after returning to its just-started state (``infra/local/reset.py``).
"""
from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import requests

REPO = Path(__file__).resolve().parent.parent
FILES = ("tests/test_sqs/test_sqs.py", "tests/test_sqs/test_sqs_message_attributes.py")


def free_port(prefer: int = 5000) -> int:
    """``prefer`` (moto's server's default: a few tests build ``http://localhost:5000/...`` queue URLs
    in server mode) when free, else any free port."""
    for port in (prefer, 0):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise RuntimeError("no free port")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("moto_root", nargs="?", default=os.environ.get("MOTO_ROOT"))
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--junit", default=None, help="pytest's junit XML here")
    ap.add_argument("-k", default=None, help="pytest -k expression (a subset)")
    args = ap.parse_args(argv)
    root = Path(args.moto_root) if args.moto_root else None
    if root is None or not all((root / f).is_file() for f in FILES):
        print(f"skipped: moto's SQS tests not found under {root} (see this script's docstring)")
        return 0
    port = args.port or free_port()
    url = f"http://localhost:{port}"  # (the queue URLs' host, as moto's server mode expects)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    log = open(f"/tmp/sqs_conformance_stack_{port}.log", "w")  # noqa: SIM115
    stack = subprocess.Popen([sys.executable, "-m", "infra.local", "--port", str(port), "--sqs-any-signature"],
                             cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if requests.get(f"{url}/v1/health", timeout=5).status_code == 200:
                    break
            except requests.RequestException:
                pass
            if stack.poll() is not None or time.monotonic() > deadline:
                print(f"the local stack did not start (log: {log.name})")
                return 2
            time.sleep(0.5)
        test_env = {**os.environ, "TEST_SERVER_MODE": "true", "TEST_SERVER_MODE_ENDPOINT": url,
                    "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
                    "AWS_DEFAULT_REGION": "us-east-1"}
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rf", "--no-header",
               "-o", "addopts=", *FILES]
        if args.junit:
            cmd += ["--junitxml", args.junit]
        if args.k:
            cmd += ["-k", args.k]
        out = subprocess.run(cmd, cwd=root, env=test_env, capture_output=True, text=True)
        text = out.stdout + out.stderr
        failed = [line for line in text.splitlines() if line.startswith(("FAILED", "ERROR"))]
        print("\n".join(failed))
        summary = [line for line in text.splitlines() if re.search(r"\d+ (passed|failed)", line)]
        print(summary[-1] if summary else text[-3000:])
        return 0
    finally:
        stack.terminate()
        try:
            stack.wait(timeout=20)
        except subprocess.TimeoutExpired:
            stack.kill()
        log.close()


if __name__ == "__main__":
    sys.exit(main())
