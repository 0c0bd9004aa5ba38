"""Push delivery (issue 17): a subscription's endpoint (the routes' use cases) and the deliverer.

Nothing about pull changes: the deliverer takes a batch from the subscription's list with the very
pull loop (:func:`lakeq.consume.reader.consume` over a :class:`~lakeq.consume.reader.ListLog`, one
conditional write locks it, ``deliveries`` counted and ``max_deliveries`` dead-lettered by the
same settlement state machine), POSTs it signed, and then

- 2xx: acknowledges the batch (:func:`lakeq.consume.settle.settle`, as ``POST /v1/acks``);
- anything else, a timeout, a connection error: sets the lock's expiry to the next attempt
  (:func:`lakeq.consume.settle.visibility`, as ``POST /v1/visibility``), so the batch is served
  again — by whichever invocation comes first after that — with its ``deliveries`` counted; the
  messages that reached the endpoint's ``retry.max_attempts`` are rejected (dead-lettered at once,
  as a pull's ``reject``).

A delivery whose lock expired while it waited (a slow endpoint) finds its receipt stale and leaves
the batch to the delivery that took it over (at-least-once). Only one batch of a subscription is
in flight at a time (its list is one queue with one lock), so a subscription's messages arrive in
list order except for retries.
"""
from __future__ import annotations

import contextvars
import json
import logging
import os
import secrets as secrets_mod
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

from lakeq.admin.auth import Principal
from lakeq.common import clock
from lakeq.common.errors import BadRequest, Conflict, Forbidden, LakeqError, NotFound, StaleReceipt
from lakeq.common.names import check_name, is_name
from lakeq.consume import settle as settling
from lakeq.consume.reader import ListLog, consume, list_reader
from lakeq.contract import push as contract
from lakeq.contract import validation as v
from lakeq.log.receipts import parse as parse_receipt
from lakeq.log.receipts import subscription_field
from lakeq.log.settlement import Outcomes
from lakeq.store.push import PushRepo
from lakeq.store.repos import OffsetRepo
from lakeq.store.subscriptions import SubscriptionModel, list_owner, list_topic
from lakeq.subscriptions.service import policy as sub_policy

log = logging.getLogger("lakeq.push.service")

ENV_LOOPBACK = "LAKEQ_PUSH_ALLOW_HTTP_LOOPBACK"  # set by infra.local only
ROTATE_KEEP_MAX_MS, ROTATE_KEEP_DEFAULT_MS = 7 * 86_400_000, 86_400_000
LOCK_MARGIN_MS = 5_000      # the batch's lock outlives the request's timeout by this much
ENDPOINT_BUDGET_S = 20.0    # one invocation starts no new batch for an endpoint after this
MAX_RESPONSE_BYTES = 64 * 1024
STALE = "the push batch's lock was taken over"


def allow_loopback() -> bool:
    return os.environ.get(ENV_LOOPBACK) == "1"


# --- registration ---------------------------------------------------------------------------------
def _sub(p: Principal, sub_id: str, need_push: bool = True) -> SubscriptionModel:
    s = PushRepo.get(sub_id) if is_name(sub_id) else None
    if s is None:
        raise NotFound(f"subscription '{sub_id}' does not exist")
    if not p.may_act_as(s.subscriber):
        raise Forbidden(f"this key may not act for '{s.subscriber}'")
    if need_push and s.push is None:
        raise NotFound(f"subscription '{sub_id}' has no push endpoint")
    return s


def _secrets(raw: str | None, now: int) -> list[dict]:
    """The still-valid secrets, newest first."""
    return [x for x in json.loads(raw or "[]") if x.get("expires_at") is None or x["expires_at"] > now]


def _new_secret() -> str:
    return "whsec_" + secrets_mod.token_urlsafe(32)


def view(s: SubscriptionModel, now: int | None = None) -> dict:
    now = clock.now() if now is None else now
    settings = json.loads(s.push)
    last = json.loads(s.push_state) if s.push_state else {}
    return {"subscription": s.id, **settings, "paused": bool(s.push_paused),
            "secrets": [{"created_at": x["created_at"], "expires_at": x.get("expires_at")}
                        for x in _secrets(s.push_secrets, now)],
            "state": {"last_status": last.get("last_status"), "last_attempt_at": last.get("last_attempt_at"),
                      "next_attempt_at": last.get("next_attempt_at"), "failures": int(s.push_failures or 0),
                      "delivered": int(s.push_delivered or 0), "dead_lettered": int(s.push_dead_lettered or 0)}}


def put(p: Principal, sub_id: str, raw: str | None) -> tuple[dict, int]:
    """``PUT /v1/subscriptions/{id}/push``: register (201, with the signing secret, shown only here)
    or replace the settings (200; the secrets, pause and state are kept)."""
    check_name(sub_id, "subscription id")
    settings = contract.push_settings(v.json_body(raw), allow_loopback())
    s = _sub(p, sub_id, need_push=False)
    now = clock.now()
    new = s.push is None
    secret = _new_secret() if new else None
    encoded = contract.encode(settings)
    stored = json.dumps([{"secret": secret, "created_at": now, "expires_at": None}]) if new else None
    if not PushRepo.put(sub_id, encoded, stored):
        raise NotFound(f"subscription '{sub_id}' does not exist")
    s.push = encoded
    if new:
        s.push_secrets, s.push_paused, s.push_state = stored, False, None
        s.push_failures = s.push_delivered = s.push_dead_lettered = None
    out = view(s, now)
    if new:
        out["secret"] = secret
    return out, 201 if new else 200


def get(p: Principal, sub_id: str) -> dict:
    check_name(sub_id, "subscription id")
    return view(_sub(p, sub_id))


def delete(p: Principal, sub_id: str) -> None:
    check_name(sub_id, "subscription id")
    _sub(p, sub_id)
    if not PushRepo.remove(sub_id):
        raise NotFound(f"subscription '{sub_id}' has no push endpoint")


def pause(p: Principal, sub_id: str, paused: bool) -> dict:
    check_name(sub_id, "subscription id")
    s = _sub(p, sub_id)
    if not PushRepo.set_paused(sub_id, paused):
        raise NotFound(f"subscription '{sub_id}' has no push endpoint")
    s.push_paused = paused
    return view(s)


def rotate(p: Principal, sub_id: str, raw: str | None) -> dict:
    """``POST /v1/subscriptions/{id}/push/secret`` ``{"previous_valid_ms"}`` (0–7 days, default 1 day):
    a new secret (shown only here) signs from now on; the newest previous one stays valid (and
    signs too) for ``previous_valid_ms``; older ones end."""
    check_name(sub_id, "subscription id")
    body = v.json_body(raw or "{}")
    if set(body) - {"previous_valid_ms"}:
        raise BadRequest("a rotation takes only 'previous_valid_ms'")
    keep = body.get("previous_valid_ms", ROTATE_KEEP_DEFAULT_MS)
    if isinstance(keep, bool) or not isinstance(keep, int) or not 0 <= keep <= ROTATE_KEEP_MAX_MS:
        raise BadRequest(f"'previous_valid_ms' must be an integer from 0 to {ROTATE_KEEP_MAX_MS}")
    for _ in range(5):
        s = _sub(p, sub_id)
        now = clock.now()
        old = _secrets(s.push_secrets, now)
        prev = [] if not old or keep == 0 else [{**old[0], "expires_at": min(now + keep, old[0].get("expires_at")
                                                                              or now + keep)}]
        secret = _new_secret()
        new = json.dumps([{"secret": secret, "created_at": now, "expires_at": None}] + prev)
        if PushRepo.set_secrets(sub_id, s.push_secrets, new):
            s.push_secrets = new
            return {**view(s, now), "secret": secret}
    raise Conflict("the endpoint's secrets changed meanwhile; retry")  # pragma: no cover


# --- delivery -------------------------------------------------------------------------------------
# (url, headers, body, timeout seconds) -> (HTTP status or None for a timeout / connection error, body)
Poster = Callable[[str, dict, bytes, float], "tuple[int | None, bytes]"]


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):  # a 3xx is an answer (a failed delivery), not followed
        return None


_opener = urllib.request.build_opener(_NoRedirect)


def http_poster(url: str, headers: dict, body: bytes, timeout_s: float) -> tuple[int | None, bytes]:
    req = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with _opener.open(req, timeout=timeout_s) as r:
            return r.status, r.read(MAX_RESPONSE_BYTES)
    except urllib.error.HTTPError as e:
        return e.code, b""
    except (urllib.error.URLError, OSError, ValueError) as e:  # timeouts, refused, reset, DNS
        log.info("push failed to connect", extra={"url": url, "error": repr(e)})
        return None, b""


@dataclass
class Delivered:
    """What one endpoint's run did."""

    batches: int = 0
    delivered: int = 0
    failed: int = 0
    dead_lettered: int = 0
    stale: int = 0
    statuses: list = field(default_factory=list)


def _claim(sub_id: str, batch_size: int, rate: float, deadline: float) -> tuple[int, int] | None:
    """Claim the endpoint's next sending slot (``batch_size`` messages' worth of ``rate``), waiting
    for it while this run's budget allows; (its start, its end), or None (not within the budget)."""
    while True:
        now = clock.now()
        until = now + contract.slot_ms(batch_size, rate)
        if PushRepo.claim(sub_id, now, until):
            return now, until
        at = PushRepo.send_at(sub_id)
        wait_s = 0.0 if at is None else max(at - now, 1) / 1000
        if time.monotonic() + wait_s >= deadline:
            return None
        time.sleep(wait_s)


class _Settled(LakeqError):  # noqa: N818 - control flow inside deliver: nothing left to retry
    """A 2xx answer's outcomes settled the batch (nothing released): no retry to schedule."""


def _lock_state(owner: str):
    """The list's settlement state (:class:`lakeq.log.settlement.State`; None: no record)."""
    rec = OffsetRepo.get(owner, 0)
    return None if rec is None else OffsetRepo.view_of(rec).state()


def deliver(sub_id: str, poster: Poster | None = None, budget_s: float = ENDPOINT_BUDGET_S,
            max_batches: int | None = None) -> Delivered:
    """Push a subscription's servable messages, batch after batch, until its list has nothing
    servable, a delivery fails, or ``budget_s`` has passed (no new batch is started after it).
    ``poster``: how to POST (default :func:`http_poster`, looked up at call time); ``max_batches``:
    stop after that many requests."""
    poster = poster or http_poster
    out = Delivered()
    s = PushRepo.get(sub_id)
    if s is None or s.push is None or s.push_paused:
        return out
    cfg = json.loads(s.push)
    retry = cfg["retry"]
    pol = sub_policy(s)
    lt, owner = list_topic(sub_id), list_owner(sub_id)
    deadline = time.monotonic() + budget_s
    timeout_ms = cfg["timeout_ms"]
    rate = cfg.get("rate")
    while time.monotonic() < deadline and (max_batches is None or out.batches < max_batches):
        claimed = None
        if rate is not None:  # a rate-limited endpoint: take the next sending slot first
            claimed = _claim(sub_id, cfg["batch_size"], rate, deadline)
            if claimed is None:
                break
        req = v.PullRequest(group=None, client_id=None, member_id=None, max=cfg["batch_size"], wait_ms=0,
                            tags=None, ack=None)
        got = consume(ListLog(lt, owner, {"group": s.subscriber, "topic": lt}, subscription_field(sub_id)),
                      timeout_ms + LOCK_MARGIN_MS, req, None, policy=pol)
        msgs = got["messages"]
        if claimed is not None:  # the slot, as used: from this send on, for the messages it carries
            start, until = claimed
            PushRepo.move_slot(sub_id, until, clock.now() + contract.slot_ms(len(msgs), rate) if msgs else start)
        if not msgs:
            break
        receipt = parse_receipt(got["receipt"])
        body = json.dumps({"subscription": sub_id, "topic": s.topic, "receipt": got["receipt"],
                           "messages": msgs}, separators=(",", ":")).encode("utf-8")
        now = clock.now()
        signing = [x["secret"] for x in _secrets(s.push_secrets, now)]
        headers = {**cfg["headers"], "Content-Type": "application/json", "User-Agent": "lakeq-push/1",
                   "X-Lakeq-Subscription": sub_id,
                   contract.SIGNATURE_HEADER: contract.signature_header(signing, now // 1000, body)}
        status, answer = poster(cfg["url"], headers, body, timeout_ms / 1000)
        out.batches += 1
        out.statuses.append(status)
        now = clock.now()
        outcomes = contract.response_outcomes(answer, len(msgs)) if status is not None and 200 <= status < 300 \
            else contract.FAILED
        ok = outcomes is not contract.FAILED
        delivered = dead = 0
        next_at = None
        stop = True
        try:
            if outcomes is None:  # a 2xx: the whole batch
                settling.settle(owner, 0, receipt, Outcomes(), pol, list_reader(lt), now, STALE)
                delivered, stop = len(msgs), False
            else:
                st = _lock_state(owner)
                if st is None or st.lock_ts != receipt.timestamp or len(st.batch) != len(msgs):
                    raise StaleReceipt(STALE)
                if ok:  # a 2xx with per-message outcomes (positions in the request's messages)
                    offs = sorted(st.batch)  # the messages are in log-offset order
                    rel = {offs[i] for i in outcomes.release}
                    rej = tuple(offs[i] for i in sorted(outcomes.reject))
                    acc = tuple(o for o in offs if o not in rel and o not in rej)
                    settling.settle(owner, 0, receipt, Outcomes(accept=acc, reject=rej), pol, list_reader(lt),
                                    now, STALE)
                    delivered, dead = len(acc), len(rej)
                    st = _lock_state(owner)
                    if not rel or st is None or st.lock_ts != receipt.timestamp:
                        stop = False
                        raise _Settled()
                else:
                    out.failed += 1
                # what is still held (all of a failed batch, the released part of a partial one)
                nxt = contract.after_failure({o: st.pend.get(o, 0) for o in st.held}, retry)
                if nxt.reject:
                    settling.settle(owner, 0, receipt, Outcomes(accept=(), reject=nxt.reject), pol,
                                    list_reader(lt), now, STALE)
                    dead += len(nxt.reject)
                if nxt.delay_ms is None:
                    stop = False
                else:
                    next_at = now + nxt.delay_ms
                    if not settling.visibility(owner, 0, receipt, next_at, now):
                        raise StaleReceipt(STALE)
        except _Settled:
            pass
        except StaleReceipt:  # our lock ended and another delivery took the batch: it settles it
            out.stale += 1
            stop = True
        out.delivered += delivered
        out.dead_lettered += dead
        PushRepo.record(sub_id, json.dumps({"last_status": status, "last_attempt_at": now, "next_attempt_at": next_at},
                                           separators=(",", ":")), ok, delivered, dead)
        if stop:
            break
    return out


def deliver_all(sub_ids: list[str], poster: Poster | None = None, budget_s: float = ENDPOINT_BUDGET_S,
                workers: int = 16) -> dict[str, Delivered]:
    """:func:`deliver` for each subscription, in parallel threads (a slow endpoint delays no other:
    each is bounded by its own budget plus one request's timeout)."""
    ids = list(dict.fromkeys(sub_ids))
    if not ids:
        return {}
    with ThreadPoolExecutor(max_workers=min(workers, len(ids))) as ex:
        # each thread runs in a copy of the caller's context (context variables such as the local
        # stack's acting-as-function marker, which its IAM rules check, are not inherited otherwise)
        futures = {i: ex.submit(contextvars.copy_context().run, deliver, i, poster, budget_s) for i in ids}
    out = {}
    for i, f in futures.items():
        try:
            out[i] = f.result()
        except Exception:  # noqa: BLE001 - one endpoint's store error must not stop the others
            log.exception("push delivery failed", extra={"subscription": i})
    return out


def subscriptions_of_records(records: list[dict]) -> list[str]:
    """Subscription ids whose lists got a segment: INSERT records with ``pq = "~<id>#0"``."""
    out = []
    for r in records:
        if r.get("eventName") != "INSERT":
            continue
        pq = (((r.get("dynamodb") or {}).get("Keys") or {}).get("pq") or {}).get("S") or ""
        if pq.startswith("~") and "#" in pq:
            out.append(pq[1:].split("#", 1)[0])
    return list(dict.fromkeys(out))


def sweep(poster: Poster | None = None, budget_s: float = ENDPOINT_BUDGET_S) -> dict[str, Delivered]:
    """The scheduled run: every active endpoint (due retries, anything the stream missed)."""
    return deliver_all(PushRepo.active_ids(), poster, budget_s)
