"""Admin, Producer, Consumer and Subscriptions over the lakeq HTTP API (``shared/API.md``).

Which calls are retried (5xx, 429, connection errors; see :mod:`lakeq_client.http`):

- produce — every message carries an ``id`` (generated when the caller gives none), and the server
  answers a repeated id with its original result, so a retried batch is never stored twice;
- pulls — a lost response leaves its queue locked until the visibility timeout, then the batch is
  delivered again (at least once); nothing is lost;
- acks — repeating an ack that succeeded answers the same 200;
- renews (``POST /v1/visibility``) — a plain re-set of the lock's expiry: a repeat answers 200 with
  the same or a later ``locked_until``;
- GETs, the admin offset reset (sets a value), the leave of a group member (404 after it is taken
  as done).

Not retried (a repeat would not be the same request): creating topics, clients, keys and
subscriptions, growing a topic, revoking a key, deleting a subscription.
"""
from __future__ import annotations

import itertools
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Self

from .http import (
    DEFAULT_URL,
    ApiError,
    Connection,
    LakeqError,
    TransportError,
    encode,
    seg,
)

MAX_MESSAGES = 100          # API.md: 1-100 messages a produce request
MAX_REQUEST_BYTES = 3_000_000  # docs/api.md "Limits": a produce request body (UTF-8)
MAX_WAIT_MS = 20_000
# waiting mode: one fallback pull in this many (the rest trust the head hints: ``probe=false``)
FALLBACK_PROBE_EVERY = 5


def _connection(url: str | None, key: str | None, connection: Connection | None,
                **kw: Any) -> Connection:
    if connection is not None:
        return connection
    return Connection(url=url or DEFAULT_URL, key=key, **kw)


class Admin:
    """Admin routes (topics, clients and keys, offsets) plus the read-only group views; use the admin
    key (group views also take the group's key)."""

    def __init__(self, url: str | None = None, key: str | None = None, *,
                 connection: Connection | None = None, **kw: Any):
        self.conn = _connection(url, key, connection, **kw)

    def health(self) -> dict:
        return self.conn.call("GET", "/v1/health", idempotent=True)

    # topics
    def create_topic(self, name: str, queues: int | None = None) -> dict:
        """``POST /v1/topics`` (not retried: a repeat would answer 409 ``topic_exists``)."""
        body: dict[str, Any] = {"name": name}
        if queues is not None:
            body["queues"] = queues
        return self.conn.call("POST", "/v1/topics", json_body=body, idempotent=False)

    def list_topics(self) -> list[dict]:
        return self.conn.call("GET", "/v1/topics", idempotent=True)["topics"]

    def grow_topic(self, name: str, queues: int) -> dict:
        """``PATCH /v1/topics/{topic}`` ``{"queues": n}``: growth only (not retried)."""
        return self.conn.call("PATCH", f"/v1/topics/{seg(name)}", json_body={"queues": queues},
                              idempotent=False)

    # clients and keys
    def create_client(self, name: str, role: str, topics: Sequence[str], *, mode: str | None = None,
                      visibility_timeout_ms: int | None = None, **extra: Any) -> dict:
        """``POST /v1/clients`` → the client with its ``api_key`` (shown only here; not retried)."""
        body: dict[str, Any] = {"name": name, "role": role, "topics": list(topics), **extra}
        if mode is not None:
            body["mode"] = mode
        if visibility_timeout_ms is not None:
            body["visibility_timeout_ms"] = visibility_timeout_ms
        return self.conn.call("POST", "/v1/clients", json_body=body, idempotent=False)

    def update_client(self, name: str, **settings: Any) -> dict:
        """``PATCH /v1/clients/{name}`` (admin): ``max_deliveries`` (1–100) and/or
        ``dead_letter_topic`` (an existing topic); ``None`` clears one → the client."""
        return self.conn.call("PATCH", f"/v1/clients/{seg(name)}", json_body=settings, idempotent=True)

    def issue_key(self, name: str) -> dict:
        """A new key for the client → ``{"name", "key_id", "api_key"}`` (not retried)."""
        return self.conn.call("POST", f"/v1/clients/{seg(name)}/keys", idempotent=False)

    def list_keys(self, name: str) -> list[dict]:
        return self.conn.call("GET", f"/v1/clients/{seg(name)}/keys", idempotent=True)["keys"]

    def revoke_key(self, name: str, key_id: str) -> None:
        self.conn.call("DELETE", f"/v1/clients/{seg(name)}/keys/{seg(key_id)}", idempotent=False)

    # offsets and groups
    def offsets(self, group: str, topic: str, client_id: str | None = None) -> dict:
        """Backlog per queue: ``{"topic", "backlog", "queues": [...]}``."""
        return self.conn.call("GET", f"/v1/groups/{seg(group)}/offsets",
                              params={"topic": topic, "client_id": client_id}, idempotent=True)

    def reset_offset(self, group: str, topic: str, queue: int, offset: int) -> dict:
        """Set a queue's committed offset (re-consumption). Retried: it sets a value."""
        return self.conn.call("PUT", f"/v1/groups/{seg(group)}/offsets",
                              json_body={"topic": topic, "queue": queue, "offset": offset},
                              idempotent=True)

    def describe_group(self, group: str) -> dict:
        return self.conn.call("GET", f"/v1/groups/{seg(group)}", idempotent=True)

    def backlog_report(self, group: str, topic: str) -> dict:
        """The newest report of the data-lake jobs (404 before their first run)."""
        return self.conn.call("GET", "/v1/reports/backlog", params={"group": group, "topic": topic},
                              idempotent=True)


# --------------------------------------------------------------------------------------- produce

@dataclass
class _Pending:
    message: dict
    size: int
    future: Future


@dataclass
class _Buffer:
    items: list[_Pending] = field(default_factory=list)
    size: int = 0
    first_at: float = 0.0


class Producer:
    """Collects messages per topic and sends them in batches: a batch is sent when it holds
    ``max_messages`` (≤ 100), when the next message would take the request body past ``max_bytes``
    (≤ 3,000,000 bytes of compact UTF-8 JSON, as the server counts), or ``linger`` seconds after its
    first message (a background thread), and on :meth:`flush` / :meth:`close`.

    :meth:`send` returns a :class:`~concurrent.futures.Future` resolved with ``{"id", "queue",
    "offset"}`` (or the :class:`ApiError` of its batch). Every message gets an ``id`` when it has
    none, so a batch retried after a 5xx / 429 / lost response is stored once (idempotent by id).
    Batches are sent one at a time in the order they were filled (a full batch is sent by the
    :meth:`send` that filled it: natural backpressure).
    """

    def __init__(self, url: str | None = None, key: str | None = None, *, producer: str,
                 max_messages: int = MAX_MESSAGES, max_bytes: int = MAX_REQUEST_BYTES,
                 linger: float = 0.05, connection: Connection | None = None, **kw: Any):
        if not 1 <= max_messages <= MAX_MESSAGES:
            raise ValueError(f"max_messages must be 1-{MAX_MESSAGES}")
        self.conn = _connection(url, key, connection, **kw)
        self.producer, self.max_messages, self.max_bytes, self.linger = (
            producer, max_messages, max_bytes, linger)
        self._prefix = uuid.uuid4().hex[:16]
        self._ids = itertools.count(1)
        self._envelope = len(encode({"producer": producer, "messages": []}))
        self._cond = threading.Condition(threading.RLock())
        self._buffers: dict[str, _Buffer] = {}
        self._closed = False
        self.requests_sent = 0
        self._thread: threading.Thread | None = None
        if linger > 0:
            self._thread = threading.Thread(target=self._linger_loop, name="lakeq-producer",
                                            daemon=True)
            self._thread.start()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, topic: str, body: str, *, key: str | None = None,
             tags: Sequence[str] | None = None, properties: Mapping[str, Any] | None = None,
             id: str | None = None) -> Future:
        msg: dict[str, Any] = {"id": id if id is not None else f"{self._prefix}-{next(self._ids)}",
                               "body": body}
        if key is not None:
            msg["key"] = key
        if tags:
            msg["tags"] = list(tags)
        if properties:
            msg["properties"] = dict(properties)
        size = len(encode(msg))
        fut: Future = Future()
        with self._cond:
            if self._closed:
                raise LakeqError("producer is closed")
            buf = self._buffers.setdefault(topic, _Buffer())
            if buf.items and (len(buf.items) >= self.max_messages or
                              self._request_size(buf, size) > self.max_bytes):
                self._send_topic(topic)
                buf = self._buffers.setdefault(topic, _Buffer())
            if not buf.items:
                buf.first_at = time.monotonic()
            buf.items.append(_Pending(msg, size, fut))
            buf.size += size
            if len(buf.items) >= self.max_messages:
                self._send_topic(topic)
            else:
                self._cond.notify_all()
        return fut

    def _request_size(self, buf: _Buffer, extra: int) -> int:
        n = len(buf.items) + 1
        return self._envelope + buf.size + extra + (n - 1)  # commas between messages

    def flush(self) -> None:
        """Send every buffered message now; raises the first batch error (each future has its own)."""
        first: BaseException | None = None
        with self._cond:
            for topic in list(self._buffers):
                err = self._send_topic(topic)
                first = first or err
        if first is not None:
            raise first

    def close(self) -> None:
        """Flush and stop the linger thread."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()
        self.flush()

    def _send_topic(self, topic: str) -> BaseException | None:
        buf = self._buffers.pop(topic, None)
        if buf is None or not buf.items:
            return None
        body = {"producer": self.producer, "messages": [p.message for p in buf.items]}
        try:
            self.requests_sent += 1
            res = self.conn.call("POST", f"/v1/topics/{seg(topic)}/messages", json_body=body,
                                 idempotent=True)
            results = res["results"]
        except LakeqError as e:
            for p in buf.items:
                p.future.set_exception(e)
            return e
        for p, r in zip(buf.items, results):
            p.future.set_result(r)
        return None

    def _linger_loop(self) -> None:
        with self._cond:
            while not self._closed:
                now = time.monotonic()
                due = [t for t, b in self._buffers.items() if now - b.first_at >= self.linger]
                for t in due:
                    self._send_topic(t)
                if self._buffers:
                    nxt = min(b.first_at for b in self._buffers.values()) + self.linger
                    self._cond.wait(max(0.0, nxt - time.monotonic()))
                else:
                    self._cond.wait()


# --------------------------------------------------------------------------------------- consume

@dataclass
class Batch:
    """One pull's messages (all from one queue, in offset order) and their opaque receipt."""

    messages: list[dict]
    receipt: str | None
    consumer: Consumer

    def __len__(self) -> int:
        return len(self.messages)

    def __iter__(self) -> Iterator[dict]:
        return iter(self.messages)

    def settle(self) -> None:
        """Mark the batch done: acknowledged with the next pull (``ack=``) or at once, see
        :meth:`Consumer.settle`."""
        self.consumer.settle(self)

    def ack(self) -> dict | None:
        """Acknowledge now (``POST /v1/acks``): every unsettled message of the batch is accepted."""
        return self.consumer.ack(self)

    def accept(self, *offsets: int) -> dict | None:
        """Settle these messages as done; the lock stays on the rest of the batch."""
        return self.consumer.ack(self, accept=offsets)

    def release(self, *offsets: int) -> dict | None:
        """Give these messages back: the next pull of the queue serves them first."""
        return self.consumer.ack(self, release=offsets)

    def reject(self, *offsets: int) -> dict | None:
        """Dead-letter these messages now (to the group's ``dead_letter_topic``, else dropped and counted)."""
        return self.consumer.ack(self, reject=offsets)

    def renew(self, visibility_timeout_ms: int) -> dict | None:
        """Keep the batch locked for ``visibility_timeout_ms`` from now, or end the lock with 0
        (:meth:`Consumer.renew`)."""
        return self.consumer.renew(self, visibility_timeout_ms)


class Consumer:
    """Pulls batches of a topic for a consumer group (or of a subscription's list) and settles them.

    ``settle(batch)`` acknowledges the batch's receipt by piggybacking it on the next pull
    (``ack=<receipt>``: one request instead of two) when ``piggyback`` is on (default), else at once;
    :meth:`flush` / :meth:`close` send a pending acknowledgement. A settle of a batch whose receipt
    went stale (its lock expired and another pull took the queue) fails with 409 ``stale_receipt``:
    the batch will be delivered again (at least once). Pulls long-poll up to ``wait_ms``.

    Pulls and acks are retried on 5xx / 429 / connection errors (a lost pull's batch comes back after
    the visibility timeout; a repeated ack answers the same 200). A pending acknowledgement whose
    pull failed without an answer is kept for the next pull; one the server refused (4xx) is dropped.

    :meth:`renew` (``POST /v1/visibility``) extends a batch's lock while a slow handler works on
    it, or ends it at once (0: the batch is served again at the next pull); retried like acks.
    """

    def __init__(self, url: str | None = None, key: str | None = None, *, group: str | None = None,
                 topic: str | None = None, subscription: str | None = None,
                 client_id: str | None = None, member_id: str | None = None,
                 tags: Sequence[str] | None = None, max: int = 32, wait_ms: int = MAX_WAIT_MS,
                 piggyback: bool = True, connection: Connection | None = None,
                 wake_url: str | None = None, fallback_s: float = 60.0, keepalive_s: float = 540.0,
                 **kw: Any):
        if subscription is None and (group is None or topic is None):
            raise ValueError("give group and topic, or subscription")
        self.conn = _connection(url, key, connection, **kw)
        self.group, self.topic, self.subscription = group, topic, subscription
        self.client_id, self.member_id, self.tags = client_id, member_id, tags
        self.max, self.wait_ms, self.piggyback = max, wait_ms, piggyback
        self._pending: str | None = None
        self._lock = threading.Lock()
        # waiting mode (docs/api.md "WebSocket wake-ups"): with ``wake_url`` the loops below wait on
        # a WebSocket wake-up (or ``fallback_s``, the bound on a lost wake-up's latency) and pull
        # with wait_ms=0, instead of holding a long poll open
        self.fallback_s = fallback_s
        self._fallbacks = 0  # fallback pulls since the last wake-up (wait_pull)
        self.waker = None
        if wake_url is not None:
            from .ws import Waker, consumer_watch

            self.waker = Waker(wake_url, self.conn.key or "", consumer_watch(group, topic, subscription),
                               keepalive_s=keepalive_s)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def _path(self) -> str:
        if self.subscription is not None:
            return f"/v1/subscriptions/{seg(self.subscription)}/messages"
        return f"/v1/topics/{seg(self.topic or '')}/messages"

    def _ack_body(self, receipt: str) -> dict:
        if self.subscription is not None:
            return {"subscription": self.subscription, "receipt": receipt}
        body = {"group": self.group, "receipt": receipt}
        if self.client_id is not None:
            body["client_id"] = self.client_id
        return body

    def pull(self, max: int | None = None, wait_ms: int | None = None, probe: bool = True) -> Batch:
        """One pull (carrying a pending settle as ``ack=``); an empty batch when nothing came.
        ``probe=False`` (a topic's pull): trust the queues' head hints (``probe=false``, docs/api.md):
        fewer reads, and a message produced a moment before may wait for the next pull."""
        wait = self.wait_ms if wait_ms is None else wait_ms
        params: dict[str, Any] = {"max": max or self.max, "wait_ms": wait}
        if self.subscription is None:
            params.update(group=self.group, client_id=self.client_id, member_id=self.member_id)
            if not probe:
                params["probe"] = "false"
            if self.tags:
                params["tags"] = "||".join(self.tags)
        with self._lock:
            ack, self._pending = self._pending, None
        if ack is not None:
            params["ack"] = ack
        try:
            body = self.conn.call("GET", self._path, params=params, idempotent=True,
                                  extra_wait=wait / 1000)
        except (TransportError, ApiError) as e:
            if ack is not None and (isinstance(e, TransportError) or e.retryable):
                with self._lock:
                    self._pending = self._pending or ack
            raise
        return Batch(body.get("messages") or [], body.get("receipt"), self)

    def ack(self, batch: Batch | str, *, accept: Sequence[int] | None = None, release: Sequence[int] | None = None,
            reject: Sequence[int] | None = None) -> dict | None:
        """``POST /v1/acks`` now → ``{"queue", "committed_offset", "unsettled"}`` (``None`` for an
        empty batch). Without outcome lists every unsettled message of the batch is accepted; with
        them only those offsets are settled (``release``: served again first; ``reject``:
        dead-lettered) and the lock stays on the rest. Retried like any idempotent call: settling an
        already-settled offset with the same receipt is a no-op."""
        receipt = batch if isinstance(batch, str) else batch.receipt
        if receipt is None:
            return None
        body = self._ack_body(receipt)
        for name, offsets in (("accept", accept), ("release", release), ("reject", reject)):
            if offsets is not None:
                body[name] = [int(o) for o in offsets]
        return self.conn.call("POST", "/v1/acks", json_body=body, idempotent=True)

    def renew(self, batch: Batch | str, visibility_timeout_ms: int) -> dict | None:
        """``POST /v1/visibility``: keep the batch's queue locked until now + ``visibility_timeout_ms``
        (0–43200000; 0 ends the lock now, the batch is then delivered again) → ``{"queue",
        "locked_until"}`` (``None`` for an empty batch). Retried on 5xx / 429 / connection errors: a
        repeat re-sets the expiry (same or later). A receipt whose lock was taken by another pull,
        acknowledged or reset fails with 409 ``stale_receipt`` (:class:`ApiError`)."""
        receipt = batch if isinstance(batch, str) else batch.receipt
        if receipt is None:
            return None
        body = {**self._ack_body(receipt), "visibility_timeout_ms": visibility_timeout_ms}
        return self.conn.call("POST", "/v1/visibility", json_body=body, idempotent=True)

    def settle(self, batch: Batch) -> None:
        if batch.receipt is None:
            return
        if not self.piggyback:
            self.ack(batch)
            return
        with self._lock:
            older, self._pending = self._pending, batch.receipt
        if older is not None and older != batch.receipt:
            self.ack(older)

    def flush(self) -> None:
        """Send a pending settle now."""
        with self._lock:
            ack, self._pending = self._pending, None
        if ack is not None:
            self.ack(ack)

    def close(self) -> None:
        try:
            self.flush()
        finally:
            if self.waker is not None:
                self.waker.close()

    def wait_pull(self, max: int | None = None, stop: threading.Event | None = None) -> Batch:
        """Waiting mode: pull with ``wait_ms=0``; while nothing comes, wait for a wake-up (at most
        ``fallback_s``) and pull again. Returns the first non-empty batch (an empty one once
        ``stop`` is set). Without ``wake_url``: one long poll (:meth:`pull`)."""
        if self.waker is None:
            return self.pull(max)
        probe = True  # the first pull, and each after a wake-up, probes the chains (read-after-write)
        while True:
            self.waker.arm()  # a wake-up arriving during the pull is kept: no gap
            b = self.pull(max, wait_ms=0, probe=probe)
            if b.messages or (stop is not None and stop.is_set()):
                return b
            deadline = time.monotonic() + self.fallback_s
            while not (woken := self.waker.wait(min(1.0, deadline - time.monotonic()))):
                if (stop is not None and stop.is_set()) or time.monotonic() >= deadline:
                    break
            if stop is not None and stop.is_set():
                return b
            # a fallback pull (no wake-up came) is a safety net for a lost one: it trusts the head
            # hints, except every FALLBACK_PROBE_EVERY-th (a lost wake-up and a stuck head mover
            # together still cost at most that many fallback periods)
            self._fallbacks = 0 if woken else self._fallbacks + 1
            probe = woken or self._fallbacks % FALLBACK_PROBE_EVERY == 0

    def batches(self, stop: threading.Event | None = None, *, idle_exit: bool = False
                ) -> Iterator[Batch]:
        """Pull in a loop, yielding non-empty batches, until ``stop`` is set (or, with
        ``idle_exit``, until a pull comes back empty). With ``wake_url`` the pulls wait on
        wake-ups (:meth:`wait_pull`) instead of long polls."""
        while stop is None or not stop.is_set():
            b = self.pull() if self.waker is None or idle_exit else self.wait_pull(stop=stop)
            if b.messages:
                yield b
            elif idle_exit:
                return

    def consume(self, handler: Callable[[list[dict]], None], stop: threading.Event | None = None,
                *, idle_exit: bool = False) -> int:
        """Call ``handler(messages)`` for each batch and settle it when the handler returns (a
        handler that raises leaves its batch unsettled: delivered again after the visibility
        timeout). Returns the number of messages handled."""
        n = 0
        try:
            for b in self.batches(stop, idle_exit=idle_exit):
                handler(b.messages)
                b.settle()
                n += len(b)
        finally:
            self.flush()
        return n


# ---------------------------------------------------------------------------------- subscriptions

class Subscription:
    """A subscription (its fields in :attr:`info`) and its message list: pull / ack like a topic."""

    def __init__(self, conn: Connection, info: dict):
        self.conn, self.info = conn, info
        self.id: str = info["id"]
        self._consumer: Consumer | None = None

    def __repr__(self) -> str:
        return f"Subscription({self.info!r})"

    def consumer(self, **kw: Any) -> Consumer:
        if self._consumer is None or kw:
            c = Consumer(subscription=self.id, connection=self.conn, **kw)
            if kw:
                return c
            self._consumer = c
        return self._consumer

    def pull(self, max: int | None = None, wait_ms: int | None = 0) -> Batch:
        return self.consumer().pull(max=max, wait_ms=wait_ms)

    def ack(self, batch: Batch | str) -> dict | None:
        return self.consumer().ack(batch)

    def delete(self) -> None:
        Subscriptions(connection=self.conn).delete(self.id)


class Subscriptions:
    """``/v1/subscriptions``: create, list, delete (with the subscriber's key or the admin key)."""

    def __init__(self, url: str | None = None, key: str | None = None, *,
                 connection: Connection | None = None, **kw: Any):
        self.conn = _connection(url, key, connection, **kw)

    def create(self, subscriber: str, topic: str, conditions: Sequence[Mapping[str, Any]],
               tags: Sequence[str] | None = None) -> Subscription:
        """Not retried (a repeat would create a second subscription)."""
        body: dict[str, Any] = {"subscriber": subscriber, "topic": topic,
                                "conditions": [dict(c) for c in conditions]}
        if tags:
            body["tags"] = list(tags)
        return Subscription(self.conn, self.conn.call("POST", "/v1/subscriptions", json_body=body,
                                                      idempotent=False))

    def list(self, subscriber: str) -> list[Subscription]:
        body = self.conn.call("GET", "/v1/subscriptions", params={"subscriber": subscriber},
                              idempotent=True)
        return [Subscription(self.conn, s) for s in body["subscriptions"]]

    def get(self, id: str) -> Subscription:
        """A handle on a known subscription id (no request)."""
        return Subscription(self.conn, {"id": id})

    def delete(self, id: str) -> None:
        """Not retried (a repeat after a lost 204 would answer 404)."""
        self.conn.call("DELETE", f"/v1/subscriptions/{seg(id)}", idempotent=False)
