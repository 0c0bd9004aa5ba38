"""Issue 30 item 12: every route and method of ``openapi.yaml`` fuzzed in-process, with every kind of
key, by schemathesis' own generators (positive and negative data: bodies, query and path parameters,
headers). Each case becomes the API Gateway (payload 2.0) event of the route ``template.yaml`` wires
and is run through the real handler as its function (its IAM role applies, ``tests/handlers.py``).

Checks, per request:
- no answer is a 5xx;
- an answer >= 400 has API.md's error shape (``{"error": {"code", "message"}}``; SQS's own shape on
  the SQS endpoint: ``{"__type", "message"}`` or the query protocol's ``<ErrorResponse>``);
- an answer >= 400 changes nothing: a digest of the whole store (every item of every DynamoDB table,
  every S3 object, every SQS message, every Secrets Manager version, every Glue job run, as moto
  holds them) is the same before and after.

Key kinds: the admin key, the producer ``feed``'s key, the consumer (group) ``risk``'s key (granted
``quotes``, owner of the subscription and the push endpoints), another consumer ``ops``'s key
(granted only ``dlq``: a stranger to risk's resources), an unknown key and no key. On the SQS
endpoint the same principals go through the SigV4 seam the other SQS tests use
(``tests/integration/sqs_harness.fake_auth``); every case gets an ``X-Amz-Target`` (or ``Action``)
naming one of botocore's SQS actions. Path parameters are schemathesis' (mostly unknown names) or,
half of the time, names of things the fixture made (topic, group, subscription, redrive, replay,
member, key and credential ids), so cases reach real resources.

``test_every_openapi_operation_is_fuzzed`` fails when openapi.yaml gains an operation this file does
not fuzz. One test per function of template.yaml (one store each: its operations in turn, those
that may delete the fixture's things last). Size: ``LAKEQ_OPENAPI_FUZZ_EXAMPLES`` cases per
operation (default 8: half positive, half negative data, plus each of the operation's examples
twice), each case sent with every kind of key in turn (the admin last); an unknown key and no key on
one case of each mode (401s before anything is read). Each case is generated once for the six
kinds: generating it (schemathesis' strategies, filtered) cost more than running it, and the kinds
once each drew the same derandomized cases again.
About 2,500 requests once schemathesis drops the examples it cannot build and the cases it
repeats; derandomized unless the variable is set.
"""
from __future__ import annotations

import base64
import hashlib
import json
import os
import xml.etree.ElementTree as ET
from collections import Counter
from types import SimpleNamespace
from urllib.parse import parse_qsl, quote, unquote, urlsplit

import botocore.session
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis.generation import GenerationMode

from infra.local import template as tpl
from tests.handlers import ADMIN, make_dlq, sample
from tests.history import path as topic_path
from tests.integration import replay_harness
from tests.integration.sqs_harness import fake_auth

SPEC = schemathesis.openapi.from_path(
    os.path.join(os.path.dirname(__file__), "..", "..", "layers", "core", "lakeq", "openapi.yaml"),
    config=schemathesis.Config.from_dict({"suppress-health-check": ["all"], "warnings": False,
                                          "generation": {"database": "none"}}))
OPERATIONS = sorted((op.method.upper(), op.path) for op in (r.ok() for r in SPEC.get_all_operations()))
EXAMPLES = int(os.environ.get("LAKEQ_OPENAPI_FUZZ_EXAMPLES", "8"))
# (the admin last: derandomized, every kind gets the same cases, and what the admin may create would
# otherwise exist already when the others try it)
KINDS = ["no_key", "unknown_key", "other_consumer", "producer", "consumer", "admin"]
SQS_PRINCIPAL = {"admin": "admin", "producer": "feed", "consumer": "risk", "other_consumer": "ops",
                 "unknown_key": "nobody"}
SQS_ACTIONS = sorted(botocore.session.get_session().get_service_model("sqs").operation_names)
BASE = "http://lakeq.test"
ACCOUNT = "123456789012"
T = "quotes"
URL = "https://hooks.example.com/x"


def test_every_openapi_operation_is_fuzzed():
    """A route added to openapi.yaml without a way to reach it here fails this test (and the fuzz of
    every operation below is parametrized by the same list)."""
    import yaml

    doc = yaml.safe_load(open(os.path.join(os.path.dirname(__file__), "..", "..", "openapi.yaml")))
    spec_ops = {(m.upper(), p) for p, item in doc["paths"].items() for m in item
                if m in ("get", "put", "post", "delete", "patch", "head", "options")}
    assert set(OPERATIONS) == spec_ops
    assert len(OPERATIONS) == len(spec_ops) == 63  # (63: GET /v1/groups/{group}/ledger, issue 32.4)
    params = {p.strip("{}") for _, route in OPERATIONS for p in route.split("/") if p.startswith("{")}
    assert params == PARAM_NAMES, params ^ PARAM_NAMES  # the fixture names real things for each


# --- the store's state, as moto (and the memory store) holds it -------------------------------------------------
def state_digest() -> str:
    from moto.dynamodb.models import dynamodb_backends
    from moto.glue.models import glue_backends
    from moto.s3.models import s3_backends
    from moto.secretsmanager.models import secretsmanager_backends
    from moto.sqs.models import sqs_backends

    from infra.local import dynamo_memory

    h = hashlib.sha256()
    ddb = dynamodb_backends[ACCOUNT]["us-east-1"]
    for name in sorted(ddb.tables):
        items = sorted(json.dumps(i.to_json(), sort_keys=True, default=str) for i in ddb.tables[name].all_items())
        h.update(f"{name}:{len(items)}:".encode() + "\n".join(items).encode())
    memory = dynamo_memory.active()  # the tables' items when the memory store answers DynamoDB
    for name in sorted(memory.tables if memory is not None else ()):
        items = sorted(json.dumps(i, sort_keys=True, default=str) for i in memory.tables[name].all())
        h.update(f"memory {name}:{len(items)}:".encode() + "\n".join(items).encode())
    for bucket in sorted(s3_backends[ACCOUNT]["global"].buckets.values(), key=lambda b: b.name):
        for k in sorted(bucket.keys.keys()):
            for v in bucket.keys.getlist(k):
                h.update(f"s3:{bucket.name}/{k}:{v.etag}:{v.size}".encode())
    for q in sorted(sqs_backends[ACCOUNT]["us-east-1"].queues.values(), key=lambda q: q.name):
        h.update(f"sqs:{q.name}:{sorted(m.id for m in q._messages)}".encode())
    for s in secretsmanager_backends[ACCOUNT]["us-east-1"].secrets.values():
        h.update(f"sm:{s.name}:{sorted(s.versions)}".encode())
    h.update(f"glue:{sorted(glue_backends[ACCOUNT]['us-east-1'].job_runs)}".encode())
    return h.hexdigest()


def test_the_digest_sees_every_kind_of_write(api, setup, aws):
    """The "changes nothing" check can fail: a write of each store the routes use moves the digest,
    a read does not."""
    d0 = state_digest()
    assert api.call("GET", "/v1/topics")[0] == 200 and state_digest() == d0
    assert api.call("POST", "/v1/topics", {"name": "fresh"})[0] == 201
    d1 = state_digest()
    assert d1 != d0
    aws["s3"].put_object(Bucket=aws["s3"].list_buckets()["Buckets"][0]["Name"], Key="x", Body=b"1")
    d2 = state_digest()
    assert d2 != d1
    url = aws["sqs"].list_queues()["QueueUrls"][0]
    aws["sqs"].send_message(QueueUrl=url, MessageBody="m")
    assert state_digest() != d2


# --- the world the cases act on ------------------------------------------------------------------
PARAM_NAMES = {"topic", "name", "group", "id", "queue", "member_id", "key_id", "access_key_id", "asset", "account"}
KNOWN_PARAMS: dict[str, list[str]] = {}  # filled per test by the fixture: PARAM_NAMES -> names of what it made


@pytest.fixture
def world(api, setup, clock, monkeypatch, aws):
    """quotes (4 queues), quotes/sh (2), dlq (1); producer feed, consumers risk (quotes) and ops
    (dlq); a subscription of risk with a push endpoint, risk's group push endpoint, a member of group
    risk, a second API key and an SQS credential of risk, three messages, a redrive, a replay; the
    long poll's sleep moves the fake clock instead of waiting; the SQS seam maps principals."""
    from lakeq.consume import reader
    from lakeq.sqs import handler as sqs_service

    monkeypatch.setattr(reader, "time", SimpleNamespace(sleep=lambda s: setattr(clock, "t", clock.t + int(s * 1000))))
    monkeypatch.setattr(sqs_service, "authenticate_request", fake_auth)
    replay_harness.create_job(aws)
    ops_key = make_dlq(api)
    s, sub = api.call("POST", "/v1/subscriptions", {"subscriber": "risk", "topic": T}, key=setup["risk"])
    assert s == 201, sub
    assert api.call("PUT", f"/v1/subscriptions/{sub['id']}/push", {"url": URL}, key=setup["risk"])[0] == 201
    assert api.call("PUT", "/v1/groups/risk/push", {"url": URL, "topic": T}, key=setup["risk"])[0] == 201
    s, b = api.call("POST", topic_path(T), {"producer": "feed", "messages": [{"body": f"m{i}"} for i in range(3)]},
                    key=setup["feed"])
    assert s == 200, b
    s, red = api.call("POST", "/v1/redrives", {"source": "dlq", "destination": T})
    assert s == 202, red
    s, rep = api.call("POST", "/v1/replays", {"topic": T, "from": clock.t - 3_600_000, "to": clock.t,
                                              "target": {"topic": "quotes/sh"}})
    assert s == 202, rep
    s, mem = api.call("POST", "/v1/groups/risk/members", {"topics": [T]}, key=setup["risk"])
    assert s == 200, mem
    s, key2 = api.call("POST", "/v1/clients/risk/keys")
    assert s == 201, key2
    s, cred = api.call("POST", "/v1/clients/risk/sqs-credentials")
    assert s == 201, cred
    sqs_ev = json.loads(json.dumps(sample("health.json")))
    sqs_ev.update(routeKey="POST /", rawPath="/", rawQueryString="", isBase64Encoded=False,
                  body=json.dumps({"QueueName": "fz"}),
                  headers={"host": "lakeq.test", "content-type": "application/x-amz-json-1.0",
                           "x-amz-target": "AmazonSQS.CreateQueue",
                           "authorization": "AWS4-HMAC-SHA256 Credential=admin/20260101/us-east-1/sqs/aws4_request"})
    sqs_ev["requestContext"].update(routeKey="POST /", http={**sqs_ev["requestContext"]["http"], "method": "POST",
                                                            "path": "/"})
    s, q = api.invoke(sqs_ev)
    assert s == 200, q
    KNOWN_PARAMS.clear()
    KNOWN_PARAMS.update({
        "topic": [T, "quotes/sh", "dlq"], "name": ["risk", "feed", "ops"], "group": ["risk", "ops"],
        "id": [sub["id"], red["id"], rep["id"]], "/v1/subscriptions": [sub["id"]], "/v1/redrives": [red["id"]],
        "/v1/replays": [rep["id"]], "queue": ["0", "1"], "/{account}": ["fz", T], "member_id": [mem["member_id"]],
        "key_id": [key2["key_id"]], "access_key_id": [cred["access_key_id"]], "asset": ["console.js", "console.css"],
        "account": [urlsplit(q["QueueUrl"]).path.split("/")[1]]})
    assert PARAM_NAMES <= set(KNOWN_PARAMS)
    keys = {"admin": ADMIN, "producer": setup["feed"], "consumer": setup["risk"], "other_consumer": ops_key,
            "unknown_key": "lq_not-a-key"}
    # the SQS queue made by CreateQueue, and a topic made by the native API (its SQS clients are made
    # on its first SQS use)
    return SimpleNamespace(keys=keys, queue_urls=[q["QueueUrl"], q["QueueUrl"].rsplit("/", 1)[0] + "/" + T])


def known_values(route: str, param: str) -> list[str]:
    """Names of the fixture's things for a path parameter (an ``id`` of the route's own kind)."""
    for prefix in ("/v1/subscriptions", "/v1/redrives", "/v1/replays", "/{account}"):
        if route.startswith(prefix) and prefix in KNOWN_PARAMS and param in ("id", "queue"):
            return KNOWN_PARAMS[prefix]
    return KNOWN_PARAMS[param]


def with_known_body(case, world, pick) -> None:
    """The spec's examples leave some values empty (a push ``url``, its ``topic``); give them the
    fixture's, and an SQS request the fixture's queue."""
    body = case.body
    if isinstance(body, dict):
        if body.get("url") == "":
            body["url"] = URL
        if body.get("topic") == "":
            body["topic"] = T
        if case.operation.path in ("/", "/{account}/{queue}"):
            body.setdefault("QueueUrl", pick(world.queue_urls))


# --- a schemathesis case as API Gateway's event ----------------------------------------------------
def event_of(api, case, kind: str, keys: dict, sqs_action: str | None):
    """The event API Gateway would hand the function for this case (None: no route matches, API
    Gateway's own 404, no function runs)."""
    headers = {}
    sqs = case.operation.path in ("/", "/{account}/{queue}")
    kw = case.as_transport_kwargs(base_url=BASE)
    hdrs = {str(k).lower(): str(v) for k, v in (kw.get("headers") or {}).items()}
    hdrs.pop("authorization", None)
    if kind != "no_key":
        hdrs["authorization"] = (f"AWS4-HMAC-SHA256 Credential={SQS_PRINCIPAL[kind]}/20260101/us-east-1/sqs/"
                                 "aws4_request, SignedHeaders=host, Signature=00") if sqs else f"Bearer {keys[kind]}"
    data = kw.get("data")
    if sqs and sqs_action:
        if isinstance(data, dict):
            data = {"Action": sqs_action, **data}
        else:
            hdrs["x-amz-target"] = f"AmazonSQS.{sqs_action}"
    prepared = requests.Request(method=kw["method"], url=kw["url"], headers={**hdrs, **headers},
                                params=kw.get("params"), json=kw.get("json"), data=data).prepare()
    parts = urlsplit(prepared.url)
    raw_path = parts.path
    for m, route, regex, spec in api.routes:
        match = regex.match(raw_path)
        if match and m == prepared.method:
            break
    else:
        return None, None
    ev = json.loads(json.dumps(sample("health.json")))
    ev["routeKey"] = ev["requestContext"]["routeKey"] = f"{m} {route}"
    ev["rawPath"] = ev["requestContext"]["http"]["path"] = raw_path
    ev["requestContext"]["http"]["method"] = m
    ev["rawQueryString"] = parts.query
    qsp: dict[str, str] = {}
    for k, v in parse_qsl(parts.query, keep_blank_values=True):
        qsp[k] = f"{qsp[k]},{v}" if k in qsp else v
    if qsp:
        ev["queryStringParameters"] = qsp
    if match.groupdict():
        ev["pathParameters"] = {k: unquote(v) for k, v in match.groupdict().items()}
    ev["headers"] = {"host": "lakeq.test", **{k.lower(): v for k, v in prepared.headers.items()
                                              if k.lower() not in ("content-length", "connection")}}
    body = prepared.body
    if body is not None:
        if isinstance(body, str):
            body = body.encode("utf-8")
        try:
            ev["body"], ev["isBase64Encoded"] = body.decode("utf-8"), False
        except UnicodeDecodeError:
            ev["body"], ev["isBase64Encoded"] = base64.b64encode(body).decode("ascii"), True
    return ev, spec


def answer(api, ev, spec):
    """As API Gateway + Lambda answer (their size limits included, ``Api.through_gateway``)."""
    return api.through_gateway(ev, api.handler(spec))


def check_error_shape(status, body, sqs: bool) -> None:
    if sqs and isinstance(body, str):
        if body.lstrip().startswith("<"):
            root = ET.fromstring(body.encode("utf-8"))
            assert root.tag.endswith("ErrorResponse"), body
            return
        body = json.loads(body)
        assert isinstance(body.get("__type"), str) and isinstance(body.get("message"), str), body
        return
    if sqs and isinstance(body, dict) and "__type" in body:
        assert isinstance(body["message"], str), body
        return
    # (API Gateway's own 413 adds its "message" beside the error: infra/local/aws_rules.too_large_body)
    assert isinstance(body, dict) and set(body) in ({"error"}, {"error", "message"}), (status, body)
    err = body["error"]
    assert isinstance(err.get("code"), str) and err["code"], body
    assert isinstance(err.get("message"), str) and err["message"], body


def strategies_of(op) -> list[tuple[str, object]]:
    """The operation's own examples (openapi.yaml's: they name the fixture's topic, producer and
    group), schemathesis' positive data and its negative data: each mode is run on its own, so each
    gets its share of the cases."""
    out = [("examples", st.one_of(ex)) for ex in [list(SPEC.get_strategies_from_examples(op))] if ex]
    out.append(("positive", op.as_strategy(generation_mode=GenerationMode.POSITIVE)))
    try:
        out.append(("negative", op.as_strategy(generation_mode=GenerationMode.NEGATIVE)))
    except Exception:  # noqa: BLE001 — an operation with nothing to negate: positive data only
        pass
    return out


def fuzz_settings(n: int):
    return settings(max_examples=n, deadline=None, suppress_health_check=list(HealthCheck), database=None,
                    derandomize="LAKEQ_OPENAPI_FUZZ_EXAMPLES" not in os.environ)


def _order(op: tuple[str, str]) -> tuple[int, str, str]:
    """Within a function's operations, what may remove the fixture's things (a DELETE, a cancel) last."""
    m, p = op
    return (2 if m == "DELETE" else 1 if p.endswith("/cancel") else 0, p, m)


FUNCTION_OF = {(m, p): spec.logical_id for m, p, spec in tpl.iter_routes(tpl.functions(tpl.load_template()))}
BY_FUNCTION = {f: sorted((op for op in OPERATIONS if FUNCTION_OF.get(op) == f), key=_order)
               for f in sorted(set(FUNCTION_OF.values()))}
UNAUTHENTICATED = ("unknown_key", "no_key")  # every such case is a 401 before anything is read


def test_operations_map_onto_the_functions_of_the_template():
    assert sorted(op for ops in BY_FUNCTION.values() for op in ops) == OPERATIONS


@pytest.mark.parametrize("function", sorted(BY_FUNCTION))
def test_openapi_operation_with_every_key_never_5xx_and_a_4xx_changes_nothing(api, world, function):
    """Each operation served by ``function`` (in one store: its operations in turn, deletions last),
    with each kind of key."""
    for method, route in BY_FUNCTION[function]:
        fuzz_operation(api, world, method, route)


def fuzz_operation(api, world, method: str, route: str) -> None:
    op = SPEC[route][method]
    strategies = strategies_of(op)
    path_params = [p.strip("{}") for p in route.split("/") if p.startswith("{")]
    sqs = route in ("/", "/{account}/{queue}")
    seen: dict[str, list[int]] = {}

    for mode, cases in strategies:
        n = 2 if mode == "examples" else EXAMPLES // 2
        unauthenticated: set[str] = set()  # the kinds that had their one case of this mode

        @fuzz_settings(max(n, 1))
        @given(case=cases, known=st.booleans(), data=st.data(),
               action=st.sampled_from(SQS_ACTIONS) if sqs else st.none())
        def run(case, known, data, action):
            if known:
                with_known_body(case, world, lambda xs: data.draw(st.sampled_from(xs)))
            if known and path_params:
                case.path_parameters = {**(case.path_parameters or {}),
                                        **{p: data.draw(st.sampled_from(known_values(route, p))) for p in path_params}}
            for p, v in (case.path_parameters or {}).items():  # one path segment, as clients send it
                case.path_parameters[p] = quote(str(v), safe="")
            # one case, every kind of key in turn (the admin last); the unknown key and no key on one
            # case of a mode (a 401 before anything is read)
            for kind in KINDS:
                if kind in unauthenticated:
                    continue
                ev, spec = event_of(api, case, kind, world.keys, action)
                if ev is None:
                    return  # no route (an empty path segment): API Gateway's 404, no function runs
                before = state_digest()
                status, body = answer(api, ev, spec)
                seen.setdefault(kind, []).append(status)
                if kind in UNAUTHENTICATED:
                    unauthenticated.add(kind)
                where = (kind, ev["routeKey"], ev["rawPath"], ev["rawQueryString"], (ev.get("body") or "")[:500])
                assert status < 500, (where, status, body)
                if status >= 400:
                    check_error_shape(status, body, sqs)
                    assert state_digest() == before, ("a refused request changed the store", where, status, body)
        try:
            run()
        except Unsatisfiable:  # an example schemathesis cannot build, or nothing to negate (a route
            assert mode != "positive", (method, route, mode)  # without parameters nor body)
    assert set(seen) == set(KINDS), (method, route, seen)  # every kind of key reached the function
    print(f"\n{method} {route}: " + ", ".join(f"{k} {dict(sorted(Counter(v).items()))}" for k, v in seen.items()))
