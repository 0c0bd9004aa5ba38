"""WebSocket wake-ups (issue 16): ``plan`` (pure: watch keys, coalescing, the messages) and
``service`` ($connect / watch / $disconnect, the stream-triggered notifier, the management-API poster).
Wake-ups are hints: a lost one costs latency, never a message.
"""
from lakeq import exports

__getattr__, __dir__, __all__ = exports(__name__, {
    "plan": ("Watch", "coalesce", "key_from_request", "parse_watch", "reply", "wake_message", "woken_keys",),
    "notify": ("NotifyResult", "delete_watches", "management_poster", "watchers_of",),
    "service": ("Gone", "connect", "disconnect", "watch",),
})
