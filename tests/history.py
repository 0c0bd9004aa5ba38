"""History checker: what clients were told (2xx answers) against what consumers can read.

Used by the crash-injection tests (``tests/integration/test_crash_produce.py``); other write paths
can reuse it. Pure Python over what the HTTP API returns (no AWS calls of its own, except through
the ``api`` object passed to :func:`drain` / :func:`backlog`, i.e. ``tests.handlers.Api``).

API
---
``ProduceHistory``
    ``req = h.request(topic, messages)`` registers one logical produce request (the list of message
    dicts as sent; the client re-sends the *same* list on every retry).
    ``h.attempt(req, status, body)`` records one attempt: ``status=None`` when the function died
    (no response: a crash), else the HTTP status and JSON body. A 2xx acknowledges the messages at
    the ``(queue, offset)`` its ``results`` say.
    ``h.check(topic, log, backlog_before)`` asserts (``AssertionError`` with a readable message):

    1. the log is well formed: per queue, offsets ``0..n-1`` in order, no offset twice
       (``check_log``);
    2. every message read was sent (by ``id``, else by ``body``, which the workload must keep
       unique per logical message without an id) and is stored as sent (body, key, tags,
       properties); the read ``id`` equals the sent one when it had one;
    3. an ``id`` occupies one offset (API.md: a message ``id`` seen before on the topic is not
       stored again), whether the request was acknowledged or not;
    4. every message acknowledged by a 2xx is readable at the queue and offset the 2xx said (not
       lost, not invisible), and every 2xx for the same ``id`` said the same place;
    5. a message without an ``id`` is read at most once per attempt that may have written it (at
       least once delivery: a crashed or 5xx attempt may have stored it, the retry stores it again);
       once per 2xx when no attempt crashed or failed with a 5xx; at least once when acknowledged;
    6. same ``key`` → same queue;
    7. the backlog (``GET /v1/groups/{g}/offsets`` for a group that has read nothing, taken before
       draining) equals, per queue, the number of messages the drain read.

    ``h.check_heads(topic, heads)`` asserts, cheaply and at any moment (call it right after each
    2xx, before later requests could repair a lagging head), that every place acknowledged so far
    is below its queue's head (``heads`` from :func:`heads`): readable now, not merely later.

``drain(api, topic, group, key)``
    Pulls (``max=100``) and acknowledges until a pull returns nothing; returns
    ``{queue: [message, ...]}`` in read order. The group must be new to the topic and its
    visibility timeout longer than the drain (no redelivery).
``backlog(api, topic, group, key)``
    ``{queue: backlog}`` from ``GET /v1/groups/{group}/offsets``.
``heads(api, topic, group, key)``
    ``{queue: max_offset}`` from the same route (any consumer group granted the topic).
``path(topic)``
    The produce / pull path of a topic (``/`` percent-encoded).
"""
from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from urllib.parse import quote


def path(topic: str) -> str:
    return f"/v1/topics/{quote(topic, safe='')}/messages"


@dataclass
class Request:
    topic: str
    messages: list[dict]
    attempts: list[tuple[int | None, object]] = field(default_factory=list)

    @property
    def acknowledged(self) -> dict | None:
        for status, body in self.attempts:
            if status is not None and 200 <= status < 300:
                return body  # type: ignore[return-value]
        return None

    @property
    def writers(self) -> int:
        """Attempts that may have stored something: crashed, 2xx and 5xx ones (a 4xx writes nothing)."""
        return sum(1 for s, _ in self.attempts if s is None or 200 <= s < 300 or s >= 500)

    @property
    def clean(self) -> bool:
        """No attempt died or failed midway (only 2xx and 4xx answers)."""
        return all(s is not None and s < 500 for s, _ in self.attempts)

    @property
    def successes(self) -> int:
        return sum(1 for s, _ in self.attempts if s is not None and 200 <= s < 300)


def _identity(m: dict) -> tuple[str, str]:
    return ("id", m["id"]) if m.get("id") is not None else ("body", m["body"])


def _stored_as_sent(read: dict, sent: dict) -> str | None:
    for k, default in (("body", None), ("key", None), ("tags", []), ("properties", {})):
        if (read.get(k) if read.get(k) is not None else default) != (sent.get(k) if sent.get(k) is not None
                                                                     else default):
            return k
    return None


def check_log(log: dict[int, list[dict]]) -> None:
    """Per queue: offsets 0..n-1 in order, no offset twice."""
    for q, msgs in log.items():
        offsets = [m["offset"] for m in msgs]
        dup = [o for o, c in Counter(offsets).items() if c > 1]
        assert not dup, f"queue {q}: offsets read twice: {dup[:10]}"
        assert offsets == list(range(len(offsets))), f"queue {q}: offsets not contiguous from 0: {offsets[:50]}"
        assert all(m["queue"] == q for m in msgs), f"queue {q}: a message claims another queue"


class ProduceHistory:
    def __init__(self) -> None:
        self.requests: list[Request] = []

    def request(self, topic: str, messages: list[dict]) -> Request:
        r = Request(topic, messages)
        self.requests.append(r)
        return r

    @staticmethod
    def attempt(req: Request, status: int | None, body: object = None) -> None:
        req.attempts.append((status, body))

    def check(self, topic: str, log: dict[int, list[dict]], backlog_before: dict[int, int] | None = None) -> None:
        reqs = [r for r in self.requests if r.topic == topic]
        check_log(log)
        at: dict[tuple[int, int], dict] = {(q, m["offset"]): m for q, msgs in log.items() for m in msgs}

        # what was sent, per identity: the message and the requests (attempt counts) that carried it
        sent: dict[tuple[str, str], dict] = {}
        carriers: dict[tuple[str, str], list[Request]] = defaultdict(list)
        for r in reqs:
            for m in r.messages:
                ident = _identity(m)
                if ident in sent and _stored_as_sent(sent[ident], m) is not None:
                    raise AssertionError(f"workload error: {ident} sent with different contents")
                sent.setdefault(ident, m)
                if r not in carriers[ident]:
                    carriers[ident].append(r)

        # 2: everything read was sent, as sent
        copies: Counter = Counter()
        where: dict[tuple[str, str], list[tuple[int, int]]] = defaultdict(list)
        for (q, off), m in sorted(at.items()):
            # a message sent without an id is read with the id the server generated
            ident = ("id", m["id"]) if ("id", m["id"]) in sent else ("body", m["body"])
            assert ident in sent, f"({q}, {off}) holds a message nobody sent: {m.get('id')!r}"
            bad = _stored_as_sent(m, sent[ident])
            assert bad is None, f"({q}, {off}) {ident}: '{bad}' differs from what was sent"
            copies[ident] += 1
            where[ident].append((q, off))

        # 3: an id occupies one offset
        for ident, places in where.items():
            if ident[0] == "id":
                assert len(places) == 1, f"id {ident[1]!r} stored at {places}"

        # 4: acknowledged → readable where the 2xx said; all 2xx agree
        acked_at: dict[tuple[str, str], tuple[int, int]] = {}
        for r in reqs:
            for status, body in r.attempts:
                if status is None or not 200 <= status < 300:
                    continue
                results = body["results"]  # type: ignore[index]
                assert len(results) == len(r.messages), "one result per message, in request order"
                for m, res in zip(r.messages, results):
                    ident = _identity(m)
                    place = (res["queue"], res["offset"])
                    if m.get("id") is not None:
                        assert res["id"] == m["id"], f"result id {res['id']!r} for sent id {m['id']!r}"
                        prev = acked_at.setdefault(ident, place)
                        assert prev == place, f"{ident} acknowledged at {prev} and at {place}"
                    assert place in at, f"{ident} acknowledged at {place} but not readable there (lost or invisible)"
                    got = at[place]
                    assert _identity(got) == ident or (m.get("id") is None and got["body"] == m["body"]), \
                        f"{place} acknowledged for {ident} holds {_identity(got)}"
                    if m.get("id") is None:
                        assert got["id"] == res["id"], f"{place}: result id {res['id']} but read {got['id']}"

        # 5: copies of messages without an id
        for ident, m in sent.items():
            if ident[0] != "body":
                continue
            rs = carriers[ident]
            writers = sum(r.writers for r in rs)
            n = copies[ident]
            assert n <= writers, f"{ident} read {n} times, but only {writers} attempts may have written it"
            if all(r.clean for r in rs):
                assert n == sum(r.successes for r in rs), f"{ident} read {n} times without any crash"
            if any(r.acknowledged is not None for r in rs):
                assert n >= 1, f"{ident} acknowledged but never read"

        # 6: same key, same queue
        queues_of_key: dict[str, set[int]] = defaultdict(set)
        for (q, _), m in at.items():
            if m.get("key") is not None:
                queues_of_key[m["key"]].add(q)
        split = {k: qs for k, qs in queues_of_key.items() if len(qs) > 1}
        assert not split, f"keys in several queues: {split}"

        # 7: backlog exact
        if backlog_before is not None:
            read = {q: len(msgs) for q, msgs in log.items()}
            for q in set(read) | set(backlog_before):
                assert backlog_before.get(q, 0) == read.get(q, 0), \
                    f"queue {q}: backlog said {backlog_before.get(q, 0)}, a consumer read {read.get(q, 0)}"


    def check_heads(self, topic: str, heads: dict[int, int]) -> None:
        for r in self.requests:
            if r.topic != topic:
                continue
            for status, body in r.attempts:
                if status is None or not 200 <= status < 300:
                    continue
                for m, res in zip(r.messages, body["results"]):  # type: ignore[index]
                    assert res["offset"] < heads.get(res["queue"], 0), \
                        (f"{_identity(m)} acknowledged at ({res['queue']}, {res['offset']}) but the queue's head is "
                         f"{heads.get(res['queue'], 0)}: invisible to consumers and to the backlog")


def drain(api, topic: str, group: str, key: str, max_batches: int = 10_000) -> dict[int, list[dict]]:
    log: dict[int, list[dict]] = defaultdict(list)
    for _ in range(max_batches):
        s, b = api.call("GET", path(topic), query={"group": group, "max": 100}, key=key)
        assert s == 200, (s, b)
        if not b["messages"]:
            return dict(log)
        for m in b["messages"]:
            log[m["queue"]].append(m)
        s, a = api.call("POST", "/v1/acks", {"group": group, "receipt": b["receipt"]}, key=key)
        assert s == 200, (s, a)
    raise AssertionError("the drain did not end")


def backlog(api, topic: str, group: str, key: str) -> dict[int, int]:
    s, b = api.call("GET", f"/v1/groups/{group}/offsets", query={"topic": topic}, key=key)
    assert s == 200, (s, b)
    assert b["backlog"] == sum(q["backlog"] for q in b["queues"])
    return {q["queue"]: q["backlog"] for q in b["queues"]}


def heads(api, topic: str, group: str, key: str) -> dict[int, int]:
    s, b = api.call("GET", f"/v1/groups/{group}/offsets", query={"topic": topic}, key=key)
    assert s == 200, (s, b)
    return {q["queue"]: q["max_offset"] for q in b["queues"]}
