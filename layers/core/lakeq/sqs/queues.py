"""The SQS endpoint's queue actions: create, get URL, list, delete, purge, attributes, tags, dead-letter
sources. A queue is a lakeq topic of the same name (storage: :mod:`lakeq.store.sqs`)."""
from __future__ import annotations

import base64
import json
import re
from typing import Callable

from lakeq.admin import auth as lq_auth
from lakeq.admin import service as admin_service
from lakeq.common.names import log_of
from lakeq.consume import views as _views
from lakeq.produce import delayed as _delayed
from lakeq.sqs import permissions as perm
from lakeq.sqs import protocol as sp
from lakeq.sqs.permissions import ADMIN, LAKEQ_QUEUES, MAX_TAGS, Ctx, Queue, now_ms
from lakeq.store.catalog import TopicRepo, inc_of
from lakeq.store.offsets import OffsetRepo
from lakeq.store.queue_log import LogRepo
from lakeq.store.sqs import SqsRepo, group_name, producer_name
from lakeq.store.writes import TransactionFailed


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
        t = TopicRepo.get(target) if ctx.owns_arn(json.loads(rp)["deadLetterTargetArn"]) else None
        if t is None:  # (another account's or region's ARN names no queue here)
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
    perm.native(lambda: admin_service.patch_client(ADMIN, group_name(name), json.dumps(patch)))


def create_queue(ctx: Ctx, req: dict) -> dict:
    name = req.get("QueueName")
    if name is None:
        raise sp.missing("QueueName")
    if not sp.is_queue_name(name):  # ("" too, as SQS)
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
            q = perm.load(existing, name)
            have = q.attributes
            for k, v in attrs.items():
                if k != "FifoQueue" and have.get(k, "") != v:  # (FifoQueue: the name's suffix decides)
                    raise sp.SqsError("QueueNameExists", f"A queue already exists with the same name and a "
                                      f"different value for attribute {k}")
            perm.ensure_clients(q)
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
    q = perm.load(TopicRepo.get(name) if sp.is_queue_name(name) else None, name)
    perm.allow(ctx, "GetQueueUrl", q.name)
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
                   if sp.is_queue_name(t.name) and t.name.startswith(prefix) and perm.may_see(ctx, t.name))
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
    q = perm.load(t, name)
    if not ctx.principal.admin:
        raise sp.access_denied("DeleteQueue")
    perm.CLIENTS_SEEN.pop(q.log, None)
    SqsRepo.delete(q.topic, now_ms())
    for c in (group_name(q.name), producer_name(q.name)):
        lq_auth.forget_client(c)
    return {}


PURGE_WINDOW_MS = 60_000  # one PurgeQueue a queue every 60 s (SQS: PurgeQueueInProgress)


def purge_queue(ctx: Ctx, req: dict) -> dict:
    """Every queue's committed offset for the SQS group moves to the log's head (one UpdateItem per
    lakeq queue: OffsetRepo.reset, which also ends any lock, so in-flight messages go too). Delayed
    messages already due are promoted first (lakeq.produce.delayed.promote), so they are purged too; those
    not yet due are kept (they belong to the topic, which other lakeq groups read too; docs/api.md)."""
    q = perm.queue_of(req)
    if not ctx.principal.admin:
        raise sp.access_denied("PurgeQueue")
    now = now_ms()
    if now - int(q.doc.get("purged_ms") or 0) < PURGE_WINDOW_MS:
        raise sp.SqsError("PurgeQueueInProgress", f"Only one PurgeQueue operation on {q.name} is allowed every "
                          "60 seconds.")
    perm.ensure_clients(q)
    g = group_name(q.name)
    owner = OffsetRepo.owner(g, q.log)

    def started(doc: dict) -> None:
        if now - int(doc.get("purged_ms") or 0) < PURGE_WINDOW_MS:  # (another purge meanwhile)
            raise sp.SqsError("PurgeQueueInProgress", f"Only one PurgeQueue operation on {q.name} is allowed "
                              "every 60 seconds.")
        doc["purged_ms"] = now
    _update_doc(q, started)  # (before the purge: a crash after it leaves the window, as SQS's)
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
    delayed = sum(int(getattr(m, "delayed", 0) or 0) for m in LogRepo.queues(log, n, exact=False))
    return {"ApproximateNumberOfMessages": str(visible), "ApproximateNumberOfMessagesNotVisible": str(inflight),
            "ApproximateNumberOfMessagesDelayed": str(delayed)}


def get_queue_attributes(ctx: Ctx, req: dict) -> dict:
    q = perm.queue_of(req)
    known = set(sp.READ_ONLY) | set(sp.DEFAULTS) | set(q.attributes)
    known |= {"Policy", "RedrivePolicy", "RedriveAllowPolicy", "KmsMasterKeyId", "KmsDataKeyReusePeriodSeconds"}
    if q.fifo:
        known |= set(sp.FIFO_DEFAULTS)
    wanted = sp.requested_attribute_names(req.get("AttributeNames"), known)
    perm.allow(ctx, "GetQueueAttributes", q.name)
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
        q = perm.load(TopicRepo.get(q.name), q.name)
    raise sp.SqsError("ServiceUnavailable", "the queue is too contended; retry", status=503, sender=False)


def set_queue_attributes(ctx: Ctx, req: dict) -> dict:
    q = perm.queue_of(req)
    if req.get("Attributes") is None:
        raise sp.missing("Attributes")
    attrs = sp.check_attributes(req.get("Attributes"), q.fifo, creating=False)
    if not ctx.principal.admin:
        raise sp.access_denied("SetQueueAttributes")
    _check_redrive_target(ctx, attrs, q.fifo)
    perm.ensure_clients(q)
    # the group's dead-letter settings first, then the attributes that describe them: a crash in
    # between leaves the new behaviour with the old description, and the client's retry writes both
    _apply_redrive(q.name, attrs)

    def change(doc: dict) -> None:
        doc.setdefault("attributes", {}).update(attrs)
    _update_doc(q, change)
    return {}


def tag_queue(ctx: Ctx, req: dict) -> dict:
    q = perm.queue_of(req)
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
    q = perm.queue_of(req)
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
    q = perm.queue_of(req)
    perm.allow(ctx, "ListQueueTags", q.name)
    return {"Tags": q.doc.get("tags") or {}}  # (an empty map when untagged, as moto's JSON answer)


def list_dead_letter_source_queues(ctx: Ctx, req: dict) -> dict:
    q = perm.queue_of(req)
    perm.allow(ctx, "ListDeadLetterSourceQueues", q.name)
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


# --- permissions: AddPermission / RemovePermission edit the queue's stored Policy ---------------------
# (as SetQueueAttributes' Policy: stored and answered, not enforced — lakeq's permissions are its
# clients' grants; docs/api.md)
GRANTABLE = {"*", "SendMessage", "ReceiveMessage", "DeleteMessage", "ChangeMessageVisibility",
             "GetQueueAttributes", "GetQueueUrl", "ListDeadLetterSourceQueues", "PurgeQueue"}
MAX_PERMISSION_ACTIONS = 7
_LABEL = re.compile(r"[A-Za-z0-9_-]{1,80}")


def _one_or_list(xs: list[str]) -> str | list[str]:
    return xs[0] if len(xs) == 1 else xs


def _policy_of(doc: dict, arn: str) -> dict:
    text = (doc.get("attributes") or {}).get("Policy") or ""
    try:
        policy = json.loads(text) if text else {}
    except ValueError:
        policy = {}
    if not isinstance(policy, dict):
        policy = {}
    policy.setdefault("Version", "2012-10-17")
    policy.setdefault("Id", f"{arn}/SQSDefaultPolicy")
    if not isinstance(policy.get("Statement"), list):
        policy["Statement"] = []
    return policy


def add_permission(ctx: Ctx, req: dict) -> dict:
    q = perm.queue_of(req)
    label = req.get("Label")
    if label is None:
        raise sp.missing("Label")
    if not isinstance(label, str) or not _LABEL.fullmatch(label):
        raise sp.invalid(f"Value {label} for parameter Label is invalid. Reason: Can only include alphanumeric "
                         "characters, hyphens, or underscores. 1 to 80 in length.")
    accounts, actions = req.get("AWSAccountIds"), req.get("Actions")
    if not actions:
        raise sp.missing("Actions")
    if accounts is None:
        raise sp.missing("AWSAccountIds")
    if not isinstance(accounts, list) or not isinstance(actions, list):
        raise sp.invalid("AWSAccountIds and Actions must be lists.")
    if not accounts:
        raise sp.invalid("Value [] for parameter PrincipalId is invalid. Reason: Unable to verify.")
    if len(actions) > MAX_PERMISSION_ACTIONS:
        raise sp.SqsError("OverLimit", f"{len(actions)} Actions were found, maximum allowed is "
                          f"{MAX_PERMISSION_ACTIONS}.")
    for a in actions:
        if a not in GRANTABLE:
            raise sp.invalid(f"Value SQS:{a} for parameter ActionName is invalid. Reason: Only the queue owner is "
                             "allowed to invoke this action.")
    for a in accounts:
        if not isinstance(a, str) or not a:
            raise sp.invalid(f"Value {a} for parameter PrincipalId is invalid. Reason: Unable to verify.")
    if not ctx.principal.admin:
        raise sp.access_denied("AddPermission")
    arn = ctx.arn(q.name)

    def change(doc: dict) -> None:
        policy = _policy_of(doc, arn)
        if any(isinstance(st, dict) and st.get("Sid") == label for st in policy["Statement"]):
            raise sp.invalid(f"Value {label} for parameter Label is invalid. Reason: Already exists.")
        policy["Statement"].append({
            "Sid": label, "Effect": "Allow",
            "Principal": {"AWS": _one_or_list([f"arn:aws:iam::{a}:root" for a in accounts])},
            "Action": _one_or_list([f"SQS:{a}" for a in actions]), "Resource": arn})
        doc.setdefault("attributes", {})["Policy"] = json.dumps(policy, separators=(",", ":"))
    _update_doc(q, change)
    return {}


def remove_permission(ctx: Ctx, req: dict) -> dict:
    q = perm.queue_of(req)
    label = req.get("Label")
    if label is None:
        raise sp.missing("Label")
    if not ctx.principal.admin:
        raise sp.access_denied("RemovePermission")
    arn = ctx.arn(q.name)

    def change(doc: dict) -> None:
        policy = _policy_of(doc, arn)
        kept = [st for st in policy["Statement"] if not (isinstance(st, dict) and st.get("Sid") == label)]
        if len(kept) == len(policy["Statement"]):
            raise sp.invalid(f"Value {label} for parameter Label is invalid. Reason: can't find label on existing "
                             "policy.")
        policy["Statement"] = kept
        doc.setdefault("attributes", {})["Policy"] = json.dumps(policy, separators=(",", ":")) if kept else ""
    _update_doc(q, change)
    return {}
