"""BatchGetItem's UnprocessedKeys (a throttled table, an answer past 16 MB): asked again with the one
backoff, and a table that keeps holding keys back answers 503 ``busy`` after CAS_ATTEMPTS rounds
instead of looping until the function's timeout (review_h noticed the loops had no bound)."""
from __future__ import annotations

import pytest

from lakeq.common import backoff
from lakeq.common.errors import Unavailable
from lakeq.store import queue_log


class FakeClient:
    """A BatchGetItem that holds every key back ``held`` times, then answers them all."""

    def __init__(self, held: int):
        self.held, self.calls = held, 0

    def batch_get_item(self, RequestItems):  # noqa: N803 - botocore's name
        self.calls += 1
        if self.calls <= self.held:
            return {"Responses": {}, "UnprocessedKeys": RequestItems}
        return {"Responses": {t: [dict(k) for k in r["Keys"]] for t, r in RequestItems.items()},
                "UnprocessedKeys": {}}


@pytest.fixture(autouse=True)
def no_waits(monkeypatch):
    waits = []
    monkeypatch.setattr(backoff, "sleep", lambda n, base=0, cap=0: waits.append((n, base, cap)))
    return waits


REQ = {"T1": {"Keys": [{"pq": {"S": "a"}}], "ConsistentRead": True},
       "T2": {"Keys": [{"name": {"S": "b"}}], "ConsistentRead": True}}


def test_keys_held_back_are_asked_again_until_answered(no_waits):
    c = FakeClient(held=3)
    got = queue_log._batch_get_tables(c, REQ)
    assert got == {"T1": [{"pq": {"S": "a"}}], "T2": [{"name": {"S": "b"}}]}
    assert c.calls == 4 and [n for n, _, _ in no_waits] == [0, 1, 2]
    assert {(b, cap) for _, b, cap in no_waits} == {(0.01, 1.0)}  # a throttle's waits, not a CAS's


def test_a_table_that_keeps_holding_keys_back_answers_503_after_the_one_bound(no_waits):
    c = FakeClient(held=10**9)
    with pytest.raises(Unavailable) as e:
        queue_log._batch_get_tables(c, REQ)
    assert (e.value.status, e.value.code) == (503, "busy")
    assert c.calls == backoff.CAS_ATTEMPTS


def test_the_model_batch_get_is_bounded_too(monkeypatch, no_waits):
    """``_batch_get`` (pynamodb's connection): the same rounds and the same bound, per page."""
    calls = []

    class Conn:
        def batch_get_item(self, page, consistent_read=False, attributes_to_get=None):
            calls.append(len(page))
            return {"Responses": {}, "UnprocessedKeys": {"T": {"Keys": page}}}

    class Model:
        class Meta:
            table_name = "T"

        @staticmethod
        def _get_connection():
            return Conn()
    with pytest.raises(Unavailable):
        queue_log._batch_get(Model, [{"pq": "a", "base": 1}])
    assert len(calls) == backoff.CAS_ATTEMPTS


def test_no_store_code_asks_pynamodbs_unbounded_batch_get():
    """pynamodb's ``Model.batch_get`` asks UnprocessedKeys again at once and without bound: every
    BatchGetItem goes through queue_log's loop (``batch_get_models``, ``_batch_get``)."""
    import re
    from pathlib import Path

    root = Path(queue_log.__file__).parents[1]
    found = [f"{p.relative_to(root)}:{n}" for p in root.rglob("*.py")
             for n, line in enumerate(p.read_text().splitlines(), 1)
             if re.search(r"\.batch_get\(", line) and "``" not in line]
    assert found == [], found


def test_batch_get_models_asks_each_key_once_and_builds_the_models(monkeypatch):
    from lakeq.store.models import DedupModel

    asked = []

    def fake(model, keys, consistent=False, attributes=None):
        asked.append((model, keys, consistent, attributes))
        return [{"topic": {"S": "t"}, "id": {"S": "a"}, "queue": {"N": "2"}, "offset": {"N": "7"}}]
    monkeypatch.setattr(queue_log, "_batch_get", fake)
    got = queue_log.batch_get_models(DedupModel, [("t", "a"), ("t", "b"), ("t", "a")], consistent=True)
    assert asked == [(DedupModel, [{"topic": "t", "id": "a"}, {"topic": "t", "id": "b"}], True, None)]
    assert [(m.topic, m.id, int(m.queue), int(m.offset)) for m in got] == [("t", "a", 2, 7)]
