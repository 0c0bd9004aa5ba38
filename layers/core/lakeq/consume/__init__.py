"""Pull, ack, visibility and offsets: the pull loop over one log, settlement of receipts.
"""
from lakeq import exports

__getattr__, __dir__, __all__ = exports(__name__, {
    "reader": ("ListLog", "broker", "consume", "list_reader", "views",),
    "service": ("ack", "offsets", "pull", "reset_offset", "visibility",),
    "settle": ("Policy",),
})
