"""The SQS-compatible endpoint's actions over lakeq's own use cases (docs/api.md "SQS-compatible endpoint").

A queue is a topic (same name) read through its own consumer group ``sqs.<name>`` (clustering), and
written by the caller (a producer client) or, for the admin, the producer client ``sqs.<name>.send``.
The actions authenticate (:func:`authenticate_request`, the SigV4 seam of :mod:`lakeq.sqs.auth`),
check the principal's permission here, then call :mod:`lakeq.consume.service` with the native JSON bodies
as the admin. Wire formats and errors: :mod:`lakeq.sqs.protocol`; storage: :mod:`lakeq.store.sqs`.
"""
from __future__ import annotations

import base64
import hashlib
import heapq
import json
import os
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable

from lakeq.admin import auth as lq_auth
from lakeq.admin import service as admin_service
from lakeq.admin.auth import Principal
from lakeq.common import clock as _clock
from lakeq.common.errors import ApiError, Forbidden, NotFound, StaleReceipt, Unavailable
from lakeq.common.names import covers
from lakeq.consume import service
from lakeq.consume import settle as settling
from lakeq.consume.reader import broker, topic_reader
from lakeq.consume.reader import views as _views
from lakeq.log.receipts import Receipt
from lakeq.log.receipts import parse as parse_receipt
from lakeq.log.selection import lock_until
from lakeq.log.settlement import Outcomes
from lakeq.produce import delayed as _delayed
from lakeq.produce import service as produce_service
from lakeq.sqs import protocol as sp
from lakeq.store.models import ClientModel, TopicModel, log_of
from lakeq.store.repos import ClientRepo, LogRepo, OffsetRepo, TopicRepo, TransactionFailed, inc_of
from lakeq.store.sqs import SqsRepo, group_name, producer_name

ADMIN = Principal(admin=True)
LAKEQ_QUEUES = 4  # lakeq queues of a queue made by CreateQueue (parallel batch locks)
LAKEQ_MAX_BODY = 262_144  # what lakeq stores per message body (validation.MAX_BODY_BYTES)
MAX_BATCH_PAYLOAD = 1_048_576  # SendMessageBatch: the sum of the messages' sizes (SQS: 1 MiB since 2025)
MAX_TAGS = 50
ATTRS_PROP = "sqs.attrs"  # the exact message attributes (JSON, split over sqs.attrs, sqs.attrs.1, ...)
PROP_CHUNK = 1000
FIFO_NS = uuid.UUID("6c1f8f2e-3a59-4a59-9e4c-7c2b9b1f0a11")

READ_ONLY = {"GetQueueUrl", "ListQueues", "GetQueueAttributes", "ListQueueTags", "ListDeadLetterSourceQueues"}
PRODUCE = {"SendMessage", "SendMessageBatch"}
CONSUME = {"ReceiveMessage", "DeleteMessage", "DeleteMessageBatch", "ChangeMessageVisibility",
           "ChangeMessageVisibilityBatch"}


def now_ms() -> int:
    return _clock.now()


# --- the auth seam -------------------------------------------------------------------------------
def _authenticate(method: str, path: str, query: str, headers: dict, body: bytes) -> Principal:
    """SigV4 (:func:`lakeq.sqs.auth.authenticate`); before that module exists: an
    ``Authorization: Bearer <lakeq key>`` header, or any caller as the admin with
    ``LAKEQ_SQS_ANY_SIGNATURE=1`` (the local stack's conformance flag)."""
    try:
        from lakeq.sqs import auth as sqs_auth  # type: ignore[attr-defined]
    except ImportError:
        sqs_auth = None
    if sqs_auth is not None:
        return sqs_auth.authenticate(method, path, query, headers, body)
    if os.environ.get("LAKEQ_SQS_ANY_SIGNATURE") == "1":
        return ADMIN
    authz = headers.get("authorization") or ""
    if authz.lower().startswith("bearer "):
        try:
            return lq_auth.authenticate(authz)
        except ApiError as e:
            raise sp.SqsError("InvalidClientTokenId", e.message, status=403) from None
    raise sp.SqsError("MissingAuthenticationToken", "Request is missing Authentication Token", status=403,
                      json_type="com.amazon.coral.service#MissingAuthenticationTokenException")


authenticate_request: Callable[[str, str, str, dict, bytes], Principal] = _authenticate


# --- request context -------------------------------------------------------------------------------
@dataclass
class Ctx:
    principal: Principal
    base: str
    account: str
    region: str

    def url(self, name: str) -> str:
        return sp.queue_url(self.base, self.account, name)

    def arn(self, name: str) -> str:
        return sp.queue_arn(self.region, self.account, name)


def account_id() -> str:
    return os.environ.get("LAKEQ_ACCOUNT_ID") or "000000000000"


def region() -> str:
    return os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"


@dataclass
class Queue:
    name: str
    topic: TopicModel
    doc: dict  # {"attributes", "tags", "modified"}
    raw: str | None  # the stored sqs JSON (compare-and-set)

    @property
    def fifo(self) -> bool:
        return self.name.endswith(".fifo")

    @property
    def attributes(self) -> dict[str, str]:
        """Settable attributes in effect: SQS's defaults overlaid with the stored ones."""
        out = dict(sp.DEFAULTS)
        if self.fifo:
            out.update(sp.FIFO_DEFAULTS)
        out.update(self.doc.get("attributes") or {})
        return out

    def attr_int(self, name: str) -> int:
        return int(self.attributes[name])

    @property
    def log(self) -> str:
        """The log name of this incarnation of the queue's topic: every storage key uses it."""
        return log_of(self.topic)


def _load(t: TopicModel | None, name: str) -> Queue:
    if t is None or not sp.is_queue_name(name):
        raise sp.no_queue()
    raw = t.sqs
    return Queue(name, t, json.loads(raw) if raw else {"attributes": {}, "tags": {}}, raw)


def _queue(req: dict) -> Queue:
    name = sp.queue_name_of_url(req.get("QueueUrl"))
    return _load(TopicRepo.get(name), name)


def _allow(ctx: Ctx, action: str, topic: str) -> None:
    """Permissions follow the principal: admin → all; a producer client → sends and read-only calls
    on topics it is granted; a consumer client → receive/delete/visibility and read-only calls on its
    topics; queue administration → admin only. AccessDenied otherwise."""
    p = ctx.principal
    if p.admin:
        return
    c = lq_auth.cached_client(p.client or "")  # (trusted for auth.CLIENT_CACHE_TTL_S, as the native routes do)
    if c is not None and any(covers(g, topic) for g in c.topics):
        if action in READ_ONLY or (action in PRODUCE and c.role == "producer") or \
                (action in CONSUME and c.role == "consumer"):
            return
    raise sp.access_denied(action)


def _may_see(ctx: Ctx, topic: str) -> bool:
    try:
        _allow(ctx, "ListQueues", topic)
        return True
    except sp.SqsError:
        return False


_CLIENTS_SEEN: dict[str, float] = {}  # queue's log name -> monotonic s until which its SQS clients are known
CLIENTS_SEEN_TTL_S = 60.0


def _ensure_clients(q: Queue) -> None:
    """A topic made by lakeq's API gets its SQS clients on first SQS use. Known clients are remembered
    per container for a minute (two GetItems saved per send and receive), per incarnation of the
    topic (its log name): a queue deleted and made again in another container is checked again."""
    now = time.monotonic()
    if _CLIENTS_SEEN.get(q.log, 0.0) > now:
        return
    if ClientRepo.get(group_name(q.name)) is None or ClientRepo.get(producer_name(q.name)) is None:
        SqsRepo.ensure_clients(q.name, now_ms())
    if len(_CLIENTS_SEEN) > 10_000:
        _CLIENTS_SEEN.clear()
    _CLIENTS_SEEN[q.log] = now + CLIENTS_SEEN_TTL_S


def _sqs_error(e: ApiError) -> sp.SqsError:
    """A native error as SQS's: a missing topic → QueueDoesNotExist; the caller's mistakes → 400s."""
    if isinstance(e, NotFound) and "topic" in e.message:
        return sp.no_queue()
    if isinstance(e, Forbidden):
        return sp.SqsError("AccessDenied", e.message, status=403)
    if isinstance(e, Unavailable):
        return sp.SqsError("ServiceUnavailable", e.message, status=503, sender=False)
    if e.status >= 500:
        return sp.SqsError("InternalFailure", e.message, status=500, sender=False)
    return sp.invalid(e.message)


def _native(fn: Callable[[], Any]) -> Any:
    """Call a native use case, mapping its errors to SQS's."""
    try:
        return fn()
    except ApiError as e:
        raise _sqs_error(e) from None


# --- queues ---------------------------------------------------------------------------------------
def _check_tags(tags: object) -> dict[str, str]:
    if tags is None:
        return {}
    if not isinstance(tags, dict):
        raise sp.invalid("Tags must be a map.")
    for k, v in tags.items():
        if not isinstance(k, str) or not 1 <= len(k) <= 128:
            raise sp.invalid("Tag keys must be between 1 and 128 characters in length.")
        if not isinstance(v, str) or len(v) > 256:
            raise sp.invalid("Tag values must be between 0 and 256 characters in length.")
    return dict(tags)


def _check_redrive_target(ctx: Ctx, attrs: dict[str, str], fifo: bool) -> None:
    rp = attrs.get("RedrivePolicy")
    if rp:
        target, _ = sp.parse_redrive(rp)
        t = TopicRepo.get(target)
        if t is None:
            raise sp.invalid(f"Value {rp} for parameter RedrivePolicy is invalid. Reason: Dead letter target does "
                             "not exist.")
        if target.endswith(".fifo") != fifo:
            raise sp.invalid(f"Value {rp} for parameter RedrivePolicy is invalid. Reason: Dead-letter queue must "
                             "be same type of queue as the source.")


MAX_DELIVERIES = 100  # lakeq's max_deliveries bound (maxReceiveCount above it is applied as 100)


def _redrive(attrs: dict[str, str]) -> tuple[str, int] | None:
    rp = attrs.get("RedrivePolicy")
    if not rp:
        return None
    target, count = sp.parse_redrive(rp)
    return target, min(count, MAX_DELIVERIES)


def _apply_redrive(name: str, attrs: dict[str, str]) -> None:
    """RedrivePolicy → the SQS group's ``dead_letter_topic`` + ``max_deliveries`` (lakeq's settlement:
    ``PATCH /v1/clients/{name}``, one conditional UpdateItem; idempotent)."""
    if "RedrivePolicy" not in attrs:
        return
    r = _redrive(attrs)
    patch = {"dead_letter_topic": r[0], "max_deliveries": r[1]} if r else {"dead_letter_topic": None,
                                                                             "max_deliveries": None}
    _native(lambda: admin_service.patch_client(ADMIN, group_name(name), json.dumps(patch)))


def create_queue(ctx: Ctx, req: dict) -> dict:
    name = req.get("QueueName")
    if name is None or name == "":
        raise sp.missing("QueueName")
    if not sp.is_queue_name(name):
        raise sp.invalid("Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length")
    fifo = name.endswith(".fifo")
    attrs = sp.check_attributes(req.get("Attributes"), fifo, creating=True)
    if fifo and attrs.get("FifoQueue") != "true":
        raise sp.invalid("The name of a FIFO queue can only include alphanumeric characters, hyphens, or "
                         "underscores, must end with .fifo suffix and be 1 to 80 in length.")
    tags = _check_tags(req.get("tags"))
    if len(tags) > MAX_TAGS:
        raise sp.invalid(f"Too many tags added for queue {name}.")
    if not ctx.principal.admin:
        raise sp.access_denied("CreateQueue")
    _check_redrive_target(ctx, attrs, fifo)
    for _ in range(3):
        existing = TopicRepo.get(name)
        if existing is not None:
            q = _load(existing, name)
            have = q.attributes
            for k, v in attrs.items():
                if k != "FifoQueue" and have.get(k, "") != v:  # (FifoQueue: the name's suffix decides)
                    raise sp.SqsError("QueueNameExists", f"A queue already exists with the same name and a "
                                      f"different value for attribute {k}")
            _ensure_clients(q)
            _apply_redrive(name, attrs)  # (a retry after a crash between the two writes of an earlier call)
            return {"QueueUrl": ctx.url(name)}
        now = now_ms()
        stored = {k: v for k, v in attrs.items() if k != "FifoQueue"}
        doc = json.dumps({"attributes": stored, "tags": tags, "modified": now // 1000}, sort_keys=True)
        try:
            SqsRepo.create(name, LAKEQ_QUEUES, doc, now, _redrive(stored))
        except TransactionFailed as e:
            if e.failed(0):
                continue  # created meanwhile: compare with it
            if any(e.failed(i) for i in range(1 + LAKEQ_QUEUES, 3 + LAKEQ_QUEUES)):
                raise sp.invalid(f"A lakeq client named '{group_name(name)}' or '{producer_name(name)}' exists; "
                                 "the queue cannot have its SQS clients.") from None
            raise
        return {"QueueUrl": ctx.url(name)}
    raise sp.SqsError("ServiceUnavailable", "the queue is too contended; retry", status=503, sender=False)


def get_queue_url(ctx: Ctx, req: dict) -> dict:
    name = req.get("QueueName")
    if not name:
        raise sp.missing("QueueName")
    q = _load(TopicRepo.get(name) if sp.is_queue_name(name) else None, name)
    _allow(ctx, "GetQueueUrl", q.name)
    return {"QueueUrl": ctx.url(q.name)}


def _page(names: list[str], req: dict) -> tuple[list[str], str | None]:
    max_results = sp.int_param(req, "MaxResults", 1, 1000)
    token = req.get("NextToken")
    if token:
        try:
            after = base64.b64decode(token, altchars=b"-_", validate=True).decode()
        except (ValueError, TypeError, UnicodeDecodeError):
            raise sp.invalid("Invalid NextToken value.") from None
        names = [n for n in names if n > after]
    if max_results is None:
        return names[:1000], None
    page = names[:max_results]
    nxt = base64.urlsafe_b64encode(page[-1].encode()).decode() if len(names) > max_results else None
    return page, nxt


def list_queues(ctx: Ctx, req: dict) -> dict:
    prefix = req.get("QueueNamePrefix") or ""
    names = sorted(t.name for t in TopicRepo.all()
                   if sp.is_queue_name(t.name) and t.name.startswith(prefix) and _may_see(ctx, t.name))
    page, nxt = _page(names, req)
    out: dict = {}
    if page:
        out["QueueUrls"] = [ctx.url(n) for n in page]
    if nxt:
        out["NextToken"] = nxt
    return out


def delete_queue(ctx: Ctx, req: dict) -> dict:
    """The topic item becomes a tombstone (its incarnation kept: a queue made again is the next one,
    with keys of its own), its queue items and SQS clients go, then its delayed items (best effort;
    a retry after a crash there finishes them, then answers QueueDoesNotExist). docs/design.md
    "Queue lifecycle: deletion and incarnations"."""
    name = sp.queue_name_of_url(req.get("QueueUrl"))
    t = TopicRepo.get_any(name)
    if t is not None and t.deleted_at is not None:
        if ctx.principal.admin:
            SqsRepo.purge_delayed(log_of(t), int(t.queues))
        t = None
    q = _load(t, name)
    if not ctx.principal.admin:
        raise sp.access_denied("DeleteQueue")
    _CLIENTS_SEEN.pop(q.log, None)
    SqsRepo.delete(q.topic, now_ms())
    for c in (group_name(q.name), producer_name(q.name)):
        lq_auth.forget_client(c)
    return {}


def purge_queue(ctx: Ctx, req: dict) -> dict:
    """Every queue's committed offset for the SQS group moves to the log's head (one UpdateItem per
    lakeq queue: OffsetRepo.reset, which also ends any lock, so in-flight messages go too). Delayed
    messages already due are promoted first (lakeq.produce.delayed.promote), so they are purged too; those
    not yet due are kept (they belong to the topic, which other lakeq groups read too; docs/api.md)."""
    q = _queue(req)
    if not ctx.principal.admin:
        raise sp.access_denied("PurgeQueue")
    _ensure_clients(q)
    g = group_name(q.name)
    owner = OffsetRepo.owner(g, q.log)
    now = now_ms()
    for meta in LogRepo.queues(q.log, int(q.topic.queues)):
        head = _delayed.promote(q.log, int(meta.queue), now) if meta.next_due is not None else None
        OffsetRepo.reset(owner, int(meta.queue), int(meta.max_offset) if head is None else head,
                         {"group": g, "client_id": None, "topic": q.name}, now)
    return {}


def _counts(q: Queue) -> dict[str, str]:
    """Approximate counts from the SQS group's offsets: visible = backlog outside live locks,
    not visible = messages under a live lock, delayed = the queues' delayed items (lakeq.produce.delayed)."""
    log = q.log
    owner = OffsetRepo.owner(group_name(q.name), log)
    now = now_ms()
    recs = OffsetRepo.records(owner)
    n = int(q.topic.queues)
    visible = inflight = 0
    for v in _views(log, owner, n, recs=recs):
        r = recs.get(v.queue)
        if v.locked(now) and r is not None and r.lock_next is not None:
            held = max(0, min(int(r.lock_next), v.max_offset) - v.start)
            inflight += held
            visible += max(0, v.backlog - held)
        else:
            visible += v.backlog
    delayed = sum(int(getattr(m, "delayed", 0) or 0) for m in LogRepo.queues(log, n))
    return {"ApproximateNumberOfMessages": str(visible), "ApproximateNumberOfMessagesNotVisible": str(inflight),
            "ApproximateNumberOfMessagesDelayed": str(delayed)}


def get_queue_attributes(ctx: Ctx, req: dict) -> dict:
    q = _queue(req)
    known = set(sp.READ_ONLY) | set(sp.DEFAULTS) | set(q.attributes)
    known |= {"Policy", "RedrivePolicy", "RedriveAllowPolicy", "KmsMasterKeyId", "KmsDataKeyReusePeriodSeconds"}
    if q.fifo:
        known |= set(sp.FIFO_DEFAULTS)
    wanted = sp.requested_attribute_names(req.get("AttributeNames"), known)
    _allow(ctx, "GetQueueAttributes", q.name)
    out: dict[str, str] = {}
    attrs = q.attributes
    for k in wanted:
        if k in attrs and attrs[k] != "":
            out[k] = attrs[k]
    if "QueueArn" in wanted:
        out["QueueArn"] = ctx.arn(q.name)
    if "CreatedTimestamp" in wanted:
        out["CreatedTimestamp"] = str(int(q.topic.created_at) // 1000)
    if "LastModifiedTimestamp" in wanted:
        out["LastModifiedTimestamp"] = str(q.doc.get("modified") or int(q.topic.created_at) // 1000)
    if wanted & {"ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible",
                 "ApproximateNumberOfMessagesDelayed"}:
        out.update({k: v for k, v in _counts(q).items() if k in wanted})
    return {"Attributes": out} if out else {}


def _update_doc(q: Queue, change: Callable[[dict], None]) -> None:
    """Compare-and-set the topic's sqs JSON (a few attempts under concurrent changes)."""
    for _ in range(8):
        doc = json.loads(json.dumps(q.doc))
        change(doc)
        doc["modified"] = now_ms() // 1000
        if SqsRepo.set_sqs(q.name, q.raw, json.dumps(doc, sort_keys=True), inc_of(q.topic)):
            return
        q = _load(TopicRepo.get(q.name), q.name)
    raise sp.SqsError("ServiceUnavailable", "the queue is too contended; retry", status=503, sender=False)


def set_queue_attributes(ctx: Ctx, req: dict) -> dict:
    q = _queue(req)
    if req.get("Attributes") is None:
        raise sp.missing("Attributes")
    attrs = sp.check_attributes(req.get("Attributes"), q.fifo, creating=False)
    if not ctx.principal.admin:
        raise sp.access_denied("SetQueueAttributes")
    _check_redrive_target(ctx, attrs, q.fifo)
    _ensure_clients(q)
    # the group's dead-letter settings first, then the attributes that describe them: a crash in
    # between leaves the new behaviour with the old description, and the client's retry writes both
    _apply_redrive(q.name, attrs)

    def change(doc: dict) -> None:
        doc.setdefault("attributes", {}).update(attrs)
    _update_doc(q, change)
    return {}


def tag_queue(ctx: Ctx, req: dict) -> dict:
    q = _queue(req)
    if not req.get("Tags"):  # (an empty map too: the query protocol cannot tell it from a missing one)
        raise sp.missing("Tags")
    tags = _check_tags(req.get("Tags"))
    if not ctx.principal.admin:
        raise sp.access_denied("TagQueue")

    def change(doc: dict) -> None:
        merged = {**(doc.get("tags") or {}), **tags}
        if len(merged) > MAX_TAGS:
            raise sp.invalid(f"Too many tags added for queue {q.name}.")
        doc["tags"] = merged
    _update_doc(q, change)
    return {}


def untag_queue(ctx: Ctx, req: dict) -> dict:
    q = _queue(req)
    keys = req.get("TagKeys")
    if keys is None:
        raise sp.missing("TagKeys")
    if not isinstance(keys, list):
        raise sp.invalid("TagKeys must be a list.")
    if not keys:
        raise sp.invalid("Tag keys must be between 1 and 128 characters in length.")
    if not ctx.principal.admin:
        raise sp.access_denied("UntagQueue")

    def change(doc: dict) -> None:
        doc["tags"] = {k: v for k, v in (doc.get("tags") or {}).items() if k not in keys}
    _update_doc(q, change)
    return {}


def list_queue_tags(ctx: Ctx, req: dict) -> dict:
    q = _queue(req)
    _allow(ctx, "ListQueueTags", q.name)
    return {"Tags": q.doc.get("tags") or {}}  # (an empty map when untagged, as moto's JSON answer)


def list_dead_letter_source_queues(ctx: Ctx, req: dict) -> dict:
    q = _queue(req)
    _allow(ctx, "ListDeadLetterSourceQueues", q.name)
    names = []
    for t in TopicRepo.all():
        if not t.sqs or not sp.is_queue_name(t.name):
            continue
        rp = (json.loads(t.sqs).get("attributes") or {}).get("RedrivePolicy")
        if rp and sp.parse_redrive(rp)[0] == q.name:
            names.append(t.name)
    page, nxt = _page(sorted(names), req)
    out: dict = {"queueUrls": [ctx.url(n) for n in page]}
    if nxt:
        out["NextToken"] = nxt
    return out


# --- messages: send -------------------------------------------------------------------------------
def _sender_id(ctx: Ctx) -> str:
    return ctx.account if ctx.principal.admin else f"{ctx.principal.client}"


@dataclass
class Prepared:
    message: dict  # the native produce message
    md5_body: str
    md5_attrs: str | None
    md5_system: str | None
    size: int


def _prepare(ctx: Ctx, q: Queue, e: dict) -> Prepared:
    body = sp.check_body(e.get("MessageBody"))
    attrs = sp.check_message_attributes(e.get("MessageAttributes"))
    system = sp.check_message_attributes(e.get("MessageSystemAttributes"))
    if set(system) - {"AWSTraceHeader"}:
        raise sp.invalid("Only the AWSTraceHeader message system attribute is supported.")
    size = sp.message_size(body, attrs)
    limit = min(q.attr_int("MaximumMessageSize"), LAKEQ_MAX_BODY)
    if size > limit:
        raise sp.invalid(f"One or more parameters are invalid. Reason: Message must be shorter than {limit} bytes.")
    delay = sp.int_param(e, "DelaySeconds", 0, 900)
    if delay and q.fifo:  # (an explicit 0 is accepted, as SQS does: SDKs that always send the field)
        raise sp.invalid(f"Value {delay} for parameter DelaySeconds is invalid. Reason: The request include "
                         "parameter that is not valid for this queue type.")
    if delay is None:
        delay = q.attr_int("DelaySeconds")
    props: dict[str, Any] = {}
    for name, a in attrs.items():  # lakeq consumers see String / Number attributes as properties
        if "StringValue" in a and not name.startswith("sqs.") and len(name) <= 128 and len(a["StringValue"]) <= 1024:
            props[name] = a["StringValue"]
    if attrs:
        text = sp.attributes_to_json(attrs)
        chunks = [text[i:i + PROP_CHUNK] for i in range(0, len(text), PROP_CHUNK)]
        if len(chunks) + len(props) + 4 > 64:
            raise sp.invalid("The message attributes are too large for lakeq (at most about 50 KB as JSON).")
        for i, c in enumerate(chunks):
            props[ATTRS_PROP if i == 0 else f"{ATTRS_PROP}.{i}"] = c
    props["sqs.sender"] = _sender_id(ctx)
    if system:
        props["sqs.trace"] = system["AWSTraceHeader"].get("StringValue", "")
    msg: dict[str, Any] = {"body": body, "properties": props}
    group = e.get("MessageGroupId")
    dedup = e.get("MessageDeduplicationId")
    if q.fifo:
        if group is None:
            raise sp.missing("MessageGroupId")
        sp.check_group_id(group)
        if dedup is None:
            if q.attributes.get("ContentBasedDeduplication") != "true":
                raise sp.invalid("The queue should either have ContentBasedDeduplication enabled or "
                                 "MessageDeduplicationId provided explicitly")
            dedup = hashlib.sha256(body.encode("utf-8")).hexdigest()
        else:
            sp.check_group_id(dedup, "MessageDeduplicationId")
        scope = group if q.attributes.get("DeduplicationScope") == "messageGroup" else ""
        seed = f"{scope}\n{dedup}" if not inc_of(q.topic) else f"{q.log}\n{scope}\n{dedup}"
        msg["id"] = str(uuid.uuid5(FIFO_NS, seed))  # (a queue made again: other MessageIds)
        props["sqs.dedup"] = dedup
    elif dedup is not None:
        raise sp.invalid(f"Value {dedup} for parameter MessageDeduplicationId is invalid. Reason: The request "
                         "include parameter that is not valid for this queue type.")
    if group is not None:
        sp.check_group_id(group)
        msg["key"] = group
    if delay:
        msg["delay_ms"] = delay * 1000
    return Prepared(msg, sp.md5_hex(body), sp.md5_attributes(attrs), sp.md5_attributes(system), size)


def _producer(ctx: Ctx, q: Queue) -> str:
    if ctx.principal.admin:
        _ensure_clients(q)
        return producer_name(q.name)
    return ctx.principal.client  # type: ignore[return-value]


SEQ_INDEX_PROP = "sqs.seqi"  # a delayed FIFO message's index in its send request (its SequenceNumber)
ORDER_PROP = "sqs.ix"  # any other SQS message's index in its send request (one receive's order)


def _produce(ctx: Ctx, q: Queue, prepared: list[Prepared]) -> list[dict]:
    producer = _producer(ctx, q)
    for i, p in enumerate(prepared):
        delayed_fifo = q.fifo and p.message.get("delay_ms")
        p.message["properties"][SEQ_INDEX_PROP if delayed_fifo else ORDER_PROP] = str(i)
    raw = json.dumps({"producer": producer, "messages": [p.message for p in prepared]}, ensure_ascii=False)
    return _native(lambda: produce_service.produce(ADMIN, q.name, raw, reserved_ok=True, t=q.topic))["results"]


def _sent(q: Queue, p: Prepared, r: dict) -> dict:
    """A send's answer. A FIFO SequenceNumber is the one the message will be received with: from its
    offset, or, delayed (no offset until promoted), from its send time, index and id
    (:func:`lakeq.sqs.protocol.delayed_sequence_number`)."""
    out = {"MessageId": r["id"], "MD5OfMessageBody": p.md5_body}
    if p.md5_attrs:
        out["MD5OfMessageAttributes"] = p.md5_attrs
    if p.md5_system:
        out["MD5OfMessageSystemAttributes"] = p.md5_system
    if q.fifo:
        if r.get("offset") is not None:
            out["SequenceNumber"] = sp.sequence_number(int(r["queue"]), int(r["offset"]))
        else:
            sent_at = int(r.get("deliver_at") or 0) - int(p.message.get("delay_ms") or 0)
            index = int(p.message["properties"].get(SEQ_INDEX_PROP) or 0)
            out["SequenceNumber"] = sp.delayed_sequence_number(sent_at, index, r["id"])
    return out


def send_message(ctx: Ctx, req: dict) -> dict:
    sp.int_param(req, "DelaySeconds", 0, 900)  # SQS checks the request before the queue exists
    q = _queue(req)
    p = _prepare(ctx, q, req)
    _allow(ctx, "SendMessage", q.name)
    return _sent(q, p, _produce(ctx, q, [p])[0])


def _entry_size(e: dict) -> int:
    """An entry's size as SQS counts it for BatchRequestTooLong (body + attributes; the body alone when
    its attributes are invalid: that entry fails on its own)."""
    body = e.get("MessageBody")
    if not isinstance(body, str):
        return 0
    try:
        return sp.message_size(body, sp.check_message_attributes(e.get("MessageAttributes")))
    except (sp.SqsError, UnicodeEncodeError):  # (a lone surrogate: the entry fails on its own)
        return len(body.encode("utf-8", "surrogatepass"))


def send_message_batch(ctx: Ctx, req: dict) -> dict:
    q = _queue(req)
    entries = sp.check_batch(req.get("Entries"), "SendMessage")
    _allow(ctx, "SendMessageBatch", q.name)
    total = sum(_entry_size(e) for e in entries)  # the whole request's, before any entry is judged (SQS)
    if total > MAX_BATCH_PAYLOAD:
        raise sp.SqsError("BatchRequestTooLong", f"Batch requests cannot be longer than {MAX_BATCH_PAYLOAD} bytes. "
                          f"You have sent {total} bytes.")
    if q.fifo:  # SQS refuses these for the whole request, not entry by entry (as moto does)
        if any(e.get("MessageGroupId") is None for e in entries):
            raise sp.missing("MessageGroupId")
        if (q.attributes.get("ContentBasedDeduplication") != "true"
                and any(e.get("MessageDeduplicationId") is None for e in entries)):
            raise sp.invalid("The queue should either have ContentBasedDeduplication enabled or "
                             "MessageDeduplicationId provided explicitly")
    ok: list[tuple[str, Prepared]] = []
    failed = []
    for e in entries:
        try:
            ok.append((e["Id"], _prepare(ctx, q, e)))
        except sp.SqsError as err:
            failed.append(sp.batch_error(e["Id"], err))
    successful = []
    if ok:
        results = _produce(ctx, q, [p for _, p in ok])
        successful = [{"Id": i, **_sent(q, p, r)} for (i, p), r in zip(ok, results)]
    return {"Successful": successful, "Failed": failed}


# --- messages: receive ----------------------------------------------------------------------------
def _message_attributes(props: dict) -> dict[str, dict]:
    """The message's SQS attributes: the exact ones an SQS sender gave, else its lakeq properties
    (strings → String, numbers → Number, booleans → String "true"/"false")."""
    if ATTRS_PROP in props:
        text = props[ATTRS_PROP]
        i = 1
        while f"{ATTRS_PROP}.{i}" in props:
            text += props[f"{ATTRS_PROP}.{i}"]
            i += 1
        try:
            return sp.attributes_from_json(text)
        except (ValueError, KeyError, TypeError):
            return {}
    out = {}
    for k, v in props.items():
        if k.startswith("sqs.") or k.lower().startswith(("aws.", "amazon.")):  # (SQS reserves AWS./Amazon.)
            continue
        if isinstance(v, bool):
            out[k] = {"DataType": "String", "StringValue": "true" if v else "false"}
        elif isinstance(v, (int, float)):
            out[k] = {"DataType": "Number", "StringValue": repr(v)}
        elif isinstance(v, str) and v:
            out[k] = {"DataType": "String", "StringValue": v}
    return out


def _message_out(ctx: Ctx, q: Queue, m: dict, receipt: str, system: set[str], attr_names: object,
                 now: int) -> dict:
    props = m.get("properties") or {}
    body = m.get("body") or ""
    out: dict[str, Any] = {"MessageId": m["id"],
                           "ReceiptHandle": sp.encode_handle(group_name(q.name), receipt, int(m["offset"])),
                           "MD5OfBody": sp.md5_hex(body), "Body": body}
    sa: dict[str, str] = {}
    if "SenderId" in system:
        sa["SenderId"] = str(props.get("sqs.sender") or ctx.account)
    if "SentTimestamp" in system:
        sa["SentTimestamp"] = str(m.get("produced_at") or 0)
    if "ApproximateReceiveCount" in system:
        sa["ApproximateReceiveCount"] = str(m.get("deliveries") or 1)
    if "ApproximateFirstReceiveTimestamp" in system:
        sa["ApproximateFirstReceiveTimestamp"] = str(now)
    if "MessageGroupId" in system and m.get("key") is not None:
        sa["MessageGroupId"] = m["key"]
    if q.fifo:
        if "MessageDeduplicationId" in system and props.get("sqs.dedup"):
            sa["MessageDeduplicationId"] = props["sqs.dedup"]
        if "SequenceNumber" in system:
            index = str(props.get(SEQ_INDEX_PROP))
            if index.isdigit():  # sent delayed: the number its send answered
                sa["SequenceNumber"] = sp.delayed_sequence_number(int(m.get("produced_at") or 0), int(index),
                                                                  m["id"])
            else:
                sa["SequenceNumber"] = sp.sequence_number(int(m["queue"]), int(m["offset"]))
    if "AWSTraceHeader" in system and props.get("sqs.trace"):
        sa["AWSTraceHeader"] = props["sqs.trace"]
    dl = m.get("dead_letter")
    if "DeadLetterQueueSourceArn" in system and isinstance(dl, dict) and dl.get("topic"):
        sa["DeadLetterQueueSourceArn"] = ctx.arn(dl["topic"])
    if sa:
        out["Attributes"] = sa
    attrs = sp.select_message_attributes(_message_attributes(props), attr_names)
    if attrs:
        out["MD5OfMessageAttributes"] = sp.md5_attributes(attrs)
        out["MessageAttributes"] = sp.attributes_out(attrs)
    return out


def receive_message(ctx: Ctx, req: dict) -> dict:
    max_n = sp.int_param(req, "MaxNumberOfMessages", 1, 10, 1)  # (the request before the queue, as SQS)
    wait = sp.int_param(req, "WaitTimeSeconds", 0, 20)
    vis = sp.int_param(req, "VisibilityTimeout", 0, 43200)
    q = _queue(req)
    system: set[str] = set()
    for key in ("AttributeNames", "MessageSystemAttributeNames"):
        names = req.get(key) or []
        if not isinstance(names, list):
            raise sp.invalid(f"{key} must be a list.")
        for n in names:
            if n == "All":
                system |= sp.MESSAGE_SYSTEM_NAMES
            elif n in sp.MESSAGE_SYSTEM_NAMES:
                system.add(n)
    attr_names = req.get("MessageAttributeNames")
    sp.select_message_attributes({}, attr_names)  # type check
    _allow(ctx, "ReceiveMessage", q.name)
    _ensure_clients(q)
    wait = q.attr_int("ReceiveMessageWaitTimeSeconds") if wait is None else wait
    vis = q.attr_int("VisibilityTimeout") if vis is None else vis
    batches = _gather(q, max_n, wait, vis)
    if vis == 0:  # visible again at once (lakeq's shortest lock is 1 s: end them now, once all are gathered)
        for got in batches:
            r = parse_receipt(got["receipt"])
            _native(lambda: _set_visibility(q, r, r.topic_queue[1], 0))  # (False: ended meanwhile)
    now = now_ms()
    msgs = [_message_out(ctx, q, m, got["receipt"], system, attr_names, now)
            for m, got in heapq.merge(*[[(m, got) for m in got["messages"]] for got in batches], key=_send_order)]
    return {"Messages": msgs} if msgs else {}


def _send_order(mg: tuple[dict, dict]) -> tuple[int, int]:
    """A received message's place in send order: its send time, then its index in its send request."""
    m = mg[0]
    props = m.get("properties") or {}
    index = str(props.get(SEQ_INDEX_PROP, props.get(ORDER_PROP, "0")))
    return int(m.get("produced_at") or 0), int(index) if index.isdigit() else 0


def _gather(q: Queue, max_n: int, wait: int, vis: int) -> list[dict]:
    """Up to ``max_n`` messages over the queue's lakeq queues, as SQS answers whatever its internals:
    native pulls, each locking one more lakeq queue's batch with its conditional write (each message's
    handle names its batch), until ``max_n`` are held, a pull finds nothing, or every lakeq queue was
    locked (the answer merges the batches by send time and index in the send request, each batch's
    order kept). Only the first pull
    long-polls (it returns as soon as anything is available; the next ones
    do not wait). A FIFO group lives in one lakeq queue, so its messages come in one batch, in order,
    and a group with messages in flight is under a lock no other receive takes."""
    batches: list[dict] = []
    held = 0
    for i in range(max(1, int(q.topic.queues))):
        params = {"group": group_name(q.name), "max": str(max_n - held), "wait_ms": str(wait * 1000 if i == 0 else 0),
                  "visibility_timeout_ms": str(max(1000, vis * 1000))}
        got = _native(lambda: service.pull(ADMIN, q.name, params, t=q.topic))
        if not got["messages"]:
            break
        batches.append(got)
        held += len(got["messages"])
        if held >= max_n:
            break
    return batches


# --- messages: settle -----------------------------------------------------------------------------
# A handle names its lakeq batch (the receipt of one lakeq queue's lock) and the message's offset in
# it. Settling goes straight to lakeq.consume.settle with the topic item this action already read, making
# the checks service._group_receipt makes (the SQS group, the broker, this incarnation's log): one
# read of the topic item per action. docs/design.md "SQS endpoint: store calls per action".
def _invalid_handle(handle: object) -> sp.SqsError:
    return sp.SqsError("ReceiptHandleIsInvalid", f'The input receipt handle "{handle}" is not a valid receipt handle.')


def _handle(q: Queue, handle: object) -> tuple[str, str, int]:
    if handle is None or handle == "":
        raise sp.missing("ReceiptHandle")
    group, receipt, offset = sp.decode_handle(handle)
    if group != group_name(q.name) or f":{q.log}@" not in receipt:  # (this incarnation's)
        raise _invalid_handle(handle)
    return group, receipt, offset


def _receipt_of(q: Queue, handle: object) -> tuple[Receipt, int, int]:
    """(receipt, its lakeq queue, the message's offset) of one of this queue's handles;
    ReceiptHandleIsInvalid for anything else (MissingParameter without one)."""
    _, text, offset = _handle(q, handle)
    try:
        r = parse_receipt(text)
        _, lq = r.topic_queue
    except ApiError:
        raise _invalid_handle(handle) from None
    if r.log != q.log:
        raise _invalid_handle(handle)
    return r, lq, offset


def _lock_owner(q: Queue, r: Receipt) -> tuple[ClientModel, str] | None:
    """The SQS group and its offsets owner for ``r`` (None: another broker's receipt, stale)."""
    group = lq_auth.client_or_404(group_name(q.name), "consumer")  # (cached per container)
    if r.broker != broker():
        return None
    return group, OffsetRepo.owner(group.name, q.log)


def _settle_lock(q: Queue, r: Receipt, lq: int, accept: tuple[int, ...], release: tuple[int, ...] = ()) -> bool:
    """Settle offsets of one lakeq lock: ``accept`` (deleted) and ``release`` (visible again). When
    ``accept`` is the lock's whole range ``[offset, next_offset)`` (a batch's every handle, or the
    one message of a batch of one) the lock in the simple form is acknowledged with one conditional
    UpdateItem (:meth:`OffsetRepo.ack_fast`); otherwise :func:`lakeq.consume.settle.settle` (consistent
    GetItem + conditional UpdateItem, compare-and-set). False: stale (locked again, settled, reset);
    BadRequest for an offset the batch did not deliver."""
    found = _lock_owner(q, r)
    if found is None:
        return False
    group, owner = found
    now = now_ms()
    if not release and accept == tuple(range(r.offset, r.next_offset)) \
            and OffsetRepo.ack_fast(owner, lq, r, now) is True:
        return True
    try:
        settling.settle(owner, lq, r, Outcomes(accept=accept, release=release), settling.policy_of(group),
                        topic_reader(q.log, None), now, service.STALE)
    except StaleReceipt:
        return False
    return True


def _set_visibility(q: Queue, r: Receipt, lq: int, visibility_ms: int) -> bool:
    """The lock's expiry (0: ends now), one conditional UpdateItem (:func:`lakeq.consume.settle.visibility`).
    False: stale."""
    found = _lock_owner(q, r)
    if found is None:
        return False
    now = now_ms()
    return settling.visibility(found[1], lq, r, lock_until(now, visibility_ms), now)


def _delete(q: Queue, handles: list[object]) -> list[sp.SqsError | None]:
    """Delete the messages of ``handles`` (DeleteMessage: one; DeleteMessageBatch: up to 10): the
    handles of one lakeq lock are settled together, so a batch deleted whole is one conditional
    write. A stale handle (received again since, or already deleted) succeeds and deletes nothing,
    as SQS's DeleteMessage does. The error of each handle (None: deleted)."""
    out: list[sp.SqsError | None] = [None] * len(handles)
    parsed: dict[int, tuple[Receipt, int, int]] = {}
    locks: dict[str, list[int]] = {}
    for i, h in enumerate(handles):
        try:
            parsed[i] = _receipt_of(q, h)
        except sp.SqsError as e:
            out[i] = e
            continue
        locks.setdefault(str(parsed[i][0]), []).append(i)

    def settle(idx: list[int], offsets: tuple[int, ...]) -> None:
        r, lq, _ = parsed[idx[0]]
        try:
            _native(lambda: _settle_lock(q, r, lq, offsets))
        except sp.SqsError as e:
            if e.name != "InvalidParameterValue":
                for i in idx:
                    out[i] = e
            elif len(idx) == 1:  # an offset this lakeq batch did not deliver
                out[idx[0]] = _invalid_handle(handles[idx[0]])
            else:  # which of them: one by one (nothing was written)
                for i in idx:
                    settle([i], (parsed[i][2],))
    for idx in locks.values():
        settle(idx, tuple(sorted({parsed[i][2] for i in idx})))
    return out


def _not_inflight(handle: object) -> sp.SqsError:
    return sp.invalid(f"Value {handle} for parameter ReceiptHandle is invalid. Reason: Message does not exist or "
                      "is not available for visibility timeout change.")


def _change_visibility(q: Queue, handle: object, timeout: object) -> None:
    r, lq, offset = _receipt_of(q, handle)
    if timeout is None:
        raise sp.missing("VisibilityTimeout")
    secs = sp.int_param({"VisibilityTimeout": timeout}, "VisibilityTimeout", 0, 43200)
    if secs == 0:  # this message only: released, served again first
        done = _native(lambda: _settle_lock(q, r, lq, (), (offset,)))
    else:  # the lock of the message's whole lakeq batch
        done = _native(lambda: _set_visibility(q, r, lq, secs * 1000))  # type: ignore[operator]
    if not done:
        raise _not_inflight(handle)


def delete_message(ctx: Ctx, req: dict) -> dict:
    q = _queue(req)
    _handle(q, req.get("ReceiptHandle"))
    _allow(ctx, "DeleteMessage", q.name)
    err = _delete(q, [req.get("ReceiptHandle")])[0]
    if err is not None:
        raise err
    return {}


def change_message_visibility(ctx: Ctx, req: dict) -> dict:
    q = _queue(req)
    _allow(ctx, "ChangeMessageVisibility", q.name)
    _change_visibility(q, req.get("ReceiptHandle"), req.get("VisibilityTimeout"))
    return {}


def _batch_result(entries: list[dict], errors: list[sp.SqsError | None]) -> dict:
    return {"Successful": [{"Id": e["Id"]} for e, err in zip(entries, errors) if err is None],
            "Failed": [sp.batch_error(e["Id"], err) for e, err in zip(entries, errors) if err is not None]}


def delete_message_batch(ctx: Ctx, req: dict) -> dict:
    q = _queue(req)
    entries = sp.check_batch(req.get("Entries"), "DeleteMessage")
    _allow(ctx, "DeleteMessageBatch", q.name)
    return _batch_result(entries, _delete(q, [e.get("ReceiptHandle") for e in entries]))


def change_message_visibility_batch(ctx: Ctx, req: dict) -> dict:
    q = _queue(req)
    entries = sp.check_batch(req.get("Entries"), "ChangeMessageVisibility")
    _allow(ctx, "ChangeMessageVisibilityBatch", q.name)
    errors: list[sp.SqsError | None] = []
    for e in entries:
        try:
            _change_visibility(q, e.get("ReceiptHandle"), e.get("VisibilityTimeout"))
            errors.append(None)
        except sp.SqsError as err:
            errors.append(err)
    return _batch_result(entries, errors)


ACTIONS: dict[str, Callable[[Ctx, dict], dict]] = {
    "CreateQueue": create_queue, "GetQueueUrl": get_queue_url, "ListQueues": list_queues,
    "DeleteQueue": delete_queue, "PurgeQueue": purge_queue, "GetQueueAttributes": get_queue_attributes,
    "SetQueueAttributes": set_queue_attributes, "TagQueue": tag_queue, "UntagQueue": untag_queue,
    "ListQueueTags": list_queue_tags, "ListDeadLetterSourceQueues": list_dead_letter_source_queues,
    "SendMessage": send_message, "SendMessageBatch": send_message_batch, "ReceiveMessage": receive_message,
    "DeleteMessage": delete_message, "DeleteMessageBatch": delete_message_batch,
    "ChangeMessageVisibility": change_message_visibility,
    "ChangeMessageVisibilityBatch": change_message_visibility_batch,
}
UNSUPPORTED = {"AddPermission", "RemovePermission", "StartMessageMoveTask", "CancelMessageMoveTask",
               "ListMessageMoveTasks"}


# --- the Lambda event ------------------------------------------------------------------------------
def _base_url(headers: dict, event: dict) -> str:
    host = headers.get("host") or (event.get("requestContext") or {}).get("domainName") or "127.0.0.1:3000"
    proto = (headers.get("x-forwarded-proto") or "http").split(",")[0].strip()
    return f"{proto}://{host}"


def handle(event: dict, logger: Any = None) -> dict:
    """One API Gateway (payload 2.0) event → the Lambda proxy result, in the caller's protocol."""
    request_id = str(uuid.uuid4())
    headers = {k.lower(): v for k, v in (event.get("headers") or {}).items()}
    raw = event.get("body") or ""
    body = base64.b64decode(raw) if event.get("isBase64Encoded") else raw.encode("utf-8")
    method = ((event.get("requestContext") or {}).get("http") or {}).get("method", "POST")
    path = event.get("rawPath") or "/"
    query = event.get("rawQueryString") or ""
    ctype = (headers.get("content-type") or "").lower()
    is_json = "x-amz-json" in ctype or ("x-amz-target" in headers and "form-urlencoded" not in ctype)
    base = _base_url(headers, event)

    def render_error(e: Any) -> dict:
        if is_json:
            status, h, text = sp.json_error(e)
        else:
            status, h, text = sp.xml_error(e, request_id)
        return {"statusCode": status, "headers": {**h, "x-amzn-RequestId": request_id}, "body": text}
    try:
        p = authenticate_request(method, path, query, headers, body)
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            raise sp.invalid("The request body is not valid UTF-8.") from None
        parts = [s for s in path.split("/") if s]
        path_url = base + path if len(parts) == 2 else None
        if len(parts) not in (0, 2):
            raise sp.SqsError("InvalidAddress", "The address is not valid for this endpoint.")
        if is_json:
            action, req = sp.json_request(headers.get("x-amz-target"), text)
            if path_url and "QueueUrl" not in req:
                req["QueueUrl"] = path_url
        else:
            action, req = sp.query_request(text if text else query, path_url)
        fn = ACTIONS.get(action)
        if fn is None:
            if action in UNSUPPORTED:
                raise sp.SqsError("UnsupportedOperation", f"{action} is not supported by lakeq.")
            if is_json:
                raise sp.SqsError("UnknownOperationException", f"Unknown operation {action}",
                                  json_type="com.amazon.coral.service#UnknownOperationException")
            raise sp.SqsError("InvalidAction", f"The action {action} is not valid for this endpoint.")
        ctx = Ctx(p, base, account_id(), region())
        result = fn(ctx, req)
    except sp.SqsError as e:
        return render_error(e)
    except ApiError as e:  # a native error not mapped on the way (never a 5xx for the client's mistake)
        return render_error(_sqs_error(e))
    except Exception as e:  # noqa: BLE001
        if hasattr(e, "code") and hasattr(e, "status") and hasattr(e, "message"):  # sqs_auth's errors
            return render_error(e)
        if logger is not None:
            logger.exception("unhandled error")
        return render_error(sp.SqsError("InternalFailure", "We encountered an internal error. Please try again.",
                                        status=500, sender=False))
    if is_json:
        return {"statusCode": 200, "headers": {"Content-Type": sp.JSON_CONTENT_TYPE, "x-amzn-RequestId": request_id},
                "body": json.dumps(result, ensure_ascii=False)}
    return {"statusCode": 200, "headers": {"Content-Type": "text/xml", "x-amzn-RequestId": request_id},
            "body": sp.xml_response(action, result, request_id)}

