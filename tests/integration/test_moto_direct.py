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
from botocore.exceptions import ClientError, ParamValidationError

from infra.local import interceptor, moto_direct
from tests.conftest import _restore

TABLE = "direct-contract"


def _table(ddb) -> None:
    ddb.create_table(TableName=TABLE, BillingMode="PAY_PER_REQUEST",
                     AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"},
                                           {"AttributeName": "sk", "AttributeType": "N"}],
                     KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"},
                                {"AttributeName": "sk", "KeyType": "RANGE"}])


def _key(pk: str, sk: int) -> dict:
    return {"pk": {"S": pk}, "sk": {"N": str(sk)}}


def _script(ddb) -> list:
    """Every call's answer or error, in order."""
    out: list = []

    def do(op: str, **params):
        try:
            r = getattr(ddb, op)(**params)
            r.pop("ResponseMetadata", None)
            out.append((op, "ok", r))
        except ClientError as e:
            err = {k: v for k, v in e.response.items() if k != "ResponseMetadata"}
            out.append((op, "ClientError", err))
        except ParamValidationError as e:
            out.append((op, "ParamValidationError", str(e)))

    for i in range(12):
        item = {**_key("a", i), "blob": {"B": bytes([i, 0, 255]) * 3}, "n": {"N": f"{i}.50"},
                "s": {"S": f"é{i}"}, "l": {"L": [{"N": "1"}, {"S": "x"}, {"NULL": True}]},
                "m": {"M": {"B": {"S": "a map key named B"}, "in": {"BOOL": i % 2 == 0}}},
                "ss": {"SS": ["x", "y"]}, "bs": {"BS": [b"\x00", b"\x01\x02"]}}
        do("put_item", TableName=TABLE, Item=item)
    do("put_item", TableName=TABLE, Item={**_key("b", 1), "v": {"N": "1"}}, ReturnConsumedCapacity="TOTAL")
    do("put_item", TableName=TABLE, Item={**_key("b", 1), "v": {"N": "2"}},
       ConditionExpression="attribute_not_exists(pk)")
    do("put_item", TableName=TABLE, Item={**_key("b", 1), "v": {"N": "3"}}, ReturnValues="ALL_OLD")
    do("get_item", TableName=TABLE, Key=_key("a", 3))
    do("get_item", TableName=TABLE, Key=_key("zz", 3))
    do("get_item", TableName=TABLE, Key=_key("a", 4), ProjectionExpression="#b, m.#in",
       ExpressionAttributeNames={"#b": "blob", "#in": "in"}, ConsistentRead=True)
    for rv in ("NONE", "ALL_NEW", "UPDATED_OLD", "UPDATED_NEW", "ALL_OLD"):
        do("update_item", TableName=TABLE, Key=_key("b", 1), UpdateExpression="ADD v :one SET w = :b",
           ExpressionAttributeValues={":one": {"N": "1"}, ":b": {"B": b"\xfe"}}, ReturnValues=rv)
    do("update_item", TableName=TABLE, Key=_key("b", 1), UpdateExpression="SET v = :x",
       ConditionExpression="v = :old", ExpressionAttributeValues={":x": {"N": "0"}, ":old": {"N": "-1"}})
    do("update_item", TableName=TABLE, Key=_key("b", 1), UpdateExpression="SET v = :x",
       ConditionExpression="v = :old", ExpressionAttributeValues={":x": {"N": "0"}, ":old": {"N": "-1"}},
       ReturnValuesOnConditionCheckFailure="ALL_OLD")
    do("update_item", TableName=TABLE, Key=_key("b", 2), UpdateExpression="SET v = :x",
       ExpressionAttributeValues={":x": {"N": "7"}, ":unused": {"N": "1"}})  # a validation error
    do("delete_item", TableName=TABLE, Key=_key("a", 11), ReturnValues="ALL_OLD")
    do("delete_item", TableName=TABLE, Key=_key("a", 10), ConditionExpression="attribute_exists(nope)")
    do("delete_item", TableName="no-such-table", Key=_key("a", 1))
    page = {"TableName": TABLE, "KeyConditionExpression": "pk = :p", "Limit": 4,
            "ExpressionAttributeValues": {":p": {"S": "a"}}}
    start = None
    for _ in range(5):
        do("query", **page, **({"ExclusiveStartKey": start} if start else {}))
        start = out[-1][2].get("LastEvaluatedKey") if out[-1][1] == "ok" else None
        if not start:
            break
    do("query", TableName=TABLE, KeyConditionExpression="pk = :p AND sk BETWEEN :lo AND :hi",
       FilterExpression="contains(ss, :y)", ScanIndexForward=False, Select="COUNT",
       ExpressionAttributeValues={":p": {"S": "a"}, ":lo": {"N": "2"}, ":hi": {"N": "8"}, ":y": {"S": "y"}})
    do("scan", TableName=TABLE, Limit=5)
    do("scan", TableName=TABLE, FilterExpression="attribute_exists(w)")
    do("batch_get_item", RequestItems={TABLE: {"Keys": [_key("a", 1), _key("b", 1), _key("nope", 0)]}})
    do("batch_write_item", RequestItems={TABLE: [{"PutRequest": {"Item": {**_key("c", i), "v": {"N": str(i)}}}}
                                                 for i in range(5)] + [{"DeleteRequest": {"Key": _key("a", 0)}}]})
    do("transact_write_items", TransactItems=[
        {"Put": {"TableName": TABLE, "Item": {**_key("t", 1), "v": {"N": "1"}},
                 "ConditionExpression": "attribute_not_exists(pk)"}},
        {"Update": {"TableName": TABLE, "Key": _key("c", 1), "UpdateExpression": "ADD v :one",
                    "ExpressionAttributeValues": {":one": {"N": "1"}}}},
        {"ConditionCheck": {"TableName": TABLE, "Key": _key("c", 2), "ConditionExpression": "v = :two",
                            "ExpressionAttributeValues": {":two": {"N": "2"}}}}])
    do("transact_write_items", TransactItems=[  # cancelled: the second condition fails
        {"Put": {"TableName": TABLE, "Item": {**_key("t", 2), "v": {"N": "1"}}}},
        {"Delete": {"TableName": TABLE, "Key": _key("c", 3), "ConditionExpression": "v = :nine",
                    "ExpressionAttributeValues": {":nine": {"N": "9"}},
                    "ReturnValuesOnConditionCheckFailure": "ALL_OLD"}}])
    do("transact_get_items", TransactItems=[{"Get": {"TableName": TABLE, "Key": _key("t", 1)}},
                                            {"Get": {"TableName": TABLE, "Key": _key("t", 2)}}])
    do("get_item", TableName=TABLE, Key={"pk": {"S": "a"}, "sk": {"N": 1}})  # the rules refuse an int
    do("get_item", TableName=TABLE, Key=_key("a", 1), Limit=3)  # botocore refuses an unknown parameter
    do("scan", TableName=TABLE)  # the state the script left
    return out


@pytest.fixture
def fresh(aws, _aws_snapshot):
    def reset():
        _restore(_aws_snapshot)
        _table(aws["dynamodb"])
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
    direct = _script(aws["dynamodb"])
    handled = {op for op, took in calls if took}
    assert handled == moto_direct.OPERATIONS, handled  # the script went through the transport
    calls.clear()
    monkeypatch.setenv("LAKEQ_MOTO_WIRE", "1")
    fresh()
    wire = _script(aws["dynamodb"])
    assert not [c for c in calls if c[1]]
    assert len(direct) == len(wire)
    for d, w in zip(direct, wire):
        assert d == w
    kinds = {k for _, k, _ in wire}
    assert kinds == {"ok", "ClientError", "ParamValidationError"}  # the script has each outcome
