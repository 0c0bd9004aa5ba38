"""Issue 14 item 1: a deleted queue leaves nothing behind. After SQS ``DeleteQueue``, the name made
again through SQS ``CreateQueue`` or ``POST /v1/topics`` (and grown with ``PATCH /v1/topics``) starts
empty: no old message, delayed message, deduplication id or receipt of the deleted queue reaches the
new one (docs/design.md "Queue lifecycle: deletion and incarnations")."""
from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from lakeq.log.produce_plan import queue_for_key
from lakeq.produce import delayed
from lakeq.sqs import handler as sqs_service
from lakeq.sqs import permissions as sqs_perm
from tests.history import path
from tests.integration.sqs_harness import Harness, drain_sqs, fake_auth

Q = "jobs"


@pytest.fixture
def sqs(aws, api, monkeypatch):
    monkeypatch.setattr(sqs_service, "authenticate_request", fake_auth)
    monkeypatch.setattr(sqs_perm, "CLIENTS_SEEN", {})
    return Harness().client("admin")


def client(api, name, role, topic=Q):
    s, b = api.call("POST", "/v1/clients", {"name": name, "role": role, "topics": [topic],
                                            "visibility_timeout_ms": 30_000})
    assert s == 201, b
    return b["api_key"]


def keys_per_queue(n):
    """A message key landing on each of queues 0..n-1."""
    out, i = {}, 0
    while len(out) < n:
        out.setdefault(queue_for_key(f"k{i}", n), f"k{i}")
        i += 1
    return [out[q] for q in range(n)]


def produce(api, key, messages, topic=Q):
    s, b = api.call("POST", path(topic), {"producer": "feed", "messages": messages}, key=key)
    assert s == 200, b
    return b["results"]


def pull(api, key, group, topic=Q, **q):
    s, b = api.call("GET", path(topic), query={"group": group, "max": 100, **q}, key=key)
    assert s == 200, b
    return b


def drain_native(api, key, group, topic=Q):
    """Every message a group is served (acknowledged as it goes)."""
    out = []
    for _ in range(20):
        b = pull(api, key, group, topic)
        if not b["messages"]:
            return out
        out += [m["body"] for m in b["messages"]]
        s, r = api.call("POST", "/v1/acks", {"group": group, "receipt": b["receipt"]}, key=key)
        assert s == 200, r
    return out


def recreate(how, api, sqs, queues=4, name=Q, attributes=None):
    if how == "sqs":
        return sqs.create_queue(QueueName=name, Attributes=attributes or {})["QueueUrl"]
    s, b = api.call("POST", "/v1/topics", {"name": name, "queues": queues})
    assert s == 201, b
    return sqs.get_queue_url(QueueName=name)["QueueUrl"]


@pytest.mark.parametrize("how", ["sqs", "native"])
def test_recreated_queue_serves_no_old_message(api, sqs, how):
    url = sqs.create_queue(QueueName=Q)["QueueUrl"]
    feed = client(api, "feed", "producer")
    old = client(api, "old", "consumer")  # a group that outlives the queue (its offset record too)
    produce(api, feed, [{"body": f"old{i}", "key": k} for i, k in enumerate(keys_per_queue(4))])
    b = pull(api, old, "old")  # the old group read part of the log: its record survives the delete
    assert b["messages"]
    assert api.call("POST", "/v1/acks", {"group": "old", "receipt": b["receipt"]}, key=old)[0] == 200
    sqs.send_message(QueueUrl=url, MessageBody="old-sqs")
    sqs.delete_queue(QueueUrl=url)

    url = recreate(how, api, sqs)
    fresh = client(api, "fresh", "consumer")
    assert drain_native(api, fresh, "fresh") == []
    assert drain_native(api, old, "old") == []
    assert drain_sqs(sqs, url) == []
    produce(api, feed, [{"body": "new", "key": "k0"}])
    assert drain_native(api, fresh, "fresh") == ["new"]
    assert drain_native(api, old, "old") == ["new"]
    assert drain_sqs(sqs, url) == ["new"]
    s, d = api.call("GET", f"/v1/topics/{Q}")
    assert s == 200 and d["produced"] == 1, d


def test_grow_after_delete_starts_empty(api, sqs):
    url = sqs.create_queue(QueueName=Q)["QueueUrl"]  # 4 lakeq queues
    feed = client(api, "feed", "producer")
    produce(api, feed, [{"body": f"old{q}", "key": k} for q, k in enumerate(keys_per_queue(4))])
    sqs.delete_queue(QueueUrl=url)
    assert api.call("POST", "/v1/topics", {"name": Q, "queues": 1})[0] == 201
    assert api.call("PATCH", f"/v1/topics/{Q}", {"queues": 4})[0] == 200
    g = client(api, "g", "consumer")
    assert drain_native(api, g, "g") == []
    s, d = api.call("GET", f"/v1/topics/{Q}")
    assert s == 200 and [q["max_offset"] for q in d["queue_offsets"]] == [0, 0, 0, 0], d
    results = produce(api, feed, [{"body": f"new{q}", "key": k} for q, k in enumerate(keys_per_queue(4))])
    assert [(r["queue"], r["offset"]) for r in results] == [(0, 0), (1, 0), (2, 0), (3, 0)]
    assert sorted(drain_native(api, g, "g")) == ["new0", "new1", "new2", "new3"]


@pytest.mark.parametrize("how", ["sqs", "native"])
@pytest.mark.parametrize("promoter", ["pull", "sweep"])
def test_delayed_messages_of_a_deleted_queue_are_never_delivered(api, sqs, clock, how, promoter):
    url = sqs.create_queue(QueueName=Q)["QueueUrl"]
    feed = client(api, "feed", "producer")
    keys = keys_per_queue(4)
    produce(api, feed, [{"body": f"old{q}", "key": k, "delay_ms": 60_000} for q, k in enumerate(keys)])
    sqs.send_message(QueueUrl=url, MessageBody="old-sqs", DelaySeconds=60)
    sqs.delete_queue(QueueUrl=url)
    url = recreate(how, api, sqs)
    produce(api, feed, [{"body": f"new{q}", "key": k, "delay_ms": 60_000} for q, k in enumerate(keys)])
    clock.t += 60_000
    if promoter == "sweep":
        delayed.sweep()
    g = client(api, "g", "consumer")
    assert sorted(drain_native(api, g, "g")) == ["new0", "new1", "new2", "new3"]
    assert sorted(drain_sqs(sqs, url)) == ["new0", "new1", "new2", "new3"]


@pytest.mark.parametrize("how", ["sqs", "native"])
def test_fifo_dedup_ids_of_a_deleted_queue_do_not_count(api, sqs, how):
    name = "f.fifo"
    attrs = {"FifoQueue": "true", "ContentBasedDeduplication": "true"}
    url = sqs.create_queue(QueueName=name, Attributes=attrs)["QueueUrl"]
    a = sqs.send_message(QueueUrl=url, MessageBody="a", MessageGroupId="g", MessageDeduplicationId="d1")
    b = sqs.send_message(QueueUrl=url, MessageBody="b", MessageGroupId="g")  # content-based
    sqs.delete_queue(QueueUrl=url)
    if how == "sqs":
        url = sqs.create_queue(QueueName=name, Attributes=attrs)["QueueUrl"]
    else:
        assert api.call("POST", "/v1/topics", {"name": name, "queues": 4})[0] == 201
        url = sqs.get_queue_url(QueueName=name)["QueueUrl"]
        sqs.set_queue_attributes(QueueUrl=url, Attributes={"ContentBasedDeduplication": "true"})
    a2 = sqs.send_message(QueueUrl=url, MessageBody="a", MessageGroupId="g", MessageDeduplicationId="d1")
    b2 = sqs.send_message(QueueUrl=url, MessageBody="b", MessageGroupId="g")
    assert a2["MessageId"] != a["MessageId"] and b2["MessageId"] != b["MessageId"]
    assert drain_sqs(sqs, url) == ["a", "b"]


def test_native_message_id_seen_before_deletion_is_stored(api, sqs):
    assert api.call("POST", "/v1/topics", {"name": Q, "queues": 2})[0] == 201
    feed = client(api, "feed", "producer")
    first = produce(api, feed, [{"id": "m1", "body": "before"}])[0]
    assert first["offset"] is not None
    sqs.delete_queue(QueueUrl=sqs.get_queue_url(QueueName=Q)["QueueUrl"])
    assert api.call("POST", "/v1/topics", {"name": Q, "queues": 2})[0] == 201
    again = produce(api, feed, [{"id": "m1", "body": "after"}])[0]
    assert again["offset"] == 0
    g = client(api, "g", "consumer")
    assert drain_native(api, g, "g") == ["after"]


@pytest.mark.parametrize("how", ["sqs", "native"])
def test_old_receipts_do_not_touch_the_new_incarnation(api, sqs, clock, how):
    """A receipt (native) or receipt handle (SQS) from before the deletion acknowledges, settles or
    changes the visibility of nothing in the queue made again (the clock stands still, so the new
    locks have the very timestamps, offsets and lengths the old ones had)."""
    url = sqs.create_queue(QueueName=Q)["QueueUrl"]
    feed = client(api, "feed", "producer")
    old = client(api, "old", "consumer")
    k0 = keys_per_queue(4)[0]
    produce(api, feed, [{"body": "old", "key": k0}])
    r_old = pull(api, old, "old")["receipt"]
    sqs.send_message(QueueUrl=url, MessageBody="old-sqs")
    h_old = [m["ReceiptHandle"] for m in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]]
    sqs.delete_queue(QueueUrl=url)

    url = recreate(how, api, sqs)
    produce(api, feed, [{"body": "new", "key": k0}])
    r_new = pull(api, old, "old")["receipt"]
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert [m["Body"] for m in got] == ["new"]
    # native: ack, settle, visibility with the old receipt: refused, nothing moves
    for body in ({"group": "old", "receipt": r_old}, {"group": "old", "receipt": r_old, "accept": [0]},
                 {"group": "old", "receipt": r_old, "release": [0]}):
        s, _ = api.call("POST", "/v1/acks", body, key=old)
        assert s in (404, 409), (body, s)
    s, _ = api.call("POST", "/v1/visibility", {"group": "old", "receipt": r_old, "visibility_timeout_ms": 0}, key=old)
    assert s in (404, 409), s
    s, off = api.call("GET", "/v1/groups/old/offsets", query={"topic": Q}, key=old)
    assert s == 200 and off["backlog"] == 1 and sum(q["committed_offset"] for q in off["queues"]) == 0, off
    assert pull(api, old, "old")["messages"] == []  # still locked by r_new
    assert api.call("POST", "/v1/acks", {"group": "old", "receipt": r_new}, key=old)[0] == 200
    # SQS: delete / change visibility with the old handle: nothing happens to the new message
    for h in h_old:
        for call in (lambda: sqs.delete_message(QueueUrl=url, ReceiptHandle=h),
                     lambda: sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=h, VisibilityTimeout=0)):
            try:
                call()
            except ClientError:
                pass
    assert "Messages" not in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)  # still in flight
    sqs.delete_message(QueueUrl=url, ReceiptHandle=got[0]["ReceiptHandle"])
    clock.t += 60_000
    assert drain_sqs(sqs, url) == []


def test_delete_queue_crash_anywhere_then_retry_never_serves_old_data(api, sqs, clock):
    """A crash right after any store call of DeleteQueue (tests/crash.py): the queue is either still
    there whole (its messages and delayed messages served as before) or deleted, and the client's
    retry finishes the deletion (the deleted queue's delayed items go too); the queue made again
    (POST /v1/topics here; its next incarnation) serves nothing of the old one, to an old group
    either, also once the old delayed messages are due."""
    from lakeq.store.models import DelayedModel
    from tests.crash import CrashAfter

    sqs.create_queue(QueueName=Q)
    feed = client(api, "feed", "producer")
    old = client(api, "old", "consumer")
    keys = keys_per_queue(4)
    for k in range(1, 40):
        clock.t += 1_000_000
        url = sqs.create_queue(QueueName=Q)["QueueUrl"]  # (made again through the API at the end of the last round)
        produce(api, feed, [{"body": f"old{q}", "key": key} for q, key in enumerate(keys)]
                + [{"body": f"late{q}", "key": key, "delay_ms": 60_000} for q, key in enumerate(keys)])
        with CrashAfter(k, {"SqsFunction"}) as hook:
            fired, _ = hook.run(lambda: sqs.delete_queue(QueueUrl=url))
        s, _ = api.call("GET", f"/v1/topics/{Q}")
        if s == 200:  # died before the deletion's transaction: the queue is whole
            b = pull(api, old, "old")
            assert b["messages"], k
            assert api.call("POST", "/v1/visibility", {"group": "old", "receipt": b["receipt"],
                                                       "visibility_timeout_ms": 0}, key=old)[0] == 200
        try:
            sqs.delete_queue(QueueUrl=url)  # the client's retry
        except ClientError as e:
            assert e.response["Error"]["Code"] == "AWS.SimpleQueueService.NonExistentQueue", k
        assert not list(DelayedModel.scan()), k  # the retry finished what the crash left
        assert api.call("POST", "/v1/topics", {"name": Q, "queues": 4})[0] == 201
        clock.t += 120_000
        assert drain_native(api, old, "old") == [], k
        produce(api, feed, [{"body": "new", "key": keys[0]}])
        assert drain_native(api, old, "old") == ["new"], k
        assert drain_sqs(sqs, url) == ["new"], k
        if not fired:
            break
    assert k >= 5


@pytest.mark.usefixtures("fresh_matcher")
@pytest.mark.parametrize("before", [True, False])
@pytest.mark.moto  # reads DynamoDB Streams
def test_subscription_gets_the_recreated_topics_messages(api, sqs, aws, before):
    """Sibling: a subscription made while the deleted topic had messages recorded that topic's
    heads (its start); the fan-out's list entries are keyed by source queue and base. Neither may
    make the subscription skip the new incarnation's messages (which start again at offset 0)."""
    from infra.local.streams import StreamPump
    from tests.handlers import load_function

    def pump():
        p = StreamPump(stack_name="lakeq-local", dynamodb_client=aws["dynamodb"],
                       streams_client_=aws["dynamodbstreams"],
                       handlers={"FanoutFunction": load_function("FanoutFunction")})
        p.mappings = [m for m in p.mappings if m.spec.logical_id == "FanoutFunction"]
        assert p.drain(30)[0]

    def drain_sub(sid, key):
        got, receipt = [], None
        for _ in range(20):
            s, b = api.call("GET", f"/v1/subscriptions/{sid}/messages",
                            query={"max": 100, **({"ack": receipt} if receipt else {})}, key=key)
            assert s == 200, b
            if not b["messages"]:
                return got
            got += [(m["body"], m["topic"]) for m in b["messages"]]
            receipt = b["receipt"]
        return got

    url = sqs.create_queue(QueueName=Q)["QueueUrl"]
    feed = client(api, "feed", "producer")
    risk = client(api, "risk", "consumer")
    keys = keys_per_queue(4)
    if before:  # the subscription's start records these queues' heads
        produce(api, feed, [{"body": f"before{q}", "key": k} for q, k in enumerate(keys)])
    s, sub = api.call("POST", "/v1/subscriptions", {"subscriber": "risk", "topic": Q}, key=risk)
    assert s == 201, sub
    produce(api, feed, [{"body": f"old{q}", "key": k} for q, k in enumerate(keys)])
    pump()
    assert sorted(drain_sub(sub["id"], risk)) == [(f"old{q}", Q) for q in range(4)]
    sqs.delete_queue(QueueUrl=url)
    assert api.call("POST", "/v1/topics", {"name": Q, "queues": 4})[0] == 201
    produce(api, feed, [{"body": f"new{q}", "key": k} for q, k in enumerate(keys)])  # offsets 0 again
    pump()
    assert sorted(drain_sub(sub["id"], risk)) == [(f"new{q}", Q) for q in range(4)]


def test_a_deleted_topic_is_absent_everywhere(api, sqs):
    """Sibling: every check that a topic exists treats the deleted topic's tombstone as absent."""
    assert api.call("POST", "/v1/topics", {"name": Q, "queues": 2})[0] == 201
    sqs.delete_queue(QueueUrl=sqs.get_queue_url(QueueName=Q)["QueueUrl"])
    assert api.call("GET", f"/v1/topics/{Q}")[0] == 404
    assert Q not in [t["name"] for t in api.call("GET", "/v1/topics")[1]["topics"]]
    assert api.call("PATCH", f"/v1/topics/{Q}", {"queues": 4})[0] == 404
    assert api.call("POST", "/v1/topics", {"name": f"{Q}/child", "queues": 1})[0] == 404
    s, _ = api.call("POST", "/v1/clients", {"name": "c", "role": "consumer", "topics": [Q]})
    assert s == 404
    assert "QueueUrls" not in sqs.list_queues()
    with pytest.raises(ClientError):
        sqs.get_queue_url(QueueName=Q)
    with pytest.raises(ClientError):
        sqs.delete_queue(QueueUrl=url_of(Q))
    # made again: one topic, listed once, with a child allowed again
    assert api.call("POST", "/v1/topics", {"name": Q, "queues": 2})[0] == 201
    assert api.call("POST", "/v1/topics", {"name": Q, "queues": 2})[0] == 409
    assert [t["name"] for t in api.call("GET", "/v1/topics")[1]["topics"]] == [Q]
    assert api.call("POST", "/v1/topics", {"name": f"{Q}/child", "queues": 1})[0] == 201


def url_of(name):
    from tests.integration.sqs_harness import BASE
    return f"{BASE}/123456789012/{name}"


@pytest.mark.parametrize("how", ["sqs", "native"])
def test_a_pull_acking_a_new_incarnations_receipt_on_an_old_copy_of_the_topic(api, sqs, clock, monkeypatch, how):
    """The native pull takes the topic item from the container's copy (< 1.5 s old, LogRepo.topic),
    which another container's DeleteQueue and re-create do not drop. A pull whose ``ack`` names the
    newer incarnation than that copy (a receipt another container's pull just gave) is not
    refused as stale: the receipt is the stored topic's, so the pull reads the topic item again and
    the ack settles (the message is not served twice)."""
    from lakeq.store import queue_log

    monkeypatch.setattr(queue_log, "_monotonic", lambda: 1_000.0)  # the copy never ages here
    url = sqs.create_queue(QueueName=Q)["QueueUrl"]
    feed = client(api, "feed", "producer")
    g = client(api, "g", "consumer")
    produce(api, feed, [{"body": "old"}])
    assert [m["body"] for m in pull(api, g, "g")["messages"]] == ["old"]
    this_container = dict(queue_log._TOPIC_SEEN)  # the copy of the old incarnation
    assert Q in this_container
    sqs.delete_queue(QueueUrl=url)
    recreate(how, api, sqs)  # in another container, as the pull and produce below
    produce(api, feed, [{"body": "new"}])
    queue_log._TOPIC_SEEN.pop(Q, None)
    b = pull(api, g, "g")
    assert [m["body"] for m in b["messages"]] == ["new"]
    queue_log._TOPIC_SEEN.update(this_container)  # the next pull lands on the container with the old copy
    s, out = api.call("GET", path(Q), query={"group": "g", "max": 100, "ack": b["receipt"]}, key=g)
    assert s == 200 and out["messages"] == [], (s, out)
    clock.t += 60_000  # past the visibility timeout: an unacknowledged "new" would be served again
    assert drain_native(api, g, "g") == []
