"""The client's verify_push (clients/python) against the server's signer (lakeq.contract.push)."""
from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from lakeq_client import verify_push

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
