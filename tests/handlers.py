"""Call the real Lambda handlers in-process with API Gateway v2.0 events built from ``events/``.

The route table comes from ``template.yaml`` (the functions' HttpApi events), so a route that the
template does not wire to a function cannot pass here either.
"""
from __future__ import annotations

import functools
import importlib.util
import json
import re
import threading
import time
from pathlib import Path
from urllib.parse import urlencode

from infra.local import aws_rules, interceptor
from infra.local import template as tpl

ROOT = Path(__file__).resolve().parents[1]
EVENTS = ROOT / "events"
ADMIN = "local-admin-key"


@functools.cache
def _sample_text(name: str) -> str:
    return (EVENTS / name).read_text()


def sample(name: str) -> dict:
    """``events/<name>`` parsed: a fresh object each call (callers change it); the file is read once
    per test process (events/ does not change during a run; the queue model builds thousands of
    events from health.json: reading and deep-copying it per call was ~3 % of its CPU)."""
    return json.loads(_sample_text(name))


class Context:
    function_name = "test"
    memory_limit_in_mb = 512
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:test"
    aws_request_id = "req-test"

    @staticmethod
    def get_remaining_time_in_millis() -> int:
        return 30_000


def _load(spec: tpl.FunctionSpec):
    module, _, attr = spec.handler.rpartition(".")
    path = spec.code_uri / f"{module.replace('.', '/')}.py"
    s = importlib.util.spec_from_file_location(f"fn_{spec.logical_id}", path)
    mod = importlib.util.module_from_spec(s)
    s.loader.exec_module(mod)  # type: ignore[union-attr]
    fn = getattr(mod, attr)

    def as_function(event, context):
        """Every AWS call the handler makes is made as this function
        (:func:`infra.local.interceptor.acting_as`), so its role's policies apply."""
        with interceptor.acting_as(spec.logical_id):
            return fn(event, context)
    as_function.module = mod
    return as_function


@functools.cache
def _functions() -> tuple:
    """``template.yaml``'s functions, read once per test process (the file does not change during a run)."""
    return tuple(tpl.functions(tpl.load_template()))


@functools.cache
def _routes() -> tuple:
    """(method, path, compiled regex, function spec) for each HttpApi route, the route with more literal
    segments first, as API Gateway (and the local gateway) prefer: ``POST /v1/subscriptions`` wins
    over ``POST /{account}/{queue}``."""
    routes = []
    for method, path, spec in tpl.iter_routes(list(_functions())):
        regex = "^" + re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", path) + "$"
        routes.append((method, path, re.compile(regex), spec))
    routes.sort(key=lambda r: -sum(1 for seg in r[1].split("/") if seg and not seg.startswith("{")))
    return tuple(routes)


def load_function(logical_id: str):
    """The handler of ``template.yaml``'s function ``logical_id``, run as that function (its module
    executed anew: module state is per call)."""
    return _load(next(s for s in _functions() if s.logical_id == logical_id))


def sqs_messages(sqs, queue_name: str) -> list[dict]:
    """Receive and delete every message of an SQS queue; their JSON bodies, in order received."""
    url = sqs.get_queue_url(QueueName=queue_name)["QueueUrl"]
    out = []
    while True:
        got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
        if not got:
            return out
        for msg in got:
            out.append(json.loads(msg["Body"]))
            sqs.delete_message(QueueUrl=url, ReceiptHandle=msg["ReceiptHandle"])


class Api:
    """``api.call("POST", "/v1/topics", body={...}, key=...)`` → (status, json body)."""

    def __init__(self):
        self.routes = list(_routes())
        self._handlers: dict[str, object] = {}

    def handler(self, spec):
        if spec.logical_id not in self._handlers:
            self._handlers[spec.logical_id] = _load(spec)
        return self._handlers[spec.logical_id]

    def event(self, method: str, path: str, body=None, query: dict | list | None = None, key: str | None = ADMIN,
              raw_body: str | None = None) -> tuple[dict, object]:
        raw_path = path  # topics with "/" are passed percent-encoded, as clients send them
        for m, route, regex, spec in self.routes:
            match = regex.match(raw_path)
            if match and m == method:
                break
        else:
            raise AssertionError(f"no route for {method} {path}")
        ev = sample("health.json")
        ev["routeKey"] = ev["requestContext"]["routeKey"] = f"{method} {route}"
        ev["rawPath"] = ev["requestContext"]["http"]["path"] = raw_path
        ev["requestContext"]["http"]["method"] = method
        # as API Gateway (payload 2.0) builds them: rawQueryString as sent, and a repeated
        # parameter's values joined with commas in queryStringParameters (``query`` may be a list
        # of pairs to send a parameter twice)
        pairs = [(k, str(v)) for k, v in (query.items() if isinstance(query, dict) else query or [])]
        ev["rawQueryString"] = urlencode(pairs)
        if pairs:
            qsp: dict[str, str] = {}
            for k, v in pairs:
                qsp[k] = f"{qsp[k]},{v}" if k in qsp else v
            ev["queryStringParameters"] = qsp
        if match.groupdict():
            from urllib.parse import unquote
            ev["pathParameters"] = {k: unquote(v) for k, v in match.groupdict().items()}
        if key is not None:
            ev["headers"]["authorization"] = f"Bearer {key}"
        if raw_body is not None:
            ev["body"] = raw_body
        elif body is not None:
            ev["body"] = json.dumps(body)
        return ev, self.handler(spec)

    def invoke(self, ev: dict, spec_or_handler=None) -> tuple[int, object]:
        for m, route, regex, spec in self.routes:
            if ev["routeKey"] == f"{m} {route}":
                return self.through_gateway(ev, self.handler(spec))
        raise AssertionError(f"no route {ev['routeKey']}")

    @staticmethod
    def through_gateway(ev: dict, handler) -> tuple[int, object]:
        """Invoke ``handler`` as API Gateway (HTTP API) + Lambda do, with their payload limits
        (infra/local/aws_rules.py, as the local gateway): a body over 10 MB or an event over
        Lambda's 6 MB request limit → 413 before the function runs; a result over Lambda's 6 MB
        response limit → API Gateway's 500 ``{"message": "Internal Server Error"}``."""
        why = aws_rules.request_too_large(ev.get("body"), ev)
        if why:
            return 413, aws_rules.too_large_body(why)
        out = handler(ev, Context())
        if aws_rules.response_too_large(out):
            return 500, dict(aws_rules.GATEWAY_INTERNAL_ERROR)
        text = out.get("body") or ""
        return out["statusCode"], (json.loads(text) if text and text.lstrip()[:1] in "{[" else text)

    def call(self, method: str, path: str, body=None, query: dict | list | None = None, key: str | None = ADMIN,
             raw_body: str | None = None) -> tuple[int, object]:
        ev, h = self.event(method, path, body, query, key, raw_body)
        return self.through_gateway(ev, h)


def stream_records(aws, table: str) -> list[dict]:
    """Every stream record so far of the local stack's table ``table`` (``segments``, ``offsets``, ...),
    as a Lambda trigger receives it, oldest first per shard."""
    from infra.local.streams import lambda_record

    arn = aws["dynamodb"].describe_table(TableName=f"{tpl.LOCAL_STACK}-{table}")["Table"]["LatestStreamArn"]
    ddbs = aws["dynamodbstreams"]
    out = []
    for sh in ddbs.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]:
        it = ddbs.get_shard_iterator(StreamArn=arn, ShardId=sh["ShardId"], ShardIteratorType="TRIM_HORIZON")
        out += [lambda_record(x, arn, "us-east-1") for x in ddbs.get_records(ShardIterator=it["ShardIterator"])
                ["Records"]]
    return out


def segment_records(aws, lists: bool = False) -> list[dict]:
    """Every SegmentsTable stream record so far, as a Lambda trigger receives it, oldest first per
    shard: INSERTs of topic segments (and, with ``lists``, of subscription lists ``~<id>#0`` too)."""
    return [r for r in stream_records(aws, "segments") if r["eventName"] == "INSERT"
            and (lists or not r["dynamodb"]["Keys"]["pq"]["S"].startswith("~"))]


def make_dlq(api, consumer: str = "ops", queues: int = 1) -> str:
    """Topic ``dlq`` (``queues`` queues) and a consumer group ``consumer`` reading it; its key."""
    assert api.call("POST", "/v1/topics", {"name": "dlq", "queues": queues})[0] == 201
    s, c = api.call("POST", "/v1/clients", {"name": consumer, "role": "consumer", "topics": ["dlq"]})
    assert s == 201, c
    return c["api_key"]


def expire_dedup(now_ms: int, topic_prefix: str = "") -> int:
    """What DynamoDB's TTL does to the dedup table at ``now_ms`` (moto never expires items, and TTL
    never removes one before its ``expires_at``): delete every expired id. Returns how many of them
    were of topics starting with ``topic_prefix`` (all, by default)."""
    from datetime import datetime, timezone

    from lakeq.store.models import DedupModel
    at = datetime.fromtimestamp(now_ms / 1000, timezone.utc)
    gone = 0
    for item in DedupModel.scan(consistent_read=True):
        if item.expires_at is not None and item.expires_at <= at:
            item.delete()
            gone += item.topic.startswith(topic_prefix)
    return gone


def this_thread_sleep(fake):
    """A ``time.sleep`` that calls ``fake(seconds)`` for the thread that made it and really sleeps
    in any other. Patching ``<module>.time.sleep`` patches the process's ``time`` module: a thread
    another test left behind (a stream pump, a pusher) would otherwise move a test's fake clock
    (seen: 23,217 extra sleeps recorded by a long-poll test in a fresh-clone run)."""
    me, real = threading.get_ident(), time.sleep

    def sleep(seconds):
        return fake(seconds) if threading.get_ident() == me else real(seconds)
    return sleep
