"""Who is calling the SQS-compatible endpoint: SigV4 with lakeq-issued SQS credentials.

:func:`authenticate` ``(method, path, query, headers, body) -> Principal`` is what the SQS handler
calls first (contract: ``/work/helpers/sqs_auth_contract.md``, docs/api.md "SQS credentials and
signatures"):

1. the signature is parsed (:func:`lakeq.sqs.sigv4.parse`: header or presigned form);
2. the request time must be within 15 minutes of now (``RequestExpired``);
3. the access key id names the admin's derived credential (→ ``Principal(admin=True)``) or a live
   client credential (→ ``Principal(admin=False, client=<name>)``), else ``InvalidClientTokenId``;
4. the signature must be the one the credential's secret gives (``SignatureDoesNotMatch``; the
   scope's service must be ``sqs``, any region is accepted).

With ``LAKEQ_SQS_ANY_SIGNATURE=1`` (set only by the local stack's conformance flag, never in
template.yaml) steps 2 and 4 are skipped: any well-formed signature is accepted, a known access
key id acts as its client and an unknown one as the admin.
"""
from __future__ import annotations

import os
import time
from typing import Callable, Mapping

from lakeq.admin.auth import Principal
from lakeq.common.errors import LakeqError
from lakeq.sqs import credentials as cred
from lakeq.sqs import keys as sqs_keys
from lakeq.sqs import sigv4

ANY_SIGNATURE_ENV = "LAKEQ_SQS_ANY_SIGNATURE"
wall_clock: Callable[[], float] = time.time  # seconds; tests patch it

# code → (HTTP status, the JSON protocol's __type), as AWS answers them
_STATUS = {
    "MissingAuthenticationToken": (403, "com.amazon.coral.service#MissingAuthenticationTokenException"),
    "IncompleteSignature": (400, "com.amazon.coral.service#IncompleteSignatureException"),
    "InvalidClientTokenId": (403, "com.amazon.coral.service#UnrecognizedClientException"),
    "SignatureDoesNotMatch": (403, "com.amazon.coral.service#InvalidSignatureException"),
    "RequestExpired": (400, "com.amazon.coral.service#InvalidSignatureException"),
}


class SqsAuthError(LakeqError):
    """An SQS request that is not authenticated. ``code``: the legacy (query) code botocore reports;
    ``status``: the HTTP status; ``json_type``: the JSON protocol's ``__type``."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message
        self.status, self.json_type = _STATUS[code]


def any_signature() -> bool:
    return os.environ.get(ANY_SIGNATURE_ENV, "").strip().lower() in ("1", "true", "yes")


def _principal_for(akid: str, master: bytes | None) -> Principal | None:
    if akid.startswith(cred.ADMIN_PREFIX) and master is not None:
        if akid == sqs_keys.admin_credential_id(master):
            return Principal(admin=True)
        return None
    if not cred.is_access_key_id(akid):
        return None
    name = sqs_keys.client_for(akid)
    return None if name is None else Principal(admin=False, client=name)


def authenticate(method: str, path: str, query: str | None, headers: Mapping[str, str] | None,
                 body: bytes | str | None) -> Principal:
    """The principal a signed SQS request acts as (see the module docstring). ``path`` and
    ``query`` are the raw (still percent-encoded) ``rawPath`` / ``rawQueryString``; ``body`` the
    exact bytes (base64-decoded when the event says so)."""
    query = query or ""
    headers = sigv4.lower_headers(headers)
    try:
        sig = sigv4.parse(query, headers)
        if any_signature():
            known = cred.is_access_key_id(sig.access_key_id) and sig.access_key_id.startswith(cred.CLIENT_PREFIX)
            name = sqs_keys.client_for(sig.access_key_id) if known else None
            return Principal(admin=False, client=name) if name else Principal(admin=True)
        sigv4.check_time(sig, wall_clock())
        master = sqs_keys.master_secret()
        p = _principal_for(sig.access_key_id, master)
        if p is None:
            raise SqsAuthError("InvalidClientTokenId", "The security token included in the request is invalid.")
        sigv4.verify(sig, cred.derive_secret(master, sig.access_key_id), method, path or "/", query,
                     headers, body, service="sqs")
        return p
    except sigv4.SigV4Error as e:
        raise SqsAuthError(e.code, e.message) from None
