"""Tables and bucket created on moto from template.yaml carry the template's schema."""
from __future__ import annotations

import pytest

from infra.local import template as T


def _keys(desc):
    return {k["AttributeName"]: k["KeyType"] for k in desc["KeySchema"]}


def test_tables_match_template(aws, template):
    ddb = aws["dynamodb"]
    defs = T.table_definitions(template, "lakeq-local")
    assert set(ddb.list_tables()["TableNames"]) == {d["TableName"] for d in defs.values()}
    for lid, kw in defs.items():
        desc = ddb.describe_table(TableName=kw["TableName"])["Table"]
        props = template["Resources"][lid]["Properties"]
        assert _keys(desc) == {k["AttributeName"]: k["KeyType"] for k in props["KeySchema"]}
        assert {a["AttributeName"]: a["AttributeType"] for a in desc["AttributeDefinitions"]} == {
            a["AttributeName"]: a["AttributeType"] for a in props["AttributeDefinitions"]
        }
        assert desc["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"
        spec = props.get("StreamSpecification")
        if spec:
            assert desc["StreamSpecification"] == {
                "StreamEnabled": True, "StreamViewType": spec["StreamViewType"]}
            assert desc["LatestStreamArn"].startswith(desc["TableArn"] + "/stream/")
        else:
            assert not desc.get("StreamSpecification", {}).get("StreamEnabled")
        ttl = ddb.describe_time_to_live(TableName=kw["TableName"])["TimeToLiveDescription"]
        if "TimeToLiveSpecification" in props:
            assert ttl["TimeToLiveStatus"] == "ENABLED"
            assert ttl["AttributeName"] == props["TimeToLiveSpecification"]["AttributeName"]
        else:
            assert ttl["TimeToLiveStatus"] == "DISABLED"


def test_design_keys(aws):
    ddb = aws["dynamodb"]
    expect = {
        "lakeq-local-topics": {"name": "HASH"},
        "lakeq-local-clients": {"name": "HASH"},
        "lakeq-local-keys": {"key_hash": "HASH"},
        "lakeq-local-queues": {"pq": "HASH"},  # "<topic>#<queue>": one partition per queue
        "lakeq-local-segments": {"pq": "HASH", "base": "RANGE"},
        "lakeq-local-dedup": {"topic": "HASH", "id": "RANGE"},
        "lakeq-local-offsets": {"owner": "HASH", "queue": "RANGE"},
        "lakeq-local-groups": {"group": "HASH"},
    }
    for name, keys in expect.items():
        assert _keys(ddb.describe_table(TableName=name)["Table"]) == keys
    views = {
        n: ddb.describe_table(TableName=n)["Table"].get("StreamSpecification", {}).get("StreamViewType")
        for n in expect
    }
    assert views["lakeq-local-segments"] == "NEW_IMAGE"
    assert views["lakeq-local-offsets"] == "NEW_AND_OLD_IMAGES"


@pytest.mark.moto  # reads DynamoDB Streams
def test_create_is_idempotent_and_fills_stream_arns(aws, template):
    ctx = T.make_context(template, "lakeq-local")
    names = T.create_tables(aws["dynamodb"], ctx)
    T.create_tables(aws["dynamodb"], ctx)
    T.create_buckets(aws["s3"], ctx)
    assert names["SegmentsTable"] == "lakeq-local-segments"
    real = aws["dynamodb"].describe_table(TableName="lakeq-local-segments")["Table"]["LatestStreamArn"]
    assert T.resolve({"Fn::GetAtt": ["SegmentsTable", "StreamArn"]}, ctx) == real
    streams = aws["dynamodbstreams"].describe_stream(StreamArn=real)["StreamDescription"]
    assert streams["StreamViewType"] == "NEW_IMAGE"


def test_bucket_exists(aws):
    import os

    assert os.environ["LAKE_BUCKET"] == "lakeq-local-lakebucket"
    names = [b["Name"] for b in aws["s3"].list_buckets()["Buckets"]]
    assert names == ["lakeq-local-lakebucket"]
