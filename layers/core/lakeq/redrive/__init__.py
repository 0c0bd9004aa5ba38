"""Redrive (issue 18.3): move a dead-letter topic's messages back to the topics they came from (or
a chosen one) at a rate, with progress — ``service`` (start, show, list, cancel, and the runner the
schedule invokes). The rules (copy ids, destinations, positions, the rate) are pure, in
:mod:`lakeq.log.move_plan`; storage in :mod:`lakeq.store.redrives`.
"""
from lakeq import exports

__getattr__, __dir__, __all__ = exports(__name__, {
    "service": ("cancel", "get", "list_", "run", "run_all", "start",),
})
