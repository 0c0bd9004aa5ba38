"""Push delivery (issue 17): a subscription's webhook endpoint — ``service`` (register, show, pause,
rotate the signing secret, delete; the deliverer that locks a batch with the pull loop, POSTs it
signed and acks it or schedules its retry). The wire rules (settings, signatures, the retry rule)
are pure, in :mod:`lakeq.contract.push`; storage in :mod:`lakeq.store.push`.
"""
from lakeq import exports

__getattr__, __dir__, __all__ = exports(__name__, {
    "service": ("Delivered", "deliver", "deliver_all", "delete", "get", "http_poster", "pause", "put", "rotate",
                "subscriptions_of_records", "sweep", "view",),
})
