"""lakeq.common.payload (pure): the response encoding and the byte budget of a pull's batch."""
from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from lakeq.common.payload import BATCH_BYTES, LAMBDA_RESPONSE_LIMIT, ByteBudget, dumps, lambda_bytes
from lakeq.log.selection import ack_key, kept_acks

text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=200)
message = st.fixed_dictionaries({"id": text, "body": text, "key": st.none() | text,
                                 "tags": st.lists(text, max_size=3),
                                 "properties": st.dictionaries(text, text | st.integers() | st.booleans(), max_size=3)})


@given(message)
def test_lambda_bytes_is_the_size_inside_the_python311_runtime_document(m):
    body = dumps(m)
    assert json.loads(body) == m
    runtime = json.dumps({"body": body})  # the python3.11 runtime: ensure_ascii=True
    assert lambda_bytes(m) == len(runtime.encode()) - len('{"body": ""}')
    assert lambda_bytes(m) >= len(body.encode("utf-8"))  # also bounds the UTF-8 body itself


@settings(max_examples=50)
@given(st.lists(message, min_size=1, max_size=30), st.integers(min_value=1, max_value=3000))
def test_budget_admits_a_prefix_that_fits_and_always_one(msgs, limit):
    b = ByteBudget(limit)
    taken = []
    for m in msgs:
        if not b.take(m):
            break
        taken.append(m)
    assert len(taken) >= 1
    size = sum(lambda_bytes(m) + 1 for m in taken)
    assert len(taken) == 1 or size <= limit
    if len(taken) < len(msgs):  # stopped only because the next one did not fit
        assert size + lambda_bytes(msgs[len(taken)]) + 1 > limit


def test_the_budget_leaves_room_for_the_envelope():
    assert BATCH_BYTES < LAMBDA_RESPONSE_LIMIT
    assert dumps({"a": "é€😀"}) == '{"a":"é€😀"}'


def test_kept_acks():
    keys = [ack_key(i, i + 1, 100 + i) for i in range(10)]
    assert keys[0] == "0:1:100"
    assert kept_acks(keys[:8], 8) is None
    assert kept_acks(keys[:9], 8) == keys[1:9]
    assert kept_acks(tuple(keys), 3) == keys[7:]
