"""moto's server with every request served one at a time: ``python -m infra.local.moto_serial -p PORT``.

moto's own server (``python -m moto.server``) handles requests on concurrent threads with no lock
around a request: a conditional UpdateItem checks and writes in two steps another thread can
interleave, and a cancelled TransactWriteItems restores deep copies of the tables it touched,
wiping writes other threads made meanwhile. DynamoDB is atomic per item and isolates transactions;
to emulate that, this wrapper serialises requests behind one lock (connections are still accepted
on threads, so keep-alive clients don't block each other). Measured effect: the concurrency
history test in ``tests/e2e/test_queue_e2e.py`` fails against the plain server (stale receipts,
offsets reused) and passes against this one.

It also counts the DynamoDB requests that may write (every DynamoDB operation but the reads: a
stream record only appears through one of them) and answers ``GET /_lakeq/dynamodb-writes?after=N
&wait=S`` with ``{"writes": <count>, "tables": {<table>: <count>}}`` as soon as the count differs
from ``N`` (at most ``S`` seconds later; outside the lock). The local stack's stream pumps wait on
it while idle (:func:`infra.local.streams.moto_write_signal`) instead of polling every shard four
times a second, and read only the streams of the tables written since their last read.
"""
from __future__ import annotations

import argparse
import io
import json
import signal
import sys
import threading
from urllib.parse import parse_qs

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from werkzeug.serving import run_simple

from infra.local.keepalive import KeepAlive, buffer_body

WRITES_PATH = "/_lakeq/dynamodb-writes"
MAX_WAIT_S = 30.0
# DynamoDB operations that never add a stream record (anything else counts as a possible write)
READS = frozenset({
    "GetItem", "BatchGetItem", "Query", "Scan", "TransactGetItems", "DescribeTable", "ListTables",
    "DescribeTimeToLive", "ListTagsOfResource", "DescribeContinuousBackups", "DescribeLimits",
    "DescribeEndpoints", "DescribeKinesisStreamingDestination", "ListBackups", "DescribeBackup",
    "ListGlobalTables", "DescribeGlobalTable", "DescribeTableReplicaAutoScaling", "ListExports",
    "DescribeExport", "ListImports", "DescribeImport", "GetResourcePolicy",
})


def read_body(body) -> bytes:
    """A WSGI response body read whole, then closed (as the WSGI spec asks of a server)."""
    try:
        return b"".join(body)
    finally:
        if hasattr(body, "close"):
            body.close()


def request_body(environ) -> bytes | None:
    """The request's body, left readable for the application: read into memory by
    :func:`infra.local.keepalive.buffer_body` (a kept-alive connection's handler did already);
    None when it was not read whole (over ``MAX_BUFFERED``, shorter than its length)."""
    stream = environ.get("wsgi.input")
    if stream is None:
        return b""
    if not isinstance(stream, io.BytesIO) and not buffer_body(environ):
        return None
    return environ["wsgi.input"].getvalue()


def tables_written(body: bytes | None) -> set[str]:
    """The tables a DynamoDB write request names (``TableName``, BatchWriteItem's ``RequestItems``,
    each of TransactWriteItems' actions; a table's ARN by its name); ``{"*"}`` when it names none
    that can be read (a stream pump then reads every table it follows), or the body was not read."""
    if body is None:
        return {"*"}
    try:
        d = json.loads(body or b"{}")
    except ValueError:
        return {"*"}
    names = set()
    if isinstance(d, dict):
        if isinstance(d.get("TableName"), str):
            names.add(d["TableName"])
        if isinstance(d.get("RequestItems"), dict):
            names.update(k for k in d["RequestItems"] if isinstance(k, str))
        for action in d.get("TransactItems") or []:
            for v in (action.values() if isinstance(action, dict) else ()):
                if isinstance(v, dict) and isinstance(v.get("TableName"), str):
                    names.add(v["TableName"])
    names = {n.split(":table/", 1)[1].split("/", 1)[0] if n.startswith("arn:") and ":table/" in n else n
             for n in names}
    return names or {"*"}


def may_write(environ) -> bool:
    """Whether moto may run a DynamoDB write for this request. moto routes a request to DynamoDB by
    its signature's service (``dynamodb``) as much as by ``X-Amz-Target``'s prefix, and runs the
    query string's ``Action`` before the target's operation (``moto.core.responses._get_action``):
    a request naming a read in its target and ``?Action=PutItem`` in its URL writes."""
    target = environ.get("HTTP_X_AMZ_TARGET") or ""
    service = target.partition(".")[0]
    if service.lower().startswith("dynamodbstreams"):
        return False
    scope = (environ.get("HTTP_AUTHORIZATION") or "").split(",")[0].split()
    signed_for = scope[1].split("/")[3:4] if len(scope) > 1 else []
    if not (service.startswith("DynamoDB_") or [s.lower() for s in signed_for] == ["dynamodb"]):
        return False
    actions = parse_qs(environ.get("QUERY_STRING") or "").get("Action")
    ops = {actions[0]} if actions and actions[0] else {target.split(".")[-1], target.partition(".")[2]}
    return any(op not in READS for op in ops)


class KeepAliveHandler(KeepAlive, MotoRequestHandler):
    """moto's request handler (underscored header names kept) with :class:`infra.local.keepalive.KeepAlive`."""


class Serialised:
    """WSGI middleware: one request at a time, response body materialised inside the lock."""

    def __init__(self, app):
        self.app = app
        self.lock = threading.Lock()
        self.writes = 0  # DynamoDB requests that may have written (see READS)
        self.tables: dict[str, int] = {}  # the same, per table a request names ("*": names none we can read)
        self.changed = threading.Condition()

    def __call__(self, environ, start_response):
        if environ.get("PATH_INFO") == WRITES_PATH:
            return self._writes(environ, start_response)
        writes = may_write(environ)
        tables = tables_written(request_body(environ)) if writes else ()
        try:
            with self.lock:
                data = read_body(self.app(environ, start_response))
        finally:  # counted even when moto raised: it may have written before it did
            if writes:
                with self.changed:
                    self.writes += 1
                    for t in tables:
                        self.tables[t] = self.tables.get(t, 0) + 1
                    self.changed.notify_all()
        return [data]

    def _writes(self, environ, start_response):
        q = parse_qs(environ.get("QUERY_STRING") or "")
        try:
            after = int(q["after"][0]) if "after" in q else None
            wait = min(max(float(q.get("wait", ["0"])[0]), 0.0), MAX_WAIT_S)
        except ValueError:
            start_response("400 Bad Request", [("Content-Type", "text/plain")])
            return [b"after: an integer, wait: seconds"]
        with self.changed:
            if after is not None:
                self.changed.wait_for(lambda: self.writes != after, timeout=wait)
            n, tables = self.writes, dict(self.tables)
        start_response("200 OK", [("Content-Type", "application/json")])
        return [json.dumps({"writes": n, "tables": tables}).encode()]


def trim_server() -> bool:
    """Two costs moto's server pays on every request and that say nothing here (py-spy on the e2e
    stack's moto: ~6 % and ~4 % of its busy samples): ``DomainDispatcherApplication`` asks
    ``backends.list_of_moto_modules()`` per request, which lists moto's package folder and calls
    ``isdir`` on each of its ~190 entries (the folder never changes while the server runs: listed
    once here); and werkzeug writes an access line per request to the moto log (only warnings and
    errors now: a traceback still lands in the log the stack prints on a failure).
    ``LAKEQ_MOTO_PLAIN=1`` leaves both as they are. False when left."""
    import logging

    from infra.local import moto_plain

    if moto_plain():
        return False
    from moto import backends

    names = frozenset(backends.list_of_moto_modules())
    backends.list_of_moto_modules = lambda: names
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    return True


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m infra.local.moto_serial")
    ap.add_argument("-H", "--host", default="127.0.0.1")
    ap.add_argument("-p", "--port", type=int, required=True)
    args = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    from infra.local import moto_speed
    moto_speed.install()  # moto's UpdateExpression walk, its map built once a walk (LAKEQ_MOTO_PLAIN=1: not)
    handler = KeepAliveHandler if trim_server() else MotoRequestHandler
    app = DomainDispatcherApplication(create_backend_app)
    run_simple(args.host, args.port, Serialised(app), threaded=True, request_handler=handler)


if __name__ == "__main__":
    main()
