"""DynamoDB's data-plane calls handed to moto's in-process backend without the wire (tests only).

Under ``moto.mock_aws()`` a DynamoDB call goes: botocore builds and signs an HTTP request (JSON,
blobs base64), moto's stubber parses it back into parameters, the ``DynamoHandler`` method runs
on the backend, moto's generic serializer writes the answer as JSON, botocore parses it again.
Profiled on this machine (2 cores), the two serialisations and their event hooks are about three
quarters of a store call's ~20-160 ms (moto's own DynamoDB work the rest), and store calls are
most of an integration test's time.

:func:`call` skips both round trips for the data-plane operations (:data:`OPERATIONS`): it
validates the parameters as botocore does (``ParamValidationError`` the same), turns blobs into
the bytes moto's parser would have made, runs the same ``DynamoHandler`` method under the same
lock the stubber takes, and shapes the answer as botocore's parser would (only the output shape's
members, blobs as bytes, ``ResponseMetadata``). Any error the backend raises sends the call down
the wire path instead, which raises it with botocore's exact ``ClientError`` (code, message,
``CancellationReasons``): a failed DynamoDB call changes nothing, so running it again answers the
same. Everything else (control plane, Streams, S3, a client with its own endpoint, no active
mock) is not handled here.

It sits under :mod:`infra.local.interceptor`'s hooks (IAM and DynamoDB's limits still see every
call, before and after). ``LAKEQ_MOTO_WIRE=1`` turns it off; ``tests/integration/test_moto_direct.py``
runs one script of calls both ways and compares every answer and error.
"""
from __future__ import annotations

import copy
import os
import threading
from contextlib import nullcontext
from typing import Any

from botocore.validate import validate_parameters

OPERATIONS = frozenset({"GetItem", "PutItem", "UpdateItem", "DeleteItem", "Query", "Scan", "BatchGetItem",
                        "BatchWriteItem", "TransactWriteItems", "TransactGetItems"})
NOT_HANDLED = object()
lock: threading.RLock | None = None  # the lock the tests' stubber wrapper takes (tests/conftest.py)


def enabled() -> bool:
    return os.environ.get("LAKEQ_MOTO_WIRE", "") not in ("1", "true")


def _to_bytes(shape: Any, value: Any) -> Any:
    """``value`` with every blob as the bytes moto's parser makes of botocore's base64."""
    t = shape.type_name
    if t == "structure":
        return {k: _to_bytes(shape.members[k], v) if k in shape.members else v for k, v in value.items()}
    if t == "list":
        return [_to_bytes(shape.member, v) for v in value]
    if t == "map":
        return {k: _to_bytes(shape.value, v) for k, v in value.items()}
    if t == "blob":
        return value.encode("utf-8") if isinstance(value, str) else bytes(value)
    return value


def _shaped(shape: Any, value: Any) -> Any:
    """``value`` as botocore's JSON parser returns it: the shape's members only, blobs as bytes."""
    t = shape.type_name
    if t == "structure":
        return {k: _shaped(shape.members[k], v) for k, v in value.items()
                if k in shape.members and v is not None}
    if t == "list":
        return [_shaped(shape.member, v) for v in value]
    if t == "map":
        return {k: _shaped(shape.value, v) for k, v in value.items()}
    if t == "blob":
        return value.encode("utf-8") if isinstance(value, str) else bytes(value)
    if t in ("integer", "long") and isinstance(value, str):
        return int(value)
    if t in ("double", "float") and isinstance(value, (int, str)) and not isinstance(value, bool):
        return float(value)
    return value


def _handled(client: Any) -> bool:
    from moto.core.models import botocore_stubber

    if not botocore_stubber.enabled or client.meta.service_model.service_name != "dynamodb":
        return False
    return client.meta.endpoint_url.endswith(".amazonaws.com")


def call(client: Any, operation_name: str, api_params: dict) -> Any:
    """The answer to ``operation_name``, or :data:`NOT_HANDLED` (the caller goes down the wire)."""
    if operation_name not in OPERATIONS or not enabled() or not _handled(client):
        return NOT_HANDLED
    from botocore import xform_name
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.dynamodb.responses import DynamoHandler

    op = client.meta.service_model.operation_model(operation_name)
    if client.meta.config.parameter_validation:  # botocore's own check, raised the same (pynamodb's
        validate_parameters(api_params, op.input_shape)  # client turns it off, as on the wire)
    handler = DynamoHandler()
    handler.current_account = DEFAULT_ACCOUNT_ID
    handler.region = client.meta.region_name
    handler.params = handler.body = _to_bytes(op.input_shape, copy.deepcopy(api_params))
    with lock if lock is not None else nullcontext():
        try:
            result = getattr(handler, xform_name(operation_name))()
        except Exception:  # noqa: BLE001 - the wire path raises it as botocore would
            return NOT_HANDLED
        out = _shaped(op.output_shape, copy.deepcopy(result.result or {}))
    out["ResponseMetadata"] = {"RequestId": "moto-direct", "HTTPStatusCode": 200, "HTTPHeaders": {},
                               "RetryAttempts": 0}
    return out
