"""Push endpoints' storage (issue 17): attributes of the subscription item — :class:`PushRepo` — or
of a consumer group's client item — :class:`GroupPushRepo`, the same attribute names on
``ClientModel`` (no table of their own):
``push`` (the settings, JSON), ``push_secrets`` (JSON list of ``{"secret", "expires_at"}``, newest
first), ``push_paused``, ``push_state`` (the deliverer's last attempt, JSON: last writer wins) and
the counters ``push_failures`` / ``push_delivered`` / ``push_dead_lettered`` (atomic ADDs, so
concurrent deliveries lose no count). Every write is one
UpdateItem conditioned on the subscription existing (and, where it matters, on a push endpoint
being registered), so a deleted subscription never gets a stray endpoint back. The version counter
is not bumped: the fan-out's index does not depend on push settings."""
from __future__ import annotations

from pynamodb.exceptions import DoesNotExist, UpdateError

from lakeq.store.models import ClientModel
from lakeq.store.repos import conditional_failed
from lakeq.store.subscriptions import VERSION_ID, SubscriptionModel


class PushRepo:
    """A subscription's endpoint (``SubscriptionModel``, key ``id``)."""

    M: type = SubscriptionModel
    KEY = "id"

    @classmethod
    def _exists(cls):
        return getattr(cls.M, cls.KEY).exists()

    @classmethod
    def put(cls, sub_id: str, settings: str, secrets: str | None) -> bool:
        """Set the settings (and, when given, the secrets: a new endpoint). False: no such subscription."""
        M = cls.M
        actions = [M.push.set(settings)]
        if secrets is not None:
            actions += [M.push_secrets.set(secrets), M.push_paused.set(False), *cls._state_removed()]
        return cls._update(sub_id, actions, cls._exists())

    @classmethod
    def set_secrets(cls, sub_id: str, old: str | None, new: str) -> bool:
        """Secrets ``old`` → ``new`` if unchanged meanwhile and an endpoint is registered."""
        M = cls.M
        cond = cls._exists() & M.push.exists() & (M.push_secrets.does_not_exist() if old is None
                                                  else M.push_secrets == old)
        return cls._update(sub_id, [M.push_secrets.set(new)], cond)

    @classmethod
    def set_paused(cls, sub_id: str, paused: bool) -> bool:
        M = cls.M
        return cls._update(sub_id, [M.push_paused.set(paused)], cls._exists() & M.push.exists())

    @classmethod
    def remove(cls, sub_id: str) -> bool:
        M = cls.M
        return cls._update(sub_id, [M.push.remove(), M.push_secrets.remove(), M.push_paused.remove(),
                                         *cls._state_removed()], cls._exists() & M.push.exists())

    @classmethod
    def _state_removed(cls) -> list:
        M = cls.M
        return [M.push_state.remove(), M.push_failures.remove(), M.push_delivered.remove(),
                M.push_dead_lettered.remove(), M.push_send_at.remove()]

    # --- a rate-limited endpoint's sending slots ---------------------------------------------------
    @classmethod
    def claim(cls, sub_id: str, now: int, until: int) -> bool:
        """Take the endpoint's next sending slot: ``push_send_at`` → ``until`` if it is absent or
        ``<= now`` (one conditional UpdateItem). False: the slot is not free yet (:meth:`send_at`)."""
        M = cls.M
        cond = cls._exists() & M.push.exists() & (M.push_send_at.does_not_exist() | (M.push_send_at <= now))
        return cls._update(sub_id, [M.push_send_at.set(until)], cond)

    @classmethod
    def move_slot(cls, sub_id: str, claimed: int, until: int) -> bool:
        """The claimed slot as used: it ends ``until`` (the send's time + what the batch carried;
        its start when it carried nothing), only if it is still ours (one conditional UpdateItem)."""
        M = cls.M
        return cls._update(sub_id, [M.push_send_at.set(until)], cls._exists() & (M.push_send_at == claimed))

    @classmethod
    def send_at(cls, sub_id: str) -> int | None:
        M = cls.M
        try:
            item = M.get(sub_id, consistent_read=True, attributes_to_get=[cls.KEY, "push_send_at"])
        except DoesNotExist:
            return None
        return None if item.push_send_at is None else int(item.push_send_at)

    @classmethod
    def record(cls, sub_id: str, last: str, ok: bool, delivered: int, dead_lettered: int) -> bool:
        """One delivery attempt's outcome: one UpdateItem (the last attempt set, the counters added;
        ``push_failures`` reset by a success, else incremented)."""
        M = cls.M
        actions = [M.push_state.set(last), M.push_failures.set(0) if ok else M.push_failures.add(1)]
        if delivered:
            actions.append(M.push_delivered.add(delivered))
        if dead_lettered:
            actions.append(M.push_dead_lettered.add(dead_lettered))
        return cls._update(sub_id, actions, cls._exists() & M.push.exists())

    @classmethod
    def _update(cls, sub_id: str, actions: list, condition) -> bool:
        M = cls.M
        try:
            M(sub_id).update(actions=actions, condition=condition)
            return True
        except UpdateError as e:  # only the condition failing is an answer
            if conditional_failed(e):
                return False
            raise

    @classmethod
    def get(cls, sub_id: str) -> SubscriptionModel | None:
        M = cls.M
        if M is SubscriptionModel and sub_id == VERSION_ID:
            return None
        try:
            return M.get(sub_id, consistent_read=True)
        except DoesNotExist:
            return None

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

    @classmethod
    def put(cls, name: str, settings: str, secrets: str | None) -> bool:
        M = cls.M
        actions = [M.push.set(settings)]
        if secrets is not None:
            actions += [M.push_secrets.set(secrets), M.push_paused.set(False), M.push_leases.set({}),
                        *cls._state_removed()]
        return cls._update(name, actions, cls._exists() & (M.role == "consumer"))

    @classmethod
    def remove(cls, name: str) -> bool:
        M = cls.M
        return cls._update(name, [M.push.remove(), M.push_secrets.remove(), M.push_paused.remove(),
                                  M.push_leases.remove(), *cls._state_removed()], cls._exists() & M.push.exists())

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
