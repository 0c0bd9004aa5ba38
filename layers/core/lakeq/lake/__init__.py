"""The data lake: the archiver's partitioned objects and the reports the Glue jobs write.
"""
from lakeq import exports

__getattr__, __dir__, __all__ = exports(__name__, {
    "archive": (
        "batch_objects", "decode_rows", "member_rows", "message_rows", "parse_owner",
        "seq_of", "split_batch",
    ),
    "report_keys": ("BACKLOG", "PLANS", "history_prefix", "plan_key", "run_key", "summary_key",),
    "reports": ("backlog",),
})
