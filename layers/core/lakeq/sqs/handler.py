"""The SQS-compatible endpoint (docs/api.md "SQS-compatible endpoint"): one API Gateway event → the
action in the caller's protocol (query/XML or JSON, :mod:`lakeq.sqs.protocol`), errors rendered in
SQS's wire format.

A queue is a topic (same name) read through its own consumer group ``sqs.<name>`` (clustering), and
written by the caller (a producer client) or, for the admin, the producer client ``sqs.<name>.send``.
The actions (:mod:`lakeq.sqs.queues`, :mod:`lakeq.sqs.messages`) authenticate and check permissions
(:mod:`lakeq.sqs.permissions`), then call lakeq's own use cases as the admin."""
from __future__ import annotations

import base64
import json
import uuid
from typing import Any, Callable

from lakeq.common import metric_names as M
from lakeq.common.errors import ApiError
from lakeq.common.obs import count_rows, metrics
from lakeq.sqs import permissions as perm
from lakeq.sqs import protocol as sp
from lakeq.sqs.messages import (
    change_message_visibility,
    change_message_visibility_batch,
    delete_message,
    delete_message_batch,
    receive_message,
    send_message,
    send_message_batch,
)
from lakeq.sqs.moves import cancel_message_move_task, list_message_move_tasks, start_message_move_task
from lakeq.sqs.permissions import Ctx, account_id, authenticate_request, region
from lakeq.sqs.queues import (
    add_permission,
    create_queue,
    delete_queue,
    get_queue_attributes,
    get_queue_url,
    list_dead_letter_source_queues,
    list_queue_tags,
    list_queues,
    purge_queue,
    remove_permission,
    set_queue_attributes,
    tag_queue,
    untag_queue,
)

ACTIONS: dict[str, Callable[[Ctx, dict], dict]] = {
    "CreateQueue": create_queue, "GetQueueUrl": get_queue_url, "ListQueues": list_queues,
    "DeleteQueue": delete_queue, "PurgeQueue": purge_queue, "GetQueueAttributes": get_queue_attributes,
    "SetQueueAttributes": set_queue_attributes, "TagQueue": tag_queue, "UntagQueue": untag_queue,
    "ListQueueTags": list_queue_tags, "ListDeadLetterSourceQueues": list_dead_letter_source_queues,
    "SendMessage": send_message, "SendMessageBatch": send_message_batch, "ReceiveMessage": receive_message,
    "DeleteMessage": delete_message, "DeleteMessageBatch": delete_message_batch,
    "ChangeMessageVisibility": change_message_visibility,
    "ChangeMessageVisibilityBatch": change_message_visibility_batch,
    "StartMessageMoveTask": start_message_move_task, "ListMessageMoveTasks": list_message_move_tasks,
    "CancelMessageMoveTask": cancel_message_move_task, "AddPermission": add_permission,
    "RemovePermission": remove_permission,
}
UNSUPPORTED: set[str] = set()


def count(action: str, result: dict, req: dict | None = None) -> None:
    """The request-path counters (issue 34) of an action that succeeded, as the native routes count:
    messages sent, messages received, messages deleted (``NumberOfAcks``: a delete settles one) —
    the deployment's (``service``) and the queue's (``Topic``: the queue is its topic; the action
    succeeded, so the name in ``req``'s ``QueueUrl`` is a queue the caller may use), as SQS
    publishes per queue."""
    n, name = 0, None
    if action == "SendMessage":
        n, name = 1, M.SENT
    elif action == "ReceiveMessage":
        n, name = len(result.get("Messages") or ()), M.RECEIVED
    elif action == "DeleteMessage":
        n, name = 1, M.ACKS
    elif action in ("SendMessageBatch", "DeleteMessageBatch"):
        n, name = len(result.get("Successful") or ()), M.SENT if action == "SendMessageBatch" else M.ACKS
    if name is not None:
        metrics.add_metric(name=name, unit="Count", value=n)
        queue = sp.queue_name_of_url((req or {}).get("QueueUrl"))
        if queue:
            count_rows({(("Topic", queue),): {name: n}})


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
        try:
            result = fn(ctx, req)
            count(action, result, req)
        finally:
            if action not in perm.TOPIC_READ_ONLY:  # it may have changed a topic item: read them again
                perm.forget_topics()
    except sp.SqsError as e:
        return render_error(e)
    except ApiError as e:  # a native error not mapped on the way (never a 5xx for the client's mistake)
        return render_error(perm.sqs_error(e))
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
