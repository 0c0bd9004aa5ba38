"""Push delivery (issue 17): the deliverer, for a subscription's endpoint and a consumer group's.
What ``PushFunction`` loads: no HTTP use case (the routes' code is :mod:`lakeq.push.service`).

Nothing about pull changes: the deliverer takes a batch with the very pull loop
(:func:`lakeq.consume.reader.consume`; a subscription's list through a
:class:`~lakeq.consume.reader.ListLog`, a group's topic queues through a
:class:`~lakeq.consume.reader.TopicLog` owned by the group, as a group pull without ``member_id``),
so one conditional write locks it, ``deliveries`` are counted and ``max_deliveries`` dead-lettered
by the same settlement state machine. It POSTs it signed, and then

- 2xx: acknowledges the batch (:func:`lakeq.consume.settle.settle_receipt`, as ``POST /v1/acks``);
- anything else, a timeout, a connection error: sets the lock's expiry to the next attempt
  (:func:`lakeq.consume.settle.receipt_visibility`, as ``POST /v1/visibility``), so the batch is served
  again — by whichever invocation comes first after that — with its ``deliveries`` counted; the
  messages that reached the endpoint's ``retry.max_attempts`` are rejected (dead-lettered at once,
  as a pull's ``reject``).

A delivery whose lock expired while it waited (a slow endpoint) finds its receipt stale and leaves
the batch to the delivery that took it over (at-least-once).

In flight: a subscription's list is one queue with one lock, so one batch is in flight at a time.
A group's endpoint runs ``max_in_flight`` delivery threads, each holding an in-flight lease
(:meth:`lakeq.store.push.GroupPushRepo.lease`: a slot of the group's item, taken with a conditional
write, so no more than ``max_in_flight`` requests are in flight across invocations) and each
locking a queue of the topic as a pull would: different threads hold different queues, so each
queue (and so each key) is delivered in order, up to retries of released messages.
"""
from __future__ import annotations

import contextvars
import json
import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

from lakeq.common import clock
from lakeq.common.errors import LakeqError, StaleReceipt
from lakeq.common.names import covers, log_of, split_queue_key, subscription_of
from lakeq.consume import (
    ListLog,
    ReplayLog,
    TopicLog,
    consume,
    list_reader,
    policy_of,
    receipt_visibility,
    replay_reader,
    settle_receipt,
    subscription_policy,
    topic_reader,
)
from lakeq.contract import push as contract
from lakeq.contract import validation as v
from lakeq.log.receipts import parse as parse_receipt
from lakeq.log.receipts import subscription_field
from lakeq.log.settlement import Outcomes
from lakeq.push import transport
from lakeq.push.fair import FairQueue
from lakeq.store.catalog import TopicRepo
from lakeq.store.offsets import OffsetRepo
from lakeq.store.push import GroupPushRepo, PushRepo
from lakeq.store.replay_lists import active_replays, replay_log, replay_owner
from lakeq.store.subscriptions import list_owner, list_topic

log = logging.getLogger("lakeq.push.delivery")

ENV_LOOPBACK = "LAKEQ_PUSH_ALLOW_HTTP_LOOPBACK"  # set by infra.local only
LOCK_MARGIN_MS = 5_000      # the batch's lock outlives the request's timeout by this much
ENDPOINT_BUDGET_S = 20.0    # one invocation starts no new batch for an endpoint after this
RUN_MARGIN_MS = 5_000       # a run starts no request later than its end - the largest timeout_ms - this
DEFAULT_REMAINING_MS = 60_000  # a run's length when no Lambda context tells it (template.yaml's Timeout)
WORKERS = 16                # delivery threads of one run
PER_CLIENT_WORKERS = 4      # of them, at most this many per client while another client waits
MAX_RESPONSE_BYTES = contract.MAX_ANSWER_BYTES  # a 2xx answer's body: longer is a failed attempt
STALE = "the push batch's lock was taken over"
LOCK_OWNER = "push"         # a group's queue locked by its push endpoint names this as its holder


def allow_loopback() -> bool:
    return os.environ.get(ENV_LOOPBACK) == "1"


def secrets_of(raw: str | None, now: int) -> list[dict]:
    """The still-valid secrets, newest first."""
    return [x for x in json.loads(raw or "[]") if x.get("expires_at") is None or x["expires_at"] > now]


# (url, headers, body, timeout seconds) -> (HTTP status or None for a timeout / connection error, body)
Poster = Callable[[str, dict, bytes, float], "tuple[int | None, bytes]"]


def http_poster(url: str, headers: dict, body: bytes, timeout_s: float) -> tuple[int | None, bytes]:
    """The POST (:func:`lakeq.push.transport.post`): public addresses only (loopback too on the local
    stack), every address of the host checked and the connection pinned to a checked one, no
    redirect followed, ``timeout_s`` bounding the whole request, at most ``MAX_RESPONSE_BYTES + 1``
    bytes of the answer read (more: cut, a failed attempt)."""
    return transport.post(url, headers, body, timeout_s, MAX_RESPONSE_BYTES, loopback=allow_loopback())


@dataclass
class Delivered:
    """What one endpoint's run did."""

    batches: int = 0
    delivered: int = 0
    failed: int = 0
    dead_lettered: int = 0
    stale: int = 0
    skipped: int = 0        # endpoints not started: the run's deadline came first (the next run serves them)
    statuses: list = field(default_factory=list)

    def add(self, other: Delivered) -> None:
        self.batches += other.batches
        self.delivered += other.delivered
        self.failed += other.failed
        self.dead_lettered += other.dead_lettered
        self.stale += other.stale
        self.skipped += other.skipped
        self.statuses += other.statuses


class _Source:
    """Where an endpoint's batches come from: the pull loop's log, and per receipt the offsets
    owner, queue and reader that settle it."""

    repo: type[PushRepo]
    name: str
    cfg: dict

    def pull(self, visibility_ms: int, n: int) -> dict:
        raise NotImplementedError

    def where(self, receipt) -> tuple[str, int, object]:
        raise NotImplementedError

    def envelope(self) -> dict:
        raise NotImplementedError

    def refresh(self, item) -> bool:
        """The endpoint's item as a batch's record write returned it: its settings and secrets
        from the next batch on (a replacement takes effect at once). False: the run must end."""
        self.item, self.cfg = item, json.loads(item.push)
        return True

    header: str


def _req(n: int) -> v.PullRequest:
    return v.PullRequest(group=None, client_id=None, member_id=None, max=n, wait_ms=0, tags=None, ack=None)


class _ListSource(_Source):
    repo, header = PushRepo, "X-Lakeq-Subscription"

    def __init__(self, s):
        self.item, self.name, self.cfg = s, s.id, json.loads(s.push)
        self.lt, self.owner = list_topic(s.id), list_owner(s.id)
        self.policy = subscription_policy(s)

    def pull(self, visibility_ms: int, n: int) -> dict:
        lg = ListLog(self.lt, self.owner, {"group": self.item.subscriber, "topic": self.lt},
                     subscription_field(self.name))
        return consume(lg, visibility_ms, _req(n), None, policy=self.policy)

    def where(self, receipt):
        return self.owner, 0, list_reader(self.lt)

    def envelope(self) -> dict:
        return {"subscription": self.name, "topic": self.item.topic}


class PushTopicLog(TopicLog):
    """A group's topic as its push endpoint pulls it: the pull's log, except that a poll does not
    promote delayed messages (the promoter's 1-minute sweep does, for queues nobody pulls; the
    PushFunction's role has no write on the delayed messages' tables)."""

    def promote(self, metas: list) -> None:
        return None


class _GroupSource(_Source):
    repo, header = GroupPushRepo, "X-Lakeq-Group"

    def __init__(self, g, t):
        self.item, self.name, self.cfg = g, g.name, json.loads(g.push)
        self.topic, self.log = t.name, log_of(t)
        self.n_queues = int(t.queues)
        self.owner = OffsetRepo.owner(g.name, self.log, None)
        self.policy = policy_of(g)

    def pull(self, visibility_ms: int, n: int) -> dict:
        """As the group's pull: the lists of its replays into this topic first (issue 18.1; named
        by the group's item read at the run's start — none: no store call more), then its queues."""
        for rid in active_replays(self.item, self.topic):
            lg = ReplayLog(rid, replay_owner(self.name, rid), {"group": self.name, "client_id": None,
                                                              "topic": replay_log(rid)}, LOCK_OWNER)
            got = consume(lg, visibility_ms, _req(n), None, policy=self.policy)
            if got["messages"]:
                return got
        lg = PushTopicLog(self.log, self.owner, {"group": self.name, "client_id": None, "topic": self.topic},
                          self.n_queues, LOCK_OWNER)
        return consume(lg, visibility_ms, _req(n), None, policy=self.policy)

    def where(self, receipt):
        if receipt.replay is not None:  # an entry of a replay's list: the list's record settles it
            return replay_owner(self.name, receipt.replay), 0, replay_reader(replay_log(receipt.replay), None)
        return self.owner, receipt.topic_queue[1], topic_reader(self.log, None)

    def envelope(self) -> dict:
        return {"group": self.name, "topic": self.topic}

    def refresh(self, item) -> bool:
        """As a subscription's; a replacement naming another topic (or a revoked grant) ends the run
        (this run's queues are the old topic's; the next run serves the new one)."""
        cfg = json.loads(item.push)
        if cfg["topic"] != self.topic or not any(covers(grant, self.topic) for grant in item.topics):
            return False
        self.item, self.cfg = item, cfg
        return True


def _claim(repo: type[PushRepo], name: str, batch_size: int, rate: float, deadline: float) -> tuple[int, int] | None:
    """Claim the endpoint's next sending slot (``batch_size`` messages' worth of ``rate``), waiting
    for it while this run's budget allows; (its start, its end), or None (not within the budget)."""
    while True:
        now = clock.now()
        until = now + contract.slot_ms(batch_size, rate)
        if repo.claim(name, now, until):
            return now, until
        at = repo.send_at(name)
        wait_s = 0.0 if at is None else max(at - now, 1) / 1000
        if time.monotonic() + wait_s >= deadline:
            return None
        time.sleep(wait_s)


class _Settled(LakeqError):  # noqa: N818 - control flow inside the run: nothing left to retry
    """A 2xx answer's outcomes settled the batch (nothing released): no retry to schedule."""


def _lock_state(owner: str, queue: int):
    """The queue's settlement state (:class:`lakeq.log.settlement.State`; None: no record)."""
    rec = OffsetRepo.get(owner, queue)
    return None if rec is None else OffsetRepo.view_of(rec).state()


def _run(src: _Source, poster: Poster, deadline: float, max_batches: int | None) -> Delivered:
    """One delivery thread: batch after batch until nothing is servable, a delivery fails, the
    deadline (no new batch after it), or the endpoint is paused or deleted (each batch's record
    write returns the endpoint's item: a pause written while a batch was in flight ends the run
    after that batch; a replacement of its settings applies from the next batch on)."""
    out = Delivered()
    repo, name = src.repo, src.name
    while time.monotonic() < deadline and (max_batches is None or out.batches < max_batches):
        cfg = src.cfg
        retry, timeout_ms, rate = cfg["retry"], cfg["timeout_ms"], cfg.get("rate")
        claimed = None
        if rate is not None:  # a rate-limited endpoint: take the next sending slot first
            claimed = _claim(repo, name, cfg["batch_size"], rate, deadline)
            if claimed is None:
                break
        got = src.pull(timeout_ms + LOCK_MARGIN_MS, cfg["batch_size"])
        msgs = got["messages"]
        if claimed is not None:  # the slot, as used: from this send on, for the messages it carries
            start, until = claimed
            repo.move_slot(name, until, clock.now() + contract.slot_ms(len(msgs), rate) if msgs else start)
        if not msgs:
            break
        receipt = parse_receipt(got["receipt"])
        owner, q, reader = src.where(receipt)
        body = json.dumps({**src.envelope(), "receipt": got["receipt"], "messages": msgs},
                          separators=(",", ":")).encode("utf-8")
        now = clock.now()
        signing = [x["secret"] for x in secrets_of(src.item.push_secrets, now)]
        msg_id = contract.webhook_id(src.header, name, [m["id"] for m in msgs])
        headers = {**cfg["headers"], "Content-Type": "application/json", "User-Agent": "lakeq-push/1",
                   src.header: name, **contract.signature_headers(signing, now // 1000, body, msg_id)}
        traces = {m.get("trace") for m in msgs}
        if len(traces) == 1 and None not in traces:  # one producer's trace (issue 34): X-Ray's header
            headers["X-Amzn-Trace-Id"] = traces.pop()
        status, answer = poster(cfg["url"], headers, body, timeout_ms / 1000)
        out.batches += 1
        out.statuses.append(status)
        now = clock.now()
        outcomes = contract.response_outcomes(answer, len(msgs)) if status is not None and 200 <= status < 300 \
            else contract.FAILED
        ok = outcomes is not contract.FAILED
        delivered = dead = 0
        next_at = None
        stop = True
        try:
            if outcomes is None:  # a 2xx: the whole batch
                settle_receipt(owner, q, receipt, Outcomes(), src.policy, reader, now, STALE)
                delivered, stop = len(msgs), False
            else:
                st = _lock_state(owner, q)
                if st is None or st.lock_ts != receipt.timestamp or len(st.batch) != len(msgs):
                    raise StaleReceipt(STALE)
                if ok:  # a 2xx with per-message outcomes (positions in the request's messages)
                    offs = sorted(st.batch)  # the messages are in log-offset order
                    rel = {offs[i] for i in outcomes.release}
                    rej = tuple(offs[i] for i in sorted(outcomes.reject))
                    acc = tuple(o for o in offs if o not in rel and o not in rej)
                    settle_receipt(owner, q, receipt, Outcomes(accept=acc, reject=rej), src.policy, reader, now, STALE)
                    delivered, dead = len(acc), len(rej)
                    st = _lock_state(owner, q)
                    if not rel or st is None or st.lock_ts != receipt.timestamp:
                        stop = False
                        raise _Settled()
                else:
                    out.failed += 1
                # what is still held (all of a failed batch, the released part of a partial one)
                nxt = contract.after_failure({o: st.pend.get(o, 0) for o in st.held}, retry)
                if nxt.reject:
                    settle_receipt(owner, q, receipt, Outcomes(accept=(), reject=nxt.reject), src.policy, reader,
                                    now, STALE)
                    dead += len(nxt.reject)
                if nxt.delay_ms is None:
                    stop = False
                else:
                    next_at = now + nxt.delay_ms
                    if not receipt_visibility(owner, q, receipt, next_at, now):
                        raise StaleReceipt(STALE)
        except _Settled:
            pass
        except StaleReceipt:  # our lock ended and another delivery took the batch: it settles it
            out.stale += 1
            stop = True
        out.delivered += delivered
        out.dead_lettered += dead
        going = repo.record(name, json.dumps({"last_status": status, "last_attempt_at": now,
                                              "next_attempt_at": next_at}, separators=(",", ":")), ok, delivered, dead)
        # (not going: paused or deleted meanwhile — no batch after this one)
        if stop or going is None or not src.refresh(going):
            break
    return out


def _until(budget_s: float, deadline: float | None) -> float:
    """When an endpoint's run starts no new batch: ``budget_s`` from now, and never after the
    run's ``deadline`` (monotonic seconds; None: none)."""
    end = time.monotonic() + budget_s
    return end if deadline is None else min(end, deadline)


def deliver(sub_id: str, poster: Poster | None = None, budget_s: float = ENDPOINT_BUDGET_S,
            max_batches: int | None = None, deadline: float | None = None) -> Delivered:
    """Push a subscription's servable messages, batch after batch, until its list has nothing
    servable, a delivery fails, or ``budget_s`` has passed (no new batch is started after it, nor
    after the run's ``deadline``, monotonic seconds). ``poster``: how to POST (default
    :func:`http_poster`, looked up at call time); ``max_batches``: stop after that many requests."""
    s = PushRepo.get(sub_id)
    if s is None or s.push is None or s.push_paused:
        return Delivered()
    return _run(_ListSource(s), poster or http_poster, _until(budget_s, deadline), max_batches)


def lease_ms(cfg: dict, budget_s: float) -> int:
    """How long a delivery thread's in-flight lease lasts: its budget (no new batch after it), one
    request's timeout (the largest allowed: the settings may be replaced during the run), and the
    margin (the settle after the answer)."""
    return int(budget_s * 1000) + max(cfg["timeout_ms"], contract.TIMEOUT_MAX) + LOCK_MARGIN_MS


def deliver_group(name: str, poster: Poster | None = None, budget_s: float = ENDPOINT_BUDGET_S,
                  max_batches: int | None = None, deadline: float | None = None) -> Delivered:
    """Push a consumer group's servable messages of its endpoint's topic: ``max_in_flight`` threads,
    each with an in-flight lease (a held slot: the thread does not run), each a :func:`_run` over
    the group's topic queues (``max_batches``: per thread)."""
    out = Delivered()
    g = GroupPushRepo.get(name)
    if g is None or g.role != "consumer" or g.push is None or g.push_paused or g.mode == "broadcasting":
        return out
    cfg = json.loads(g.push)
    if not any(covers(grant, cfg["topic"]) for grant in g.topics):  # its grants changed since registration
        return out
    t = TopicRepo.get(cfg["topic"])
    if t is None:  # the topic was deleted: nothing to deliver (the endpoint stays, as the group does)
        return out
    poster = poster or http_poster
    deadline = _until(budget_s, deadline)

    def one(slot: int) -> Delivered:
        now = clock.now()
        until = now + lease_ms(cfg, max(0.0, deadline - time.monotonic()))
        if not GroupPushRepo.lease(name, slot, now, until):
            return Delivered()
        try:
            return _run(_GroupSource(g, t), poster, deadline, max_batches)
        finally:
            GroupPushRepo.unlease(name, slot, until)

    n = int(cfg["max_in_flight"])
    if n == 1:
        return one(0)
    with ThreadPoolExecutor(max_workers=n) as ex:
        futures = [ex.submit(contextvars.copy_context().run, one, k) for k in range(n)]
    for f in futures:
        out.add(f.result())
    return out


def run_deadline(remaining_ms: int | None) -> float:
    """The monotonic time after which a run starts no request: the function's remaining time
    (Lambda's ``context.get_remaining_time_in_millis()``; None: :data:`DEFAULT_REMAINING_MS`)
    minus the largest ``timeout_ms`` an endpoint may have and :data:`RUN_MARGIN_MS` (the settle
    and record after the last answer), so no request outlives the invocation."""
    left = DEFAULT_REMAINING_MS if remaining_ms is None else remaining_ms
    return time.monotonic() + (left - contract.TIMEOUT_MAX - RUN_MARGIN_MS) / 1000


def deliver_all(sub_ids: list[str], poster: Poster | None = None, budget_s: float = ENDPOINT_BUDGET_S,
                workers: int = WORKERS, groups: list[str] = (), remaining_ms: int | None = None,
                fair: bool = True, per_client: int = PER_CLIENT_WORKERS) -> dict[str, Delivered]:
    """:func:`deliver` for each subscription and :func:`deliver_group` for each group, in ``workers``
    threads taking the endpoints from a :class:`lakeq.push.fair.FairQueue` by client (a
    subscription's subscriber, read with one BatchGetItem per 100; a group itself): round-robin,
    at most ``per_client`` workers per client while another client waits. Each endpoint starts no
    batch after its own ``budget_s`` nor after :func:`run_deadline` (``remaining_ms``); an endpoint
    not started by then is skipped (``skipped``: the next run serves it). Keys: the subscription
    ids, ``group:<name>`` for groups.

    ``fair=False`` is the scheduling before issue 30 (a plain pool in the given order, no run
    deadline), kept for ``bench/push.py --fairness``'s baseline only."""
    jobs = [(i, deliver, i) for i in dict.fromkeys(sub_ids)] + \
           [(f"group:{g}", deliver_group, g) for g in dict.fromkeys(groups)]
    if not jobs:
        return {}
    if not fair:
        return _deliver_unfair(jobs, poster, budget_s, workers)
    deadline = run_deadline(remaining_ms)
    owners = PushRepo.owners([x for k, fn, x in jobs if fn is deliver])
    q = FairQueue([(owners.get(x, x) if fn is deliver else x, (k, fn, x)) for k, fn, x in jobs],
                  cap=max(1, per_client))
    out: dict[str, Delivered] = {}

    def work() -> None:
        while (taken := q.take()) is not None:
            owner, (k, fn, x) = taken
            try:
                if time.monotonic() >= deadline:
                    out[k] = Delivered(skipped=1)
                else:
                    out[k] = fn(x, poster, budget_s, deadline=deadline)
            except Exception:  # noqa: BLE001 - one endpoint's store error must not stop the others
                log.exception("push delivery failed", extra={"endpoint": k})
            finally:
                q.done(owner)

    # each thread runs in a copy of the caller's context (context variables such as the local
    # stack's acting-as-function marker, which its IAM rules check, are not inherited otherwise)
    threads = [threading.Thread(target=contextvars.copy_context().run, args=(work,), daemon=True)
               for _ in range(min(workers, len(jobs)))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    skipped = sum(d.skipped for d in out.values())
    if skipped:
        log.warning("push run ended before some endpoints started", extra={"skipped": skipped})
    return {k: out[k] for k, _fn, _x in jobs if k in out}


def _deliver_unfair(jobs: list, poster: Poster | None, budget_s: float, workers: int) -> dict[str, Delivered]:
    with ThreadPoolExecutor(max_workers=min(workers, len(jobs))) as ex:
        futures = {k: ex.submit(contextvars.copy_context().run, fn, x, poster, budget_s) for k, fn, x in jobs}
    out = {}
    for k, f in futures.items():
        try:
            out[k] = f.result()
        except Exception:  # noqa: BLE001 - one endpoint's store error must not stop the others
            log.exception("push delivery failed", extra={"endpoint": k})
    return out


def subscriptions_of_records(records: list[dict]) -> list[str]:
    """Subscription ids whose lists got a segment: INSERT records with ``pq = "~<id>#0"``."""
    out = []
    for r in records:
        if r.get("eventName") != "INSERT":
            continue
        pq = (((r.get("dynamodb") or {}).get("Keys") or {}).get("pq") or {}).get("S") or ""
        log, _ = split_queue_key(pq)
        sub_id = subscription_of(log)  # (a replay's list: no push)
        if sub_id is not None:
            out.append(sub_id)
    return list(dict.fromkeys(out))


def groups_of_records(records: list[dict]) -> list[str]:
    """Consumer groups with an active endpoint on a topic whose logs got a segment in ``records``:
    one registry Query per distinct topic (:meth:`GroupPushRepo.groups_of_topic`), so a topic
    without group endpoints costs that one Query per stream batch. A group the registry names
    stale (its grant revoked, its topic re-registered meanwhile) is skipped by :func:`deliver_group`."""
    out: list[str] = []
    for topic in contract.topics_of_records(records):
        out += GroupPushRepo.groups_of_topic(topic)
    return list(dict.fromkeys(out))


def stream(records: list[dict], poster: Poster | None = None, budget_s: float = ENDPOINT_BUDGET_S,
           remaining_ms: int | None = None) -> dict[str, Delivered]:
    """PushFunction's stream trigger: the subscriptions whose lists got a segment and the consumer
    groups registered on the topics that did, in one :func:`deliver_all`."""
    return deliver_all(subscriptions_of_records(records), poster, budget_s, groups=groups_of_records(records),
                       remaining_ms=remaining_ms)


def sweep(poster: Poster | None = None, budget_s: float = ENDPOINT_BUDGET_S,
          remaining_ms: int | None = None) -> dict[str, Delivered]:
    """The scheduled run: every active endpoint, subscriptions' and consumer groups' (due retries,
    anything the stream trigger missed)."""
    return deliver_all(PushRepo.active_ids(), poster, budget_s, groups=GroupPushRepo.active_ids(),
                       remaining_ms=remaining_ms)
