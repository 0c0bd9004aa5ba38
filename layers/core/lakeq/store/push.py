"""Push endpoints' storage (issue 17): attributes of the subscription item — :class:`PushRepo` — or
of a consumer group's client item — :class:`GroupPushRepo`, the same attribute names on
``ClientModel`` (no table of their own):
``push`` (the settings, JSON), ``push_secrets`` (JSON list of ``{"secret", "expires_at"}``, newest
first), ``push_paused``, ``push_state`` (the deliverer's last attempt, JSON: last writer wins) and
the counters ``push_failures`` / ``push_delivered`` / ``push_dead_lettered`` (atomic ADDs, so
concurrent deliveries lose no count). Every write is one
UpdateItem conditioned on the subscription existing (and, where it matters, on a push endpoint
being registered), so a deleted subscription never gets a stray endpoint back. The version counter
is not bumped: the fan-out's index does not depend on push settings.

A group's endpoint is also listed by topic in WatchersTable (``k = "p|<topic>"``, ``c = <group>``,
no TTL; :meth:`GroupPushRepo.groups_of_topic`) while it is active: registered and not paused."""
from __future__ import annotations

import json

from pynamodb.exceptions import DoesNotExist, UpdateError

from lakeq.store import slots
from lakeq.store.models import ClientModel, WatcherModel
from lakeq.store.queue_log import batch_get_models
from lakeq.store.records import Client, record_of
from lakeq.store.subscriptions import VERSION_ID, SubscriptionModel, transact_uncounting, uncount
from lakeq.store.writes import conditional_failed, transact_if_first

ENDPOINTS_PREFIX = "p|"  # WatchersTable: a topic's consumer groups with an active push endpoint


def endpoints_key(topic: str) -> str:
    """The registry partition of ``topic``'s group endpoints (sort key: the group's name).

    >>> endpoints_key("quotes/sh")
    'p|quotes/sh'
    """
    return ENDPOINTS_PREFIX + topic


def counted(limit: int | None):
    """Condition on a client item for counting one more push endpoint: it exists and has fewer
    than ``limit`` (None: no limit) — ``push_endpoints`` absent counts as 0."""
    M = ClientModel
    cond = M.name.exists()
    if limit is None:
        return cond
    return cond & (M.push_endpoints.does_not_exist() | (M.push_endpoints < limit))


class PushRepo:
    """A subscription's endpoint (``SubscriptionModel``, key ``id``)."""

    M: type = SubscriptionModel
    KEY = "id"

    @classmethod
    def _exists(cls):
        return getattr(cls.M, cls.KEY).exists()

    @classmethod
    def put(cls, sub_id: str, settings: str, secrets: str | None, current: str | None = None,
            paused: bool = False, owner: str | None = None, limit: int | None = None) -> bool:
        """Register (``secrets`` given: only if no endpoint is registered, so of two concurrent
        first registrations one writes its secret) or replace the settings (only if an endpoint is
        registered). A registration also counts the endpoint on ``owner``'s client item, in the
        same transaction and only while it has fewer than ``limit`` (:func:`counted`). False: no
        such subscription, or a condition failed (the caller reads again: it changed meanwhile,
        or the owner is at its limit). (``current`` / ``paused``: what the caller read; only a
        group's endpoint conditions on them.)"""
        M = cls.M
        actions = [M.push.set(settings)]
        if secrets is None:
            return cls._update(sub_id, actions, cls._exists() & M.push.exists())
        actions += [M.push_secrets.set(secrets), M.push_paused.set(False), *cls._state_removed()]
        cond = cls._exists() & M.push.does_not_exist()

        def build(t) -> None:
            t.update(M(sub_id), actions=actions, condition=cond)
            t.update(ClientModel(owner), actions=[ClientModel.push_endpoints.add(1)], condition=counted(limit))
        return transact_if_first(build, answers=(0, 1))  # the endpoint's item, the owner's count

    @classmethod
    def set_secrets(cls, sub_id: str, old: str | None, new: str) -> bool:
        """Secrets ``old`` → ``new`` if unchanged meanwhile and an endpoint is registered."""
        M = cls.M
        cond = cls._exists() & M.push.exists() & (M.push_secrets.does_not_exist() if old is None
                                                  else M.push_secrets == old)
        return cls._update(sub_id, [M.push_secrets.set(new)], cond)

    @classmethod
    def set_paused(cls, sub_id: str, paused: bool, current: str | None = None) -> bool:
        M = cls.M
        return cls._update(sub_id, [M.push_paused.set(paused)], cls._exists() & M.push.exists())

    @classmethod
    def remove(cls, sub_id: str, current: str | None = None, owner: str | None = None) -> bool:
        """Delete the endpoint and uncount it on ``owner``'s client item (:func:`uncount`): one transaction."""
        M = cls.M
        actions = [M.push.remove(), M.push_secrets.remove(), M.push_paused.remove(), *cls._state_removed()]

        def build(uncounting: bool):
            def b(t) -> None:
                t.update(M(sub_id), actions=actions, condition=cls._exists() & M.push.exists())
                if uncounting:
                    uncount(t, owner)
            return b
        return transact_uncounting(build, True, 1)

    @classmethod
    def _state_removed(cls) -> list:
        M = cls.M
        return [M.push_state.remove(), M.push_failures.remove(), M.push_delivered.remove(),
                M.push_dead_lettered.remove(), M.push_send_at.remove()]

    # --- a rate-limited endpoint's sending slots (lakeq.store.slots) --------------------------------
    @classmethod
    def claim(cls, sub_id: str, now: int, until: int) -> bool:
        """Take the endpoint's next sending slot: ``push_send_at`` → ``until`` if it is absent or
        ``<= now`` (one conditional UpdateItem). False: the slot is not free yet (:meth:`send_at`)."""
        M = cls.M
        return slots.claim(cls.M(sub_id), M.push_send_at, now, until, cls._exists() & M.push.exists())

    @classmethod
    def move_slot(cls, sub_id: str, claimed: int, until: int) -> bool:
        """The claimed slot as used: it ends ``until`` (the send's time + what the batch carried;
        its start when it carried nothing), only if it is still ours (one conditional UpdateItem)."""
        return slots.move(cls.M(sub_id), cls.M.push_send_at, claimed, until, cls._exists())

    @classmethod
    def send_at(cls, sub_id: str) -> int | None:
        return slots.free_at(cls.M, sub_id, "push_send_at", cls.KEY)

    @classmethod
    def record(cls, sub_id: str, last: str, ok: bool, delivered: int, dead_lettered: int):
        """One delivery attempt's outcome: one UpdateItem (the last attempt set, the counters added;
        ``push_failures`` reset by a success, else incremented). The item as the write left it
        while deliveries may go on (the endpoint still registered and not paused; its settings
        and secrets as they are now, no read more), so a run started before a pause starts no batch
        after it has seen it, and one started before a replacement sends its next batch with the
        new settings; None otherwise."""
        M = cls.M
        actions = [M.push_state.set(last), M.push_failures.set(0) if ok else M.push_failures.add(1)]
        if delivered:
            actions.append(M.push_delivered.add(delivered))
        if dead_lettered:
            actions.append(M.push_dead_lettered.add(dead_lettered))
        item = cls._updated(sub_id, actions, cls._exists() & M.push.exists())
        return None if item is None or item.push_paused else cls._out(item)

    @staticmethod
    def _out(item):
        """What a read hands out: the subscription item (a consumer group's: its record)."""
        return item

    @classmethod
    def _update(cls, sub_id: str, actions: list, condition) -> bool:
        return cls._updated(sub_id, actions, condition) is not None

    @classmethod
    def _updated(cls, sub_id: str, actions: list, condition):
        """One conditional UpdateItem; the item as the write left it (pynamodb asks ALL_NEW), None
        when the condition failed (the only failure that is an answer)."""
        item = cls.M(sub_id)
        try:
            item.update(actions=actions, condition=condition)
        except UpdateError as e:
            if conditional_failed(e):
                return None
            raise
        return item

    @classmethod
    def get(cls, sub_id: str) -> SubscriptionModel | None:
        M = cls.M
        if M is SubscriptionModel and sub_id == VERSION_ID:
            return None
        try:
            return cls._out(M.get(sub_id, consistent_read=True))
        except DoesNotExist:
            return None

    @staticmethod
    def endpoints_of(client: str) -> int | None:
        """Push endpoints ``client`` has (paused ones too): its subscriptions' and its own, as a
        consumer group — the counter on its client item (one consistent GetItem). None: no such
        client (a subscription's subscriber can be gone: an SQS queue's group, with DeleteQueue)."""
        try:
            c = ClientModel.get(client, consistent_read=True, attributes_to_get=["name", "push_endpoints"])
        except DoesNotExist:
            return None
        return int(c.push_endpoints or 0)

    @classmethod
    def owners(cls, sub_ids: list[str]) -> dict[str, str]:
        """The subscriber of each subscription that exists: one BatchGetItem per 100 ids (eventually
        consistent; only the two attributes), for a push run's scheduling by client."""
        M = SubscriptionModel
        ids = [i for i in dict.fromkeys(sub_ids) if i != VERSION_ID]
        if not ids:
            return {}
        return {s.id: s.subscriber for s in batch_get_models(M, ids, attributes=["id", "subscriber"])}

    @classmethod
    def active_ids(cls) -> list[str]:
        """Subscriptions with a push endpoint that is not paused: a Scan with a filter (the sweep's
        read; it reads every subscription item, so it is paid once a minute, not per message)."""
        M = cls.M
        cond = M.push.exists() & ((M.push_paused.does_not_exist()) | (M.push_paused == False))  # noqa: E712
        return [getattr(s, cls.KEY) for s in M.scan(cond, attributes_to_get=[cls.KEY])]


class GroupPushRepo(PushRepo):
    """A consumer group's endpoint (``ClientModel``, key ``name``): the same attributes, plus the
    in-flight leases ``push_leases`` (``{"<slot>": expiry}``, one slot per allowed request in
    flight: a delivery thread holds one while it runs, so at most ``max_in_flight`` of them — in
    any number of invocations — send at once). The map is created with the endpoint."""

    M: type = ClientModel
    KEY = "name"

    @staticmethod
    def _out(item) -> Client:
        return record_of(Client, item)

    # --- the registry by topic (WatchersTable ``k = "p|<topic>"``, ``c = <group>``, no TTL) -----
    # An active endpoint (registered, not paused) has its row; every write of the endpoint that
    # changes that is ONE TransactWriteItems with the row's put / delete, conditioned on the
    # endpoint's settings being the ones the caller read (``current``): False when the item is gone
    # or changed meanwhile (the caller reads again). So PushFunction's stream trigger finds a
    # topic's active endpoints with one Query and no Scan.

    @classmethod
    def _is(cls, current: str | None):
        M = cls.M
        return M.push.does_not_exist() if current is None else (M.push == current)

    @classmethod
    def _transact(cls, name: str, actions: list, condition, put: str | None = None,
                  delete: str | None = None) -> bool:
        """One transaction: the client item's update, the registry row of ``delete``'s topic
        deleted and ``put``'s written (none when both name one topic: the row stays)."""
        rows_put = [] if put is None else [WatcherModel(endpoints_key(json.loads(put)["topic"]), name)]
        rows_del = [] if delete is None else [WatcherModel(endpoints_key(json.loads(delete)["topic"]), name)]
        if rows_put and rows_del and rows_put[0].k == rows_del[0].k:
            rows_del = []

        def build(t) -> None:
            t.update(cls.M(name), actions=actions, condition=condition)
            for r in rows_del:
                t.delete(r)
            for r in rows_put:
                t.save(r)
        return transact_if_first(build)

    @classmethod
    def put(cls, name: str, settings: str, secrets: str | None, current: str | None = None,
            paused: bool = False, owner: str | None = None, limit: int | None = None) -> bool:
        """Register (``secrets`` given, ``current`` None; counted on the group's own item while it
        has fewer than ``limit`` endpoints) or replace the settings ``current`` by ``settings``;
        the registry row follows the topic (none while ``paused``). (``owner`` is the group.)"""
        M = cls.M
        actions = [M.push.set(settings)]
        cond = cls._exists() & (M.role == "consumer") & cls._is(current) & cls._paused_is(paused, secrets)
        if secrets is not None:
            actions += [M.push_secrets.set(secrets), M.push_paused.set(False), M.push_leases.set({}),
                        M.push_endpoints.add(1), *cls._state_removed()]
            cond = cond & counted(limit)
            paused = False
        return cls._transact(name, actions, cond, put=None if paused else settings,
                             delete=None if paused else current)

    @classmethod
    def _paused_is(cls, paused: bool, secrets: str | None):
        M = cls.M
        if secrets is not None:  # a new endpoint: its pause flag is reset
            return M.role.exists()
        return (M.push_paused == True) if paused else (M.push_paused.does_not_exist() | (M.push_paused == False))  # noqa: E712

    @classmethod
    def set_paused(cls, name: str, paused: bool, current: str | None = None) -> bool:
        """Pause (the registry row deleted) or resume (written) the endpoint whose settings are ``current``."""
        M = cls.M
        if current is None:
            return False
        cond = cls._exists() & (M.push == current)
        return cls._transact(name, [M.push_paused.set(paused)], cond,
                             put=None if paused else current, delete=current if paused else None)

    @classmethod
    def remove(cls, name: str, current: str | None = None, owner: str | None = None) -> bool:
        """Delete the endpoint whose settings are ``current`` (uncounted on the group's item) and
        its registry row."""
        M = cls.M
        if current is None:
            return False
        actions = [M.push.remove(), M.push_secrets.remove(), M.push_paused.remove(), M.push_leases.remove(),
                   *cls._state_removed()]
        cond = cls._exists() & (M.push == current)
        # uncounted only while the item counts one (as :func:`uncount`): the count never goes below 0
        return (cls._transact(name, [*actions, M.push_endpoints.add(-1)], cond & (M.push_endpoints > 0),
                              delete=current)
                or cls._transact(name, actions, cond & (M.push_endpoints.does_not_exist() | (M.push_endpoints <= 0)),
                                 delete=current))

    @staticmethod
    def groups_of_topic(topic: str) -> list[str]:
        """The groups registered with an active endpoint on ``topic``: one Query (eventually
        consistent, 0.5 RRU while it reads under 4 KB: ~100 group names)."""
        return [r.c for r in WatcherModel.query(endpoints_key(topic), attributes_to_get=["c"])]

    @classmethod
    def lease(cls, name: str, slot: int, now: int, until: int) -> bool:
        """Take in-flight slot ``slot`` until ``until`` if it is free (absent or expired by ``now``):
        one conditional UpdateItem. False: it is held."""
        M = cls.M
        p = M.push_leases[str(slot)]
        cond = cls._exists() & M.push.exists() & M.push_leases.exists() & (p.does_not_exist() | (p <= now))
        return cls._update(name, [p.set(until)], cond)

    @classmethod
    def unlease(cls, name: str, slot: int, until: int) -> bool:
        """Give slot ``slot`` back if it is still the lease taken until ``until`` (one conditional UpdateItem)."""
        M = cls.M
        p = M.push_leases[str(slot)]
        return cls._update(name, [p.remove()], cls._exists() & M.push_leases.exists() & (p == until))
