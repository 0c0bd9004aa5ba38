"""Consumer groups' use cases (join, sync, heartbeat, leave, describe) over store.groups and rebalance.
"""
from lakeq import exports

__getattr__, __dir__, __all__ = exports(__name__, {
    "service": ("describe", "heartbeat", "join", "leave", "sync",),
})
