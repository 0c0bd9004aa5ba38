"""``lakeq``: the command line over the Python client.

The API URL and key come from ``--url`` / ``--key`` or the environment (``LAKEQ_URL``, default
``http://127.0.0.1:3000``; ``LAKEQ_KEY``). Results are printed as JSON (one object per line for
messages), tables for ``backlog`` and ``groups describe``. An API error prints
``error: <status> <code>: <message>`` on stderr and exits with 1 (2 for a usage error).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from collections.abc import Iterable, Sequence
from typing import Any, TextIO

from .client import Admin, Consumer, Producer, Subscriptions
from .http import DEFAULT_URL, Connection, LakeqError


def _out(obj: Any) -> None:
    print(json.dumps(obj, ensure_ascii=False))


def table(rows: Sequence[Sequence[Any]], header: Sequence[str]) -> str:
    """A plain text table.

    >>> print(table([[0, 5], [1, 12]], ["queue", "backlog"]))
    queue  backlog
    -----  -------
        0        5
        1       12
    """
    cells = [[str(h) for h in header]] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(cells[0], widths)).rstrip(),
             "  ".join("-" * w for w in widths)]
    for r in cells[1:]:
        lines.append("  ".join(c.rjust(w) if c.lstrip("-").isdigit() else c.ljust(w)
                               for c, w in zip(r, widths)).rstrip())
    return "\n".join(lines)


class Progress:
    """A progress bar on a stream (``\\r``-redrawn; the last state ends with a newline)."""

    def __init__(self, total: int, stream: TextIO, width: int = 30):
        self.total, self.stream, self.width, self.done = total, stream, width, 0

    def update(self, n: int) -> None:
        self.done += n
        frac = self.done / self.total if self.total else 1.0
        bar = "#" * int(frac * self.width)
        self.stream.write(f"\r[{bar:<{self.width}}] {self.done}/{self.total} messages")
        self.stream.flush()

    def finish(self) -> None:
        self.stream.write("\n")
        self.stream.flush()


def _stdin() -> TextIO:
    return open(sys.stdin.fileno(), encoding="utf-8", closefd=False)


def _read_jsonl(path: str) -> list[dict]:
    """Each non-empty line: a message object (``body``, optional ``id``, ``key``, ``tags``,
    ``properties``) or a JSON string (the body)."""
    msgs = []
    with (open(path, encoding="utf-8") if path != "-" else _stdin()) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                m = json.loads(line)
            except ValueError as e:
                raise SystemExit(f"{path}:{n}: not JSON: {e}")
            if isinstance(m, str):
                m = {"body": m}
            if not isinstance(m, dict) or "body" not in m:
                raise SystemExit(f"{path}:{n}: expected an object with a 'body' or a string")
            msgs.append(m)
    return msgs


def cmd_produce(a: argparse.Namespace, conn: Connection) -> int:
    msgs = _read_jsonl(a.file)
    bar = Progress(len(msgs), sys.stderr)
    futures = []
    with Producer(producer=a.producer, connection=conn, linger=0) as p:
        for m in msgs:
            f = p.send(a.topic, m["body"], key=m.get("key"), tags=m.get("tags"),
                       properties=m.get("properties"), id=m.get("id"))
            f.add_done_callback(lambda f: None if f.exception() else bar.update(1))
            futures.append(f)
        try:
            p.flush()
        finally:
            bar.finish()
    failed = [f.exception() for f in futures if f.exception() is not None]
    if failed:
        raise failed[0]  # type: ignore[misc]
    _out({"produced": len(msgs), "requests": p.requests_sent})
    return 0


def cmd_tail(a: argparse.Namespace, conn: Connection) -> int:
    c = Consumer(group=a.group, topic=a.topic, client_id=a.client_id, member_id=a.member_id,
                 tags=a.tags.split("||") if a.tags else None, max=a.max, wait_ms=a.wait_ms,
                 connection=conn, wake_url=a.wake_url if a.follow else None)
    n = 0
    stop = threading.Event()
    try:
        while not stop.is_set():
            # --follow with --wake-url: wait on WebSocket wake-ups instead of long polls
            b = c.wait_pull() if c.waker is not None else c.pull()
            if not b.messages:
                if not a.follow:
                    break
                continue
            for m in b.messages:
                _out(m)
            sys.stdout.flush()
            n += len(b)
            if not a.no_settle:
                b.settle()
            if a.count and n >= a.count:
                break
    except KeyboardInterrupt:
        pass
    finally:
        c.close()
    print(f"{n} messages{'' if a.no_settle else ' settled'}", file=sys.stderr)
    return 0


def cmd_backlog(a: argparse.Namespace, conn: Connection) -> int:
    b = Admin(connection=conn).offsets(a.group, a.topic, a.client_id)
    if a.json:
        _out(b)
        return 0
    rows = [[q["queue"], q["min_offset"], q["max_offset"], q["committed_offset"], q["backlog"],
             q.get("locked_until") or ""] for q in b["queues"]]
    print(table(rows, ["queue", "min", "max", "committed", "backlog", "locked_until"]))
    print(f"topic {b['topic']}: backlog {b['backlog']}")
    return 0


def cmd_groups_describe(a: argparse.Namespace, conn: Connection) -> int:
    d = Admin(connection=conn).describe_group(a.group)
    if a.json:
        _out(d)
        return 0
    print(f"group {d['group']}  generation {d['generation']}  assignor {d.get('assignor')}")

    def qs(items: Iterable[dict]) -> str:
        return " ".join(f"{q['topic']}:{q['queue']}" for q in items)
    rows = [[m["member_id"], m["state"], qs(m.get("assignment") or []), m.get("last_heartbeat")]
            for m in d["members"]]
    print(table(rows, ["member", "state", "assignment", "last_heartbeat"]))
    return 0


def cmd_subs(a: argparse.Namespace, conn: Connection) -> int:
    s = Subscriptions(connection=conn)
    if a.action == "create":
        conditions = json.loads(a.conditions) if a.conditions else []
        sub = s.create(a.subscriber, a.topic, conditions,
                       tags=a.tags.split(",") if a.tags else None)
        _out(sub.info)
    elif a.action == "list":
        for sub in s.list(a.subscriber):
            _out(sub.info)
    elif a.action == "delete":
        s.delete(a.id)
        _out({"deleted": a.id})
    elif a.action == "pull":
        c = s.get(a.id).consumer(max=a.max, wait_ms=a.wait_ms)
        b = c.pull()
        for m in b.messages:
            _out(m)
        if b.receipt and not a.no_ack:
            c.ack(b)
        print(f"{len(b)} messages{'' if a.no_ack else ' acknowledged'}", file=sys.stderr)
    return 0


def cmd_topics(a: argparse.Namespace, conn: Connection) -> int:
    adm = Admin(connection=conn)
    if a.action == "create":
        _out(adm.create_topic(a.name, a.queues))
    elif a.action == "list":
        for t in adm.list_topics():
            _out(t)
    elif a.action == "grow":
        _out(adm.grow_topic(a.name, a.queues))
    return 0


def cmd_clients(a: argparse.Namespace, conn: Connection) -> int:
    adm = Admin(connection=conn)
    if a.action == "create":
        _out(adm.create_client(a.name, a.role, a.topics.split(","), mode=a.mode,
                               visibility_timeout_ms=a.visibility_timeout_ms))
    elif a.action == "keys":
        if a.keys_action == "list":
            _out({"name": a.name, "keys": adm.list_keys(a.name)})
        elif a.keys_action == "issue":
            _out(adm.issue_key(a.name))
        elif a.keys_action == "revoke":
            adm.revoke_key(a.name, a.key_id)
            _out({"revoked": a.key_id})
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="lakeq", description="lakeq HTTP API from the command line")
    p.add_argument("--url", default=os.environ.get("LAKEQ_URL", DEFAULT_URL),
                   help="API base URL (env LAKEQ_URL)")
    p.add_argument("--key", default=os.environ.get("LAKEQ_KEY"), help="API key (env LAKEQ_KEY)")
    p.add_argument("--timeout", type=float, default=30.0, help="read timeout in seconds")
    sub = p.add_subparsers(dest="command", required=True)

    t = sub.add_parser("topics", help="create, list, grow topics (admin)")
    ts = t.add_subparsers(dest="action", required=True)
    x = ts.add_parser("create")
    x.add_argument("name")
    x.add_argument("--queues", type=int)
    ts.add_parser("list")
    x = ts.add_parser("grow")
    x.add_argument("name")
    x.add_argument("--queues", type=int, required=True)
    t.set_defaults(func=cmd_topics)

    c = sub.add_parser("clients", help="register clients, manage their keys (admin)")
    cs = c.add_subparsers(dest="action", required=True)
    x = cs.add_parser("create")
    x.add_argument("name")
    x.add_argument("--role", choices=["producer", "consumer"], required=True)
    x.add_argument("--topics", required=True, help="comma-separated")
    x.add_argument("--mode", choices=["clustering", "broadcasting"])
    x.add_argument("--visibility-timeout-ms", type=int)
    k = cs.add_parser("keys")
    ks = k.add_subparsers(dest="keys_action", required=True)
    x = ks.add_parser("list")
    x.add_argument("name")
    x = ks.add_parser("issue")
    x.add_argument("name")
    x = ks.add_parser("revoke")
    x.add_argument("name")
    x.add_argument("key_id")
    c.set_defaults(func=cmd_clients)

    x = sub.add_parser("produce", help="produce a JSON-lines file (one message per line)")
    x.add_argument("topic")
    x.add_argument("file", help="JSON lines: {'body', 'id', 'key', 'tags', 'properties'} or a string; - for stdin")
    x.add_argument("--producer", required=True, help="the producer's client name")
    x.set_defaults(func=cmd_produce)

    for name in ("tail", "consume"):
        x = sub.add_parser(name, help="pull and print messages (JSON lines), settling each batch")
        x.add_argument("topic")
        x.add_argument("--group", required=True)
        x.add_argument("--client-id")
        x.add_argument("--member-id")
        x.add_argument("--tags", help="A||B")
        x.add_argument("--max", type=int, default=32)
        x.add_argument("--wait-ms", type=int, default=1000)
        x.add_argument("--count", type=int, default=0, help="stop after this many messages")
        x.add_argument("--follow", "-f", action="store_true", help="keep pulling when idle")
        x.add_argument("--wake-url", default=os.environ.get("LAKEQ_WAKE_URL"),
                       help="with --follow: wait on the WebSocket wake-up API at this URL instead of "
                            "long polls (default $LAKEQ_WAKE_URL)")
        x.add_argument("--no-settle", action="store_true", help="print without acknowledging")
        x.set_defaults(func=cmd_tail)

    g = sub.add_parser("groups", help="consumer groups")
    gs = g.add_subparsers(dest="action", required=True)
    x = gs.add_parser("describe")
    x.add_argument("group")
    x.add_argument("--json", action="store_true")
    x.set_defaults(func=cmd_groups_describe)

    x = sub.add_parser("backlog", help="backlog per queue of a group on a topic, as a table")
    x.add_argument("group")
    x.add_argument("topic")
    x.add_argument("--client-id")
    x.add_argument("--json", action="store_true")
    x.set_defaults(func=cmd_backlog)

    s = sub.add_parser("subscriptions", help="create, list, delete, pull subscriptions")
    ss = s.add_subparsers(dest="action", required=True)
    x = ss.add_parser("create")
    x.add_argument("--subscriber", required=True)
    x.add_argument("--topic", required=True)
    x.add_argument("--conditions", help='JSON list, e.g. \'[{"field": "type", "values": ["A"]}]\'')
    x.add_argument("--tags", help="comma-separated, any of")
    x = ss.add_parser("list")
    x.add_argument("--subscriber", required=True)
    x = ss.add_parser("delete")
    x.add_argument("id")
    x = ss.add_parser("pull")
    x.add_argument("id")
    x.add_argument("--max", type=int, default=32)
    x.add_argument("--wait-ms", type=int, default=0)
    x.add_argument("--no-ack", action="store_true")
    s.set_defaults(func=cmd_subs)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    a = parser().parse_args(argv)
    conn = Connection(url=a.url, key=a.key, timeout=(5.0, a.timeout))
    try:
        return a.func(a, conn)
    except LakeqError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
