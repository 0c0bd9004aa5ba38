"""Shared and pure: the one error root and its HTTP mapping, names, the clock, payload limits, the one
backoff, the containers' bounded memories, Logger/Metrics.
"""
from lakeq import exports

__getattr__, __dir__, __all__ = exports(__name__, {
    "backoff": ("AT_ONCE", "CAS_ATTEMPTS", "RETRY", "Retry", "cas", "sleep",),
    "clock": ("now",),
    "memo": ("keep",),
    "errors": (
        "ApiError", "BadRequest", "Conflict", "Forbidden", "LakeqError", "NotFound", "PayloadTooLarge",
        "StaleReceipt", "Unauthorized", "Unavailable", "below_limit", "counted", "http_error",
    ),
    "names": (
        "LOG_SEP", "NAME_RULE", "TOPIC_RULE", "ancestors", "check_name", "check_topic", "covers",
        "is_log_name", "is_name", "is_topic", "log_name", "parent_of", "split_log", "topic_of_log",
    ),
    "obs": ("logger", "metrics",),
    "payload": ("BATCH_BYTES", "ByteBudget", "LAMBDA_RESPONSE_LIMIT", "dumps", "lambda_bytes",),
})
