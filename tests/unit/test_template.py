"""infra.local.template: CloudFormation short tags, intrinsic resolution, functions/env from template.yaml."""
from __future__ import annotations

import hashlib

import pytest

from infra.local import template as T

SMALL = """
Parameters:
  Stage: {Type: String, Default: dev}
  Secret: {Type: String, NoEcho: true}
Conditions:
  IsDev: !Equals [!Ref Stage, dev]
Globals:
  Function:
    Timeout: 9
    Environment:
      Variables:
        A: !Ref Stage
        B: global
Resources:
  T1:
    Type: AWS::DynamoDB::Table
    Properties:
      TableName: !Sub "${AWS::StackName}-t1"
      BillingMode: PAY_PER_REQUEST
      AttributeDefinitions: [{AttributeName: k, AttributeType: S}]
      KeySchema: [{AttributeName: k, KeyType: HASH}]
      StreamSpecification: {StreamViewType: NEW_IMAGE}
  Unnamed:
    Type: AWS::DynamoDB::Table
    Properties:
      AttributeDefinitions: [{AttributeName: k, AttributeType: S}]
      KeySchema: [{AttributeName: k, KeyType: HASH}]
  Bucket:
    Type: AWS::S3::Bucket
  Fn:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: fn/
      Handler: app.handler
      Environment:
        Variables:
          B: own
          C: !GetAtt T1.Arn
          D: !Join ["-", [!Ref Bucket, !Select [1, [x, y]]]]
          E: !If [IsDev, yes-dev, no-dev]
          F: !Sub ["${X}/${!Literal}/${T1.StreamArn}", {X: !Ref Secret}]
          G: !Sub "${AWS::Region}:${AWS::AccountId}:${AWS::Partition}"
      Events:
        Get:
          Type: HttpApi
          Properties: {Path: "/v1/things/{id}", Method: get}
        Stream:
          Type: DynamoDB
          Properties:
            Stream: !GetAtt T1.StreamArn
            StartingPosition: TRIM_HORIZON
            BatchSize: 10
            MaximumBatchingWindowInSeconds: 2
            FunctionResponseTypes: [ReportBatchItemFailures]
"""


def test_short_tags_become_long_form():
    doc = T.loads(
        "a: !Ref X\nb: !GetAtt T.Arn\nc: !Sub 'x${y}'\nd: !Join ['', [a, !Ref B]]\n"
        "e: !If [C, 1, 2]\nf: !GetAtt [T, StreamArn]\ng: !Condition C\nh: !Base64 hi\n"
    )
    assert doc["a"] == {"Ref": "X"}
    assert doc["b"] == {"Fn::GetAtt": ["T", "Arn"]}
    assert doc["c"] == {"Fn::Sub": "x${y}"}
    assert doc["d"] == {"Fn::Join": ["", ["a", {"Ref": "B"}]]}
    assert doc["e"] == {"Fn::If": ["C", 1, 2]}
    assert doc["f"] == {"Fn::GetAtt": ["T", "StreamArn"]}
    assert doc["g"] == {"Condition": "C"}
    assert doc["h"] == {"Fn::Base64": "hi"}


def test_resolution_of_small_template(tmp_path):
    (tmp_path / "template.yaml").write_text(SMALL)
    tpl = T.load_template(tmp_path / "template.yaml")
    ctx = T.make_context(tpl, "stk", {"Secret": "s3cr3t"})
    assert T.resolve({"Ref": "AWS::StackName"}, ctx) == "stk"
    assert T.resolve({"Ref": "T1"}, ctx) == "stk-t1"
    assert T.resolve({"Ref": "Unnamed"}, ctx) == "stk-Unnamed"
    assert T.resolve({"Ref": "Bucket"}, ctx) == "stk-bucket"
    assert T.resolve({"Fn::Sub": "${Stage}!"}, ctx) == "dev!"
    assert T.resolve([1, {"Ref": "AWS::NoValue"}, 2], ctx) == [1, 2]
    with pytest.raises(KeyError):
        T.resolve({"Ref": "Nope"}, ctx)

    [fn] = T.functions(ctx)
    assert fn.logical_id == "Fn"
    assert fn.code_uri == (tmp_path / "fn").resolve()
    assert fn.handler == "app.handler"
    assert fn.timeout == 9
    assert fn.http_routes == [("GET", "/v1/things/{id}")]
    [ev] = fn.stream_events
    assert ev.table == "T1"
    assert (ev.batch_size, ev.batching_window_s, ev.starting_position) == (10, 2.0, "TRIM_HORIZON")
    assert ev.function_response_types == ("ReportBatchItemFailures",)
    env = fn.environment
    assert env["A"] == "dev" and env["B"] == "own"
    assert env["C"] == "arn:aws:dynamodb:us-east-1:123456789012:table/stk-t1"
    assert env["D"] == "stk-bucket-y"
    assert env["E"] == "yes-dev"
    assert env["F"].startswith("s3cr3t/${Literal}/arn:aws:dynamodb:us-east-1:123456789012:table/stk-t1/stream/")
    assert env["G"] == "us-east-1:123456789012:aws"

    defs = T.table_definitions(ctx)
    assert defs["T1"]["StreamSpecification"] == {"StreamEnabled": True, "StreamViewType": "NEW_IMAGE"}
    assert "ProvisionedThroughput" in defs["Unnamed"]  # default billing mode is PROVISIONED


def test_repo_template_functions_and_routes(template):
    specs = {f.logical_id: f for f in T.functions(template)}
    assert set(specs) >= {"AdminFunction", "ProduceFunction", "ConsumeFunction"}
    routes = {(m, p): lid for lid, f in specs.items() for m, p in f.http_routes}
    assert routes[("GET", "/v1/health")] == "AdminFunction"
    assert routes[("GET", "/v1/openapi.yaml")] == "AdminFunction"
    assert routes[("POST", "/v1/topics")] == "AdminFunction"
    assert routes[("GET", "/v1/topics")] == "AdminFunction"
    assert routes[("POST", "/v1/clients")] == "AdminFunction"
    assert routes[("PUT", "/v1/groups/{group}/offsets")] == "AdminFunction"
    assert routes[("POST", "/v1/topics/{topic}/messages")] == "ProduceFunction"
    assert routes[("GET", "/v1/topics/{topic}/messages")] == "ConsumeFunction"
    assert routes[("POST", "/v1/acks")] == "ConsumeFunction"
    assert routes[("POST", "/v1/visibility")] == "ConsumeFunction"
    assert routes[("GET", "/v1/groups/{group}/offsets")] == "ConsumeFunction"
    for f in specs.values():
        assert f.handler == "app.lambda_handler"
        assert f.code_uri == (T.REPO_ROOT / "functions" / f.logical_id[: -len("Function")].lower())
        assert f.memory_size >= 512
        if f.http_routes:  # API Gateway gives up on an integration after 30 s
            assert f.timeout == 30


def test_repo_template_environment(template, monkeypatch):
    monkeypatch.setenv("LAKEQ_ADMIN_KEY", "k1")
    env = T.environment(template, "lakeq-local")
    assert env == {
        "TOPICS_TABLE": "lakeq-local-topics",
        "CLIENTS_TABLE": "lakeq-local-clients",
        "KEYS_TABLE": "lakeq-local-keys",
        "QUEUES_TABLE": "lakeq-local-queues",
        "SEGMENTS_TABLE": "lakeq-local-segments",
        "DEDUP_TABLE": "lakeq-local-dedup",
        "OFFSETS_TABLE": "lakeq-local-offsets",
        "LAKE_BUCKET": "lakeq-local-lakebucket",
        "LAKEQ_BROKER": "lakeq-local",
        "LAKEQ_ADMIN_KEY_SHA256": hashlib.sha256(b"k1").hexdigest(),
        "POWERTOOLS_SERVICE_NAME": "lakeq-local",
        "POWERTOOLS_METRICS_NAMESPACE": "lakeq/lakeq-local",
    } | {k: v for k, v in env.items() if k not in {
        "TOPICS_TABLE", "CLIENTS_TABLE", "KEYS_TABLE", "QUEUES_TABLE", "SEGMENTS_TABLE",
        "DEDUP_TABLE", "OFFSETS_TABLE", "LAKE_BUCKET", "LAKEQ_BROKER", "LAKEQ_ADMIN_KEY_SHA256",
        "POWERTOOLS_SERVICE_NAME", "POWERTOOLS_METRICS_NAMESPACE"}}
    explicit = T.environment(template, "other", {"AdminKeySha256": "ab" * 32})
    assert explicit["LAKEQ_ADMIN_KEY_SHA256"] == "ab" * 32
    assert explicit["TOPICS_TABLE"] == "other-topics"
    # another stack, another namespace and service: two stacks in one account never share a metric
    assert (explicit["POWERTOOLS_METRICS_NAMESPACE"], explicit["POWERTOOLS_SERVICE_NAME"]) == ("lakeq/other", "other")


def test_conftest_set_the_environment_from_the_template():
    import os

    assert os.environ["TOPICS_TABLE"] == "lakeq-local-topics"
    assert os.environ["LAKEQ_BROKER"] == "lakeq-local"
    assert len(os.environ["LAKEQ_ADMIN_KEY_SHA256"]) == 64


def test_admin_key_parameter_pattern(template):
    import re

    decl = template["Parameters"]["AdminKeySha256"]
    assert decl["NoEcho"] is True
    assert re.fullmatch(decl["AllowedPattern"], hashlib.sha256(b"x").hexdigest())
    assert not re.fullmatch(decl["AllowedPattern"], "ABC")


def test_stream_event_sources_bound_retries_and_park_failures(template):
    """Issue 8, defect 6: every DynamoDB stream event of the stream consumers gives up on a poison
    batch (bisection, bounded retries and record age, partial batch responses) and keeps its
    metadata in an encrypted on-failure queue the function's role may send to, and only that."""
    res = template["Resources"]
    queue = res["StreamFailureQueue"]
    assert queue["Type"] == "AWS::SQS::Queue"
    assert queue["Properties"]["SqsManagedSseEnabled"] is True
    specs = {f.logical_id: f for f in T.functions(template)}
    seen = 0
    for lid in ("FanoutFunction", "ArchiverFunction"):
        events = res[lid]["Properties"]["Events"]
        for name, ev in events.items():
            if ev["Type"] != "DynamoDB":
                continue
            seen += 1
            p = ev["Properties"]
            assert p["BisectBatchOnFunctionError"] is True, (lid, name)
            assert 0 <= p["MaximumRetryAttempts"] <= 100, (lid, name)
            assert 60 <= p["MaximumRecordAgeInSeconds"] <= 86400, (lid, name)  # within the stream's 24 h
            assert p["FunctionResponseTypes"] == ["ReportBatchItemFailures"], (lid, name)
            assert p["DestinationConfig"]["OnFailure"]["Destination"] == {"Fn::GetAtt": ["StreamFailureQueue", "Arn"]}
        sends = [s for pol in res[lid]["Properties"]["Policies"] if isinstance(pol, dict)
                 for s in (pol.get("Statement") or []) if "sqs:SendMessage" in s["Action"]]
        assert sends == [{"Effect": "Allow", "Action": ["sqs:SendMessage"],
                          "Resource": {"Fn::GetAtt": ["StreamFailureQueue", "Arn"]}}], lid
        # the local stream pump reads the same settings
        for ev in specs[lid].stream_events:
            assert ev.bisect_on_error and ev.maximum_retry_attempts == 10
            assert ev.maximum_record_age_s == 21600
            assert ev.on_failure == "arn:aws:sqs:us-east-1:123456789012:lakeq-local-stream-failures"
            assert ev.function_response_types == ("ReportBatchItemFailures",)
    assert seen == 4  # fan-out: segments; archiver: segments, offsets, groups


def test_queues_from_the_template(template):
    assert T.queue_names(template) == {"StreamFailureQueue": "lakeq-local-stream-failures"}
