"""Push delivery's pure rules (issue 17): settings, signatures, the retry rule, and the
retry / backoff / dead-letter state machine — the deliverer's steps (lakeq.push.delivery.deliver)
driven over the real settlement machine (lakeq.log.settlement) with a scripted endpoint, checked
against a simple per-message reference: every message ends accepted or dead-lettered exactly once,
is POSTed at most min(max_attempts, max_deliveries) times, is dead-lettered only after exactly that
many failed POSTs (reason ``rejected`` when max_attempts comes first, ``max_deliveries`` otherwise),
is accepted only by a successful POST, and reaches the endpoint first in list order."""
from __future__ import annotations

import hashlib
import hmac
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakeq.common.errors import BadRequest
from lakeq.contract import push as P
from lakeq.log import settlement as S

VIS = 6_000


# --- signatures --------------------------------------------------------------------------------------
@given(secret=st.text(min_size=1, max_size=40), ts=st.integers(0, 2**40), body=st.binary(max_size=300))
def test_signature_is_hmac_sha256_of_ts_dot_body(secret, ts, body):
    header = P.signature_header([secret], ts, body)
    want = hmac.new(secret.encode(), f"{ts}.".encode() + body, hashlib.sha256).hexdigest()
    assert header == f"t={ts},v1={want}"
    assert P.verify(header, body, secret, ts)
    assert not P.verify(header, body + b"x", secret, ts)
    assert not P.verify(header, body, secret + "x", ts)
    assert not P.verify(header, body, secret, ts + 301)  # replayed too late
    assert not P.verify(header.replace(f"t={ts}", f"t={ts + 1}"), body, secret, ts)


def test_two_secrets_during_a_rotation_both_verify():
    h = P.signature_header(["new", "old"], 100, b"{}")
    assert P.verify(h, b"{}", "new", 100) and P.verify(h, b"{}", "old", 100) and not P.verify(h, b"{}", "x", 100)


# --- settings ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("url,local,ok", [
    ("https://a.example/h", False, True), ("https://127.0.0.1/h", False, False), ("https://127.0.0.1/h", True, True),
    ("http://a.example/h", True, False), ("http://127.0.0.1:8/h", False, False),
    ("http://127.0.0.1:8/h", True, True), ("http://[::1]:8/h", True, True), ("http://localhost/h", True, True),
    ("http://10.1.2.3/h", True, False), ("https://a.example:99999/", False, False), ("https:///x", False, False),
])
def test_url_rule(url, local, ok):
    if ok:
        assert P.push_settings({"url": url}, local)["url"] == url
    else:
        with pytest.raises(BadRequest):
            P.push_settings({"url": url}, local)


@given(n=st.one_of(st.integers(-3, 14), st.booleans(), st.none(), st.just("2")), group=st.booleans())
def test_max_in_flight_rule(n, group):
    """A subscription's endpoint: only 1 (its list has one lock); a group's: 1-10 (its queues go in
    parallel); anything else a 400, the default 1."""
    body = {"url": "https://a.example/h", **({"topic": "t/a"} if group else {})}
    if n is not None:
        body["max_in_flight"] = n
    hi = P.IN_FLIGHT_MAX if group else P.IN_FLIGHT_MAX_SUBSCRIPTION
    ok = n is None or (type(n) is int and 1 <= n <= hi)
    if ok:
        assert P.push_settings(body, False, group=group)["max_in_flight"] == (1 if n is None else n)
    else:
        with pytest.raises(BadRequest) as e:
            P.push_settings(body, False, group=group)
        if not group and type(n) is int and 2 <= n <= P.IN_FLIGHT_MAX:
            assert "one lock" in e.value.message  # says why, not just the range


def test_a_group_endpoint_names_its_topic_and_a_subscription_endpoint_does_not():
    assert P.push_settings({"url": "https://a.example/h", "topic": "q/x"}, False, group=True)["topic"] == "q/x"
    assert "topic" not in P.push_settings({"url": "https://a.example/h"}, False)
    for body in ({"url": "https://a.example/h"}, {"url": "https://a.example/h", "topic": ""},
                 {"url": "https://a.example/h", "topic": 3}):
        with pytest.raises(BadRequest):
            P.push_settings(body, False, group=True)
    with pytest.raises(BadRequest):
        P.push_settings({"url": "https://a.example/h", "topic": "q"}, False)  # unknown field for a subscription
    with pytest.raises(BadRequest):
        P.push_settings({"url": "https://a.example/h", "topic": "q",
                         "headers": {"X-Lakeq-Group": "forged"}}, False, group=True)


# --- the retry rule ------------------------------------------------------------------------------------
@given(attempt=st.integers(0, 60), base=st.integers(P.BASE_MIN, 10_000), extra=st.integers(0, 10**6),
       u=st.floats(0, 1))
def test_retry_delay_is_full_jitter_within_the_capped_bound(attempt, base, extra, u):
    retry = {"backoff_base_ms": base, "backoff_cap_ms": base + extra}
    bound = min(base + extra, base * 2 ** min(attempt, 30))
    d = P.retry_delay_ms(attempt, retry, rand=lambda a, b: a + (b - a) * u)
    assert 1 <= d <= max(1, bound)
    assert P.retry_delay_ms(attempt, retry, rand=lambda a, b: b) == max(1, int(bound / 1000 * 1000))


# --- the state machine vs a reference ------------------------------------------------------------------
class Sim:
    """The deliverer over one subscription list of ``n`` messages: per invocation, the pull loop's
    plan / dead-letter upkeep / lock (lakeq.consume.reader.consume without the store), a POST
    answered by ``script`` (True: 2xx; then always 2xx), then ack, or reject + visibility."""

    def __init__(self, n, batch, max_attempts, max_deliveries, script, base, cap):
        self.n, self.batch, self.m = n, batch, max_deliveries
        self.retry = {"max_attempts": max_attempts, "backoff_base_ms": base, "backoff_cap_ms": cap}
        self.script = list(script)
        self.s, self.now = S.State(0), 1_000_000
        self.posts: Counter[int] = Counter()
        self.outcomes: dict[int, list[bool]] = {}
        self.accepted: set[int] = set()
        self.dead: dict[int, str] = {}
        self.first_posts: list[int] = []
        self.delays: list[tuple[int, int]] = []

    def _dead(self, state, offsets):
        for o in offsets:
            assert o not in self.dead and o not in self.accepted
            self.dead[o] = state.due[o][0]
        return S.dead_lettered(state, list(offsets))

    def step(self) -> bool:
        if self.s.live(self.now):
            self.now = self.s.lock_until  # the schedule comes when the retry is due
        p = S.plan(self.s, self.now, self.batch, self.m)
        if p.upkeep:
            self.s = self._dead(p.state, list(p.state.due))
            return True
        f = p.state.frontier
        fresh = list(range(f, min(f + p.fresh, self.n)))
        if not p.redeliver and not fresh:
            self.s = p.state
            return False
        ts = max(self.now, self.s.lock_ts + 1)
        self.s = S.lock(p.state, ts, self.now + VIS, p.redeliver, fresh, f + len(fresh))
        sent = [*p.redeliver, *fresh]
        ok = self.script.pop(0) if self.script else True
        for o in sent:
            if o not in self.posts:
                self.first_posts.append(o)
            self.posts[o] += 1
            self.outcomes.setdefault(o, []).append(ok)
        lf, ln = self.s.lock_from, self.s.lock_next
        if ok:
            out = S.settle(self.s, ts, lf, ln)
            for o in sent:
                assert o not in self.dead and o not in self.accepted
                self.accepted.add(o)
            self.s = out.state
            return True
        deliveries = {o: self.s.pend[o] for o in self.s.held}
        nxt = P.after_failure(deliveries, self.retry)
        if nxt.reject:
            out = S.settle(self.s, ts, lf, ln, accept=(), reject=nxt.reject, max_deliveries=self.m)
            self.s = self._dead(out.state, out.new_due)
        if nxt.delay_ms is not None:
            attempt = max(n for o, n in deliveries.items() if o not in nxt.reject) - 1
            self.delays.append((attempt, nxt.delay_ms))
            self.s = S.visibility(self.s, ts, lf, ln, self.now + nxt.delay_ms)
        return True


@settings(max_examples=300, deadline=None)
@given(n=st.integers(1, 12), batch=st.integers(1, 5), max_attempts=st.integers(1, 6),
       max_deliveries=st.one_of(st.none(), st.integers(1, 6)), script=st.lists(st.booleans(), max_size=60),
       base=st.integers(100, 2_000), extra=st.integers(0, 5_000))
def test_retry_and_dead_letter_machine_matches_the_reference(n, batch, max_attempts, max_deliveries, script,
                                                            base, extra):
    sim = Sim(n, batch, max_attempts, max_deliveries, script, base, base + extra)
    for _ in range(10_000):
        if not sim.step():
            break
    else:
        pytest.fail("the deliverer never ran out of work")
    limit = min(max_attempts, max_deliveries or max_attempts)
    assert sim.accepted | set(sim.dead) == set(range(n)) and not sim.accepted & set(sim.dead)
    for o in range(n):
        assert 1 <= sim.posts[o] <= limit
        if o in sim.dead:  # only after exactly `limit` failed POSTs
            assert sim.posts[o] == limit and not any(sim.outcomes[o])
            assert sim.dead[o] == (S.REJECTED if max_deliveries is None or max_attempts <= max_deliveries
                                   else S.MAX_DELIVERIES)
        else:  # accepted by its last POST, which succeeded
            assert sim.outcomes[o][-1] and not any(sim.outcomes[o][:-1])
    assert sim.first_posts == sorted(sim.first_posts)  # list order
    for attempt, d in sim.delays:
        assert 1 <= d <= min(base + extra, base * 2 ** attempt)
    assert sim.s.committed == n and sim.s.dead_lettered == len(sim.dead)


# --- topics a stream batch names (the group endpoints' stream trigger) ------------------------------
_topic = st.sampled_from(["quotes", "quotes/sh", "a-b/c", "x"])
_pq = st.one_of(
    st.tuples(_topic, st.integers(0, 3), st.integers(0, 5)).map(
        lambda t: f"{t[0]}{'' if t[1] == 0 else f'!{t[1]}'}#{t[2]}"),
    st.sampled_from(["~s1#0", "~s2#0"]))
_rec = st.tuples(st.sampled_from(["INSERT", "INSERT", "MODIFY", "REMOVE"]), _pq).map(
    lambda t: {"eventName": t[0], "dynamodb": {"Keys": {"pq": {"S": t[1]}, "base": {"N": "0"}}}})


@given(st.lists(_rec, max_size=30))
@settings(max_examples=200, deadline=None)
def test_topics_of_records_are_the_woken_topics_without_lists(recs):
    """Against the notifier's rule (``wake.plan.woken_keys``): the same topics, in the same
    first-seen order, minus subscription lists."""
    from lakeq.wake.plan import woken_keys
    assert P.topics_of_records(recs) == [k for k in woken_keys(recs) if not k.startswith("~")]


def test_topics_of_records_skips_what_is_not_a_segment_key():
    recs = [{"eventName": "INSERT"}, {"eventName": "INSERT", "dynamodb": {"Keys": {"pq": {"S": ""}}}},
            {"eventName": "INSERT", "dynamodb": {"Keys": {"pq": {"S": "nohash"}}}},
            {"eventName": "INSERT", "dynamodb": {"Keys": {"pq": {"S": "t!2#1"}}}}]
    assert P.topics_of_records(recs) == ["t"]
