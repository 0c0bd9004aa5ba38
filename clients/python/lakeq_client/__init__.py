"""Python client for the lakeq HTTP API (``shared/API.md``) and the ``lakeq`` CLI.

>>> from lakeq_client import Admin, Producer, Consumer
>>> Admin  # doctest: +ELLIPSIS
<class 'lakeq_client.client.Admin'>
"""
from .client import Admin, Batch, Consumer, Producer, Subscription, Subscriptions
from .group import GroupMember
from .http import (
                   ApiError,
                   Connection,
                   LakeqError,
                   RequestsTransport,
                   Response,
                   RetryPolicy,
                   Transport,
                   TransportError,
)
from .push import verify_push, verify_webhook

__all__ = ["Admin", "ApiError", "Batch", "Connection", "Consumer", "GroupMember", "LakeqError",
           "Producer", "RequestsTransport", "Response", "RetryPolicy", "Subscription",
           "Subscriptions", "Transport", "TransportError", "verify_push", "verify_webhook"]
__version__ = "0.1.0"
