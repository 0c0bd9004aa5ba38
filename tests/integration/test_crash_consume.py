"""Crash injection on the consume paths (issue 8): a pull that locks, a pull with ``ack=``,
``POST /v1/acks``, a filtered pull that moves the committed offset past skipped messages, and
``PUT /v1/groups/{g}/offsets``.

For every path and every k (every prefix): the handler dies right after its k-th store call
(:class:`tests.crash.CrashAfter`), the client retries as a real one would (the same request; a
consumer that got no response simply pulls again), then keeps consuming until the backlog is 0,
letting time pass (a fake clock) when a lost batch's lock must expire. A history checker
(:class:`ConsumeHistory`, below: the consume counterpart of ``tests/history.py``) then asserts:

1. nothing acknowledged is redelivered after its ack's 2xx;
2. nothing produced is lost: every message is served in a batch whose acknowledgement got a 2xx
   (a filtered consumer: every matching message; the others count as consumed);
3. no queue is held by two consumers at once: a batch is served only once every earlier batch of
   that queue was acknowledged (2xx), reset away, or its visibility timeout had passed;
4. each batch is well formed (offsets increasing, inside its receipt's range) and carries what was
   produced at those offsets;
5. the backlog is exact: right after the crash and retry it is what the 2xx answers imply, and 0
   at the end with every queue's committed offset at its head.

The workload of each run is drawn from a seed (message counts per queue); with the crash points
of every path that makes the seeded runs of this module (> 20, run in CI).
"""
from __future__ import annotations

import itertools
import random
import zlib
from dataclasses import dataclass, field

import pytest

from lakeq.common import clock as lakeq_clock
from lakeq.store import queue_log
from tests.crash import CrashAfter, count_calls

PARENT = "crash"
VIS_MS = 1_000
PATHS = ["pull", "pull_ack", "pull_ack_read", "pull_ack_last", "ack", "filtered", "reset"]
SEED = 8


def _key_for(queue: int, queues: int = 2) -> str:
    return next(k for k in (f"k{i}" for i in itertools.count()) if zlib.crc32(k.encode()) % queues == queue)


KEYS = [_key_for(0), _key_for(1)]


class Clock:
    """The service's clock in this module: moves only when the test says so."""

    def __init__(self) -> None:
        self.now = 1_800_000_000_000

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


@dataclass
class Delivery:
    seq: int
    now: int
    queue: int
    offset: int
    next_offset: int
    receipt: str
    messages: list[dict]


@dataclass
class ConsumeHistory:
    """What the consumers were told, in order (``seq``), with the fake clock's time."""

    produced: dict[int, list[dict]]  # queue -> messages as sent, by offset
    vis_ms: int
    wanted: set[str] | None = None  # a filtered consumer's tags (any-of); None: everything
    deliveries: list[Delivery] = field(default_factory=list)
    acks: list[tuple[int, str]] = field(default_factory=list)  # (seq, receipt) answered 2xx
    resets: list[tuple[int, int]] = field(default_factory=list)  # (seq, queue) answered 2xx
    seq: itertools.count = field(default_factory=itertools.count)

    def delivered(self, now: int, body: dict) -> None:
        if not body["messages"]:
            assert body["receipt"] is None
            return
        _, q, off, nxt, _ = body["receipt"].split(":")
        queue = int(q.rpartition("@")[2])
        self.deliveries.append(Delivery(next(self.seq), now, queue, int(off), int(nxt), body["receipt"],
                                        body["messages"]))

    def acked(self, receipt: str) -> None:
        self.acks.append((next(self.seq), receipt))

    def reset(self, queue: int) -> None:
        self.resets.append((next(self.seq), queue))

    def _first_ack(self, receipt: str) -> int | None:
        return next((s for s, r in self.acks if r == receipt), None)

    def check(self) -> None:
        # 4: batches well formed, contents as produced
        for d in self.deliveries:
            offs = [m["offset"] for m in d.messages]
            assert offs == sorted(set(offs)) and d.offset <= offs[0] and offs[-1] < d.next_offset, d
            if self.wanted is None:
                assert offs == list(range(d.offset, d.next_offset)), f"unfiltered batch with a hole: {d}"
            for m in d.messages:
                sent = self.produced[d.queue][m["offset"]]
                assert (m["queue"], m["body"], m["tags"]) == (d.queue, sent["body"], sent["tags"]), (m, sent)
                if self.wanted is not None:
                    assert set(m["tags"]) & self.wanted, f"{m} does not match the filter"
        # 1: nothing acknowledged is redelivered after its ack's 2xx (no reset moved back here)
        for seq, r in self.acks:
            _, q, off, nxt, _ = r.split(":")
            queue = int(q.rpartition("@")[2])
            for d in self.deliveries:
                if d.seq > seq and d.queue == queue:
                    again = [m["offset"] for m in d.messages if int(off) <= m["offset"] < int(nxt)]
                    assert not again, f"offsets {again} of queue {queue} acknowledged at #{seq}, served again at #{d.seq}"
        # 3: one holder per queue at a time
        for i, d2 in enumerate(self.deliveries):
            for d1 in self.deliveries[:i]:
                if d1.queue != d2.queue:
                    continue
                a = self._first_ack(d1.receipt)
                released = (a is not None and a < d2.seq) or d2.now >= d1.now + self.vis_ms \
                    or any(d1.seq < s < d2.seq and q == d1.queue for s, q in self.resets)
                assert released, f"queue {d1.queue} served at #{d2.seq} while #{d1.seq}'s batch was still held"
        # 2: nothing lost
        served_acked = {(d.queue, m["offset"]) for d in self.deliveries if self._first_ack(d.receipt) is not None
                        for m in d.messages}
        for q, msgs in self.produced.items():
            for off, m in enumerate(msgs):
                if self.wanted is None or set(m["tags"]) & self.wanted:
                    assert (q, off) in served_acked, f"({q}, {off}) produced but never served and acknowledged"

    def committed(self) -> dict[int, int]:
        """Per queue, the committed offset the 2xx acknowledgements imply (no filter, no reset back)."""
        out = {q: 0 for q in self.produced}
        for _, r in self.acks:
            _, q, _, nxt, _ = r.split(":")
            queue = int(q.rpartition("@")[2])
            out[queue] = max(out[queue], int(nxt))
        return out


@dataclass
class Env:
    api: object
    feed: str
    grp: str
    clock: Clock
    counter: itertools.count

    def topic(self) -> str:
        name = f"{PARENT}/r{next(self.counter)}"
        assert self.api.call("POST", "/v1/topics", {"name": name, "queues": 2})[0] == 201
        return name

    @staticmethod
    def path(topic: str) -> str:
        return f"/v1/topics/{topic.replace('/', '%2F')}/messages"

    def pull(self, topic: str, **q):
        return self.api.call("GET", self.path(topic), query={"group": "grp", "max": 3, **q}, key=self.grp)

    def ack(self, receipt: str):
        return self.api.call("POST", "/v1/acks", {"group": "grp", "receipt": receipt}, key=self.grp)

    def reset(self, topic: str, queue: int, offset: int):
        return self.api.call("PUT", "/v1/groups/grp/offsets", {"topic": topic, "queue": queue, "offset": offset})

    def offsets(self, topic: str) -> dict:
        s, b = self.api.call("GET", "/v1/groups/grp/offsets", query={"topic": topic}, key=self.grp)
        assert s == 200, b
        assert b["backlog"] == sum(q["backlog"] for q in b["queues"])
        return b


@pytest.fixture
def env(api, monkeypatch):
    clock = Clock()
    monkeypatch.setattr(lakeq_clock, "now", clock)
    assert api.call("POST", "/v1/topics", {"name": PARENT, "queues": 1})[0] == 201
    s, feed = api.call("POST", "/v1/clients", {"name": "feed", "role": "producer", "topics": [PARENT]})
    assert s == 201
    s, grp = api.call("POST", "/v1/clients", {"name": "grp", "role": "consumer", "topics": [PARENT],
                                              "visibility_timeout_ms": VIS_MS})
    assert s == 201
    e = Env(api, feed["api_key"], grp["api_key"], clock, itertools.count())
    warm = e.topic()  # fill the per-container caches, so call counts line up from here on
    e.pull(warm)
    return e


def prepare(env: Env, path: str, rng: random.Random) -> tuple[str, ConsumeHistory]:
    """A fresh topic with two queues: queue 0 holds A-tagged messages, queue 1 more B-tagged ones
    (so a filtered pull ``tags=A`` first moves past queue 1's, then locks queue 0)."""
    topic = env.topic()
    na = rng.randint(3, 5)
    counts = [na, na + rng.randint(1, 2)]
    produced = {q: [{"id": f"{topic}-{q}-{i}", "body": f"{topic} q{q} #{i}", "key": KEYS[q], "tags": [tag]}
                    for i in range(n)] for q, (n, tag) in enumerate(zip(counts, ["A", "B"]))}
    msgs = produced[0] + produced[1]
    s, b = env.api.call("POST", env.path(topic), {"producer": "feed", "messages": msgs}, key=env.feed)
    assert s == 200 and [(r["queue"], r["offset"]) for r in b["results"]] == [
        (q, i) for q in (0, 1) for i in range(counts[q])], b
    return topic, ConsumeHistory(produced, VIS_MS, {"A"} if path == "filtered" else None)


def pre_and_request(env: Env, path: str, topic: str, h: ConsumeHistory):
    """The steps before the request under test (no crash) and the request itself as a thunk, plus
    the receipt the client holds meanwhile."""
    if path == "pull":
        return (lambda: env.pull(topic)), None
    if path == "filtered":
        return (lambda: env.pull(topic, tags="A")), None
    s, b1 = env.pull(topic, **({"max": 100} if path == "pull_ack_last" else {}))
    assert s == 200 and b1["messages"], b1
    h.delivered(env.clock(), b1)
    if path in ("pull_ack", "pull_ack_last"):  # the ack folded into the next lock of its queue / alone
        # (pull_ack_last: the first pull took all of its queue), then the other queue ranked and locked
        return (lambda: env.pull(topic, ack=b1["receipt"])), b1["receipt"]
    if path == "pull_ack_read":  # the fold in a container without a copy of the record (it reads it)
        def request():           # nor of the segment its frontier is in (it asks for the one around it)
            queue_log._WROTE.clear()
            queue_log._SPANS.clear()
            return env.pull(topic, ack=b1["receipt"])
        return request, b1["receipt"]
    if path == "ack":
        return (lambda: env.ack(b1["receipt"])), b1["receipt"]
    if path == "reset":
        q = h.deliveries[-1].queue
        return (lambda: env.reset(topic, q, h.deliveries[-1].offset)), b1["receipt"]
    raise KeyError(path)


def record(env: Env, path: str, h: ConsumeHistory, held: str | None, status: int, body: dict) -> str | None:
    """Record a 2xx answer of the request under test; returns the receipt the client now holds."""
    assert status == 200, (path, status, body)
    if path in ("pull", "filtered", "pull_ack", "pull_ack_read", "pull_ack_last"):
        if path in ("pull_ack", "pull_ack_read", "pull_ack_last"):
            h.acked(held)  # type: ignore[arg-type]
        h.delivered(env.clock(), body)
        return body["receipt"]
    if path == "ack":
        h.acked(held)  # type: ignore[arg-type]
        return None
    h.reset(h.deliveries[-1].queue)
    return held


def consume_to_the_end(env: Env, topic: str, h: ConsumeHistory, held: str | None, path: str) -> None:
    """The client goes on, and a second consumer of the group joins it: each acknowledges what it
    holds with its next pull; when neither is served while backlog remains (a lost batch's lock),
    time passes; until the backlog is 0."""
    tags = {"tags": "A"} if path == "filtered" else {}
    if path == "reset" and held is not None:  # the reset killed the held batch's receipt
        s, e = env.ack(held)
        assert s == 409 and e["error"]["code"] == "stale_receipt", (s, e)
        held = None
    holding: list[str | None] = [held, None]
    for _ in range(100):
        for c in (1, 0):  # the newcomer first: it must not get what the client holds
            s, b = env.pull(topic, max=100, **tags, **({"ack": holding[c]} if holding[c] else {}))
            if s == 409 and holding[c]:  # a real client drops a stale receipt; the checker judges
                holding[c] = None
                continue
            assert s == 200, (s, b)
            if holding[c]:
                h.acked(holding[c])  # type: ignore[arg-type]
            h.delivered(env.clock(), b)
            holding[c] = b["receipt"]
        if any(holding):
            continue
        if env.offsets(topic)["backlog"] == 0:
            return
        env.clock.advance(VIS_MS)  # a lost batch's lock expires
    raise AssertionError("the consumers never finished")


def run(env: Env, path: str, k: int | None, seed: int) -> int:
    """One run: crash after store call ``k`` of the request under test, then the client retries;
    ``k=None``: no crash. Returns how many store calls the request made (its first attempt)."""
    rng = random.Random(seed)
    topic, h = prepare(env, path, rng)
    request, held = pre_and_request(env, path, topic, h)
    env.clock.advance(1)
    if k is None:
        calls, out = count_calls(request)
    else:
        with CrashAfter(k) as c:
            crashed, out = c.run(request)
        assert crashed, f"{path}: the request made fewer than {k} store calls"
        calls = k
        out = request()  # the client got no response: it sends the same request again
    status, body = out
    held = record(env, path, h, held, status, body)
    if path != "filtered":  # 5: the backlog the 2xx answers imply, right after the retry
        o = env.offsets(topic)
        expect = h.committed()
        for q in o["queues"]:
            assert q["backlog"] == len(h.produced[q["queue"]]) - expect[q["queue"]], (q, expect)
    consume_to_the_end(env, topic, h, held, path)
    h.check()
    o = env.offsets(topic)
    assert o["backlog"] == 0 and all(q["committed_offset"] == q["max_offset"] == len(h.produced[q["queue"]])
                                     for q in o["queues"]), o
    return calls


# pull_ack: the ack folded into the lock (a segment Query, one UpdateItem; issue 16); pull_ack_read:
# and the record read first, and a Query for the segment around the frontier (the topic item of a
# pull comes from the container's copy when it read it < 1.5 s ago, the record from its copy of its
# lock write, the frontier's segment from the newest one it read there: issue 33 item 2)
MIN_CALLS = {"pull": 4, "pull_ack": 2, "pull_ack_read": 4, "pull_ack_last": 6, "ack": 2, "filtered": 6, "reset": 3}


@pytest.mark.parametrize("path", PATHS)
def test_crash_after_every_store_call(env, path):
    """The uncrashed run counts the request's store calls n; then for k = 1..n (every prefix) a
    run whose request dies after call k, each run's workload drawn from its own seed."""
    n = run(env, path, None, SEED)
    assert n >= MIN_CALLS[path], f"{path}: {n} store calls"
    for k in range(1, n + 1):
        run(env, path, k, SEED * 1000 + k)
