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


def _transactions(ddb, streams) -> list:
    """Transactions that commit and that moto cancels at every kind of step, on a range table and
    a hash-only table with streams; then both tables' items and stream records."""
    from botocore.exceptions import ClientError

    for name, keys in (("tx-range", [("pk", "S", "HASH"), ("sk", "N", "RANGE")]), ("tx-hash", [("id", "S", "HASH")])):
        ddb.create_table(TableName=name, BillingMode="PAY_PER_REQUEST",
                         AttributeDefinitions=[{"AttributeName": a, "AttributeType": t} for a, t, _ in keys],
                         KeySchema=[{"AttributeName": a, "KeyType": k} for a, _, k in keys],
                         StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"})

    def rk(pk, sk):
        return {"pk": {"S": pk}, "sk": {"N": str(sk)}}

    def hk(i):
        return {"id": {"S": i}}

    def put(t, item, **kw):
        return {"Put": {"TableName": t, "Item": item, **kw}}

    def upd(t, key, expr, values=None, **kw):
        return {"Update": {"TableName": t, "Key": key, "UpdateExpression": expr,
                           **({"ExpressionAttributeValues": values} if values else {}), **kw}}

    def arn(t):
        return ddb.describe_table(TableName=t)["Table"]["TableArn"]

    absent = {"ConditionExpression": "attribute_not_exists(pk)"}
    batches = [
        [put("tx-range", {**rk("a", 1), "n": {"N": "1"}}), put("tx-range", {**rk("a", 2), "l": {"L": [{"S": "x"}]}}),
         put("tx-hash", {**hk("h1"), "m": {"M": {"k": {"S": "v"}}}})],
        # a condition fails last: the put into a new partition, the update and the delete are undone
        [put("tx-range", {**rk("new", 1)}), upd("tx-range", rk("a", 1), "SET n = n + :one", {":one": {"N": "1"}}),
         {"Delete": {"TableName": "tx-hash", "Key": hk("h1")}}, put("tx-range", {**rk("a", 2)}, **absent)],
        # the same, the failing condition first (moto goes on with the others, then undoes them)
        [put("tx-range", {**rk("a", 1)}, **absent), upd("tx-range", rk("a", 2), "SET l = list_append(l, :m)",
                                                         {":m": {"L": [{"S": "y"}]}}),
         put("tx-hash", {**hk("h2")})],
        # ALL_OLD on a failed condition
        [upd("tx-range", rk("a", 1), "SET n = :z", {":z": {"N": "0"}}, ConditionExpression="n > :big",
             ExpressionAttributeValues={":z": {"N": "0"}, ":big": {"N": "5"}},
             ReturnValuesOnConditionCheckFailure="ALL_OLD"), put("tx-hash", {**hk("h3")})],
        # an update moto rejects as invalid, after a put
        [put("tx-hash", {**hk("h4")}), upd("tx-range", rk("a", 1), "SET n = n + :s", {":s": {"S": "text"}})],
        # twice the same item
        [put("tx-hash", {**hk("h5")}), upd("tx-hash", hk("h5"), "SET q = :one", {":one": {"N": "1"}})],
        # a malformed key
        [put("tx-hash", {**hk("h6")}), put("tx-range", {"pk": {"S": "nosk"}})],
        # the table named by its ARN too: moto restores the whole table it backed up by name,
        # the item written through the ARN included
        [put("tx-range", {**rk("b", 1)}), put(arn("tx-range"), {**rk("by-arn", 1)}),
         put("tx-range", {**rk("a", 1)}, **absent)],
        # an item with two operations: moto refuses it with no rollback (the put before it stays)
        [put("tx-hash", {**hk("h8")}),
         {**put("tx-hash", {**hk("h9")}), "Delete": {"TableName": "tx-hash", "Key": hk("h1")}}],
        # one item by two spellings of its number key (moto's unicity check compares the text),
        # then a failed condition: both writes undone
        [put("tx-range", {"pk": {"S": "a"}, "sk": {"N": "1.0"}, "n": {"N": "9"}}),
         upd("tx-range", rk("a", 1), "SET z = :one", {":one": {"N": "1"}}), put("tx-range", {**rk("a", 2)}, **absent)],
        # a key of the wrong type after a put
        [put("tx-hash", {**hk("h10")}), put("tx-hash", {"id": {"N": "1"}})],
        # commits: updates, a delete of a partition's last item, a condition check
        [upd("tx-range", rk("a", 1), "SET n = n + :one", {":one": {"N": "1"}}),
         {"Delete": {"TableName": "tx-range", "Key": rk("a", 2)}},
         {"ConditionCheck": {"TableName": "tx-hash", "Key": hk("h1"), "ConditionExpression": "attribute_exists(id)"}}],
    ]
    out = []
    for b in batches:
        try:
            r = ddb.transact_write_items(TransactItems=b)
            out.append(("ok", {k: v for k, v in r.items() if k != "ResponseMetadata"}))
        except ClientError as e:
            out.append(("ClientError", e.response["Error"], e.response.get("CancellationReasons")))
    for name in ("tx-range", "tx-hash"):
        out.append(("items", sorted(map(repr, ddb.scan(TableName=name)["Items"]))))
        arn = ddb.describe_table(TableName=name)["Table"]["LatestStreamArn"]
        shard = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"][0]["ShardId"]
        it = streams.get_shard_iterator(StreamArn=arn, ShardId=shard, ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
        records = streams.get_records(ShardIterator=it)["Records"]
        out.append(("stream", [(x["eventName"], x["dynamodb"].get("Keys"), x["dynamodb"].get("NewImage"),
                                x["dynamodb"].get("OldImage"), x["dynamodb"]["SequenceNumber"]) for x in records]))
    return out


def test_moto_speed_transactions_roll_back_as_moto_does(aws, _aws_snapshot):
    """moto_speed's journalled TransactWriteItems (no whole-table copy) answers as moto's own:
    every answer, error and cancellation reason, both tables' items and their stream records
    after transactions that commit and that are cancelled at every kind of step."""
    assert moto_speed.installed()
    try:
        _restore(_aws_snapshot)
        fast = _transactions(aws["dynamodb"], aws["dynamodbstreams"])
        moto_speed.uninstall()
        _restore(_aws_snapshot)
        plain = _transactions(aws["dynamodb"], aws["dynamodbstreams"])
    finally:
        moto_speed.install()
    assert fast == plain
    kinds = [x[0] for x in plain]
    assert kinds.count("ok") == 2 and kinds.count("ClientError") == 10, kinds
    # the commits' stream records only, in both; and the put before the two-operation item, which
    # moto keeps (moto_direct then runs the refused call again down the wire: INSERT + MODIFY)
    assert [len(plain[i][1]) for i in (-3, -1)] == [4, 3]
