"""Authentication (hashed keys, principals) and the admin use cases: topics, clients, API keys.
"""
from lakeq import exports

__getattr__, __dir__, __all__ = exports(__name__, {
    "auth": (
        "CLIENT_CACHE_TTL_S", "KEY_CACHE_TTL_S", "Principal", "admin_client", "authenticate", "authorize",
        "clear_caches", "client_or_404", "forget_client", "hash_key", "require_admin", "topic_or_404",
    ),
    "service": (
        "MAX_KEYS", "client_view", "create_client", "create_topic", "grow_topic", "issue_key", "list_keys",
        "list_topics", "patch_client", "revoke_key", "topic_view",
    ),
})
