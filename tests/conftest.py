"""Shared test setup.

At import time (before any test module imports ``lakeq``, whose pynamodb models read table names
from the environment) this sets fake AWS credentials and region and the functions' environment
exactly as ``template.yaml`` defines it for the local stack ``lakeq-local``
(``TOPICS_TABLE=lakeq-local-topics`` …, ``LAKEQ_ADMIN_KEY_SHA256`` = sha-256 of
``$LAKEQ_ADMIN_KEY``, default ``local-admin-key``).

Fixtures:
- ``template`` (session): the parsed ``template.yaml`` (:class:`infra.local.template.Template`).
- ``aws`` (function): ``moto.mock_aws()`` active, every table and bucket of ``template.yaml``
  created (and its SQS queues and Secrets Manager secrets); yields ``{"dynamodb", "s3",
  "dynamodbstreams", "sqs", "secretsmanager"}`` clients. In-process
  moto requests are served one at a time (as ``infra/local/moto_serial.py`` does for the server):
  moto's backends are not thread-safe (a TransactWriteItems deep-copies tables other threads are
  writing), while DynamoDB is atomic per item. ``infra/local/aws_rules.py``'s hook is active:
  calls made as a function (``interceptor.acting_as``; ``tests/handlers.py`` does it) are checked
  against the function's IAM role from ``template.yaml``; every call gets DynamoDB's limits
  (400 KB items, 100-item / 4 MB transactions, 25-item BatchWrite, 100-key / 16 MB BatchGet,
  1 MB Query/Scan pages). ``aws["_rules"]`` (fixture ``aws_rules``) is the hook.
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
# Every Spark JVM the tests start (tests/spark's session, the Glue scripts and benches run as
# subprocesses, the local stacks' lake and replay jobs) on the JIT's first tier and the serial
# collector: the same results, about half the JVM's CPU for these seconds-long jobs
# (tests/spark/test_transforms.py: 105 -> 60 s of JVM CPU; test_replay_job_e2e.py 22.5 -> 11.3 s).
# And their expressions interpreted, not compiled to Java first (tests/spark/conftest.py's
# INTERPRETED, which says why): the Glue scripts run as Glue runs them
# (tests/unit/test_glue_packaging.py) keep the code generation.
JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
SPARK_INTERPRETED = "--conf spark.sql.codegen.wholeStage=false --conf spark.sql.codegen.factoryMode=NO_CODEGEN"
os.environ.setdefault("PYSPARK_SUBMIT_ARGS", f'{SPARK_INTERPRETED} --driver-java-options "{JVM_OPTIONS}" pyspark-shell')
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

from hypothesis import HealthCheck, settings  # noqa: E402

# Hypothesis's timing checks (a 200-ms deadline per example, "input generation is slow") measure the
# machine, not the code: on a shared 2-core runner a scheduler stall fails them (seen: 1.56 s for one
# draw of a small dictionary). The examples and their number are unchanged; only the timers are off.
settings.register_profile("lakeq", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("lakeq")

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

# DynamoDB's data-plane calls go to moto's backend without the HTTP round trip (see
# infra/local/moto_direct.py; LAKEQ_MOTO_WIRE=1 sends them down the wire as before)
from infra.local import interceptor as _interceptor  # noqa: E402
from infra.local import moto_direct as _moto_direct  # noqa: E402

_moto_direct.lock = _moto_lock

# ... and to the memory store instead, for every test not marked ``moto`` (the ``aws`` fixture:
# infra/local/dynamo_memory.py; the contract suite, tests/contract/, holds it to moto's answers)
from infra.local import dynamo_memory as _dynamo_memory  # noqa: E402


def _direct(client, operation, params):
    response = _dynamo_memory.call(client, operation, params)
    return response if response is not _moto_direct.NOT_HANDLED else _moto_direct.call(client, operation, params)


_interceptor.direct = _direct
_interceptor.install()

# moto's UpdateExpression walk without its per-node bookkeeping (infra/local/moto_speed.py)
from infra.local import moto_speed as _moto_speed  # noqa: E402

_moto_speed.install()

# botocore's service models read once per test process, not once per client: every handler module a
# test loads (executed anew, tests/handlers.py) makes its own pynamodb connection and boto3 clients,
# each with a new botocore session whose Loader parses the service's JSON again (54 ms a client; 44
# clients in 27 examples of the queue model). Loaders with the same search paths share their cache,
# as one session's clients already do (botocore's instance_cache: the loaded dicts are never changed).
import botocore.loaders  # noqa: E402

_loader_caches: dict[tuple, dict] = {}
_loader_init = botocore.loaders.Loader.__init__


def _shared_cache_init(self, *args, **kwargs):
    _loader_init(self, *args, **kwargs)
    key = (tuple(self.search_paths), tuple(self.extras_types), type(self.file_loader))
    self._cache = _loader_caches.setdefault(key, {})


botocore.loaders.Loader.__init__ = _shared_cache_init

ADMIN_KEY = os.environ["LAKEQ_ADMIN_KEY"]


@pytest.fixture(scope="session")
def template() -> _tpl.Template:
    return _tpl.load_template()


@pytest.fixture(scope="session")
def aws_rules_spec(template):
    """The roles (template.yaml's Policies as SAM deploys them) and key schemas, built once."""
    from infra.local import aws_rules

    rules = aws_rules.for_tests(template)
    return rules.roles, rules.tables


@pytest.fixture
def aws_rules(aws):
    """The :class:`infra.local.aws_rules.AwsRules` hook active in this test (see ``aws``)."""
    return aws["_rules"]


# The moto backends whose state after creating the template's tables and bucket is kept once per
# session and restored (deep-copied) for each test: creating the 14 tables through the API cost
# 1-4 s a test on this 2-core machine, a restore ~0.05 s. Secrets (a fresh master per test) and
# the SQS queues (moto's SQS backend holds locks, which do not deep-copy) are made per test.
_SNAPSHOT_BACKENDS = ("dynamodb", "s3")


@pytest.fixture(scope="session")
def _aws_clients():
    """boto3 clients made once: moto's stubber is a botocore handler registered when ``moto`` is
    imported (above), so a client made before a ``mock_aws()`` is served by the mock while it is active."""
    return {name: boto3.client(name, region_name="us-east-1")
            for name in ("dynamodb", "s3", "dynamodbstreams", "sqs", "secretsmanager")}


@pytest.fixture(scope="session")
def _aws_snapshot(template, _aws_clients):
    """``{backend: {account: {region: backend object}}}`` right after the template's tables and
    bucket were created on an empty moto (the state every test starts from)."""
    with mock_aws():
        _tpl.create_tables(_aws_clients["dynamodb"], template, _tpl.LOCAL_STACK)
        _tpl.create_buckets(_aws_clients["s3"], template, _tpl.LOCAL_STACK)
        return _snapshot(_SNAPSHOT_BACKENDS)


def _snapshot(names) -> dict:
    """``{backend: {account: {region: a deep copy of the backend}}}`` of moto's live ``names``
    (what :func:`_restore` puts back)."""
    import copy

    from moto.backends import get_backend

    return {name: {acct: {region: copy.deepcopy(be) for region, be in regions.items()}
                   for acct, regions in get_backend(name).items()}
            for name in names}


def _restore(snapshot: dict) -> None:
    import copy

    from moto.backends import get_backend

    for name, accounts in snapshot.items():
        live = get_backend(name)
        for acct, regions in accounts.items():
            for region, be in regions.items():
                live[acct][region] = copy.deepcopy(be)


@pytest.fixture
def aws(template, aws_rules_spec, _aws_clients, _aws_snapshot, _memory_tables, request):
    from infra.local import aws_rules, interceptor

    roles, tables = aws_rules_spec
    # What AWS enforces and moto does not: IAM for calls made as a function, DynamoDB's limits
    # for every call (see infra/local/aws_rules.py)
    rules = aws_rules.AwsRules(roles, tables, audit_file=os.environ.get("LAKEQ_IAM_AUDIT") or None)
    with mock_aws(), interceptor.hooked(rules):
        clients = dict(_aws_clients)
        _restore(_aws_snapshot)  # the template's tables and bucket, empty (a fresh moto: mock_aws() reset it)
        _tpl.create_secrets(clients["secretsmanager"], template, _tpl.LOCAL_STACK)  # a fresh master per test
        from lakeq.sqs import keys as sqs_keys

        sqs_keys.clear_caches()
        from lakeq.sqs import permissions as sqs_perm

        sqs_perm.forget_topics()  # (the container's topic cache and copies of queue items: a fresh store per test)
        from lakeq.consume import reader

        reader.forget_probes()  # (when this container last probed each log: a fresh store per test)
        from lakeq.console import charts

        charts.clear_cache()  # (the console charts' answers, reused for seconds: a fresh CloudWatch per test)
        from lakeq.store.catalog import TopicRepo

        TopicRepo.forget_listed()  # (the container's copy of the topic list: a fresh store per test)
        _tpl.create_queues(clients["sqs"], template, _tpl.LOCAL_STACK)
        # DynamoDB's data plane: the memory store unless the test is marked ``moto``
        # (LAKEQ_TEST_STORE=moto: every test on moto, to compare)
        on_moto = request.node.get_closest_marker("moto") or os.environ.get("LAKEQ_TEST_STORE") == "moto"
        memory = None if on_moto else _memory_tables
        if memory is not None:
            memory.reset()
        with _dynamo_memory.using(memory):
            yield {**clients, "_rules": rules, "_memory": memory}


@pytest.fixture(scope="session")
def _memory_tables(template):
    return _dynamo_memory.from_template(template)


# --- running in parallel: `make test` runs unit, contract, integration and spark on 2 pytest-xdist
# workers with `--dist worksteal` (a worker that runs out takes half of another's queue); a worker
# that runs Spark tests starts its own session (tests/spark/conftest.py).
