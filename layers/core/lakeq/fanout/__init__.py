"""The stream-triggered fan-out: matches each new message against the subscription index and appends it
to the matching subscriptions' lists.
"""
from lakeq import exports

__getattr__, __dir__, __all__ = exports(__name__, {
    "worker": (
        "Matcher", "PoisonBatch", "handle", "handle_batch", "matcher", "redeliver_parked", "response",
    ),
})
