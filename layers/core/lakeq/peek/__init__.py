"""Peek (issue 18.3): read a topic queue, a consumer group's unsettled messages or a subscription's
list without locking, settling or counting a delivery — ``service``; the paging and state rules
are pure, in :mod:`lakeq.log.peek_plan`.
"""
from lakeq import exports

__getattr__, __dir__, __all__ = exports(__name__, {
    "service": ("group_pending", "queue_messages", "subscription_pending",),
})
