"""lakeq matcher layer: pure Python, no AWS imports.

- :mod:`matcher.bitmap` — the multi-tag 64-bit filter of SPEC §2.
- :mod:`matcher.index` — :class:`SubscriptionIndex`, the subscription matcher of SPEC §3.
"""
from .bitmap import K, matches_any, may_match_any, tag_hash, tags_bitmap

__all__ = ["K", "tag_hash", "tags_bitmap", "may_match_any", "matches_any"]

try:  # the index arrives with the subscriptions issue
    from .index import SubscriptionIndex  # noqa: F401

    __all__.append("SubscriptionIndex")
except ImportError:  # pragma: no cover
    pass
