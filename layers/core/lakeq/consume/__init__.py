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

The logs and their readers, for the features that lock, settle or read logs other than a
group's topic (push, subscriptions, peek, redrive, the console):

- ``TopicLog``, ``ListLog`` (a subscription's message list), ``ReplayLog`` (a replay's list), and
  ``consume(log, visibility_ms, PullRequest, allowed, ...)``: the pull loop over one log;
- ``topic_reader``, ``list_reader``, ``replay_reader``: a log's messages by offset, no lock;
- ``settle_receipt(owner, queue, receipt, Outcomes, Policy, reader, now, stale)`` and
  ``receipt_visibility(owner, queue, receipt, until, now)``: a receipt of any log settled or its
  lock moved (the compare-and-set on its offsets record); ``Policy``, ``policy_of(client)``,
  ``subscription_policy(subscription)``: where dead letters go and after how many deliveries;
- ``views``, ``views_of``: queue views (offsets, lock) for the offsets and summary pages; ``broker``.

The HTTP use cases: ``pull``, ``ack``, ``visibility``, ``offsets``, ``reset_offset``
(``receipt_replay``: the replay a receipt's batch belongs to, for the routes' counters). Other
packages import these names from ``lakeq.consume``, never a submodule
(``tests/unit/test_architecture.py``).
"""
from lakeq import exports

__getattr__, __dir__, __all__ = exports(__name__, {
    "engine": ("STALE", "Lock", "PullRequest", "check_receipt", "group_lock", "pull_batch", "set_visibility",
               "settle_lock",),
    "reader": ("ListLog", "TopicLog", "broker", "consume", "list_reader", "topic_reader", "views", "views_of",),
    "replays": ("ReplayLog", "replay_reader",),
    "service": ("ack", "offsets", "pull", "receipt_replay", "reset_offset", "visibility",),
    "settle": ("Policy", "policy_of", "receipt_visibility", "settle_receipt", "subscription_policy",),
})
