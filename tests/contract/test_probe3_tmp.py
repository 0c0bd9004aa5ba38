import pytest

from infra.local import dynamo_memory
from tests.contract.test_memory_store_probes import DEFS, MAIN, _answer, k

B38 = "1234567890123456789012345678901234567"
PROBES = {
 "big_add": [("UpdateItem", {"TableName": MAIN, "Key": k("a", 1), "UpdateExpression": "ADD n :a", "ExpressionAttributeValues": {":a": {"N": B38 + "8"}}, "ReturnValues": "ALL_NEW"}),
   ("UpdateItem", {"TableName": MAIN, "Key": k("a", 1), "UpdateExpression": "ADD n :a", "ExpressionAttributeValues": {":a": {"N": "1"}}, "ReturnValues": "ALL_NEW"}),
   ("UpdateItem", {"TableName": MAIN, "Key": k("a", 2), "UpdateExpression": "SET d = :a", "ExpressionAttributeValues": {":a": {"N": "1234567890123456789012345678901.25"}}, "ReturnValues": "ALL_NEW"}),
   ("UpdateItem", {"TableName": MAIN, "Key": k("a", 2), "UpdateExpression": "SET d = d + :a", "ExpressionAttributeValues": {":a": {"N": "1.5"}}, "ReturnValues": "ALL_NEW"}),
   ("UpdateItem", {"TableName": MAIN, "Key": k("a", 2), "UpdateExpression": "ADD d :a", "ExpressionAttributeValues": {":a": {"N": "0.25"}}, "ReturnValues": "ALL_NEW"}),
   ("UpdateItem", {"TableName": MAIN, "Key": k("a", 3), "UpdateExpression": "ADD z :a", "ExpressionAttributeValues": {":a": {"N": "-0"}}, "ReturnValues": "ALL_NEW"}),
   ("UpdateItem", {"TableName": MAIN, "Key": k("a", 3), "UpdateExpression": "SET y = :a - :a", "ExpressionAttributeValues": {":a": {"N": "1.50"}}, "ReturnValues": "ALL_NEW"}),
   ("UpdateItem", {"TableName": MAIN, "Key": k("a", 3), "UpdateExpression": "SET e = :a + :b", "ExpressionAttributeValues": {":a": {"N": "1E+2"}, ":b": {"N": "1"}}, "ReturnValues": "ALL_NEW"})],
 "num_cmp": [("PutItem", {"TableName": MAIN, "Item": {**k("c", 1), "n": {"N": "1E+2"}, "m": {"N": B38 + "9"}}}),
   ("DeleteItem", {"TableName": MAIN, "Key": k("c", 1), "ConditionExpression": "n > :a AND n = :h AND m > :b", "ExpressionAttributeValues": {":a": {"N": "99"}, ":h": {"N": "100.0"}, ":b": {"N": B38 + "8"}}})],
 "esk_other": [*[("PutItem", {"TableName": MAIN, "Item": k("e", i)}) for i in range(3)],
   ("Query", {"TableName": MAIN, "KeyConditionExpression": "pk = :p", "ExpressionAttributeValues": {":p": {"S": "e"}}, "ExclusiveStartKey": k("zz", 1)}),
   ("Query", {"TableName": MAIN, "KeyConditionExpression": "pk = :p", "ExpressionAttributeValues": {":p": {"S": "e"}}, "ExclusiveStartKey": {"pk": {"S": "e"}}}),
   ("Query", {"TableName": MAIN, "KeyConditionExpression": "pk = :p", "ExpressionAttributeValues": {":p": {"S": "e"}}, "ExclusiveStartKey": {**k("e", 1), "x": {"S": "1"}}})],
 "batch_get_proj": [("PutItem", {"TableName": MAIN, "Item": {**k("f", 1), "a": {"S": "x"}, "b": {"S": "y"}}}),
   ("BatchGetItem", {"RequestItems": {MAIN: {"Keys": [k("f", 1)], "ProjectionExpression": "#a", "ExpressionAttributeNames": {"#a": "a"}}}}),
   ("TransactGetItems", {"TransactItems": [{"Get": {"TableName": MAIN, "Key": k("f", 1), "ProjectionExpression": "b"}}]}),
   ("GetItem", {"TableName": MAIN, "Key": k("f", 1), "AttributesToGet": ["a"]})],
 "cond_missing_item_ops": [("UpdateItem", {"TableName": MAIN, "Key": k("g", 1), "UpdateExpression": "SET a = :v", "ConditionExpression": "NOT attribute_exists(pk) AND (a <> :v OR size(a) = :z)", "ExpressionAttributeValues": {":v": {"S": "x"}, ":z": {"N": "0"}}, "ReturnValues": "UPDATED_NEW"}),
   ("UpdateItem", {"TableName": MAIN, "Key": k("g", 1), "UpdateExpression": "SET a = :v", "ConditionExpression": "a IN (:v, :w)", "ExpressionAttributeValues": {":v": {"S": "x"}, ":w": {"S": "y"}}, "ReturnValuesOnConditionCheckFailure": "ALL_OLD", "ReturnValues": "UPDATED_OLD"})],
 "update_key_missing": [("UpdateItem", {"TableName": MAIN, "Key": {"pk": {"S": "h"}}, "UpdateExpression": "SET a = :v", "ExpressionAttributeValues": {":v": {"S": "x"}}})],
 "put_extra_key_type": [("PutItem", {"TableName": MAIN, "Item": {"pk": {"S": "h"}, "sk": {"S": "1"}}})],
 "tx_dup_get": [("TransactGetItems", {"TransactItems": [{"Get": {"TableName": MAIN, "Key": k("a", 1)}}, {"Get": {"TableName": MAIN, "Key": k("a", 1)}}]})],
 "tx_cond_and_update_same": [("TransactWriteItems", {"TransactItems": [
     {"Update": {"TableName": MAIN, "Key": k("i", 1), "UpdateExpression": "ADD v :n", "ExpressionAttributeValues": {":n": {"N": "1"}}}},
     {"Update": {"TableName": MAIN, "Key": k("i", 2), "UpdateExpression": "ADD v :n", "ConditionExpression": "v = :n", "ExpressionAttributeValues": {":n": {"N": "1"}}, "ReturnValuesOnConditionCheckFailure": "ALL_OLD"}}]}),
   ("Scan", {"TableName": MAIN})],
 "list_append_missing": [("UpdateItem", {"TableName": MAIN, "Key": k("j", 1), "UpdateExpression": "SET l = list_append(l, :x)", "ExpressionAttributeValues": {":x": {"L": [{"N": "1"}]}}})],
 "set_nested_missing_map": [("UpdateItem", {"TableName": MAIN, "Key": k("j", 2), "UpdateExpression": "SET m.a.b = :x", "ExpressionAttributeValues": {":x": {"N": "1"}}})],
 "remove_index_oob": [("PutItem", {"TableName": MAIN, "Item": {**k("j", 3), "l": {"L": [{"N": "1"}]}}}),
   ("UpdateItem", {"TableName": MAIN, "Key": k("j", 3), "UpdateExpression": "REMOVE l[5], m.x", "ReturnValues": "ALL_NEW"})],
}


@pytest.mark.parametrize("name", sorted(PROBES))
def test_probe3(aws, name):
    ddb = aws["dynamodb"]
    for d in DEFS:
        ddb.create_table(**d)
    mem = dynamo_memory.MemoryDynamo()
    for d in DEFS:
        mem.create_table(d)
    diffs = []
    for op, params in PROBES[name]:
        try: a = _answer(ddb, op, params)
        except Exception as e: a = ("EXC", repr(e)[:200])
        dynamo_memory.use(mem)
        try:
            try: b = _answer(ddb, op, params)
            except Exception as e: b = ("EXC", repr(e)[:200])
        finally:
            dynamo_memory.use(None)
        if a != b:
            diffs.append(f"== {name} {op}\n moto: {str(a)[:600]}\n mem:  {str(b)[:600]}")
    print("\n".join(diffs))
    assert not diffs
