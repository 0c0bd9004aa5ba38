"""Hand-written calls where the memory store once answered differently from moto (issue 31 item 3
review): each runs on moto and on the memory store from empty tables, every answer equal.

Left out, moto being wrong against DynamoDB: ``size()`` of a number in a condition (moto raises a
Python ValueError, a 500; DynamoDB and the memory store: a ValidationException).
"""
import pytest
from infra.local import dynamo_memory
from tests.contract.test_memory_store_generated import DEFINITIONS, MAIN, INDEXED, _answer

HASH = "contract-hash"
DEFS = DEFINITIONS + [{"TableName": HASH, "BillingMode": "PAY_PER_REQUEST",
    "AttributeDefinitions": [{"AttributeName": "id", "AttributeType": "B"}],
    "KeySchema": [{"AttributeName": "id", "KeyType": "HASH"}]}]

def k(p, s): return {"pk": {"S": p}, "sk": {"N": str(s)}}

PROBES = {
 "oversize_put_failing_cond": [("PutItem", {"TableName": MAIN, "Item": {**k("a",1), "x": {"S": "y"*410000}},
      "ConditionExpression": "attribute_exists(pk)"})],
 "tx_validation": [("PutItem", {"TableName": MAIN, "Item": {**k("a",1), "s": {"S": "x"}}}),
    ("TransactWriteItems", {"TransactItems": [{"Update": {"TableName": MAIN, "Key": k("a",1), "UpdateExpression": "ADD s :n",
      "ExpressionAttributeValues": {":n": {"N": "1"}}}}]})],
 "empty_set": [("PutItem", {"TableName": MAIN, "Item": {**k("a",2), "ss": {"SS": []}}})],
 "empty_set_update": [("UpdateItem", {"TableName": MAIN, "Key": k("a",2), "UpdateExpression": "SET ss = :e",
      "ExpressionAttributeValues": {":e": {"SS": []}}})],
 "gsi_empty": [("PutItem", {"TableName": INDEXED, "Item": {"id": {"S": "i1"}, "g": {"S": ""}}})],
 "neg_zero": [("PutItem", {"TableName": MAIN, "Item": {**k("z",0), "n": {"N": "-0"}, "m": {"N": "1.50"}, "big": {"N": "123456789012345678901234567890123456789"}}}),
    ("GetItem", {"TableName": MAIN, "Key": k("z",0)})],
 "bad_number": [("PutItem", {"TableName": MAIN, "Item": {**k("z",1), "n": {"N": "abc"}}})],
 "key_neg_zero": [("PutItem", {"TableName": MAIN, "Item": {"pk": {"S": "q"}, "sk": {"N": "-0"}}}),
    ("GetItem", {"TableName": MAIN, "Key": {"pk": {"S": "q"}, "sk": {"N": "0"}}}),
    ("PutItem", {"TableName": MAIN, "Item": {"pk": {"S": "q"}, "sk": {"N": "1.0"}}}),
    ("Query", {"TableName": MAIN, "KeyConditionExpression": "pk = :p", "ExpressionAttributeValues": {":p": {"S": "q"}}})],
 "bin_key_str": [("PutItem", {"TableName": HASH, "Item": {"id": {"B": b"ab"}, "v": {"B": b"xyz"}}}),
    ("GetItem", {"TableName": HASH, "Key": {"id": {"B": "ab"}}}),
    ("GetItem", {"TableName": HASH, "Key": {"id": {"B": b"ab"}}, "ProjectionExpression": "v"}),
    ("DeleteItem", {"TableName": HASH, "Key": {"id": {"B": b"ab"}}, "ConditionExpression": "v = :v",
       "ExpressionAttributeValues": {":v": {"B": "xyz"}}})],
 "scan_deleted_start_hash": [*[("PutItem", {"TableName": HASH, "Item": {"id": {"B": bytes([i+1])}}}) for i in range(4)],
    ("Scan", {"TableName": HASH, "Limit": 2})],
 "batch_get_dup": [("BatchGetItem", {"RequestItems": {MAIN: {"Keys": [k("a",1), k("a",1)]}}})],
 "upd_empty_str_key_like": [("UpdateItem", {"TableName": MAIN, "Key": k("a",5), "UpdateExpression": "SET s = :e", "ExpressionAttributeValues": {":e": {"S": ""}}, "ReturnValues": "ALL_NEW"})],
 "tx_same_item_cond": [("TransactWriteItems", {"TransactItems": [
     {"ConditionCheck": {"TableName": MAIN, "Key": k("a",1), "ConditionExpression": "attribute_exists(pk)"}},
     {"Put": {"TableName": MAIN, "Item": k("a",1)}}]})],
 "tx_bad_path": [("PutItem", {"TableName": MAIN, "Item": {**k("a",7)}}),
    ("TransactWriteItems", {"TransactItems": [{"Update": {"TableName": MAIN, "Key": k("a",7), "UpdateExpression": "SET m.x = :n",
      "ExpressionAttributeValues": {":n": {"N": "1"}}}}, {"Put": {"TableName": MAIN, "Item": k("a",8), "ConditionExpression": "attribute_exists(pk)"}}]})],
 "scan_deleted_start": [*[("PutItem", {"TableName": HASH, "Item": {"id": {"B": bytes([i + 1])}}}) for i in range(4)],
    ("DeleteItem", {"TableName": HASH, "Key": {"id": {"B": b"\x02"}}}),
    ("Scan", {"TableName": HASH, "ExclusiveStartKey": {"id": {"B": b"\x02"}}})],
 "gsi_deleted_start": [*[("PutItem", {"TableName": INDEXED, "Item": {"id": {"S": f"d{i}"}, "g": {"S": "D"}}}) for i in range(4)],
    ("DeleteItem", {"TableName": INDEXED, "Key": {"id": {"S": "d1"}}}),
    ("Query", {"TableName": INDEXED, "IndexName": "g-keys", "KeyConditionExpression": "g = :g",
               "ExpressionAttributeValues": {":g": {"S": "D"}}, "ExclusiveStartKey": {"id": {"S": "d1"}, "g": {"S": "D"}}})],
 "cmp_types": [("PutItem", {"TableName": MAIN, "Item": {**k("a",10), "n": {"N": "5"}}}),
    ("DeleteItem", {"TableName": MAIN, "Key": k("a",10), "ConditionExpression": "n IN (:a, :b)", "ExpressionAttributeValues": {":a": {"S": "5"}, ":b": {"N": "5.0"}}})],
 "query_gsi_keys_proj": [("PutItem", {"TableName": INDEXED, "Item": {"id": {"S": "j1"}, "g": {"S": "G"}, "r": {"N": "1"}, "x": {"S": "1"}}}),
    ("Query", {"TableName": INDEXED, "IndexName": "g-keys", "KeyConditionExpression": "g = :g", "ProjectionExpression": "x, id", "ExpressionAttributeValues": {":g": {"S": "G"}}}),
    ("Query", {"TableName": INDEXED, "IndexName": "g-keys", "KeyConditionExpression": "g = :g", "Select": "ALL_ATTRIBUTES", "ExpressionAttributeValues": {":g": {"S": "G"}}})],
 "consistent_gsi": [("Query", {"TableName": INDEXED, "IndexName": "by-g", "ConsistentRead": True, "KeyConditionExpression": "g = :g", "ExpressionAttributeValues": {":g": {"S": "G"}}})],
 "set_index_beyond": [("PutItem", {"TableName": MAIN, "Item": {**k("a",11), "l": {"L": [{"N": "1"}]}}}),
    ("UpdateItem", {"TableName": MAIN, "Key": k("a",11), "UpdateExpression": "SET l[5] = :n, l[7] = :m", "ExpressionAttributeValues": {":n": {"N": "2"}, ":m": {"N": "3"}}, "ReturnValues": "ALL_NEW"})],
 "upd_creates_with_remove": [("UpdateItem", {"TableName": MAIN, "Key": k("a",12), "UpdateExpression": "REMOVE x", "ReturnValues": "ALL_NEW"})],
 "ns_dup": [("PutItem", {"TableName": MAIN, "Item": {**k("a",13), "ns": {"NS": ["1", "1.0"]}}})],
 "ss_dup": [("PutItem", {"TableName": MAIN, "Item": {**k("a",14), "ss": {"SS": ["a", "a"]}}})],
 "add_neg_zero": [("UpdateItem", {"TableName": MAIN, "Key": k("a",15), "UpdateExpression": "ADD n :a", "ExpressionAttributeValues": {":a": {"N": "1.50"}}, "ReturnValues": "ALL_NEW"}),
    ("UpdateItem", {"TableName": MAIN, "Key": k("a",15), "UpdateExpression": "SET n = n + :a", "ExpressionAttributeValues": {":a": {"N": "1E+2"}}, "ReturnValues": "ALL_NEW"}),
    ("UpdateItem", {"TableName": MAIN, "Key": k("a",15), "UpdateExpression": "SET n = n - :a", "ExpressionAttributeValues": {":a": {"N": "101.5"}}, "ReturnValues": "ALL_NEW"})],
}

@pytest.mark.parametrize("name", sorted(PROBES))
def test_probe_answers_as_moto(aws, name):
    ddb = aws["dynamodb"]
    diffs = []
    for calls in [PROBES[name]]:
        for d in DEFS:
            ddb.create_table(**d)
        mem = dynamo_memory.MemoryDynamo()
        for d in DEFS: mem.create_table(d)
        for op, params in calls:
            try: a = _answer(ddb, op, params)
            except Exception as e: a = ("EXC", repr(e)[:200])
            dynamo_memory.use(mem)
            try:
                try: b = _answer(ddb, op, params)
                except Exception as e: b = ("EXC", repr(e)[:200])
            finally:
                dynamo_memory.use(None)
            if a != b:
                diffs.append(f"== {name} {op}\n moto: {str(a)[:400]}\n mem:  {str(b)[:400]}")
    print("\n".join(diffs))
    assert not diffs


def test_a_caller_cannot_change_the_store_through_its_own_values():
    """The store keeps copies: a set, list or map handed to a put, or read back, and then mutated
    by the caller leaves the stored item as it was (as on the wire)."""
    mem = dynamo_memory.MemoryDynamo()
    for d in DEFS:
        mem.create_table(d)
    ss, ns, lst = ["a"], ["1"], [{"N": "1"}]
    item = {**k("c", 1), "ss": {"SS": ss}, "ns": {"NS": ns}, "l": {"L": lst}, "bs": {"BS": [b"x"]}}
    mem.call("PutItem", {"TableName": MAIN, "Item": item})
    ss.append("b"), ns.append("2"), lst.append({"N": "2"})
    got = mem.call("GetItem", {"TableName": MAIN, "Key": k("c", 1)})["Item"]
    assert got["ss"] == {"SS": ["a"]} and got["ns"] == {"NS": ["1"]} and got["l"] == {"L": [{"N": "1"}]}
    got["ss"]["SS"].append("z")
    got["l"]["L"].append({"N": "9"})
    again = mem.call("GetItem", {"TableName": MAIN, "Key": k("c", 1)})["Item"]
    assert again["ss"] == {"SS": ["a"]} and again["l"] == {"L": [{"N": "1"}]}
    vals = {":v": {"SS": ["q"]}}
    new = mem.call("UpdateItem", {"TableName": MAIN, "Key": k("c", 1), "UpdateExpression": "SET t = :v",
                                  "ExpressionAttributeValues": vals, "ReturnValues": "ALL_NEW"})["Attributes"]
    vals[":v"]["SS"].append("r")
    new["t"]["SS"].append("s")
    assert mem.call("GetItem", {"TableName": MAIN, "Key": k("c", 1)})["Item"]["t"] == {"SS": ["q"]}
