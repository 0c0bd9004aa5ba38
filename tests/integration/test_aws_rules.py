"""infra/local/aws_rules.py: what AWS enforces and moto does not, shown to fire.

IAM from template.yaml (SAM policy templates expanded by samtranslator itself), DynamoDB's item,
transaction, batch and page limits, Lambda's and API Gateway's payload limits — in-process (the
``aws`` fixture), in the local gateway, the streams pump, and in the local stack's worker processes.
"""
from __future__ import annotations

import json
import textwrap

import pytest
from botocore.exceptions import ClientError
from werkzeug.test import Client

from infra.local import aws_rules as ar
from infra.local import interceptor
from infra.local import template as tpl
from infra.local.interceptor import Call

ACCOUNT, REGION = "123456789012", "us-east-1"
SEGMENTS = "lakeq-local-segments"
TOPICS = "lakeq-local-topics"
SUBSCRIPTIONS = "lakeq-local-subscriptions"
BUCKET = "lakeq-local-lakebucket"


def table_arn(name: str) -> str:
    return f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{name}"


def error(exc_info) -> tuple[str, str]:
    e = exc_info.value
    while not isinstance(e, ClientError) and getattr(e, "cause", None) is not None:
        e = e.cause
    assert isinstance(e, ClientError), exc_info.value
    return e.response["Error"]["Code"], e.response["Error"]["Message"]


# ------------------------------------------------------------------------------------------ IAM


def test_denied_action_fails_like_aws_before_reaching_the_store(aws):
    ddb = aws["dynamodb"]
    ddb.put_item(TableName=TOPICS, Item={"name": {"S": "quotes"}})  # set-up: not IAM-checked
    with interceptor.acting_as("ProduceFunction"):  # DynamoDBReadPolicy on TopicsTable only
        assert ddb.get_item(TableName=TOPICS, Key={"name": {"S": "quotes"}})["Item"]
        with pytest.raises(ClientError) as e:
            ddb.delete_item(TableName=TOPICS, Key={"name": {"S": "quotes"}})
    assert error(e) == (
        "AccessDeniedException",
        "User: arn:aws:sts::123456789012:assumed-role/lakeq-local-ProduceFunctionRole/"
        "lakeq-local-ProduceFunction is not authorized to perform: dynamodb:DeleteItem on resource: "
        f"{table_arn(TOPICS)} because no identity-based policy allows the dynamodb:DeleteItem action")
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert "Item" in ddb.get_item(TableName=TOPICS, Key={"name": {"S": "quotes"}})  # nothing happened


def test_denied_resource_dynamodb_transaction_item_and_s3_object(aws):
    ddb, s3 = aws["dynamodb"], aws["s3"]
    # ConsumeFunction may update OffsetsTable but only read TopicsTable: a transaction is authorised
    # item by item, each on its own table
    items = [{"Update": {"TableName": "lakeq-local-offsets",
                         "Key": {"owner": {"S": "g"}, "queue": {"N": "0"}},
                         "UpdateExpression": "SET c = :c", "ExpressionAttributeValues": {":c": {"N": "1"}}}},
             {"Put": {"TableName": TOPICS, "Item": {"name": {"S": "x"}}}}]
    with interceptor.acting_as("ConsumeFunction"), pytest.raises(ClientError) as e:
        ddb.transact_write_items(TransactItems=items)
    code, msg = error(e)
    assert code == "AccessDeniedException" and f"dynamodb:PutItem on resource: {table_arn(TOPICS)}" in msg
    assert "Item" not in ddb.get_item(TableName="lakeq-local-offsets",
                                      Key={"owner": {"S": "g"}, "queue": {"N": "0"}})
    # ArchiverFunction: s3:PutObject on raw/* only
    with interceptor.acting_as("ArchiverFunction"):
        s3.put_object(Bucket=BUCKET, Key="raw/kind=x/a.jsonl.gz", Body=b"x")
        with pytest.raises(ClientError) as e:
            s3.put_object(Bucket=BUCKET, Key="reports/backlog/a.json", Body=b"x")
    code, msg = error(e)
    assert code == "AccessDenied" and e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    assert msg == ("User: arn:aws:sts::123456789012:assumed-role/lakeq-local-ArchiverFunctionRole/"
                   "lakeq-local-ArchiverFunction is not authorized to perform: s3:PutObject on resource: "
                   f"\"arn:aws:s3:::{BUCKET}/reports/backlog/a.json\" because no identity-based policy "
                   "allows the s3:PutObject action")
    # ReportsFunction: s3:ListBucket only with the s3:prefix condition reports/backlog/*
    with interceptor.acting_as("ReportsFunction"):
        s3.list_objects_v2(Bucket=BUCKET, Prefix="reports/backlog/2026/")
        with pytest.raises(ClientError) as e:
            s3.list_objects_v2(Bucket=BUCKET, Prefix="raw/")
    assert error(e)[0] == "AccessDenied"


def test_query_on_an_index_needs_the_index_arn(aws):
    rules = aws["_rules"]
    q = Call("dynamodb", "Query", {"TableName": SUBSCRIPTIONS, "IndexName": "by-subscriber"}, None)
    assert ar.required_permissions(q, rules.arns) == [
        ar.Permission("dynamodb:Query", table_arn(SUBSCRIPTIONS) + "/index/by-subscriber")]
    table_only = [{"Effect": "Allow", "Action": "dynamodb:Query", "Resource": table_arn(SUBSCRIPTIONS)}]
    assert ar.evaluate(table_only, ar.required_permissions(q, rules.arns)[0]) == "implicit_deny"
    # SubscriptionsFunction's DynamoDBCrudPolicy covers table/<name>/index/*
    with interceptor.acting_as("SubscriptionsFunction"):
        aws["dynamodb"].query(TableName=SUBSCRIPTIONS, IndexName="by-subscriber",
                              KeyConditionExpression="subscriber = :s",
                              ExpressionAttributeValues={":s": {"S": "risk"}})


def test_policy_templates_are_expanded_by_samtranslator(aws):
    from samtranslator.policy_template_processor.processor import PolicyTemplatesProcessor

    processor = PolicyTemplatesProcessor(PolicyTemplatesProcessor.get_default_policy_templates_json())
    ctx = tpl.make_context()
    roles = aws["_rules"].roles
    expanded = 0
    # every policy template of every function in template.yaml, as samtranslator's processor
    # expands it, is in that function's role (resolved for lakeq-local)
    for fn, res in tpl.resources_of_type(ctx.template, "AWS::Serverless::Function").items():
        for policy in (res.get("Properties") or {}).get("Policies") or []:
            if not isinstance(policy, dict) or "Statement" in policy:
                continue
            (name, params), = policy.items()
            expected = tpl.resolve(processor.convert(name, params), ctx)
            for st in expected["Statement"]:
                assert st in roles[fn].statements, (fn, name, st)
                expanded += 1
    assert expanded >= 10
    ro = tpl.resolve(processor.convert("DynamoDBReadPolicy", {"TableName": {"Ref": "TopicsTable"}}), ctx)
    assert ro["Statement"][0]["Resource"] == [table_arn(TOPICS), table_arn(TOPICS) + "/index/*"]
    # DynamoDBWritePolicy has no DeleteItem: samtranslator's definition, not a hand copy
    write = processor.convert("DynamoDBWritePolicy", {"TableName": "t"})["Statement"][0]["Action"]
    assert "dynamodb:DeleteItem" not in write and "dynamodb:PutItem" in write
    # the managed policies SAM attaches (a DynamoDB event source: stream reads on *)
    archiver = roles["ArchiverFunction"].statements
    assert ar.evaluate(archiver, ar.Permission("dynamodb:GetRecords", table_arn(SEGMENTS) + "/stream/x")) == "allow"
    assert ar.evaluate(archiver, ar.Permission("dynamodb:GetItem", table_arn(SEGMENTS))) == "implicit_deny"


def test_a_translation_is_read_back_from_the_disk_cache_by_the_next_process(tmp_path, monkeypatch):
    """``sam_translate`` keeps what samtranslator made in ``LAKEQ_SAM_CACHE`` (a file per template,
    parameters and samtranslator version): a process that finds the file does not translate, a
    changed template or a corrupt file is translated again, and both answers are the same."""
    monkeypatch.setenv("LAKEQ_SAM_CACHE", str(tmp_path))
    monkeypatch.setattr(ar, "_translated", {})  # a new process: nothing in memory
    ctx = tpl.make_context()
    first = ar.sam_translate(ctx.template, ctx.parameters)
    files = list(tmp_path.glob("*.json"))
    assert len(files) == 1 and json.loads(files[0].read_text()) == first

    monkeypatch.setattr(ar, "_translated", {})
    calls = []
    real = ar._translate
    monkeypatch.setattr(ar, "_translate", lambda *a: calls.append(a) or real(*a))
    assert ar.sam_translate(ctx.template, ctx.parameters) == first and calls == []  # read, not made

    # the cache's other rules on a small template (they do not depend on the template; each step
    # below translates again: ~7 CPU-s for template.yaml, 5 of them were most of this test's time)
    small = tpl.make_context(SMALL, "lakeq-local")
    small_first = ar.sam_translate(small.template, small.parameters)
    assert len(calls) == 1
    (small_file,) = set(tmp_path.glob("*.json")) - set(files)
    assert json.loads(small_file.read_text()) == small_first

    other = json.loads(json.dumps(small.template, default=str))
    other["Description"] = "another template"
    ar.sam_translate(other, small.parameters)
    assert len(calls) == 2 and len(list(tmp_path.glob("*.json"))) == 3  # its own key

    small_file.write_text("{ half a file")
    monkeypatch.setattr(ar, "_translated", {})
    assert ar.sam_translate(small.template, small.parameters) == small_first and len(calls) == 3
    assert json.loads(small_file.read_text()) == small_first  # rewritten whole

    # a file others could have written is not trusted (its roles would decide every IAM check)
    planted = {**small_first, "Resources": {}}
    small_file.write_text(json.dumps(planted))
    small_file.chmod(0o666)
    monkeypatch.setattr(ar, "_translated", {})
    assert ar.sam_translate(small.template, small.parameters) == small_first and len(calls) == 4
    small_file.write_text(json.dumps(planted))
    small_file.chmod(0o644)
    tmp_path.chmod(0o777)  # ... nor one in a directory others may write to
    monkeypatch.setattr(ar, "_translated", {})
    assert ar.sam_translate(small.template, small.parameters) == small_first and len(calls) == 5
    tmp_path.chmod(0o700)

    monkeypatch.setenv("LAKEQ_SAM_CACHE", "0")  # off: nothing written anywhere
    monkeypatch.setattr(ar, "_translated", {})
    for f in tmp_path.glob("*.json"):
        f.unlink()
    assert ar.sam_translate(small.template, small.parameters) == small_first
    assert len(calls) == 6 and not list(tmp_path.glob("*.json"))


SMALL = {
    "Transform": "AWS::Serverless-2016-10-31",
    "Resources": {
        "T": {"Type": "AWS::DynamoDB::Table", "Properties": {
            "TableName": {"Fn::Sub": "${AWS::StackName}-t"}, "BillingMode": "PAY_PER_REQUEST",
            "AttributeDefinitions": [{"AttributeName": "k", "AttributeType": "S"}],
            "KeySchema": [{"AttributeName": "k", "KeyType": "HASH"}]}},
        "F": {"Type": "AWS::Serverless::Function", "Properties": {
            "CodeUri": "f/", "Handler": "app.handler", "Runtime": "python3.11",
            "Policies": [
                {"DynamoDBCrudPolicy": {"TableName": {"Ref": "T"}}},
                {"Statement": [{"Effect": "Deny", "Action": "dynamodb:Delete*",
                                "Resource": {"Fn::GetAtt": ["T", "Arn"]}},
                               {"Effect": "Allow", "NotAction": ["dynamodb:*", "iam:*"], "Resource": "*"}]},
            ]}},
    },
}


def test_explicit_deny_wins_wildcards_and_not_action():
    rules = ar.AwsRules.from_template(ctx=tpl.make_context(SMALL, "lakeq-local"))
    t = table_arn("lakeq-local-t")

    def check(op, params):
        rules.before(Call("dynamodb", op, params, "F"))

    check("PutItem", {"TableName": "lakeq-local-t", "Item": {"k": {"S": "a"}}})  # the SAM template
    with pytest.raises(ClientError) as e:
        check("DeleteItem", {"TableName": "lakeq-local-t", "Key": {"k": {"S": "a"}}})
    assert error(e)[1].endswith(f"dynamodb:DeleteItem on resource: {t} with an explicit deny in an "
                                "identity-based policy")
    with pytest.raises(ClientError):  # another table: not in any Resource
        check("GetItem", {"TableName": "other", "Key": {"k": {"S": "a"}}})
    assert ar.evaluate(rules.roles["F"].statements, ar.Permission("s3:GetObject", "arn:aws:s3:::b/k")) == "allow"
    assert ar.evaluate(rules.roles["F"].statements, ar.Permission("iam:PassRole", "*")) == "implicit_deny"
    # a function the rules do not know is allowed nothing
    with pytest.raises(ClientError):
        rules.before(Call("dynamodb", "GetItem", {"TableName": "lakeq-local-t"}, "Nobody"))


def test_remembered_decisions_follow_each_role_and_a_replaced_list():
    """The rules remember a decision per statement list and permission: the same permission is
    still decided per role, and a role given other statements is decided afresh."""
    rules = ar.AwsRules.from_template(ctx=tpl.make_context(SMALL, "lakeq-local"))
    put = {"TableName": "lakeq-local-t", "Item": {"k": {"S": "a"}}}
    for _ in range(2):  # the second round answers from what was remembered
        rules.before(Call("dynamodb", "PutItem", put, "F"))
        with pytest.raises(ClientError):
            rules.before(Call("dynamodb", "PutItem", put, "Nobody"))
    kept = rules.roles["F"].statements
    rules.roles["F"].statements = []
    with pytest.raises(ClientError):
        rules.before(Call("dynamodb", "PutItem", put, "F"))
    rules.roles["F"].statements = kept
    rules.before(Call("dynamodb", "PutItem", put, "F"))
    kept.append({"Effect": "Deny", "Action": "dynamodb:PutItem", "Resource": "*"})  # grown in place
    with pytest.raises(ClientError):
        rules.before(Call("dynamodb", "PutItem", put, "F"))


class RaceOnce:
    """Hook: right before the first segment write a ProduceFunction invocation makes, another
    producer's request runs to completion (it wins the race for the queue's head)."""

    def __init__(self, rival):
        self.rival = rival
        self.fired = False

    def before(self, call: Call) -> None:
        if not self.fired and call.function == "ProduceFunction" and (
                call.operation == "TransactWriteItems"
                or (call.operation == "PutItem" and call.params.get("TableName") == SEGMENTS)):
            self.fired = True
            self.rival()

    def after(self, call: Call, response: dict) -> dict:
        return response


def test_a_producer_that_loses_the_race_is_not_a_500(api, setup):
    """Issue 8, defect 1: the loser of a race for a queue's head re-reads the head with a Query on
    SegmentsTable, which ProduceFunction's role must allow (it had only DynamoDBWritePolicy)."""
    path = "/v1/topics/quotes%2Fsh/messages"

    def produce(body):
        return api.call("POST", path, {"producer": "feed", "messages": [{"body": body, "key": "k"}]},
                        key=setup["feed"])

    rival_answer = []
    race = RaceOnce(lambda: rival_answer.append(produce("rival")))
    with interceptor.hooked(race):
        s, b = produce("loser")
    assert race.fired and rival_answer[0][0] == 200
    assert s == 200, b
    assert [rival_answer[0][1]["results"][0]["offset"], b["results"][0]["offset"]] == [0, 1]
    s, p = api.call("GET", path, query={"group": "risk", "max": 10}, key=setup["risk"])
    assert [m["body"] for m in p["messages"]] == ["rival", "loser"]


# ----------------------------------------------------------------------------- DynamoDB limits


def big_item(pq: str, base: int, size: int) -> dict:
    return {"pq": {"S": pq}, "base": {"N": str(base)}, "data": {"S": "x" * size}}


def test_item_size_rules():
    assert ar.item_size({"a": {"S": "héllo"}}) == 1 + 6
    assert ar.number_size("0") == 1 and ar.number_size("12345") == 4 and ar.number_size("-1200") == 3
    assert ar.number_size("0.000123") == 3
    # an integer's text takes a path without Decimal: the same sizes (zeros, sign, padding)
    assert [ar.number_size(v) for v in ("-0", "000", "0012300", "-0012300", " 42 ", "+42", 10**20, -7)] == \
        [1, 1, 3, 4, 2, 2, 2, 3]
    assert ar.value_size({"B": b"\x00" * 10}) == 10
    assert ar.value_size({"BOOL": True}) == ar.value_size({"NULL": True}) == 1
    assert ar.value_size({"SS": ["ab", "c"]}) == 3
    assert ar.value_size({"L": []}) == ar.value_size({"M": {}}) == 3
    assert ar.value_size({"L": [{"S": "ab"}, {"N": "1"}]}) == 3 + (2 + 1) + (2 + 1)
    assert ar.value_size({"M": {"k": {"S": "ab"}}}) == 3 + 1 + 2 + 1


@pytest.mark.moto  # the rules' own size of an update (moto's engine; the memory store checks its own)
def test_item_over_400_kb_put_and_update(aws):
    ddb = aws["dynamodb"]
    with pytest.raises(ClientError) as e:
        ddb.put_item(TableName=SEGMENTS, Item=big_item("t#0", 0, 401 * 1024))
    assert error(e) == ("ValidationException", "Item size has exceeded the maximum allowed size")
    assert "Item" not in ddb.get_item(TableName=SEGMENTS, Key={"pq": {"S": "t#0"}, "base": {"N": "0"}})
    # an update is judged by the item it leaves: 300 KB stored + 150 KB added
    ddb.put_item(TableName=SEGMENTS, Item=big_item("t#0", 1, 300 * 1024))
    upd = dict(TableName=SEGMENTS, Key={"pq": {"S": "t#0"}, "base": {"N": "1"}}, UpdateExpression="SET more = :m",
               ExpressionAttributeValues={":m": {"S": "y" * 150 * 1024}})
    assert aws["_rules"].updated_item_size(upd) > ar.ITEM_LIMIT
    with pytest.raises(ClientError) as e:
        ddb.update_item(**upd)
    assert error(e) == ("ValidationException", "Item size to update has exceeded the maximum allowed size")
    # replacing the big attribute leaves a small item: the rules allow it (moto 5.2.5 itself
    # refuses it, adding the old value's size to the new one's)
    replace = dict(upd, UpdateExpression="SET #d = :m", ExpressionAttributeNames={"#d": "data"})
    assert 150 * 1024 < aws["_rules"].updated_item_size(replace) < 151 * 1024
    aws["_rules"].before(Call("dynamodb", "UpdateItem", replace, None))


def test_transaction_of_101_items_and_over_4_mb(aws):
    ddb = aws["dynamodb"]
    items = [{"Put": {"TableName": SEGMENTS, "Item": big_item("t#1", i, 10)}} for i in range(101)]
    with pytest.raises(ClientError) as e:
        aws["_rules"].before(Call("dynamodb", "TransactWriteItems", {"TransactItems": items}, None))
    assert error(e)[0] == "ValidationException" and "less than or equal to 100" in error(e)[1]
    with pytest.raises(ClientError) as e:
        ddb.transact_write_items(TransactItems=items)
    assert error(e)[0] == "ValidationException"
    ddb.transact_write_items(TransactItems=items[:100])  # 100 is fine
    # 11 items of 390 KB: each under 400 KB, 4.2 MB together
    items = [{"Put": {"TableName": SEGMENTS, "Item": big_item("t#2", i, 390 * 1024)}} for i in range(11)]
    with pytest.raises(ClientError) as e:
        ddb.transact_write_items(TransactItems=items)
    assert error(e) == ("ValidationException", "Transaction request cannot be larger than 4 MB")
    assert ddb.query(TableName=SEGMENTS, KeyConditionExpression="pq = :p",
                     ExpressionAttributeValues={":p": {"S": "t#2"}})["Count"] == 0


def test_batch_write_of_26_and_batch_get_of_101_keys(aws):
    ddb = aws["dynamodb"]
    puts = [{"PutRequest": {"Item": big_item("t#3", i, 10)}} for i in range(26)]
    with pytest.raises(ClientError) as e:
        ddb.batch_write_item(RequestItems={SEGMENTS: puts})
    assert error(e) == ("ValidationException", "Too many items requested for the BatchWriteItem call")
    ddb.batch_write_item(RequestItems={SEGMENTS: puts[:25]})
    keys = [{"pq": {"S": "t#3"}, "base": {"N": str(i)}} for i in range(101)]
    with pytest.raises(ClientError) as e:
        aws["_rules"].before(Call("dynamodb", "BatchGetItem", {"RequestItems": {SEGMENTS: {"Keys": keys}}}, None))
    assert error(e) == ("ValidationException", "Too many items requested for the BatchGetItem call")
    with pytest.raises(ClientError):
        ddb.batch_get_item(RequestItems={SEGMENTS: {"Keys": keys}})
    assert len(ddb.batch_get_item(RequestItems={SEGMENTS: {"Keys": keys[:100]}})["Responses"][SEGMENTS]) == 25


def test_query_page_is_cut_at_1_mb_with_last_evaluated_key(aws):
    ddb = aws["dynamodb"]
    for i in range(5):
        ddb.put_item(TableName=SEGMENTS, Item=big_item("t#4", i, 300 * 1024))
    kw = dict(TableName=SEGMENTS, KeyConditionExpression="pq = :p", ExpressionAttributeValues={":p": {"S": "t#4"}})
    page = ddb.query(**kw)
    assert "LastEvaluatedKey" in page and page["Count"] < 5
    got = [int(i["base"]["N"]) for i in page["Items"]]
    while "LastEvaluatedKey" in page:  # callers must paginate
        page = ddb.query(**kw, ExclusiveStartKey=page["LastEvaluatedKey"])
        got += [int(i["base"]["N"]) for i in page["Items"]]
    assert got == [0, 1, 2, 3, 4]
    # the hook's own cut (the store may cut earlier by its own estimate): the item that reaches
    # 1 MB read ends the page, and its key is LastEvaluatedKey
    items = [big_item("t#4", i, 300 * 1024) for i in range(5)]
    out = aws["_rules"].after(Call("dynamodb", "Query", kw, None), {"Items": items, "Count": 5, "ScannedCount": 5})
    assert out["Count"] == 4 and out["Items"] == items[:4]
    assert out["LastEvaluatedKey"] == {"pq": {"S": "t#4"}, "base": {"N": "3"}}


def test_batch_get_over_16_mb_returns_unprocessed_keys(aws):
    ddb = aws["dynamodb"]
    n = 43  # 43 x 390 KB = 16.4 MiB
    for i in range(n):
        ddb.put_item(TableName=SEGMENTS, Item=big_item("t#5", i, 390 * 1024))
    keys = [{"pq": {"S": "t#5"}, "base": {"N": str(i)}} for i in range(n)]
    out = ddb.batch_get_item(RequestItems={SEGMENTS: {"Keys": keys}})
    assert out["UnprocessedKeys"][SEGMENTS]["Keys"]
    got = len(out["Responses"][SEGMENTS])
    assert sum(ar.item_size(i) for i in out["Responses"][SEGMENTS]) <= ar.BATCH_GET_RESPONSE
    while out["UnprocessedKeys"]:
        out = ddb.batch_get_item(RequestItems=out["UnprocessedKeys"])
        got += len(out["Responses"][SEGMENTS])
    assert got == n
    # the hook's own cut on a response the store did not cut
    items = [big_item("t#5", i, 390 * 1024) for i in range(n)]
    call = Call("dynamodb", "BatchGetItem", {"RequestItems": {SEGMENTS: {"Keys": keys, "ConsistentRead": True}}}, None)
    cut = aws["_rules"].after(call, {"Responses": {SEGMENTS: items}, "UnprocessedKeys": {}})
    kept = len(cut["Responses"][SEGMENTS])
    assert kept == ar.BATCH_GET_RESPONSE // ar.item_size(items[0])
    assert cut["UnprocessedKeys"][SEGMENTS] == {"Keys": keys[kept:], "ConsistentRead": True}


def test_attribute_values_of_the_wrong_wire_type_are_refused_as_dynamodb_does(aws):
    """A number must travel as a JSON string (``{"N": "5"}``). boto3 validates that; pynamodb's
    client does not, and moto takes ``{"N": 5}``: the pull's segment probe (``LogRepo.segments_at``)
    sent its ``base`` so, which DynamoDB refuses with a SerializationException."""
    assert ar.wire_type_error({"Keys": [{"pq": {"S": "a"}, "base": {"N": 5}}]}) == "NUMBER_VALUE cannot be converted to String"
    assert ar.wire_type_error({"Keys": [{"pq": {"S": "a"}, "base": {"N": "5"}}]}) is None
    assert ar.wire_type_error({"Item": {"x": {"NS": ["1", 2]}}})
    assert ar.wire_type_error({"Item": {"x": {"L": [{"M": {"y": {"S": 3}}}]}}})
    assert ar.wire_type_error({"Item": {"x": {"M": {"y": {"BOOL": True}}, "z": {"NULL": True}}}}) is None
    from pynamodb.exceptions import GetError

    from lakeq.store.models import SegmentModel
    with pytest.raises(GetError) as e:
        SegmentModel._get_connection().batch_get_item([{"pq": "t#1", "base": 5}])
    assert e.value.cause_response_code == "SerializationException"


def test_the_segment_probe_sends_numbers_as_strings_and_asks_unprocessed_keys_again(aws, monkeypatch):
    """``LogRepo.segments_at`` (one BatchGetItem of segment keys, number range key ``base``): its
    keys pass the wire-type rule, and keys DynamoDB leaves unprocessed (typed, as it returns them)
    are asked again as they are."""
    from pynamodb.connection.table import TableConnection

    from lakeq.store.queue_log import LogRepo
    ddb = aws["dynamodb"]
    for q in range(3):
        ddb.put_item(TableName=SEGMENTS, Item={"pq": {"S": f"t#{q}"}, "base": {"N": "7"}, "end": {"N": str(9 + q)}})
    real = TableConnection.batch_get_item
    asked = []

    def once_unprocessed(self, keys, **kw):
        asked.append(list(keys))
        out = real(self, keys, **kw)
        if len(asked) == 1:  # the first call: one key left unprocessed, typed as DynamoDB returns it
            rows = out["Responses"][SEGMENTS]
            left = next(r for r in rows if r["pq"]["S"] == "t#1")
            out["Responses"][SEGMENTS] = [r for r in rows if r is not left]
            out["UnprocessedKeys"] = {SEGMENTS: {"Keys": [{"pq": {"S": "t#1"}, "base": {"N": "7"}}]}}
        return out

    monkeypatch.setattr(TableConnection, "batch_get_item", once_unprocessed)
    segs = LogRepo.segments_at({"t#0": 7, "t#1": 7, "t#2": 7, "t#3": 7})
    assert {pq: int(m.end) for pq, m in segs.items()} == {"t#0": 9, "t#1": 10, "t#2": 11}  # t#3 has none at 7
    assert {pq: int(m.base) for pq, m in segs.items()} == {"t#0": 7, "t#1": 7, "t#2": 7}
    assert asked[1] == [{"pq": {"S": "t#1"}, "base": {"N": "7"}}]


def test_the_marker_and_the_probes_in_one_call_send_numbers_as_strings_and_ask_unprocessed_keys_again(
        aws, monkeypatch):
    """``LogRepo.change_and_segments_at`` (cost33f: a young look's marker and probes in one BatchGetItem
    over two tables, each with its own consistency): its keys pass the wire-type rule, and the keys
    DynamoDB leaves unprocessed are asked again as returned, with their table's consistency."""
    from lakeq.common.names import change_key
    from lakeq.store.models import QueueModel
    from lakeq.store.queue_log import LogRepo
    ddb = aws["dynamodb"]
    queues = QueueModel.Meta.table_name
    ddb.put_item(TableName=queues, Item={"pq": {"S": change_key("t")}, "wv": {"N": "3"}, "wat": {"N": "1000"}})
    for q in range(2):
        ddb.put_item(TableName=SEGMENTS, Item={"pq": {"S": f"t#{q}"}, "base": {"N": "7"}, "end": {"N": str(9 + q)}})
    client = QueueModel._get_connection().connection.client
    real = client.batch_get_item
    asked = []

    def once_unprocessed(**kw):
        asked.append(kw["RequestItems"])
        out = real(**kw)
        if len(asked) == 1:  # the first call: the marker and one segment key left unprocessed
            out["Responses"][queues] = []
            out["Responses"][SEGMENTS] = [r for r in out["Responses"][SEGMENTS] if r["pq"]["S"] != "t#1"]
            out["UnprocessedKeys"] = {queues: {"Keys": [{"pq": {"S": change_key("t")}}], "ConsistentRead": True},
                                      SEGMENTS: {"Keys": [{"pq": {"S": "t#1"}, "base": {"N": "7"}}],
                                                 "ConsistentRead": False}}
        return out

    monkeypatch.setattr(client, "batch_get_item", once_unprocessed)
    change, segs = LogRepo.change_and_segments_at("t", {"t#0": 7, "t#1": 7, "t#2": 7})
    assert (change.version, change.at) == (3, 1000)
    assert {pq: int(m.end) for pq, m in segs.items()} == {"t#0": 9, "t#1": 10}  # t#2 has none at 7
    assert asked[0][queues]["ConsistentRead"] is True and asked[0][SEGMENTS]["ConsistentRead"] is False
    assert asked[0][SEGMENTS]["Keys"][0] == {"pq": {"S": "t#0"}, "base": {"N": "7"}}
    assert asked[1][SEGMENTS]["Keys"] == [{"pq": {"S": "t#1"}, "base": {"N": "7"}}]


# ------------------------------------------------------------------ Lambda and API Gateway limits

BIG = textwrap.dedent('''
    import json

    def handler(event, context):
        n = int((event.get("queryStringParameters") or {}).get("n", "0"))
        return {"statusCode": 200, "headers": {"content-type": "text/plain"},
                "body": "x" * n if n else str(len(event.get("body") or ""))}
''')

BIG_TEMPLATE = {"Resources": {"BigFunction": {"Type": "AWS::Serverless::Function", "Properties": {
    "CodeUri": "big/", "Handler": "app.handler", "Events": {
        "Get": {"Type": "HttpApi", "Properties": {"Method": "GET", "Path": "/v1/big"}},
        "Post": {"Type": "HttpApi", "Properties": {"Method": "POST", "Path": "/v1/big"}}}}}}}


def test_gateway_payload_limits(tmp_path):
    from infra.local.gateway import Gateway

    (tmp_path / "big").mkdir()
    (tmp_path / "big" / "app.py").write_text(BIG)
    (tmp_path / "template.yaml").write_text(json.dumps(BIG_TEMPLATE))
    client = Client(Gateway(tmp_path / "template.yaml", stack_name="gwrules"), use_cookies=False)
    r = client.get("/v1/big?n=6000000")  # under 6 MB
    assert r.status_code == 200 and len(r.get_data()) == 6_000_000
    r = client.get("/v1/big?n=6400000")  # Lambda refuses the response: API Gateway's own 500
    assert r.status_code == 500 and r.get_json() == {"message": "Internal Server Error"}
    r = client.post("/v1/big", data=b"a" * 5_000_000, content_type="text/plain")
    assert r.status_code == 200 and r.get_data() == b"5000000"
    r = client.post("/v1/big", data=b"a" * 7_000_000, content_type="text/plain")  # event over 6 MB
    assert r.status_code == 413 and r.get_json()["error"]["code"] == "payload_too_large"
    r = client.post("/v1/big", data=b"a" * (10 * 1024 * 1024 + 1), content_type="text/plain")
    assert r.status_code == 413 and r.get_json()["message"] == "Request Entity Too Large"


def test_in_process_api_applies_the_same_limits():
    from tests.handlers import Api

    ev = {"body": "a" * 100, "routeKey": "POST /x"}
    assert Api.through_gateway(ev, lambda e, c: {"statusCode": 200, "body": "x" * 6_400_000}) == (
        500, {"message": "Internal Server Error"})
    s, b = Api.through_gateway({"body": "a" * 7_000_000}, lambda e, c: pytest.fail("invoked"))
    assert s == 413 and b["error"]["code"] == "payload_too_large"
    s, b = Api.through_gateway({"body": "a" * (11 * 1024 * 1024)}, lambda e, c: pytest.fail("invoked"))
    assert s == 413 and b["message"] == "Request Entity Too Large"
    assert Api.through_gateway(ev, lambda e, c: {"statusCode": 201, "body": "{}"}) == (201, {})


def test_stream_batches_are_cut_at_the_6_mb_invocation_payload():
    from infra.local.streams import within_payload

    records = [{"dynamodb": {"NewImage": {"data": {"S": "x" * 1_000_000}}}, "eventID": str(i)} for i in range(10)]
    batch = within_payload(records)
    assert len(batch) == 6 and ar.invocation_request_size({"Records": batch}) <= ar.LAMBDA_REQUEST_LIMIT
    assert ar.invocation_request_size({"Records": records[:7]}) > ar.LAMBDA_REQUEST_LIMIT
    huge = [{"dynamodb": {"NewImage": {"data": {"S": "x" * 7_000_000}}}}] + records
    assert within_payload(huge) == huge[:1]  # always at least one record


# --------------------------------------------------------------------- the local stack's workers

PROBE = textwrap.dedent('''
    import boto3
    from botocore.config import Config
    from botocore.exceptions import ClientError
    from infra.local import interceptor

    def handler(event, context):
        # nothing listens on port 9: a call that passes the rules fails to connect
        c = boto3.client("dynamodb", region_name="us-east-1", endpoint_url="http://127.0.0.1:9",
                         config=Config(retries={"max_attempts": 1}, connect_timeout=1))
        out = {"acting_as": interceptor.current_function()}
        calls = {
            "delete": lambda: c.delete_item(TableName="lakeq-local-t", Key={"k": {"S": "a"}}),
            "big_put": lambda: c.put_item(TableName="lakeq-local-t",
                                          Item={"k": {"S": "a"}, "v": {"S": "x" * 410000}}),
            "get": lambda: c.get_item(TableName="lakeq-local-t", Key={"k": {"S": "a"}}),
        }
        for name, fn in calls.items():
            try:
                fn()
                out[name] = "ok"
            except ClientError as e:
                out[name] = e.response["Error"]["Code"]
            except Exception as e:
                out[name] = type(e).__name__
        return out
''')


def test_local_stack_workers_act_as_their_function(tmp_path):
    """A worker process of the local stack (infra/local/worker.py) runs ONE function: its calls are
    made as it, under its role, with DynamoDB's limits — refused before anything is sent."""
    from infra.local.worker import ProcessPool

    (tmp_path / "f").mkdir()
    (tmp_path / "f" / "app.py").write_text(PROBE)
    template = tpl.load_template(SMALL)
    ctx = tpl.make_context(template, "lakeq-local")
    rules = ar.AwsRules.from_template(ctx=ctx)
    spec = tpl.functions(ctx)[0]
    spec.code_uri = tmp_path / "f"
    pool = ProcessPool([], rules=rules)
    try:
        with pool.instance(spec) as invoke:
            out = invoke({}, type("Ctx", (), {
                "function_name": "f", "memory_limit_in_mb": 128, "aws_request_id": "r",
                "invoked_function_arn": "arn", "get_remaining_time_in_millis": lambda self: 10000})())
    finally:
        pool.close()
    assert out == {"acting_as": "F", "delete": "AccessDeniedException", "big_put": "ValidationException",
                   "get": "EndpointConnectionError"}


def test_remembered_decisions_see_statements_changed_in_place():
    """A role's statements changed in place (one replaced, or one's fields edited: what a test that
    narrows a role would do) are decided afresh: a remembered allow never outlives its statement."""
    rules = ar.AwsRules.from_template(ctx=tpl.make_context(SMALL, "lakeq-local"))
    put = {"TableName": "lakeq-local-t", "Item": {"k": {"S": "a"}}}
    rules.before(Call("dynamodb", "PutItem", put, "F"))  # allowed, and remembered
    st = rules.roles["F"].statements
    kept = [dict(s) for s in st]
    st[0] = {"Effect": "Deny", "Action": "*", "Resource": "*"}  # replaced, the same length
    with pytest.raises(ClientError):
        rules.before(Call("dynamodb", "PutItem", put, "F"))
    st[:] = [dict(s) for s in kept]
    rules.before(Call("dynamodb", "PutItem", put, "F"))
    for s in st:  # every statement edited in place: nothing is allowed any more
        s["Effect"] = "Deny"
    with pytest.raises(ClientError):
        rules.before(Call("dynamodb", "PutItem", put, "F"))


_TINY_SAM = {"Transform": "AWS::Serverless-2016-10-31",
             "Resources": {"F": {"Type": "AWS::Serverless::Function",
                                 "Properties": {"CodeUri": "src/", "Handler": "a.b", "Runtime": "python3.11"}}}}


def test_the_disk_cache_is_not_read_by_edited_translating_code(tmp_path, monkeypatch):
    """The disk cache's key covers lakeq's own part of the translation (``_translate``: the
    placeholder code locations, the managed-policy loader): a process whose
    ``aws_rules.py`` translates differently (here: another placeholder) translates again instead
    of reading what the old code made. (Seen failing when the key was template + parameters +
    samtranslator version only: the edited copy read the old file.)"""
    import importlib.util
    import sys
    from pathlib import Path

    monkeypatch.setenv("LAKEQ_SAM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(ar, "_translated", {})
    first = ar.sam_translate(_TINY_SAM, {})
    assert first["Resources"]["F"]["Properties"]["Code"]["S3Key"] == "code.zip"

    src = Path(ar.__file__).read_text(encoding="utf-8").replace(
        '"s3://lakeq-local-code/code.zip"', '"s3://lakeq-local-code/edited.zip"')
    edited_file = tmp_path / "aws_rules_edited.py"
    edited_file.write_text(src, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("infra.local._aws_rules_edited", edited_file)
    edited = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, edited)  # (dataclasses look their module up)
    spec.loader.exec_module(edited)  # a new process with the edited module: nothing in memory
    assert edited.sam_translate(_TINY_SAM, {})["Resources"]["F"]["Properties"]["Code"]["S3Key"] == "edited.zip"
