"""Read-only views for the backlog console (``GET /console``, seed 003's monitoring page).

Everything here reads, nothing writes: the clients without their keys (``GET /v1/clients``), a
topic's queues with their offsets (``GET /v1/topics/{topic}``) and a subscription's list backlog
(``GET /v1/subscriptions/{id}/offsets``). Check order as everywhere (API.md): 401 → 400 → 404 → 403.
"""
from __future__ import annotations

import json
import os

from lakeq.admin import service as admin_service
from lakeq.admin.auth import Principal, topic_or_404
from lakeq.common import clock as _clock
from lakeq.common.errors import Forbidden, NotFound
from lakeq.common.names import check_name, check_topic, covers, log_of
from lakeq.consume import views
from lakeq.store.catalog import ClientRepo
from lakeq.store.offsets import OffsetRepo
from lakeq.store.queue_log import LogRepo
from lakeq.store.records import Client

CONSOLE_DIR = os.path.dirname(os.path.abspath(__file__))  # the console package holds its static files
# the console's static files: name -> content type (nothing else under console/ is served)
ASSETS = {"index.html": "text/html; charset=utf-8", "console.js": "text/javascript; charset=utf-8",
          "console.css": "text/css; charset=utf-8"}


def asset(name: str) -> tuple[str, str]:
    """(content type, text) of one console file; 404 for any other name."""
    ctype = ASSETS.get(name)
    if ctype is None:
        raise NotFound(f"no console asset '{name}'")
    with open(os.path.join(CONSOLE_DIR, name), encoding="utf-8") as f:
        return ctype, f.read()


def list_clients(p: Principal) -> dict:
    """``GET /v1/clients``: the admin key sees every client, a client's key only itself; never a key
    nor a key hash. ``caller`` says who asked (``{"admin": bool, "client": name|null}``)."""
    if p.admin:
        clients = ClientRepo.all()
    else:
        c = ClientRepo.get(p.client) if p.client else None
        clients = [c] if c is not None else []
    return {"caller": {"admin": p.admin, "client": p.client},
            "clients": [{**admin_service.client_view(c), "created_at": int(c.created_at or 0),
                         **({"push": group_push_summary(c)} if getattr(c, "push", None) else {})} for c in clients]}


def group_push_summary(c: Client) -> dict:
    """A consumer group's push endpoint as the console shows it (issue 17; the full view is
    ``GET /v1/groups/{group}/push``), read from the client item this route reads anyway."""
    settings = json.loads(c.push)
    last = json.loads(c.push_state) if c.push_state else {}
    return {"url": settings["url"], "topic": settings.get("topic"), "max_in_flight": settings.get("max_in_flight", 1),
            "paused": bool(c.push_paused), "last_status": last.get("last_status"),
            "last_attempt_at": last.get("last_attempt_at"), "next_attempt_at": last.get("next_attempt_at"),
            "failures": int(c.push_failures or 0), "delivered": int(c.push_delivered or 0)}


def _may_see_topic(p: Principal, topic: str) -> None:
    if p.admin:
        return
    c = ClientRepo.get(p.client) if p.client else None
    if c is None or not any(covers(g, topic) for g in c.topics):
        raise Forbidden(f"this key is not granted topic '{topic}'")


def topic_detail(p: Principal, name: str) -> dict:
    """``GET /v1/topics/{topic}`` (admin, or a client granted the topic): the topic and each queue's
    ``min_offset`` / ``max_offset`` (``produced`` = the sum of ``max_offset``), and its delayed
    messages not yet in the queue (``delayed``, ``next_due``; ``delayed`` summed). One GetItem of the
    topic, one BatchGetItem of its queue items."""
    check_topic(name)
    t = topic_or_404(name)
    _may_see_topic(p, name)
    qs = [{"queue": int(m.queue), "min_offset": int(m.min_offset), "max_offset": int(m.max_offset),
           "last_produced_at": int(m.last_produced_at or 0),
           "delayed": int(m.delayed or 0), "next_due": None if m.next_due is None else int(m.next_due)}
          for m in LogRepo.queues(log_of(t), int(t.queues))]
    return {**admin_service.topic_view(t), "produced": sum(q["max_offset"] for q in qs),
            "delayed": sum(q["delayed"] for q in qs), "queue_offsets": qs}


def subscription_offsets(p: Principal, sub_id: str) -> dict:
    """``GET /v1/subscriptions/{id}/offsets`` (the subscriber's key or admin): the backlog of the
    subscription's message list, shaped like a group's offsets (one queue, 0)."""
    from lakeq.subscriptions import service as subs

    check_name(sub_id, "subscription id")
    s = subs._sub_or_404(sub_id)
    subs._may_act(p, s)
    lt, owner = subs.list_topic(sub_id), subs.list_owner(sub_id)
    recs = OffsetRepo.records(owner)
    now = _clock.now()
    queues = []
    for view in sorted(views(lt, owner, 1, recs=recs), key=lambda x: x.queue):
        r = recs.get(view.queue)
        queues.append({"queue": view.queue, "min_offset": view.min_offset, "max_offset": view.max_offset,
                       "committed_offset": view.start,
                       "locked_until": view.lock_until if view.locked(now) else 0,
                       "lock_owner": (r.lock_owner if r is not None and view.locked(now) else None),
                       "backlog": view.backlog, "dead_lettered": view.dead_lettered})
    return {"id": s.id, "subscriber": s.subscriber, "topic": s.topic,
            "backlog": sum(q["backlog"] for q in queues), "queues": queues}
