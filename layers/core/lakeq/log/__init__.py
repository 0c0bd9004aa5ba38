"""The log's format and the pure rules over it: segments, where a produced or delayed message goes,
receipts, which queue a pull locks, what an ack settles, how the fan-out groups a topic's messages
per subscription. No AWS.
"""
from lakeq import exports

__getattr__, __dir__, __all__ = exports(__name__, {
    "claims": (
        "ClaimMismatch", "ClaimMissing", "INLINE_BYTES", "PREFIX", "digest", "is_claim", "make", "needs_claim",
        "object_key", "verify",
    ),
    "delay_plan": (
        "Delayed", "MAX_DELAY_MS", "decode_message", "delayed_item_bytes", "delete_key_bytes", "due_count",
        "due_key", "encode_message", "next_due_after", "plan_delayed", "promotion_extra",
    ),
    "fanout_plan": (
        "CHUNK_BYTES", "CHUNK_GROUPS", "Group", "ListMessage", "Plan", "decode_record", "group_messages",
        "parked_view", "parse_parked", "plan",
    ),
    "produce_plan": (
        "Append", "QUEUE_ITEM_BYTES", "TRANSACT_BYTES", "TRANSACT_ITEMS", "dedup_item_bytes", "plan_parts",
        "pq", "queue_for_key", "segment_item_bytes",
    ),
    "receipts": ("Receipt", "parse", "replay_field", "subscription_field", "topic_queue_field",),
    "segments": (
        "ENTRY", "Message", "SEGMENT_DATA_LIMIT", "Segment", "all_headers", "encode", "read", "split",
    ),
    "selection": (
        "QueueView", "ack_entry", "ack_key", "acked", "candidates", "kept_acks", "lock_until", "may_ack",
        "next_lock_ts",
    ),
    "settlement": (
        "NotInBatch", "Outcomes", "Stale", "State", "advance", "dead_lettered", "from_record", "gone",
        "lock", "normalize", "settle", "simple", "to_settle", "visibility",
    ),
})
