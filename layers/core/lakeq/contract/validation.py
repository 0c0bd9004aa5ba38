"""Request syntax (API.md): parse and check what a request says before anything is looked up.

Everything here is pure and raises :class:`BadRequest` (400); size limits that API.md answers
with 413 are reported separately (``ProduceRequest.too_large``) because they are checked after
authentication, existence and permission.
"""
from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from lakeq.common.errors import BadRequest
from lakeq.common.names import check_name, check_topic, is_name
from lakeq.log.settlement import Outcomes

MAX_MESSAGES = 100
MAX_BODY_BYTES = 1024 * 1024  # 1 MiB, as SQS since 2025 (issue 18.2); 256 KiB before
# One message (body + id, key, tags and properties as compact JSON, UTF-8): the body's 1 MiB plus the
# 44 KiB of metadata the old limit (300 KiB for a 256 KiB body) allowed alongside a full body.
MAX_MESSAGE_BYTES = MAX_BODY_BYTES + 44 * 1024
# A message's metadata alone (id, key, tags, properties as compact JSON, UTF-8) stays within the old
# per-message limit: it is what a segment keeps of a message whose body goes to the lake bucket by
# claim check (lakeq.log.claims: a stored form over claims.INLINE_BYTES), and a segment is one
# DynamoDB item (<= 400 KB; its raw data is cut at segments.SEGMENT_DATA_LIMIT, 350,000 bytes; the
# server adds ~100 bytes per message and the fan-out ~300).
MAX_META_BYTES = 300 * 1024
# One produce request body (UTF-8 bytes as received). Lambda takes at most 6 MB (6,291,456 bytes) of
# synchronous request payload: API Gateway's event carries the body as a JSON string (each '"', '\\'
# or whitespace character escaped: at most 2x; non-ASCII stays UTF-8) plus headers (<= 10 KB) and
# context, so 3,000,000 bytes always reach the function. API Gateway's 10 MB is never the binding one.
MAX_REQUEST_BYTES = 3_000_000
MAX_TAGS = 16
MAX_TAG_LEN = 128
MAX_PROPERTIES = 64
MAX_PROPERTY_KEY = 128
MAX_PROPERTY_VALUE = 1024
MAX_ID_LEN = 200
MAX_KEY_LEN = 256
MAX_PULL = 100
DEFAULT_PULL = 32
MAX_WAIT_MS = 20_000
QUEUES_MIN, QUEUES_MAX, QUEUES_DEFAULT = 1, 64, 4
VISIBILITY_MIN, VISIBILITY_MAX, VISIBILITY_DEFAULT = 1_000, 43_200_000, 30_000
MAX_DELAY_MS = 900_000  # produce "delay_ms" (lakeq.log.delay_plan.MAX_DELAY_MS, as SQS's DelaySeconds 900)

# a surrogate code point, raw or as a JSON escape (\ud800-\udfff); json.loads joins valid pairs
_SURROGATE = re.compile(r"[\ud800-\udfff]|\\u[dD][89a-fA-F]")


def json_body(raw: str | None) -> dict:
    """The request body as a JSON object; 400 when absent, malformed or not an object."""
    if raw is None or raw == "":
        raise BadRequest("request body must be a JSON object")
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        raise BadRequest("request body is not valid JSON") from None
    if not isinstance(value, dict):
        raise BadRequest("request body must be a JSON object")
    if _SURROGATE.search(raw) and _has_lone_surrogate(value):
        raise BadRequest("request body contains a lone UTF-16 surrogate (not valid Unicode text)")
    return value


def known_fields(body: Mapping, fields: Iterable[str]) -> None:
    """400 when ``body`` has a field not in ``fields``: a misspelt optional field (``"destinaton"``)
    is refused instead of silently ignored (the request would then do its default).

    >>> known_fields({"source": "d"}, ("source", "rate"))
    >>> known_fields({"source": "d", "destinaton": "t"}, ("source", "destination"))
    Traceback (most recent call last):
    ...
    lakeq.common.errors.BadRequest: unknown field(s): destinaton (this request takes destination, source)
    """
    unknown = sorted(str(k) for k in body if k not in fields)
    if unknown:
        raise BadRequest(f"unknown field(s): {', '.join(unknown)} (this request takes {', '.join(sorted(fields))})")


def _has_lone_surrogate(value: Any) -> bool:
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def int_field(obj: dict, name: str, lo: int, hi: int, default: int | None = None, required: bool = False) -> int:
    if name not in obj or obj[name] is None:
        if required or default is None:
            raise BadRequest(f"'{name}' is required")
        return default
    v = obj[name]
    if not is_int(v) or not lo <= v <= hi:
        raise BadRequest(f"'{name}' must be an integer from {lo} to {hi}")
    return v


def int_param(params: dict, name: str, lo: int, hi: int, default: int) -> int:
    raw = params.get(name)
    if raw is None:
        return default
    if not (isinstance(raw, str) and raw.isascii() and raw.isdigit() and len(raw) <= 12) or not lo <= int(raw) <= hi:
        raise BadRequest(f"'{name}' must be an integer from {lo} to {hi}")
    return int(raw)


def str_field(obj: dict, name: str, max_len: int, required: bool = False, allow_empty: bool = False) -> str | None:
    v = obj.get(name)
    if v is None:
        if required:
            raise BadRequest(f"'{name}' is required")
        return None
    if not isinstance(v, str) or len(v) > max_len or (not v and not allow_empty):
        what = "string" if allow_empty else "non-empty string"
        raise BadRequest(f"'{name}' must be a {what} of at most {max_len} characters")
    return v


def tag_list(v: Any, what: str = "tags") -> list[str]:
    if v is None:
        return []
    if not isinstance(v, list) or len(v) > MAX_TAGS:
        raise BadRequest(f"'{what}' must be a list of at most {MAX_TAGS} tags")
    for t in v:
        if not isinstance(t, str) or not 1 <= len(t) <= MAX_TAG_LEN or "||" in t or "," in t:
            raise BadRequest(f"each tag must be a string of 1-{MAX_TAG_LEN} characters without '||' or ','")
    return list(v)


# property names only lakeq itself sets (and later trusts): the SQS endpoint's sender, exact message
# attributes, trace header and deduplication id (lakeq.sqs.messages); docs/api.md "Reserved names"
RESERVED_PROPERTY_PREFIXES = ("sqs.",)


def flat_properties(v: Any, reserved_ok: bool = False) -> dict:
    """A message's ``properties``: flat, bounded; names with a reserved prefix only when
    ``reserved_ok`` (the SQS endpoint's own produce).

    >>> flat_properties({"sqs.sender": "x"}, reserved_ok=True), flat_properties({"sqs": 1})
    ({'sqs.sender': 'x'}, {'sqs': 1})
    """
    if v is None:
        return {}
    if not isinstance(v, dict) or len(v) > MAX_PROPERTIES:
        raise BadRequest(f"'properties' must be an object of at most {MAX_PROPERTIES} entries")
    for k, val in v.items():
        if not 1 <= len(k) <= MAX_PROPERTY_KEY:
            raise BadRequest(f"property names must have 1-{MAX_PROPERTY_KEY} characters")
        if not reserved_ok and k.startswith(RESERVED_PROPERTY_PREFIXES):
            raise BadRequest(f"property '{k}' is reserved: names starting with 'sqs.' are set by lakeq's SQS endpoint")
        if isinstance(val, str):
            if len(val) > MAX_PROPERTY_VALUE:
                raise BadRequest(f"property '{k}' is longer than {MAX_PROPERTY_VALUE} characters")
        elif isinstance(val, float):
            if not math.isfinite(val):
                raise BadRequest(f"property '{k}' must be a finite number")
        elif not isinstance(val, (bool, int)):
            raise BadRequest(f"property '{k}' must be a string, number or boolean (properties are flat)")
    return dict(v)


@dataclass
class MessageIn:
    id: str | None
    body: str
    key: str | None
    tags: list[str]
    properties: dict
    delay_ms: int = 0  # > 0: kept until due (lakeq.produce.delayed), at most MAX_DELAY_MS


def message_bytes(m: MessageIn) -> int:
    """A message's size as the limits count it: UTF-8 bytes of the body plus those of
    ``{"id","key","tags","properties"}`` as compact JSON (``ensure_ascii=False``)."""
    meta = json.dumps({"id": m.id, "key": m.key, "tags": m.tags, "properties": m.properties},
                      separators=(",", ":"), ensure_ascii=False)
    return len(m.body.encode("utf-8")) + len(meta.encode("utf-8"))


@dataclass
class ProduceRequest:
    producer: str
    messages: list[MessageIn]

    def too_large(self, request_bytes: int = 0) -> str | None:
        """Why the request breaks a size limit (413), or None. ``request_bytes``: the request
        body's size in UTF-8 bytes."""
        if request_bytes > MAX_REQUEST_BYTES:
            return f"the request body is larger than {MAX_REQUEST_BYTES} bytes; send fewer messages per request"
        for i, m in enumerate(self.messages):
            if len(m.body.encode("utf-8")) > MAX_BODY_BYTES:
                return f"messages[{i}].body is larger than {MAX_BODY_BYTES} bytes"
            size = message_bytes(m)
            if size > MAX_MESSAGE_BYTES:
                return (f"messages[{i}] is larger than {MAX_MESSAGE_BYTES} bytes (body, id, key, tags and "
                        "properties together, UTF-8)")
            if size - len(m.body.encode("utf-8")) > MAX_META_BYTES:
                return (f"messages[{i}] has more than {MAX_META_BYTES} bytes of id, key, tags and properties "
                        "(compact JSON, UTF-8)")
        return None


# an X-Ray trace header: Root=1-<8 hex>-<24 hex>, then ;Key=value fields (Parent, Sampled, Lineage…)
TRACE_HEADER = re.compile(r"Root=1-[0-9a-f]{8}-[0-9a-f]{24}(;[A-Za-z]+=[A-Za-z0-9:.?_-]{1,64})*")
TRACE_MAX = 256


def trace_header(*candidates: str | None) -> str | None:
    """The first of ``candidates`` that is an X-Ray trace header (``X-Amzn-Trace-Id``; the Lambda's
    ``_X_AMZN_TRACE_ID``), at most 256 characters; None when none is. A malformed one is ignored, not
    refused: tracing is a hint, as X-Ray itself treats it.

    >>> trace_header(None, "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1")
    'Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1'
    >>> trace_header("Root=2-x", "Self=1-abc;Root=1-5759e988-bd862e3fe1be46a994272793", "") is None
    True
    """
    for c in candidates:
        if c and len(c) <= TRACE_MAX and TRACE_HEADER.fullmatch(c):
            return c
    return None


def produce(body: dict, reserved_ok: bool = False) -> ProduceRequest:
    producer = check_name(body.get("producer"), "producer")
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not 1 <= len(msgs) <= MAX_MESSAGES:
        raise BadRequest(f"'messages' must be a list of 1-{MAX_MESSAGES} messages")
    out = []
    for i, m in enumerate(msgs):
        if not isinstance(m, dict):
            raise BadRequest(f"messages[{i}] must be an object")
        try:
            body_text = str_field(m, "body", 10 * MAX_BODY_BYTES, required=True, allow_empty=True)
            out.append(MessageIn(
                id=str_field(m, "id", MAX_ID_LEN),
                body=body_text or "",
                key=str_field(m, "key", MAX_KEY_LEN, allow_empty=True),
                tags=tag_list(m.get("tags")),
                properties=flat_properties(m.get("properties"), reserved_ok),
                delay_ms=int_field(m, "delay_ms", 0, MAX_DELAY_MS, default=0),
            ))
        except BadRequest as e:
            raise BadRequest(f"messages[{i}]: {e.message}") from None
    return ProduceRequest(producer, out)


@dataclass
class PullRequest:
    group: str
    client_id: str | None
    member_id: str | None
    max: int
    wait_ms: int
    tags: list[str] | None
    ack: str | None
    visibility_timeout_ms: int | None = None  # this batch's lock, instead of the consumer's
    probe: bool = True  # False: trust the queues' head hints (no chain probe; docs/api.md, the pull)


def pull(params: dict, group_required: bool = True) -> PullRequest:
    group = params.get("group")
    if group_required:
        check_name(group, "group")
    client_id = params.get("client_id")
    if client_id is not None:
        check_name(client_id, "client_id")
    member_id = params.get("member_id")
    if member_id is not None:
        check_name(member_id, "member_id")
    tags = None
    if params.get("tags") is not None:
        raw = params["tags"]
        parts = raw.split("||")
        if not raw or len(parts) > MAX_TAGS or any(not 1 <= len(p) <= MAX_TAG_LEN for p in parts):
            raise BadRequest(f"'tags' must be 1-{MAX_TAGS} tags of 1-{MAX_TAG_LEN} characters separated by '||'")
        if "," in raw:  # a tag never has one; API Gateway joins a repeated parameter with commas
            raise BadRequest("a tag never contains ','; separate the tags of 'tags' with '||'")
        tags = parts
    ack = params.get("ack")
    if ack is not None and not ack:
        raise BadRequest("'ack' must be a receipt")
    probe = params.get("probe")
    if probe is not None and probe not in ("true", "false"):
        raise BadRequest("'probe' must be true or false")
    return PullRequest(
        group=group, client_id=client_id, member_id=member_id,
        max=int_param(params, "max", 1, MAX_PULL, DEFAULT_PULL),
        wait_ms=int_param(params, "wait_ms", 0, MAX_WAIT_MS, 0),
        tags=tags, ack=ack,
        visibility_timeout_ms=(int_param(params, "visibility_timeout_ms", VISIBILITY_MIN, VISIBILITY_MAX, 0)
                               if params.get("visibility_timeout_ms") is not None else None),
        probe=probe != "false",
    )


def grow_topic(body: dict) -> int:
    """``PATCH /v1/topics/{topic}`` ``{"queues": n}``: the new count (1-64; growth is checked
    against the topic's), nothing else."""
    known_fields(body, ("queues",))
    return int_field(body, "queues", QUEUES_MIN, QUEUES_MAX, required=True)


def create_topic(body: dict) -> tuple[str, int]:
    name = check_topic(body.get("name"), "name")
    return name, int_field(body, "queues", QUEUES_MIN, QUEUES_MAX, QUEUES_DEFAULT)


@dataclass
class ClientIn:
    name: str
    role: str
    topics: list[str]
    mode: str
    visibility_timeout_ms: int
    max_deliveries: int | None = None
    dead_letter_topic: str | None = None


MAX_DELIVERIES_MAX = 100


def dead_letter_settings(body: dict) -> dict:
    """``max_deliveries`` (1-100) and ``dead_letter_topic`` (a topic name) as given (None: absent
    or null, which a PATCH reads as "clear")."""
    out: dict = {}
    if "max_deliveries" in body:
        md = body["max_deliveries"]
        if md is not None and not (is_int(md) and 1 <= md <= MAX_DELIVERIES_MAX):
            raise BadRequest(f"'max_deliveries' must be an integer from 1 to {MAX_DELIVERIES_MAX} (or null)")
        out["max_deliveries"] = md
    if "dead_letter_topic" in body:
        t = body["dead_letter_topic"]
        out["dead_letter_topic"] = None if t is None else check_topic(t, "dead_letter_topic")
    return out


def create_client(body: dict) -> ClientIn:
    name = check_name(body.get("name"), "name")
    role = body.get("role")
    if role not in ("producer", "consumer"):
        raise BadRequest("'role' must be 'producer' or 'consumer'")
    topics = body.get("topics")
    if not isinstance(topics, list) or not 1 <= len(topics) <= 100:
        raise BadRequest("'topics' must be a list of 1-100 topic names")
    for t in topics:
        check_topic(t, "each of 'topics'")
    mode = body.get("mode", "clustering")
    if mode is None:
        mode = "clustering"
    if mode not in ("clustering", "broadcasting"):
        raise BadRequest("'mode' must be 'clustering' or 'broadcasting'")
    vis = int_field(body, "visibility_timeout_ms", VISIBILITY_MIN, VISIBILITY_MAX, VISIBILITY_DEFAULT)
    dl = dead_letter_settings(body)
    if role != "consumer" and any(x is not None for x in dl.values()):
        raise BadRequest("'max_deliveries' and 'dead_letter_topic' are for consumers")
    return ClientIn(name, role, list(dict.fromkeys(topics)), mode, vis, dl.get("max_deliveries"),
                    dl.get("dead_letter_topic"))


def patch_client(body: dict) -> dict:
    """``PATCH /v1/clients/{name}``: ``max_deliveries`` and/or ``dead_letter_topic`` (null clears),
    and/or ``alarms`` (a boolean: false leaves the consumer's rows out of the deployment's alarms,
    true puts them back) — as the stored changes (``alarms_muted``: True, or None to remove)."""
    unknown = sorted(set(body) - {"max_deliveries", "dead_letter_topic", "alarms"})
    if unknown:
        raise BadRequest(f"unknown field '{unknown[0]}': a PATCH takes 'max_deliveries', 'dead_letter_topic' "
                         "and/or 'alarms'")
    dl = dead_letter_settings(body)
    if "alarms" in body:
        if not isinstance(body["alarms"], bool):
            raise BadRequest("'alarms' must be true or false")
        dl["alarms_muted"] = None if body["alarms"] else True
    if not dl:
        raise BadRequest("give 'max_deliveries', 'dead_letter_topic' (null clears) and/or 'alarms'")
    return dl


@dataclass
class AckIn:
    group: str | None
    subscription: str | None
    client_id: str | None
    receipt: str
    outcomes: Outcomes = Outcomes()


MAX_ACKS = 100  # entries of a batch ack
MAX_OFFSET = 2**53


def _consumer(body: dict) -> tuple[str | None, str | None, str | None]:
    group = body.get("group")
    sub = body.get("subscription")
    if (group is None) == (sub is None):
        raise BadRequest("an ack names exactly one of 'group' or 'subscription'")
    if group is not None:
        check_name(group, "group")
    elif not is_name(sub):
        raise BadRequest("'subscription' must be a subscription id")
    client_id = body.get("client_id")
    if client_id is not None:
        check_name(client_id, "client_id")
    return group, sub, client_id


def outcomes(entry: dict) -> Outcomes:
    """``accept`` / ``release`` / ``reject``: optional lists of offsets (at most MAX_PULL each, no
    offset in two lists). None of them: the whole batch is accepted.

    >>> outcomes({}), outcomes({"reject": [3]})
    (Outcomes(accept=None, release=(), reject=()), Outcomes(accept=(), release=(), reject=(3,)))
    """
    lists: dict[str, tuple[int, ...]] = {}
    for name in ("accept", "release", "reject"):
        raw = entry.get(name)
        if raw is None:
            continue
        if not isinstance(raw, list) or len(raw) > MAX_PULL or not all(is_int(o) and 0 <= o <= MAX_OFFSET for o in raw):
            raise BadRequest(f"'{name}' must be a list of at most {MAX_PULL} offsets (integers >= 0)")
        lists[name] = tuple(dict.fromkeys(raw))
    if not lists:
        return Outcomes()
    seen: set[int] = set()
    for offs in lists.values():
        if seen & set(offs):
            raise BadRequest(f"offset {min(seen & set(offs))} is in more than one of 'accept', 'release', 'reject'")
        seen |= set(offs)
    return Outcomes(lists.get("accept", ()), lists.get("release", ()), lists.get("reject", ()))


def _receipt(entry: dict) -> str:
    receipt = entry.get("receipt")
    if not isinstance(receipt, str) or not receipt:
        raise BadRequest("'receipt' is required")
    return receipt


def ack(body: dict) -> AckIn:
    group, sub, client_id = _consumer(body)
    receipt = _receipt(body)
    return AckIn(group, sub, client_id, receipt, outcomes(body))


@dataclass
class AckBatchIn:
    group: str | None
    subscription: str | None
    client_id: str | None
    entries: list  # each an AckIn or the BadRequest that entry is answered with


def ack_batch(body: dict) -> AckBatchIn:
    """``{"group" | "subscription", ["client_id"], "acks": [{"receipt", outcomes...}, ...]}``: the
    envelope is checked here (400 for the request); each entry on its own (its own error)."""
    if "receipt" in body:
        raise BadRequest("an ack has either 'receipt' or 'acks', not both")
    group, sub, client_id = _consumer(body)
    raw = body.get("acks")
    if not isinstance(raw, list) or not 1 <= len(raw) <= MAX_ACKS:
        raise BadRequest(f"'acks' must be a list of 1-{MAX_ACKS} entries")
    entries: list = []
    for i, e in enumerate(raw):
        try:
            if not isinstance(e, dict):
                raise BadRequest("must be an object {\"receipt\", [\"accept\"], [\"release\"], [\"reject\"]}")
            entries.append(AckIn(group, sub, client_id, _receipt(e), outcomes(e)))
        except BadRequest as err:
            entries.append(BadRequest(f"acks[{i}]: {err.message}"))
    return AckBatchIn(group, sub, client_id, entries)


@dataclass
class VisibilityIn:
    ack: AckIn
    visibility_timeout_ms: int


def visibility(body: dict) -> VisibilityIn:
    """``POST /v1/visibility``: an ack's fields plus ``visibility_timeout_ms`` 0–43200000 (0: unlock now);
    nothing else (an ack's ``accept`` / ``release`` / ``reject`` included: a visibility settles nothing)."""
    known_fields(body, ("group", "subscription", "client_id", "receipt", "visibility_timeout_ms"))
    req = ack(body)
    return VisibilityIn(req, int_field(body, "visibility_timeout_ms", 0, VISIBILITY_MAX, required=True))


@dataclass
class ResetIn:
    topic: str
    queue: int
    offset: int
    client_id: str | None


def reset_offset(body: dict) -> ResetIn:
    topic = check_topic(body.get("topic"), "topic")
    queue = int_field(body, "queue", 0, QUEUES_MAX - 1, required=True)
    offset = int_field(body, "offset", 0, 2**53, required=True)
    client_id = body.get("client_id")
    if client_id is not None:
        check_name(client_id, "client_id")
    return ResetIn(topic, queue, offset, client_id)
