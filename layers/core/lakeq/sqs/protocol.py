"""The SQS wire protocol, pure: errors, MD5 digests, names, attributes, receipt handles, queue URLs,
batch checks, and the two encodings (AWS JSON 1.0 and the query protocol's form + XML).

Nothing here touches AWS or the store; :mod:`lakeq.sqs.queues` and :mod:`lakeq.sqs.messages` run the
actions. Shapes and codes follow botocore's SQS service model (2012-11-05) and the query-compatible
error codes SQS sends in ``x-amzn-query-error``.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
import struct
from typing import Any
from urllib.parse import parse_qsl, urlsplit
from xml.sax.saxutils import escape

from lakeq.common.errors import LakeqError

# --- errors ----------------------------------------------------------------------------------------
# modeled error (shape name) -> (query-compatible code, HTTP status); others use their own name, 400
MODELED = {
    "QueueDoesNotExist": ("AWS.SimpleQueueService.NonExistentQueue", 400),
    "QueueNameExists": ("QueueAlreadyExists", 400),
    "QueueDeletedRecently": ("AWS.SimpleQueueService.QueueDeletedRecently", 400),
    "ReceiptHandleIsInvalid": ("ReceiptHandleIsInvalid", 404),
    "MessageNotInflight": ("AWS.SimpleQueueService.MessageNotInflight", 400),
    "TooManyEntriesInBatchRequest": ("AWS.SimpleQueueService.TooManyEntriesInBatchRequest", 400),
    "EmptyBatchRequest": ("AWS.SimpleQueueService.EmptyBatchRequest", 400),
    "BatchEntryIdsNotDistinct": ("AWS.SimpleQueueService.BatchEntryIdsNotDistinct", 400),
    "BatchRequestTooLong": ("AWS.SimpleQueueService.BatchRequestTooLong", 400),
    "InvalidBatchEntryId": ("AWS.SimpleQueueService.InvalidBatchEntryId", 400),
    "UnsupportedOperation": ("AWS.SimpleQueueService.UnsupportedOperation", 400),
    "PurgeQueueInProgress": ("AWS.SimpleQueueService.PurgeQueueInProgress", 403),
    "InvalidAttributeName": ("InvalidAttributeName", 400),
    "InvalidAttributeValue": ("InvalidAttributeValue", 400),
    "InvalidMessageContents": ("InvalidMessageContents", 400),
    "InvalidIdFormat": ("InvalidIdFormat", 400),
    "OverLimit": ("OverLimit", 403),
    "InvalidAddress": ("InvalidAddress", 404),
    "InvalidSecurity": ("InvalidSecurity", 403),
    "RequestThrottled": ("RequestThrottled", 403),
    "ResourceNotFoundException": ("ResourceNotFoundException", 404),
}
# common (unmodeled) errors: code -> status
COMMON = {"InvalidParameterValue": 400, "MissingParameter": 400, "AccessDenied": 403, "InvalidAction": 400,
          "InternalFailure": 500, "ServiceUnavailable": 503, "InvalidQueryParameter": 400,
          "MalformedQueryString": 404, "UnknownOperationException": 400}


class SqsError(LakeqError):
    """An SQS error. ``name``: the JSON ``__type`` suffix (the model's shape name, or a common
    code); ``code``: the query-compatible code botocore reports; ``status``: the HTTP status.

    >>> e = SqsError("QueueDoesNotExist", "The specified queue does not exist.")
    >>> e.code, e.status, e.json_type
    ('AWS.SimpleQueueService.NonExistentQueue', 400, 'com.amazonaws.sqs#QueueDoesNotExist')
    """

    def __init__(self, name: str, message: str, status: int | None = None, sender: bool = True,
                 code: str | None = None, json_type: str | None = None):
        super().__init__(message)
        default_code, default_status = MODELED.get(name, (name, COMMON.get(name, 400)))
        self.name = name
        self.message = message
        self.code = code or default_code
        self.status = status or default_status
        self.sender = sender
        self.json_type = json_type or f"com.amazonaws.sqs#{name}"


def invalid(message: str) -> SqsError:
    return SqsError("InvalidParameterValue", message)


def missing(parameter: str) -> SqsError:
    return SqsError("MissingParameter", f"The request must contain the parameter {parameter}.")


def no_queue() -> SqsError:
    return SqsError("QueueDoesNotExist", "The specified queue does not exist.")


def access_denied(action: str) -> SqsError:
    return SqsError("AccessDenied", f"Access to the resource is denied: this identity may not call {action} "
                    "on this queue.", status=403)


def error_parts(e: Any) -> tuple[int, str, str, str, bool]:
    """(status, JSON __type, query code, message, sender fault) of an SqsError or any exception
    carrying ``code``/``message``/``status`` (e.g. the SigV4 module's)."""
    code = getattr(e, "code", "InternalFailure")
    status = int(getattr(e, "status", 400))
    jt = getattr(e, "json_type", None) or f"com.amazonaws.sqs#{getattr(e, 'name', code)}"
    return status, jt, code, getattr(e, "message", str(e)), bool(getattr(e, "sender", status < 500))


# --- digests ---------------------------------------------------------------------------------------
def md5_hex(data: bytes | str) -> str:
    """
    >>> md5_hex("hello")
    '5d41402abc4b2a76b9719d911017c592'
    """
    return hashlib.md5(data.encode("utf-8") if isinstance(data, str) else data).hexdigest()  # noqa: S324


def md5_attributes(attrs: dict[str, dict]) -> str | None:
    """MD5OfMessageAttributes as SQS computes it: for each attribute sorted by name, the name, the
    data type (each as 4-byte big-endian length + UTF-8), a transport byte (1 string/number,
    2 binary) and the value (length-prefixed). None when there are no attributes."""
    if not attrs:
        return None
    buf = bytearray()

    def put(b: bytes) -> None:
        buf.extend(struct.pack(">I", len(b)))
        buf.extend(b)
    for name in sorted(attrs):
        a = attrs[name]
        put(name.encode("utf-8"))
        put(a["DataType"].encode("utf-8"))
        if "BinaryValue" in a:
            buf.append(2)
            put(a["BinaryValue"])
        else:
            buf.append(1)
            put(a["StringValue"].encode("utf-8"))
    return md5_hex(bytes(buf))


# --- names, URLs, ARNs -----------------------------------------------------------------------------
_QUEUE_NAME = re.compile(r"[A-Za-z0-9_-]{1,80}")
_FIFO_NAME = re.compile(r"[A-Za-z0-9_-]{1,75}\.fifo")


def is_queue_name(name: object) -> bool:
    """A name SQS accepts: 1-80 of ``A-Za-z0-9_-``, or 1-75 of them plus ``.fifo``.

    >>> [is_queue_name(n) for n in ("a", "a.fifo", "a.b", "a/b", "x" * 81, "")]
    [True, True, False, False, False, False]
    """
    return isinstance(name, str) and (_QUEUE_NAME.fullmatch(name) is not None
                                      or _FIFO_NAME.fullmatch(name) is not None)


def queue_url(base: str, account: str, name: str) -> str:
    return f"{base.rstrip('/')}/{account}/{name}"


def queue_name_of_url(url: object) -> str:
    """The queue name of a queue URL on any host: its last path segment (the account before it is
    not checked), or a bare queue name (SQS and moto accept one). QueueDoesNotExist when it cannot
    name a queue.

    >>> queue_name_of_url("http://127.0.0.1:3000/123456789012/jobs"), queue_name_of_url("https://x/1/q.fifo")
    ('jobs', 'q.fifo')
    >>> queue_name_of_url("jobs"), queue_name_of_url("http://localhost:4566/queue/jobs"), queue_name_of_url("https://x/j")
    ('jobs', 'jobs', 'j')
    """
    if not isinstance(url, str) or not url:
        raise missing("QueueUrl")
    path = urlsplit(url).path if "://" in url else url
    parts = [p for p in path.split("/") if p]
    if not parts or not is_queue_name(parts[-1]):
        raise no_queue()
    return parts[-1]


def queue_arn(region: str, account: str, name: str) -> str:
    return f"arn:aws:sqs:{region}:{account}:{name}"


def name_of_arn(arn: object) -> str | None:
    """
    >>> name_of_arn("arn:aws:sqs:us-east-1:123456789012:dlq"), name_of_arn("nope")
    ('dlq', None)
    """
    if not isinstance(arn, str):
        return None
    parts = arn.split(":")
    if len(parts) != 6 or parts[0] != "arn" or parts[2] != "sqs" or not is_queue_name(parts[5]):
        return None
    return parts[5]


# --- queue attributes ------------------------------------------------------------------------------
DEFAULTS = {"VisibilityTimeout": "30", "MaximumMessageSize": "1048576", "MessageRetentionPeriod": "345600",
            "DelaySeconds": "0", "ReceiveMessageWaitTimeSeconds": "0", "SqsManagedSseEnabled": "true"}
FIFO_DEFAULTS = {"FifoQueue": "true", "ContentBasedDeduplication": "false", "DeduplicationScope": "queue",
                 "FifoThroughputLimit": "perQueue"}
_INT_RANGES = {"VisibilityTimeout": (0, 43200), "MaximumMessageSize": (1024, 1048576),
               "MessageRetentionPeriod": (60, 1209600), "DelaySeconds": (0, 900),
               "ReceiveMessageWaitTimeSeconds": (0, 20), "KmsDataKeyReusePeriodSeconds": (60, 86400)}
_SETTABLE = set(_INT_RANGES) | {"Policy", "RedrivePolicy", "RedriveAllowPolicy", "KmsMasterKeyId",
                                "SqsManagedSseEnabled"}
_FIFO_ONLY = {"ContentBasedDeduplication", "DeduplicationScope", "FifoThroughputLimit"}
READ_ONLY = {"ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible",
             "ApproximateNumberOfMessagesDelayed", "CreatedTimestamp", "LastModifiedTimestamp", "QueueArn"}
ALL_NAMES = _SETTABLE | _FIFO_ONLY | READ_ONLY | {"FifoQueue"}
MAX_RECEIVE_COUNT = 1000


def _bad_value(name: str, why: str = "") -> SqsError:
    return SqsError("InvalidAttributeValue", f"Invalid value for the parameter {name}." + (f" Reason: {why}" if why
                                                                                          else ""))


def check_attributes(attrs: object, fifo: bool, creating: bool) -> dict[str, str]:
    """Validate CreateQueue / SetQueueAttributes ``Attributes``; the normalised strings. Names:
    InvalidAttributeName; values: InvalidAttributeValue. ``FifoQueue`` is accepted only at creation.

    >>> check_attributes({"VisibilityTimeout": "5"}, False, True)
    {'VisibilityTimeout': '5'}
    """
    if attrs is None:
        return {}
    if not isinstance(attrs, dict):
        raise invalid("Attributes must be a map of attribute names to strings.")
    out: dict[str, str] = {}
    for name, value in attrs.items():
        name = name.strip() if isinstance(name, str) else name  # ("VisibilityTimeout ": moto and its suite)
        allowed = _SETTABLE | (_FIFO_ONLY if fifo else set()) | ({"FifoQueue"} if creating else set())
        if name not in allowed:
            raise SqsError("InvalidAttributeName", f"Unknown Attribute {name}.")
        if not isinstance(value, str):
            raise _bad_value(name)
        if name in _INT_RANGES:
            lo, hi = _INT_RANGES[name]
            if int_text(value) is None or not lo <= int(value) <= hi:
                raise _bad_value(name, f"must be an integer from {lo} to {hi}.")
            value = str(int(value))
        elif name in ("FifoQueue", "ContentBasedDeduplication", "SqsManagedSseEnabled"):
            if value.lower() not in ("true", "false"):
                raise _bad_value(name)
            value = value.lower()
            if name == "FifoQueue" and value != ("true" if fifo else "false"):
                raise invalid("The name of a FIFO queue can only include alphanumeric characters, hyphens, or "
                              "underscores, must end with .fifo suffix and be 1 to 80 in length.")
        elif name == "DeduplicationScope" and value not in ("messageGroup", "queue"):
            raise _bad_value(name)
        elif name == "FifoThroughputLimit" and value not in ("perQueue", "perMessageGroupId"):
            raise _bad_value(name)
        elif name == "RedrivePolicy" and value != "":
            count = parse_redrive(value)[1]
            value = json.dumps({"deadLetterTargetArn": json.loads(value)["deadLetterTargetArn"],
                                "maxReceiveCount": count}, separators=(",", ":"))  # SQS's own form
        elif name in ("Policy", "RedriveAllowPolicy") and value != "":
            try:
                if not isinstance(json.loads(value), dict):
                    raise ValueError
            except ValueError:
                raise _bad_value(name, "must be a JSON object.") from None
        out[name] = value
    return out


def parse_redrive(value: str) -> tuple[str, int]:
    """``RedrivePolicy`` → (dead-letter queue name, maxReceiveCount 1-1000). A bad policy is
    InvalidParameterValue (as SQS answers it, unlike the other attributes' InvalidAttributeValue)."""
    def bad(why: str) -> SqsError:
        return invalid(f"Value {value} for parameter RedrivePolicy is invalid. Reason: {why}")
    try:
        doc = json.loads(value)
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        raise bad("Redrive policy is not a valid JSON map.")
    if "deadLetterTargetArn" not in doc:
        raise bad("Redrive policy does not contain mandatory attribute: deadLetterTargetArn.")
    if "maxReceiveCount" not in doc:
        raise bad("Redrive policy does not contain mandatory attribute: maxReceiveCount.")
    target = name_of_arn(doc.get("deadLetterTargetArn"))
    if target is None:
        raise bad("Invalid value for deadLetterTargetArn.")
    count = doc.get("maxReceiveCount")
    if isinstance(count, str) and count.isdigit():
        count = int(count)
    if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= MAX_RECEIVE_COUNT:
        raise bad(f"Invalid value for maxReceiveCount: {doc.get('maxReceiveCount')}, valid values are from 1 to "
                  f"{MAX_RECEIVE_COUNT} both inclusive.")
    return target, count


def requested_attribute_names(names: object, known: set[str]) -> set[str]:
    """GetQueueAttributes / ReceiveMessage ``AttributeNames``: the set asked for (``All`` → all of
    ``known``); InvalidAttributeName for an unknown one."""
    if names is None:
        return set()
    if not isinstance(names, list):
        raise invalid("AttributeNames must be a list.")
    out: set[str] = set()
    for n in names:
        n = n.strip() if isinstance(n, str) else n  # (as check_attributes)
        if n == "All":
            out |= known
        elif n in known:
            out.add(n)
        else:
            raise SqsError("InvalidAttributeName", f"Unknown Attribute {n}.")
    return out


MESSAGE_SYSTEM_NAMES = {"SenderId", "SentTimestamp", "ApproximateReceiveCount", "ApproximateFirstReceiveTimestamp",
                        "SequenceNumber", "MessageDeduplicationId", "MessageGroupId", "AWSTraceHeader",
                        "DeadLetterQueueSourceArn"}


# --- message attributes and bodies -----------------------------------------------------------------
_ATTR_NAME = re.compile(r"[A-Za-z0-9_.-]{1,256}")
_DATA_TYPE = re.compile(r"(String|Number|Binary)(\.[^\s]{1,250})?")
_BAD_BODY = re.compile("[^\x09\x0a\x0d\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
MAX_MESSAGE_ATTRIBUTES = 10
# a send's AWSTraceHeader kept: printable ASCII, no space (X-Ray's header is ``Root=…;Parent=…;…``), at
# most 256 characters (as lakeq's own produce keeps, contract.validation.TRACE_MAX)
TRACE_HEADER = re.compile(r"[\x21-\x7e]{1,256}")


def trace_header(value: object) -> str | None:
    r"""A send's ``AWSTraceHeader`` value as it is kept and shown to consumers, or None: ignored, not
    refused (tracing is a hint), when it is not a bounded printable string — SQS consumers get it back
    as a system attribute, and X-Ray's parsers (or a log line) must not meet a megabyte or a newline.

    >>> trace_header("Root=1-5759e988-bd862e3fe1be46a994272793;Sampled=1")
    'Root=1-5759e988-bd862e3fe1be46a994272793;Sampled=1'
    >>> [trace_header(v) for v in ("Root=1-a\r\nX: y", "x" * 257, "", None, "Root=1-é")]
    [None, None, None, None, None]
    """
    return value if isinstance(value, str) and TRACE_HEADER.fullmatch(value) else None


def check_body(body: object) -> str:
    if body is None:
        raise missing("MessageBody")
    if not isinstance(body, str):
        raise invalid("MessageBody must be a string.")
    if body == "":
        raise missing("MessageBody")
    if _BAD_BODY.search(body):
        raise SqsError("InvalidMessageContents", "Invalid characters found. Valid unicode characters are "
                       "#x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF")
    return body


def _b64(value: object, name: str) -> bytes:
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    try:
        return base64.b64decode(value, validate=True)  # type: ignore[arg-type]
    except (binascii.Error, TypeError, ValueError):
        raise invalid(f"The message attribute '{name}' has an invalid binary value.") from None


def check_message_attributes(attrs: object) -> dict[str, dict]:
    """Validate ``MessageAttributes``; normalised to ``{name: {"DataType", "StringValue" | "BinaryValue"
    (bytes)}}``. SQS's rules: at most 10, names ``[A-Za-z0-9_.-]`` up to 256 without a leading,
    trailing or doubled '.', not ``AWS.``/``Amazon.``; type String/Number/Binary with an optional
    ``.custom`` suffix; a value of that type; Number a decimal of at most 38 significant digits."""
    if attrs is None:
        return {}
    if not isinstance(attrs, dict):
        raise invalid("MessageAttributes must be a map.")
    if len(attrs) > MAX_MESSAGE_ATTRIBUTES:
        raise invalid(f"Number of message attributes [{len(attrs)}] exceeds the allowed maximum "
                      f"[{MAX_MESSAGE_ATTRIBUTES}].")
    out: dict[str, dict] = {}
    for name, a in attrs.items():
        if (not isinstance(name, str) or not _ATTR_NAME.fullmatch(name) or name.startswith(".")
                or name.endswith(".") or ".." in name or name.lower().startswith(("aws.", "amazon."))):
            raise invalid(f"The message attribute name '{name}' is invalid. Attribute name can contain A-Z, a-z, "
                          "0-9, underscore (_), hyphen (-), and period (.) characters.")
        if not isinstance(a, dict):
            raise invalid(f"The message attribute '{name}' must be a structure.")
        dt = a.get("DataType")
        if not dt:
            raise invalid(f"The message attribute '{name}' must contain non-empty message attribute type.")
        if not isinstance(dt, str) or not _DATA_TYPE.fullmatch(dt):
            raise invalid(f"The message attribute '{name}' has an invalid message attribute type, the set of "
                          "supported type prefixes is Binary, Number, and String.")
        if a.get("StringListValues") or a.get("BinaryListValues"):
            raise invalid(f"The message attribute '{name}' uses list values, which are not supported.")
        if dt.startswith("Binary"):
            if a.get("BinaryValue") is None:
                raise invalid(f"The message attribute '{name}' with type 'Binary' must use field 'Binary'.")
            out[name] = {"DataType": dt, "BinaryValue": _b64(a["BinaryValue"], name)}
        else:
            sv = a.get("StringValue")
            if sv is None or sv == "":
                raise invalid(f"The message attribute '{name}' must contain non-empty message attribute value for "
                              f"message attribute type '{dt}'.")
            if not isinstance(sv, str):
                raise invalid(f"The message attribute '{name}' with type '{dt.split('.')[0]}' must use field "
                              "'String'.")
            if dt.startswith("Number") and not _is_number(sv):
                raise invalid(f"Can't cast the value of message (user) attribute '{name}' to a number.")
            if _BAD_BODY.search(sv):
                raise SqsError("InvalidMessageContents", f"The message attribute '{name}' has invalid characters.")
            out[name] = {"DataType": dt, "StringValue": sv}
    return out


def _is_number(s: str) -> bool:
    """
    >>> [_is_number(x) for x in ("1", "-1.5", "1e3", "abc", "1" * 39)]
    [True, True, True, False, False]
    """
    try:
        float(s)
    except ValueError:
        return False
    digits = re.sub(r"[eE].*$", "", s).replace("-", "").replace("+", "").replace(".", "").lstrip("0")
    return len(digits) <= 38


def message_size(body: str, attrs: dict[str, dict]) -> int:
    """A message's size as SQS counts it: body bytes + each attribute's name, type and value bytes."""
    n = len(body.encode("utf-8"))
    for name, a in attrs.items():
        n += len(name.encode("utf-8")) + len(a["DataType"].encode("utf-8"))
        n += len(a["BinaryValue"]) if "BinaryValue" in a else len(a["StringValue"].encode("utf-8"))
    return n


def attributes_to_json(attrs: dict[str, dict]) -> str:
    """Attributes in a storable JSON form (binary values base64)."""
    return json.dumps({k: ({"DataType": a["DataType"], "BinaryValue": base64.b64encode(a["BinaryValue"]).decode()}
                           if "BinaryValue" in a else a) for k, a in attrs.items()},
                      separators=(",", ":"), ensure_ascii=False, sort_keys=True)


def attributes_from_json(text: str) -> dict[str, dict]:
    doc = json.loads(text)
    return {k: ({"DataType": a["DataType"], "BinaryValue": base64.b64decode(a["BinaryValue"])}
                if "BinaryValue" in a else a) for k, a in doc.items()}


def select_message_attributes(attrs: dict[str, dict], names: object) -> dict[str, dict]:
    """ReceiveMessage ``MessageAttributeNames``: ``All`` / ``.*`` → every one, ``prefix.*`` → those
    starting with ``prefix`` (``.*`` read as the pattern's "anything": ``Custom.*`` selects
    ``Custom1`` and ``Custom.x``, as moto and its suite), else exact names.

    >>> sorted(select_message_attributes({"a.x": 1, "a.y": 2, "ab": 3, "b": 4}, ["a.*"]))
    ['a.x', 'a.y', 'ab']
    """
    if not names:
        return {}
    if not isinstance(names, list):
        raise invalid("MessageAttributeNames must be a list.")
    out = {}
    for n in names:
        if not isinstance(n, str):
            raise invalid("MessageAttributeNames must be strings.")
        if n in ("All", ".*"):
            return dict(attrs)
        if n.endswith(".*"):
            out.update({k: v for k, v in attrs.items() if k.startswith(n[:-2])})
        elif n in attrs:
            out[n] = attrs[n]
    return out


def attributes_out(attrs: dict[str, dict]) -> dict[str, dict]:
    """Attributes as the JSON protocol returns them (binary base64)."""
    return {k: ({"DataType": a["DataType"], "BinaryValue": base64.b64encode(a["BinaryValue"]).decode()}
                if "BinaryValue" in a else {"DataType": a["DataType"], "StringValue": a["StringValue"]})
            for k, a in attrs.items()}


# --- FIFO -----------------------------------------------------------------------------------------
_DEDUP = re.compile(r"[A-Za-z0-9!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~]{1,128}")


def check_group_id(v: object, what: str = "MessageGroupId") -> str:
    if not isinstance(v, str) or not _DEDUP.fullmatch(v):
        raise invalid(f"Value {v} for parameter {what} is invalid. Reason: {what} can only include "
                      "alphanumeric and punctuation characters. 1 to 128 in length.")
    return v


def sequence_number(queue: int, offset: int) -> str:
    """A FIFO message's SequenceNumber: increasing with the offset within a lakeq queue (and so within a
    MessageGroupId, whose messages all go to one queue); 20 digits.

    >>> sequence_number(3, 10)
    '00000000000000000643'
    """
    return f"{offset * 64 + queue:020d}"


def delayed_sequence_number(produced_at: int, index: int, message_id: str) -> str:
    """A delayed FIFO message's SequenceNumber, known when it is sent (its offset is not: it gets one when
    promoted): its send time (ms), its index in the send request, its id's first 4 hex digits — the
    order in which lakeq promotes messages due together (due time, request index, id), so increasing
    within a MessageGroupId while the queue's DelaySeconds stays the same; 20 digits, above every
    :func:`sequence_number` of an undelayed message.

    >>> delayed_sequence_number(1_800_000_000_000, 3, "00ff-x")
    '18000000000003000255'
    >>> d = delayed_sequence_number
    >>> d(1, 0, "ffff") < d(1, 1, "0000") < d(2, 0, "0")
    True
    """
    try:
        tie = int(message_id[:4], 16)
    except ValueError:
        tie = 0
    return f"{produced_at * 10**7 + min(index, 9) * 10**6 + tie:020d}"


# --- receipt handles ------------------------------------------------------------------------------
def encode_handle(group: str, receipt: str, offset: int) -> str:
    """An opaque ReceiptHandle for one message of a lakeq batch: base64url of group, receipt, offset.

    >>> decode_handle(encode_handle("sqs.q", "b:q@0:4:9:17", 5))
    ('sqs.q', 'b:q@0:4:9:17', 5)
    """
    raw = f"1\n{group}\n{receipt}\n{offset}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_handle(handle: object) -> tuple[str, str, int]:
    invalid_handle = SqsError("ReceiptHandleIsInvalid", f'The input receipt handle "{handle}" is not a valid '
                              "receipt handle.")
    if not isinstance(handle, str) or not handle or len(handle) > 2048:
        raise invalid_handle
    try:
        raw = base64.urlsafe_b64decode(handle + "=" * (-len(handle) % 4)).decode()
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise invalid_handle from None
    parts = raw.split("\n")
    if len(parts) != 4 or parts[0] != "1" or not parts[3].isdigit() or not parts[1] or not parts[2]:
        raise invalid_handle
    return parts[1], parts[2], int(parts[3])


# --- batches ----------------------------------------------------------------------------------------
_ENTRY_ID = re.compile(r"[A-Za-z0-9_-]{1,80}")
MAX_BATCH = 10


def check_batch(entries: object, what: str) -> list[dict]:
    """The checks every *Batch action makes before any entry runs (SQS's order: empty, too many,
    ids valid, ids distinct). ``what``: SendMessage / DeleteMessage / ChangeMessageVisibility."""
    if not entries:
        raise SqsError("EmptyBatchRequest", f"There should be at least one {what}BatchRequestEntry in the request.")
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise invalid("Entries must be a list of structures.")
    if len(entries) > MAX_BATCH:
        raise SqsError("TooManyEntriesInBatchRequest",
                       f"Maximum number of entries per request are {MAX_BATCH}. You have sent {len(entries)}.")
    seen: set[str] = set()
    for e in entries:
        i = e.get("Id")
        if not isinstance(i, str) or not _ENTRY_ID.fullmatch(i):
            raise SqsError("InvalidBatchEntryId", "A batch entry id can only contain alphanumeric characters, "
                           "hyphens and underscores. It can be at most 80 letters long.")
        if i in seen:
            raise SqsError("BatchEntryIdsNotDistinct", f"Id {i} repeated.")
        seen.add(i)
    return entries


def batch_error(entry_id: str, e: SqsError) -> dict:
    return {"Id": entry_id, "SenderFault": e.sender, "Code": e.code, "Message": e.message}


def int_param(req: dict, name: str, lo: int, hi: int, default: int | None = None) -> int | None:
    """An integer member; InvalidParameterValue outside ``lo..hi`` (strings of digits accepted: the query
    protocol sends them so)."""
    v = req.get(name)
    if v is None:
        return default
    if isinstance(v, str) and int_text(v) is not None:
        v = int(v)
    if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
        if name == "DelaySeconds":  # (SQS's own words for this one)
            raise invalid(f"Value {req.get(name)} for parameter {name} is invalid. Reason: DelaySeconds must be "
                          f">= {lo} and <= {hi}.")
        raise invalid(f"Value {req.get(name)} for parameter {name} is invalid. Reason: Must be between {lo} and "
                      f"{hi}, if provided.")
    return v


# --- JSON protocol --------------------------------------------------------------------------------
JSON_CONTENT_TYPE = "application/x-amz-json-1.0"
TARGET_PREFIX = "AmazonSQS."


def json_request(target: str | None, body: str) -> tuple[str, dict]:
    """(action, request) of a JSON-protocol call."""
    if not target or not target.startswith(TARGET_PREFIX):
        raise SqsError("UnknownOperationException", "X-Amz-Target must be AmazonSQS.<Action>",
                       json_type="com.amazon.coral.service#UnknownOperationException")
    try:
        req = json.loads(body) if body.strip() else {}
    except ValueError:
        req = None
    if not isinstance(req, dict):
        raise SqsError("SerializationException", "The request body is not a JSON object.",
                       json_type="com.amazon.coral.service#SerializationException")
    return target[len(TARGET_PREFIX):], check_types(req)


# the members of botocore's SQS model by type (the JSON protocol's shapes); "attr": a
# MessageAttributeValue structure; "entry": a batch entry (its members typed by this same table)
_STR, _INT, _STRS, _STRMAP, _ATTRS, _ENTRY_LIST = "string", "integer", "list of strings", "map of strings", \
    "map of message attribute values", "list of batch entries"
MEMBER_TYPES: dict[str, str] = {
    **{m: _STR for m in ("QueueUrl", "QueueName", "QueueNamePrefix", "NextToken", "MessageBody", "MessageGroupId",
                         "MessageDeduplicationId", "ReceiptHandle", "ReceiveRequestAttemptId", "Id", "Label",
                         "SourceArn", "DestinationArn", "TaskHandle")},
    **{m: _INT for m in ("MaxResults", "DelaySeconds", "VisibilityTimeout", "MaxNumberOfMessages", "WaitTimeSeconds",
                         "MaxNumberOfMessagesPerSecond")},
    **{m: _STRS for m in ("AttributeNames", "MessageSystemAttributeNames", "MessageAttributeNames", "TagKeys",
                          "AWSAccountIds", "Actions")},
    **{m: _STRMAP for m in ("Attributes", "Tags", "tags")},
    "MessageAttributes": _ATTRS, "MessageSystemAttributes": _ATTRS, "Entries": _ENTRY_LIST,
}
_ATTR_MEMBERS = {"DataType": _STR, "StringValue": _STR, "BinaryValue": _STR, "StringListValues": _STRS,
                 "BinaryListValues": _STRS}
_SURROGATE = re.compile("[\ud800-\udfff]")
_FREE_TEXT = {"MessageBody", "StringValue"}  # checked later (InvalidMessageContents, as SQS answers)


def _type_error(name: str, want: str, v: Any) -> SqsError:
    shown = json.dumps(v, allow_nan=True, default=str)[:100] if not isinstance(v, str) else v[:100]
    return SqsError("InvalidParameterValue",
                    f"Value {shown} for parameter {name} is invalid. Reason: must be a {want}.")


def _check_str(name: str, v: Any) -> None:
    if not isinstance(v, str):
        raise _type_error(name, _STR, v)
    if name not in _FREE_TEXT and _SURROGATE.search(v):
        raise SqsError("InvalidParameterValue", f"Value for parameter {name} is invalid. Reason: not valid Unicode "
                       "text (a lone surrogate).")


def check_types(req: dict, members: dict[str, str] = MEMBER_TYPES) -> dict:
    """A JSON-protocol request with every known member of the type botocore's model gives it
    (InvalidParameterValue otherwise, never a crash further on); a ``null`` member is absent (as
    SQS's JSON protocol reads it). Unknown members are left alone (the actions ignore them).

    >>> check_types({"QueueUrl": "u", "NextToken": None, "MaxResults": 5})
    {'QueueUrl': 'u', 'MaxResults': 5}
    >>> check_types({"NextToken": 5})
    Traceback (most recent call last):
    ...
    lakeq.sqs.protocol.SqsError: Value 5 for parameter NextToken is invalid. Reason: must be a string.
    """
    out = {}
    for name, v in req.items():
        if v is None:
            continue
        want = members.get(name) if isinstance(name, str) else None
        if want == _STR:
            _check_str(name, v)
        elif want == _INT:
            if isinstance(v, bool) or not isinstance(v, (int, str)) or (isinstance(v, int) and abs(v) > 2**63):
                raise _type_error(name, _INT, v)
        elif want == _STRS:
            if not isinstance(v, list):
                raise _type_error(name, _STRS, v)
            for x in v:
                _check_str(name, x)
        elif want == _STRMAP:
            if not isinstance(v, dict):
                raise _type_error(name, _STRMAP, v)
            for k, x in v.items():
                _check_str(name, k)
                _check_str(f"{name}.{k}", x)
        elif want == _ATTRS:
            if not isinstance(v, dict):
                raise _type_error(name, _ATTRS, v)
            for k, a in v.items():
                _check_str(name, k)
                if not isinstance(a, dict):
                    raise _type_error(f"{name}.{k}", "message attribute value structure", a)
                check_types(a, _ATTR_MEMBERS)
        elif want == _ENTRY_LIST:
            if not isinstance(v, list):
                raise _type_error(name, _ENTRY_LIST, v)
            v = [check_types(e) if isinstance(e, dict) else e for e in v]  # (a non-structure: check_batch)
        out[name] = v
    return out


def json_error(e: Any) -> tuple[int, dict[str, str], str]:
    status, jt, code, message, sender = error_parts(e)
    headers = {"Content-Type": JSON_CONTENT_TYPE,
               "x-amzn-query-error": f"{code};{'Sender' if sender else 'Receiver'}"}
    return status, headers, json.dumps({"__type": jt, "message": message})


# --- query protocol -------------------------------------------------------------------------------
# how the query protocol flattens the members that are lists or maps (JSON member -> wire form)
_LISTS = {"AttributeNames": "AttributeName", "MessageAttributeNames": "MessageAttributeName",
          "MessageSystemAttributeNames": "MessageSystemAttributeName", "TagKeys": "TagKey",
          "AWSAccountIds": "AWSAccountId", "Actions": "ActionName"}
_MAPS = {"Attributes": ("Attribute", "Name", "Value"), "Tags": ("Tag", "Key", "Value"),
         "tags": ("Tag", "Key", "Value"),
         "MessageAttributes": ("MessageAttribute", "Name", "Value"),
         "MessageSystemAttributes": ("MessageSystemAttribute", "Name", "Value")}
_ENTRIES = {"SendMessageBatch": "SendMessageBatchRequestEntry", "DeleteMessageBatch": "DeleteMessageBatchRequestEntry",
            "ChangeMessageVisibilityBatch": "ChangeMessageVisibilityBatchRequestEntry"}
_INTS = {"DelaySeconds", "MaxNumberOfMessages", "VisibilityTimeout", "WaitTimeSeconds", "MaxResults",
         "MaxNumberOfMessagesPerSecond"}


_INDEXED = re.compile(r"([A-Za-z]+)\.([1-9][0-9]{0,8})(?:\.(.+))?", re.S)  # Wire.N[.rest]; N < 10^9
_LIST_WIRES = {w: m for m, w in _LISTS.items()}
_MAP_WIRES: dict[str, list[str]] = {}
for _member, (_wire, _k, _v) in _MAPS.items():
    _MAP_WIRES.setdefault(_wire, []).append(_member)


def int_text(v: str) -> int | None:
    """The integer an ASCII decimal of at most 18 digits (optionally negative) spells, else None
    (no 500 for "²", "٣" or 5000 digits, which ``int()`` refuses or takes quadratic time on).

    >>> int_text("12"), int_text("-3"), int_text("²"), int_text("9" * 19), int_text("1e3")
    (12, -3, None, None, None)
    """
    return int(v) if _INT_TEXT.fullmatch(v) else None


_INT_TEXT = re.compile(r"-?[0-9]{1,18}")


def _unflatten(params: dict[str, str], entries_wire: str | None = None) -> tuple[dict, dict[int, dict]]:
    """One pass over the flat members: scalars, lists (``Wire.N``), maps (``Wire.N.Name/Value``,
    message attributes' ``Value.DataType|StringValue|BinaryValue``) and, for a batch action, the
    raw members of each entry (``Entry.N.rest``), returned apart and not built yet. Each key is
    looked at once (linear); indices are kept in a dict (a huge N allocates nothing), taken in
    index order; a key with an index of more than 9 digits or without one is ignored."""
    out: dict[str, Any] = {}
    lists: dict[str, dict[int, str]] = {}
    maps: dict[str, dict[int, dict[str, str]]] = {}
    entries: dict[int, dict[str, str]] = {}
    for k, v in params.items():
        if "." not in k:
            out[k] = (int_text(v) if int_text(v) is not None else v) if k in _INTS else v
            continue
        m = _INDEXED.fullmatch(k)
        if m is None:
            continue
        wire, n, rest = m.group(1), int(m.group(2)), m.group(3)
        if rest is not None and wire == entries_wire:
            entries.setdefault(n, {})[rest] = v
        elif rest is None and wire in _LIST_WIRES:
            lists.setdefault(_LIST_WIRES[wire], {})[n] = v
        elif rest is not None and wire in _MAP_WIRES:
            maps.setdefault(wire, {}).setdefault(n, {})[rest] = v
    for member, got in lists.items():
        out[member] = [got[n] for n in sorted(got)]
    for wire, member in _LIST_WIRES.items():
        if member not in out and wire in params:
            out[member] = [params[wire]]
    for wire, by_n in maps.items():
        built: dict[str, Any] = {}
        for n in sorted(by_n):
            d = by_n[n]
            for member in _MAP_WIRES[wire]:
                key, value = _MAPS[member][1], _MAPS[member][2]
                if key not in d:
                    continue
                if wire in ("MessageAttribute", "MessageSystemAttribute"):
                    built[d[key]] = {f: d[f"{value}.{f}"] for f in ("DataType", "StringValue", "BinaryValue")
                                     if f"{value}.{f}" in d}
                else:
                    built[d[key]] = d.get(value, "")
                break
        if built:
            out[_MAP_WIRES[wire][0]] = built
    return out, entries


def query_request(form: str, path_queue_url: str | None = None) -> tuple[str, dict]:
    """(action, request in the JSON protocol's shape) of a query-protocol call (form-encoded body or
    query string). ``path_queue_url``: the URL the request was POSTed to when it names a queue."""
    params = dict(parse_qsl(form, keep_blank_values=True))
    action = params.pop("Action", None)
    if not action:
        raise SqsError("MissingAction", "No action specified (the Action parameter is missing).", status=400,
                       code="MissingAction")
    req, raw_entries = _unflatten(params, _ENTRIES.get(action))
    # an Attribute.N map is called "Attributes" in every action but CreateQueue's tags ("Tag.N")
    if action == "CreateQueue" and "Tags" in req:
        req["tags"] = req.pop("Tags")
    req.pop("tags", None) if action != "CreateQueue" else None
    if action in _ENTRIES:
        if len(raw_entries) > MAX_BATCH:  # counted before any entry is built
            raise SqsError("TooManyEntriesInBatchRequest", f"Maximum number of entries per request are {MAX_BATCH}. "
                           f"You have sent {len(raw_entries)}.")
        req["Entries"] = [_unflatten(raw_entries[n])[0] for n in sorted(raw_entries)]
    for k in ("Version", "Expires", "Timestamp", "SignatureVersion", "SignatureMethod", "AWSAccessKeyId",
              "Signature"):
        req.pop(k, None)
    if path_queue_url and "QueueUrl" not in req:
        req["QueueUrl"] = path_queue_url
    return action, req


def xml_text(value: Any) -> str:
    r"""``value`` as XML 1.0 character data that parses back to itself where XML can carry it: ``&``,
    ``<``, ``>`` escaped, CR as ``&#xD;`` (a parser turns a literal CR into LF: boto3's MD5 check of
    the body would fail); a character XML 1.0 cannot carry at all (C0 controls but TAB/LF/CR,
    U+FFFE/U+FFFF, lone surrogates; SendMessage refuses them, lakeq's own API may store them) becomes
    U+FFFD.

    >>> xml_text('a<b&"\r\x00') == 'a&lt;b&amp;"&#xD;\ufffd'
    True
    """
    return escape(xml_clean(str(value))).replace("\r", "&#xD;")


def xml_clean(text: str) -> str:
    r"""``text`` with every character XML 1.0 cannot carry replaced by U+FFFD.

    >>> xml_clean("ok\x01\ufffe\t") == "ok\ufffd\ufffd\t"
    True
    """
    return _BAD_BODY.sub("\ufffd", text) if _BAD_BODY.search(text) else text


def _xml(value: Any, tag: str) -> str:
    return f"<{tag}>{xml_text(value)}</{tag}>"


def _xml_message(m: dict) -> dict:
    """A received message as the query protocol delivers it: a body or message attribute holding
    characters XML cannot carry (only a message from lakeq's own API can) is delivered with them
    replaced by U+FFFD, and MD5OfBody / MD5OfMessageAttributes are those of what is delivered, so
    an SDK's MD5 check holds (the JSON protocol delivers the exact text)."""
    body = m.get("Body")
    if isinstance(body, str) and _BAD_BODY.search(body):
        m = {**m, "Body": xml_clean(body), "MD5OfBody": md5_hex(xml_clean(body))}
    attrs = m.get("MessageAttributes")
    if attrs and any(_BAD_BODY.search(k) or _BAD_BODY.search(a.get("StringValue") or "") for k, a in attrs.items()):
        clean: dict[str, dict] = {}
        for k, a in attrs.items():
            if "BinaryValue" in a:
                clean[xml_clean(k)] = {"DataType": a["DataType"], "BinaryValue": base64.b64decode(a["BinaryValue"])}
            else:
                clean[xml_clean(k)] = {"DataType": a["DataType"], "StringValue": xml_clean(a["StringValue"])}
        m = {**m, "MessageAttributes": attributes_out(clean), "MD5OfMessageAttributes": md5_attributes(clean)}
    return m


def _xml_attrs_map(attrs: dict, entry: str, key: str, val: str) -> str:
    return "".join(f"<{entry}>{_xml(k, key)}{_xml(v, val)}</{entry}>" for k, v in attrs.items())


def _xml_message_attrs(attrs: dict) -> str:
    out = []
    for k, a in attrs.items():
        inner = _xml(a["DataType"], "DataType")
        inner += _xml(a["BinaryValue"], "BinaryValue") if "BinaryValue" in a else _xml(a["StringValue"], "StringValue")
        out.append(f"<MessageAttribute>{_xml(k, 'Name')}<Value>{inner}</Value></MessageAttribute>")
    return "".join(out)


_NS = "http://queue.amazonaws.com/doc/2012-11-05/"


def xml_response(action: str, result: dict, request_id: str) -> str:
    """The query protocol's XML answer to ``action`` from the JSON-shaped ``result``."""
    body = ""
    for k, v in result.items():
        if k in ("QueueUrls", "queueUrls"):
            body += "".join(_xml(u, "QueueUrl") for u in v)
        elif k == "Attributes":
            body += _xml_attrs_map(v, "Attribute", "Name", "Value")
        elif k == "Tags":
            body += _xml_attrs_map(v, "Tag", "Key", "Value")
        elif k == "Messages":
            for m in v:
                m = _xml_message(m)
                inner = ""
                for mk in ("MessageId", "ReceiptHandle", "MD5OfBody", "Body", "MD5OfMessageAttributes"):
                    if mk in m:
                        inner += _xml(m[mk], mk)
                inner += _xml_attrs_map(m.get("Attributes", {}), "Attribute", "Name", "Value")
                inner += _xml_message_attrs(m.get("MessageAttributes", {}))
                body += f"<Message>{inner}</Message>"
        elif k == "Results":  # ListMessageMoveTasks: a flattened list of entries
            for e in v:
                body += "<Results>" + "".join(_xml(x, ek) for ek, x in e.items()) + "</Results>"
        elif k in ("Successful", "Failed"):
            entry_tag = {"SendMessageBatch": "SendMessageBatchResultEntry",
                         "DeleteMessageBatch": "DeleteMessageBatchResultEntry",
                         "ChangeMessageVisibilityBatch": "ChangeMessageVisibilityBatchResultEntry"}[action]
            tag = entry_tag if k == "Successful" else "BatchResultErrorEntry"
            for e in v:
                body += f"<{tag}>" + "".join(_xml(str(x).lower() if isinstance(x, bool) else x, ek)
                                            for ek, x in e.items()) + f"</{tag}>"
        else:
            body += _xml(v, k)
    result_tag = f"<{action}Result>{body}</{action}Result>" if result or action in _HAS_RESULT else ""
    return (f'<?xml version="1.0"?><{action}Response xmlns="{_NS}">{result_tag}'
            f"<ResponseMetadata><RequestId>{request_id}</RequestId></ResponseMetadata></{action}Response>")


_HAS_RESULT = {"CreateQueue", "GetQueueUrl", "ListQueues", "SendMessage", "SendMessageBatch", "ReceiveMessage",
               "DeleteMessageBatch", "ChangeMessageVisibilityBatch", "GetQueueAttributes", "ListQueueTags",
               "ListDeadLetterSourceQueues", "StartMessageMoveTask", "ListMessageMoveTasks", "CancelMessageMoveTask"}


def xml_error(e: Any, request_id: str) -> tuple[int, dict[str, str], str]:
    status, _, code, message, sender = error_parts(e)
    body = (f'<?xml version="1.0"?><ErrorResponse xmlns="{_NS}"><Error><Type>{"Sender" if sender else "Receiver"}'
            f"</Type>{_xml(code, 'Code')}{_xml(message, 'Message')}<Detail/></Error>"
            f"<RequestId>{request_id}</RequestId></ErrorResponse>")
    return status, {"Content-Type": "text/xml"}, body
