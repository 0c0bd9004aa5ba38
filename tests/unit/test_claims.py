"""lakeq.log.claims (pure, issue 18.2): the claim-check rules, and the limits that make a message of
up to 1 MiB fit a segment item (by claim) and one Lambda response (a single message always fits)."""
from __future__ import annotations

import json

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from lakeq.common.payload import BATCH_BYTES, lambda_bytes
from lakeq.consume.reader import message_out
from lakeq.contract import validation as v
from lakeq.log import claims
from lakeq.log import segments as seg
from lakeq.log.delay_plan import decode_message, encode_message
from lakeq.log.fanout_plan import ListMessage

KIB, MIB = 1024, 1024 * 1024
text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=300)


@given(text, text, text)
def test_a_claim_verifies_its_own_body_and_names_it_by_log_id_and_digest(log, mid, body):
    data = body.encode("utf-8")
    c = claims.make(log, mid, data)
    assert claims.is_claim(c) and c["size"] == len(data)
    assert claims.verify(c, data) == body
    assert c == claims.make(log, mid, data)  # a retried produce: the same object key
    assert c["key"].startswith(claims.PREFIX) and c["key"].endswith(claims.digest(data))


@given(text, st.binary(min_size=1, max_size=200), st.data())
def test_any_other_bytes_are_a_mismatch_never_a_body(mid, data, d):
    c = claims.make("t", mid, data)
    i = d.draw(st.integers(0, len(data) - 1))
    flipped = data[:i] + bytes([data[i] ^ 1]) + data[i + 1:]
    for other in (flipped, data[:-1], data + b"\x00", b""):
        with pytest.raises(claims.ClaimMismatch):
            claims.verify(c, other)


@settings(max_examples=200)
@given(st.lists(st.tuples(st.sampled_from(["t", "t!1", "quotes/sh", "~s1"]), text), min_size=2, max_size=8,
                unique=True))
def test_different_messages_never_share_an_object(pairs):
    keys = {claims.object_key(log, mid, claims.digest(b"same body")) for log, mid in pairs}
    assert len(keys) == len(pairs)


def _stored(m: v.MessageIn, mid: str) -> int:
    msg = seg.Message(id=mid, body=m.body, key=m.key, tags=m.tags, properties=m.properties,
                      produced_at=1_800_000_000_000)
    return len(msg.header()) + len(m.body.encode("utf-8"))


@pytest.mark.parametrize("props", [{}, {"p": "é" * 1000}, {f"k{i}": '"' * 1024 for i in range(8)}])
@pytest.mark.parametrize("given_id", [None, "i" * 200])
def test_every_message_the_old_limit_took_stays_inline(props, given_id):
    """What was valid before issue 18.2 (body <= 256 KiB, everything <= 300 KiB) is stored as then:
    its stored form (the server's id and produced_at added) is never over INLINE_BYTES."""
    m = v.MessageIn(given_id, "", "k" * 256, ["t" * 128] * 16, props)
    m.body = "x" * min(256 * KIB, 300 * KIB - v.message_bytes(m))
    assert v.message_bytes(m) <= 300 * KIB
    stored = _stored(m, given_id or "6c1f8f2e-3a59-4a59-9e4c-7c2b9b1f0a11")
    assert not claims.needs_claim(stored)
    m.body += "x"  # one byte more than the old limit allowed (or than the body limit) goes by claim
    assert v.message_bytes(m) > 300 * KIB or len(m.body) > 256 * KIB
    if v.message_bytes(m) > 300 * KIB:
        assert claims.needs_claim(_stored(m, given_id or "6c1f8f2e-3a59-4a59-9e4c-7c2b9b1f0a11"))


def _claimed(meta_props: dict, body: str) -> seg.Message:
    data = body.encode("utf-8")
    return seg.Message(id="i" * 200, body="", key="k" * 256, tags=["t" * 128] * 16, properties=meta_props,
                       produced_at=1_800_000_000_000, claim=claims.make("topic/" + "x" * 190, "i" * 200, data))


def _meta_at_limit() -> dict:
    """Properties whose metadata (id, key, tags, properties as compact JSON) is at MAX_META_BYTES."""
    props = {f"p{i:02d}": "\x01" * 1024 for i in range(48)}  # \u0001: 6 bytes each in JSON
    base = v.message_bytes(v.MessageIn("i" * 200, "", "k" * 256, ["t" * 128] * 16, props))
    props["pad"] = "y" * (v.MAX_META_BYTES - base - len(',"pad":""'))
    assert v.message_bytes(v.MessageIn("i" * 200, "", "k" * 256, ["t" * 128] * 16, props)) == v.MAX_META_BYTES
    return props


def test_a_claimed_message_and_its_list_copy_fit_a_segment_item():
    m = _claimed(_meta_at_limit(), "z" * MIB)
    assert m.encoded_size() < seg.SEGMENT_DATA_LIMIT
    lm = ListMessage(**{**m.__dict__, "topic": "topic/" + "x" * 190, "queue": 63, "source_offset": 10 ** 15,
                        "dead_letter": {"topic": "t" * 200, "queue": 63, "offset": 10 ** 15, "id": "i" * 200,
                                  "group": "g" * 200, "deliveries": 100, "reason": "rejected", "at": 10 ** 13}})
    assert len(lm.header()) + seg.ENTRY.size < seg.SEGMENT_DATA_LIMIT
    s = seg.encode([m], 0)
    [(_, got)] = list(seg.read(s, 0, 1))
    assert got["claim"] == m.claim and got["body"] == ""
    assert json.loads(lm.header())["claim"] == m.claim
    assert decode_message(encode_message(m)) == m  # a delayed item keeps the claim, not the body


WORST_BODIES = {"quotes": '"' * MIB, "backslashes": "\\" * MIB, "two_byte": "é" * (MIB // 2),
                "astral": "\U0001f600" * (MIB // 4), "newlines": "\n" * MIB}


@pytest.mark.parametrize("kind", sorted(WORST_BODIES))
def test_a_single_message_at_the_limits_always_fits_one_lambda_response(kind):
    """1 MiB of the widest characters JSON has, with the metadata the limits still allow beside it,
    is under the pull's byte budget (6 MiB - 16 KiB) as the python3.11 runtime encodes it.
    (Control characters without a short escape cost 6 bytes each in the request, so a request of at
    most MAX_REQUEST_BYTES holds 500,000 of them: 3.5 MB in the response.)"""
    body = WORST_BODIES[kind]
    room = v.MAX_MESSAGE_BYTES - len(body.encode("utf-8"))  # metadata left beside a full body
    props = {"p": "é" * ((room - 200) // 2)}
    assert v.message_bytes(v.MessageIn("i", body, None, [], props)) <= v.MAX_MESSAGE_BYTES
    out = message_out({"id": "i" * 200, "topic": "t" * 200, "queue": 63, "offset": 10 ** 15, "body": body,
                       "key": "k" * 256, "tags": ["t" * 128] * 16, "properties": props, "produced_at": 10 ** 13})
    assert lambda_bytes(out) < BATCH_BYTES
    # and with a smaller body, metadata up to MAX_META_BYTES of two-byte characters
    props = {f"p{i:02d}": "é" * 1024 for i in range(64)}
    props["pad"] = "é" * ((v.MAX_META_BYTES - v.message_bytes(v.MessageIn("i", "", None, [], props)) - 12) // 2)
    small = body[:(v.MAX_MESSAGE_BYTES - v.MAX_META_BYTES) // 4]
    out = message_out({"id": "i", "body": small, "properties": props})
    assert lambda_bytes(out) < BATCH_BYTES


# --- the SQS endpoint's ReceiveMessage budget (sqs.messages.receive_bytes) ---------------------------
wide = st.text(alphabet=st.sampled_from(list('&<>\r\n"\\\x01aé\U0001f600\t')), min_size=0, max_size=3000)


@settings(max_examples=150)
@example("&" * 3000, {}).via("the widest XML: 5 bytes a character")
@example("<\r" * 1500, {"a&": "&" * 1000}).via("entities in the body and the attributes")
@given(wide, st.dictionaries(st.text(alphabet="ab&<", min_size=1, max_size=5), wide, max_size=3))
def test_receive_bytes_bounds_the_message_in_either_protocol(body, props):
    """A delivered message's bytes inside the Lambda response of a ReceiveMessage (the handler's JSON
    protocol, ``json.dumps(ensure_ascii=False)``, and the query protocol's XML), as the python3.11
    runtime encodes the body once more, are at most receive_bytes of its native form."""
    from lakeq.sqs import protocol as sp
    from lakeq.sqs.messages import receive_bytes
    native = {"id": "6c1f8f2e-3a59-4a59-9e4c-7c2b9b1f0a11", "topic": "q", "queue": 3, "offset": 12345, "body": body,
              "key": None, "tags": [], "properties": props, "produced_at": 1_800_000_000_000, "deliveries": 1}
    attrs = {k: {"DataType": "String", "StringValue": v} for k, v in props.items() if v}
    m = {"MessageId": native["id"], "ReceiptHandle": "h" * 600, "MD5OfBody": sp.md5_hex(body), "Body": body,
         "Attributes": {"SenderId": "123456789012", "SentTimestamp": "1800000000000",
                        "ApproximateReceiveCount": "1", "ApproximateFirstReceiveTimestamp": "1800000000000"}}
    if attrs:
        m["MD5OfMessageAttributes"] = sp.md5_attributes(attrs)
        m["MessageAttributes"] = sp.attributes_out(attrs)
    empty_json = len(json.dumps(json.dumps({"Messages": []}, ensure_ascii=False)))
    as_json = len(json.dumps(json.dumps({"Messages": [m]}, ensure_ascii=False))) - empty_json
    empty_xml = len(json.dumps(sp.xml_response("ReceiveMessage", {"Messages": []}, "r")))
    as_xml = len(json.dumps(sp.xml_response("ReceiveMessage", {"Messages": [m]}, "r"))) - empty_xml
    assert max(as_json, as_xml) <= receive_bytes(native)
