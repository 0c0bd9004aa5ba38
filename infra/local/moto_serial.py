"""moto's server with every request served one at a time: ``python -m infra.local.moto_serial -p PORT``.

moto's own server (``python -m moto.server``) handles requests on concurrent threads with no lock
around a request: a conditional UpdateItem checks and writes in two steps another thread can
interleave, and a cancelled TransactWriteItems restores deep copies of the tables it touched,
wiping writes other threads made meanwhile. DynamoDB is atomic per item and isolates transactions;
to emulate that, this wrapper serialises requests behind one lock (connections are still accepted
on threads, so keep-alive clients don't block each other). Measured effect: the concurrency
history test in ``tests/e2e/test_queue_e2e.py`` fails against the plain server (stale receipts,
offsets reused) and passes against this one.
"""
from __future__ import annotations

import argparse
import signal
import sys
import threading

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from werkzeug.serving import run_simple


class Serialised:
    """WSGI middleware: one request at a time, response body materialised inside the lock."""

    def __init__(self, app):
        self.app = app
        self.lock = threading.Lock()

    def __call__(self, environ, start_response):
        with self.lock:
            body = self.app(environ, start_response)
            try:
                data = b"".join(body)
            finally:
                if hasattr(body, "close"):
                    body.close()
        return [data]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m infra.local.moto_serial")
    ap.add_argument("-H", "--host", default="127.0.0.1")
    ap.add_argument("-p", "--port", type=int, required=True)
    args = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    from infra.local import moto_speed
    moto_speed.install()  # moto's UpdateExpression walk, its map built once a walk (LAKEQ_MOTO_PLAIN=1: not)
    app = DomainDispatcherApplication(create_backend_app)
    run_simple(args.host, args.port, Serialised(app), threaded=True, request_handler=MotoRequestHandler)


if __name__ == "__main__":
    main()
