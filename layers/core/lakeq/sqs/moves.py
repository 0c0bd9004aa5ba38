"""SQS message move tasks (issue 18.3) mapped onto lakeq's redrives (:mod:`lakeq.redrive.service`):
StartMessageMoveTask → a redrive of the dead-letter queue's topic (destination: each message's
source queue, or ``DestinationArn``; ``MaxNumberOfMessagesPerSecond`` → its rate, default 100);
ListMessageMoveTasks → the source's redrives, newest first; CancelMessageMoveTask → cancel. The
TaskHandle is the redrive's id. Admin only (queue administration). A moved message stays in the
dead-letter queue for its SQS consumers (the redrive reads it as a reserved consumer of its own):
docs/api.md "Differences from SQS"."""
from __future__ import annotations

import json

from lakeq.admin.auth import Principal
from lakeq.common.errors import ApiError, Conflict, NotFound
from lakeq.redrive import service as redrive
from lakeq.sqs import protocol as sp
from lakeq.sqs.permissions import Ctx
from lakeq.store.catalog import TopicRepo

STATUS = {"running": "RUNNING", "cancelling": "CANCELLING", "completed": "COMPLETED", "cancelled": "CANCELLED",
          "failed": "FAILED"}
ADMIN = Principal(admin=True)


def _admin(ctx: Ctx, action: str) -> None:
    if not ctx.principal.admin:
        raise sp.access_denied(action)


def _not_found(what: str) -> sp.SqsError:
    return sp.SqsError("ResourceNotFoundException", f"The resource that you specified for the {what} parameter "
                       "doesn't exist.")


def _arn_queue(ctx: Ctx, req: dict, member: str, required: bool = True) -> str | None:
    raw = req.get(member)
    if raw is None:
        if required:
            raise sp.missing(member)
        return None
    name = sp.name_of_arn(raw)
    if name is None:
        raise sp.invalid(f"Value {raw} for parameter {member} is invalid. Reason: not a queue ARN.")
    if not ctx.owns_arn(raw) or TopicRepo.get(name) is None:  # (another account's or region's: not here)
        raise _not_found(member)
    return name


def _is_dead_letter_queue(name: str) -> bool:
    """Some queue's RedrivePolicy names it (a Scan of TopicsTable, as ListDeadLetterSourceQueues)."""
    for t in TopicRepo.all():
        rp = (json.loads(t.sqs).get("attributes") or {}).get("RedrivePolicy") if t.sqs else None
        if rp and sp.parse_redrive(rp)[0] == name:
            return True
    return False


def start_message_move_task(ctx: Ctx, req: dict) -> dict:
    src = _arn_queue(ctx, req, "SourceArn")
    dest = _arn_queue(ctx, req, "DestinationArn", required=False)
    rate = sp.int_param(req, "MaxNumberOfMessagesPerSecond", 1, 500)
    _admin(ctx, "StartMessageMoveTask")
    if not _is_dead_letter_queue(src):  # type: ignore[arg-type]
        raise sp.invalid("Source queue must be configured as a Dead Letter Queue.")
    body = {"source": src, **({"destination": dest} if dest else {}), **({"rate": rate} if rate else {})}
    try:
        out = redrive.start(ADMIN, json.dumps(body), origin="sqs")
    except Conflict:
        raise sp.invalid("There is already a task running. Only one active task is allowed for a source queue "
                         "at a given time.") from None
    return {"TaskHandle": out["id"]}


def list_message_move_tasks(ctx: Ctx, req: dict) -> dict:
    src = _arn_queue(ctx, req, "SourceArn")
    n = sp.int_param(req, "MaxResults", 1, 10, 1)
    _admin(ctx, "ListMessageMoveTasks")
    results = []
    for r in redrive.list_(ADMIN, {"source": src})["redrives"][:n]:
        e: dict = {"Status": STATUS[r["status"]], "SourceArn": ctx.arn(r["source"]),
                   "MaxNumberOfMessagesPerSecond": r["rate"], "ApproximateNumberOfMessagesMoved": r["moved"],
                   "ApproximateNumberOfMessagesToMove": r["total"], "StartedTimestamp": r["created_at"]}
        if r["status"] == "running":
            e["TaskHandle"] = r["id"]
        if r["destination"]:
            e["DestinationArn"] = ctx.arn(r["destination"])
        if r["status"] == "failed" and r["last_error"]:
            e["FailureReason"] = r["last_error"]
        results.append(e)
    return {"Results": results}


def cancel_message_move_task(ctx: Ctx, req: dict) -> dict:
    handle = req.get("TaskHandle")
    if handle is None:
        raise sp.missing("TaskHandle")
    _admin(ctx, "CancelMessageMoveTask")
    try:
        out = redrive.cancel(ADMIN, handle)
    except (NotFound, ApiError) as e:
        if isinstance(e, Conflict):
            raise sp.invalid("Only active tasks can be cancelled.") from None
        if isinstance(e, NotFound) or e.status == 400:
            raise _not_found("TaskHandle") from None
        raise
    return {"ApproximateNumberOfMessagesMoved": out["moved"]}
