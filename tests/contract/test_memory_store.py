"""The memory store (infra/local/dynamo_memory.py) answers as moto does: the contract that keeps
the fast tests honest (issue 31 item 3).

The same scripts of data-plane calls (tests/dynamo_scripts.py: every operation, and update
expressions of every kind with each validation error) run once on moto and once on the memory
store, from the same empty table; every answer and every error (code, message, cancellation
reasons) must be equal, and so must the items left. ``ConsumedCapacity`` is the one documented
difference (the memory store does not report it).
"""
from __future__ import annotations

import pytest

from infra.local import dynamo_memory
from tests.conftest import _restore
from tests.dynamo_scripts import TABLE, key, make_table, script, updates

# moto: this file makes its own tables and compares stores itself
pytestmark = pytest.mark.moto


def _without_capacity(entries: list) -> list:
    out = []
    for entry in entries:
        if isinstance(entry[-1], dict):
            entry = (*entry[:-1], {k: v for k, v in entry[-1].items() if k != "ConsumedCapacity"})
        out.append(entry)
    return out


@pytest.fixture
def both(aws, _aws_snapshot):
    """``run(fn)``: fn(dynamodb client) on a fresh moto table, then on a fresh memory table."""
    ddb = aws["dynamodb"]

    def run(fn):
        _restore(_aws_snapshot)
        make_table(ddb)
        on_moto = fn(ddb)
        definition = ddb.describe_table(TableName=TABLE)["Table"]
        store = dynamo_memory.MemoryDynamo([{k: definition[k] for k in ("TableName", "KeySchema",
                                                                       "AttributeDefinitions")}])
        _restore(_aws_snapshot)
        make_table(ddb)  # the control plane (create, describe) stays on moto
        with dynamo_memory.using(store):
            on_memory = fn(ddb)
        assert store.calls > 0
        return _without_capacity(on_moto), _without_capacity(on_memory)

    return run


def test_every_operation_answers_as_moto(both):
    moto, memory = both(script)
    assert len(moto) == len(memory)
    for m, s in zip(moto, memory):
        assert s == m
    assert {k for _, k, _ in memory} == {"ok", "ClientError", "ParamValidationError"}


def test_update_expressions_and_their_errors_answer_as_moto(both):
    moto, memory = both(updates)
    assert len(moto) == len(memory)
    for m, s in zip(moto, memory):
        assert s == m
    kinds = [k for k, _ in memory[:17]]
    assert kinds.count("ok") >= 4 and kinds.count("ClientError") >= 8, kinds


def test_a_snapshot_is_restored_exactly_and_stays_as_it_was():
    """``snapshot`` / ``restore`` (the queue model's set-up made once): the tables come back as they
    were, items changed in place after the snapshot included, and restoring twice works."""
    store = dynamo_memory.MemoryDynamo([{"TableName": TABLE, "KeySchema": [
        {"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        "AttributeDefinitions": [{"AttributeName": "pk", "AttributeType": "S"},
                                 {"AttributeName": "sk", "AttributeType": "N"}]}])

    def items():
        return store.call("Scan", {"TableName": TABLE})["Items"]

    store.call("PutItem", {"TableName": TABLE, "Item": {**key("a", 1), "n": {"N": "1"}, "l": {"L": [{"S": "x"}]}}})
    store.call("PutItem", {"TableName": TABLE, "Item": {**key("b", 2), "n": {"N": "2"}}})
    before = items()
    snap = store.snapshot()
    for _ in range(2):
        store.call("UpdateItem", {"TableName": TABLE, "Key": key("a", 1),
                                  "UpdateExpression": "SET n = n + :one, l = list_append(l, :more)",
                                  "ExpressionAttributeValues": {":one": {"N": "1"}, ":more": {"L": [{"S": "y"}]}}})
        store.call("DeleteItem", {"TableName": TABLE, "Key": key("b", 2)})
        store.call("PutItem", {"TableName": TABLE, "Item": {**key("c", 3)}})
        assert items() != before
        store.restore(snap)
        assert items() == before
