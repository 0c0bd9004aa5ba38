"""Lambda execution environments as worker processes (what the local stack uses).

Each worker is ``python -m infra.local.worker`` running ONE function's handler, one invocation at
a time, like a Lambda execution environment: its own interpreter, so module-level and class-level
state (powertools keeps the current event on ``BaseRouter`` as a class attribute) is never shared
by concurrent invocations. :class:`ProcessPool` keeps warm workers per function and starts another
when all are busy.

With ``rules`` (an :class:`infra.local.aws_rules.AwsRules`), each worker is started with its
function's logical id and role in its environment and acts as that function (IAM and DynamoDB's
limits checked on every AWS call it makes).

Workers are forked from a server that has imported the third-party modules every worker imports
(``infra/local/forks.py``: ~0.6 CPU-s less per worker; each child still imports lakeq, the layers
and its function itself, in its own session, with exactly its function's environment);
``LAKEQ_WORKER_FORK=0`` starts each as ``python -m infra.local.worker`` instead, and so does the pool
for a worker whose environment differs from the server's where a preloaded import read it.

Protocol: one JSON line per invocation on the worker's stdin ``{"event", "context"}``; one JSON
line back on a private copy of its stdout ``{"ok": true, "result"}`` or ``{"ok": false, "error",
"trace"}``; the handler's own prints and logs go to stderr (the stack's log).
"""
from __future__ import annotations

import json
import logging
import os
import select
import subprocess
import sys
import threading
import time
import traceback
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from infra.local.forks import ForkServer
from infra.local.forks import enabled as forks_enabled

log = logging.getLogger("lakeq.local.worker")


class HandlerError(RuntimeError):
    """The handler raised (or its environment died); ``trace`` is the worker's traceback."""

    def __init__(self, message: str, trace: str = ""):
        super().__init__(message)
        self.trace = trace


class _Context:
    def __init__(self, d: dict):
        self.__dict__.update({k: v for k, v in d.items() if k != "remaining_ms"})
        self._deadline = time.monotonic() + d.get("remaining_ms", 30000) / 1000

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


def _context_dict(ctx: Any) -> dict:
    return {
        "function_name": ctx.function_name,
        "function_version": getattr(ctx, "function_version", "$LATEST"),
        "memory_limit_in_mb": ctx.memory_limit_in_mb,
        "invoked_function_arn": ctx.invoked_function_arn,
        "aws_request_id": ctx.aws_request_id,
        "log_group_name": getattr(ctx, "log_group_name", ""),
        "log_stream_name": getattr(ctx, "log_stream_name", ""),
        "identity": None,
        "client_context": None,
        "remaining_ms": ctx.get_remaining_time_in_millis(),
    }


# ----------------------------------------------------------------------------- the worker itself


def worker_main(argv: list[str]) -> int:  # pragma: no cover - runs in the child process
    code_uri, handler = argv[0], argv[1]
    layers = argv[2:]
    # this process is ONE function ($LAKEQ_LOCAL_FUNCTION, its logical id) for its whole life: its
    # AWS calls are made as it, under its role and DynamoDB's limits (infra/local/aws_rules.py)
    from infra.local import aws_rules

    aws_rules.install_from_env()
    out = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
    os.dup2(2, 1)  # the handler's prints go to stderr
    from infra.local.emf import Tee

    sys.stdout = tee = Tee(sys.stderr)  # ... and its EMF lines back with the reply (infra/local/emf.py)
    sys.path[:] = [p for p in sys.path if p not in ("", os.getcwd())]  # not on Lambda's path
    for d in layers:
        if d not in sys.path:
            sys.path.append(d)
    sys.path.insert(0, code_uri)
    module_path, _, func_name = handler.rpartition(".")
    fn = None
    load_error = None
    try:
        import importlib

        fn = getattr(importlib.import_module(module_path), func_name)
    except BaseException as exc:  # noqa: BLE001
        load_error = (f"cannot load {handler} from {code_uri}: {exc!r}", traceback.format_exc())
    out.write(json.dumps({"ready": load_error is None,
                          "error": load_error[0] if load_error else None}) + "\n")
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        if load_error:
            reply = {"ok": False, "error": load_error[0], "trace": load_error[1]}
        else:
            try:
                result = fn(req["event"], _Context(req["context"]))
                reply = {"ok": True, "result": result}
            except Exception as exc:  # noqa: BLE001
                reply = {"ok": False, "error": repr(exc), "trace": traceback.format_exc()}
            sys.stdout.flush()
            reply["emf"] = tee.take()
        try:
            text = json.dumps(reply, default=str)
        except (TypeError, ValueError) as exc:
            text = json.dumps({"ok": False, "error": f"result is not JSON: {exc!r}", "trace": ""})
        out.write(text + "\n")
        out.flush()
    return 0


# ------------------------------------------------------------------------------------ the pool


REPO = Path(__file__).resolve().parents[2]


class Worker:
    def __init__(self, spec: Any, layer_dirs: list[Path], env: dict[str, str],
                 forks: ForkServer | None = None):
        self.spec = spec
        argv = [str(spec.code_uri), spec.handler, *[str(d) for d in layer_dirs]]
        # forked by the pool's server when it can (infra/local/forks.py), else a fresh interpreter
        forked = forks.start(argv, env, str(REPO)) if forks is not None else None
        self.forked = forked is not None
        self.proc: Any = forked or subprocess.Popen(
            [sys.executable, "-m", "infra.local.worker", *argv],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None, env=env, text=True,
            bufsize=1, cwd=str(REPO),
            start_new_session=True,  # Ctrl-C reaches the stack, which stops its workers
        )
        self.ready: bool | None = None
        self.load_error: str | None = None
        # its stdout ended: the process is gone or going, whatever poll() says yet — its fds close
        # before it is a zombie, and a worker put back as idle in that window failed the next
        # invocation handed to it (review_f)
        self.ended = False

    def _readline(self, timeout: float | None) -> str:
        assert self.proc.stdout is not None
        if timeout is not None:
            r, _, _ = select.select([self.proc.stdout], [], [], max(0.0, timeout))
            if not r:
                raise TimeoutError
        line = self.proc.stdout.readline()
        if not line:
            self.ended = True
            raise HandlerError(f"{self.spec.logical_id}: the worker process exited "
                               f"({self.proc.poll()})")
        return line

    def wait_ready(self, timeout: float = 60.0) -> None:
        if self.ready is None:
            try:
                hello = json.loads(self._readline(timeout))
            except TimeoutError:
                raise HandlerError(f"{self.spec.logical_id}: worker did not start in {timeout}s")
            self.ready, self.load_error = hello["ready"], hello.get("error")

    def invoke(self, event: dict, ctx: Any) -> Any:
        self.wait_ready()
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"event": event, "context": _context_dict(ctx)}) + "\n")
        self.proc.stdin.flush()
        try:
            reply = json.loads(self._readline(self.spec.timeout + 5))
        except TimeoutError:
            self.kill()
            raise HandlerError(f"{self.spec.logical_id}: timed out after {self.spec.timeout}s")
        if reply.get("emf"):  # what CloudWatch Logs would turn into metrics
            from infra.local.emf import COLLECTED
            COLLECTED.add_text("\n".join(reply["emf"]))
        if not reply.get("ok"):
            raise HandlerError(f"{self.spec.logical_id}: {reply.get('error')}", reply.get("trace", ""))
        return reply.get("result")

    @property
    def alive(self) -> bool:
        return not self.ended and self.proc.poll() is None

    def terminate(self) -> None:
        """Ask the worker to go (stdin closed, SIGTERM) without waiting for it."""
        if self.proc.poll() is None:
            try:
                if self.proc.stdin:
                    self.proc.stdin.close()
            except OSError:
                pass
            self.proc.terminate()

    def reap(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for a terminated worker, then kill it."""
        try:
            self.proc.wait(max(0.0, timeout))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.terminate()
            self.reap(5)


class ProcessPool:
    """Same interface as :class:`~infra.local.handlers.HandlerCache`, with worker processes.

    Workers inherit ``os.environ`` at the time they start, plus the function's own resolved
    environment from the template. They are forked by a server the pool starts on its first worker
    and ends in :meth:`close` (``use_forks``; by default unless ``LAKEQ_WORKER_FORK=0``).
    """

    def __init__(self, layer_dirs: list[Path] | None = None, max_per_function: int = 16,
                 rules: Any = None, use_forks: bool | None = None):
        self.layer_dirs = list(layer_dirs or [])
        # an infra.local.aws_rules.AwsRules: each worker gets its function's logical id and role
        self.rules = rules
        self.max_per_function = max_per_function
        self._idle: dict[str, list[Worker]] = {}
        self._all: dict[str, list[Worker]] = {}
        self._lock = threading.Condition()
        self._closed = False
        self._stale: set[Worker] = set()  # busy at a reset: ended when their invocation returns
        self.forks_enabled = forks_enabled() if use_forks is None else use_forks
        self._forks: ForkServer | None = None

    def fork_server(self) -> ForkServer | None:
        """The pool's fork server, started on first use (None when workers start fresh)."""
        with self._lock:  # re-entrant: _spawn holds it; preload and the pumps' threads may race
            if self.forks_enabled and self._forks is None and not self._closed:
                from infra.local import aws_rules

                env = dict(os.environ)
                env.setdefault("PYTHONUNBUFFERED", "1")
                for name in (aws_rules.ENV_FUNCTION, aws_rules.ENV_RULES):  # a worker's own
                    env.pop(name, None)
                self._forks = ForkServer(env, str(REPO))
            return self._forks

    def _spawn(self, spec: Any) -> Worker:
        env = dict(os.environ)
        env.update(spec.environment)
        env.setdefault("PYTHONUNBUFFERED", "1")
        if self.rules is not None:
            env.update(self.rules.worker_env(spec.logical_id))
        return Worker(spec, self.layer_dirs, env, self.fork_server())

    def preload(self, specs: list[Any]) -> None:
        """Start one worker per function now (in parallel) and report load errors."""
        server = self.fork_server()
        if server is not None:
            server.ready()  # its preload, before the pool's lock is taken: each spawn is then a fork
        started = []
        with self._lock:
            for spec in specs:
                if not self._all.get(spec.logical_id):
                    w = self._spawn(spec)
                    self._all.setdefault(spec.logical_id, []).append(w)
                    self._idle.setdefault(spec.logical_id, []).append(w)
                    started.append(w)
        for w in started:
            try:
                w.wait_ready()
            except HandlerError as exc:
                log.warning("%s", exc)
            if w.load_error:
                log.warning("%s: %s", w.spec.logical_id, w.load_error)

    @contextmanager
    def instance(self, spec: Any) -> Iterator[Callable[[dict, Any], Any]]:
        key = spec.logical_id
        with self._lock:
            while True:
                if self._closed:
                    raise HandlerError("the local stack is stopping")
                idle = self._idle.setdefault(key, [])
                while idle and not idle[-1].alive:
                    dead = idle.pop()
                    self._all[key].remove(dead)
                if idle:
                    worker = idle.pop()
                    break
                if len(self._all.get(key, [])) < self.max_per_function:
                    worker = self._spawn(spec)
                    self._all.setdefault(key, []).append(worker)
                    break
                self._lock.wait(1.0)
        try:
            yield worker.invoke
        finally:
            with self._lock:
                stale = worker in self._stale
                self._stale.discard(worker)
                if worker.alive and not stale:
                    self._idle[key].append(worker)
                elif worker in self._all.get(key, []):
                    self._all[key].remove(worker)
                self._lock.notify_all()
            if stale:
                worker.kill()

    def get(self, spec: Any) -> Callable:
        with self.instance(spec) as fn:
            return fn

    def instances(self, logical_id: str) -> int:
        return len(self._all.get(logical_id, []))

    def workers(self, logical_id: str) -> list[Worker]:
        with self._lock:
            return list(self._all.get(logical_id, []))

    def reset(self) -> None:
        """Every warm environment goes (the local stack's reset, infra/local/reset.py): idle workers
        are ended now, busy ones when their invocation returns; the next invocation of a function
        starts a fresh worker, with none of the old module-level state."""
        with self._lock:
            idle = [w for ws in self._idle.values() for w in ws]
            self._stale.update(w for ws in self._all.values() for w in ws if w not in idle)
            self._idle.clear()
            for ws in self._all.values():
                ws[:] = [w for w in ws if w in self._stale]
            self._lock.notify_all()
        for w in idle:
            w.terminate()
        deadline = time.monotonic() + 5
        for w in idle:
            w.reap(deadline - time.monotonic())

    def close(self) -> None:
        with self._lock:
            self._closed = True
            workers = [w for ws in self._all.values() for w in ws]
            self._all.clear()
            self._idle.clear()
            self._lock.notify_all()
        # every worker is asked at once, then waited for with one deadline: one at a time, a stop
        # took up to 5 s per function (there are twenty) on a loaded machine
        for w in workers:
            w.terminate()
        deadline = time.monotonic() + 5
        for w in workers:
            w.reap(deadline - time.monotonic())
        if self._forks is not None:  # after its workers: it reports their exits
            self._forks.close()


def _main(argv: list[str]) -> int:  # pragma: no cover - the worker's (or the fork server's) process
    if argv[:1] == ["--fork-server"]:
        from infra.local import forks as _forks

        job = _forks.serve(int(argv[1]))  # returns in each forked worker, with its argv
        if job is None:
            return 0
        argv = job
    return worker_main(argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(_main(sys.argv[1:]))
