"""Filtered subscriptions' use cases: create, list, delete, pull and ack their message lists.
"""
from lakeq import exports

__getattr__, __dir__, __all__ = exports(__name__, {
    "purge": ("purge_removed",),
    "service": ("ack", "create", "delete", "list_", "pull", "read_list", "visibility",),
})
