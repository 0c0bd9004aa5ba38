"""A consumer-group member: join / heartbeat / sync in a background thread (the member loop of
docs/guide-groups.md), pulls restricted to its own queues, leave on close."""
from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any, Self

from .client import MAX_WAIT_MS, Batch, Consumer, _connection
from .http import ApiError, Connection, LakeqError, TransportError, seg


class GroupMember:
    """One member of consumer group ``group`` consuming ``topics`` (a topic covers its children).

    The background thread runs the member loop: **join** (with ``owned`` = the assignment of the
    last successful sync), **heartbeat** every ``heartbeat_interval_ms`` with the last generation
    received, and on ``action``: ``none`` → remember the generation; ``sync`` → **sync** and take
    the assignment; ``rejoin`` → send pending acks, then join again with ``owned``. A 409
    ``stale_generation`` (a response was lost, so our generation is behind) → join again with
    ``owned``; a 404 ``unknown_member`` (removed after a silence) → join again with nothing owned.
    Any other 4xx stops the loop and is raised by the next :meth:`pull`; a 5xx / connection error
    is retried (the calls are retried by the connection too: the protocol above makes a repeated
    heartbeat, sync or join with our ``member_id`` safe).

    :meth:`pull` serves only this member's queues (``member_id=``), round-robin over the topics of
    its assignment. :meth:`close` (or leaving the ``with`` block) stops the thread, sends pending
    acks and leaves the group (``DELETE``; the others rebalance at once).
    """

    def __init__(self, url: str | None = None, key: str | None = None, *, group: str,
                 topics: Sequence[str], member_id: str | None = None,
                 session_timeout_ms: int | None = None, max: int = 32,
                 wait_ms: int = MAX_WAIT_MS,
                 on_assign: Callable[[list[dict]], None] | None = None,
                 connection: Connection | None = None, **kw: Any):
        self.conn = _connection(url, key, connection, **kw)
        self.group, self.topics = group, list(topics)
        self.member_id = member_id or f"m-{uuid.uuid4().hex[:16]}"
        self.session_timeout_ms, self.max, self.wait_ms = session_timeout_ms, max, wait_ms
        self.on_assign = on_assign
        self.generation = 0
        self.heartbeat_interval = 3.0
        self.syncs = 0
        self.error: BaseException | None = None
        self.actions: list[str] = []
        self._assignment: list[dict] = []
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._consumers: dict[str, Consumer] = {}
        self._rr = 0

    # lifecycle
    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        """Join (in the caller's thread: a refused join raises here), then run the loop."""
        if self._thread is not None:
            return
        self._join()
        self._thread = threading.Thread(target=self._loop, name=f"lakeq-member-{self.member_id}",
                                        daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
        try:
            self._flush_acks()
        finally:
            try:
                self.conn.call("DELETE", self._base, idempotent=True)
            except ApiError as e:
                if e.status != 404:  # already removed: nothing to leave
                    raise

    @property
    def assignment(self) -> list[dict]:
        """The queues of the last successful sync."""
        with self._cond:
            return list(self._assignment)

    def wait_for_assignment(self, timeout: float = 30.0) -> list[dict]:
        """Block until the first sync happened (and the assignment is non-empty, or ``timeout``)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while (self.syncs == 0 or not self._assignment) and self.error is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            if self.error is not None:
                raise self.error
            return list(self._assignment)

    # the member loop
    @property
    def _base(self) -> str:
        return f"/v1/groups/{seg(self.group)}/members/{seg(self.member_id)}"

    def _join(self, owned: list[dict] | None = None) -> None:
        body: dict[str, Any] = {"member_id": self.member_id, "topics": self.topics,
                                "owned": self.assignment if owned is None else owned}
        if self.session_timeout_ms is not None:
            body["session_timeout_ms"] = self.session_timeout_ms
        b = self.conn.call("POST", f"/v1/groups/{seg(self.group)}/members", json_body=body,
                           idempotent=True)
        self.generation = b["generation"]
        self.heartbeat_interval = b.get("heartbeat_interval_ms", 3000) / 1000
        self._wake.set()  # awaiting_sync: heartbeat at once to be told to sync

    def _sync(self) -> None:
        b = self.conn.call("POST", f"{self._base}/sync", json_body={"generation": self.generation},
                           idempotent=True)
        with self._cond:
            self.generation = b["generation"]
            self._assignment = list(b["assignment"])
            self.syncs += 1
            self._cond.notify_all()
        if self.on_assign is not None:
            self.on_assign(self.assignment)

    def step(self) -> str:
        """One turn: heartbeat, then sync or re-join as told; returns the action (or what a 409 /
        404 led to: ``"rejoin"`` / ``"join"``)."""
        try:
            b = self.conn.call("POST", f"{self._base}/heartbeat",
                               json_body={"generation": self.generation, "owned": self.assignment},
                               idempotent=True)
            self.generation = b["generation"]
            action = b["action"]
            if action == "sync":
                self._sync()
            elif action == "rejoin":
                self._flush_acks()
                self._join()
        except ApiError as e:
            if e.code == "stale_generation":
                action = "rejoin"
                self._join()
            elif e.code == "unknown_member":
                action = "join"
                with self._cond:
                    self._assignment = []
                self._join(owned=[])
            else:
                raise
        self.actions.append(action)
        return action

    def _loop(self) -> None:
        failures = 0
        while not self._stop.is_set():
            self._wake.wait(self.heartbeat_interval)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.step()
                failures = 0
            except TransportError:
                failures += 1
                self._stop.wait(min(self.heartbeat_interval, 0.2 * 2 ** min(failures, 5)))
            except ApiError as e:
                if e.retryable:
                    failures += 1
                    continue
                with self._cond:
                    self.error = e
                    self._cond.notify_all()
                return
            except Exception as e:  # noqa: BLE001 - keep any failure visible to pull()
                with self._cond:
                    self.error = e
                    self._cond.notify_all()
                return

    # consuming
    def _consumer(self, topic: str) -> Consumer:
        c = self._consumers.get(topic)
        if c is None:
            c = Consumer(group=self.group, topic=topic, member_id=self.member_id, max=self.max,
                         wait_ms=self.wait_ms, connection=self.conn)
            self._consumers[topic] = c
        return c

    def _flush_acks(self, keep: str | None = None) -> None:
        for t, c in list(self._consumers.items()):
            if t != keep:
                try:
                    c.flush()
                except ApiError as e:
                    if e.code != "stale_receipt":
                        raise

    def pull(self, max: int | None = None, wait_ms: int | None = None) -> Batch:
        """A batch from one of this member's queues (empty when it has none servable). Settle it
        with ``batch.settle()`` (piggybacked on this member's next pull) or ``batch.ack()``."""
        if self.error is not None:
            raise self.error
        wait = self.wait_ms if wait_ms is None else wait_ms
        topics = sorted({q["topic"] for q in self.assignment})
        if not topics:
            with self._cond:
                self._cond.wait(min(wait, 1000) / 1000)
            return Batch([], None, self._consumer(self.topics[0]))
        self._rr = (self._rr + 1) % len(topics)
        order = topics[self._rr:] + topics[:self._rr]
        batch: Batch | None = None
        for i, topic in enumerate(order):
            self._flush_acks(keep=topic)
            last = i == len(order) - 1
            try:
                batch = self._consumer(topic).pull(max=max,
                                                   wait_ms=wait if len(order) == 1 else
                                                   (min(wait, 1000) if last else 0))
            except ApiError as e:
                if e.code == "unknown_member":  # removed: the loop joins again
                    self._wake.set()
                    return Batch([], None, self._consumer(topic))
                raise
            if batch.messages:
                return batch
        assert batch is not None
        return batch

    def consume(self, handler: Callable[[list[dict]], None], stop: threading.Event,
                ) -> int:
        """Pull, ``handler(messages)``, settle, until ``stop`` is set; returns messages handled."""
        n = 0
        while not stop.is_set():
            b = self.pull()
            if b.messages:
                handler(b.messages)
                b.settle()
                n += len(b)
        self._flush_acks()
        return n


__all__ = ["GroupMember", "LakeqError"]
