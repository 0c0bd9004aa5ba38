"""boto3's real ``sqs`` client wired into the SqsFunction handler in-process: a ``before-send`` hook
(registered first, ahead of moto's) turns each signed request into the API Gateway event the handler
gets and the handler's result into the HTTP response botocore parses. The SigV4 seam
(``sqs_service.authenticate_request``) maps the request's access key id to a principal:
``admin`` → the admin, anything else → the lakeq client of that name."""
from __future__ import annotations

import copy
from urllib.parse import urlsplit

import boto3
import pytest
from botocore.awsrequest import AWSResponse
from moto.core.botocore_stubber import MockRawResponse

from lakeq.admin.auth import Principal
from lakeq.sqs import handler as sqs_service
from tests.handlers import Api, Context, sample

BASE = "http://lakeq.test:3000"


def fake_auth(method, path, query, headers, body):
    authz = headers.get("authorization") or ""
    key = authz.split("Credential=", 1)[1].split("/", 1)[0] if "Credential=" in authz else None
    if key is None:
        raise sqs_service.sp.SqsError("MissingAuthenticationToken", "Request is missing Authentication Token",
                                      status=403)
    return Principal(admin=True) if key == "admin" else Principal(admin=False, client=key)


class Harness:
    def __init__(self):
        self.api = Api()
        self.handler = next(self.api.handler(spec) for m, route, _, spec in self.api.routes
                            if m == "POST" and route == "/")
        self.calls = 0

    def event(self, request) -> dict:
        parts = urlsplit(request.url)
        ev = copy.deepcopy(sample("health.json"))
        path = parts.path or "/"
        route = "/" if path == "/" else "/{account}/{queue}"
        ev["routeKey"] = ev["requestContext"]["routeKey"] = f"POST {route}"
        ev["rawPath"] = ev["requestContext"]["http"]["path"] = path
        ev["requestContext"]["http"]["method"] = request.method
        ev["rawQueryString"] = parts.query
        ev.pop("queryStringParameters", None)
        ev["headers"] = {k.lower(): (v.decode() if isinstance(v, bytes) else v) for k, v in request.headers.items()}
        ev["headers"]["host"] = parts.netloc
        body = request.body or b""
        ev["body"] = body.decode("utf-8") if isinstance(body, bytes) else body
        ev["isBase64Encoded"] = False
        return ev

    def send(self, request, **_kw):
        self.calls += 1
        out = self.handler(self.event(request), Context())
        body = (out.get("body") or "").encode("utf-8")
        return AWSResponse(request.url, out["statusCode"], out.get("headers") or {}, MockRawResponse(body))

    def client(self, key: str = "admin", send=None):
        """boto3's ``sqs`` client as ``key``, its requests answered by ``send`` (this harness's by
        default; the queue model passes one that forwards to the example's own harness, making the
        client once per part: a boto3 client costs ~50 ms of CPU, ~10 % of a part when made per example)."""
        c = boto3.client("sqs", endpoint_url=BASE, region_name="us-east-1", aws_access_key_id=key,
                         aws_secret_access_key="unused")
        c.meta.events.register_first("before-send.sqs", send or self.send)
        return c


# the fixtures most SQS test modules share (import them by name: ``from tests.integration.sqs_harness
# import h, sqs``): a harness whose SigV4 seam is fake_auth, and boto3's client as the admin
@pytest.fixture
def h(aws, monkeypatch):
    monkeypatch.setattr(sqs_service, "authenticate_request", fake_auth)
    return Harness()


@pytest.fixture
def sqs(h):
    return h.client("admin")


def drain_sqs(sqs, url) -> list[str]:
    """Receive (10 at a time) and delete until a receive comes back empty; the bodies in order."""
    out = []
    for _ in range(20):
        got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
        if not got:
            return out
        for m in got:
            out.append(m["Body"])
            sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    return out
