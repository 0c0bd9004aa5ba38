"""The client's verify_push (clients/python) against the server's signer (lakeq.contract.push)."""
from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from lakeq_client import verify_push, verify_webhook

from lakeq.contract import push as P


@given(secret=st.text(min_size=1, max_size=30), ts=st.integers(10**9, 2 * 10**9), body=st.binary(max_size=200),
       skew=st.integers(-300, 300))
def test_client_verifies_what_the_server_signs(secret, ts, body, skew):
    h = {"X-Lakeq-Signature": P.signature_header([secret], ts, body)}
    assert verify_push(h, body, secret, now=ts + skew)
    assert not verify_push(h, body, secret, now=ts + 301)
    assert not verify_push(h, body + b"!", secret, now=ts)
    assert not verify_push(h, body, secret + "!", now=ts)
    assert not verify_push({}, body, secret, now=ts)


def test_either_secret_of_a_rotation_and_any_header_case():
    h = {"x-lakeq-signature": P.signature_header(["new", "old"], 1_700_000_000, b"{}")}
    assert verify_push(h, "{}", "new", now=1_700_000_000) and verify_push(h, b"{}", "old", now=1_700_000_000)
    assert not verify_push(h, b"{}", "other", now=1_700_000_000)


# --- issue 30.8: forged or malformed headers answer False, never raise ----------------------------------
ANY_CHAR = st.characters(blacklist_categories=())  # surrogates, controls, unicode digits ('²', '١') included
PARTS = st.one_of(st.text(ANY_CHAR, max_size=80), st.sampled_from(["t=", "v1=", ",", "=", "t=²", "t=١٢٣",
                                                                    "t=99999999999999999999999999", "v1=" + "a" * 64,
                                                                    "v1=" + "é" * 64, "t=1700000000", " "]))
HEADER_VALUES = st.one_of(st.lists(PARTS, max_size=8).map("".join), st.binary(max_size=80), st.none(), st.integers())


@given(value=HEADER_VALUES, name=st.sampled_from(["X-Lakeq-Signature", "x-lakeq-signature", "webhook-signature",
                                                  "webhook-timestamp", "webhook-id"]),
       extra=st.dictionaries(st.one_of(st.text(ANY_CHAR, max_size=20), st.integers()), HEADER_VALUES, max_size=3),
       body=st.one_of(st.binary(max_size=50), st.text(ANY_CHAR, max_size=50), st.none(), st.integers()),
       secret=st.one_of(st.text(ANY_CHAR, max_size=50), st.just("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"),
                        st.none()))
def test_any_header_string_answers_a_bool_never_raises(value, name, extra, body, secret):
    headers = {**extra, name: value}
    for verify in (verify_push, verify_webhook):
        assert verify(headers, body, secret, now=1_700_000_000) in (True, False)
        assert verify(headers, body, secret) in (True, False)


@given(ts=st.integers(10**9, 2 * 10**9), body=st.binary(max_size=100), cut=st.integers(0, 200),
       junk=st.text(ANY_CHAR, max_size=10))
def test_a_mangled_genuine_header_is_false(ts, body, cut, junk):
    """A genuine header cut anywhere and/or with anything appended: False unless it still verifies
    as sent (only a cut after the whole value, or junk after a comma that adds no part, can)."""
    secret = "whsec_" + "A" * 43 + "="
    h = P.signature_headers([secret], ts, body, "msg_1")
    for name, verify in (("X-Lakeq-Signature", verify_push), ("webhook-signature", verify_webhook)):
        mangled = h[name][:cut] + junk
        got = verify({**h, name: mangled}, body, secret, now=ts)
        assert got in (True, False)
        if got:
            assert h[name] in mangled  # only the genuine signature itself verifies


def test_the_issues_forged_headers_are_false():
    for value in ("t=²,v1=00", "t=1700000000,v1=é", "t=1700000000,v1=" + "é" * 64, "v1=ab", "t=1700000000",
                  "t=" + "9" * 400 + ",v1=" + "0" * 64, "t=1700000000,v1=" + "0" * 63, "t=-5,v1=" + "0" * 64,
                  "t=0x10,v1=" + "0" * 64, "", ",,,", "t=1700000000,v1=" + "Z" * 64):
        assert verify_push({"X-Lakeq-Signature": value}, b"{}", "whsec_x", now=1_700_000_000) is False, value
    for sig in ("v1,", "v1,é", "v2," + "A" * 43 + "=", "v1," + "A" * 44, "v1 ,x", "\x00"):
        h = {"webhook-id": "msg_1", "webhook-timestamp": "1700000000", "webhook-signature": sig}
        assert verify_webhook(h, b"{}", "whsec_" + "A" * 44, now=1_700_000_000) is False, sig
    assert verify_webhook({"webhook-id": "m", "webhook-timestamp": "1700000000", "webhook-signature": "v1,x"},
                          b"{}", "whsec_!!!", now=1_700_000_000) is False  # a secret that is not base64


# --- issue 30.13: Standard Webhooks ---------------------------------------------------------------------
@given(ts=st.integers(10**9, 2 * 10**9), body=st.binary(max_size=200), skew=st.integers(-300, 300),
       key=st.binary(min_size=16, max_size=40), n=st.integers(1, 3))
def test_the_standard_webhooks_library_verifies_what_the_server_signs(ts, body, skew, key, n):
    import base64
    from datetime import datetime, timezone

    import standardwebhooks

    secrets = [P.new_secret() for _ in range(n - 1)] + ["whsec_" + base64.b64encode(key).decode()]
    h = P.signature_headers(secrets, ts, body, P.webhook_id("subscription", "s", ["a"]))
    assert h["webhook-timestamp"] == str(ts) and len(h["webhook-signature"].split(" ")) == n
    for s in secrets:
        wh = standardwebhooks.Webhook(s)
        assert wh.sign(h["webhook-id"], datetime.fromtimestamp(ts, timezone.utc), body) in h["webhook-signature"]
        assert verify_webhook(h, body, s, now=ts + skew)
        assert not verify_webhook(h, body + b"!", s, now=ts)
        assert not verify_webhook(h, body, s, now=ts + 301)
        assert not verify_webhook({**h, "webhook-id": "msg_2"}, body, s, now=ts)
    assert not verify_webhook(h, body, P.new_secret(), now=ts)


def test_a_secret_issued_before_standard_webhooks_url_safe_verifies_with_the_client():
    legacy = "whsec_" + "-_" * 21 + "A"  # token_urlsafe(32)'s alphabet
    h = P.signature_headers([legacy], 1_700_000_000, b"{}", "msg_1")
    assert verify_webhook(h, b"{}", legacy, now=1_700_000_000)
    assert verify_push(h, b"{}", legacy, now=1_700_000_000)
