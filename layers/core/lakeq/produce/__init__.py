"""The produce use case and delayed messages (kept until due, then promoted into the log).
"""
from lakeq import exports

__getattr__, __dir__, __all__ = exports(__name__, {
    "delayed": ("promote", "promote_due", "sweep",),
    "service": ("produce",),
})
