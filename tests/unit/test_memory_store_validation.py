"""infra/local/dynamo_memory.py validates each call as botocore's client does, walking a params
*form* (keys, list lengths, leaf types, short strings' lengths, numbers) only the first time it is
seen valid. These calls follow a valid one of the same shape and differ only where the validator
looks: each must fail exactly as botocore's own ``validate_parameters`` fails it."""
from __future__ import annotations

import boto3
import pytest
from botocore.exceptions import ParamValidationError
from botocore.validate import validate_parameters

from infra.local import dynamo_memory as M

MODEL = boto3.session.Session(region_name="us-east-1").client(
    "dynamodb", aws_access_key_id="x", aws_secret_access_key="x").meta.service_model
KEY = {"pk": {"S": "a"}}

# (operation, a valid call, calls of the same form but for what the validator checks)
Q = {"TableName": "abc", "IndexName": "abc", "KeyConditionExpression": "pk = :v",
     "ExpressionAttributeValues": {":v": {"S": "a"}}}
CASES = [
    ("GetItem", {"TableName": "abc", "Key": KEY},
     [{"TableName": "", "Key": KEY},  # TableName min 1
      {"TableName": "abc", "Key": {"pk": {"S": 1}}},  # a string's type
      {"TableName": "abc", "Key": {"pk": {"S": b"a"}}},
      {"TableName": "abc", "Key": KEY, "Nope": 1},  # an unknown field
      {"Key": KEY}]),  # a required one missing
    ("Query", {**Q, "Limit": 1},
     [{**Q, "IndexName": "ab", "Limit": 1},  # IndexName min 3: the operation's largest string min
      {**Q, "Limit": 0},  # Limit min 1
      {**Q, "Limit": 1.0}]),
    # a bool passes botocore's integer check (isinstance(True, int)) and its range check by value:
    # Limit=True is valid, Limit=False (0) is under min 1; a form holding only the bool's type let
    # the second through once the first was seen
    ("Query", {**Q, "Limit": True},
     [{**Q, "Limit": False}]),
    ("BatchGetItem", {"RequestItems": {"abc": {"Keys": [KEY]}}},
     [{"RequestItems": {"abc": {"Keys": []}}},  # Keys min 1
      {"RequestItems": {"abc": {"Keys": [KEY, {"pk": {"B": 3}}]}}}]),
]


def _botocore_error(operation, params):
    with pytest.raises(ParamValidationError) as e:
        validate_parameters(params, MODEL.operation_model(operation).input_shape)
    return str(e.value)


@pytest.mark.parametrize("operation,valid,invalid", CASES, ids=[c[0] for c in CASES])
def test_a_form_seen_valid_still_fails_where_botocore_fails(operation, valid, invalid):
    M.validate(MODEL, operation, valid)
    M.validate(MODEL, operation, valid)
    for params in invalid:
        with pytest.raises(ParamValidationError) as e:
            M.validate(MODEL, operation, params)
        assert str(e.value) == _botocore_error(operation, params)


def test_a_form_seen_valid_is_not_walked_again(monkeypatch):
    walks = []
    monkeypatch.setattr(M, "validate_parameters", lambda p, s: walks.append(p))
    params = {"TableName": "a-table-for-this-test", "Key": {"pk": {"S": "some value"}}}
    M.validate(MODEL, "GetItem", params)
    M.validate(MODEL, "GetItem", {"TableName": "a-table-for-this-test", "Key": {"pk": {"S": "another"}}})
    assert len(walks) == 1
