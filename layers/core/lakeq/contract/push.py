"""Push delivery's wire contract (issue 17), pure: an endpoint's settings as a request states them,
the request signature, and what a failed delivery does next (the retry rule).

- :func:`push_settings`: ``PUT /v1/subscriptions/{id}/push``'s body → a plain dict, 400 otherwise.
  ``url`` must be ``https`` to a public address (:mod:`lakeq.contract.netaddr`; a host name is
  resolved and checked by :mod:`lakeq.push.transport`) with a printable-ASCII path and query;
  plain ``http`` and loopback hosts only when the caller says the stack is local
  (``allow_loopback_http``: the environment flag ``LAKEQ_PUSH_ALLOW_HTTP_LOOPBACK`` that
  ``infra.local`` sets; the template never does). ``headers``: RFC 9110 tokens and field values.
- :func:`sign` / :func:`signature_header` / :func:`verify`: ``X-Lakeq-Signature: t=<ts>,v1=<hex>[,v1=<hex>]``,
  each ``v1`` the hex HMAC-SHA256 of ``"<ts>.<body>"`` under one of the endpoint's valid secrets;
  :func:`signature_headers` adds Standard Webhooks' ``webhook-id`` / ``webhook-timestamp`` /
  ``webhook-signature`` (:func:`webhook_signature`).
- :func:`response_outcomes`: a 2xx answer's body → accept all, per-message outcomes, or a failed
  attempt (cut over :data:`MAX_ANSWER_BYTES`, or not the documented JSON object).
- :func:`after_failure`: a failed delivery of a batch → its messages delivered ``max_attempts``
  times are rejected (dead-lettered), the rest retried after ``retry_delay_ms(n - 1)`` (``n``: the
  most deliveries among them; full jitter, :func:`lakeq.common.backoff.delay`'s formula with the
  endpoint's base and cap).
- :func:`topics_of_records`: the topics a batch of SegmentsTable stream records names (whose
  consumer groups' endpoints PushFunction's stream trigger then looks up in their registry,
  :meth:`lakeq.store.push.GroupPushRepo.groups_of_topic`).
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import json
import os
import re
from dataclasses import dataclass
from typing import Callable
from urllib.parse import urlsplit

from lakeq.common import backoff
from lakeq.common.errors import BadRequest
from lakeq.common.names import check_topic, is_list, split_queue_key, topic_of_log
from lakeq.contract import netaddr

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
MAX_ANSWER_BYTES = 64 * 1024   # a 2xx answer's body: read up to one byte more; longer is a failed attempt
SIGNATURE_HEADER = "X-Lakeq-Signature"
# set by the deliverer or by HTTP/1.1 itself (framing, hop-by-hop, the answer's encoding): never the tenant's
RESERVED_HEADERS = frozenset({"content-type", "content-length", "content-encoding", "host", "user-agent",
                              "x-lakeq-signature", "x-lakeq-subscription", "x-lakeq-group", "x-lakeq-delivery",
                              "webhook-id", "webhook-timestamp", "webhook-signature",
                              "transfer-encoding", "connection", "keep-alive", "te", "trailer", "upgrade",
                              "expect", "proxy-connection", "proxy-authorization", "accept-encoding"})
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


_HOST_NAME = re.compile(r"[a-z0-9_-]+(?:\.[a-z0-9_-]+)*\.?\Z")
_BAD_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")


def ascii_host(host: str) -> str:
    """A URL's host as sent (DNS, ``Host``, TLS SNI): an IPv6 literal as is, a name IDNA-encoded
    (ValueError when it does not encode or is not a host name).

    >>> ascii_host("bücher.example"), ascii_host("::1"), ascii_host("Hooks.Example.com")
    ('xn--bcher-kva.example', '::1', 'hooks.example.com')
    """
    if ":" in host:
        ipaddress.IPv6Address(host.split("%", 1)[0])
        return host
    name = host.encode("idna").decode("ascii").lower() if not host.isascii() else host.lower()
    if not _HOST_NAME.match(name) or len(name) > 253:
        raise ValueError(f"'{host}' is not a host name")
    return name


def check_url(url: object, allow_loopback_http: bool) -> str:
    """The endpoint's URL (400 otherwise): ``https`` (plain ``http`` and loopback hosts only when
    ``allow_loopback_http``, the local stack's flag), a host that IDNA-encodes and, when it is an
    address, a public one (:mod:`lakeq.contract.netaddr`; a host *name* is resolved and checked by
    the caller, and again at every send), no user info, and a path and query of printable ASCII
    with well-formed ``%`` escapes (what HTTP carries as is: nothing to re-encode when sending).

    >>> check_url("https://example.com/hook", False)
    'https://example.com/hook'
    >>> check_url("http://127.0.0.1:9000/h", True)
    'http://127.0.0.1:9000/h'
    >>> for u in ("https://127.0.0.1/", "https://[::ffff:169.254.169.254]/", "https://2130706433/",
    ...           "https://x.example/ü", "https://x.example/%zz", "https://x.example/a\x7f", "https://a b/"):
    ...     try:
    ...         check_url(u, False)
    ...     except BadRequest:
    ...         pass
    ...     else:
    ...         print("accepted", u)
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
    rest = url[len(parts.scheme) + 3 + len(parts.netloc):]
    if any(not 0x20 < ord(c) < 0x7f for c in rest) or _BAD_PERCENT.search(rest):
        raise BadRequest("'url' path and query must be printable ASCII: percent-encode anything else "
                         "(UTF-8 bytes as %XX; a lone '%' as %25)")
    try:
        ascii_host(host)
    except (ValueError, UnicodeError):
        raise BadRequest(f"'url' host '{host}' is not a host name (nor IDNA-encodable)") from None
    if parts.scheme not in ("https", "http"):
        raise BadRequest("'url' must be https")
    loopback = allow_loopback_http and (is_loopback(host) or _literal_loopback(host))
    refusal = netaddr.host_refusal(host, allow_loopback_http)
    if refusal is not None:
        raise BadRequest(f"'url': {refusal}")
    if parts.scheme == "https":
        return url
    if loopback:
        return url
    if is_loopback(host):
        raise BadRequest("'url' must be https (plain http to loopback only on the local stack)")
    raise BadRequest("'url' must be https")


def _literal_loopback(host: str) -> bool:
    try:
        ip = netaddr.literal(host)
    except ValueError:
        return False
    return ip is not None and ip.is_loopback


# RFC 9110 5.6.2 token characters (a field name), and a field value: visible ASCII, obs-text
# (0x80-0xFF, sent as latin-1), spaces and tabs inside (not around) it
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+\Z")
_FIELD_VALUE = re.compile(r"(?:[\x21-\x7e\x80-\xff](?:[\x20\x09\x21-\x7e\x80-\xff]*[\x21-\x7e\x80-\xff])?)?\Z")


def _headers(raw: object) -> dict[str, str]:
    """The endpoint's extra headers: at most :data:`MAX_HEADERS`, names RFC 9110 tokens (each name
    once, whatever its case) that are not :data:`RESERVED_HEADERS` (nor ``X-Lakeq-…``), values
    what an HTTP field carries (no control characters, CR, LF or NUL, nothing beyond latin-1, no
    leading or trailing space).

    >>> _headers({"X-Team": "risk", "Authorization": "Bearer a.b"})
    {'X-Team': 'risk', 'Authorization': 'Bearer a.b'}
    >>> for h in ({"X A": "1"}, {"Ünï": "1"}, {"X-A": "a\x01"}, {"X-A": "€"}, {"X-A": " a"}, {"x-a": "1", "X-A": "2"},
    ...           {"webhook-id": "1"}, {"Transfer-Encoding": "chunked"}, {"X-Lakeq-Anything": "1"}):
    ...     try:
    ...         _headers(h)
    ...     except BadRequest:
    ...         pass
    ...     else:
    ...         print("accepted", h)
    """
    if raw is None:
        return {}
    if not isinstance(raw, dict) or len(raw) > MAX_HEADERS:
        raise BadRequest(f"'headers' must be an object of at most {MAX_HEADERS} string headers")
    out: dict[str, str] = {}
    for k, v in raw.items():
        if (not isinstance(k, str) or not isinstance(v, str) or len(k) > 128 or len(v) > MAX_HEADER_LEN
                or not _TOKEN.match(k) or not _FIELD_VALUE.match(v)):
            raise BadRequest("each of 'headers' must be an HTTP token name (RFC 9110: letters, digits and "
                             "!#$%&'*+-.^_`|~) with a one-line value of visible latin-1 characters and inner "
                             f"spaces (at most {MAX_HEADER_LEN} characters)")
        if k.lower() in RESERVED_HEADERS or k.lower().startswith("x-lakeq-"):
            raise BadRequest(f"header '{k}' is set by lakeq (or by HTTP itself)")
        if any(k.lower() == x.lower() for x in out):
            raise BadRequest(f"header '{k}' is given twice")
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


_TS, _HEX64 = re.compile(r"[0-9]{1,15}\Z"), re.compile(r"[0-9a-fA-F]{64}\Z")
WEBHOOK_ID, WEBHOOK_TIMESTAMP, WEBHOOK_SIGNATURE = "webhook-id", "webhook-timestamp", "webhook-signature"
SECRET_PREFIX = "whsec_"


def new_secret() -> str:
    """A signing secret as Standard Webhooks writes one: ``whsec_`` + the standard base64 of 32
    random bytes (the HMAC key of ``webhook-signature``; the whole string is the key of
    ``X-Lakeq-Signature``)."""
    return SECRET_PREFIX + base64.b64encode(os.urandom(32)).decode("ascii")


def webhook_key(secret: str) -> bytes:
    """The HMAC key of ``webhook-signature``: the base64 after ``whsec_`` (standard or URL-safe
    alphabet, padding optional: the endpoints' secrets issued before Standard Webhooks signing were
    URL-safe).

    >>> webhook_key("whsec_AAEC/w=="), webhook_key("whsec_AAEC_w")
    (b'\\x00\\x01\\x02\\xff', b'\\x00\\x01\\x02\\xff')
    """
    rest = secret[len(SECRET_PREFIX):] if secret.startswith(SECRET_PREFIX) else secret
    rest = rest.rstrip("=")
    return base64.urlsafe_b64decode(rest.replace("+", "-").replace("/", "_") + "=" * (-len(rest) % 4))


def webhook_id(kind: str, name: str, message_ids: list[str]) -> str:
    """``webhook-id``: the same for every attempt at the same messages of the same endpoint (a retry
    of a batch carries its id; a released part retried alone is another batch, another id).

    >>> webhook_id("subscription", "s1", ["a", "b"]) == webhook_id("subscription", "s1", ["b", "a"])
    True
    >>> webhook_id("subscription", "s1", ["a"]) != webhook_id("group", "s1", ["a"])
    True
    """
    h = hashlib.sha256("\n".join([kind, name, *sorted(message_ids)]).encode("utf-8"))
    return "msg_" + h.hexdigest()[:32]


def webhook_signature(secrets: list[str], msg_id: str, ts: int, body: bytes) -> str:
    """``webhook-signature``: ``v1,<base64 HMAC-SHA256 of "<id>.<ts>.<body>">`` per valid secret,
    space-separated (two while a rotation's previous secret lives)."""
    content = f"{msg_id}.{ts}.".encode("ascii") + body
    return " ".join("v1," + base64.b64encode(hmac.new(webhook_key(s), content, hashlib.sha256).digest()).decode()
                    for s in secrets)


def signature_headers(secrets: list[str], ts: int, body: bytes, msg_id: str) -> dict[str, str]:
    """Every signature header of a push request: lakeq's ``X-Lakeq-Signature`` and Standard
    Webhooks' ``webhook-id`` / ``webhook-timestamp`` / ``webhook-signature``, each under every one of
    ``secrets`` (the endpoint's valid secrets, newest first)."""
    return {SIGNATURE_HEADER: signature_header(secrets, ts, body), WEBHOOK_ID: msg_id, WEBHOOK_TIMESTAMP: str(ts),
            WEBHOOK_SIGNATURE: webhook_signature(secrets, msg_id, ts, body)}


def parse_header(value: str) -> tuple[int | None, list[str]]:
    """
    >>> parse_header("t=5,v1=" + "ab" * 32)
    (5, ['abababababababababababababababababababababababababababababababab'])
    >>> parse_header("garbage"), parse_header("t=²,v1=é")
    ((None, []), (None, []))
    """
    ts, sigs = None, []
    for part in (value or "").split(","):
        k, _, v = part.strip().partition("=")
        if k == "t" and _TS.match(v):  # ASCII digits (str.isdigit admits '²', which int() refuses)
            ts = int(v)
        elif k == "v1" and _HEX64.match(v):
            sigs.append(v.lower())
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
    """A 2xx answer's body → None (the whole batch is accepted: an empty body — nothing, or only
    whitespace — or a JSON object without ``release`` / ``reject``), an :class:`Answer`, or
    :data:`FAILED`, a failed attempt retried as any other (never a silent accept): a body longer
    than :data:`MAX_ANSWER_BYTES` (cut: its outcomes cannot be known), one that is not a JSON
    object, or an object that names outcomes wrongly (not lists of positions ``0 <= i < n``, or a
    position in both) — the endpoint's mistake must not settle messages it did not mean to.

    >>> response_outcomes(b"", 3) is None and response_outcomes(b" \\r\\n", 3) is None
    True
    >>> response_outcomes(b'{"ok": true}', 3) is None
    True
    >>> a = response_outcomes(b'{"release": [2], "reject": [0]}', 3)
    >>> sorted(a.release), sorted(a.reject)
    ([2], [0])
    >>> response_outcomes(b'{"release": [3]}', 3) is FAILED, response_outcomes(b'{"reject": "0"}', 3) is FAILED
    (True, True)
    >>> [response_outcomes(x, 3) is FAILED for x in (b"OK", b"[]", b'"x"', b'{"release": [0', b"\\xff",
    ...                                              b'{"release": []}' + b" " * MAX_ANSWER_BYTES)]
    [True, True, True, True, True, True]
    """
    raw = raw or b""
    if len(raw) > MAX_ANSWER_BYTES:
        return FAILED
    if not raw.strip():
        return None
    try:
        value = json.loads(raw, object_pairs_hook=_no_duplicate_outcomes)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return FAILED
    if not isinstance(value, dict):
        return FAILED
    if "release" not in value and "reject" not in value:
        return None
    lists = []
    for k in ("release", "reject"):
        xs = value.get(k)
        xs = [] if xs is None else xs  # (null: none; any other non-list — 0, false, "", {} — is a mistake)
        if not isinstance(xs, list) or any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < n
                                           for i in xs):
            return FAILED
        lists.append(frozenset(xs))
    if lists[0] & lists[1]:
        return FAILED
    return Answer(lists[0], lists[1])


def _no_duplicate_outcomes(pairs: list) -> dict:
    """json.loads keeps a repeated key's last value: an object naming ``release`` or ``reject`` twice
    is ambiguous (ValueError: a failed attempt), not the last list alone."""
    keys = [k for k, _ in pairs if k in ("release", "reject")]
    if len(keys) != len(set(keys)):
        raise ValueError("an outcome list named twice")
    return dict(pairs)


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
        if not isinstance(pq, str) or not pq or is_list(pq):
            continue
        log, _ = split_queue_key(pq)
        if log:
            seen.setdefault(topic_of_log(log), None)
    return list(seen)
