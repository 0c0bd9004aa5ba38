"""SQS message move tasks (issue 18.3) through boto3's client against the SqsFunction handler:
StartMessageMoveTask / ListMessageMoveTasks / CancelMessageMoveTask mapped onto redrives."""
from __future__ import annotations

import json

import pytest
from botocore.exceptions import ClientError

from tests.integration.sqs_harness import h, sqs  # noqa: F401 (fixtures)


def err(e) -> tuple[str, int]:
    return e.value.response["Error"]["Code"], e.value.response["ResponseMetadata"]["HTTPStatusCode"]


def arn(sqs, url):
    return sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]


@pytest.fixture
def queues(sqs):
    """``src`` dead-letters to ``dlq`` after one receive; three of its messages are in ``dlq``."""
    dlq = sqs.create_queue(QueueName="dlq")["QueueUrl"]
    policy = json.dumps({"deadLetterTargetArn": arn(sqs, dlq), "maxReceiveCount": 1})
    src = sqs.create_queue(QueueName="src", Attributes={"RedrivePolicy": policy})["QueueUrl"]
    sqs.send_message_batch(QueueUrl=src, Entries=[{"Id": str(i), "MessageBody": f"m{i}"} for i in range(3)])
    seen = 0
    for _ in range(20):  # received once with visibility 0: the next receive dead-letters them
        seen += len(sqs.receive_message(QueueUrl=src, MaxNumberOfMessages=10, VisibilityTimeout=0).get("Messages", []))
    got = []
    for _ in range(10):
        got += [m["Body"] for m in sqs.receive_message(QueueUrl=dlq, MaxNumberOfMessages=10,
                                                       VisibilityTimeout=0).get("Messages", [])]
        if len(set(got)) == 3:
            break
    assert sorted(set(got)) == ["m0", "m1", "m2"], got
    assert "Messages" not in sqs.receive_message(QueueUrl=src, MaxNumberOfMessages=10)
    return {"src": src, "dlq": dlq}


def test_move_task_moves_dead_letters_back_to_their_source(sqs, queues):
    dlq_arn, src_arn = arn(sqs, queues["dlq"]), arn(sqs, queues["src"])
    handle = sqs.start_message_move_task(SourceArn=dlq_arn, MaxNumberOfMessagesPerSecond=50)["TaskHandle"]
    assert handle
    tasks = sqs.list_message_move_tasks(SourceArn=dlq_arn, MaxResults=10)["Results"]
    assert len(tasks) == 1
    t = tasks[0]
    assert (t["Status"], t["SourceArn"], t["ApproximateNumberOfMessagesMoved"], t["ApproximateNumberOfMessagesToMove"],
            t["MaxNumberOfMessagesPerSecond"]) == ("COMPLETED", dlq_arn, 3, 3, 50)
    assert "TaskHandle" not in t and "DestinationArn" not in t and t["StartedTimestamp"] > 0
    got = []
    for _ in range(10):  # receive and delete (a lakeq queue's messages wait behind its lock)
        for m in sqs.receive_message(QueueUrl=queues["src"], MaxNumberOfMessages=10,
                                     VisibilityTimeout=60).get("Messages", []):
            got.append(m["Body"])
            sqs.delete_message(QueueUrl=queues["src"], ReceiptHandle=m["ReceiptHandle"])
    assert sorted(got) == ["m0", "m1", "m2"]  # back in src, once each
    with pytest.raises(ClientError) as e:  # the task has ended
        sqs.cancel_message_move_task(TaskHandle=handle)
    assert err(e)[0] == "InvalidParameterValue"
    assert src_arn != dlq_arn


def test_move_task_errors(sqs, h, queues):
    dlq_arn = arn(sqs, queues["dlq"])
    cases = [
        (lambda: sqs.start_message_move_task(SourceArn="nope"), "InvalidParameterValue"),
        (lambda: sqs.start_message_move_task(SourceArn=dlq_arn.replace(":dlq", ":missing")),
         "ResourceNotFoundException"),
        (lambda: sqs.start_message_move_task(SourceArn=arn(sqs, queues["src"])), "InvalidParameterValue"),  # no DLQ
        (lambda: sqs.start_message_move_task(SourceArn=dlq_arn, MaxNumberOfMessagesPerSecond=501),
         "InvalidParameterValue"),
        (lambda: sqs.list_message_move_tasks(SourceArn=dlq_arn, MaxResults=11), "InvalidParameterValue"),
        (lambda: sqs.cancel_message_move_task(TaskHandle="0123abcd"), "ResourceNotFoundException"),
        (lambda: h.client("someone").start_message_move_task(SourceArn=dlq_arn), "AccessDenied"),
    ]
    for call, code in cases:
        with pytest.raises(ClientError) as e:
            call()
        assert err(e)[0] == code, (code, e.value.response)
    assert sqs.list_message_move_tasks(SourceArn=dlq_arn)["Results"] == []


def test_cancel_a_running_task(sqs, queues, monkeypatch):
    from lakeq.redrive import service as redrive
    monkeypatch.setattr(redrive.start, "__defaults__", (None, 0))  # no first batches: the schedule runs it
    dlq_arn = arn(sqs, queues["dlq"])
    handle = sqs.start_message_move_task(SourceArn=dlq_arn)["TaskHandle"]
    t = sqs.list_message_move_tasks(SourceArn=dlq_arn)["Results"][0]
    assert (t["Status"], t["TaskHandle"], t["ApproximateNumberOfMessagesMoved"]) == ("RUNNING", handle, 0)
    with pytest.raises(ClientError) as e:  # one task a source at a time
        sqs.start_message_move_task(SourceArn=dlq_arn)
    assert err(e)[0] == "InvalidParameterValue"
    assert sqs.cancel_message_move_task(TaskHandle=handle)["ApproximateNumberOfMessagesMoved"] == 0
    assert sqs.list_message_move_tasks(SourceArn=dlq_arn)["Results"][0]["Status"] == "CANCELLED"


def test_query_protocol_answers_parse_as_botocore_reads_them(sqs, h, queues):
    """The XML answers of the three actions, read by botocore's own query parser with SQS's model."""
    import botocore.session
    from botocore.parsers import QueryParser


    model = botocore.session.get_session().get_service_model("sqs")
    dlq_arn = arn(sqs, queues["dlq"])

    def call(action: str, form: dict) -> dict:
        import copy
        from urllib.parse import urlencode

        from tests.handlers import Context, sample
        ev = copy.deepcopy(sample("health.json"))
        ev["routeKey"] = ev["requestContext"]["routeKey"] = "POST /"
        ev["rawPath"] = ev["requestContext"]["http"]["path"] = "/"
        ev["requestContext"]["http"]["method"] = "POST"
        ev["rawQueryString"] = ""
        ev["headers"] = {"host": "lakeq.test:3000",
                         "content-type": "application/x-www-form-urlencoded; charset=utf-8",
                         "authorization": "AWS4-HMAC-SHA256 Credential=admin/20260101/us-east-1/sqs/aws4_request, "
                                          "SignedHeaders=host, Signature=00"}
        ev["body"] = urlencode({"Action": action, "Version": "2012-11-05", **form})
        out = h.handler(ev, Context())
        assert out["statusCode"] == 200, out["body"]
        shape = copy.copy(model.operation_model(action).output_shape)  # SQS's model is JSON now: the
        shape.serialization = {**shape.serialization, "resultWrapper": f"{action}Result"}  # query wrapper
        return QueryParser().parse({"body": out["body"].encode(), "headers": out["headers"], "status_code": 200},
                                   shape)

    handle = call("StartMessageMoveTask", {"SourceArn": dlq_arn, "MaxNumberOfMessagesPerSecond": "20"})["TaskHandle"]
    listed = call("ListMessageMoveTasks", {"SourceArn": dlq_arn, "MaxResults": "5"})["Results"]
    assert [(r["Status"], r["ApproximateNumberOfMessagesMoved"], r["MaxNumberOfMessagesPerSecond"], r["SourceArn"])
            for r in listed] == [("COMPLETED", 3, 20, dlq_arn)]
    assert handle


def _json(h, action: str, req: dict, key: str = "admin") -> tuple[int, dict]:
    from tests.handlers import Context
    from tests.integration.test_sqs_edges import raw_event
    ev = raw_event("/", json.dumps(req), {"content-type": "application/x-amz-json-1.0",
                                          "x-amz-target": f"AmazonSQS.{action}"})
    ev["headers"]["authorization"] = ev["headers"]["authorization"].replace("Credential=admin/", f"Credential={key}/")
    out = h.handler(ev, Context())
    return out["statusCode"], json.loads(out["body"] or "{}")


@pytest.fixture
def dlq_pair(sqs):
    dlq = sqs.create_queue(QueueName="dlq")["QueueUrl"]
    policy = json.dumps({"deadLetterTargetArn": arn(sqs, dlq), "maxReceiveCount": 1})
    src = sqs.create_queue(QueueName="src", Attributes={"RedrivePolicy": policy})["QueueUrl"]
    return arn(sqs, dlq), arn(sqs, src)


def test_move_task_numbers_of_a_wrong_type_or_range_are_400(sqs, h, dlq_pair):
    """Issue 30 item 8: a rate or MaxResults that is a JSON string (or any other wrong type) answered
    500, even to a producer's credential; each is InvalidParameterValue (400), and nothing starts."""
    dlq_arn, _ = dlq_pair
    for key in ("admin", "feed"):
        for value in ("x", "", "1.5", 1.5, True, [], [10], {}, {"a": 1}, -1, 0, 501, 2**40):
            for action, req in (("StartMessageMoveTask", {"SourceArn": dlq_arn, "MaxNumberOfMessagesPerSecond": value}),
                                ("ListMessageMoveTasks", {"SourceArn": dlq_arn, "MaxResults": value})):
                if action == "ListMessageMoveTasks" and value == 501:
                    continue
                status, doc = _json(h, action, req, key)
                assert status == 400 and doc["__type"].endswith("#InvalidParameterValue"), (key, action, value, doc)
    assert sqs.list_message_move_tasks(SourceArn=dlq_arn, MaxResults=10)["Results"] == []
    status, doc = _json(h, "ListMessageMoveTasks", {"SourceArn": dlq_arn, "MaxResults": "10"})
    assert (status, doc) == (200, {"Results": []})  # digits: an integer, as the query protocol sends each one
    status, doc = _json(h, "StartMessageMoveTask", {"SourceArn": dlq_arn, "MaxNumberOfMessagesPerSecond": "20"})
    assert status == 200, doc
    assert sqs.list_message_move_tasks(SourceArn=dlq_arn)["Results"][0]["MaxNumberOfMessagesPerSecond"] == 20


def test_move_task_arns_of_another_account_or_region_are_not_found(sqs, h, dlq_pair):
    """A SourceArn / DestinationArn naming a queue of another account or region names no queue of
    this deployment (ResourceNotFoundException, as SQS answers an ARN of a queue it does not have),
    even when a queue of that name exists here."""
    dlq_arn, src_arn = dlq_pair
    region, account = dlq_arn.split(":")[3:5]
    other_account = dlq_arn.replace(f":{account}:", ":999999999999:")
    other_region = dlq_arn.replace(f":{region}:", ":eu-west-3:")
    for bad in (other_account, other_region):
        for call in (lambda: sqs.start_message_move_task(SourceArn=bad),
                     lambda: sqs.list_message_move_tasks(SourceArn=bad),
                     lambda: sqs.start_message_move_task(SourceArn=dlq_arn,
                                                         DestinationArn=bad.replace(":dlq", ":src"))):
            with pytest.raises(ClientError) as e:
                call()
            assert err(e)[0] == "ResourceNotFoundException", e.value.response
    assert sqs.list_message_move_tasks(SourceArn=dlq_arn)["Results"] == []  # nothing was started


def test_redrive_policy_target_of_another_account_or_region_is_refused(sqs, dlq_pair):
    """Sibling: a RedrivePolicy's deadLetterTargetArn of another account or region names no queue of
    this deployment, even when a queue of that name exists here (InvalidParameterValue, as SQS)."""
    dlq_arn, _ = dlq_pair
    region, account = dlq_arn.split(":")[3:5]
    for bad in (dlq_arn.replace(f":{account}:", ":999999999999:"), dlq_arn.replace(f":{region}:", ":eu-west-3:")):
        policy = json.dumps({"deadLetterTargetArn": bad, "maxReceiveCount": 2})
        with pytest.raises(ClientError) as e:
            sqs.create_queue(QueueName="other", Attributes={"RedrivePolicy": policy})
        assert err(e)[0] == "InvalidParameterValue"
        url = sqs.create_queue(QueueName="plain")["QueueUrl"]
        with pytest.raises(ClientError) as e:
            sqs.set_queue_attributes(QueueUrl=url, Attributes={"RedrivePolicy": policy})
        assert err(e)[0] == "InvalidParameterValue"
        assert "RedrivePolicy" not in sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
