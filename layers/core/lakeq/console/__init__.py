"""The backlog console's read model (the page itself lives in console/ as static files).
"""
from lakeq import exports

__getattr__, __dir__, __all__ = exports(__name__, {
    "monitor": ("asset", "list_clients", "subscription_offsets", "topic_detail",),
})
