"""The SQS-compatible endpoint: ``handler`` (one event → one action, errors in SQS's wire format),
``permissions`` (who is calling, what they may do, the request context), ``queues`` and ``messages``
(the actions over lakeq topics), ``protocol`` (wire formats, pure), ``sigv4``/``credentials`` (pure),
``auth`` and ``keys`` (SQS credentials).
"""
from lakeq import exports

__getattr__, __dir__, __all__ = exports(__name__, {
    "auth": ("SqsAuthError", "authenticate",),
    "credentials": ("admin_access_key_id", "derive_secret", "item_key",),
    "keys": (
        "CACHE_TTL_S", "admin_credential", "clear_caches", "issue_credential", "list_credentials",
        "master_secret", "revoke_credential",
    ),
    "protocol": (
        "SqsError", "access_denied", "check_attributes", "check_batch", "check_body",
        "check_message_attributes", "decode_handle", "encode_handle", "int_param", "invalid", "json_error",
        "md5_attributes", "md5_hex", "message_size", "name_of_arn", "no_queue", "query_request",
        "queue_name_of_url", "xml_error", "xml_response",
    ),
    "handler": ("ACTIONS", "handle",),
    "messages": (
        "change_message_visibility", "change_message_visibility_batch", "delete_message", "delete_message_batch",
        "receive_message", "send_message", "send_message_batch",
    ),
    "permissions": ("ADMIN", "Ctx", "Queue", "allow", "authenticate_request", "may_see"),
    "queues": (
        "create_queue", "delete_queue", "get_queue_attributes", "get_queue_url", "list_dead_letter_source_queues",
        "list_queue_tags", "list_queues", "purge_queue", "set_queue_attributes", "tag_queue", "untag_queue",
    ),
    "sigv4": (
        "EMPTY_SHA256", "SigV4Error", "canonical_request", "check_time", "lower_headers", "parse",
        "signing_key", "verify",
    ),
})
