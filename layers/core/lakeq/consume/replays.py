"""A consumer group's pulls of its replays' hidden lists (issue 18.1, the ``{"group": g}`` target:
:mod:`lakeq.replay.group_target` fills them; storage :mod:`lakeq.store.replay_lists`).

A pull of topic ``t`` by group ``g`` whose client item (read by every pull anyway, cached 5 s) names
active replays of ``t`` first polls each of their lists once, without waiting — the pull loop
(:func:`lakeq.consume.reader.consume`) over a :class:`ReplayLog`, the group's (or its broadcasting
instance's) own offsets record, its policy (deliveries, dead letters), its lock owner and the pull's
tag filter — and serves the first list with something to serve; only then the topic's queues, as
before. A group without a marker pays nothing more. Pulls never write the group's item: the
marker is removed by ReplayFunction's schedule once the replay ended and its list is drained
(:func:`lakeq.replay.group_target.end`), so ConsumeFunction needs no write on ClientsTable; until
then (at most a schedule period and the 5 s cache) a pull polls the drained list for nothing.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable

from lakeq.admin.auth import Principal, authorize
from lakeq.common.errors import Forbidden, StaleReceipt
from lakeq.consume.reader import SCAN_FACTOR, BoundReader, ListLog, broker, consume, read_log
from lakeq.consume.settle import Policy
from lakeq.contract import validation as v
from lakeq.log.receipts import Receipt
from lakeq.store.records import Client
from lakeq.store.replay_lists import replay_log, replay_markers, replay_owner


def replay_reader(log: str, tags: list[str] | None) -> BoundReader:
    """A replay's list (queue 0), filtered by ``tags`` as a topic pull is (skipped entries count as
    read): each entry keeps its source ``topic``, ``queue`` and ``offset``."""
    def shape(msg: dict, _off: int) -> None:
        msg["offset"] = msg.pop("source_offset")

    def read(queue: int, start: int, limit: int, max_offset: int) -> tuple[list[dict], int]:
        scan = limit if not tags else max(1000, limit * SCAN_FACTOR)
        return read_log(log, 0, start, limit, max_offset, shape, tags, scan)
    return BoundReader(log, read, queue=0)


class ReplayLog(ListLog):
    """A replay's hidden list read by a group: receipts name ``~r.<replay id>``."""

    def __init__(self, replay_id: str, owner: str, meta: dict, lock_owner: str):
        name = replay_log(replay_id)
        super().__init__(name, owner, meta, name)
        self.lock_owner = lock_owner

    def reader(self, tags: list[str] | None) -> BoundReader:
        return replay_reader(self.name, tags)


def pull_lists(group: Client, topic: str, replays: list[str], client_id: str | None, visibility_ms: int,
               req: v.PullRequest, policy: Policy, lock_owner: str,
               folded: tuple[Receipt, int, Callable[[], object]] | None = None) -> dict | None:
    """One poll of each active replay's list of ``group`` (oldest replay first); the first answer with
    messages, or None (then the caller pulls the topic's queues). ``folded``: a piggybacked ack of
    one of these lists (folded into its lock as a topic pull's is)."""
    quick = replace(req, wait_ms=0)
    for rid in replays:
        owner = replay_owner(group.name, rid, client_id)
        lg = ReplayLog(rid, owner, {"group": group.name, "client_id": client_id, "topic": replay_log(rid)},
                       lock_owner)
        f = folded if folded is not None and folded[0].replay == rid else None
        out = consume(lg, visibility_ms, quick, None, policy=policy, folded=f)
        if out["messages"]:
            return out
    return None


def receipt_owner(p: Principal, group: Client, instance: str | None, receipt: Receipt, stale: str) -> str:
    """The checks a use of a replay list's receipt makes (ack, visibility, a piggybacked ack): the
    key may act for the group and, while the replay is active, the group is granted its topic
    (403); this broker's (409 ``stale_receipt``). Returns the offsets owner: the group's own, so a
    receipt of another group's replay settles nothing (no record: 409)."""
    rid = receipt.replay
    assert rid is not None
    if not p.may_act_as(group.name):
        raise Forbidden(f"this key may not act for '{group.name}'")
    topic = replay_markers(group).get(rid)
    if topic is not None:
        authorize(p, group, topic)
    if receipt.broker != broker():
        raise StaleReceipt(stale)
    return replay_owner(group.name, rid, instance)
