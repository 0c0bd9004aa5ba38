"""Push delivery's wire contract (issue 17), pure: an endpoint's settings as a request states them,
the request signature, and what a failed delivery does next (the retry rule).

- :func:`push_settings`: ``PUT /v1/subscriptions/{id}/push``'s body → a plain dict, 400 otherwise.
  ``url`` must be ``https``; plain ``http`` only to a loopback host and only when the caller says
  the stack is local (``allow_loopback_http``: the environment flag ``LAKEQ_PUSH_ALLOW_HTTP_LOOPBACK``
  that ``infra.local`` sets; the template never does).
- :func:`sign` / :func:`signature_header` / :func:`verify`: ``X-Lakeq-Signature: t=<ts>,v1=<hex>[,v1=<hex>]``,
  each ``v1`` the hex HMAC-SHA256 of ``"<ts>.<body>"`` under one of the endpoint's valid secrets.
- :func:`after_failure`: a failed delivery of a batch → its messages delivered ``max_attempts``
  times are rejected (dead-lettered), the rest retried after ``retry_delay_ms(n - 1)`` (``n``: the
  most deliveries among them; full jitter, :func:`lakeq.common.backoff.delay`'s formula with the
  endpoint's base and cap).
- :func:`topics_of_records`: the topics a batch of SegmentsTable stream records names (whose
  consumer groups' endpoints PushFunction's stream trigger then looks up in their registry,
  :meth:`lakeq.store.push.GroupPushRepo.groups_of_topic`).
"""
from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
from dataclasses import dataclass
from typing import Callable
from urllib.parse import urlsplit

from lakeq.common import backoff
from lakeq.common.errors import BadRequest
from lakeq.common.names import check_topic, topic_of_log

BATCH_MIN, BATCH_MAX, BATCH_DEFAULT = 1, 100, 10
IN_FLIGHT_MIN = 1
IN_FLIGHT_MAX = 10            # a consumer group's endpoint: requests in flight at once (queues locked in parallel)
IN_FLIGHT_MAX_SUBSCRIPTION = 1  # a subscription's list is one queue with one lock: one batch in flight
TIMEOUT_MIN, TIMEOUT_MAX, TIMEOUT_DEFAULT = 100, 10_000, 5_000
ATTEMPTS_MIN, ATTEMPTS_MAX, ATTEMPTS_DEFAULT = 1, 100, 10
BASE_MIN, BASE_MAX, BASE_DEFAULT = 100, 3_600_000, 1_000
CAP_MIN, CAP_MAX, CAP_DEFAULT = 100, 43_200_000, 300_000
MAX_HEADERS, MAX_HEADER_LEN = 16, 1024
MAX_URL_LEN = 2048
SIGNATURE_HEADER = "X-Lakeq-Signature"
RESERVED_HEADERS = frozenset({"content-type", "content-length", "host", "x-lakeq-signature",
                              "x-lakeq-subscription", "x-lakeq-group", "x-lakeq-delivery", "user-agent"})
FIELDS = frozenset({"url", "headers", "batch_size", "max_in_flight", "timeout_ms", "retry", "rate"})
GROUP_FIELDS = FIELDS | {"topic"}  # a group's endpoint names the topic it delivers
RATE_MIN, RATE_MAX = 0.01, 1000.0  # messages per second
RETRY_FIELDS = frozenset({"max_attempts", "backoff_base_ms", "backoff_cap_ms"})


def _int(body: dict, name: str, lo: int, hi: int, default: int) -> int:
    v = body.get(name, default)
    if v is None:
        v = default
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise BadRequest(f"'{name}' must be an integer from {lo} to {hi}")
    return v


def is_loopback(host: str) -> bool:
    """
    >>> [is_loopback(h) for h in ("127.0.0.1", "localhost", "::1", "10.0.0.1", "example.com")]
    [True, True, True, False, False]
    """
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_url(url: object, allow_loopback_http: bool) -> str:
    """
    >>> check_url("https://example.com/hook", False)
    'https://example.com/hook'
    >>> check_url("http://127.0.0.1:9000/h", True)
    'http://127.0.0.1:9000/h'
    """
    if not isinstance(url, str) or not url or len(url) > MAX_URL_LEN:
        raise BadRequest(f"'url' must be an https URL of at most {MAX_URL_LEN} characters")
    try:
        parts = urlsplit(url)
        host = parts.hostname
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        raise BadRequest("'url' is not a valid URL") from None
    if not host or parts.username is not None or parts.password is not None or any(c.isspace() for c in url):
        raise BadRequest("'url' must name a host (and carry no credentials or spaces)")
    if parts.scheme == "https":
        return url
    if parts.scheme == "http" and allow_loopback_http and is_loopback(host):
        return url
    if parts.scheme == "http" and is_loopback(host):
        raise BadRequest("'url' must be https (plain http to loopback only on the local stack)")
    raise BadRequest("'url' must be https")


def _headers(raw: object) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, dict) or len(raw) > MAX_HEADERS:
        raise BadRequest(f"'headers' must be an object of at most {MAX_HEADERS} string headers")
    out = {}
    for k, v in raw.items():
        if (not isinstance(k, str) or not isinstance(v, str) or not k or len(k) > 128 or len(v) > MAX_HEADER_LEN
                or not all(c.isalnum() or c in "-_" for c in k) or any(c in v for c in "\r\n\0")):
            raise BadRequest("each of 'headers' must be a token name with a one-line string value "
                             f"(at most {MAX_HEADER_LEN} characters)")
        if k.lower() in RESERVED_HEADERS:
            raise BadRequest(f"header '{k}' is set by lakeq")
        out[k] = v
    return out


def push_settings(body: dict, allow_loopback_http: bool, group: bool = False) -> dict:
    """The endpoint's settings from a ``PUT …/push`` body (unknown fields → 400, defaults filled in).
    ``group``: a consumer group's endpoint (``PUT /v1/groups/{group}/push``): ``topic`` is
    required and ``max_in_flight`` may be up to :data:`IN_FLIGHT_MAX`; a subscription's must be 1.

    >>> s = push_settings({"url": "https://x.example/h"}, False)
    >>> (s["batch_size"], s["max_in_flight"], s["timeout_ms"], s["retry"]["max_attempts"])
    (10, 1, 5000, 10)
    >>> push_settings({"url": "https://x.example/h", "topic": "a/b", "max_in_flight": 4}, False, group=True)["topic"]
    'a/b'
    """
    fields = GROUP_FIELDS if group else FIELDS
    unknown = sorted(set(body) - fields)
    if unknown:
        raise BadRequest(f"unknown field(s) {unknown}; push settings take {sorted(fields)}")
    url = check_url(body.get("url"), allow_loopback_http)
    headers = _headers(body.get("headers"))
    batch = _int(body, "batch_size", BATCH_MIN, BATCH_MAX, BATCH_DEFAULT)
    if not group and body.get("max_in_flight") not in (None, 1) and _int(body, "max_in_flight", IN_FLIGHT_MIN,
                                                                           IN_FLIGHT_MAX, 1):
        raise BadRequest("'max_in_flight' must be 1 for a subscription: its list is one queue with one lock, so "
                         "one batch is in flight at a time (a consumer group's endpoint sends in parallel)")
    in_flight = _int(body, "max_in_flight", IN_FLIGHT_MIN, IN_FLIGHT_MAX, 1)
    timeout = _int(body, "timeout_ms", TIMEOUT_MIN, TIMEOUT_MAX, TIMEOUT_DEFAULT)
    retry = body.get("retry") or {}
    if not isinstance(retry, dict) or set(retry) - RETRY_FIELDS:
        raise BadRequest(f"'retry' must be an object with {sorted(RETRY_FIELDS)}")
    r = {"max_attempts": _int(retry, "max_attempts", ATTEMPTS_MIN, ATTEMPTS_MAX, ATTEMPTS_DEFAULT),
         "backoff_base_ms": _int(retry, "backoff_base_ms", BASE_MIN, BASE_MAX, BASE_DEFAULT),
         "backoff_cap_ms": _int(retry, "backoff_cap_ms", CAP_MIN, CAP_MAX, CAP_DEFAULT)}
    if r["backoff_cap_ms"] < r["backoff_base_ms"]:
        raise BadRequest("'retry.backoff_cap_ms' must be at least 'retry.backoff_base_ms'")
    rate = body.get("rate")
    if rate is not None and (isinstance(rate, bool) or not isinstance(rate, (int, float))
                             or not RATE_MIN <= rate <= RATE_MAX):
        raise BadRequest(f"'rate' must be a number of messages per second from {RATE_MIN} to {RATE_MAX:g} (or null)")
    out = {"url": url, "headers": headers, "batch_size": batch, "max_in_flight": in_flight,
           "timeout_ms": timeout, "retry": r, "rate": rate}
    if group:
        out["topic"] = check_topic(body.get("topic"))
    return out


def slot_ms(messages: int, rate: float) -> int:
    """How long ``messages`` take of an endpoint's ``rate`` (messages per second), rounded up.

    >>> slot_ms(3, 2), slot_ms(1, 1000), slot_ms(0, 5)
    (1500, 1, 0)
    """
    return int(-(-messages * 1000 // rate))


# --- signatures -----------------------------------------------------------------------------------
def sign(secret: str, ts: int, body: bytes) -> str:
    """Hex HMAC-SHA256 of ``b"<ts>." + body`` under ``secret``.

    >>> sign("k", 1, b"{}") == hmac.new(b"k", b"1.{}", hashlib.sha256).hexdigest()
    True
    """
    return hmac.new(secret.encode("utf-8"), str(ts).encode("ascii") + b"." + body, hashlib.sha256).hexdigest()


def signature_header(secrets: list[str], ts: int, body: bytes) -> str:
    """``t=<ts>,v1=<hex>`` with one ``v1`` per valid secret (two while a rotation's old one lives)."""
    return ",".join([f"t={ts}"] + [f"v1={sign(s, ts, body)}" for s in secrets])


def parse_header(value: str) -> tuple[int | None, list[str]]:
    """
    >>> parse_header("t=5,v1=ab,v1=cd")
    (5, ['ab', 'cd'])
    >>> parse_header("garbage")
    (None, [])
    """
    ts, sigs = None, []
    for part in (value or "").split(","):
        k, _, v = part.strip().partition("=")
        if k == "t" and v.isdigit():
            ts = int(v)
        elif k == "v1" and v:
            sigs.append(v)
    return ts, sigs


def verify(header: str, body: bytes, secret: str, now_s: int, tolerance_s: int = 300) -> bool:
    """Whether ``header`` carries a ``v1`` of ``body`` under ``secret`` with a timestamp within
    ``tolerance_s`` of ``now_s`` (constant-time comparison)."""
    ts, sigs = parse_header(header)
    if ts is None or abs(now_s - ts) > tolerance_s:
        return False
    want = sign(secret, ts, body)
    return any(hmac.compare_digest(want, s) for s in sigs)


# --- the retry rule -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Next:
    """What follows a failed delivery: ``reject`` these offsets now (dead-lettered: they reached
    ``max_attempts``), and retry the rest after ``delay_ms`` (None: nothing left to retry)."""

    reject: tuple[int, ...]
    delay_ms: int | None


def retry_delay_ms(attempt: int, retry: dict, rand: Callable[[float, float], float] | None = None) -> int:
    """Milliseconds before retry ``attempt`` (0-based): full jitter in
    ``[0, min(cap, base * 2**attempt)]`` (:func:`lakeq.common.backoff.delay`), at least 1 ms.

    >>> retry_delay_ms(3, {"backoff_base_ms": 1000, "backoff_cap_ms": 5000}, rand=lambda a, b: b)
    5000
    """
    kw = {} if rand is None else {"rand": rand}
    s = backoff.delay(attempt, retry["backoff_base_ms"] / 1000, retry["backoff_cap_ms"] / 1000, **kw)
    return max(1, int(s * 1000))


def after_failure(deliveries: dict[int, int], retry: dict,
                  rand: Callable[[float, float], float] | None = None) -> Next:
    """A failed delivery of a batch (``deliveries``: each offset's deliveries, this attempt
    included): the offsets that reached ``max_attempts`` are rejected, the others retried after
    the backoff of the most-delivered one (attempt ``n - 1`` waits ``retry_delay_ms(n - 1)``).

    >>> r = {"max_attempts": 3, "backoff_base_ms": 10, "backoff_cap_ms": 10}
    >>> after_failure({4: 3, 5: 1}, r, rand=lambda a, b: b)
    Next(reject=(4,), delay_ms=10)
    >>> after_failure({4: 3}, r)
    Next(reject=(4,), delay_ms=None)
    """
    reject = tuple(sorted(o for o, n in deliveries.items() if n >= retry["max_attempts"]))
    rest = [n for o, n in deliveries.items() if n < retry["max_attempts"]]
    return Next(reject, retry_delay_ms(max(rest) - 1, retry, rand) if rest else None)


@dataclass(frozen=True)
class Answer:
    """Per-message outcomes of a 2xx answer: positions (0-based, in the request's ``messages``) to
    release (retried with the backoff) and to reject (dead-lettered now); the rest are accepted."""

    release: frozenset[int]
    reject: frozenset[int]


FAILED = Answer(frozenset({-1}), frozenset({-1}))  # not an answer: the delivery failed


def response_outcomes(raw: bytes | None, n: int) -> Answer | None:
    """A 2xx answer's body → None (the whole batch is accepted: an empty body, not JSON, or an object
    without ``release`` / ``reject``), an :class:`Answer`, or :data:`FAILED` when the object names
    outcomes wrongly (not lists of positions ``0 <= i < n``, or a position in both): the endpoint's
    mistake must not settle messages it did not mean to, so the batch is retried.

    >>> response_outcomes(b"", 3) is None and response_outcomes(b'{"ok": true}', 3) is None
    True
    >>> a = response_outcomes(b'{"release": [2], "reject": [0]}', 3)
    >>> sorted(a.release), sorted(a.reject)
    ([2], [0])
    >>> response_outcomes(b'{"release": [3]}', 3) is FAILED, response_outcomes(b'{"reject": "0"}', 3) is FAILED
    (True, True)
    """
    try:
        value = json.loads(raw or b"")
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(value, dict) or ("release" not in value and "reject" not in value):
        return None
    lists = []
    for k in ("release", "reject"):
        xs = value.get(k) or []
        if not isinstance(xs, list) or any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < n
                                           for i in xs):
            return FAILED
        lists.append(frozenset(xs))
    if lists[0] & lists[1]:
        return FAILED
    return Answer(lists[0], lists[1])


def encode(settings: dict) -> str:
    return json.dumps(settings, separators=(",", ":"), sort_keys=True)


def topics_of_records(records) -> list[str]:
    """The topics whose logs got a segment in a batch of SegmentsTable stream records (INSERTs of
    ``pq = "<log>#<queue>"``; a subscription list's ``~<id>#0`` is not a topic), each once, in
    first-seen order: every incarnation ``<topic>!<n>`` of a topic names the topic.

    >>> recs = [{"eventName": "INSERT", "dynamodb": {"Keys": {"pq": {"S": p}}}}
    ...         for p in ("quotes#1", "~s1#0", "quotes!2#0", "risk/a#3", "quotes#0")]
    >>> topics_of_records(recs + [{"eventName": "REMOVE", "dynamodb": {"Keys": {"pq": {"S": "x#0"}}}}])
    ['quotes', 'risk/a']
    """
    seen: dict[str, None] = {}
    for r in records:
        if r.get("eventName") != "INSERT":
            continue
        pq = (((r.get("dynamodb") or {}).get("Keys") or {}).get("pq") or {}).get("S")
        if not isinstance(pq, str) or not pq or pq.startswith("~"):
            continue
        log, sep, _ = pq.rpartition("#")
        if sep and log:
            seen.setdefault(topic_of_log(log), None)
    return list(seen)
