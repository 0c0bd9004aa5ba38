"""pynamodb models of the tables in ``template.yaml`` (names from the environment).

The key schemas here and in ``template.yaml`` must agree; tests create the tables from
``template.yaml`` and exercise these models against them, so a mismatch fails the suite.
Connections are created lazily by pynamodb on first use, never at import time.
"""
from __future__ import annotations

import os

from pynamodb.attributes import (
    BinaryAttribute,
    BooleanAttribute,
    ListAttribute,
    NumberAttribute,
    TTLAttribute,
    UnicodeAttribute,
    VersionAttribute,
)
from pynamodb.models import Model


def _region() -> str:
    return os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"


def _meta(env: str, default: str) -> type:
    class Meta:
        table_name = os.environ.get(env, default)
        region = _region()
        max_retry_attempts = 8
        base_backoff_ms = 25

    return Meta


class TopicModel(Model):
    Meta = _meta("TOPICS_TABLE", "lakeq-topics")
    name = UnicodeAttribute(hash_key=True)
    queues = NumberAttribute()
    parent = UnicodeAttribute(null=True)
    created_at = NumberAttribute()


class ClientModel(Model):
    Meta = _meta("CLIENTS_TABLE", "lakeq-clients")
    name = UnicodeAttribute(hash_key=True)
    role = UnicodeAttribute()
    topics = ListAttribute(of=UnicodeAttribute)
    mode = UnicodeAttribute(default="clustering")
    visibility_timeout_ms = NumberAttribute(default=30_000)
    key_hash = UnicodeAttribute()
    created_at = NumberAttribute()


class KeyModel(Model):
    Meta = _meta("KEYS_TABLE", "lakeq-keys")
    key_hash = UnicodeAttribute(hash_key=True)
    client = UnicodeAttribute()


class QueueModel(Model):
    """One per topic queue: the log's offsets. ``max_offset`` is the next offset to write."""

    Meta = _meta("QUEUES_TABLE", "lakeq-queues")
    topic = UnicodeAttribute(hash_key=True)
    queue = NumberAttribute(range_key=True)
    max_offset = NumberAttribute(default=0)
    min_offset = NumberAttribute(default=0)
    last_produced_at = NumberAttribute(default=0)


class SegmentModel(Model):
    """What one produce request put into one queue: offsets ``[base, end)``."""

    Meta = _meta("SEGMENTS_TABLE", "lakeq-segments")
    pq = UnicodeAttribute(hash_key=True)  # "<topic>#<queue>"
    base = NumberAttribute(range_key=True)
    end = NumberAttribute()
    count = NumberAttribute()
    idx = BinaryAttribute(legacy_encoding=False)
    data = BinaryAttribute(legacy_encoding=False)
    z = BooleanAttribute(default=False)
    produced_at = NumberAttribute()
    expires_at = TTLAttribute(null=True)


class DedupModel(Model):
    """A client-chosen message id seen on a topic, and where it landed."""

    Meta = _meta("DEDUP_TABLE", "lakeq-dedup")
    topic = UnicodeAttribute(hash_key=True)
    id = UnicodeAttribute(range_key=True)
    queue = NumberAttribute()
    offset = NumberAttribute()
    expires_at = TTLAttribute(null=True)


class OffsetModel(Model):
    """A queue-offset record: ``owner`` is ``g|group|topic``, ``b|group|client_id|topic`` or ``s|sub_id``."""

    Meta = _meta("OFFSETS_TABLE", "lakeq-offsets")
    owner = UnicodeAttribute(hash_key=True)
    queue = NumberAttribute(range_key=True)
    committed_offset = NumberAttribute(default=0)
    lock_ts = NumberAttribute(default=0)
    lock_until = NumberAttribute(default=0)
    lock_next = NumberAttribute(null=True)
    lock_owner = UnicodeAttribute(null=True)
    last_consumed_at = NumberAttribute(default=0)
    group = UnicodeAttribute(null=True)
    client_id = UnicodeAttribute(null=True)
    topic = UnicodeAttribute(null=True)
    updated_at = NumberAttribute(default=0)


class GroupModel(Model):
    """One consumer group's membership state (``lakeq.groups.GroupState``) as a JSON string, written
    only conditionally on ``version`` (pynamodb's optimistic locking: every ``save`` adds
    ``version = <read>`` — or ``attribute_not_exists`` for a new item — and increments it).
    ``generation`` and ``members`` repeat what the JSON says, for the stream's readers.
    ``subscriptions`` maps each member id to the topics it asked for (before parent topics were
    expanded to their children), so a child topic created later can be picked up."""

    Meta = _meta("GROUPS_TABLE", "lakeq-groups")
    group = UnicodeAttribute(hash_key=True)
    state = UnicodeAttribute()
    subscriptions = UnicodeAttribute(default="{}")
    generation = NumberAttribute(default=0)
    members = NumberAttribute(default=0)
    updated_at = NumberAttribute(default=0)
    version = VersionAttribute()
