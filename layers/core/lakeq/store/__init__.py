"""pynamodb models and repositories: the only package that imports pynamodb (every lock, ack, offset
move and generation change is a conditional write or a transaction here). The models are private to
it: the repositories hand plain records (:mod:`lakeq.store.records`) to the use cases.
"""
from lakeq import exports

__getattr__, __dir__, __all__ = exports(__name__, {
    "append": ("Contended", "append_at_head",),
    "bodies": ("BodyStore",),
    "catalog": ("ClientRepo", "TopicRepo", "inc_of",),
    "delayed": ("DelayedRepo",),
    "groups": (
        "GroupFull", "GroupRepo", "MAX_MEMBERS", "MAX_MEMBER_TOPICS", "View", "expand_topics",
        "member_queues", "queue_counts", "servable", "sweep",
    ),
    "offsets": ("OffsetRepo",),
    "queue_log": ("LogRepo",),
    "records": ("Client", "Queue", "Topic", "log_of"),
    "push": ("GroupPushRepo", "PushRepo"),
    "replay_lists": ("LIST_TTL_S", "ReplayListRepo", "active_replays", "replay_log", "replay_marker", "replay_markers",
                     "replay_owner",),
    "sqs": ("SqsRepo", "group_name", "key_owner", "producer_name",),
    "subscriptions": (
        "ParkRepo", "Start", "Subscription", "SubscriptionRepo", "VERSION_ID", "is_subscription_id",
        "list_owner", "list_topic",
    ),
    "writes": ("CONDITION_FAILED", "TransactionFailed", "transact", "warm_transactions",),
})
