"""The wake-up API's wiring in template.yaml (as the local stack reads it) and the local RFC 6455 codec."""
from __future__ import annotations

import doctest
import io
import os

from hypothesis import given
from hypothesis import strategies as st

from infra.local import template as T
from infra.local import websocket as W


def test_websocket_api_routes_from_the_template(template):
    [api] = W.websocket_apis(template)
    assert api.logical_id == "WakeApi" and api.selection == "action" and api.stage == "ws"
    assert {k: s.logical_id for k, s in api.routes.items()} == {
        "$connect": "WakeFunction", "$disconnect": "WakeFunction", "watch": "WakeFunction",
        "ping": "WakeFunction", "$default": "WakeFunction"}
    assert api.responds == {"watch", "ping", "$default"}  # $connect/$disconnect answer nobody


def test_notifier_is_scoped_and_fast(template):
    res = template["Resources"]
    specs = {f.logical_id: f for f in T.functions(template)}
    [ev] = specs["NotifyFunction"].stream_events
    assert ev.table == "SegmentsTable" and ev.batching_window_s == 0 and ev.starting_position == "LATEST"
    assert 0 <= ev.maximum_retry_attempts <= 3 and ev.maximum_record_age_s <= 300
    props = res["NotifyFunction"]["Properties"]["Events"]["Segments"]["Properties"]
    assert props["FilterCriteria"] == {"Filters": [{"Pattern": '{"eventName": ["INSERT"]}'}]}
    stmts = [s for pol in res["NotifyFunction"]["Properties"]["Policies"] for s in pol["Statement"]]
    manage = [s for s in stmts if "execute-api:ManageConnections" in s["Action"]]
    assert manage == [{"Effect": "Allow", "Action": ["execute-api:ManageConnections"], "Resource": {"Fn::Sub":
                       "arn:${AWS::Partition}:execute-api:${AWS::Region}:${AWS::AccountId}:${WakeApi}/${WakeStage}"
                       "/POST/@connections/*"}}]
    assert all(s["Resource"] == {"Fn::GetAtt": ["WatchersTable", "Arn"]} for s in stmts if s is not manage[0])
    # nobody else may post to connections
    for lid, r in res.items():
        if r.get("Type") == "AWS::Serverless::Function" and lid != "NotifyFunction":
            assert "ManageConnections" not in str(r["Properties"].get("Policies")), lid
    env = specs["NotifyFunction"].environment
    assert env["LAKEQ_WS_ENDPOINT"] == "https://local.execute-api.us-east-1.amazonaws.com/ws"
    assert env["WATCHERS_TABLE"] == specs["WakeFunction"].environment["WATCHERS_TABLE"] == "lakeq-local-watchers"


def test_watchers_table_has_ttl(template):
    p = template["Resources"]["WatchersTable"]["Properties"]
    assert p["TimeToLiveSpecification"] == {"AttributeName": "expires_at", "Enabled": True}
    assert [k["AttributeName"] for k in p["KeySchema"]] == ["k", "c"]


def test_codec_doctests():
    assert doctest.testmod(W).failed == 0


@given(st.binary(max_size=70_000), st.sampled_from([W.OP_TEXT, W.OP_PING, W.OP_CLOSE]), st.booleans())
def test_frames_round_trip(payload, op, masked):
    data = W.frame(op, payload, os.urandom(4) if masked else None)
    assert W.read_frame(io.BytesIO(data)) == (True, op, payload)


def test_fragmented_message_and_control_frames_between():
    seen = []
    f = io.BytesIO(bytes([0x01, 3]) + b"abc" + W.frame(W.OP_PING, b"p") + bytes([0x80, 2]) + b"de")
    assert W.read_message(f, lambda op, d: seen.append((op, d)) or False) == (W.OP_TEXT, b"abcde")
    assert seen == [(W.OP_PING, b"p")]
