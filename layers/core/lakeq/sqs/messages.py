"""The SQS endpoint's message actions: send (one or a batch), receive, delete and change visibility
(one or a batch), over lakeq's produce and pull use cases and its settlement of receipts."""
from __future__ import annotations

import hashlib
import heapq
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lakeq.admin import auth as lq_auth
from lakeq.common.errors import ApiError, StaleReceipt
from lakeq.common.payload import BATCH_BYTES, ByteBudget, dumps, lambda_bytes
from lakeq.consume import PullRequest, group_lock, pull_batch, set_visibility, settle_lock
from lakeq.log.receipts import Receipt
from lakeq.log.receipts import parse as parse_receipt
from lakeq.produce import service as produce_service
from lakeq.sqs import permissions as perm
from lakeq.sqs import protocol as sp
from lakeq.sqs.permissions import (
    ADMIN,
    ATTRS_PROP,
    FIFO_NS,
    LAKEQ_MAX_BODY,
    MAX_BATCH_PAYLOAD,
    PROP_CHUNK,
    Ctx,
    Queue,
    now_ms,
)
from lakeq.store.catalog import inc_of
from lakeq.store.offsets import OffsetRepo
from lakeq.store.sqs import group_name, producer_name


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
    trace = sp.trace_header(system["AWSTraceHeader"].get("StringValue")) if system else None
    if trace is not None:  # a malformed or oversized one is ignored (review of issue 34)
        props["sqs.trace"] = trace
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
        perm.ensure_clients(q)
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
    # a standard queue's messages go to a lakeq queue no receive holds locked when there is one: a
    # message sent while another is in flight is not held back behind it (SQS never does that)
    avoid = (OffsetRepo.held(OffsetRepo.owner(group_name(q.name), q.log), now_ms())
             if not q.fifo and int(q.topic.queues) > 1 else frozenset())
    return perm.native(lambda: produce_service.produce(ADMIN, q.name, raw, reserved_ok=True, t=q.topic,
                                                       avoid=avoid))["results"]


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
    q = perm.queue_of(req, cached=not ctx.principal.admin)
    p = _prepare(ctx, q, req)
    perm.allow(ctx, "SendMessage", q.name)
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
    q = perm.queue_of(req, cached=not ctx.principal.admin)
    entries = sp.check_batch(req.get("Entries"), "SendMessage")
    perm.allow(ctx, "SendMessageBatch", q.name)
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
    trace = sp.trace_header(props.get("sqs.trace")) or m.get("trace")  # sent by SQS, or produced traced
    if "AWSTraceHeader" in system and trace:  # (a value stored before the check is checked here)
        sa["AWSTraceHeader"] = trace
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
    q = perm.queue_of(req, cached=True, clients=True)
    system: set[str] = set()
    for key in ("AttributeNames", "MessageSystemAttributeNames"):
        names = req.get(key) or []
        if not isinstance(names, list):
            raise sp.invalid(f"{key} must be a list.")
        for n in names:
            n = n.strip() if isinstance(n, str) else n  # (as the queue attributes' names)
            if n == "All":
                system |= sp.MESSAGE_SYSTEM_NAMES
            elif n in sp.MESSAGE_SYSTEM_NAMES:
                system.add(n)
    attr_names = req.get("MessageAttributeNames")
    sp.select_message_attributes({}, attr_names)  # type check
    try:
        q, batches, vis = _receive(ctx, q, max_n, wait, vis)
    except (sp.SqsError, ApiError):
        if not q.cached:
            raise
        # the container's copy of the topic item may be stale (the queue deleted, its SQS clients with
        # it, and made again in another container): once more from the item as stored
        q, batches, vis = _receive(ctx, perm.queue_of(req), max_n, wait, vis)
    if vis == 0:  # visible again at once (lakeq's shortest lock is 1 s: end them now, once all are gathered)
        for got in batches:
            r = parse_receipt(got["receipt"])
            perm.native(lambda: _set_visibility(q, r, 0))  # (False: ended meanwhile)
    now = now_ms()
    msgs = [_message_out(ctx, q, m, got["receipt"], system, attr_names, now)
            for m, got in heapq.merge(*[[(m, got) for m in got["messages"]] for got in batches], key=_send_order)]
    return {"Messages": msgs} if msgs else {}


def _receive(ctx: Ctx, q: Queue, max_n: int, wait: int | None, vis: int | None) -> tuple[Queue, list[dict], int]:
    perm.allow(ctx, "ReceiveMessage", q.name)
    perm.ensure_clients(q)
    wait = q.attr_int("ReceiveMessageWaitTimeSeconds") if wait is None else wait
    vis = q.attr_int("VisibilityTimeout") if vis is None else vis
    return q, _gather(q, max_n, wait, vis), vis


def _send_order(mg: tuple[dict, dict]) -> tuple[int, int]:
    """A received message's place in send order: its send time, then its index in its send request."""
    m = mg[0]
    props = m.get("properties") or {}
    index = str(props.get(SEQ_INDEX_PROP, props.get(ORDER_PROP, "0")))
    return int(m.get("produced_at") or 0), int(index) if index.isdigit() else 0


# ReceiveMessage's answer is one Lambda response (6 MB) whatever the protocol (issue 18.2: with 1 MiB
# messages, batches of several lakeq queues add up past it: API Gateway's 500, and the locked messages
# hidden until their visibility timeout). Each batch is budgeted in receive_bytes, and a next lakeq
# queue is pulled only while the widest single message still fits what is left.
RECEIVE_EXTRA = 2048  # handle, MD5s, MessageId, system attributes, the protocol's markup, per message
RECEIVE_ONE_MAX = 5_400_000  # receive_bytes of the widest valid SQS message (1 MiB of '&', + attributes)


def receive_bytes(m: dict) -> int:
    """Upper bound of a delivered message's bytes in a ReceiveMessage response in either protocol,
    as the Lambda runtime sends it: its native measure (:func:`lakeq.common.payload.lambda_bytes`, the
    JSON protocol's bound), 4 bytes more per ``&``, ``<``, ``>`` or CR (the XML protocol's entities:
    ``&amp;`` is 5 bytes where JSON has 1), and :data:`RECEIVE_EXTRA`."""
    text = dumps(m)
    return (lambda_bytes(m) + 4 * (text.count("&") + text.count("<") + text.count(">") + text.count("\\r"))
            + RECEIVE_EXTRA)


# A receive ranks the lakeq queues by queue items at most this old (the container's copy): one
# BatchGetItem fewer per receive while a container serves a queue at least once a second (issue 16
# item 4; docs/costs.md "SQS endpoint: the queue items' copy"). The stream's head mover already moves
# the hints up to ~1 s after an append; a queue whose hint shows nothing is probed as before.
HINTS_MAX_AGE_S = 1.0


def _gather(q: Queue, max_n: int, wait: int, vis: int) -> list[dict]:
    """Up to ``max_n`` messages over the queue's lakeq queues, as SQS answers whatever its internals:
    native pulls, each locking one more lakeq queue's batch with its conditional write (each message's
    handle names its batch), until ``max_n`` are held, a pull finds nothing, or every lakeq queue was
    locked (the answer merges the batches by send time and index in the send request, each batch's
    order kept). Only the first pull
    long-polls (it returns as soon as anything is available; the next ones
    do not wait). A FIFO group lives in one lakeq queue, so its messages come in one batch, in order,
    and a group with messages in flight is under a lock no other receive takes.

    Poison isolation as lakeq's own pull keeps it (issue 30 item 7): a message redelivered after a
    lock of it ran out unsettled (a suspect, with a RedrivePolicy) is answered alone — the first
    pull may serve one (then nothing is added to it), the next ones pass over lakeq queues whose
    next batch would be a suspect. So a worker that fails on a poison message and lets its
    visibility timeout run out takes no other message's receive count up with it twice."""
    batches: list[dict] = []
    held = 0
    left = BATCH_BYTES  # of the one response, in receive_bytes
    for i in range(max(1, int(q.topic.queues))):
        if batches and left < RECEIVE_ONE_MAX:  # the next batch's first message might not fit
            break
        req = PullRequest(group=group_name(q.name), client_id=None, member_id=None, max=max_n - held,
                          wait_ms=wait * 1000 if i == 0 else 0, tags=None, ack=None,
                          visibility_timeout_ms=max(1000, vis * 1000))
        got = perm.native(lambda: pull_batch(ADMIN, q.topic, req, budget=lambda: ByteBudget(left, receive_bytes),
                                             with_replays=False,  # (replay lists: lakeq's pulls only)
                                             hints_max_age_s=HINTS_MAX_AGE_S,
                                             suspects="mark" if i == 0 else "skip"))
        if not got["messages"]:
            break
        batches.append(got)
        if got.pop("alone", False):  # a suspect: answered alone
            break
        held += len(got["messages"])
        left -= sum(receive_bytes(m) + 1 for m in got["messages"])
        if held >= max_n:
            break
    return batches


# --- messages: settle -----------------------------------------------------------------------------
# A handle names its lakeq batch (the receipt of one lakeq queue's lock) and the message's offset in
# it. Settling goes through consume's engine API with the topic item this action already read
# (lakeq.consume.group_lock: the SQS group's offsets, this broker's, this incarnation's log): one
# read of the topic item per action. docs/costs.md "SQS endpoint: store calls per action".
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


def _settle_lock(q: Queue, r: Receipt, accept: tuple[int, ...], release: tuple[int, ...] = ()) -> bool:
    """Settle offsets of one lakeq lock: ``accept`` (deleted) and ``release`` (visible again)
    (:func:`lakeq.consume.engine.settle_lock`: the lock's whole range accepted is one conditional
    UpdateItem). False: stale (another broker's, locked again, settled, reset); BadRequest for an
    offset the batch did not deliver."""
    group = lq_auth.client_or_404(group_name(q.name), "consumer")  # (cached per container)
    try:
        settle_lock(group, group_lock(group, q.topic, r), accept, release)
    except StaleReceipt:
        return False
    return True


def _set_visibility(q: Queue, r: Receipt, visibility_ms: int) -> bool:
    """The lock's expiry (0: ends now), one conditional UpdateItem (:func:`lakeq.consume.engine.set_visibility`).
    False: stale."""
    group = lq_auth.client_or_404(group_name(q.name), "consumer")  # (cached per container)
    try:
        set_visibility(group_lock(group, q.topic, r), visibility_ms)
    except StaleReceipt:
        return False
    return True


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
        r = parsed[idx[0]][0]
        try:
            perm.native(lambda: _settle_lock(q, r, offsets))
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
    r, _, offset = _receipt_of(q, handle)
    if timeout is None:
        raise sp.missing("VisibilityTimeout")
    secs = sp.int_param({"VisibilityTimeout": timeout}, "VisibilityTimeout", 0, 43200)
    if secs == 0:  # this message only: released, served again first
        done = perm.native(lambda: _settle_lock(q, r, (), (offset,)))
    else:  # the lock of the message's whole lakeq batch
        done = perm.native(lambda: _set_visibility(q, r, secs * 1000))  # type: ignore[operator]
    if not done:
        raise _not_inflight(handle)


def _names_log(q: Queue, handle: object) -> bool:
    try:
        _handle(q, handle)
    except sp.SqsError:
        return False
    return True


def _queue_for(req: dict, handles: list[object]) -> Queue:
    """The queue of a delete or visibility change: the container's copy of its topic item when
    every handle names the copy's incarnation, else the item as stored (no copy, a handle of a
    newer incarnation than the copy, a malformed handle). One topic read less per delete while the
    copy lives (issue 16 item 4; docs/costs.md "SQS endpoint: the topic item cache")."""
    q = perm.queue_of(req, cached=True)
    if q.cached and not all(_names_log(q, h) for h in handles):
        q = perm.queue_of(req)
    return q


def _settling(q: Queue, req: dict, n: int, act: Callable[[Queue, list[int]], list[sp.SqsError | None]]
              ) -> list[sp.SqsError | None]:
    """``act(q, indices)``: a delete or visibility change of the request's handles at ``indices``
    (of ``n``), answering each one's error. On a copy of the topic item, the handles that failed
    are tried once more on the item as stored (the queue deleted meanwhile: its SQS group gone)."""
    out = act(q, list(range(n)))
    failed = [i for i, e in enumerate(out) if e is not None]
    if q.cached and failed:
        for i, e in zip(failed, act(perm.queue_of(req), failed)):
            out[i] = e
    return out


def delete_message(ctx: Ctx, req: dict) -> dict:
    handle = req.get("ReceiptHandle")
    q = _queue_for(req, [handle])
    _handle(q, handle)
    perm.allow(ctx, "DeleteMessage", q.name)
    err = _settling(q, req, 1, lambda q, _: _delete(q, [handle]))[0]
    if err is not None:
        raise err
    return {}


def _visibility_errors(q: Queue, handles: list[object], timeouts: list[object]) -> list[sp.SqsError | None]:
    errors: list[sp.SqsError | None] = []
    for h, t in zip(handles, timeouts):
        try:
            _change_visibility(q, h, t)
            errors.append(None)
        except sp.SqsError as err:
            errors.append(err)
    return errors


def change_message_visibility(ctx: Ctx, req: dict) -> dict:
    handle, timeout = req.get("ReceiptHandle"), req.get("VisibilityTimeout")
    q = _queue_for(req, [handle])
    perm.allow(ctx, "ChangeMessageVisibility", q.name)
    err = _settling(q, req, 1, lambda q, _: _visibility_errors(q, [handle], [timeout]))[0]
    if err is not None:
        raise err
    return {}


def _batch_result(entries: list[dict], errors: list[sp.SqsError | None]) -> dict:
    return {"Successful": [{"Id": e["Id"]} for e, err in zip(entries, errors) if err is None],
            "Failed": [sp.batch_error(e["Id"], err) for e, err in zip(entries, errors) if err is not None]}


def delete_message_batch(ctx: Ctx, req: dict) -> dict:
    perm.queue_of(req, cached=True)  # (QueueDoesNotExist before the entries' errors, as SQS answers)
    entries = sp.check_batch(req.get("Entries"), "DeleteMessage")
    handles = [e.get("ReceiptHandle") for e in entries]
    q = _queue_for(req, handles)
    perm.allow(ctx, "DeleteMessageBatch", q.name)
    return _batch_result(entries, _settling(q, req, len(handles),
                                            lambda q, at: _delete(q, [handles[i] for i in at])))


def change_message_visibility_batch(ctx: Ctx, req: dict) -> dict:
    perm.queue_of(req, cached=True)  # (QueueDoesNotExist before the entries' errors, as SQS answers)
    entries = sp.check_batch(req.get("Entries"), "ChangeMessageVisibility")
    handles, timeouts = [e.get("ReceiptHandle") for e in entries], [e.get("VisibilityTimeout") for e in entries]
    q = _queue_for(req, handles)
    perm.allow(ctx, "ChangeMessageVisibilityBatch", q.name)
    return _batch_result(entries, _settling(q, req, len(handles), lambda q, at: _visibility_errors(
        q, [handles[i] for i in at], [timeouts[i] for i in at])))
