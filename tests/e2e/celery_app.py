"""The Celery app of tests/e2e/test_celery_e2e.py: kombu's SQS transport against lakeq's SQS endpoint.

The worker is started as ``celery -A celery_app worker`` with ``LAKEQ_CELERY_BROKER``
(``sqs://<access key id>:<secret>@127.0.0.1:<port>``), ``LAKEQ_CELERY_PREFIX`` (queue name prefix)
and ``LAKEQ_CELERY_OUT`` (the file each task run appends its argument to) in its environment; the
test builds the same app with :func:`make_app` to send tasks with ``.delay()``.
"""
from __future__ import annotations

import fcntl
import os

from celery import Celery


def make_app(broker: str, prefix: str, out: str | None = None):
    app = Celery("lakeq_e2e", broker=broker)
    app.conf.update(
        broker_transport_options={
            "region": "us-east-1",
            "is_secure": False,  # http://127.0.0.1:<port> (kombu builds endpoint_url from the broker URL)
            "wait_time_seconds": 1,  # ReceiveMessage long polls of 1 s
            "polling_interval": 0.2,
            "visibility_timeout": 60,
            "queue_name_prefix": prefix,
        },
        broker_connection_retry_on_startup=True,
        task_ignore_result=True,
        worker_enable_remote_control=False,  # no fanout (SNS) exchange
        worker_prefetch_multiplier=1,
        worker_hijack_root_logger=False,
    )

    @app.task(name="record")
    def record(n: int) -> None:
        with open(out or os.environ["LAKEQ_CELERY_OUT"], "a", encoding="utf-8") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            fh.write(f"{n}\n")

    return app, record


if os.environ.get("LAKEQ_CELERY_BROKER"):
    app, record = make_app(os.environ["LAKEQ_CELERY_BROKER"], os.environ.get("LAKEQ_CELERY_PREFIX", ""))
