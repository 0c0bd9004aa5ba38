"""Issue 31 item 1: the records the repositories return (lakeq.store.records) carry what the models
read, and the queue record's direct decoder reads a raw item as the model does."""
from __future__ import annotations

import dataclasses

import pytest

from lakeq.store.models import ClientModel, QueueModel, TopicModel
from lakeq.store.records import Client, Queue, Topic, queue_from_item, record_of
from lakeq.store.subscriptions import Subscription, SubscriptionModel


@pytest.mark.parametrize("record, model", [(Topic, TopicModel), (Client, ClientModel), (Queue, QueueModel),
                                           (Subscription, SubscriptionModel)])
def test_a_record_has_every_attribute_of_its_model(record, model):
    assert {f.name for f in dataclasses.fields(record)} == set(model.get_attributes())


RAW_QUEUE_ITEMS = [
    {"pq": {"S": "t#0"}, "topic": {"S": "t"}, "queue": {"N": "0"}, "max_offset": {"N": "5"},
     "min_offset": {"N": "2"}, "last_produced_at": {"N": "1764000000000"}},
    {"pq": {"S": "t!3#7"}},  # nothing but the key: the model's defaults
    {"pq": {"S": "t#1"}, "topic": {"S": "t"}, "queue": {"N": "1"}, "max_offset": {"N": "9"},
     "next_due": {"N": "1764000000500"}},  # the promoter's projection
    {"pq": {"S": "~r.x#0"}, "topic": {"S": "~r.x"}, "queue": {"N": "0"}, "max_offset": {"N": "3"},
     "min_offset": {"N": "0"}, "last_produced_at": {"N": "0"}, "next_due": {"NULL": True}, "delayed": {"N": "0"},
     "dver": {"N": "12"}, "rpos": {"N": "40"}, "ended_at": {"N": "1.5"}, "other": {"S": "ignored"}},
]


@pytest.mark.parametrize("item", RAW_QUEUE_ITEMS)
def test_the_queue_decoder_reads_a_raw_item_as_the_model_does(item):
    want = record_of(Queue, QueueModel.from_raw_data(item))
    got = queue_from_item(item)
    assert dataclasses.asdict(got) == dataclasses.asdict(want)
    assert [type(v) for v in dataclasses.astuple(got)] == [type(v) for v in dataclasses.astuple(want)]


def test_topic_and_client_records_are_frozen_and_read_like_their_models():
    t = record_of(Topic, TopicModel("a/b", queues=4, created_at=1, inc=2))
    assert (t.name, t.queues, t.inc, t.parent, t.deleted_at) == ("a/b", 4, 2, None, None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.queues = 5
    c = record_of(Client, ClientModel("g", role="consumer", topics=["a/b"], key_hash="h", created_at=1))
    assert (c.mode, c.visibility_timeout_ms, c.topics, c.push, c.replays) == ("clustering", 30_000, ["a/b"], None, None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.push = "{}"
    q = queue_from_item(RAW_QUEUE_ITEMS[0])
    q.max_offset = 6  # a pull moves a queue record's head in memory
    assert q.max_offset == 6
