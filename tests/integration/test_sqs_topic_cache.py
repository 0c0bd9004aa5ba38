"""The SQS endpoint's container cache of topic items (issue 16 item 4): a producer client's sends,
the receives, and the deletes and visibility changes whose handles all name the copy's incarnation
take the queue's topic item from the container's copy (5 s); the admin's sends and the
administration read it every time. What a stale copy may do after another container deleted the
queue and made it again (docs/costs.md "SQS endpoint: the topic item cache"): a send lands in the
deleted incarnation's log (SQS: a send up to 60 s after DeleteQueue may succeed and be lost), never
in the new one's; a receive locks nothing; a handle of the deleted incarnation settles nothing of
the new one (refused once the copy expired); a handle of the new incarnation is served from the
stored item; no SQS client of a deleted queue is made again."""
from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from lakeq.sqs import handler as sqs_service
from lakeq.sqs import permissions as sqs_perm
from lakeq.store.catalog import ClientRepo
from lakeq.store.sqs import group_name, producer_name
from tests.integration.sqs_harness import Harness, drain_sqs, fake_auth
from tests.integration.test_sqs_endpoint import make_client

Q = "cached"


@pytest.fixture
def mono(monkeypatch):
    """The container's cache clock, moved by hand."""
    t = {"now": 1_000.0}
    monkeypatch.setattr(sqs_perm, "monotonic", lambda: t["now"])
    return t


@pytest.fixture
def sqs(aws, api, monkeypatch, mono):
    """The admin's SQS client; ``.p`` / ``.c``: a producer's and a consumer's (clients of the queue)."""
    monkeypatch.setattr(sqs_service, "authenticate_request", fake_auth)
    monkeypatch.setattr(sqs_perm, "CLIENTS_SEEN", {})
    sqs_perm.forget_topics()
    h = Harness()
    admin = h.client("admin")
    admin.create_queue(QueueName=Q)
    make_client("cp", "producer", [Q])
    make_client("cc", "consumer", [Q])
    return admin, h.client("cp"), h.client("cc")


def elsewhere(fn):
    """Run ``fn`` as another container would: this container's topic cache and known clients are
    left as they were."""
    topics, seen = dict(sqs_perm._TOPICS), dict(sqs_perm.CLIENTS_SEEN)
    try:
        return fn()
    finally:
        sqs_perm._TOPICS.clear()
        sqs_perm._TOPICS.update(topics)
        sqs_perm.CLIENTS_SEEN.clear()
        sqs_perm.CLIENTS_SEEN.update(seen)


def delete_and_recreate(admin, api, url):
    elsewhere(lambda: admin.delete_queue(QueueUrl=url))
    s, b = api.call("POST", "/v1/topics", {"name": Q, "queues": 4})  # (the admin function: no SQS cache)
    assert s == 201, b


def warm(sqs) -> tuple[str, str]:
    """A producer's send and a consumer's receive fill the cache. Returns (the queue's URL, the
    received message's handle: in flight)."""
    admin, p, c = sqs
    url = admin.get_queue_url(QueueName=Q)["QueueUrl"]
    p.send_message(QueueUrl=url, MessageBody="old")
    return url, c.receive_message(QueueUrl=url, MaxNumberOfMessages=1)["Messages"][0]["ReceiptHandle"]


def test_sends_and_receives_read_the_topic_once_per_ttl(sqs, mono):
    from tests.crash import CountCalls

    admin, p, c = sqs
    url, held = warm(sqs)
    # (the warm-up's message deleted: its lakeq queue's lock would hide a next message sent there)
    c.delete_message(QueueUrl=url, ReceiptHandle=held)

    def topic_reads(fn) -> int:
        with CountCalls({"SqsFunction"}) as calls:
            fn()
        return sum(1 for x in calls.calls if x.operation == "GetItem" and x.params["TableName"].endswith("topics"))
    assert topic_reads(lambda: p.send_message(QueueUrl=url, MessageBody="a")) == 0
    got = c.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert topic_reads(lambda: c.receive_message(QueueUrl=url, MaxNumberOfMessages=10)) == 0
    assert topic_reads(lambda: c.change_message_visibility(QueueUrl=url, ReceiptHandle=got[0]["ReceiptHandle"],
                                                           VisibilityTimeout=60)) == 0
    assert topic_reads(lambda: c.delete_message(QueueUrl=url, ReceiptHandle=got[0]["ReceiptHandle"])) == 0
    assert topic_reads(lambda: c.delete_message_batch(
        QueueUrl=url, Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got)])) == 0
    assert topic_reads(lambda: admin.send_message(QueueUrl=url, MessageBody="b")) == 1  # (the admin's: read)
    mono["now"] += sqs_perm.TOPIC_CACHE_TTL_S
    assert topic_reads(lambda: p.send_message(QueueUrl=url, MessageBody="c")) == 1  # expired: read again
    assert topic_reads(lambda: p.send_message(QueueUrl=url, MessageBody="d")) == 0


def test_a_stale_send_never_reaches_the_new_incarnation(sqs, api, mono):
    admin, p, c = sqs
    url, _ = warm(sqs)
    delete_and_recreate(admin, api, url)
    # within the cache's life this container still sends into the deleted incarnation's log: SQS's
    # own window after DeleteQueue (the message is lost, as SQS's may be), or is answered that the
    # queue does not exist (a lakeq queue whose chain is empty: its head is read from the queue
    # item, gone with the deleted incarnation)
    try:
        p.send_message(QueueUrl=url, MessageBody="stale")
    except ClientError as e:
        assert e.response["Error"]["Code"] == "AWS.SimpleQueueService.NonExistentQueue"
    mono["now"] += sqs_perm.TOPIC_CACHE_TTL_S
    p.send_message(QueueUrl=url, MessageBody="new")
    assert drain_sqs(c, url) == ["new"]


def test_a_stale_receive_locks_nothing_of_either_incarnation(sqs, api, mono):
    admin, p, c = sqs
    url, _ = warm(sqs)
    p.send_message(QueueUrl=url, MessageBody="old-visible")
    delete_and_recreate(admin, api, url)
    elsewhere(lambda: admin.send_message(QueueUrl=url, MessageBody="new"))  # (another container: the new log)
    got = [m["Body"] for m in c.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])]
    # the copy names the deleted log, whose queue items went with it: nothing to lock (or, when
    # the receive failed on the copy, e.g. the SQS group gone, read again: the new incarnation's)
    assert got in ([], ["new"]), got
    mono["now"] += 60  # (a lock of the new message, if any, ended)
    assert drain_sqs(c, url) == ["new"]


def test_a_deleted_incarnations_handle_touches_nothing_of_the_new_one(sqs, api, mono):
    """Deletes and visibility changes use the copy while every handle names its incarnation: within
    the copy's life a handle of the deleted incarnation settles (if anything) in that incarnation's
    offset records only, answered as SQS answers a stale handle; once the copy expired it is refused."""
    admin, p, c = sqs
    url, old = warm(sqs)
    delete_and_recreate(admin, api, url)
    elsewhere(lambda: admin.send_message(QueueUrl=url, MessageBody="new"))
    for call in (lambda: c.delete_message(QueueUrl=url, ReceiptHandle=old),
                 lambda: c.change_message_visibility(QueueUrl=url, ReceiptHandle=old, VisibilityTimeout=0)):
        try:
            call()
        except ClientError as e:
            assert e.response["Error"]["Code"] in ("ReceiptHandleIsInvalid", "InvalidParameterValue"), e.response
    mono["now"] += sqs_perm.TOPIC_CACHE_TTL_S
    for call in (lambda: c.delete_message(QueueUrl=url, ReceiptHandle=old),
                 lambda: c.change_message_visibility(QueueUrl=url, ReceiptHandle=old, VisibilityTimeout=0),
                 lambda: c.delete_message_batch(QueueUrl=url, Entries=[{"Id": "a", "ReceiptHandle": old}])):
        try:
            r = call()
        except ClientError as e:
            assert e.response["Error"]["Code"] == "ReceiptHandleIsInvalid"
        else:
            assert [f["Code"] for f in r["Failed"]] == ["ReceiptHandleIsInvalid"], r
    assert drain_sqs(c, url) == ["new"]


def test_a_new_incarnations_handle_is_served_while_the_cache_holds_the_old_one(sqs, api, mono):
    """A handle naming another incarnation than the copy's makes the action read the item as stored:
    the new incarnation's messages are deleted (one by one and in a batch), a lock extended."""
    from tests.crash import CountCalls

    admin, p, c = sqs
    url, _ = warm(sqs)
    old_copy = dict(sqs_perm._TOPICS)
    delete_and_recreate(admin, api, url)
    # one receive of both: two sends may land in one lakeq queue, whose lock a second receive of
    # one message could not take (the CI saw that: an empty second receive)
    got = elsewhere(lambda: (admin.send_message(QueueUrl=url, MessageBody="n1"),
                             admin.send_message(QueueUrl=url, MessageBody="n2"),
                             c.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=30))[2])
    h1, h2 = (m["ReceiptHandle"] for m in got["Messages"])
    for call in (lambda: c.delete_message(QueueUrl=url, ReceiptHandle=h1),
                 lambda: c.change_message_visibility(QueueUrl=url, ReceiptHandle=h2, VisibilityTimeout=600),
                 lambda: c.delete_message_batch(QueueUrl=url, Entries=[{"Id": "b", "ReceiptHandle": h2}])):
        sqs_perm._TOPICS.clear()
        sqs_perm._TOPICS.update(old_copy)  # (the copy is the deleted incarnation's)
        with CountCalls({"SqsFunction"}) as calls:
            r = call()
        assert not r.get("Failed"), r
        assert any(x.operation == "GetItem" and x.params["TableName"].endswith("topics") for x in calls.calls)
    mono["now"] += 60
    assert drain_sqs(c, url) == []
    attrs = c.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert (attrs["ApproximateNumberOfMessages"], attrs["ApproximateNumberOfMessagesNotVisible"]) == ("0", "0")


def test_a_delete_after_the_queue_went_elsewhere_answers_that_it_does_not_exist(sqs, api, mono):
    """The queue deleted (not made again) in another container while this one holds a copy: the
    delete fails on the copy (the SQS group went with the queue) and is tried on the stored item."""
    admin, p, c = sqs
    url, old = warm(sqs)
    elsewhere(lambda: admin.delete_queue(QueueUrl=url))
    from lakeq.admin import auth as lq_auth

    lq_auth.forget_client(group_name(Q))  # (this container's client cache expired too)
    with pytest.raises(ClientError) as e:
        c.delete_message(QueueUrl=url, ReceiptHandle=old)
    assert e.value.response["Error"]["Code"] == "AWS.SimpleQueueService.NonExistentQueue"


def test_a_stale_copy_never_makes_the_clients_of_a_deleted_queue_again(sqs, api, mono):
    """A receive (which makes sure of the queue's SQS clients) uses the copy only while the clients of
    its incarnation are known in this container; otherwise it reads the topic item: here, gone."""
    admin, p, c = sqs
    url, _ = warm(sqs)
    elsewhere(lambda: admin.delete_queue(QueueUrl=url))
    sqs_perm.CLIENTS_SEEN.clear()  # (this container's knowledge of the clients expired)
    with pytest.raises(ClientError) as e:
        c.receive_message(QueueUrl=url, MaxNumberOfMessages=1)
    assert e.value.response["Error"]["Code"] == "AWS.SimpleQueueService.NonExistentQueue"
    assert ClientRepo.get(group_name(Q)) is None and ClientRepo.get(producer_name(Q)) is None


def test_this_containers_attribute_changes_are_seen_at_once(sqs, mono):
    admin, p, c = sqs
    url, _ = warm(sqs)
    admin.set_queue_attributes(QueueUrl=url, Attributes={"MaximumMessageSize": "1024"})
    with pytest.raises(ClientError) as e:
        p.send_message(QueueUrl=url, MessageBody="x" * 2000)
    assert e.value.response["Error"]["Code"] == "InvalidParameterValue"
