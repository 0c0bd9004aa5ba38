"""Wake-ups for waiting consumers over API Gateway WebSocket (issue 16 item 2): the use cases.

- :func:`connect` (``$connect``): the key authenticated as any request (401 refuses the upgrade,
  nothing stored), then one connection item;
- :func:`watch` (a ``{"action": "watch", ...}`` message): checked as a pull of the same topic and
  group (or of the subscription) would be — 400, 404, 403 in API.md's order, nothing stored on a
  refusal — then the watcher item (and the watch key added to the connection item);
- :func:`disconnect` (``$disconnect``): the connection's items deleted;
- :func:`notify` (SegmentsTable's stream): one Query per woken topic, one PostToConnection per
  watching connection per stream batch (:func:`lakeq.wake_plan.coalesce`); a connection API Gateway
  says is gone (410 ``GoneException``) loses its items.

Nothing here moves an offset or a lock: a wake-up is a hint; a lost one costs the consumer latency
(until its fallback pull), never a message. Rules in :mod:`lakeq.wake_plan` (pure).
"""
from __future__ import annotations

import datetime
import logging
import os
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping

from pynamodb.exceptions import DeleteError, PutError, UpdateError
from pynamodb.expressions.condition import size

from . import wake_plan as plan
from .auth import Principal, authenticate, authorize, client_or_404, topic_or_404
from .errors import ApiError, BadRequest, Forbidden, NotFound, http_error
from .models import WatcherModel
from .names import is_name

log = logging.getLogger("lakeq.wake")

Post = Callable[[str, bytes], str]  # (connection id, data) -> "ok" | "gone" | "error"


def _expiry() -> datetime.timedelta:
    return datetime.timedelta(seconds=plan.ITEM_TTL_S)  # pynamodb's TTL: from now


# --- $connect / watch / $disconnect ---------------------------------------------------------------
def connect(connection_id: str, headers: Mapping[str, str] | None) -> tuple[Principal, str | None]:
    """Authenticate a ``$connect`` (401 → the handshake is refused) and store the connection.
    Returns the principal and the subprotocol to select (``None``: select none)."""
    authorization, subprotocol = plan.key_from_request(headers)
    p = authenticate(authorization)
    WatcherModel(plan.connection_key(connection_id), plan.CONNECTION_SORT, admin=p.admin or None,
                 client=p.client, expires_at=_expiry()).save()
    return p, subprotocol


def _principal(connection_id: str) -> Principal:
    try:
        c = WatcherModel.get(plan.connection_key(connection_id), plan.CONNECTION_SORT, consistent_read=True)
    except WatcherModel.DoesNotExist:
        raise Gone(f"connection '{connection_id}' is not known (connect again)") from None
    return Principal(admin=bool(c.admin), client=c.client)


class Gone(ApiError):
    status, code = 410, "gone"


def authorize_watch(p: Principal, w: plan.Watch) -> None:
    """What a pull of ``w`` checks, in the same order: 404 (topic, group / subscription), 403."""
    if w.subscription is not None:
        from .subscriptions import SubscriptionRepo  # only subscription watches need it

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
    try:  # the connection must still exist and hold fewer than MAX_WATCHES other keys
        WatcherModel(ck, plan.CONNECTION_SORT).update(
            actions=[WatcherModel.watches.add({w.key})],
            condition=WatcherModel.k.exists() & (WatcherModel.watches.does_not_exist()
                                                 | (WatcherModel.watches.contains(w.key))
                                                 | (size(WatcherModel.watches) < plan.MAX_WATCHES)))
    except UpdateError as e:
        if _conditional(e):
            try:
                WatcherModel.get(ck, plan.CONNECTION_SORT, consistent_read=True)
            except WatcherModel.DoesNotExist:
                raise Gone(f"connection '{connection_id}' is not known (connect again)") from None
            raise BadRequest(f"a connection watches at most {plan.MAX_WATCHES} topics or subscriptions") from None
        raise
    WatcherModel(plan.watcher_key(w.key), connection_id, group=w.group, expires_at=_expiry()).save()
    return w.describe()


def disconnect(connection_id: str) -> int:
    """Delete the connection's items; how many were deleted."""
    ck = plan.connection_key(connection_id)
    try:
        c = WatcherModel.get(ck, plan.CONNECTION_SORT, consistent_read=True)
    except WatcherModel.DoesNotExist:
        return 0
    return _delete(connection_id, sorted(c.watches or ()), with_connection=True)


def _delete(connection_id: str, keys: Iterable[str], with_connection: bool) -> int:
    n = 0
    with WatcherModel.batch_write() as b:
        for k in keys:
            b.delete(WatcherModel(plan.watcher_key(k), connection_id))
            n += 1
        if with_connection:
            b.delete(WatcherModel(plan.connection_key(connection_id), plan.CONNECTION_SORT))
            n += 1
    return n


def _conditional(e: Exception) -> bool:
    cause = getattr(e, "cause_response_code", None) or ""
    return "ConditionalCheckFailed" in str(cause) or "ConditionalCheckFailed" in str(e)


def error_reply(e: BaseException) -> tuple[int, str]:
    """A refused route: its HTTP-like status and the message sent back on the connection."""
    status, code, message = http_error(e)
    return status, plan.reply("error", status=status, error={"code": code, "message": message})


# --- the notifier ---------------------------------------------------------------------------------
@dataclass
class NotifyResult:
    keys: list[str] = field(default_factory=list)  # watch keys woken
    queries: int = 0  # WatchersTable Queries (pages)
    posted: int = 0
    gone: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)


def watchers_of(key: str, result: NotifyResult | None = None) -> list[str]:
    """The connections watching ``key`` (one Query, paginated past 1 MB)."""
    out = []
    q = WatcherModel.query(plan.watcher_key(key), attributes_to_get=["c"])
    for item in q:
        out.append(item.c)
    if result is not None:
        result.queries += 1
    return out


def notify(records: list[Mapping], post: Post) -> NotifyResult:
    """Wake every connection watching a log that got a segment in this stream batch, once."""
    r = NotifyResult(keys=plan.woken_keys(records))
    pairs = []
    for key in r.keys:
        for conn in watchers_of(key, r):
            pairs.append((key, conn))
    for conn, keys in plan.coalesce(pairs).items():
        outcome = post(conn, plan.wake_message(keys))
        if outcome == "ok":
            r.posted += 1
        elif outcome == "gone":  # API Gateway: the connection is closed; forget its watchers
            r.gone.append(conn)
            try:
                _delete(conn, keys, with_connection=False)
            except (DeleteError, PutError) as e:  # TTL removes them anyway
                log.warning("could not delete the watchers of gone connection %s: %s", conn, e)
        else:
            r.failed.append(conn)
    return r


def management_poster(client=None) -> Post:
    """PostToConnection through API Gateway's management API (``$LAKEQ_WS_ENDPOINT``:
    ``https://{api}.execute-api.{region}.amazonaws.com/{stage}``; the standard
    ``AWS_ENDPOINT_URL_APIGATEWAYMANAGEMENTAPI`` wins, which is how the local stack points it at
    its own WebSocket gateway)."""
    if client is None:
        import boto3
        from botocore.config import Config

        endpoint = (os.environ.get("AWS_ENDPOINT_URL_APIGATEWAYMANAGEMENTAPI")
                    or os.environ["LAKEQ_WS_ENDPOINT"])
        # a wake-up is a hint: fail fast instead of holding the stream batch
        client = boto3.client("apigatewaymanagementapi", endpoint_url=endpoint,
                              config=Config(connect_timeout=2, read_timeout=2,
                                            retries={"max_attempts": 2, "mode": "standard"}))

    def post(connection_id: str, data: bytes) -> str:
        try:
            client.post_to_connection(ConnectionId=connection_id, Data=data)
            return "ok"
        except client.exceptions.GoneException:
            return "gone"
        except Exception as e:  # noqa: BLE001 - a hint that failed: logged, never raised
            log.warning("PostToConnection %s failed: %s", connection_id, e)
            return "error"

    return post
