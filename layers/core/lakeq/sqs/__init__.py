"""The SQS-compatible endpoint: wire protocol, SigV4 authentication, SQS credentials and the actions
over lakeq topics.
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
    "service": ("authenticate_request", "handle",),
    "sigv4": (
        "EMPTY_SHA256", "SigV4Error", "canonical_request", "check_time", "lower_headers", "parse",
        "signing_key", "verify",
    ),
})
