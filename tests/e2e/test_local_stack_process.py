"""The local stack as a process: starts, prints URL / admin key / curl examples, stops on SIGTERM."""
from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

REPO = Path(__file__).resolve().parents[2]


def test_process_prints_url_key_curl_and_stops_cleanly_on_sigterm(start_local_stack):
    st = start_local_stack(admin_key="proc-test-key")
    try:
        out = st.output
        assert f"lakeq local stack: {st.url}" in out
        assert "admin key: proc-test-key" in out
        assert f"curl -s {st.url}/v1/health" in out
        assert f"curl -s -X POST {st.url}/v1/topics -H 'Authorization: Bearer proc-test-key'" in out
        r = requests.get(f"{st.url}/v1/nothing-here", timeout=5)
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
        r = requests.post(f"{st.url}/_local/streams/drain", timeout=30)
        assert r.status_code == 200 and r.json()["drained"] is True
    finally:
        code = st.stop()
    assert code == 0
    assert st.printed("lakeq local stack stopped."), st.output
    assert "GET /v1/nothing-here 404" in st.stderr  # one access-log line per request


def test_sigint_also_stops_cleanly(start_local_stack):
    """SIGINT stops the stack (in ~1 s) even when the stack was started with SIGINT ignored, as a
    non-interactive shell's background job is: Python then installs no handler, and this test hung
    in two fresh-clone runs launched with `&` (reproduced with `trap "" INT`; the stack now installs
    its own). A miss shows what the stack was doing."""
    st = start_local_stack(admin_key="k", wait_health=False)
    t = time.monotonic()
    st.proc.send_signal(signal.SIGINT)
    try:
        code = st.proc.wait(45)
    except subprocess.TimeoutExpired:
        st.kill()  # the whole process group, before failing: a leaked stack loads the next tests
        raise AssertionError(f"no exit 45 s after SIGINT\n{st.stderr[-4000:]}") from None
    assert code == 0, st.stderr[-3000:]
    print(f"stopped {time.monotonic() - t:.2f} s after SIGINT")


_SIGNALLED_IN_EXEC = """
import os, signal, sys, threading
sys.path.insert(0, {repo!r})
{install}
threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
try:
    exec("while True: pass")  # as dataclasses runs the methods it writes
except BaseException as e:
    print("caught", type(e).__name__, flush=True)
sys.exit(0)
"""


@pytest.mark.parametrize("install, code", [
    # the stack's handler: the process exits 0
    ("from infra.local.__main__ import stop_on_signals; stop_on_signals()", 0),
    # what it replaced (a handler raising KeyboardInterrupt): CPython ends the process with SIGINT
    # although the script caught the interrupt and exited 0 (why the stack raises its own exception)
    ("signal.signal(signal.SIGINT, lambda *a: (_ for _ in ()).throw(KeyboardInterrupt))", -signal.SIGINT),
])
def test_a_signal_caught_inside_exec_still_exits_0(install, code, tmp_path):
    """The CI failure of test_sigint_also_stops_cleanly (exit -2 after 'lakeq local stack
    stopped.'), made deterministic: the signal lands while exec runs a string. Run with ``-m`` as
    the stack is (``-c`` or a script path would leave through another exit that skips the check)."""
    (tmp_path / "signalled.py").write_text(_SIGNALLED_IN_EXEC.format(repo=str(REPO), install=install))
    r = subprocess.run([sys.executable, "-m", "signalled"], cwd=tmp_path, capture_output=True, text=True,
                       timeout=30)
    assert "caught" in r.stdout, r.stderr
    assert r.returncode == code, (r.stdout, r.stderr)


def test_shared_stack_fixture_serves_health_and_admin_key(stack):
    r = requests.get(f"{stack.url}/v1/health", timeout=5)
    # issue 30 (9): the health answer tells a client where the wake-ups are (locally: their own port)
    assert r.status_code == 200 and r.json() == {"status": "ok", "wake_url": stack.ws_url}, r.json()
    # the admin key given to the process is the one the functions accept
    r = requests.get(f"{stack.url}/v1/topics", headers=stack.admin_headers(), timeout=10)
    assert r.status_code == 200
    r = requests.get(f"{stack.url}/v1/topics", headers={"Authorization": "Bearer wrong"}, timeout=10)
    assert r.status_code == 401
    assert stack.drain() >= 0


def test_topic_in_path_encoded_and_unencoded(stack):
    h = stack.admin_headers()
    for name in ("e2eq", "e2eq/sh"):
        r = requests.post(f"{stack.url}/v1/topics", json={"name": name, "queues": 2}, headers=h, timeout=10)
        assert r.status_code in (201, 409), r.text
    r = requests.post(f"{stack.url}/v1/clients", json={"name": "e2e-feed", "role": "producer",
                                                       "topics": ["e2eq"]}, headers=h, timeout=10)
    key = r.json()["api_key"] if r.status_code == 201 else stack.admin_key
    ph = {"Authorization": f"Bearer {key}"}
    body = {"producer": "e2e-feed", "messages": [{"body": "hello", "key": "k"}]}
    r1 = requests.post(f"{stack.url}/v1/topics/e2eq%2Fsh/messages", json=body, headers=ph, timeout=10)
    r2 = requests.post(f"{stack.url}/v1/topics/e2eq/sh/messages", json=body, headers=ph, timeout=10)
    assert r1.status_code == 200, r1.text
    assert r2.status_code == 200, r2.text
    assert r1.json()["results"][0]["queue"] == r2.json()["results"][0]["queue"]
