"""The SQS endpoint's request context and permissions: who is calling (:func:`authenticate_request`,
the SigV4 seam of :mod:`lakeq.sqs.auth`), the :class:`Ctx` and :class:`Queue` every action gets, and
what a principal may do to which queue (:func:`allow`, :func:`may_see`); native errors mapped to
SQS's (:func:`native`)."""
from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable

from lakeq.admin import auth as lq_auth
from lakeq.admin.auth import Principal
from lakeq.common import clock as _clock
from lakeq.common.errors import ApiError, Forbidden, NotFound, Unavailable
from lakeq.common.names import covers, log_of
from lakeq.sqs import protocol as sp
from lakeq.store.catalog import ClientRepo, TopicRepo
from lakeq.store.queue_log import LogRepo
from lakeq.store.records import Topic
from lakeq.store.sqs import SqsRepo, group_name, producer_name

ADMIN = Principal(admin=True)
LAKEQ_QUEUES = 4  # lakeq queues of a queue made by CreateQueue (parallel batch locks)
LAKEQ_MAX_BODY = 1_048_576  # what lakeq stores per message body (validation.MAX_BODY_BYTES: 1 MiB, issue 18.2)
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


def monotonic() -> float:
    """The container's clock of its caches (a seam for tests)."""
    return time.monotonic()


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

    def owns_arn(self, arn: object) -> bool:
        """``arn`` is a queue ARN of this deployment's account and region (another's names no queue here)."""
        return sp.name_of_arn(arn) is not None and str(arn).split(":")[3:5] == [self.region, self.account]


def account_id() -> str:
    return os.environ.get("LAKEQ_ACCOUNT_ID") or "000000000000"


def region() -> str:
    return os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"


@dataclass
class Queue:
    name: str
    topic: Topic
    doc: dict  # {"attributes", "tags", "modified"}
    raw: str | None  # the stored sqs JSON (compare-and-set)
    cached: bool = False  # from the container's copy of the topic item (:func:`queue_of`)

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


def load(t: Topic | None, name: str, cached: bool = False) -> Queue:
    if t is None or not sp.is_queue_name(name):
        raise sp.no_queue()
    raw = t.sqs
    return Queue(name, t, json.loads(raw) if raw else {"attributes": {}, "tags": {}}, raw, cached)


# The container's cache of topic items for the sends and receives (issue 16 item 4): a live topic
# item read by any action is kept TOPIC_CACHE_TTL_S (monotonic) seconds, a missing one never. What
# a stale entry can do is bounded by the incarnation in its log name (docs/costs.md "SQS endpoint:
# the topic item cache"): a send writes into the log the entry names, never into a later
# incarnation's; a receive of a deleted incarnation finds no queue items, so locks nothing (but
# within 1 s of the deletion the container's copy of those items may still rank them, and such a
# receive may then deliver a message of the deleted queue: docs/costs.md "SQS endpoint: the queue
# items' copy"); a
# delete or visibility change uses the copy only when every handle names the copy's incarnation
# (else it reads the item: a handle of a newer incarnation), settles only in that incarnation's
# offset records (a deleted incarnation's handle, within the TTL: answered as a stale handle,
# nothing of a newer incarnation touched), and tries a failed handle once more on the stored item;
# the queue administration reads the item consistently every time, and this container's
# administration of a queue drops the cache (:func:`forget_topics`). Another container's change
# to the queue's attributes, its queue count or its deletion is seen within the TTL (SQS: up to 60 s).
TOPIC_CACHE_TTL_S = 5.0
_TOPICS: dict[str, tuple[float, Topic]] = {}
CACHED_ACTIONS = {"SendMessage", "SendMessageBatch", "ReceiveMessage", "DeleteMessage", "DeleteMessageBatch",
                  "ChangeMessageVisibility", "ChangeMessageVisibilityBatch"}
# actions that change no topic item: the others drop the cache when they end
TOPIC_READ_ONLY = CACHED_ACTIONS | READ_ONLY | {"ListMessageMoveTasks"}


def forget_topics() -> None:
    """Drop the container's cached topic items (after an action that may have changed one), and its
    copies of queue items (a DeleteQueue here: no receive of this container reads the deleted
    queue's copy; lakeq.store.queue_log.LogRepo.queue_hints)."""
    _TOPICS.clear()
    LogRepo.forget_hints()


def queue_of(req: dict, cached: bool = False, clients: bool = False) -> Queue:
    """The request's queue from its topic item: a consistent GetItem, or with ``cached`` the
    container's copy when younger than :data:`TOPIC_CACHE_TTL_S` (producers' sends and receives;
    a receive that fails on a copy is tried once more on the item as stored).
    ``clients``: the action then makes sure of the queue's SQS clients (:func:`ensure_clients`),
    so a copy serves only while they are known for its incarnation (a stale copy must not make
    the clients of a deleted queue again)."""
    name = sp.queue_name_of_url(req.get("QueueUrl"))
    if cached:
        hit = _TOPICS.get(name)
        now = monotonic()
        if hit is not None and now < hit[0] and (not clients or CLIENTS_SEEN.get(log_of(hit[1]), 0.0) > now):
            return load(hit[1], name, cached=True)
    t = TopicRepo.get(name)
    if t is None:
        _TOPICS.pop(name, None)
    else:
        _TOPICS[name] = (monotonic() + TOPIC_CACHE_TTL_S, t)
    return load(t, name)


def allow(ctx: Ctx, action: str, topic: str) -> None:
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


def may_see(ctx: Ctx, topic: str) -> bool:
    try:
        allow(ctx, "ListQueues", topic)
        return True
    except sp.SqsError:
        return False


CLIENTS_SEEN: dict[str, float] = {}  # queue's log name -> monotonic s until which its SQS clients are known
CLIENTS_SEEN_TTL_S = 60.0


def ensure_clients(q: Queue) -> None:
    """A topic made by lakeq's API gets its SQS clients on first SQS use. Known clients are remembered
    per container for a minute (two GetItems saved per send and receive), per incarnation of the
    topic (its log name): a queue deleted and made again in another container is checked again."""
    now = monotonic()
    if CLIENTS_SEEN.get(q.log, 0.0) > now:
        return
    if ClientRepo.get(group_name(q.name)) is None or ClientRepo.get(producer_name(q.name)) is None:
        SqsRepo.ensure_clients(q.name, now_ms())
    if len(CLIENTS_SEEN) > 10_000:
        CLIENTS_SEEN.clear()
    CLIENTS_SEEN[q.log] = now + CLIENTS_SEEN_TTL_S


def sqs_error(e: ApiError) -> sp.SqsError:
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


def native(fn: Callable[[], Any]) -> Any:
    """Call a native use case, mapping its errors to SQS's."""
    try:
        return fn()
    except ApiError as e:
        raise sqs_error(e) from None
