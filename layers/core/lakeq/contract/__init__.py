"""Request bodies and parameters checked into plain values (400 on anything else). No AWS.
"""
from lakeq import exports

__getattr__, __dir__, __all__ = exports(__name__, {
    "validation": (
        "AckBatchIn", "AckIn", "DEFAULT_PULL", "MAX_BODY_BYTES", "MAX_DELAY_MS", "MAX_ID_LEN",
        "MAX_KEY_LEN", "MAX_MESSAGES", "MAX_MESSAGE_BYTES", "MAX_META_BYTES", "MAX_PROPERTIES", "MAX_PULL",
        "MAX_REQUEST_BYTES", "MAX_TAGS", "MAX_TAG_LEN", "MAX_WAIT_MS", "MessageIn", "PullRequest", "ack",
        "ack_batch", "create_client", "create_topic", "dead_letter_settings", "int_field", "int_param",
        "json_body", "message_bytes", "patch_client", "produce", "pull", "reset_offset", "tag_list",
        "visibility",
    ),
})
