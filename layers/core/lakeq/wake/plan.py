"""Wake-ups for waiting consumers over API Gateway WebSocket (issue 16 item 2): the pure rules.

A consumer keeps one WebSocket connection open and *watches* topics (as a consumer group) or
subscription lists; the notifier (``functions/notify``, fed by SegmentsTable's stream) posts a small
``{"type": "wake", ...}`` message to each connection watching a log that got a new segment, and
the consumer then pulls with ``wait_ms=0``. Wake-ups are hints: a lost one costs latency (the
client's fallback pull comes later), never a message — delivery is decided by the pull's
conditional writes alone. docs/design.md "Waiting without a waiting Lambda".

Keys in WatchersTable (:class:`lakeq.models.WatcherModel`), one table for both kinds of item:

- a connection: ``k = "c|<connection id>"``, ``c = "-"`` (who connected, the keys it watches);
- a watcher: ``k = "w|<watch key>"``, ``c = <connection id>``, so the notifier finds every
  connection watching a topic with ONE Query of ``k``.

A watch key is the topic's name (every incarnation of it: a wake-up is only a hint) or ``~<id>``
for a subscription's list, which is exactly what :func:`watch_key_of_segment` derives from a
segment's ``pq``. Pure: no AWS imports.

>>> watch_key_of_segment("quotes/sh!2#3"), watch_key_of_segment("~ab12#0")
('quotes/sh', '~ab12')
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Iterable, Mapping

from lakeq.common.errors import BadRequest, Unauthorized
from lakeq.common.names import (
    LIST_MARK,
    QUEUE_SEP,
    check_name,
    check_topic,
    is_list,
    list_log,
    split_queue_key,
    topic_of_log,
)

CONNECTION_SORT = "-"
MAX_WATCHES = 100  # per connection: bounds the connection item and the $disconnect clean-up
# per client (all its keys together; the admin key counts as one client): bounds what one tenant
# makes the notifier post to and the WatchersTable items it holds; a $connect past it is refused (409)
MAX_CONNECTIONS = 100
NOTIFY_WORKERS = 16  # the notifier's posts in flight at once (one stream batch)
NOTIFY_DEADLINE_S = 5.0  # the notifier's posts of one stream batch, all together (its timeout is 10 s)
# API Gateway closes a WebSocket connection after 2 hours at most: items outlive it a little and
# then expire (TTL), so a connection that vanished without $disconnect leaves nothing for long
ITEM_TTL_S = 2 * 3600 + 600
SUBPROTOCOL = "lakeq.v1"
KEY_PROTOCOL_PREFIX = "lakeq.key."  # Sec-WebSocket-Protocol: lakeq.v1, lakeq.key.<api key>


def connection_key(connection_id: str) -> str:
    """The connection item's partition key.

    >>> connection_key("abc=")
    'c|abc='
    """
    return f"c|{connection_id}"


def count_key(admin: bool, client: str | None) -> str:
    """The partition key of one client's (or the admin key's) open connections: the item that
    bounds them (:func:`admit`).

    >>> count_key(False, "risk"), count_key(True, None)
    ('n|risk', 'n|~admin')
    """
    return "n|~admin" if admin else f"n|{client}"


def admit(conns: Mapping[str, int], connection_id: str, now_s: int, ttl_s: int,
          limit: int) -> dict[str, int] | None:
    """A client's open connections (id → when its entry expires, epoch s) after ``connection_id``
    connects at ``now_s``, or None when it already holds ``limit`` live ones. Entries past their
    expiry are dropped (a connection that ended without ``$disconnect``: API Gateway ends every
    connection within 2 hours, and the entry outlives that by :data:`ITEM_TTL_S`).

    >>> admit({"a": 50, "b": 200}, "c", 100, 10, 2)
    {'b': 200, 'c': 110}
    >>> admit({"a": 150, "b": 200}, "c", 100, 10, 2) is None, admit({"a": 150, "b": 200}, "a", 100, 10, 2)
    (True, {'b': 200, 'a': 110})
    """
    live = {c: int(e) for c, e in conns.items() if int(e) > now_s and c != connection_id}
    if len(live) >= limit:
        return None
    live[connection_id] = now_s + ttl_s
    return live


def watcher_key(watch: str) -> str:
    """The partition key of a watch key's watchers.

    >>> watcher_key("quotes"), watcher_key("~s1")
    ('w|quotes', 'w|~s1')
    """
    return f"w|{watch}"


def watch_key_of_segment(pq: str) -> str:
    """The watch key a segment of partition ``<log>#<queue>`` wakes: its topic (``~<id>`` for a
    subscription's list)."""
    log, _ = split_queue_key(pq)
    return topic_of_log(log if QUEUE_SEP in pq else pq)


@dataclass(frozen=True)
class Watch:
    """What a ``watch`` message asks for: a topic as a consumer group, or a subscription's list."""

    topic: str | None = None
    group: str | None = None
    subscription: str | None = None

    @property
    def key(self) -> str:
        return list_log(self.subscription) if self.subscription is not None else str(self.topic)

    def describe(self) -> dict:
        if self.subscription is not None:
            return {"subscription": self.subscription}
        return {"topic": self.topic, "group": self.group}


def parse_watch(body: str | None) -> Watch:
    """``{"action": "watch", "topic": t, "group": g}`` or ``{"action": "watch", "subscription": id}``
    → :class:`Watch`; anything else is a 400.

    >>> parse_watch('{"action":"watch","topic":"a/b","group":"g"}').key
    'a/b'
    >>> parse_watch('{"action":"watch","subscription":"s1"}').key
    '~s1'
    """
    try:
        msg = json.loads(body or "")
    except ValueError:
        raise BadRequest("the message must be a JSON object") from None
    if not isinstance(msg, dict):
        raise BadRequest("the message must be a JSON object")
    unknown = set(msg) - {"action", "topic", "group", "subscription"}
    if unknown:
        raise BadRequest(f"unknown field(s) {sorted(unknown)}")
    sub = msg.get("subscription")
    if sub is not None:
        if "topic" in msg or "group" in msg:
            raise BadRequest("watch either a 'subscription' or a 'topic' with its 'group'")
        return Watch(subscription=check_name(sub, "subscription"))
    return Watch(topic=check_topic(msg.get("topic")), group=check_name(msg.get("group"), "group"))


def key_from_request(headers: Mapping[str, str] | None) -> tuple[str, str | None]:
    """The API key of a ``$connect`` and the subprotocol to answer with.

    ``Authorization: Bearer <key>`` (any client that can set headers), else
    ``Sec-WebSocket-Protocol: lakeq.v1, lakeq.key.<key>`` (a browser can set nothing else; the key
    never appears in a URL, so no access log keeps it). With the subprotocol form the answer must
    select ``lakeq.v1`` (a browser drops a connection whose answer selects none it offered).

    >>> key_from_request({"Authorization": "Bearer k1"})
    ('Bearer k1', None)
    >>> key_from_request({"sec-websocket-protocol": "lakeq.v1, lakeq.key.k2"})
    ('Bearer k2', 'lakeq.v1')
    """
    h = {str(k).lower(): str(v) for k, v in (headers or {}).items()}
    if h.get("authorization"):
        return h["authorization"], None
    offered = [p.strip() for p in h.get("sec-websocket-protocol", "").split(",") if p.strip()]
    keys = [p[len(KEY_PROTOCOL_PREFIX):] for p in offered if p.startswith(KEY_PROTOCOL_PREFIX)]
    if len(keys) == 1 and keys[0] and SUBPROTOCOL in offered:
        return f"Bearer {keys[0]}", SUBPROTOCOL
    raise Unauthorized("missing key: 'Authorization: Bearer <key>' or "
                       f"'Sec-WebSocket-Protocol: {SUBPROTOCOL}, {KEY_PROTOCOL_PREFIX}<key>'")


def woken_keys(records: Iterable[Mapping]) -> list[str]:
    """The watch keys a batch of SegmentsTable stream records wakes, each once, in first-seen
    order (one produce of 500 messages over 4 queues is 4 records, one key; a batch of many
    produces to one topic is still one key)."""
    seen: dict[str, None] = {}
    for r in records:
        if r.get("eventName") != "INSERT":
            continue
        pq = (((r.get("dynamodb") or {}).get("Keys") or {}).get("pq") or {}).get("S")
        if isinstance(pq, str) and pq:
            seen.setdefault(watch_key_of_segment(pq), None)
    return list(seen)


def coalesce(watchers: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    """``(watch key, connection id)`` pairs → ``{connection id: [watch keys]}``: ONE wake-up per
    connection per stream batch, naming every watched log that moved.

    >>> coalesce([("a", "c1"), ("b", "c1"), ("a", "c2"), ("a", "c1")])
    {'c1': ['a', 'b'], 'c2': ['a']}
    """
    out: dict[str, list[str]] = {}
    for key, conn in watchers:
        keys = out.setdefault(conn, [])
        if key not in keys:
            keys.append(key)
    return out


def wake_message(keys: Iterable[str]) -> bytes:
    """The wake-up a connection gets: the topics and subscriptions that moved.

    >>> wake_message(["quotes", "~s1"])
    b'{"type":"wake","topics":["quotes"],"subscriptions":["s1"]}'
    """
    keys = list(keys)
    body = {"type": "wake",
            "topics": [k for k in keys if not is_list(k)],
            "subscriptions": [k[len(LIST_MARK):] for k in keys if is_list(k)]}
    return json.dumps(body, separators=(",", ":")).encode()


def reply(kind: str, **fields: object) -> str:
    """A route's answer to the client (API Gateway sends a route response's body back)."""
    return json.dumps({"type": kind, **fields}, separators=(",", ":"))
