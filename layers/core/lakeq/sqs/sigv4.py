"""AWS Signature Version 4 verification (pure: no AWS imports).

What an AWS SDK does to sign a request, done again on the receiving side
(https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_sigv-create-signed-request.html):

1. the *canonical request*: method, the URI-encoded normalised path, the canonical query string
   (each name and value percent-decoded then encoded again with only ``A-Za-z0-9-_.~`` left
   bare, sorted), the signed headers (lower-cased name, value with runs of white space folded to
   one space, joined with ``,`` when repeated), the ``;``-joined signed header names and the
   payload's sha-256 hex (``x-amz-content-sha256``, when sent, must be that hash; a presigned
   request with no body may also have signed ``UNSIGNED-PAYLOAD``, as S3's do);
2. the *string to sign*: ``AWS4-HMAC-SHA256``, the request time, the credential scope
   ``<yyyymmdd>/<region>/<service>/aws4_request`` and the sha-256 hex of the canonical request;
3. the signing key: HMAC-SHA256 chained over ``"AWS4" + secret``, the date, region, service and
   ``aws4_request``; the signature is the hex HMAC of the string to sign, compared in constant time.

Both forms are read: the ``Authorization: AWS4-HMAC-SHA256 Credential=…, SignedHeaders=…,
Signature=…`` header and the presigned query (``X-Amz-Algorithm``, ``X-Amz-Credential``,
``X-Amz-Date``, ``X-Amz-Expires``, ``X-Amz-SignedHeaders``, ``X-Amz-Signature``).

Errors are :class:`SigV4Error` with AWS's codes: ``MissingAuthenticationToken`` (no signature at
all), ``IncompleteSignature`` (a signature that does not parse, or leaves out ``host``),
``SignatureDoesNotMatch`` (wrong service, wrong secret, any signed part changed) and
``RequestExpired`` (request time more than :data:`MAX_SKEW_S` from now, or a presigned URL past
``X-Amz-Expires``). The scope's region is not checked: a client may be configured with any
region (the signature still covers the region it chose).

>>> key = signing_key("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "20120215", "us-east-1", "iam")
>>> key.hex()[:16]
'f4780e2d9f65fa89'
"""
from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Mapping
from urllib.parse import quote, unquote_plus

from lakeq.common.errors import LakeqError

ALGORITHM = "AWS4-HMAC-SHA256"
MAX_SKEW_S = 15 * 60  # AWS: a request time more than 15 minutes from the server's clock expires
MAX_EXPIRES_S = 7 * 24 * 3600  # presigned URLs: X-Amz-Expires at most 7 days
UNSIGNED_PAYLOAD = "UNSIGNED-PAYLOAD"
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()

_AMZ_DATE = re.compile(r"^\d{8}T\d{6}Z$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


class SigV4Error(LakeqError):
    """A request whose signature is missing, malformed, wrong or too old (``code``: AWS's)."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


def _missing(msg: str) -> SigV4Error:
    return SigV4Error("MissingAuthenticationToken", msg)


def _incomplete(msg: str) -> SigV4Error:
    return SigV4Error("IncompleteSignature", msg)


def _mismatch(msg: str) -> SigV4Error:
    return SigV4Error("SignatureDoesNotMatch", msg)


@dataclass(frozen=True)
class Signature:
    """What a request says about its own signature (not yet verified)."""

    access_key_id: str
    date: str  # yyyymmdd, the scope's
    region: str
    service: str
    signed_headers: tuple[str, ...]
    signature: str  # hex
    amz_date: str  # yyyymmddTHHMMSSZ
    presigned: bool = False
    expires_s: int | None = None  # presigned only

    @property
    def scope(self) -> str:
        return f"{self.date}/{self.region}/{self.service}/aws4_request"


# --- canonical pieces ---------------------------------------------------------------------------
def lower_headers(headers: Mapping[str, str] | None) -> dict[str, str]:
    """Header names lower-cased; repeated names (different case) joined with ``,``."""
    out: dict[str, str] = {}
    for k, v in (headers or {}).items():
        k = str(k).lower()
        v = v.decode("latin-1") if isinstance(v, bytes) else str(v)
        out[k] = f"{out[k]},{v}" if k in out else v
    return out


def _remove_dot_segments(path: str) -> str:
    """RFC 3986 5.2.4, and empty segments dropped (AWS folds ``//``), as the SDKs do.

    >>> _remove_dot_segments("/a/./b/../c//d/")
    '/a/c/d/'
    """
    if not path:
        return "/"
    out: list[str] = []
    for seg in path.split("/"):
        if seg and seg != ".":
            if seg == "..":
                if out:
                    out.pop()
            else:
                out.append(seg)
    first = "/" if path[0] == "/" else ""
    last = "/" if path[-1] == "/" and out else ""
    return first + "/".join(out) + last


def canonical_uri(raw_path: str) -> str:
    """The path as sent (still percent-encoded), normalised and encoded once more (AWS encodes
    each segment twice for every service but S3).

    >>> canonical_uri("/000000000000/my%20queue")
    '/000000000000/my%2520queue'
    >>> canonical_uri("")
    '/'
    """
    return quote(_remove_dot_segments(raw_path or "/"), safe="/~")


def _enc(s: str) -> str:
    return quote(s, safe="-_.~")


def canonical_query(raw_query: str, drop: tuple[str, ...] = ()) -> str:
    """Each ``name=value`` decoded (``+`` is a space) and encoded again AWS's way, sorted by
    encoded name then value; names in ``drop`` (the presigned ``X-Amz-Signature``) left out.

    >>> canonical_query("b=2&a=x y&a=%7e&c")
    'a=x%20y&a=~&b=2&c='
    """
    pairs: list[tuple[str, str]] = []
    for part in (raw_query or "").split("&"):
        if not part:
            continue
        k, _, v = part.partition("=")
        k, v = unquote_plus(k), unquote_plus(v)
        if k in drop:
            continue
        pairs.append((_enc(k), _enc(v)))
    return "&".join(f"{k}={v}" for k, v in sorted(pairs))


def _trimall(value: str) -> str:
    return " ".join(value.split())


def canonical_headers(headers: Mapping[str, str], signed: tuple[str, ...]) -> str:
    lines = []
    for name in signed:
        if name not in headers:
            raise _mismatch(f"signed header '{name}' is missing from the request")
        lines.append(f"{name}:{_trimall(headers[name])}")
    return "\n".join(lines) + "\n"


def payload_hash(headers: Mapping[str, str], body: bytes) -> str:
    actual = hashlib.sha256(body).hexdigest()
    sent = headers.get("x-amz-content-sha256")
    if sent is not None and sent != actual:
        # the header is what the client signed; it must be the body's hash (no unsigned bodies)
        raise _mismatch("x-amz-content-sha256 does not match the request body")
    return actual


def canonical_request(method: str, raw_path: str, raw_query: str, headers: Mapping[str, str],
                      signed: tuple[str, ...], payload: str, drop: tuple[str, ...] = ()) -> str:
    return "\n".join([
        method.upper(),
        canonical_uri(raw_path),
        canonical_query(raw_query, drop),
        canonical_headers(headers, signed),
        ";".join(signed),
        payload,
    ])


def string_to_sign(amz_date: str, scope: str, canonical: str) -> str:
    return "\n".join([ALGORITHM, amz_date, scope, hashlib.sha256(canonical.encode("utf-8")).hexdigest()])


def _hmac(key: bytes, msg: str) -> bytes:
    return hmac.new(key, msg.encode("utf-8"), hashlib.sha256).digest()


def signing_key(secret: str, date: str, region: str, service: str) -> bytes:
    k = _hmac(("AWS4" + secret).encode("utf-8"), date)
    k = _hmac(k, region)
    k = _hmac(k, service)
    return _hmac(k, "aws4_request")


def signature_of(secret: str, sig: Signature, method: str, raw_path: str, raw_query: str,
                 headers: Mapping[str, str], body: bytes, unsigned_payload: bool = False) -> str:
    """The hex signature the holder of ``secret`` would have sent for this request."""
    h = lower_headers(headers)
    drop = ("X-Amz-Signature",) if sig.presigned else ()
    payload = UNSIGNED_PAYLOAD if unsigned_payload else payload_hash(h, body)
    canonical = canonical_request(method, raw_path, raw_query, h, sig.signed_headers, payload, drop)
    sts = string_to_sign(sig.amz_date, sig.scope, canonical)
    return hmac.new(signing_key(secret, sig.date, sig.region, sig.service), sts.encode("utf-8"),
                    hashlib.sha256).hexdigest()


# --- parsing ------------------------------------------------------------------------------------
def _credential(value: str) -> tuple[str, str, str, str]:
    parts = value.split("/")
    if len(parts) != 5 or not all(parts) or parts[4] != "aws4_request":
        raise _incomplete(f"Credential must be <access key id>/<yyyymmdd>/<region>/<service>/aws4_request, "
                          f"got '{value}'")
    akid, date, region, service, _ = parts
    if not re.fullmatch(r"\d{8}", date):
        raise _incomplete(f"the credential scope's date '{date}' is not yyyymmdd")
    return akid, date, region, service


def _signed_names(value: str) -> tuple[str, ...]:
    names = tuple(value.split(";")) if value else ()
    if not names or any(not n or n != n.lower() or n.strip() != n for n in names):
        raise _incomplete("SignedHeaders must be the ';'-joined lower-case names of the signed headers")
    if list(names) != sorted(set(names)):
        raise _incomplete("SignedHeaders must be sorted and without repeats")
    if "host" not in names:
        raise _incomplete("'Host' must be a 'SignedHeader' in the AWS Authorization")
    return names


def _amz_date_of(headers: Mapping[str, str]) -> str:
    v = headers.get("x-amz-date")
    if v is not None:
        v = v.strip()
        if not _AMZ_DATE.match(v):
            raise _incomplete(f"X-Amz-Date '{v}' is not in the form yyyymmddTHHMMSSZ")
        return v
    d = headers.get("date")
    if d is None:
        raise _incomplete("the request has neither an X-Amz-Date nor a Date header")
    try:
        dt = parsedate_to_datetime(d)
    except (TypeError, ValueError):
        raise _incomplete(f"Date header '{d}' does not parse") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.astimezone(timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def _query_params(raw_query: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in (raw_query or "").split("&"):
        if part:
            k, _, v = part.partition("=")
            out.setdefault(unquote_plus(k), unquote_plus(v))
    return out


def parse(raw_query: str, headers: Mapping[str, str]) -> Signature:
    """The request's claimed signature, from its ``Authorization`` header or presigned query.
    Raises ``MissingAuthenticationToken`` when it has neither, ``IncompleteSignature`` when
    what it has does not parse."""
    h = lower_headers(headers)
    auth = h.get("authorization")
    if auth is not None and auth.strip():
        alg, _, rest = auth.strip().partition(" ")
        if alg != ALGORITHM:
            raise _incomplete(f"Authorization header requires the '{ALGORITHM}' algorithm "
                              "(only Signature Version 4 is supported)")
        fields: dict[str, str] = {}
        for item in rest.split(","):
            k, eq, v = item.strip().partition("=")
            if not eq:
                raise _incomplete(f"Authorization header element '{item.strip()}' is not name=value")
            fields[k.strip()] = v.strip()
        for need in ("Credential", "SignedHeaders", "Signature"):
            if not fields.get(need):
                raise _incomplete(f"Authorization header requires '{need}' parameter")
        akid, date, region, service = _credential(fields["Credential"])
        signature = fields["Signature"]
        if not _HEX64.match(signature):
            raise _incomplete("Signature must be 64 lowercase hex digits")
        amz_date = _amz_date_of(h)
        if amz_date[:8] != date:
            raise _mismatch(f"the credential scope's date {date} is not the request's date {amz_date[:8]}")
        return Signature(akid, date, region, service, _signed_names(fields["SignedHeaders"]),
                         signature, amz_date)
    q = _query_params(raw_query)
    if "X-Amz-Algorithm" not in q and "X-Amz-Signature" not in q and "X-Amz-Credential" not in q:
        raise _missing("Request is missing Authentication Token")
    if q.get("X-Amz-Algorithm") != ALGORITHM:
        raise _incomplete(f"X-Amz-Algorithm must be '{ALGORITHM}'")
    for need in ("X-Amz-Credential", "X-Amz-Date", "X-Amz-SignedHeaders", "X-Amz-Signature", "X-Amz-Expires"):
        if not q.get(need):
            raise _incomplete(f"the presigned query requires '{need}'")
    akid, date, region, service = _credential(q["X-Amz-Credential"])
    amz_date = q["X-Amz-Date"]
    if not _AMZ_DATE.match(amz_date):
        raise _incomplete(f"X-Amz-Date '{amz_date}' is not in the form yyyymmddTHHMMSSZ")
    if amz_date[:8] != date:
        raise _mismatch(f"the credential scope's date {date} is not the request's date {amz_date[:8]}")
    if not q["X-Amz-Signature"] or not _HEX64.match(q["X-Amz-Signature"]):
        raise _incomplete("X-Amz-Signature must be 64 lowercase hex digits")
    try:
        expires = int(q["X-Amz-Expires"])
    except ValueError:
        raise _incomplete("X-Amz-Expires must be a number of seconds") from None
    if not 1 <= expires <= MAX_EXPIRES_S:
        raise _incomplete(f"X-Amz-Expires must be 1..{MAX_EXPIRES_S} seconds")
    return Signature(akid, date, region, service, _signed_names(q["X-Amz-SignedHeaders"]),
                     q["X-Amz-Signature"], amz_date, presigned=True, expires_s=expires)


def request_time(sig: Signature) -> float:
    """The signed request time, epoch seconds."""
    return datetime.strptime(sig.amz_date, "%Y%m%dT%H%M%SZ").replace(tzinfo=timezone.utc).timestamp()


def check_time(sig: Signature, now_s: float, max_skew_s: int = MAX_SKEW_S) -> None:
    """``RequestExpired`` unless the request time is within ``max_skew_s`` of ``now_s`` (and, for
    a presigned URL, ``now_s`` is not past its time + ``X-Amz-Expires``)."""
    t = request_time(sig)
    if sig.presigned:
        if now_s + max_skew_s < t:
            raise SigV4Error("RequestExpired", f"Request is not yet valid (X-Amz-Date {sig.amz_date})")
        if now_s > t + (sig.expires_s or 0):
            raise SigV4Error("RequestExpired", f"Request has expired (X-Amz-Date {sig.amz_date}, "
                             f"X-Amz-Expires {sig.expires_s})")
        return
    if abs(now_s - t) > max_skew_s:
        raise SigV4Error("RequestExpired", f"Signature expired: {sig.amz_date} is more than "
                         f"{max_skew_s // 60} minutes from the server's time")


def verify(sig: Signature, secret: str, method: str, raw_path: str, raw_query: str,
           headers: Mapping[str, str], body: bytes | str | None, service: str | None = "sqs") -> None:
    """``SignatureDoesNotMatch`` unless ``sig`` is what ``secret``'s holder would have signed
    (and, when ``service`` is given, is scoped to it). Does not check the time (:func:`check_time`)."""
    if service is not None and sig.service != service:
        raise _mismatch(f"Credential should be scoped to correct service: '{service}'")
    if isinstance(body, str):
        body = body.encode("utf-8")
    body = body or b""
    expected = signature_of(secret, sig, method, raw_path, raw_query, headers, body)
    ok = hmac.compare_digest(expected, sig.signature)
    if not ok and sig.presigned and not body:  # S3-style presigned URLs sign UNSIGNED-PAYLOAD
        ok = hmac.compare_digest(signature_of(secret, sig, method, raw_path, raw_query, headers, body, True),
                                 sig.signature)
    if not ok:
        raise _mismatch("The request signature we calculated does not match the signature you provided. "
                        "Check your AWS Secret Access Key and signing method.")
