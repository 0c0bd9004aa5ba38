"""Push delivery (issue 17): webhook endpoints of subscriptions and consumer groups — ``service``
(the routes' use cases: register, show, pause, rotate the signing secret, delete) and ``delivery``
(the deliverer PushFunction runs: lock a batch with the pull loop, POST it signed, ack it or
schedule its retry; it loads no HTTP use case). The wire rules (settings, signatures, the retry
rule) are pure, in :mod:`lakeq.contract.push`; storage in :mod:`lakeq.store.push`.
"""
from lakeq import exports

__getattr__, __dir__, __all__ = exports(__name__, {
    "service": ("GROUP", "SUBSCRIPTION", "delete", "get", "pause", "put", "rotate", "view"),
    "delivery": ("Delivered", "deliver", "deliver_all", "deliver_group", "http_poster",
                 "subscriptions_of_records", "sweep"),
})
