"""The tests' direct DynamoDB transport (infra/local/moto_direct.py) answers exactly as the wire does.

One script of data-plane calls (every operation the transport takes, with blobs, numbers, sets,
nested maps, conditions that pass and fail, pagination, transactions that commit and cancel,
consumed capacity, a parameter botocore rejects) runs twice on the same fresh moto state: once
through the transport, once down the wire (``LAKEQ_MOTO_WIRE=1``). Every answer (less
``ResponseMetadata``) and every error (class, code, message, cancellation reasons) must be equal,
and the table's items after the script too.
"""
from __future__ import annotations

import pytest

from infra.local import interceptor, moto_direct, moto_speed
from tests.conftest import _restore
from tests.dynamo_scripts import make_table, script, updates

# moto: this file makes its own tables and compares stores itself
pytestmark = pytest.mark.moto


@pytest.fixture
def fresh(aws, _aws_snapshot):
    def reset():
        _restore(_aws_snapshot)
        make_table(aws["dynamodb"])
    return reset


def test_direct_transport_answers_as_the_wire(aws, fresh, monkeypatch):
    calls = []
    real = moto_direct.call

    def counted(client, op, params):
        r = real(client, op, params)
        calls.append((op, r is not moto_direct.NOT_HANDLED))
        return r

    monkeypatch.setattr(interceptor, "direct", counted)
    fresh()
    direct = script(aws["dynamodb"])
    handled = {op for op, took in calls if took}
    assert handled == moto_direct.OPERATIONS, handled  # the script went through the transport
    calls.clear()
    monkeypatch.setenv("LAKEQ_MOTO_WIRE", "1")
    fresh()
    wire = script(aws["dynamodb"])
    assert not [c for c in calls if c[1]]
    assert len(direct) == len(wire)
    for d, w in zip(direct, wire):
        assert d == w
    kinds = {k for _, k, _ in wire}
    assert kinds == {"ok", "ClientError", "ParamValidationError"}  # the script has each outcome


def test_moto_speed_walks_update_expressions_as_moto_does(aws, fresh):
    """infra/local/moto_speed.py's walk answers as moto's own on the same state: every answer,
    error and item of the update script and of the transport's script."""
    assert moto_speed.installed()  # tests/conftest.py installs it
    try:
        fresh()
        fast = updates(aws["dynamodb"]) + script(aws["dynamodb"])
        moto_speed.uninstall()
        assert not moto_speed.installed()
        fresh()
        plain = updates(aws["dynamodb"]) + script(aws["dynamodb"])
    finally:
        moto_speed.install()
    assert len(fast) == len(plain)
    for f, p in zip(fast, plain):
        assert f == p
    kinds = [k for k, _ in fast[:17]]
    assert kinds.count("ok") >= 4 and kinds.count("ClientError") >= 8, kinds  # both outcomes, many errors
