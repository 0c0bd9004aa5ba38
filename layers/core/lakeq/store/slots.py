"""A rate's sending slot, shared by every runner of one item: the one mechanism that keeps a rate
across concurrent runs (two overlapping invocations — EventBridge delivers a schedule's event at
least once — or a schedule and a stream trigger of the same work).

The item holds one number, the epoch ms at which the next batch may start (``attr``). A runner
about to send ``n`` messages at ``rate`` first *claims* the slot with one conditional UpdateItem:
the number is absent or ``<= now`` → it becomes ``now + n·1000/rate`` (:func:`claim`); a runner
that loses waits until the number (:func:`free_at`, one consistent GetItem) and claims again.
However many runners there are, batches start at most one per slot, so together they send at most
``rate`` messages a second. :func:`move` re-dates a claimed slot once the batch's real size is known
(only while it is still the one claimed). Users: push endpoints' ``rate``
(:class:`lakeq.store.push.PushRepo`: ``push_send_at``) and the replay copier's ``rate``
(:class:`lakeq.store.replays.ReplayRepo`: ``send_at``).
"""
from __future__ import annotations

from pynamodb.exceptions import DoesNotExist

from lakeq.store.writes import update_if


def claim(item, attr, now: int, until: int, condition=None) -> bool:
    """Take the slot of ``item`` (``attr`` → ``until``) if it is free at ``now``; ``condition``: what
    the item must also satisfy. False: not free yet (or the condition failed)."""
    free = attr.does_not_exist() | (attr <= now)
    return update_if(item, [attr.set(until)], free if condition is None else condition & free)


def move(item, attr, claimed: int, until: int, condition=None) -> bool:
    """The claimed slot (it ends ``claimed``) now ends ``until``, if nobody took it since."""
    ours = attr == claimed
    return update_if(item, [attr.set(until)], ours if condition is None else condition & ours)


def free_at(model, key: str, name: str, key_name: str) -> int | None:
    """When the slot of ``model``'s item ``key`` frees (its attribute ``name``; None: free, or no item)."""
    try:
        item = model.get(key, consistent_read=True, attributes_to_get=[key_name, name])
    except DoesNotExist:
        return None
    v = getattr(item, name)
    return None if v is None else int(v)

