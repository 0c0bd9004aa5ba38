"""WatchersTable (:class:`~lakeq.store.models.WatcherModel`): the WebSocket connections waiting for
wake-ups and the watch keys they hold. Keys are built by the caller (:mod:`lakeq.wake.plan`); this
module only stores them. Every item carries a TTL, so a connection that vanished without
``$disconnect`` leaves nothing behind for long."""
from __future__ import annotations

import datetime
import json
from typing import Iterable

from pynamodb.exceptions import DeleteError, PutError, UpdateError
from pynamodb.expressions.condition import size

from lakeq.common.errors import LakeqError
from lakeq.store.models import WatcherModel
from lakeq.store.writes import conditional_failed


class WatcherRepo:
    """All O(1) items per call except :meth:`delete` (one BatchWriteItem per 25 keys) and
    :meth:`watchers` (one Query, paginated past 1 MB)."""

    @staticmethod
    def save_connection(conn_key: str, sort: str, admin: bool, client: str | None, ttl_s: int) -> None:
        """PutItem: who connected (1 WRU)."""
        WatcherModel(conn_key, sort, admin=admin or None, client=client,
                     expires_at=datetime.timedelta(seconds=ttl_s)).save()

    @staticmethod
    def connection(conn_key: str, sort: str) -> WatcherModel | None:
        """Consistent GetItem of a connection item; None when it is not (or no longer) there."""
        try:
            return WatcherModel.get(conn_key, sort, consistent_read=True)
        except WatcherModel.DoesNotExist:
            return None

    @staticmethod
    def add_watch(conn_key: str, sort: str, key: str, max_watches: int) -> str:
        """Add ``key`` to the connection's watch keys, one conditional UpdateItem: ``"ok"``,
        ``"gone"`` (no such connection) or ``"full"`` (it holds ``max_watches`` other keys)."""
        try:
            WatcherModel(conn_key, sort).update(
                actions=[WatcherModel.watches.add({key})],
                condition=WatcherModel.k.exists() & (WatcherModel.watches.does_not_exist()
                                                     | (WatcherModel.watches.contains(key))
                                                     | (size(WatcherModel.watches) < max_watches)))
        except UpdateError as e:
            if conditional_failed(e):
                return "gone" if WatcherRepo.connection(conn_key, sort) is None else "full"
            raise
        return "ok"

    @staticmethod
    def save_watcher(watch_key: str, connection_id: str, group: str | None, ttl_s: int) -> None:
        """PutItem: ``connection_id`` watches ``watch_key`` (1 WRU)."""
        WatcherModel(watch_key, connection_id, group=group, expires_at=datetime.timedelta(seconds=ttl_s)).save()

    @staticmethod
    def delete(items: Iterable[tuple[str, str]]) -> int:
        """BatchWriteItem deletes of ``(k, c)`` items (25 a call); how many. A store error is raised
        as :class:`WatcherStoreError`."""
        n = 0
        try:
            with WatcherModel.batch_write() as b:
                for k, c in items:
                    b.delete(WatcherModel(k, c))
                    n += 1
        except (DeleteError, PutError) as e:
            raise WatcherStoreError(str(e)) from e
        return n

    @staticmethod
    def connections_of(count_key: str, sort: str) -> tuple[dict[str, int], int | None]:
        """A client's open connections (id → expiry, epoch s) and the item's version (None: no
        item). One consistent GetItem."""
        try:
            item = WatcherModel.get(count_key, sort, consistent_read=True)
        except WatcherModel.DoesNotExist:
            return {}, None
        return json.loads(item.conns or "{}"), int(item.v or 0)

    @staticmethod
    def put_connections(count_key: str, sort: str, conns: dict[str, int], version: int | None, ttl_s: int) -> bool:
        """Write a client's open connections if the item is still at ``version`` (None: absent);
        False when it changed since (read again). One conditional UpdateItem."""
        M = WatcherModel
        cond = M.k.does_not_exist() if version is None else (M.v == version)
        try:
            M(count_key, sort).update(actions=[M.conns.set(json.dumps(conns, separators=(",", ":"))),
                                               M.v.set((version or 0) + 1),
                                               M.expires_at.set(datetime.timedelta(seconds=ttl_s))],
                                      condition=cond)
        except UpdateError as e:
            if conditional_failed(e):
                return False
            raise
        return True

    @staticmethod
    def watchers(watch_key: str) -> list[str]:
        """The connection ids watching ``watch_key``: one Query (paginated past 1 MB)."""
        return [item.c for item in WatcherModel.query(watch_key, attributes_to_get=["c"])]


class WatcherStoreError(LakeqError):
    """A batch delete of watcher items failed (TTL removes them anyway)."""
