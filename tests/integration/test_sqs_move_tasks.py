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
