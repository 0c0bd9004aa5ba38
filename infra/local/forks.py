"""Worker processes forked from a server that has imported the third-party modules (issue 31).

A fresh ``python -m infra.local.worker`` spends ~0.6 CPU-s importing boto3/botocore, pynamodb and
powertools before its function's module; the e2e lane starts ~110 of them. The pool
(:class:`infra.local.worker.ProcessPool`) instead asks one server per pool,
``python -m infra.local.worker --fork-server`` (started like a worker: same interpreter, flags, cwd and
``-m`` module, the stack's environment), which has imported :data:`PRELOAD` (third-party only:
nothing of lakeq, of the layers or of the functions), to fork each worker. The child then becomes
what a fresh worker is before its first line of lakeq: its own session, the fds the pool handed over
as its stdin / stdout / stderr, the pool's cwd, exactly its function's environment in ``os.environ``
(and the C environment), ``sys.argv`` as a fresh worker's, then :func:`infra.local.worker.worker_main`
from the same ``__main__`` (so ``sys.path`` is a fresh worker's, and the handler's module, lakeq and
the layers are imported in the child, each worker its own module state).

What a fork cannot give, and how the pool keeps it right:

- A preloaded module that read the environment *at import* saw the server's. The server records every
  ``os.environ`` read made while it preloads (names; any iteration or copy of the environment counts as
  reading every name) and tells the pool; so does the interpreter's start-up for
  :data:`STARTUP_PREFIXES`. A worker whose environment differs from the server's on any of those is
  started fresh (the old way, ``Worker.forked`` False). Read at 9869fb1: ``AWS_EXECUTION_ENV``,
  ``AWS_LAMBDA_INITIALIZATION_TYPE``, ``HOME``, ``POWERTOOLS_DEBUG``, ``POWERTOOLS_TRACE_MIDDLEWARES``,
  ``PYNAMODB_CONFIG`` (none of them set by the template). ``aws_xray_sdk.core`` is *not* preloaded:
  its import builds the X-Ray recorder, a botocore client made from the environment (region,
  endpoint, proxies: it iterates the whole environment), an object, not code.
- Only the forking thread survives a fork: the server refuses to serve (every worker then starts
  fresh) if a preloaded import started a thread.
- ``random``'s global generator is reseeded in each child (the module's own ``register_at_fork``);
  the string hash seed is the server's in every child (a fresh interpreter draws its own).
- The child is the server's, not the pool's: the server reaps it and writes its exit code to a pipe
  the pool holds; the pool sees it exit and signals it through a pidfd the server opened before it
  could reap it (no pid reuse race). Its CPU reaches the pool's process through the server's, when
  the pool reaps the server (``close``).

Why not ``multiprocessing``'s ``forkserver`` context (``set_forkserver_preload``): its server and
children take the *caller's* ``sys.path``, ``sys.argv`` and cwd (pytest's rootdir entries in a test
process) and the environment the caller had when the server started, one per process for every
caller (no ``close`` of its own); a child gets ``/dev/null`` as stdin and ends with ``os._exit``
(no ``atexit``); the pipes would go through its pickling of fds (``DupFd``); a caller run as a script
file has its ``__main__`` re-imported in every child; and it starts a resource tracker process too.
Here the server is started as a worker is, and the child continues in the worker's own ``__main__``.

``LAKEQ_WORKER_FORK=0`` turns it off (every worker ``python -m infra.local.worker``, as before); so
does a platform without ``os.pidfd_open`` / ``socket.send_fds`` (Linux 5.3+).
"""
from __future__ import annotations

import importlib
import io
import json
import logging
import os
import select
import signal
import socket
import subprocess
import sys
import threading
from typing import Any, Mapping

log = logging.getLogger("lakeq.local.forks")

ENV_SWITCH = "LAKEQ_WORKER_FORK"

# what every worker imports before its function's own code (infra/local/worker.py, the interceptor,
# lakeq.common.obs, the stores): third-party only. Measured per function (-X importtime of a worker
# of each of the template's 21): these and what they import are ~0.65 CPU-s of a worker's start
PRELOAD = (
    "yaml",
    "boto3",
    "botocore.session",
    "botocore.client",
    "botocore.config",
    "botocore.exceptions",
    "pynamodb.models",
    "pynamodb.connection",
    "pynamodb.transactions",
    "pynamodb.indexes",
    "pynamodb.attributes",
    "pynamodb.exceptions",
    "aws_lambda_powertools",
    "aws_lambda_powertools.logging",
    "aws_lambda_powertools.metrics",
    "aws_lambda_powertools.tracing",
    "aws_lambda_powertools.middleware_factory",
    "aws_lambda_powertools.event_handler",
    "aws_lambda_powertools.utilities.data_classes",
    "aws_lambda_powertools.utilities.typing",
)

# read by the interpreter (or libc, OpenSSL) as it starts, before any Python code could record it
STARTUP_PREFIXES = ("PYTHON", "LC_", "LANG", "TZ", "LD_", "OPENSSL_", "SSL_CERT_")
EVERY_NAME = "*"  # the environment was iterated or copied: every name was read
UNKNOWN_EXIT = 255  # the server had gone before it could reap the worker: its exit code is lost
_CHUNK = 32768  # one SOCK_SEQPACKET record of a request's payload


def enabled(environ: Mapping[str, str] | None = None) -> bool:
    env = os.environ if environ is None else environ
    return (env.get(ENV_SWITCH, "1") != "0" and sys.platform.startswith("linux")
            and hasattr(os, "pidfd_open") and hasattr(signal, "pidfd_send_signal")
            and hasattr(socket, "send_fds"))


def differing(server_env: Mapping[str, str], read: list[str], env: Mapping[str, str]) -> list[str]:
    """The names on which ``env`` differs from the server's environment among those read while the
    interpreter started (:data:`STARTUP_PREFIXES`) or a preloaded module was imported (``read``)."""
    both = set(env) | set(server_env)
    if EVERY_NAME in read:
        names = both
    else:
        names = set(read) | {k for k in both if k.startswith(STARTUP_PREFIXES)}
    return sorted(k for k in names if env.get(k) != server_env.get(k))


def _readable(fd: int, timeout: float | None) -> bool:
    p = select.poll()  # not select(): the stack holds more than FD_SETSIZE fds at times
    p.register(fd, select.POLLIN)
    return bool(p.poll(None if timeout is None else max(0, int(timeout * 1000))))


# ------------------------------------------------------------------------------- the pool's side


class ForkedProcess:
    """The part of :class:`subprocess.Popen` the pool uses (``pid``, ``stdin``, ``stdout``,
    ``returncode``, ``poll``, ``wait``, ``terminate``, ``kill``), for a worker the server forked."""

    def __init__(self, pid: int, pidfd: int, stdin_fd: int, stdout_fd: int, status_fd: int):
        self.pid = pid
        self.returncode: int | None = None
        self._pidfd: int | None = pidfd
        self._status: int | None = status_fd
        self._lock = threading.Lock()
        enc = io.text_encoding(None)  # what Popen(text=True) uses
        self.stdin = io.open(stdin_fd, "w", buffering=1, encoding=enc)
        self.stdout = io.open(stdout_fd, "r", encoding=enc)

    def _exited(self) -> int:
        """The exit code, once the process has exited (its pidfd readable): the server writes it to
        the status pipe as soon as it has reaped the process."""
        code = UNKNOWN_EXIT
        if self._status is not None:
            if _readable(self._status, 10.0):
                data = os.read(self._status, 64)
                if data:
                    code = int(data)
            os.close(self._status)
            self._status = None
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None
        self.returncode = code
        return code

    def poll(self) -> int | None:
        if not self._lock.acquire(blocking=False):  # another thread waits for it (as Popen.poll)
            return self.returncode
        try:
            if self.returncode is None and self._pidfd is not None and _readable(self._pidfd, 0):
                self._exited()
            return self.returncode
        finally:
            self._lock.release()

    def wait(self, timeout: float | None = None) -> int:
        with self._lock:
            if self.returncode is None and self._pidfd is not None:
                if not _readable(self._pidfd, timeout):
                    raise subprocess.TimeoutExpired(f"worker {self.pid}", timeout)
                self._exited()
            return self.returncode  # type: ignore[return-value]

    def send_signal(self, sig: int) -> None:
        with self._lock:
            if self.returncode is None and self._pidfd is not None:
                try:
                    signal.pidfd_send_signal(self._pidfd, sig)
                except ProcessLookupError:
                    pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def __del__(self) -> None:
        for fd in (self._pidfd, self._status):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass


class ForkServer:
    """One ``python -m infra.local.worker --fork-server`` and the pool's end of its socket."""

    def __init__(self, env: Mapping[str, str], cwd: str, start_timeout: float = 120.0):
        self.env = dict(env)
        self.cwd = cwd
        self.start_timeout = start_timeout
        self.broken: str | None = None  # why it serves no more (every worker then starts fresh)
        self.read_at_import: list[str] = []
        self._hello: dict | None = None
        self._lock = threading.Lock()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "infra.local.worker", "--fork-server", str(theirs.fileno())],
                pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=None, env=self.env, cwd=cwd,
                start_new_session=True,  # Ctrl-C reaches the stack, which closes the pool
            )
        finally:
            theirs.close()
        self._sock = ours

    def _ready(self) -> bool:  # under self._lock
        if self.broken:
            return False
        if self._hello is None:
            try:
                self._sock.settimeout(self.start_timeout)
                msg = self._sock.recv(1 << 20)
            except OSError as exc:
                msg = b""
                self.broken = f"no answer from the fork server: {exc!r}"
            finally:
                self._sock.settimeout(None)
            if not msg:
                self.broken = self.broken or f"the fork server exited ({self.proc.poll()})"
            else:
                self._hello = json.loads(msg)
                self.read_at_import = list(self._hello.get("read") or [])
                if self._hello.get("error"):
                    self.broken = self._hello["error"]
            if self.broken:
                log.warning("workers start without the fork server: %s", self.broken)
        return not self.broken

    def ready(self) -> bool:
        """Wait for the server to have preloaded (False: it cannot serve)."""
        with self._lock:
            return self._ready()

    def differs(self, env: Mapping[str, str]) -> list[str]:
        return differing(self.env, self.read_at_import, env)

    def start(self, argv: list[str], env: Mapping[str, str], cwd: str) -> ForkedProcess | None:
        """A worker forked with ``argv`` / ``env`` / ``cwd``; None when it must start fresh."""
        with self._lock:
            if not self._ready():
                return None
            differ = self.differs(env)
            if differ:
                log.info("a worker starts fresh: %s differ from the fork server's environment",
                         ", ".join(differ))
                return None
            try:
                return self._fork(argv, env, cwd)
            except (OSError, ValueError) as exc:
                self.broken = f"the fork server failed: {exc!r}"
                log.warning("workers start without the fork server: %s", self.broken)
                return None

    def _fork(self, argv: list[str], env: Mapping[str, str], cwd: str) -> ForkedProcess:
        payload = json.dumps({"argv": argv, "env": dict(env), "cwd": cwd}).encode()
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        st_r, st_w = os.pipe()
        ok = False
        try:
            socket.send_fds(self._sock, [json.dumps({"size": len(payload)}).encode()],
                            [in_r, out_w, 2, st_w])  # fd 2: what Popen(stderr=None) would give
            for i in range(0, len(payload), _CHUNK):
                self._sock.send(payload[i:i + _CHUNK])
            self._sock.settimeout(60.0)
            try:
                msg, fds, _, _ = socket.recv_fds(self._sock, 4096, 1)
            finally:
                self._sock.settimeout(None)
            if not msg:
                raise OSError(f"the fork server exited ({self.proc.poll()})")
            reply = json.loads(msg)
            if reply.get("error") or len(fds) != 1:
                for fd in fds:
                    os.close(fd)
                raise OSError(reply.get("error") or "no pidfd in the fork server's reply")
            ok = True
            return ForkedProcess(reply["pid"], fds[0], in_w, out_r, st_r)
        finally:
            for fd in (in_r, out_w, st_w):
                os.close(fd)
            if not ok:
                for fd in (in_w, out_r, st_r):
                    os.close(fd)

    def close(self, timeout: float = 10.0) -> None:
        """End the server (its workers are the pool's to end first: they outlive it otherwise) and
        reap it."""
        with self._lock:
            self.broken = self.broken or "closed"
            try:
                self._sock.close()
            except OSError:
                pass
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# ----------------------------------------------------------------------------- the server's side


def _preload() -> dict[str, Any]:
    """Import :data:`PRELOAD`, recording every environment read made meanwhile."""
    read: set[str] = set()
    cls = os._Environ  # type: ignore[attr-defined]
    getitem, iterate, copy = cls.__getitem__, cls.__iter__, cls.copy

    def _getitem(self: Any, key: Any) -> Any:
        read.add(key if isinstance(key, str) else os.fsdecode(key))
        return getitem(self, key)

    def _iterate(self: Any) -> Any:
        read.add(EVERY_NAME)
        return iterate(self)

    def _copy(self: Any) -> Any:
        read.add(EVERY_NAME)
        return copy(self)

    missing = []
    cls.__getitem__, cls.__iter__, cls.copy = _getitem, _iterate, _copy
    try:
        for name in PRELOAD:
            try:
                importlib.import_module(name)
            except ImportError:
                missing.append(name)
    finally:
        cls.__getitem__, cls.__iter__, cls.copy = getitem, iterate, copy
    try:  # native threads too (an extension's): only the forking thread survives a fork
        threads = len(os.listdir("/proc/self/task"))
    except OSError:
        threads = threading.active_count()
    return {"read": sorted(read), "missing": missing,
            "error": f"a preloaded import started a thread ({threads} running)" if threads != 1 else None}


def _recv_request(sock: socket.socket) -> tuple[dict, list[int]] | None:
    head, fds, _, _ = socket.recv_fds(sock, 4096, 4)
    if not head:
        return None
    size = json.loads(head)["size"]
    parts, got = [], 0
    while got < size:
        part = sock.recv(_CHUNK)
        if not part:
            return None
        parts.append(part)
        got += len(part)
    return json.loads(b"".join(parts)), fds


def _reap(status: dict[int, int]) -> None:
    while True:
        try:
            pid, st = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        fd = status.pop(pid, None)
        if fd is not None:
            try:
                os.write(fd, str(os.waitstatus_to_exitcode(st)).encode())
            except OSError:
                pass
            os.close(fd)


def _become_worker(req: dict, fds: list[int]) -> list[str]:  # pragma: no cover - in the child
    """In the forked child: what a fresh ``python -m infra.local.worker <argv>`` would be."""
    os.setsid()
    stdin_fd, stdout_fd, stderr_fd, status_fd = fds
    os.close(status_fd)
    for fd, target in ((stdin_fd, 0), (stdout_fd, 1), (stderr_fd, 2)):
        os.dup2(fd, target)
    for fd in (stdin_fd, stdout_fd, stderr_fd):
        os.close(fd)
    os.chdir(req["cwd"])
    os.environ.clear()  # unsetenv / putenv too: the C environment and any subprocess see it
    os.environ.update(req["env"])
    sys.argv[1:] = list(req["argv"])
    return list(req["argv"])


def serve(sock_fd: int) -> list[str] | None:  # pragma: no cover - runs in the server process
    """The server's loop: returns in each forked child (with the worker's argv), and in the server
    when the pool's end of the socket closes (None)."""
    sock = socket.socket(fileno=sock_fd)
    hello = _preload()
    sock.send(json.dumps(hello).encode())
    if hello["error"]:
        return None
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    status: dict[int, int] = {}  # a live child's pid -> the write end of its status pipe
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLIN)
    poller.register(wake_r, select.POLLIN)
    while True:
        for fd, _ in poller.poll():
            if fd == wake_r:
                try:
                    while os.read(wake_r, 512):
                        pass
                except BlockingIOError:
                    pass
                _reap(status)
                continue
            got = _recv_request(sock)
            if got is None:  # the pool closed (or its process died): the workers go on their own
                return None
            req, fds = got
            sys.stdout.flush()
            sys.stderr.flush()
            try:
                pid = os.fork()
            except OSError as exc:
                for f in fds:
                    os.close(f)
                sock.send(json.dumps({"error": f"fork: {exc!r}"}).encode())
                continue
            if pid == 0:
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                for f in (wake_r, wake_w, *status.values()):
                    os.close(f)
                sock.close()
                return _become_worker(req, fds)
            pidfd = os.pidfd_open(pid)  # before anything here could reap it: never another's pid
            for f in fds[:3]:
                os.close(f)
            status[pid] = fds[3]
            try:
                socket.send_fds(sock, [json.dumps({"pid": pid}).encode()], [pidfd])
            finally:
                os.close(pidfd)
