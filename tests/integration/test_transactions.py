"""Cancellation reasons come back in the order the items were added (pynamodb reorders them)."""
from lakeq.store.repos import TopicRepo, TransactionFailed


def test_existing_child_topic_is_409_not_404(api):
    assert api.call("POST", "/v1/topics", {"name": "quotes"})[0] == 201
    assert api.call("POST", "/v1/topics", {"name": "quotes/sh", "queues": 2})[0] == 201
    s, b = api.call("POST", "/v1/topics", {"name": "quotes/sh", "queues": 2})
    assert s == 409 and b["error"]["code"] == "topic_exists"
    try:
        TopicRepo.create("quotes/sh", 2, "quotes", 1)
    except TransactionFailed as e:  # topic put, parent check, queue puts — as added
        assert e.reasons[:2] == ["ConditionalCheckFailed", None]


def test_concurrent_growth_is_detected_on_the_count(api):
    assert api.call("POST", "/v1/topics", {"name": "t", "queues": 2})[0] == 201
    TopicRepo.grow("t", 2, 3)
    try:
        TopicRepo.grow("t", 2, 4)  # the count is no longer 2
        raise AssertionError("grow on a stale count succeeded")
    except TransactionFailed as e:
        assert e.reasons[0] == "ConditionalCheckFailed"
