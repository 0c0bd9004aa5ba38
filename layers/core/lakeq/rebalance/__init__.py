"""Server-side rebalancing, pure: the assignors, the group state machine and its storage codec. No AWS.
"""
from lakeq import exports

__getattr__, __dir__, __all__ = exports(__name__, {
    "assignors": (
        "Subscription", "assign", "imbalance", "is_balanced", "moved_queues", "range_assignor",
        "round_robin", "sticky", "validate_assignment",
    ),
    "codec": ("COMPRESS_ABOVE", "dumps", "legacy_dict", "pack", "unpack",),
    "state": (
        "AWAITING", "DEFAULT_SESSION_TIMEOUT_MS", "GroupBadRequest", "GroupError", "GroupState", "Member",
        "PREPARING", "STABLE", "STATES", "StaleGeneration", "UnknownMember", "describe", "expire",
        "force_rebalance", "heartbeat", "join", "leave", "new_group", "servable_queues", "set_plan", "sync",
        "topics_changed",
    ),
})
