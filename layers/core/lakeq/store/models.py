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
    MapAttribute,
    NumberAttribute,
    TTLAttribute,
    UnicodeAttribute,
    UnicodeSetAttribute,
    VersionAttribute,
)
from pynamodb.models import Model

from lakeq.common import names


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
    # the SQS face of the topic (lakeq.store.sqs): JSON {"attributes", "tags", "modified"}; absent
    # on topics never touched through the SQS endpoint (then SQS's defaults apply)
    sqs = UnicodeAttribute(null=True)
    # the topic's incarnation (absent = 0): a topic created over a deleted one's tombstone is the next
    # one, and every key derived from it uses its log name (lakeq.common.names.log_name). ``deleted_at``
    # set = a tombstone: the topic does not exist (docs/design.md "Queue lifecycle").
    inc = NumberAttribute(null=True)
    deleted_at = NumberAttribute(null=True)


class ClientModel(Model):
    Meta = _meta("CLIENTS_TABLE", "lakeq-clients")
    name = UnicodeAttribute(hash_key=True)
    role = UnicodeAttribute()
    topics = ListAttribute(of=UnicodeAttribute)
    mode = UnicodeAttribute(default="clustering")
    visibility_timeout_ms = NumberAttribute(default=30_000)
    key_hash = UnicodeAttribute()  # the key issued at creation (kept; the live set is key_map)
    created_at = NumberAttribute()
    # the client's live keys, JSON {key_id: sha-256}; absent on clients created before key
    # rotation (then the one live key is key_hash). key_version: the CAS counter of key_map.
    key_map = UnicodeAttribute(null=True)
    key_version = NumberAttribute(null=True)
    # the client's live SQS access key ids, JSON list (issue 9, lakeq.sqs.keys; absent = none);
    # changed under the same key_version CAS. The secrets are derived, never stored.
    sqs_keys = UnicodeAttribute(null=True)
    # consumers (issue 9): deliveries before a message is dead-lettered (absent: unlimited) and
    # the topic dead-lettered copies go to (absent: dropped and counted); PATCH /v1/clients/{name}
    max_deliveries = NumberAttribute(null=True)
    dead_letter_topic = UnicodeAttribute(null=True)
    # a consumer group's push endpoint (issue 17, lakeq.store.push.GroupPushRepo): the same
    # attributes as a subscription's, plus the in-flight leases {"<slot>": expiry epoch ms}
    push = UnicodeAttribute(null=True)
    push_secrets = UnicodeAttribute(null=True)
    push_paused = BooleanAttribute(null=True)
    push_state = UnicodeAttribute(null=True)
    push_failures = NumberAttribute(null=True)
    push_delivered = NumberAttribute(null=True)
    push_dead_lettered = NumberAttribute(null=True)
    push_send_at = NumberAttribute(null=True)
    push_leases = MapAttribute(null=True)
    # push endpoints this client has (its subscriptions' and its own as a group; absent = 0): kept
    # in the same transaction as every endpoint's registration and removal, and as the deletion of
    # a subscription with one, so concurrent registrations cannot pass the limit together
    push_endpoints = NumberAttribute(null=True)
    # subscriptions this client has (absent = 0): kept in the same transaction as every subscription's
    # creation and deletion, so concurrent creations cannot pass the limit together
    # (lakeq.subscriptions.service.MAX_SUBSCRIPTIONS_PER_CLIENT)
    subscriptions = NumberAttribute(null=True)
    # the admin left this consumer's rows out of the deployment's alarms (PATCH {"alarms": false};
    # absent: in them): lakeq.console.gauges publishes its rows, not in the alarmed aggregates
    alarms_muted = BooleanAttribute(null=True)
    # replays into this consumer group (issue 18.1, lakeq.store.replay_lists): "<replay id>|<topic>" per
    # replay whose hidden list the group's pulls of that topic read first (absent: none, the usual case)
    replays = UnicodeSetAttribute(null=True)


class KeyModel(Model):
    Meta = _meta("KEYS_TABLE", "lakeq-keys")
    key_hash = UnicodeAttribute(hash_key=True)
    client = UnicodeAttribute()
    key_id = UnicodeAttribute(null=True)
    created_at = NumberAttribute(null=True)


class QueueModel(Model):
    """One per topic queue: the log's offsets. ``max_offset`` is the next offset to write.

    Keyed by ``pq = "<topic>#<queue>"`` alone (as SegmentsTable), so each queue is its own
    partition: a topic's producers and consumers spread over its queues instead of all hitting one
    ``topic`` partition. ``topic`` and ``queue`` are kept as plain attributes (conditions such as
    ``QueueModel.topic.exists()`` test them). A topic's queues are read with BatchGetItem of
    ``<topic>#0 .. <topic>#<n-1>`` (``LogRepo.queues``), ``n`` from the topic item.
    ``QueueModel(topic, queue, **attributes)`` derives ``pq``; ``QueueModel(pq)`` also works."""

    Meta = _meta("QUEUES_TABLE", "lakeq-queues")
    pq = UnicodeAttribute(hash_key=True)  # "<topic>#<queue>"
    topic = UnicodeAttribute(null=True)
    queue = NumberAttribute(null=True)
    max_offset = NumberAttribute(default=0)
    min_offset = NumberAttribute(default=0)
    last_produced_at = NumberAttribute(default=0)
    # delayed delivery (lakeq.produce.delayed): the earliest ``deliver_at`` of the queue's DelayedTable items
    # (absent: none; never later than any of them), how many there are, and ``dver``, a counter every
    # delayed produce and every promotion moves (a promotion's conditional write compares it)
    next_due = NumberAttribute(null=True)
    delayed = NumberAttribute(null=True)
    dver = NumberAttribute(null=True)
    # a replay's hidden list (lakeq.store.replay_lists): the manifest position after the last copy
    # appended (a re-sent copy below it is already in), and when the replay ended (no more copies)
    rpos = NumberAttribute(null=True)
    ended_at = NumberAttribute(null=True)
    # a topic's change marker (issue 33, key ``<log>#w``, no ``topic``/``queue``): ``wv`` moves on
    # every bump, ``wat`` is the bump's time (lakeq.store.queue_log.LogRepo.bump_change)
    wv = NumberAttribute(null=True)
    wat = NumberAttribute(null=True)

    def __init__(self, topic: str | None = None, queue: int | None = None, **attributes):
        if topic is not None and queue is not None:
            super().__init__(queue_key(topic, queue), topic=topic, queue=queue, **attributes)
        else:  # QueueModel(pq) or pynamodb's own QueueModel(_user_instantiated=False)
            super().__init__(topic, **attributes)


queue_key = names.queue_key  # QueuesTable's and SegmentsTable's partition key: the key grammar's


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
    # put alone, without moving the queue item's head (an append without ids, issue 16 item 3): the
    # SegmentsTable stream's head mover (lakeq.produce.heads) moves it; absent when the append's
    # transaction moved the head itself
    h = BooleanAttribute(null=True)


class DedupModel(Model):
    """A client-chosen message id seen on a topic, and where it landed."""

    Meta = _meta("DEDUP_TABLE", "lakeq-dedup")
    topic = UnicodeAttribute(hash_key=True)
    id = UnicodeAttribute(range_key=True)
    queue = NumberAttribute()
    offset = NumberAttribute(null=True)  # absent while the message is delayed (lakeq.produce.delayed)
    deliver_at = NumberAttribute(null=True)  # a delayed message's due time
    expires_at = TTLAttribute(null=True)


class DelayedModel(Model):
    """A delayed message waiting for its ``deliver_at`` (lakeq.produce.delayed): ``pq`` = the queue chosen at
    produce time, ``due`` = ``"<deliver_at, 13 digits>#<id>"`` (due order, then id). ``msg`` is the
    message's segment encoding (header and unescaped body, as a segment stores it; see ``data``)."""

    Meta = _meta("DELAYED_TABLE", "lakeq-delayed")
    pq = UnicodeAttribute(hash_key=True)  # "<topic>#<queue>"
    due = UnicodeAttribute(range_key=True)
    deliver_at = NumberAttribute()
    cid = BooleanAttribute(default=False)  # the id is the client's (its dedup item gets the offset)
    # the message (lakeq.log.delay_plan.encode_message: header JSON + unescaped body, maybe zlib);
    # items written before it keep the JSON text in ``msg`` (read by decode_message either way)
    data = BinaryAttribute(null=True, legacy_encoding=False)
    msg = UnicodeAttribute(null=True)  # (old items) JSON {"id","body","key","tags","properties","produced_at"}


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
    # The newest acknowledged receipts' ``offset:next_offset:timestamp`` (at most
    # ``OffsetRepo.ACKS_KEPT`` + 1), so a retried acknowledgement can be told from a stale one.
    acks = ListAttribute(of=UnicodeAttribute, null=True)
    # Per-message settlement (issue 9, lakeq.log.settlement): the JSON state beyond the simple form
    # (absent: a lock [committed_offset, lock_next) delivered once, or nothing), how many messages
    # were dead-lettered, and ``sv``, a counter every write to the record adds 1 to (the
    # compare-and-set of read-modify-write settles).
    settle = UnicodeAttribute(null=True)
    dead_lettered = NumberAttribute(null=True)
    sv = NumberAttribute(null=True)
    # How many locks in a row were taken by a pull that folded the previous lock's ack into its
    # lock write (lakeq.log.selection.may_fold); absent after a lock chosen by ranking the queues.
    run = NumberAttribute(null=True)
    # The end of the newest segment a lock of this record read (a segment boundary the log reached,
    # never past its head): the pulls rank by max(queue item's hint, bnd), so a frontier equal to it is
    # known to be a boundary and probed with the others in one BatchGetItem (lakeq.consume.reader.Log.probe)
    bnd = NumberAttribute(null=True)


class GroupModel(Model):
    """One consumer group's *header* (``lakeq.store.groups``): the group's state
    (``lakeq.rebalance.state.GroupState`` minus fresh liveness) in the compact form of
    :mod:`lakeq.rebalance.codec` — ``state`` (JSON text) when small, else ``state_z`` (zlib bytes) —
    written only conditionally on ``version`` (pynamodb's optimistic locking: every ``save`` adds
    ``version = <read>`` — or ``attribute_not_exists`` for a new item — and increments it), alone or
    in a transaction with the deletes of removed members' :class:`GroupMemberModel` items.
    ``generation`` and ``members`` repeat what the state says, for the stream's readers.
    ``subscriptions`` is only read, from headers written before the compact form (version 1)."""

    Meta = _meta("GROUPS_TABLE", "lakeq-groups")
    group = UnicodeAttribute(hash_key=True)
    state = UnicodeAttribute(null=True)
    state_z = BinaryAttribute(null=True, legacy_encoding=False)
    subscriptions = UnicodeAttribute(null=True)
    generation = NumberAttribute(default=0)
    members = NumberAttribute(default=0)
    updated_at = NumberAttribute(default=0)
    version = VersionAttribute()


class GroupMemberModel(Model):
    """One member's liveness (``GroupMembersTable``): the newest heartbeat ``lh`` and the newest
    generation sent to it ``gen``. A heartbeat that changes nothing else writes only this small item
    (conditional on ``v``); the member's effective values are the larger of these and the header's.
    ``expires_at`` (TTL) removes items of members long gone."""

    Meta = _meta("GROUP_MEMBERS_TABLE", "lakeq-group-members")
    group = UnicodeAttribute(hash_key=True)
    member = UnicodeAttribute(range_key=True)
    lh = NumberAttribute(default=0)
    gen = NumberAttribute(default=0)
    expires_at = TTLAttribute(null=True)
    v = VersionAttribute()


class WatcherModel(Model):
    """WebSocket wake-ups (issue 16, :mod:`lakeq.wake`): a connection (``k = "c|<id>"``,
    ``c = "-"``: who connected and the watch keys it holds) or a watcher (``k = "w|<topic or
    ~sub>"``, ``c = <connection id>``: one Query of ``k`` finds every connection to wake).
    ``expires_at`` (TTL) removes what a connection that vanished without ``$disconnect`` left."""

    Meta = _meta("WATCHERS_TABLE", "lakeq-watchers")
    k = UnicodeAttribute(hash_key=True)
    c = UnicodeAttribute(range_key=True)
    admin = BooleanAttribute(null=True)  # connection: the admin key connected
    client = UnicodeAttribute(null=True)  # connection: the client whose key connected
    watches = UnicodeSetAttribute(null=True)  # connection: its watch keys
    group = UnicodeAttribute(null=True)  # watcher: the group it watches as (informational)
    conns = UnicodeAttribute(null=True)  # a client's connections (k = "n|<client>"): JSON {id: expiry s}
    v = NumberAttribute(null=True)  # the client's connections item's version (its conditional writes)
    expires_at = TTLAttribute(null=True)
