"""SQS credentials, the pure part: access key ids and the secrets derived from the master secret.

An SQS credential is an (access key id, secret access key) pair that an AWS SDK signs requests
with (SigV4, :mod:`lakeq.sqs.sigv4`). lakeq stores no secret: the secret of an access key id is
``base64url(HMAC-SHA256(master, "lakeq-sqs-secret:" + access key id))``, the master secret living
in AWS Secrets Manager. The table keeps only which client an access key id was issued to, so
revoking is deleting that item; rotating the master secret changes every secret at once.

- client credentials: ``LQAK`` + 16 random characters of ``A-Z2-7`` (20 characters, AWS's shape);
- the admin's credential: ``LQAD`` + 16 characters derived from the master and the sha-256 of
  the admin key, so it needs no item and changes when the admin key (or the master) changes.

>>> derive_secret(b"m", "LQAKAAAAAAAAAAAAAAAA")
'fF5_GpjpAh3H1fV2PBjXqzNdKZWIxe-bBCTWB4lQv4o'
>>> admin_access_key_id(b"m", "ab" * 32)
'LQAD2335K6TTLHPABOHQ'
>>> is_access_key_id(new_access_key_id()), is_access_key_id("AKIAIOSFODNN7EXAMPLE")
(True, False)
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets

CLIENT_PREFIX = "LQAK"
ADMIN_PREFIX = "LQAD"
_B32 = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
_ID = re.compile(r"^LQA[KD][A-Z2-7]{16}$")
ITEM_PREFIX = "sqs:"  # a credential's KeysTable key (API keys' are sha-256 hex: no ':')


def new_access_key_id() -> str:
    return CLIENT_PREFIX + "".join(secrets.choice(_B32) for _ in range(16))


def is_access_key_id(value: object) -> bool:
    return isinstance(value, str) and bool(_ID.match(value))


def _mac(master: bytes, msg: str) -> bytes:
    return hmac.new(master, msg.encode("utf-8"), hashlib.sha256).digest()


def derive_secret(master: bytes, access_key_id: str) -> str:
    """The secret access key of ``access_key_id`` (43 URL-safe characters)."""
    return base64.urlsafe_b64encode(_mac(master, "lakeq-sqs-secret:" + access_key_id)).decode("ascii").rstrip("=")


def admin_access_key_id(master: bytes, admin_key_sha256: str) -> str:
    """The admin's access key id: from the master secret and the admin key's sha-256 hex."""
    return ADMIN_PREFIX + base64.b32encode(_mac(master, "lakeq-sqs-admin:" + admin_key_sha256.lower()))[:16].decode()


def item_key(access_key_id: str) -> str:
    """The KeysTable ``key_hash`` of a client credential's item."""
    return ITEM_PREFIX + access_key_id
