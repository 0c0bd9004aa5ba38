"""The produce use case, delayed messages (kept until due, then promoted into the log) and the head
mover (the SegmentsTable stream's consumer that moves each queue's ``max_offset``).
"""
from lakeq import exports

__getattr__, __dir__, __all__ = exports(__name__, {
    "delayed": ("promote", "promote_due", "sweep",),
    "heads": ("advance",),
    "service": ("produce",),
})
