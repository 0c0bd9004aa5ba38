"""Wake-ups for waiting consumers over API Gateway WebSocket (issue 16 item 2): the use cases.

- :func:`connect` (``$connect``): the key authenticated as any request (401 refuses the upgrade,
  nothing stored), counted against its client's open connections (at most
  :data:`~lakeq.wake.plan.MAX_CONNECTIONS`; 409 ``too_many_connections`` refuses it, nothing
  stored), then one connection item;
- :func:`watch` (a ``{"action": "watch", ...}`` message): checked as a pull of the same topic and
  group (or of the subscription) would be — 400, 404, 403 in API.md's order, nothing stored on a
  refusal — then the watcher item (and the watch key added to the connection item);
- :func:`disconnect` (``$disconnect``): the connection's items deleted;
- :func:`notify` (SegmentsTable's stream): one Query per woken topic, one PostToConnection per
  watching connection per stream batch (:func:`lakeq.wake_plan.coalesce`), posted concurrently by a
  bounded pool within one deadline for the batch; a connection API Gateway says is gone (410
  ``GoneException``) loses its items.

Nothing here moves an offset or a lock: a wake-up is a hint; a lost one costs the consumer latency
(until its fallback pull), never a message. Rules in :mod:`lakeq.wake_plan` (pure).
"""
from __future__ import annotations

import logging
from typing import Callable, Mapping

from lakeq.admin.auth import Principal, authenticate, authorize, client_or_404, topic_or_404
from lakeq.common import backoff, clock
from lakeq.common.errors import ApiError, BadRequest, Conflict, Forbidden, NotFound, Unavailable, http_error
from lakeq.common.names import is_name
from lakeq.store.watchers import WatcherRepo
from lakeq.wake import plan
from lakeq.wake.notify import delete_watches

log = logging.getLogger("lakeq.wake")

Post = Callable[[str, bytes], str]  # (connection id, data) -> "ok" | "gone" | "error"


# --- $connect / watch / $disconnect ---------------------------------------------------------------
class TooManyConnections(Conflict):
    code = "too_many_connections"


def connect(connection_id: str, headers: Mapping[str, str] | None) -> tuple[Principal, str | None]:
    """Authenticate a ``$connect`` (401 → the handshake is refused), count it against its client's
    :data:`~lakeq.wake.plan.MAX_CONNECTIONS` (409 ``too_many_connections`` → refused, nothing
    stored) and store the connection. Returns the principal and the subprotocol to select
    (``None``: select none)."""
    authorization, subprotocol = plan.key_from_request(headers)
    p = authenticate(authorization)
    _admit(p, connection_id)
    WatcherRepo.save_connection(plan.connection_key(connection_id), plan.CONNECTION_SORT, p.admin, p.client,
                                plan.ITEM_TTL_S)
    return p, subprotocol


def _admit(p: Principal, connection_id: str) -> None:
    """Add the connection to its client's open ones (a conditional write on the item's version,
    read again when another connect or disconnect of that client moved it)."""
    key = plan.count_key(p.admin, p.client)
    for attempt in range(8):
        conns, version = WatcherRepo.connections_of(key, plan.CONNECTION_SORT)
        now_s = clock.now() // 1000
        new = plan.admit(conns, connection_id, now_s, plan.ITEM_TTL_S, plan.MAX_CONNECTIONS)
        if new is None:
            raise TooManyConnections(f"this client has {plan.MAX_CONNECTIONS} open WebSocket connections, "
                                     "the most it may hold: close one first")
        if WatcherRepo.put_connections(key, plan.CONNECTION_SORT, new, version, plan.ITEM_TTL_S):
            return
        backoff.sleep(attempt)
    raise Unavailable("too many connects of this client at once; retry")


def _release(admin: bool, client: str | None, connection_id: str) -> None:
    """Take the connection out of its client's open ones (best effort: its entry expires anyway)."""
    key = plan.count_key(admin, client)
    for attempt in range(8):
        conns, version = WatcherRepo.connections_of(key, plan.CONNECTION_SORT)
        if version is None or connection_id not in conns:
            return
        left = {c: e for c, e in conns.items() if c != connection_id}
        if WatcherRepo.put_connections(key, plan.CONNECTION_SORT, left, version, plan.ITEM_TTL_S):
            return
        backoff.sleep(attempt)


def _principal(connection_id: str) -> Principal:
    c = WatcherRepo.connection(plan.connection_key(connection_id), plan.CONNECTION_SORT)
    if c is None:
        raise Gone(f"connection '{connection_id}' is not known (connect again)")
    return Principal(admin=bool(c.admin), client=c.client)


class Gone(ApiError):
    status, code = 410, "gone"


def authorize_watch(p: Principal, w: plan.Watch) -> None:
    """What a pull of ``w`` checks, in the same order: 404 (topic, group / subscription), 403."""
    if w.subscription is not None:
        from lakeq.store.subscriptions import SubscriptionRepo  # only subscription watches need it

        s = SubscriptionRepo.get(w.subscription) if is_name(w.subscription) else None
        if s is None:
            raise NotFound(f"subscription '{w.subscription}' does not exist")
        if not p.may_act_as(s.subscriber):
            raise Forbidden(f"this key may not act for '{s.subscriber}'")
        return
    topic_or_404(str(w.topic))
    group = client_or_404(str(w.group), "consumer")
    authorize(p, group, str(w.topic))


def watch(connection_id: str, body: str | None) -> dict:
    """Register ``connection_id`` on the watched log; what it watches (for the reply)."""
    w = plan.parse_watch(body)
    p = _principal(connection_id)
    authorize_watch(p, w)
    ck = plan.connection_key(connection_id)
    # the connection must still exist and hold fewer than MAX_WATCHES other keys
    added = WatcherRepo.add_watch(ck, plan.CONNECTION_SORT, w.key, plan.MAX_WATCHES)
    if added == "gone":
        raise Gone(f"connection '{connection_id}' is not known (connect again)")
    if added == "full":
        raise BadRequest(f"a connection watches at most {plan.MAX_WATCHES} topics or subscriptions")
    WatcherRepo.save_watcher(plan.watcher_key(w.key), connection_id, w.group, plan.ITEM_TTL_S)
    return w.describe()


def disconnect(connection_id: str) -> int:
    """Delete the connection's items; how many were deleted."""
    ck = plan.connection_key(connection_id)
    c = WatcherRepo.connection(ck, plan.CONNECTION_SORT)
    if c is None:
        return 0
    n = delete_watches(connection_id, sorted(c.watches or ()), with_connection=True)
    _release(bool(c.admin), c.client, connection_id)
    return n


def error_reply(e: BaseException) -> tuple[int, str]:
    """A refused route: its HTTP-like status and the message sent back on the connection."""
    status, code, message = http_error(e)
    return status, plan.reply("error", status=status, error={"code": code, "message": message})
