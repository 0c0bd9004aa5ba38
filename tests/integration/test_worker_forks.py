"""The local stack's workers forked from a server that preloaded the third-party modules
(infra/local/forks.py, infra/local/worker.py): each is still a fresh execution environment — its own
lakeq module state, exactly its function's environment — and the pool's crash, kill, timeout, reset
and close behave as they do with ``LAKEQ_WORKER_FORK=0`` (workers started as fresh interpreters)."""
from __future__ import annotations

import os
import signal
import textwrap
import threading
import time

import pytest

from infra.local import template as tpl
from infra.local.forks import EVERY_NAME, differing
from infra.local.template import FunctionSpec
from infra.local.worker import HandlerError, ProcessPool

LAYERS = tpl.layer_dirs()


class _Ctx:
    function_name = "fn"
    memory_limit_in_mb = 128
    aws_request_id = "r"
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:fn"

    def get_remaining_time_in_millis(self) -> int:
        return 10000


def _spec(tmp_path, logical_id: str, source: str, env: dict | None = None, timeout: int = 30) -> FunctionSpec:
    code = tmp_path / logical_id
    code.mkdir()
    (code / "app.py").write_text(textwrap.dedent(source))
    return FunctionSpec(logical_id=logical_id, code_uri=code, handler="app.handler",
                        environment=dict(env or {}), http_routes=[], stream_events=[],
                        function_name=logical_id, timeout=timeout)


def _call(pool: ProcessPool, spec: FunctionSpec, event: dict | None = None):
    with pool.instance(spec) as invoke:
        return invoke(event or {}, _Ctx())


STATE = '''
    import os, sys, time
    # what this environment held before its own code ran: the fork server preloads third-party
    # modules only, never lakeq, the layers or a function
    BEFORE = {"lakeq": sorted(m for m in sys.modules if m.split(".")[0] in ("lakeq", "matcher")),
              "powertools": "aws_lambda_powertools" in sys.modules,
              "xray": "aws_xray_sdk" in sys.modules}
    from lakeq.common import clock  # module-level state of lakeq's, per environment
    def handler(event, context):
        clock.__dict__["_test_calls"] = clock.__dict__.get("_test_calls", 0) + 1
        time.sleep(event.get("sleep", 0))
        return {"pid": os.getpid(), "ppid": os.getppid(), "calls": clock._test_calls, "before": BEFORE}
'''


def test_forked_workers_start_with_their_own_lakeq_state(tmp_path, monkeypatch):
    monkeypatch.delenv("LAKEQ_WORKER_FORK", raising=False)
    spec = _spec(tmp_path, "Fn", STATE)
    pool = ProcessPool(LAYERS)
    try:
        results = []
        threads = [threading.Thread(target=lambda: results.append(_call(pool, spec, {"sleep": 0.5})))
                   for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        workers = pool.workers("Fn")
        assert len(workers) == 3 and all(w.forked for w in workers)
        server = pool.fork_server()
        assert {r["ppid"] for r in results} == {server.proc.pid}  # forked by the server, not started here
        assert len({r["pid"] for r in results}) == 3
        assert [r["calls"] for r in results] == [1, 1, 1]  # no lakeq state shared between them
        assert all(r["before"] == {"lakeq": [], "powertools": True, "xray": False} for r in results)
        again = _call(pool, spec)
        assert again["calls"] == 2 and again["pid"] in {r["pid"] for r in results}  # warm: kept
    finally:
        pool.close()


def test_the_off_switch_starts_fresh_interpreters(tmp_path, monkeypatch):
    monkeypatch.setenv("LAKEQ_WORKER_FORK", "0")
    spec = _spec(tmp_path, "Fn", STATE)
    pool = ProcessPool(LAYERS)
    try:
        r = _call(pool, spec)
        assert [w.forked for w in pool.workers("Fn")] == [False]
        assert pool.fork_server() is None
        assert r["ppid"] == os.getpid() and r["calls"] == 1
        assert r["before"] == {"lakeq": [], "powertools": False, "xray": False}
    finally:
        pool.close()


ENV = '''
    import os, subprocess
    def handler(event, context):
        import boto3
        from pynamodb import settings
        return {"mine": os.environ.get("MINE"),
                "shell": subprocess.run(["sh", "-c", "echo $MINE"], capture_output=True,
                                        text=True).stdout.strip(),
                "region": boto3.session.Session().region_name,
                "retries": settings.get_settings_value("max_retry_attempts"),
                "leaked": os.environ.get("SET_IN_THE_POOL_ONLY"),
                "ppid": os.getppid()}
'''


def test_each_worker_sees_its_own_functions_environment(tmp_path, monkeypatch):
    """A forked worker reads its function's environment through the preloaded modules that read it
    at call time (botocore's region), the C environment (a shell) and ``os.environ``; a function whose
    environment differs where a preloaded module read it at import (pynamodb reads
    ``PYNAMODB_CONFIG`` when imported) gets a fresh interpreter, and reads its own settings."""
    monkeypatch.delenv("LAKEQ_WORKER_FORK", raising=False)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.delenv("PYNAMODB_CONFIG", raising=False)
    config = tmp_path / "pynamodb_settings.py"
    config.write_text("max_retry_attempts = 7\n")
    a = _spec(tmp_path, "A", ENV, {"MINE": "a", "AWS_DEFAULT_REGION": "eu-west-3"})
    b = _spec(tmp_path, "B", ENV, {"MINE": "b", "PYNAMODB_CONFIG": str(config)})
    pool = ProcessPool(LAYERS)
    try:
        pool.preload([a])  # the server starts with the environment of this moment
        monkeypatch.setenv("SET_IN_THE_POOL_ONLY", "later")  # a worker started now sees it
        ra, rb = _call(pool, a), _call(pool, b)
        server = pool.fork_server()
        assert "PYNAMODB_CONFIG" in server.read_at_import
        assert [w.forked for w in pool.workers("A")] == [True] and ra["ppid"] == server.proc.pid
        assert ra == {"mine": "a", "shell": "a", "region": "eu-west-3", "retries": 3, "leaked": None,
                      "ppid": server.proc.pid}
        assert rb == {"mine": "b", "shell": "b", "region": "us-east-1", "retries": 7, "leaked": "later",
                      "ppid": os.getpid()}
        assert [w.forked for w in pool.workers("B")] == [False]
        monkeypatch.delenv("SET_IN_THE_POOL_ONLY")
        with pool.instance(a) as first, pool.instance(a) as second:  # a second A, forked now
            assert second({}, _Ctx())["leaked"] is None and first({}, _Ctx())["mine"] == "a"
        assert [w.forked for w in pool.workers("A")] == [True, True]
    finally:
        pool.close()


LIFE = '''
    import os, time
    def handler(event, context):
        if event.get("exit") is not None:
            os._exit(event["exit"])
        time.sleep(event.get("sleep", 0))
        if event.get("mark"):  # busy until the test lets it return
            open(event["mark"], "w").close()
            deadline = time.monotonic() + 60
            while not os.path.exists(event["release"]) and time.monotonic() < deadline:
                time.sleep(0.02)
        return os.getpid()
'''


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.parametrize("fork", ["1", "0"])
def test_crash_kill_timeout_reset_and_close_are_the_same_forked_or_not(tmp_path, monkeypatch, fork):
    monkeypatch.setenv("LAKEQ_WORKER_FORK", fork)
    spec = _spec(tmp_path, "Fn", LIFE, timeout=1)
    pool = ProcessPool(LAYERS)
    try:
        pid = _call(pool, spec)
        assert [w.forked for w in pool.workers("Fn")] == [fork == "1"]
        # a handler that ends its process: the invocation fails with its exit code, the worker is replaced
        dead = pool.workers("Fn")[0]
        with pytest.raises(HandlerError, match=r"the worker process exited \((3|None)\)"):
            _call(pool, spec, {"exit": 3})
        assert dead.proc.wait(30) == 3 and not dead.alive
        pid2 = _call(pool, spec)
        assert pid2 != pid and pool.instances("Fn") == 1
        # killed from outside while idle: the next invocation gets a new worker
        w2 = pool.workers("Fn")[0]
        os.kill(pid2, signal.SIGKILL)
        assert w2.proc.wait(30) == -signal.SIGKILL and not w2.alive
        pid3 = _call(pool, spec)
        assert pid3 not in (pid, pid2) and pool.instances("Fn") == 1
        # over its timeout: killed, the invocation fails
        w3 = pool.workers("Fn")[0]
        with pytest.raises(HandlerError, match="timed out after 1s"):
            _call(pool, spec, {"sleep": 30})
        assert w3.proc.returncode in (-signal.SIGTERM, -signal.SIGKILL) and not w3.alive
        # reset: the idle worker ends now, a busy one when its invocation returns
        pid4 = _call(pool, spec)
        w4 = pool.workers("Fn")[0]
        mark, release, answers = tmp_path / "busy", tmp_path / "release", []
        busy = threading.Thread(target=lambda: answers.append(
            _call(pool, spec, {"mark": str(mark), "release": str(release)})))
        busy.start()
        deadline = time.monotonic() + 60
        while not mark.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        pid5 = _call(pool, spec)  # w4 is busy: another worker
        w5 = [w for w in pool.workers("Fn") if w is not w4][0]
        pool.reset()
        assert w5.proc.returncode == -signal.SIGTERM and pool.instances("Fn") == 1  # w4: stale
        release.touch()
        busy.join()
        assert answers == [pid4]
        assert w4.proc.wait(30) == -signal.SIGTERM and pool.instances("Fn") == 0
        pid6 = _call(pool, spec)
        assert pid6 not in (pid4, pid5)
        last = pool.workers("Fn")[0]
    finally:
        server = pool.fork_server()
        pool.close()
    # close: every worker ended and waited for, and the fork server too
    assert last.proc.returncode == -signal.SIGTERM and _gone(pid6)
    if fork == "1":
        assert server.proc.returncode == 0
    else:
        assert server is None


def test_which_differences_make_a_worker_start_fresh():
    server = {"HOME": "/root", "PATH": "/bin", "LANG": "C.UTF-8", "PYTHONUNBUFFERED": "1"}
    read = ["HOME", "PYNAMODB_CONFIG"]
    same = dict(server, TABLE="t", MINE="x", PATH="/usr/bin")  # read later, by the worker itself
    assert differing(server, read, same) == []
    assert differing(server, read, dict(same, PYNAMODB_CONFIG="/x.py", HOME="/h")) == ["HOME", "PYNAMODB_CONFIG"]
    assert differing(server, read, dict(same, LC_ALL="C", PYTHONPATH="/p")) == ["LC_ALL", "PYTHONPATH"]
    assert differing(server, read, {k: v for k, v in same.items() if k != "LANG"}) == ["LANG"]
    assert differing(server, [EVERY_NAME], same) == ["MINE", "PATH", "TABLE"]


@pytest.mark.parametrize("fork", ["1", "0"])
def test_a_worker_whose_process_ended_mid_invocation_is_not_handed_out_again(tmp_path, monkeypatch, fork):
    """review_f: a worker whose handler ended its process: the pool sees its stdout end (EOF) while
    the process is still exiting — its fds are closed before it becomes a zombie, so ``poll()`` may
    still answer None (the race the crash check above allows for with ``(3|None)``). The pool then
    put it back as idle and the next invocation of the function, handed that worker, failed too
    ("the worker process exited") — on a loaded machine, seen once in three tries. ``poll()`` is made
    to lag here, deterministically: a worker whose stdout ended is dead whatever ``poll()`` says."""
    monkeypatch.setenv("LAKEQ_WORKER_FORK", fork)
    spec = _spec(tmp_path, "Fn", LIFE)
    pool = ProcessPool(LAYERS)
    try:
        pid = _call(pool, spec)
        w = pool.workers("Fn")[0]
        real, lagging = w.proc.poll, {"left": 0}

        def slow_poll():  # the exiting process not a zombie yet for its next few polls
            if lagging["left"] > 0:
                lagging["left"] -= 1
                return None
            return real()
        w.proc.poll = slow_poll
        lagging["left"] = 10
        with pytest.raises(HandlerError, match=r"the worker process exited"):
            _call(pool, spec, {"exit": 3})
        pid2 = _call(pool, spec)
        assert pid2 != pid
    finally:
        pool.close()
