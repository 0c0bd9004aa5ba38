"""The wake-up notifier (NotifyFunction): SegmentsTable stream records → one small post per
watching connection (:func:`notify`), through API Gateway's management API
(:func:`management_poster`). A stream consumer: it loads no HTTP use case and no authentication."""
from __future__ import annotations

import contextvars
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from concurrent.futures import TimeoutError as FuturesTimeout
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping

from lakeq.store.watchers import WatcherRepo, WatcherStoreError
from lakeq.wake import plan

log = logging.getLogger("lakeq.wake.notify")

Post = Callable[[str, bytes], str]  # (connection id, data) -> "ok" | "gone" | "error"


def delete_watches(connection_id: str, keys: Iterable[str], with_connection: bool) -> int:
    items = [(plan.watcher_key(k), connection_id) for k in keys]
    if with_connection:
        items.append((plan.connection_key(connection_id), plan.CONNECTION_SORT))
    return WatcherRepo.delete(items)



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
    out = WatcherRepo.watchers(plan.watcher_key(key))
    if result is not None:
        result.queries += 1
    return out


def notify(records: list[Mapping], post: Post, deadline_s: float | None = None,
           workers: int | None = None) -> NotifyResult:
    """Wake every connection watching a log that got a segment in this stream batch, once. The
    posts go out concurrently, at most ``workers`` (:data:`~lakeq.wake.plan.NOTIFY_WORKERS`) in
    flight, all within ``deadline_s`` (:data:`~lakeq.wake.plan.NOTIFY_DEADLINE_S`) of the first:
    one slow or dead connection delays no other, and a post not done by then is counted in
    ``failed`` (a wake-up is a hint: the consumer's fallback pull delivers anyway). A connection
    API Gateway says is gone loses its watchers."""
    r = NotifyResult(keys=plan.woken_keys(records))
    pairs = []
    for key in r.keys:
        for conn in watchers_of(key, r):
            pairs.append((key, conn))
    todo = plan.coalesce(pairs)
    if not todo:
        return r
    deadline = time.monotonic() + (plan.NOTIFY_DEADLINE_S if deadline_s is None else deadline_s)
    pool = ThreadPoolExecutor(max_workers=max(1, min(workers or plan.NOTIFY_WORKERS, len(todo))),
                              thread_name_prefix="lakeq-notify")
    # each post runs in the caller's context (a new thread starts with an empty one): what the
    # invocation set there (the local stack's "acting as" function, checked against its IAM role) holds
    futures = {pool.submit(contextvars.copy_context().run, _post_before, post, conn, plan.wake_message(keys),
                           deadline): conn
               for conn, keys in todo.items()}
    try:
        for f in as_completed(futures, timeout=max(0.0, deadline - time.monotonic())):
            _outcome(r, futures[f], todo[futures[f]], f.result())
    except FuturesTimeout:
        pass
    finally:
        pool.shutdown(wait=False, cancel_futures=True)  # posts still in flight end on their own timeouts
    done = set(r.gone) | set(r.failed)
    r.failed += [c for f, c in futures.items() if not f.done() and c not in done]
    r.posted = len(todo) - len(r.gone) - len(r.failed)
    return r


def _post_before(post: Post, conn: str, data: bytes, deadline: float) -> str:
    """One post, unless the batch's deadline passed before its turn came."""
    if time.monotonic() >= deadline:
        return "late"
    return post(conn, data)


def _outcome(r: NotifyResult, conn: str, keys: list[str], outcome: str) -> None:
    if outcome == "ok":
        return
    if outcome == "gone":  # API Gateway: the connection is closed; forget its watchers
        r.gone.append(conn)
        try:
            delete_watches(conn, keys, with_connection=False)
        except WatcherStoreError as e:  # TTL removes them anyway
            log.warning("could not delete the watchers of gone connection %s: %s", conn, e)
    else:
        r.failed.append(conn)


def management_poster(client=None) -> Post:
    """PostToConnection through API Gateway's management API (``$LAKEQ_WS_ENDPOINT``:
    ``https://{api}.execute-api.{region}.amazonaws.com/{stage}``; the standard
    ``AWS_ENDPOINT_URL_APIGATEWAYMANAGEMENTAPI`` wins, which is how the local stack points it at
    its own WebSocket gateway)."""
    if client is None:
        import botocore.session  # not boto3: the same client without importing it (docs/design.md "Cold start")
        from botocore.config import Config

        endpoint = (os.environ.get("AWS_ENDPOINT_URL_APIGATEWAYMANAGEMENTAPI")
                    or os.environ["LAKEQ_WS_ENDPOINT"])
        # a wake-up is a hint: fail fast instead of holding the stream batch
        client = botocore.session.get_session().create_client(
            "apigatewaymanagementapi", endpoint_url=endpoint,
            config=Config(connect_timeout=2, read_timeout=2, retries={"max_attempts": 2, "mode": "standard"}))

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
