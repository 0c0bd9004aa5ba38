"""End-to-end fixtures: a real local stack (``python -m infra.local``) in a subprocess.

``stack`` (session) starts ``python -m infra.local --port <free port>`` with ``LAKEQ_ADMIN_KEY``
set, waits (``START_TIMEOUT``, 180 s at most: a machine whose cores other work keeps busy starts
the stack's processes slowly) until it prints its URL and — when ``functions/admin/app.py`` exists —
until ``GET /v1/health`` answers 200 (a port another process took between the choice and the bind:
started again on another port), yields a :class:`LocalStack` (``.url``, ``.admin_key``,
``.drain()``, ``.call()``, ``.output``), and at the end sends SIGTERM and asserts a clean exit (code 0).

Use it as ``def test_x(stack): requests.get(stack.url + "/v1/health")``; all tests here are
marked ``e2e``.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import requests

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT = float(os.environ.get("LAKEQ_E2E_START_TIMEOUT") or 180)
STOP_TIMEOUT = 60.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class LocalStack:
    """A ``python -m infra.local`` child process and what it printed."""

    proc: subprocess.Popen
    port: int
    admin_key: str
    lines: list[str] = field(default_factory=list)
    err_lines: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def printed(self, text: str, timeout: float = 60.0) -> bool:
        """Whether the stack printed ``text``, waiting up to ``timeout`` s: the stack answers health
        checks before it has printed all of its banner, and the pump thread reads its lines later
        still on a loaded machine (a CI run read the banner without its last line)."""
        deadline = time.monotonic() + timeout
        while text not in self.output:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    @property
    def ws_url(self) -> str:
        """The WebSocket wake-up URL the stack printed (``ws://127.0.0.1:<its own port>/ws``)."""
        import re

        self.printed("WebSocket wake-ups: ws://")
        return re.search(r"WebSocket wake-ups: (ws://\S+)", self.output).group(1)

    @property
    def stderr(self) -> str:
        return "".join(self.err_lines)

    def drain(self, timeout: float = 30.0) -> int:
        """Run the streams pump until caught up; returns the records delivered."""
        r = requests.post(f"{self.url}/_local/streams/drain", params={"timeout": timeout},
                          timeout=timeout + 10)
        r.raise_for_status()
        body = r.json()
        assert body["drained"], f"streams not drained within {timeout}s: {body}"
        return body["records"]

    def admin_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.admin_key}"}

    def call(self, method: str, path: str, key: str | None = None, status: int = 200,
             timeout: float = 30.0, **kw):
        """One request to the stack as a client sends it: ``key`` is the API key sent as the bearer
        token (None: the admin key); asserts the answer's status is ``status``; returns its JSON
        body (None when empty). ``kw`` goes to ``requests.request`` (``json=``, ``params=``)."""
        headers = {"Authorization": f"Bearer {self.admin_key if key is None else key}"}
        r = requests.request(method, self.url + path, headers=headers, timeout=timeout, **kw)
        assert r.status_code == status, (method, path, r.status_code, r.text)
        return r.json() if r.content else None

    def stop(self, timeout: float = STOP_TIMEOUT) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                raise AssertionError("local stack did not stop within "
                                     f"{timeout}s of SIGTERM\n{self.stderr[-3000:]}") from None
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL to the stack's whole process group (its moto server and workers too: killing
        the parent alone left them running and loading the machine after a failed test)."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()


def _pump(stream, sink: list[str]) -> None:
    for line in iter(stream.readline, ""):
        sink.append(line)
    stream.close()


class PortTaken(RuntimeError):
    """The stack exited at start because its port was taken meanwhile."""


def start_stack(admin_key: str = "e2e-admin-key", port: int | None = None,
                wait_health: bool | None = None, extra_env: dict | None = None,
                args: list[str] | None = None) -> LocalStack:
    """A started stack; on a free port chosen here unless ``port`` is given. ``free_port`` closes
    its socket before the stack binds it, so another process (other tests' stacks, anything on the
    machine) may take it meanwhile: then the stack is started again on another port."""
    for attempt in range(3):
        try:
            return _start_stack(admin_key, port or free_port(), wait_health, extra_env, args)
        except PortTaken:
            if port is not None or attempt == 2:
                raise
    raise AssertionError("unreachable")


def _start_stack(admin_key: str, port: int, wait_health: bool | None, extra_env: dict | None,
                 args: list[str] | None) -> LocalStack:
    env = dict(os.environ)
    for var in ("AWS_ENDPOINT_URL", "AWS_PROFILE"):
        env.pop(var, None)
    env.update({"LAKEQ_ADMIN_KEY": admin_key, "LAKEQ_PORT": str(port), "PYTHONUNBUFFERED": "1"})
    env.update(extra_env or {})
    proc = subprocess.Popen(
        [sys.executable, "-m", "infra.local", "--port", str(port), *(args or [])],
        cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, bufsize=1,
        start_new_session=True,  # its own process group: kill() reaches its children
    )
    st = LocalStack(proc, port, admin_key)
    threading.Thread(target=_pump, args=(proc.stdout, st.lines), daemon=True).start()
    threading.Thread(target=_pump, args=(proc.stderr, st.err_lines), daemon=True).start()
    if wait_health is None:
        wait_health = (REPO / "functions" / "admin" / "app.py").is_file()
    deadline = time.monotonic() + START_TIMEOUT
    try:
        while st.url not in st.output:
            if proc.poll() is not None:
                time.sleep(0.2)  # its last lines
                err = RuntimeError if "in use" not in st.stderr else PortTaken
                raise err(f"local stack exited with {proc.returncode}:\n{st.stderr[-3000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"local stack printed no URL within {START_TIMEOUT}s:\n"
                                   f"{st.output}\n{st.stderr[-3000:]}")
            time.sleep(0.1)
        while wait_health:
            try:
                if requests.get(f"{st.url}/v1/health", timeout=5).status_code == 200:
                    break
            except requests.RequestException:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"GET /v1/health never answered 200:\n{st.stderr[-3000:]}")
            time.sleep(0.2)
    except BaseException:
        st.stop()
        raise
    return st


@pytest.fixture(scope="session")
def stack():
    st = start_stack(admin_key=os.environ.get("LAKEQ_E2E_ADMIN_KEY", "e2e-admin-key"))
    yield st
    code = st.stop()
    assert code == 0, f"local stack exit code {code}\n{st.stderr[-3000:]}"


@pytest.fixture(scope="session")
def start_local_stack():
    """The :func:`start_stack` function, for tests that need their own process (stop it!)."""
    return start_stack


def pytest_collection_modifyitems(items):
    here = Path(__file__).parent
    for item in items:
        if Path(str(item.fspath)).is_relative_to(here):
            item.add_marker(pytest.mark.e2e)
