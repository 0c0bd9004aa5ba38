"""Scripts of DynamoDB data-plane calls whose every answer and error two transports or stores
must give alike: :func:`script` (every operation: blobs, numbers, sets, nested maps, conditions that
pass and fail, pagination, transactions that commit and cancel, consumed capacity, a parameter
botocore rejects) and :func:`updates` (UpdateExpressions of every kind, and each validation error).
Used by tests/integration/test_moto_direct.py (moto through the direct transport vs the wire, moto's
walk vs moto_speed's) and tests/contract/ (the memory store vs moto).
"""
from __future__ import annotations

from botocore.exceptions import ClientError, ParamValidationError

TABLE = "direct-contract"


def twin_tables(ddb, definitions):
    """The CreateTable ``definitions`` made on moto (``ddb``) and a memory store holding the same
    tables, empty: the two sides a contract test compares."""
    from infra.local import dynamo_memory

    for d in definitions:
        ddb.create_table(**d)
    return dynamo_memory.MemoryDynamo(definitions)


def make_table(ddb) -> None:
    ddb.create_table(TableName=TABLE, BillingMode="PAY_PER_REQUEST",
                     AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"},
                                           {"AttributeName": "sk", "AttributeType": "N"}],
                     KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"},
                                {"AttributeName": "sk", "KeyType": "RANGE"}])


def key(pk: str, sk: int) -> dict:
    return {"pk": {"S": pk}, "sk": {"N": str(sk)}}


def script(ddb) -> list:
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
        item = {**key("a", i), "blob": {"B": bytes([i, 0, 255]) * 3}, "n": {"N": f"{i}.50"},
                "s": {"S": f"é{i}"}, "l": {"L": [{"N": "1"}, {"S": "x"}, {"NULL": True}]},
                "m": {"M": {"B": {"S": "a map key named B"}, "in": {"BOOL": i % 2 == 0}}},
                "ss": {"SS": ["x", "y"]}, "bs": {"BS": [b"\x00", b"\x01\x02"]}}
        do("put_item", TableName=TABLE, Item=item)
    do("put_item", TableName=TABLE, Item={**key("b", 1), "v": {"N": "1"}}, ReturnConsumedCapacity="TOTAL")
    do("put_item", TableName=TABLE, Item={**key("b", 1), "v": {"N": "2"}},
       ConditionExpression="attribute_not_exists(pk)")
    do("put_item", TableName=TABLE, Item={**key("b", 1), "v": {"N": "3"}}, ReturnValues="ALL_OLD")
    do("get_item", TableName=TABLE, Key=key("a", 3))
    do("get_item", TableName=TABLE, Key=key("zz", 3))
    do("get_item", TableName=TABLE, Key=key("a", 4), ProjectionExpression="#b, m.#in",
       ExpressionAttributeNames={"#b": "blob", "#in": "in"}, ConsistentRead=True)
    for rv in ("NONE", "ALL_NEW", "UPDATED_OLD", "UPDATED_NEW", "ALL_OLD"):
        do("update_item", TableName=TABLE, Key=key("b", 1), UpdateExpression="ADD v :one SET w = :b",
           ExpressionAttributeValues={":one": {"N": "1"}, ":b": {"B": b"\xfe"}}, ReturnValues=rv)
    do("update_item", TableName=TABLE, Key=key("b", 1), UpdateExpression="SET v = :x",
       ConditionExpression="v = :old", ExpressionAttributeValues={":x": {"N": "0"}, ":old": {"N": "-1"}})
    do("update_item", TableName=TABLE, Key=key("b", 1), UpdateExpression="SET v = :x",
       ConditionExpression="v = :old", ExpressionAttributeValues={":x": {"N": "0"}, ":old": {"N": "-1"}},
       ReturnValuesOnConditionCheckFailure="ALL_OLD")
    do("update_item", TableName=TABLE, Key=key("b", 2), UpdateExpression="SET v = :x",
       ExpressionAttributeValues={":x": {"N": "7"}, ":unused": {"N": "1"}})  # a validation error
    do("delete_item", TableName=TABLE, Key=key("a", 11), ReturnValues="ALL_OLD")
    do("delete_item", TableName=TABLE, Key=key("a", 10), ConditionExpression="attribute_exists(nope)")
    do("delete_item", TableName="no-such-table", Key=key("a", 1))
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
    do("batch_get_item", RequestItems={TABLE: {"Keys": [key("a", 1), key("b", 1), key("nope", 0)]}})
    do("batch_write_item", RequestItems={TABLE: [{"PutRequest": {"Item": {**key("c", i), "v": {"N": str(i)}}}}
                                                 for i in range(5)] + [{"DeleteRequest": {"Key": key("a", 0)}}]})
    do("transact_write_items", TransactItems=[
        {"Put": {"TableName": TABLE, "Item": {**key("t", 1), "v": {"N": "1"}},
                 "ConditionExpression": "attribute_not_exists(pk)"}},
        {"Update": {"TableName": TABLE, "Key": key("c", 1), "UpdateExpression": "ADD v :one",
                    "ExpressionAttributeValues": {":one": {"N": "1"}}}},
        {"ConditionCheck": {"TableName": TABLE, "Key": key("c", 2), "ConditionExpression": "v = :two",
                            "ExpressionAttributeValues": {":two": {"N": "2"}}}}])
    do("transact_write_items", TransactItems=[  # cancelled: the second condition fails
        {"Put": {"TableName": TABLE, "Item": {**key("t", 2), "v": {"N": "1"}}}},
        {"Delete": {"TableName": TABLE, "Key": key("c", 3), "ConditionExpression": "v = :nine",
                    "ExpressionAttributeValues": {":nine": {"N": "9"}},
                    "ReturnValuesOnConditionCheckFailure": "ALL_OLD"}}])
    do("transact_get_items", TransactItems=[{"Get": {"TableName": TABLE, "Key": key("t", 1)}},
                                            {"Get": {"TableName": TABLE, "Key": key("t", 2)}}])
    do("get_item", TableName=TABLE, Key={"pk": {"S": "a"}, "sk": {"N": 1}})  # the rules refuse an int
    do("get_item", TableName=TABLE, Key=key("a", 1), Limit=3)  # botocore refuses an unknown parameter
    do("scan", TableName=TABLE)  # the state the script left
    return out


def updates(ddb) -> list:
    """UpdateExpressions of every kind moto's walk processes, and each of its validation errors."""
    out: list = []
    k = key("u", 1)

    def up(expr: str, values: dict | None = None, names: dict | None = None, **kw):
        p = {"TableName": TABLE, "Key": k, "UpdateExpression": expr, "ReturnValues": "ALL_NEW", **kw}
        if values:
            p["ExpressionAttributeValues"] = values
        if names:
            p["ExpressionAttributeNames"] = names
        try:
            r = ddb.update_item(**p)
            r.pop("ResponseMetadata", None)
            out.append(("ok", r))
        except ClientError as e:
            out.append(("ClientError", {k: v for k, v in e.response.items() if k != "ResponseMetadata"}))

    n = {"N": "1"}
    up("SET a = :n, b = :l, m = :m, #s = :s", {":n": n, ":l": {"L": [n]}, ":m": {"M": {"x": n}}, ":s": {"S": "v"}},
       {"#s": "status"})
    up("SET b = list_append(b, :l), c = if_not_exists(c, :n), a = a + :n, m.x = m.x - :n, m.y = :n",
       {":l": {"L": [{"S": "t"}]}, ":n": n})
    up("SET b[0] = :n, c = if_not_exists(c, :z) REMOVE m.y, #s ADD d :n, ss :ss",
       {":n": {"N": "5"}, ":z": {"N": "0"}, ":ss": {"SS": ["p", "q"]}}, {"#s": "status"})
    up("DELETE ss :ss SET e = list_append(:l, if_not_exists(e, :l))", {":ss": {"SS": ["p"]}, ":l": {"L": [n]}})
    up("SET a = a + :n, a = :n", {":n": n})  # the same path twice
    up("SET m.x = :n REMOVE m", {":n": n})  # overlapping paths
    up("SET nope.x = :n", {":n": n})  # a path that does not exist
    up("SET a = b + :n", {":n": n})  # a type mismatch
    up("SET pk = :s", {":s": {"S": "w"}})  # the key
    up("SET a = :n SET b = :n", {":n": n})  # two SET clauses
    up("ADD a :n, a :n", {":n": n})
    up("SET a = :missing", {":n": n})
    up("SET m.#e = :n", {":n": n}, {"#e": ""})  # an empty attribute name
    up("SET f = :e", {":e": {"S": ""}})
    up("SET g = size(b)", {})  # no such function in an update
    up("SET a = :n", {":n": {"N": "9"}, ":z": {"N": "100"}}, ConditionExpression="a > :z")
    out.append(("item", ddb.get_item(TableName=TABLE, Key=k, ConsistentRead=True).get("Item")))
    return out
