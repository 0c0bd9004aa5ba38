"""The operator console's read model (the page itself lives in console/ as static files):
``monitor`` (clients, a topic's queues, a subscription's list) and ``summary`` (``GET /v1/summary``).
"""
from lakeq import exports

__getattr__, __dir__, __all__ = exports(__name__, {
    "monitor": ("asset", "list_clients", "subscription_offsets", "topic_detail",),
    "summary": ("oldest_at",),
})
