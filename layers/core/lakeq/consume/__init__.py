"""Pull, ack, visibility and offsets: the pull loop over one log, settlement of receipts.

The engine API (:mod:`lakeq.consume.engine`), typed, no HTTP parsing — what the native routes'
use cases (:mod:`lakeq.consume.service`) and the SQS endpoint (:mod:`lakeq.sqs.messages`) call:

- ``pull_batch(principal, topic item, PullRequest, *, ack, budget, with_replays, hints_max_age_s,
  suspects)``: one pull of a group's batch (``PullRequest``: the typed request a route parses from
  its query, or the SQS adapter builds);
- ``group_lock(group, topic item, receipt, client_id)`` → ``Lock``: the one check that a receipt is
  this group's (its offsets owner), this broker's and this incarnation's (409 ``stale_receipt``);
  ``check_receipt`` adds a native request's checks before it (subscription, topic, key);
- ``settle_lock(group, lock, accept, release)`` and ``set_visibility(lock, visibility_ms)``.

The HTTP use cases: ``pull``, ``ack``, ``visibility``, ``offsets``, ``reset_offset``. Other
packages import these names from ``lakeq.consume``, never a submodule
(``tests/unit/test_architecture.py``; its allow-list names what push, subscriptions, peek,
redrive and console still take from the submodules).
"""
from lakeq import exports

__getattr__, __dir__, __all__ = exports(__name__, {
    "engine": ("STALE", "Lock", "PullRequest", "check_receipt", "group_lock", "pull_batch", "set_visibility",
               "settle_lock",),
    "reader": ("ListLog", "broker", "consume", "list_reader", "views",),
    "service": ("ack", "offsets", "pull", "reset_offset", "visibility",),
    "settle": ("Policy",),
})
