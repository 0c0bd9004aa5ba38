"""The HTTP layer: a swappable transport, typed errors, timeouts and retries with backoff + jitter.

Retries happen only for calls that are safe to repeat (``idempotent=True``): a 5xx, a 429 or a
connection error / timeout is retried with exponential backoff and full jitter (``Retry-After`` on
a 429 is honoured as a lower bound). A 4xx other than 429 is the caller's mistake and is raised at
once as :class:`ApiError`. Calls that are not safe to repeat (creating a topic, a client or a key,
growing a topic, subscribing) are sent once.
"""
from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import quote

DEFAULT_URL = "http://127.0.0.1:3000"


class LakeqError(Exception):
    """Base of every error this client raises."""


class ApiError(LakeqError):
    """The API answered with an error: ``{"error": {"code", "message"}}`` and its HTTP status."""

    def __init__(self, status: int, code: str, message: str, body: Any = None):
        super().__init__(f"{status} {code}: {message}")
        self.status, self.code, self.message, self.body = status, code, message, body

    @property
    def retryable(self) -> bool:
        return self.status >= 500 or self.status == 429


class TransportError(LakeqError):
    """The request got no HTTP answer (connection refused or reset, timeout)."""


@dataclass(frozen=True)
class Response:
    status: int
    headers: Mapping[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


class Transport(Protocol):
    """Sends one HTTP request. Raises :class:`TransportError` when there is no answer."""

    def send(self, method: str, url: str, *, params: Mapping[str, str] | None, body: bytes | None,
             headers: Mapping[str, str], timeout: tuple[float, float]) -> Response: ...


class RequestsTransport:
    """The default transport: one ``requests.Session`` (connection pooling), thread-safe enough for
    this client's use (one request at a time per thread)."""

    def __init__(self) -> None:
        import requests

        self._requests = requests
        self._session = requests.Session()

    def send(self, method: str, url: str, *, params: Mapping[str, str] | None, body: bytes | None,
             headers: Mapping[str, str], timeout: tuple[float, float]) -> Response:
        try:
            r = self._session.request(method, url, params=params, data=body, headers=dict(headers),
                                      timeout=timeout)
        except (self._requests.ConnectionError, self._requests.Timeout) as e:
            raise TransportError(f"{method} {url}: {e}") from e
        return Response(r.status_code, r.headers, r.content)

    def close(self) -> None:
        self._session.close()


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with full jitter: before retry ``n`` (1-based) sleep a uniform random
    time in ``[0, min(max_delay, base_delay * 2**(n-1))]``; at most ``max_attempts`` sends."""

    max_attempts: int = 5
    base_delay: float = 0.1
    max_delay: float = 5.0

    def delay(self, retry: int, rng: random.Random, retry_after: float | None = None) -> float:
        cap = min(self.max_delay, self.base_delay * (2 ** (retry - 1)))
        d = rng.uniform(0, cap)
        if retry_after is not None:
            d = max(d, min(retry_after, self.max_delay))
        return d


NO_RETRY = RetryPolicy(max_attempts=1)


def encode(payload: Any) -> bytes:
    """Compact UTF-8 JSON, as the server measures request sizes."""
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()


def seg(name: str) -> str:
    """A path segment (a topic's ``/`` is sent as ``%2F``)."""
    return quote(name, safe="")


@dataclass
class Connection:
    """Base URL, key, timeouts and retry policy shared by the client classes.

    ``timeout`` is the (connect, read) timeout in seconds; a long poll adds its ``wait_ms`` to the
    read timeout. ``sleep`` and ``rng`` are injectable for tests.
    """

    url: str = DEFAULT_URL
    key: str | None = None
    timeout: tuple[float, float] = (5.0, 30.0)
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    transport: Transport | None = None
    sleep: Callable[[float], None] = time.sleep
    rng: random.Random = field(default_factory=random.Random)

    def __post_init__(self) -> None:
        self.url = self.url.rstrip("/")
        if self.transport is None:
            self.transport = RequestsTransport()

    def call(self, method: str, path: str, *, params: Mapping[str, Any] | None = None,
             json_body: Any = None, idempotent: bool, extra_wait: float = 0.0) -> Any:
        """One API call; returns the decoded JSON body (``None`` for 204). Raises
        :class:`ApiError` or :class:`TransportError` after the retries allowed."""
        headers = {"Accept": "application/json"}
        if self.key:
            headers["Authorization"] = f"Bearer {self.key}"
        body = None
        if json_body is not None:
            body = encode(json_body)
            headers["Content-Type"] = "application/json"
        q = {k: str(v) for k, v in (params or {}).items() if v is not None}
        timeout = (self.timeout[0], self.timeout[1] + extra_wait)
        attempts = self.retry.max_attempts if idempotent else 1
        assert self.transport is not None
        for attempt in range(1, attempts + 1):
            retry_after: float | None = None
            try:
                r = self.transport.send(method, self.url + path, params=q or None, body=body,
                                        headers=headers, timeout=timeout)
            except TransportError:
                if attempt >= attempts:
                    raise
            else:
                if r.status < 400:
                    return r.json()
                err = _api_error(r)
                if not err.retryable or attempt >= attempts:
                    raise err
                ra = r.headers.get("Retry-After") if r.headers else None
                if ra is not None:
                    try:
                        retry_after = float(ra)
                    except ValueError:
                        retry_after = None
            self.sleep(self.retry.delay(attempt, self.rng, retry_after))
        raise AssertionError("unreachable")


def _api_error(r: Response) -> ApiError:
    try:
        body = r.json()
        e = body["error"]
        return ApiError(r.status, str(e["code"]), str(e.get("message", "")), body)
    except (ValueError, KeyError, TypeError):
        text = r.body[:500].decode("utf-8", "replace")
        return ApiError(r.status, "http_error", text or f"HTTP {r.status}", None)
