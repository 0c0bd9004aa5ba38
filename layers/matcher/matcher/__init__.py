"""lakeq matcher layer: pure Python, no AWS imports.

- :mod:`matcher.bitmap` — the multi-tag 64-bit filter of SPEC §2.
- :mod:`matcher.index` — :class:`SubscriptionIndex`, the subscription matcher of SPEC §3.

``matcher.index`` is imported on first use of ``matcher.SubscriptionIndex`` (or by importing
``matcher.index`` itself), not with the package: most functions need only the bitmap, which every
segment codec imports, and the index is the layer's largest module (docs/design.md "Cold start").
"""
from .bitmap import K, matches_any, may_match_any, tag_hash, tags_bitmap

__all__ = ["K", "tag_hash", "tags_bitmap", "may_match_any", "matches_any", "SubscriptionIndex"]


def __getattr__(name: str):
    if name == "SubscriptionIndex":
        from .index import SubscriptionIndex

        return SubscriptionIndex
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
