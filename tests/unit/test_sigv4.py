"""Issue 9 (SQS endpoint): lakeq.sqs.sigv4 verifies what botocore's own SigV4 signer signs.

Random methods, paths, queries, headers and bodies are signed by ``botocore.auth.SigV4Auth``
(header form) and ``SigV4QueryAuth`` (presigned form) and must verify; any single-character change
of a signed part, a wrong secret, another service or a stale time must not. Plus the AWS
documentation's worked example (IAM ListUsers, 2015-08-30) as a fixed vector.
"""
from __future__ import annotations

import datetime
import hashlib
import string
from urllib.parse import unquote_to_bytes, urlsplit

import pytest
from botocore.auth import SigV4Auth, SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from lakeq.sqs import sigv4

AKID = "LQAKTESTTESTTEST1234"
SECRET = "s3cr3t-Secret_value-with-some-length-0123"
NOW = datetime.datetime(2026, 11, 23, 13, 45, 7, tzinfo=datetime.timezone.utc)
ALNUM = string.ascii_letters + string.digits


def _freeze(monkeypatch):
    class _DT(datetime.datetime):
        @classmethod
        def utcnow(cls):
            return NOW.replace(tzinfo=None)

        @classmethod
        def now(cls, tz=None):
            return NOW if tz else NOW.replace(tzinfo=None)

    monkeypatch.setattr("botocore.auth.datetime.datetime", _DT)


def _botocore_sign(method, url, headers, body, *, region="us-east-1", service="sqs", presign=False,
                   secret=SECRET, params=None):
    req = AWSRequest(method=method, url=url, headers=dict(headers), data=body, params=params or {})
    creds = Credentials(AKID, secret)
    if presign:
        SigV4QueryAuth(creds, service, region, expires=300).add_auth(req)
    else:
        SigV4Auth(creds, service, region).add_auth(req)
    p = req.prepare()
    parts = urlsplit(p.url)
    body_bytes = p.body if isinstance(p.body, bytes) else (p.body or "").encode()
    sent = dict(p.headers.items())
    if not any(k.lower() == "host" for k in sent):  # what the HTTP client adds on the wire
        sent["Host"] = parts.netloc.removesuffix(":80")
    return p.method, parts.path, parts.query, sent, body_bytes


def _verify(method, path, query, headers, body, *, secret=SECRET, now=None, service="sqs"):
    sig = sigv4.parse(query, headers)
    sigv4.check_time(sig, (now or NOW).timestamp())
    sigv4.verify(sig, secret, method, path, query, headers, body, service=service)
    return sig


seg = st.text(alphabet=ALNUM + "-_.~ %:@!$'()*+,;=é", min_size=1, max_size=8).filter(lambda s: s not in (".", ".."))
paths = st.lists(seg, max_size=4).map(lambda xs: "/" + "/".join(
    __import__("urllib.parse").parse.quote(x, safe="-_.~") for x in xs))
qvals = st.text(alphabet=ALNUM + " -_.~/+=&?é%", max_size=10)
qkeys = st.text(alphabet=ALNUM + "-_.", min_size=1, max_size=8).filter(lambda k: not k.startswith("X-Amz"))
header_names = st.text(alphabet=string.ascii_lowercase + "-", min_size=1, max_size=10).filter(
    lambda n: n.strip("-") == n and n not in ("host", "authorization", "x-amz-date", "user-agent", "expect",
                                               "connection", "te", "upgrade", "trailer", "keep-alive",
                                               "x-amz-content-sha256", "transfer-encoding", "content-length",
                                               "x-amzn-trace-id", "date"))
header_values = st.text(alphabet=ALNUM + " -_/:;=,.", min_size=1, max_size=20).filter(lambda v: v.strip())
requests = st.fixed_dictionaries({
    "method": st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD"]),
    "path": paths,
    "params": st.dictionaries(qkeys, qvals, max_size=4),
    "headers": st.dictionaries(header_names, header_values, max_size=4),
    "body": st.binary(max_size=64),
    "region": st.sampled_from(["us-east-1", "eu-west-3", "ap-southeast-2", "local"]),
    "host": st.sampled_from(["127.0.0.1:3000", "sqs.example.com", "abc.execute-api.eu-west-3.amazonaws.com"]),
})


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(r=requests)
def test_botocore_signed_requests_verify(monkeypatch, r):
    _freeze(monkeypatch)
    m, path, query, headers, body = _botocore_sign(r["method"], f"http://{r['host']}{r['path']}", r["headers"],
                                                   r["body"], region=r["region"], params=r["params"])
    sig = _verify(m, path, query, headers, body)
    assert (sig.access_key_id, sig.region, sig.service, sig.presigned) == (AKID, r["region"], "sqs", False)


def _mutate_char(s: str, i: int) -> str:
    c = s[i]
    repl = "b" if c != "b" else "c"
    return s[:i] + repl + s[i + 1:]


_HEX = set("0123456789abcdefABCDEF")


def _escape_digits(query: str) -> set[int]:
    """Positions of the hex digits of the query's ``%XX`` escapes."""
    return {j for i, c in enumerate(query) if c == "%" and set(query[i + 1:i + 3]) <= _HEX and len(query) > i + 2
            for j in (i + 1, i + 2)}


def _query_mutations(query: str) -> list[tuple[int, str]]:
    """Every single-character change of the query that changes what it means — the premise of the
    test below. A query is signed decoded (``canonical_query``: ``%2B`` and ``%2b`` are the same
    byte, and the same signature), so a hex digit of an escape is changed to another *value*, never
    to another case of the same one; any other letter or digit to another letter."""
    hexd = _escape_digits(query)
    out = []
    for i, c in enumerate(query):
        if i in hexd:
            out.append((i, "%X" % ((int(c, 16) + 1) % 16)))
        elif c.isalnum():
            out.append((i, "b" if c != "b" else "c"))
    return out


def _meaning(query: str) -> list[tuple[bytes, bytes]]:
    """What a query says, independently of lakeq's code: its name/value pairs, percent-decoded to
    bytes (``+`` is a space), sorted. Two queries with the same meaning have the same signature."""
    pairs = []
    for part in query.split("&"):
        if part:
            k, _, v = part.partition("=")
            pairs.append((unquote_to_bytes(k.replace("+", " ")), unquote_to_bytes(v.replace("+", " "))))
    return sorted(pairs)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(r=requests, where=st.sampled_from(["method", "path", "query", "header", "body", "signature",
                                          "host", "date"]), pick=st.integers(min_value=0, max_value=10_000))
def test_any_single_change_of_a_signed_part_fails(monkeypatch, r, where, pick):
    _freeze(monkeypatch)
    m, path, query, headers, body = _botocore_sign(r["method"], f"http://{r['host']}{r['path']}", r["headers"],
                                                   r["body"], region=r["region"], params=r["params"])
    headers = dict(headers)
    if where == "method":
        m = {"GET": "PUT", "PUT": "GET"}.get(m, "GET")
    elif where == "path":
        idx = [i for i, c in enumerate(path) if c.isalnum()]
        if idx:
            path = _mutate_char(path, idx[pick % len(idx)])
        else:
            path = path + "x"
    elif where == "query":
        changes = _query_mutations(query)
        assume(changes)
        i, c = changes[pick % len(changes)]
        mutated = query[:i] + c + query[i + 1:]
        assert _meaning(mutated) != _meaning(query), (query, mutated)  # the premise: it says something else
        query = mutated
    elif where == "header":
        names = sorted(k for k in headers if k.lower() in r["headers"])
        assume(names)
        name = names[pick % len(names)]
        v = headers[name]
        idx = [i for i, c in enumerate(v) if c.isalnum()]
        assume(idx)
        headers[name] = _mutate_char(v, idx[pick % len(idx)])
    elif where == "body":
        if body:
            i = pick % len(body)
            body = body[:i] + bytes([body[i] ^ 1]) + body[i + 1:]
        else:
            body = b"x"
    elif where == "signature":
        auth = headers["Authorization"]
        i = auth.index("Signature=") + len("Signature=") + pick % 64
        headers["Authorization"] = auth[:i] + ("0" if auth[i] != "0" else "1") + auth[i + 1:]
    elif where == "host":
        headers["Host"] = _mutate_char(headers.get("Host", r["host"]), 0)
    elif where == "date":
        d = headers["X-Amz-Date"]
        headers["X-Amz-Date"] = d[:-3] + ("%02d" % ((int(d[-3:-1]) + 1) % 60)) + "Z"
    with pytest.raises(sigv4.SigV4Error) as e:
        _verify(m, path, query, headers, body)
    assert e.value.code == "SignatureDoesNotMatch"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(r=requests, params=st.dictionaries(qkeys, qvals.map(lambda v: v + "+/é"), min_size=1, max_size=3))
def test_a_query_spelled_otherwise_with_the_same_meaning_still_verifies(monkeypatch, r, params):
    """The other side of the premise above: the escapes' hex digits in lower case (``%2b`` for
    ``%2B``) say the same thing, and the signature still holds (as on AWS)."""
    _freeze(monkeypatch)
    m, path, query, headers, body = _botocore_sign(r["method"], f"http://{r['host']}{r['path']}", r["headers"],
                                                   r["body"], region=r["region"], params=params)
    hexd = _escape_digits(query)
    lower = "".join(c.lower() if i in hexd else c for i, c in enumerate(query))
    assert lower != query and _meaning(lower) == _meaning(query)
    _verify(m, path, lower, headers, body)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(r=requests)
def test_presigned_urls_verify_and_changes_fail(monkeypatch, r):
    _freeze(monkeypatch)
    m, path, query, headers, body = _botocore_sign("GET", f"http://{r['host']}{r['path']}", r["headers"], b"",
                                                   region=r["region"], params=r["params"], presign=True)
    sig = _verify(m, path, query, headers, body)
    assert sig.presigned and sig.expires_s == 300
    # expired: 300 s + a little later
    with pytest.raises(sigv4.SigV4Error) as e:
        _verify(m, path, query, headers, body, now=NOW + datetime.timedelta(seconds=301))
    assert e.value.code == "RequestExpired"
    # any changed query value (the operation's parameters are in the query)
    i = query.index("X-Amz-Date=") + len("X-Amz-Date=") + 3
    bad = query[:i] + ("1" if query[i] != "1" else "2") + query[i + 1:]
    with pytest.raises(sigv4.SigV4Error):
        _verify(m, path, bad, headers, body)
    with pytest.raises(sigv4.SigV4Error) as e:
        _verify(m, path, query, headers, body, secret=SECRET + "x")
    assert e.value.code == "SignatureDoesNotMatch"


def test_wrong_secret_service_and_skew(monkeypatch):
    _freeze(monkeypatch)
    m, path, query, headers, body = _botocore_sign(
        "POST", "http://127.0.0.1:3000/", {"Content-Type": "application/x-amz-json-1.0",
                                           "X-Amz-Target": "AmazonSQS.ListQueues"}, b"{}")
    _verify(m, path, query, headers, body)
    with pytest.raises(sigv4.SigV4Error) as e:
        _verify(m, path, query, headers, body, secret="another")
    assert e.value.code == "SignatureDoesNotMatch"
    with pytest.raises(sigv4.SigV4Error) as e:
        _verify(m, path, query, headers, body, service="s3")
    assert e.value.code == "SignatureDoesNotMatch" and "'s3'" in e.value.message
    # ±15 minutes: 14:59 fine, 15:01 expired, both ways
    for delta, ok in ((899, True), (-899, True), (901, False), (-901, False)):
        if ok:
            _verify(m, path, query, headers, body, now=NOW + datetime.timedelta(seconds=delta))
        else:
            with pytest.raises(sigv4.SigV4Error) as e:
                _verify(m, path, query, headers, body, now=NOW + datetime.timedelta(seconds=delta))
            assert e.value.code == "RequestExpired"


def test_content_sha256_header_must_be_the_body_hash(monkeypatch):
    _freeze(monkeypatch)
    m, path, query, headers, body = _botocore_sign(
        "POST", "http://h/", {"X-Amz-Content-SHA256": hashlib.sha256(b"abc").hexdigest()}, b"abc")
    _verify(m, path, query, headers, body)
    # the same signed header but another body (the header alone would still match the signature)
    with pytest.raises(sigv4.SigV4Error) as e:
        _verify(m, path, query, headers, b"abd")
    assert e.value.code == "SignatureDoesNotMatch"


@pytest.mark.parametrize("query,headers,code", [
    ("", {}, "MissingAuthenticationToken"),
    ("", {"Authorization": "Bearer lq_x"}, "IncompleteSignature"),
    ("", {"Authorization": "AWS4-HMAC-SHA256 Credential=A/20261123/us-east-1/sqs/aws4_request"},
     "IncompleteSignature"),
    ("", {"Authorization": "AWS4-HMAC-SHA256 Credential=A/2026/us-east-1/sqs/aws4_request, SignedHeaders=host, "
          "Signature=" + "0" * 64, "X-Amz-Date": "20261123T134507Z"}, "IncompleteSignature"),
    ("", {"Authorization": "AWS4-HMAC-SHA256 Credential=A/20261123/us-east-1/sqs/aws4_request, "
          "SignedHeaders=x-amz-date, Signature=" + "0" * 64, "X-Amz-Date": "20261123T134507Z"},
     "IncompleteSignature"),  # host not signed
    ("", {"Authorization": "AWS4-HMAC-SHA256 Credential=A/20261123/us-east-1/sqs/aws4_request, "
          "SignedHeaders=host, Signature=" + "0" * 64}, "IncompleteSignature"),  # no date
    ("", {"Authorization": "AWS4-HMAC-SHA256 Credential=A/20261123/us-east-1/sqs/aws4_request, "
          "SignedHeaders=host, Signature=xyz", "X-Amz-Date": "20261123T134507Z"}, "IncompleteSignature"),
    ("X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=A%2F20261123%2Fus-east-1%2Fsqs%2Faws4_request",
     {}, "IncompleteSignature"),
])
def test_malformed_signatures(query, headers, code):
    with pytest.raises(sigv4.SigV4Error) as e:
        sigv4.parse(query, headers)
    assert e.value.code == code


def test_aws_documentation_vector():
    """The worked example of AWS's "Signature Version 4 signing process" documentation (IAM
    ListUsers, GET, example credentials): canonical request hash, signing key and signature."""
    secret = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
    headers = {"Host": "iam.amazonaws.com",
               "Content-Type": "application/x-www-form-urlencoded; charset=utf-8",
               "X-Amz-Date": "20150830T123600Z"}
    query = "Action=ListUsers&Version=2010-05-08"
    h = sigv4.lower_headers(headers)
    canonical = sigv4.canonical_request("GET", "/", query, h, ("content-type", "host", "x-amz-date"),
                                        sigv4.EMPTY_SHA256)
    assert hashlib.sha256(canonical.encode()).hexdigest() == \
        "f536975d06c0309214f805bb90ccff089219ecd68b2577efef23edd43b7e1a59"
    key = sigv4.signing_key(secret, "20150830", "us-east-1", "iam")
    assert key.hex() == "c4afb1cc5771d871763a393e44b703571b55cc28424d1a5e86da6ed3c154a4b9"
    headers["Authorization"] = ("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/iam/aws4_request, "
                                "SignedHeaders=content-type;host;x-amz-date, "
                                "Signature=5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7")
    sig = sigv4.parse(query, headers)
    sigv4.verify(sig, secret, "GET", "/", query, headers, b"", service="iam")
    with pytest.raises(sigv4.SigV4Error):
        sigv4.verify(sig, secret, "GET", "/", query.replace("ListUsers", "ListUser"), headers, b"", service="iam")


# AWS's published aws-sig-v4-test-suite (credentials AKIDEXAMPLE / the example secret, region
# us-east-1, service "service", 2015-08-30T12:36:00Z, host example.amazonaws.com): each request as it
# travels (path and query percent-encoded; a repeated header as API Gateway passes it, joined by ",")
# must verify with the published signature, and fail with any other one.
SUITE = [
    ("get-vanilla", "GET", "/", "", {}, b"", "host;x-amz-date",
     "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"),
    ("get-unreserved", "GET", "/-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz", "", {}, b"",
     "host;x-amz-date", "07ef7494c76fa4850883e2b006601f940f8a34d404d0cfa977f52a65bbf5f24f"),
    ("get-slashes", "GET", "//example//", "", {}, b"", "host;x-amz-date",
     "9a624bd73a37c9a373b5312afbebe7a714a789de108f0bdfe846570885f57e84"),
    ("get-vanilla-query-order-key-case", "GET", "/", "Param2=value2&Param1=value1", {}, b"", "host;x-amz-date",
     "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500"),
    ("get-vanilla-query-order-value", "GET", "/", "Param1=value2&Param1=value1", {}, b"", "host;x-amz-date",
     "5772eed61e12b33fae39ee5e7012498b51d56abc0abb7c60486157bd471c4694"),
    ("get-vanilla-utf8-query", "GET", "/", "%E1%88%B4=bar", {}, b"", "host;x-amz-date",
     "2cdec8eed098649ff3a119c94853b13c643bcf08f8b0a1d91e12c9027818dd04"),
    ("get-header-value-order", "GET", "/", "", {"My-Header1": "value4,value1,value3,value2"}, b"",
     "host;my-header1;x-amz-date", "08c7e5a9acfcfeb3ab6b2185e75ce8b1deb5e634ec47601a50643f830c755c01"),
    ("get-header-key-duplicate", "GET", "/", "", {"My-Header1": "value2,value2,value1"}, b"",
     "host;my-header1;x-amz-date", "c9d5ea9f3f72853aea855b47ea873832890dbdd183b4468f858259531a5138ea"),
    ("get-header-value-trim", "GET", "/", "", {"My-Header1": " value1", "My-Header2": '"a   b   c"'}, b"",
     "host;my-header1;my-header2;x-amz-date", "acc3ed3afb60bb290fc8d2dd0098b9911fcaa05412b367055dee359757a9c736"),
    ("post-x-www-form-urlencoded", "POST", "/", "", {"Content-Type": "application/x-www-form-urlencoded"},
     b"Param1=value1", "content-type;host;x-amz-date",
     "ff11897932ad3f4e8b18135d722051e5ac45fc38421b1da7b9d196a0fe09473a"),
]


@pytest.mark.parametrize("name,method,path,query,extra,body,signed_headers,signature", SUITE, ids=[s[0] for s in SUITE])
def test_aws_sigv4_test_suite(name, method, path, query, extra, body, signed_headers, signature):
    secret = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
    headers = {"Host": "example.amazonaws.com", "X-Amz-Date": "20150830T123600Z", **extra,
               "Authorization": f"AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
                                f"SignedHeaders={signed_headers}, Signature={signature}"}
    sig = sigv4.parse(query, headers)
    sigv4.verify(sig, secret, method, path, query, headers, body, service="service")
    other = dict(headers, Authorization=headers["Authorization"][:-1] + ("0" if signature[-1] != "0" else "1"))
    with pytest.raises(sigv4.SigV4Error):
        sigv4.verify(sigv4.parse(query, other), secret, method, path, query, other, body, service="service")
