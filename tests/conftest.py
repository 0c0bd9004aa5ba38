"""Shared test setup.

At import time (before any test module imports ``lakeq``, whose pynamodb models read table names
from the environment) this sets fake AWS credentials and region and the functions' environment
exactly as ``template.yaml`` defines it for the local stack ``lakeq-local``
(``TOPICS_TABLE=lakeq-local-topics`` …, ``LAKEQ_ADMIN_KEY_SHA256`` = sha-256 of
``$LAKEQ_ADMIN_KEY``, default ``local-admin-key``).

Fixtures:
- ``template`` (session): the parsed ``template.yaml`` (:class:`infra.local.template.Template`).
- ``aws`` (function): ``moto.mock_aws()`` active, every table and bucket of ``template.yaml``
  created; yields ``{"dynamodb": client, "s3": client, "dynamodbstreams": client}``. In-process
  moto requests are served one at a time (as ``infra/local/moto_serial.py`` does for the server):
  moto's backends are not thread-safe (a TransactWriteItems deep-copies tables other threads are
  writing), while DynamoDB is atomic per item.
"""
from __future__ import annotations

import os

# --- fake AWS, forced: a test must never reach a real account or a stray endpoint -----------------
for _var in (
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_DYNAMODB",
    "AWS_ENDPOINT_URL_S3",
    "AWS_ENDPOINT_URL_DYNAMODB_STREAMS",
):
    os.environ.pop(_var, None)
os.environ["AWS_ACCESS_KEY_ID"] = "testing"
os.environ["AWS_SECRET_ACCESS_KEY"] = "testing"
os.environ["AWS_DEFAULT_REGION"] = "us-east-1"
os.environ["AWS_REGION"] = "us-east-1"
# botocore >= 1.38 sends stream calls to account-based endpoints
# (https://<account>.streams-ddb.<region>.amazonaws.com) that moto 5.2.5 does not intercept.
os.environ["AWS_ACCOUNT_ID_ENDPOINT_MODE"] = "disabled"
os.environ.setdefault("LAKEQ_ADMIN_KEY", "local-admin-key")
os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "true")

from infra.local import template as _tpl  # noqa: E402

os.environ.update(_tpl.environment(_tpl.load_template(), _tpl.LOCAL_STACK))

import threading  # noqa: E402

import boto3  # noqa: E402
import pytest  # noqa: E402
from moto import mock_aws  # noqa: E402
from moto.core.botocore_stubber import BotocoreStubber  # noqa: E402

_moto_lock = threading.RLock()
_process_request = BotocoreStubber.process_request


def _serialised_process_request(self, request):
    with _moto_lock:
        return _process_request(self, request)


BotocoreStubber.process_request = _serialised_process_request

ADMIN_KEY = os.environ["LAKEQ_ADMIN_KEY"]


@pytest.fixture(scope="session")
def template() -> _tpl.Template:
    return _tpl.load_template()


@pytest.fixture
def aws(template):
    with mock_aws():
        clients = {
            "dynamodb": boto3.client("dynamodb", region_name="us-east-1"),
            "s3": boto3.client("s3", region_name="us-east-1"),
            "dynamodbstreams": boto3.client("dynamodbstreams", region_name="us-east-1"),
        }
        _tpl.create_tables(clients["dynamodb"], template, _tpl.LOCAL_STACK)
        _tpl.create_buckets(clients["s3"], template, _tpl.LOCAL_STACK)
        yield clients
