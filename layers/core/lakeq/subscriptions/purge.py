"""UnsubscribeFunction's work: a deleted subscription's message list is purged from the
SubscriptionsTable stream (the DELETE route purges inline first, :func:`lakeq.subscriptions.service.delete`).
A stream consumer, so it loads the subscription storage only, none of the HTTP use cases."""
from __future__ import annotations

import logging

from lakeq.store.subscriptions import VERSION_ID, SubscriptionRepo, is_subscription_id

log = logging.getLogger("lakeq.subscriptions.purge")


def purge_removed(event: dict, deadline: float | None = None) -> dict:
    """UnsubscribeFunction: SubscriptionsTable stream records → purge the lists of deleted
    subscriptions. Only ``REMOVE`` records of subscription items count (the event source
    mapping filters the others out on AWS; the local pump delivers all). Idempotent; a list not
    purged by ``deadline`` is reported in ``batchItemFailures`` and retried from there."""
    records = event.get("Records") or []
    for r in records:
        if r.get("eventName") != "REMOVE":
            continue
        sid = (((r.get("dynamodb") or {}).get("Keys") or {}).get("id") or {}).get("S")
        if not sid or sid == VERSION_ID or not is_subscription_id(sid):
            continue
        try:
            done = SubscriptionRepo.purge_list(sid, deadline)
        except Exception:  # noqa: BLE001 - reported, retried by the event source mapping
            log.exception("purging the list of subscription %s failed", sid)
            done = False
        if not done:
            return {"batchItemFailures": [{"itemIdentifier": r["dynamodb"]["SequenceNumber"]}]}
    return {"batchItemFailures": []}
