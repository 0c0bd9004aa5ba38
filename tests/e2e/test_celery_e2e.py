"""Issue 9, "must show": a real Celery worker (kombu 5.7's SQS transport, AWS JSON 1.0 + SigV4)
running tasks through lakeq's SQS endpoint on the local stack. Every task sent with ``.delay()``
runs exactly once."""
from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import quote

import requests

HERE = Path(__file__).resolve().parent
TASKS = 20


def _celery_module():
    spec = importlib.util.spec_from_file_location("lakeq_e2e_celery_app", HERE / "celery_app.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _lines(path: Path) -> list[int]:
    return [int(x) for x in path.read_text().split()] if path.exists() else []


def test_celery_worker_runs_every_task_exactly_once(stack, tmp_path):
    r = requests.get(f"{stack.url}/v1/sqs-credentials/admin", headers=stack.admin_headers(), timeout=10)
    assert r.status_code == 200, r.text
    cred = r.json()
    broker = f"sqs://{quote(cred['access_key_id'], safe='')}:{quote(cred['secret_access_key'], safe='')}" \
             f"@127.0.0.1:{stack.port}"
    prefix = f"e2e-{uuid.uuid4().hex[:8]}-"
    out = tmp_path / "ran.txt"
    log = tmp_path / "worker.log"
    env = dict(os.environ, LAKEQ_CELERY_BROKER=broker, LAKEQ_CELERY_PREFIX=prefix, LAKEQ_CELERY_OUT=str(out),
               PYTHONPATH=str(HERE), AWS_ACCESS_KEY_ID="unused", AWS_SECRET_ACCESS_KEY="unused")
    env.pop("AWS_ENDPOINT_URL", None)
    with open(log, "wb") as fh:
        worker = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "celery_app", "worker", "--pool=solo", "--loglevel=INFO",
             "--without-gossip", "--without-mingle", "--without-heartbeat"],
            cwd=HERE, env=env, stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while b" ready." not in log.read_bytes():
            assert worker.poll() is None, log.read_text()[-4000:]
            assert time.monotonic() < deadline, "worker not ready in 60 s:\n" + log.read_text()[-4000:]
            time.sleep(0.2)
        app, record = _celery_module().make_app(broker, prefix, str(out))
        for i in range(TASKS):
            record.delay(i)
        deadline = time.monotonic() + 90
        while len(_lines(out)) < TASKS:
            assert worker.poll() is None, log.read_text()[-4000:]
            assert time.monotonic() < deadline, f"ran {sorted(_lines(out))}\n" + log.read_text()[-4000:]
            time.sleep(0.2)
        time.sleep(3)  # a redelivery would show up here
        assert sorted(_lines(out)) == list(range(TASKS)), log.read_text()[-4000:]
        assert b"Traceback" not in log.read_bytes(), log.read_text()[-4000:]
        # it went through lakeq: the Celery queue is a lakeq topic
        topics = requests.get(f"{stack.url}/v1/topics", headers=stack.admin_headers(), timeout=10).json()
        assert f"{prefix}celery" in [t["name"] for t in topics["topics"]], topics
        app.close()
    finally:
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)  # warm shutdown
            try:
                worker.wait(30)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()
