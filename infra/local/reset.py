"""The local stack back to its just-started state, for moto's test suite in server mode
(``POST /moto-api/reset``; ``--sqs-any-signature`` only: docs/api.md "SQS conformance").

:meth:`LocalReset.__call__`, synchronously, in this order:

1. the stream pumps are held (their locks: no batch is being read or delivered meanwhile);
2. every function's warm environments go (worker processes ended, in-process instances dropped):
   their module-level caches (topics, clients, SQS keys, read hints…) would otherwise answer for
   queues that no longer exist; the next invocation starts a fresh one;
3. every item of every table of the template and every object of its buckets is deleted (the
   tables, their streams, the buckets, the secrets and the on-failure queue stay: their ARNs are
   in the functions' environments and roles);
4. each pump's position moves past the REMOVE records that step 3 wrote, so no function is
   invoked later for them (a late invocation could act on items made after the reset).

Deleting each SQS queue through DeleteQueue instead is not a reset: another warm environment's
cached topic item stays valid for up to 5 s (lakeq.sqs.permissions.TOPIC_CACHE_TTL_S), the
deletion's stream records are handled later by the stream functions, and lakeq's own items
(clients, offsets, delayed messages of other topics) stay.
"""
from __future__ import annotations

import logging
from contextlib import ExitStack
from typing import Any, Iterable

from . import template as tpl_mod

log = logging.getLogger("lakeq.local.reset")


def wipe_table(ddb: Any, name: str, key: list[str]) -> int:
    """Delete every item of table ``name`` (key attribute names ``key``). Returns how many."""
    names = {f"#k{i}": k for i, k in enumerate(key)}
    kwargs: dict[str, Any] = {"TableName": name, "ProjectionExpression": ", ".join(names),
                              "ExpressionAttributeNames": names, "ConsistentRead": True}
    n = 0
    while True:
        page = ddb.scan(**kwargs)
        items = page.get("Items", [])
        for i in range(0, len(items), 25):
            batch = {name: [{"DeleteRequest": {"Key": it}} for it in items[i:i + 25]]}
            while batch:
                out = ddb.batch_write_item(RequestItems=batch)
                batch = out.get("UnprocessedItems") or {}
        n += len(items)
        if not page.get("LastEvaluatedKey"):
            return n
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def empty_bucket(s3: Any, name: str) -> int:
    n = 0
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=name):
        keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
        if keys:
            s3.delete_objects(Bucket=name, Delete={"Objects": keys, "Quiet": True})
            n += len(keys)
    return n


class LocalReset:
    def __init__(self, ctx: tpl_mod.Context, *, dynamodb_client: Any, s3_client: Any,
                 handlers: Any = None, pumps: Iterable[Any] = ()):
        self.ctx = ctx
        self.ddb = dynamodb_client
        self.s3 = s3_client
        self.handlers = handlers
        self.pumps = [p for p in pumps if p is not None]
        self.tables = {kw["TableName"]: [k["AttributeName"] for k in kw["KeySchema"]]
                       for kw in tpl_mod.table_definitions(ctx).values()}
        self.buckets = list(tpl_mod.bucket_names(ctx).values())

    def __call__(self) -> dict[str, int]:
        with ExitStack() as held:
            for p in self.pumps:
                held.enter_context(p.lock)
            if self.handlers is not None and hasattr(self.handlers, "reset"):
                self.handlers.reset()
            items = sum(wipe_table(self.ddb, name, key) for name, key in self.tables.items())
            objects = sum(empty_bucket(self.s3, b) for b in self.buckets)
            skipped = sum(p.skip_to_end() for p in self.pumps)
        log.info("reset: %d items, %d objects deleted; %d stream records skipped", items, objects, skipped)
        return {"items": items, "objects": objects, "stream_records_skipped": skipped}
