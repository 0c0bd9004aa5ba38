"""Push endpoints' storage (issue 17): attributes of the subscription item (no table of their own):
``push`` (the settings, JSON), ``push_secrets`` (JSON list of ``{"secret", "expires_at"}``, newest
first), ``push_paused``, ``push_state`` (the deliverer's last attempt, JSON: last writer wins) and
the counters ``push_failures`` / ``push_delivered`` / ``push_dead_lettered`` (atomic ADDs, so
concurrent deliveries lose no count). Every write is one
UpdateItem conditioned on the subscription existing (and, where it matters, on a push endpoint
being registered), so a deleted subscription never gets a stray endpoint back. The version counter
is not bumped: the fan-out's index does not depend on push settings."""
from __future__ import annotations

from pynamodb.exceptions import DoesNotExist, UpdateError

from lakeq.store.repos import conditional_failed
from lakeq.store.subscriptions import VERSION_ID, SubscriptionModel

M = SubscriptionModel


class PushRepo:
    @staticmethod
    def put(sub_id: str, settings: str, secrets: str | None) -> bool:
        """Set the settings (and, when given, the secrets: a new endpoint). False: no such subscription."""
        actions = [M.push.set(settings)]
        if secrets is not None:
            actions += [M.push_secrets.set(secrets), M.push_paused.set(False), *PushRepo._state_removed()]
        return PushRepo._update(sub_id, actions, M.id.exists())

    @staticmethod
    def set_secrets(sub_id: str, old: str | None, new: str) -> bool:
        """Secrets ``old`` → ``new`` if unchanged meanwhile and an endpoint is registered."""
        cond = M.id.exists() & M.push.exists() & (M.push_secrets.does_not_exist() if old is None
                                                  else M.push_secrets == old)
        return PushRepo._update(sub_id, [M.push_secrets.set(new)], cond)

    @staticmethod
    def set_paused(sub_id: str, paused: bool) -> bool:
        return PushRepo._update(sub_id, [M.push_paused.set(paused)], M.id.exists() & M.push.exists())

    @staticmethod
    def remove(sub_id: str) -> bool:
        return PushRepo._update(sub_id, [M.push.remove(), M.push_secrets.remove(), M.push_paused.remove(),
                                         *PushRepo._state_removed()], M.id.exists() & M.push.exists())

    @staticmethod
    def _state_removed() -> list:
        return [M.push_state.remove(), M.push_failures.remove(), M.push_delivered.remove(),
                M.push_dead_lettered.remove(), M.push_send_at.remove()]

    # --- a rate-limited endpoint's sending slots ---------------------------------------------------
    @staticmethod
    def claim(sub_id: str, now: int, until: int) -> bool:
        """Take the endpoint's next sending slot: ``push_send_at`` → ``until`` if it is absent or
        ``<= now`` (one conditional UpdateItem). False: the slot is not free yet (:meth:`send_at`)."""
        cond = M.id.exists() & M.push.exists() & (M.push_send_at.does_not_exist() | (M.push_send_at <= now))
        return PushRepo._update(sub_id, [M.push_send_at.set(until)], cond)

    @staticmethod
    def move_slot(sub_id: str, claimed: int, until: int) -> bool:
        """The claimed slot as used: it ends ``until`` (the send's time + what the batch carried;
        its start when it carried nothing), only if it is still ours (one conditional UpdateItem)."""
        return PushRepo._update(sub_id, [M.push_send_at.set(until)], M.id.exists() & (M.push_send_at == claimed))

    @staticmethod
    def send_at(sub_id: str) -> int | None:
        try:
            item = M.get(sub_id, consistent_read=True, attributes_to_get=["id", "push_send_at"])
        except DoesNotExist:
            return None
        return None if item.push_send_at is None else int(item.push_send_at)

    @staticmethod
    def record(sub_id: str, last: str, ok: bool, delivered: int, dead_lettered: int) -> bool:
        """One delivery attempt's outcome: one UpdateItem (the last attempt set, the counters added;
        ``push_failures`` reset by a success, else incremented)."""
        actions = [M.push_state.set(last), M.push_failures.set(0) if ok else M.push_failures.add(1)]
        if delivered:
            actions.append(M.push_delivered.add(delivered))
        if dead_lettered:
            actions.append(M.push_dead_lettered.add(dead_lettered))
        return PushRepo._update(sub_id, actions, M.id.exists() & M.push.exists())

    @staticmethod
    def _update(sub_id: str, actions: list, condition) -> bool:
        try:
            M(sub_id).update(actions=actions, condition=condition)
            return True
        except UpdateError as e:  # only the condition failing is an answer
            if conditional_failed(e):
                return False
            raise

    @staticmethod
    def get(sub_id: str) -> SubscriptionModel | None:
        if sub_id == VERSION_ID:
            return None
        try:
            return M.get(sub_id, consistent_read=True)
        except DoesNotExist:
            return None

    @staticmethod
    def active_ids() -> list[str]:
        """Subscriptions with a push endpoint that is not paused: a Scan with a filter (the sweep's
        read; it reads every subscription item, so it is paid once a minute, not per message)."""
        cond = M.push.exists() & ((M.push_paused.does_not_exist()) | (M.push_paused == False))  # noqa: E712
        return [s.id for s in M.scan(cond, attributes_to_get=["id"])]
