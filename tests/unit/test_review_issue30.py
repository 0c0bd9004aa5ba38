"""Adversarial review of issue 30 (h/review): defects found in the merged push hardening, each a
test that fails on the merged code. See the review report for severity and context."""
from __future__ import annotations

import socket
import threading
import time

import pytest

from lakeq.contract import push as P
from lakeq.push import transport


# --- 30.6 x 30.2: the name lookups share one process-wide pool of 8 threads ------------------------
def test_one_tenants_never_answering_dns_does_not_time_out_another_tenants_send(monkeypatch):
    """A hostile tenant registers endpoints whose name never resolves (its authoritative server drops
    queries: registration accepts it, check_host's timeout counts as 'not refused'). Each send's
    lookup is *abandoned* at the deadline but keeps a thread of transport._resolver (8 workers,
    module-level, kept across warm Lambda invocations) until the system resolver gives up. Eight such
    abandoned lookups (a group endpoint with max_in_flight 10, or 20 endpoints at timeout_ms 100) and
    every other tenant's lookup waits in the queue behind them: its send fails with Deadline although
    its name answers at once."""
    release = threading.Event()
    real = socket.getaddrinfo

    def fake(host, port, *a, **kw):
        if host.endswith(".blackhole.test"):
            release.wait(30)  # the system resolver's own timeouts: many seconds
            raise socket.gaierror("timed out")
        if host == "victim.test":
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.216.34", port))]
        return real(host, port, *a, **kw)

    monkeypatch.setattr(socket, "getaddrinfo", fake)
    try:
        for i in range(8):  # the hostile tenant's sends, each cut at its 0.1 s timeout
            with pytest.raises(transport.Deadline):
                transport.resolve(f"h{i}.blackhole.test", 443, time.monotonic() + 0.1)
        # the victim's lookup answers instantly, and it has a whole second
        got = transport.resolve("victim.test", 443, time.monotonic() + 1.0)
        assert got == [(socket.AF_INET, ("93.184.216.34", 443))]
    finally:
        release.set()


# --- 30.5: an answer that names outcomes wrongly is a failed attempt, never "accept all" ------------
@pytest.mark.parametrize("raw", [b'{"reject": 0}', b'{"release": 0}', b'{"release": {}}', b'{"reject": false}',
                                 b'{"release": ""}', b'{"release": [0], "release": []}'])
def test_outcomes_of_the_wrong_type_are_not_a_silent_accept(raw):
    """``{"reject": "0"}`` is a failed attempt (the doctest), but ``{"reject": 0}`` — the same mistake
    with a number — and every other falsy non-list (``0``, ``false``, ``""``, ``{}``) reads as "no
    outcomes" (``value.get(k) or []``) and settles the whole batch as accepted: the message the
    endpoint meant to reject or release is never retried. A duplicate key keeps its last value
    (json.loads), silently dropping the first outcome list."""
    assert P.response_outcomes(raw, 3) is P.FAILED
