"""Issue 9 over the local stack: boto3's sqs client with lakeq-issued SQS credentials (SigV4
verified by the SQS function), wrong secrets, revocation, the admin credential `make run` prints,
and the conformance flag (--sqs-any-signature, a stack of its own)."""
from __future__ import annotations

import re
import uuid

import boto3
import pytest
import requests
from botocore.config import Config
from botocore.exceptions import ClientError


def sqs(url: str, akid: str, secret: str, region: str = "us-east-1"):
    return boto3.client("sqs", endpoint_url=url, region_name=region, aws_access_key_id=akid,
                        aws_secret_access_key=secret, config=Config(retries={"max_attempts": 1}))


def _admin_cred(stack) -> tuple[str, str]:
    r = requests.get(f"{stack.url}/v1/sqs-credentials/admin", headers=stack.admin_headers(), timeout=10)
    assert r.status_code == 200, r.text
    return r.json()["access_key_id"], r.json()["secret_access_key"]


def test_make_run_prints_the_admin_sqs_credential(stack):
    akid, secret = _admin_cred(stack)
    stack.printed("SQS_ANY_SIGNATURE=1")  # the banner's last line
    m = re.search(r"admin SQS credential: access key id (\S+)  secret access key (\S+)", stack.output)
    assert m, stack.output
    assert (m.group(1), m.group(2)) == (akid, secret)
    assert "SQS_ANY_SIGNATURE=1" in stack.output  # how to start with the flag
    # the printed credential works with boto3 as the admin: create a queue, round trip a message
    c = sqs(stack.url, akid, secret, region="eu-west-3")  # any region
    name = f"auth-{uuid.uuid4().hex[:8]}"
    url = c.create_queue(QueueName=name)["QueueUrl"]
    c.send_message(QueueUrl=url, MessageBody="hello")
    got = c.receive_message(QueueUrl=url, WaitTimeSeconds=2).get("Messages", [])
    assert [m["Body"] for m in got] == ["hello"]


def test_issued_credentials_wrong_secret_and_revocation(stack):
    h = stack.admin_headers()
    name = f"sqsauth{uuid.uuid4().hex[:6]}"
    assert requests.post(f"{stack.url}/v1/topics", json={"name": name, "queues": 1}, headers=h,
                         timeout=10).status_code == 201
    r = requests.post(f"{stack.url}/v1/clients", json={"name": name, "role": "producer", "topics": [name]},
                      headers=h, timeout=10)
    assert r.status_code == 201, r.text
    r = requests.post(f"{stack.url}/v1/clients/{name}/sqs-credentials", headers=h, timeout=10)
    assert r.status_code == 201, r.text
    cred = r.json()
    good = sqs(stack.url, cred["access_key_id"], cred["secret_access_key"])
    url = good.get_queue_url(QueueName=name)["QueueUrl"]
    assert good.send_message(QueueUrl=url, MessageBody="from the producer")["MessageId"]
    # a wrong secret: 403 SignatureDoesNotMatch
    bad = sqs(stack.url, cred["access_key_id"], cred["secret_access_key"][:-2] + "zz")
    with pytest.raises(ClientError) as e:
        bad.get_queue_url(QueueName=name)
    assert e.value.response["Error"]["Code"] == "SignatureDoesNotMatch"
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    # an unknown access key id: 403 InvalidClientTokenId
    with pytest.raises(ClientError) as e:
        sqs(stack.url, "LQAKAAAAAAAAAAAAAAAA", "x").get_queue_url(QueueName=name)
    assert e.value.response["Error"]["Code"] == "InvalidClientTokenId"
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    # revoked: InvalidClientTokenId (the revoking container forgets it at once; others within 5 s)
    r = requests.delete(f"{stack.url}/v1/clients/{name}/sqs-credentials/{cred['access_key_id']}", headers=h,
                        timeout=10)
    assert r.status_code == 204
    import time
    time.sleep(5.5)
    with pytest.raises(ClientError) as e:
        good.get_queue_url(QueueName=name)
    assert e.value.response["Error"]["Code"] == "InvalidClientTokenId"


def test_unsigned_request_is_refused(stack):
    r = requests.post(stack.url + "/", data="{}", timeout=10,
                      headers={"Content-Type": "application/x-amz-json-1.0", "X-Amz-Target": "AmazonSQS.ListQueues"})
    assert r.status_code == 403
    assert r.headers.get("x-amzn-query-error", "").startswith("MissingAuthenticationToken")
    # moto's reset is answered only in --sqs-any-signature mode: here it is an SQS queue's path (unsigned)
    r = requests.post(stack.url + "/moto-api/reset", timeout=10)
    assert r.status_code == 403 and "MissingAuthenticationToken" in r.text


def test_conformance_flag_accepts_any_signature(start_local_stack):
    st = start_local_stack(admin_key="flag-admin-key", args=["--sqs-any-signature"])
    try:
        assert st.printed("ANY well-formed signature is accepted"), st.output
        c = sqs(st.url, "test", "test")  # unknown id: acts as the admin
        url = c.create_queue(QueueName="conformance")["QueueUrl"]
        c.send_message(QueueUrl=url, MessageBody="x")
        assert [m["Body"] for m in c.receive_message(QueueUrl=url, WaitTimeSeconds=2)["Messages"]] == ["x"]
        r = requests.post(st.url + "/", data="{}", timeout=10, headers={
            "Content-Type": "application/x-amz-json-1.0", "X-Amz-Target": "AmazonSQS.ListQueues"})
        assert r.status_code == 403  # still a signature is needed

        # moto's POST /moto-api/reset: the stack as just started before the answer. A message left in
        # flight, a queue with other attributes: after the reset the name is free, and a queue made
        # again under it at once has the new attributes and serves its own message (no warm
        # environment's cached topic or SQS clients, no lock of the old queue survive)
        c.create_queue(QueueName="again", Attributes={"VisibilityTimeout": "60"})
        old = c.get_queue_url(QueueName="again")["QueueUrl"]
        c.send_message(QueueUrl=old, MessageBody="old")
        assert [m["Body"] for m in c.receive_message(QueueUrl=old, WaitTimeSeconds=2)["Messages"]] == ["old"]
        r = requests.post(st.url + "/moto-api/reset", timeout=60)
        assert r.status_code == 200, r.text
        assert r.json()["items"] > 0
        for gone in ("again", "conformance"):
            with pytest.raises(ClientError) as e:
                c.get_queue_url(QueueName=gone)
            assert e.value.response["Error"]["Code"] == "AWS.SimpleQueueService.NonExistentQueue"
        assert c.list_queues().get("QueueUrls", []) == []
        url = c.create_queue(QueueName="again", Attributes={"VisibilityTimeout": "5"})["QueueUrl"]
        attrs = c.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
        assert attrs["VisibilityTimeout"] == "5"
        assert attrs["ApproximateNumberOfMessages"] == "0"
        for body in ("new1", "new2", "new3", "new4", "new5"):  # (4 lakeq queues: one at least shares the old's)
            c.send_message(QueueUrl=url, MessageBody=body)
        got = []
        for _ in range(10):
            got += [m["Body"] for m in c.receive_message(QueueUrl=url, MaxNumberOfMessages=10,
                                                          WaitTimeSeconds=1).get("Messages", [])]
            if len(got) == 5:
                break
        assert sorted(got) == ["new1", "new2", "new3", "new4", "new5"]
    finally:
        assert st.stop() == 0
