"""SQS credentials (issue 9): the admin routes, their storage, the master secret, the lookup.

- ``POST /v1/clients/{name}/sqs-credentials`` (admin) → 201 ``{"name", "access_key_id",
  "secret_access_key"}``: the secret is shown only here (derived, :mod:`lakeq.sqs.credentials`);
- ``GET /v1/clients/{name}/sqs-credentials`` (admin) → ``{"name", "sqs_credentials":
  [{"access_key_id"}]}``;
- ``DELETE /v1/clients/{name}/sqs-credentials/{access_key_id}`` (admin) → 204;
- ``GET /v1/sqs-credentials/admin`` (admin) → the admin's own credential (derived from the admin
  key and the master, nothing stored).

Storage: the client item's ``sqs_keys`` (JSON list of live ids, at most :data:`MAX_SQS_KEYS`,
changed under the client's ``key_version`` compare-and-set) and one KeysTable item per id
(``key_hash = "sqs:<id>"``, ``client``), written in the same transaction; no secret or secret
material is in any table. The master secret is read from Secrets Manager (``$LAKEQ_SQS_SECRET``,
the secret's ARN) once per container.
"""
from __future__ import annotations

import json
import os
import threading
import time
from typing import Callable

from lakeq.admin.auth import Principal, admin_client, change_key_set, require_admin
from lakeq.common import clock as _clock
from lakeq.common.errors import BadRequest, Conflict, NotFound, Unavailable
from lakeq.common.names import check_name
from lakeq.sqs import credentials as cred
from lakeq.store.records import Client
from lakeq.store.sqs import SqsRepo, key_owner
from lakeq.store.writes import TransactionFailed

MAX_SQS_KEYS = 10  # live SQS credentials per client (as MAX_KEYS for API keys)
SECRET_ENV = "LAKEQ_SQS_SECRET"

# --- the master secret (Secrets Manager), once per container -------------------------------------
_master: bytes | None = None
_master_lock = threading.Lock()


def master_secret() -> bytes:
    """The master secret's bytes (``SecretString``), fetched once per container (GetSecretValue on
    ``$LAKEQ_SQS_SECRET``). 503 when the deployment has none configured."""
    global _master
    if _master is not None:
        return _master
    with _master_lock:
        if _master is None:
            arn = os.environ.get(SECRET_ENV)
            if not arn:
                raise Unavailable(f"SQS credentials are not configured (${SECRET_ENV} is not set)",
                                  code="internal_error")
            # lazily: only the functions that verify or issue SQS credentials need it; botocore's own
            # client, not boto3's (the same client without importing boto3: docs/design.md "Cold start")
            import botocore.session

            sm = botocore.session.get_session().create_client("secretsmanager")
            value = sm.get_secret_value(SecretId=arn)
            text = value.get("SecretString")
            if not text:
                raise Unavailable("the SQS master secret is empty", code="internal_error")
            _master = text.encode("utf-8")
    return _master


# --- access key id → client, cached briefly (as API keys: lakeq.admin.auth.KEY_CACHE_TTL_S) ------------
CACHE_TTL_S = 5.0
CACHE_MAX = 10_000
monotonic: Callable[[], float] = time.monotonic
_cache: dict[str, tuple[str, float]] = {}


def clear_caches() -> None:
    global _master
    _cache.clear()
    _master = None


def client_for(access_key_id: str) -> str | None:
    """The client a live credential was issued to (None: unknown or revoked). One strongly
    consistent GetItem per id and container per :data:`CACHE_TTL_S`."""
    now = monotonic()
    hit = _cache.get(access_key_id)
    if hit is not None and hit[1] > now:
        return hit[0]
    name = key_owner(cred.item_key(access_key_id))
    if name is None:
        _cache.pop(access_key_id, None)
        return None
    if len(_cache) >= CACHE_MAX:
        _cache.clear()
    _cache[access_key_id] = (name, now + CACHE_TTL_S)
    return name


# --- storage -------------------------------------------------------------------------------------
def _live(c: Client) -> list[str]:
    return list(json.loads(c.sqs_keys)) if c.sqs_keys else []


def _set(c: Client, version: int | None, live: list[str], add: str | None = None,
         remove: str | None = None, now: int = 0) -> None:
    """The client's ``sqs_keys`` (CAS on ``key_version``) and the credential item added or removed,
    in one transaction. TransactionFailed index 0: the client is gone or its keys moved meanwhile."""
    SqsRepo.set_credentials(c, version, live, add=(cred.item_key(add), add) if add is not None else None,
                            remove=cred.item_key(remove) if remove is not None else None, now=now)


# --- use cases -----------------------------------------------------------------------------------
def _client(name: str, p: Principal, access_key_id: str | None = None) -> Client:
    """400 (name, id) → 404 (client, credential) → 403 (admin only), API.md's order."""
    check_name(name, "client name")
    if access_key_id is not None and not cred.is_access_key_id(access_key_id):
        raise BadRequest("'access_key_id' must be 'LQAK' followed by 16 characters of A-Z and 2-7")
    return admin_client(p, name, access_key_id, _live, "SQS credential")


def list_credentials(p: Principal, name: str) -> dict:
    c = _client(name, p)
    return {"name": c.name, "sqs_credentials": [{"access_key_id": k} for k in sorted(_live(c))]}


def issue_credential(p: Principal, name: str) -> dict:
    """One more live credential for the client (at most MAX_SQS_KEYS, else 409
    ``too_many_sqs_credentials``); its secret is returned only here."""
    c = _client(name, p)
    master = master_secret()
    akid = cred.new_access_key_id()

    def attempt(c: Client, version: int | None) -> dict:
        nonlocal akid
        live = _live(c)
        if len(live) >= MAX_SQS_KEYS:
            raise Conflict(f"client '{name}' has {len(live)} live SQS credentials (at most {MAX_SQS_KEYS}); "
                           "revoke one first", code="too_many_sqs_credentials")
        try:
            _set(c, version, live + [akid], add=akid, now=_clock.now())
        except TransactionFailed as e:
            if e.failed(1):  # the random id exists (never in practice): draw another
                akid = cred.new_access_key_id()
            raise
        return {"name": c.name, "access_key_id": akid, "secret_access_key": cred.derive_secret(master, akid)}

    return change_key_set(name, c, attempt, retry=lambda e: e.failed(0) or e.failed(1))


def revoke_credential(p: Principal, name: str, access_key_id: str) -> None:
    """Delete the credential: requests signed with it answer InvalidClientTokenId at once in this
    container, within CACHE_TTL_S in other warm ones (the lookup is strongly consistent)."""
    c = _client(name, p, access_key_id)

    def attempt(c: Client, version: int | None) -> None:
        live = _live(c)
        if access_key_id not in live:
            raise NotFound(f"client '{name}' has no live SQS credential '{access_key_id}'")
        live.remove(access_key_id)
        _set(c, version, live, remove=access_key_id)
        _cache.pop(access_key_id, None)

    change_key_set(name, c, attempt)


def admin_hash() -> str | None:
    from lakeq.admin.auth import _admin_hash  # the one place that knows where the admin key's hash comes from

    return _admin_hash()


def admin_credential_id(master: bytes) -> str | None:
    h = admin_hash()
    return cred.admin_access_key_id(master, h) if h else None


def admin_credential(p: Principal) -> dict:
    """``GET /v1/sqs-credentials/admin`` (admin): the admin's SQS credential. Derived, not stored:
    it changes when the admin key or the master secret changes."""
    require_admin(p)
    master = master_secret()
    akid = admin_credential_id(master)
    if akid is None:
        raise Unavailable("no admin key is configured", code="internal_error")
    return {"admin": True, "access_key_id": akid, "secret_access_key": cred.derive_secret(master, akid)}
