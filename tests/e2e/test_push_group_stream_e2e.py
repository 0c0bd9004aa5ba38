"""A consumer group's push endpoint served by PushFunction's stream trigger, end to end over the
local stack started with ``--no-schedules``: no schedule fires by itself, so the 1-minute sweep
cannot deliver anything here; a message reaches the group's endpoint only through the
SegmentsTable stream (the local pump) → PushFunction → the registry Query → the delivery.
Before the stream trigger served groups, nothing would arrive at all in this stack."""
from __future__ import annotations

import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

pytestmark = pytest.mark.e2e
# the stack runs no schedule: any delivery came by the stream trigger, so the test waits generously
# (how soon is a latency, measured by bench/push.py --latency, not asserted here)
WAIT_S = 90.0


class Receiver:
    def __init__(self):
        self.got: list[tuple[float, list[str]]] = []
        self.answered: list[float] = []  # when each answer was sent (monotonic)
        self.delay = 0.0  # seconds each request waits before its answer
        self.lock = threading.Lock()
        outer = self

        class H(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with outer.lock:
                    outer.got.append((time.monotonic(), [m["body"] for m in json.loads(body)["messages"]]))
                time.sleep(outer.delay)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()
                with outer.lock:
                    outer.answered.append(time.monotonic())

            def log_message(self, *a):
                pass
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.server.server_port}/group"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def arrival(self, body: str) -> float | None:
        with self.lock:
            return next((t for t, bodies in self.got if body in bodies), None)

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def st(start_local_stack):
    stack = start_local_stack(args=["--no-schedules"])
    yield stack
    code = stack.stop()
    assert code == 0, stack.stderr[-3000:]


def test_group_endpoint_gets_a_message_in_seconds_without_the_schedule(st):
    rx = Receiver()
    try:
        tag = uuid.uuid4().hex[:6]
        topic, group, producer = f"gstream-{tag}", f"gs-{tag}", f"feed-{tag}"
        st.call("POST", "/v1/topics", json={"name": topic, "queues": 2}, status=201)
        feed = st.call("POST", "/v1/clients", json={"name": producer, "role": "producer", "topics": [topic]},
                       status=201)["api_key"]
        gkey = st.call("POST", "/v1/clients", json={"name": group, "role": "consumer", "topics": [topic]},
                       status=201)["api_key"]
        st.call("PUT", f"/v1/groups/{group}/push", gkey, 201, json={"url": rx.url, "topic": topic})
        latencies = []
        for i in range(3):
            body = f"m{i}-{tag}"
            t0 = time.monotonic()
            st.call("POST", f"/v1/topics/{topic}/messages", feed,
                    json={"producer": producer, "messages": [{"key": f"k{i}", "body": body}]})
            while rx.arrival(body) is None and time.monotonic() - t0 < WAIT_S:
                time.sleep(0.05)
            at = rx.arrival(body)
            assert at is not None, f"{body} never pushed within {WAIT_S:.0f} s\n{st.stderr[-3000:]}"
            latencies.append(at - t0)
        print(f"group push latency, produce answered -> endpoint got it (s): "
              f"{', '.join(f'{x:.2f}' for x in latencies)}")
        # paused: the stream trigger pushes nothing (and there is no schedule to do it either). The
        # run that pushed the last message is let finish first: a pause written while a run is in
        # flight ends it after its current batch (tests/integration/test_push_groups.py::
        # test_a_pause_written_during_a_batch_ends_the_run_after_it), and a message produced in
        # that batch's last milliseconds could still go out with the run's next pull
        st.drain(30)
        st.call("POST", f"/v1/groups/{group}/push/pause", gkey)
        st.call("POST", f"/v1/topics/{topic}/messages", feed,
                json={"producer": producer, "messages": [{"key": "k", "body": f"paused-{tag}"}]})
        st.drain(30)
        time.sleep(1.0)
        assert rx.arrival(f"paused-{tag}") is None
        pulled = st.call("GET", f"/v1/topics/{topic}/messages", gkey, params={"group": group, "max": 10})["messages"]
        assert [m["body"] for m in pulled] == [f"paused-{tag}"]
    finally:
        rx.close()


def test_the_drain_waits_for_a_push_run_in_flight(st):
    """``POST /_local/streams/drain`` returns only once the push run the stream started has ended: a
    drain of the batching-window pump alone returned while the latency-bound pump's push run was
    still waiting for the endpoint, and that run then pulled a message produced after the drain and
    a pause (the test above failed so once on a loaded CI)."""
    rx = Receiver()
    rx.delay = 3.0
    try:
        tag = uuid.uuid4().hex[:6]
        topic, group, producer = f"gdrain-{tag}", f"gd-{tag}", f"feed-{tag}"
        st.call("POST", "/v1/topics", json={"name": topic, "queues": 1}, status=201)
        feed = st.call("POST", "/v1/clients", json={"name": producer, "role": "producer", "topics": [topic]},
                       status=201)["api_key"]
        gkey = st.call("POST", "/v1/clients", json={"name": group, "role": "consumer", "topics": [topic]},
                       status=201)["api_key"]
        st.call("PUT", f"/v1/groups/{group}/push", gkey, 201, json={"url": rx.url, "topic": topic})
        t0 = time.monotonic()
        st.call("POST", f"/v1/topics/{topic}/messages", feed,
                json={"producer": producer, "messages": [{"key": "k", "body": f"slow-{tag}"}]})
        while rx.arrival(f"slow-{tag}") is None and time.monotonic() - t0 < WAIT_S:
            time.sleep(0.05)
        assert rx.arrival(f"slow-{tag}") is not None, st.stderr[-3000:]
        st.drain(30)  # the endpoint is still holding its answer back (3 s)
        returned = time.monotonic()
        with rx.lock:
            answered = list(rx.answered)
        assert answered and answered[0] <= returned, (answered, returned)
    finally:
        rx.close()
