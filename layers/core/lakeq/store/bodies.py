"""Message bodies kept in the lake bucket by claim check (issue 18.2; the rules in :mod:`lakeq.log.claims`).

One object per big message under ``bodies/`` in ``LAKE_BUCKET``: PutObject before the segment (or
delayed item) that names it is written, GetObject when a reader delivers it. S3 through one botocore
client per container, made on first use (not boto3: it would load s3transfer too; docs/design.md
"Cold start"), so a function that never meets a big message never creates it. Small messages cost
no S3 call anywhere.
"""
from __future__ import annotations

import logging
import os
from dataclasses import replace

from lakeq.log import claims
from lakeq.log import segments as seg
from lakeq.store.clients import client

logger = logging.getLogger("lakeq.store.bodies")
# what S3 answers a CopyObject whose source is missing: NoSuchKey to a caller allowed s3:ListBucket,
# AccessDenied (403) to any other
_SOURCE_GONE = ("NoSuchKey", "404", "NotFound", "AccessDenied", "403")


def _client():
    return client("s3")


def s3_client():
    """The container's one S3 client (botocore), made on first use; shared with
    :mod:`lakeq.store.replays`."""
    return _client()


def _bucket() -> str:
    return os.environ["LAKE_BUCKET"]


class BodyStore:
    """PutObject / GetObject of claimed bodies (``bodies/<hash of log and id>/<sha-256>``)."""

    @staticmethod
    def put(claim: dict, data: bytes) -> None:
        """Store body bytes ``data`` under ``claim["key"]`` (one PutObject; the same key again for a
        retried message: it overwrites the same bytes)."""
        _client().put_object(Bucket=_bucket(), Key=claim["key"], Body=data,
                             ContentType="application/octet-stream")

    @staticmethod
    def claim_checked(log: str, msg: seg.Message) -> seg.Message:
        """``msg`` as it is stored: itself (it already carries a claim, or fits inline), or, when its
        stored form is over :data:`lakeq.log.claims.INLINE_BYTES`, with its body put in the lake
        bucket first (one PutObject, before any write that names it: a crash after it leaves only an
        object the bucket's lifecycle removes) and a claim in its place (issue 18.2). The produce path
        and the replay's copies (whose longer derived id can push a copy over) both store this way."""
        if msg.claim is not None:
            return msg
        data = msg.body.encode("utf-8")
        if not claims.needs_claim(len(msg.header()) + len(data)):
            return msg
        claim = claims.make(log, msg.id, data)
        BodyStore.put(claim, data)
        return replace(msg, body="", claim=claim)

    @staticmethod
    def renewed(log: str, message_id: str, claim: dict) -> dict:
        """The claim of a *copy* (message ``message_id`` of ``log``: a replay's or a redrive's) of a
        body another message's ``claim`` names: the same bytes under the copy's own key (one
        CopyObject inside the bucket, before the write that names it, as :meth:`claim_checked`'s put),
        so the copy's object lives as long as a new message's — the bucket's lifecycle removes
        ``bodies/`` objects by age, and a copy naming the original's object (a replay of a message
        made 399 days ago) would lose its body within days, its pulls failing on
        :class:`lakeq.log.claims.ClaimMissing`. The same copy again (a retried chunk) copies to the
        same key. When the original's object is already gone the copy keeps what is left: its own
        object if an earlier attempt made it (a chunk copied again after a crash; one HeadObject),
        else the claim as it is (nothing is left to copy; a pull of the copy then fails as a pull of
        the original would). S3 tells a missing source as ``NoSuchKey`` only to a caller allowed
        ``s3:ListBucket``, which these functions are not (it would let them list the whole lake):
        ``AccessDenied`` is read the same way, never raised, so one expired body cannot stall a
        replay or a redrive; a real denial then also keeps the claim, logged."""
        from botocore.exceptions import ClientError

        key = claims.object_key(log, message_id, claim["sha256"])
        if key == claim["key"]:
            return claim
        try:
            _client().copy_object(Bucket=_bucket(), Key=key, CopySource={"Bucket": _bucket(), "Key": claim["key"]},
                                  MetadataDirective="COPY")
        except ClientError as e:
            code = e.response.get("Error", {}).get("Code")
            if code not in _SOURCE_GONE:
                raise
            try:
                _client().head_object(Bucket=_bucket(), Key=key)
            except ClientError:
                logger.warning("body object %s could not be copied (%s): the copy %s keeps its claim",
                            claim["key"], code, message_id)
                return claim
        return {**claim, "key": key}

    @staticmethod
    def stored_copy(log: str, msg: seg.Message) -> seg.Message:
        """A copy ``msg`` of ``log`` as it is stored: a claim it carries :meth:`renewed`, else
        :meth:`claim_checked` (a body that does not fit inline put under the copy's key)."""
        if msg.claim is not None:
            return replace(msg, claim=BodyStore.renewed(log, msg.id, msg.claim))
        return BodyStore.claim_checked(log, msg)

    @staticmethod
    def get(claim: dict) -> str:
        """The body ``claim`` names (one GetObject), checked against its size and digest:
        :class:`lakeq.log.claims.ClaimMismatch` when it differs, :class:`lakeq.log.claims.ClaimMissing`
        when the object is gone."""
        from botocore.exceptions import ClientError

        try:
            obj = _client().get_object(Bucket=_bucket(), Key=claim["key"])
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") in ("NoSuchKey", "404", "NotFound"):
                raise claims.ClaimMissing(f"body object {claim['key']} is gone from the lake bucket") from None
            raise
        return claims.verify(claim, obj["Body"].read())
