"""Redrives' storage (issue 18.3, :mod:`lakeq.redrive.service`): RedrivesTable (``REDRIVES_TABLE``,
key ``id``) holds one item per redrive and one *source item* per dead-letter log
(``id = "~src|<log name>"``): ``active`` (the running redrive of that source, at most one) and
``pos`` (the reserved consumer's position per queue: where the next redrive of that source
starts; the source's consumer groups never see it). Every write is conditional: a redrive's
progress on its version ``v`` (and ``status``), the runner's lease on ``lease_until``, a start and
a finish are one transaction with the source item (``active`` absent → set; ``active`` = this id →
removed, ``pos`` saved)."""
from __future__ import annotations

from dataclasses import dataclass

from pynamodb.attributes import NumberAttribute, UnicodeAttribute
from pynamodb.exceptions import DoesNotExist
from pynamodb.models import Model

from lakeq.store.models import _meta
from lakeq.store.records import model_of, record_of
from lakeq.store.writes import transact_if_first, update_if

SOURCE_PREFIX = "~src|"


class RedriveModel(Model):
    Meta = _meta("REDRIVES_TABLE", "lakeq-redrives")
    id = UnicodeAttribute(hash_key=True)
    # a redrive
    source = UnicodeAttribute(null=True)  # the dead-letter topic
    source_log = UnicodeAttribute(null=True)  # its log name when the redrive started (incarnation)
    destination = UnicodeAttribute(null=True)  # absent: each message's own source topic
    rate = NumberAttribute(null=True)  # messages per second
    status = UnicodeAttribute(null=True)  # running | cancelling | completed | cancelled | failed
    origin = UnicodeAttribute(null=True)  # "sqs": started by StartMessageMoveTask
    created_at = NumberAttribute(null=True)
    updated_at = NumberAttribute(null=True)
    total = NumberAttribute(null=True)  # messages to move when it started
    moved = NumberAttribute(null=True)
    failed = NumberAttribute(null=True)  # skipped: no destination, or it does not exist
    end = UnicodeAttribute(null=True)  # JSON {queue: head at the start}
    next_at = NumberAttribute(null=True)  # epoch ms: the next batch may start then (the rate)
    lease = UnicodeAttribute(null=True)  # the runner holding it
    lease_until = NumberAttribute(null=True)
    v = NumberAttribute(null=True)  # every write but a cancel request moves it
    last_error = UnicodeAttribute(null=True)
    # a redrive's progress, and a source item's reserved position: JSON {queue: next offset}
    pos = UnicodeAttribute(null=True)
    active = UnicodeAttribute(null=True)  # source item: the running redrive


M = RedriveModel


@dataclass(frozen=True, slots=True)
class Redrive:
    """A redrive's item (or a source item) as the use cases read it: :class:`RedriveModel`'s
    attributes, absent ones ``None``."""
    id: str
    source: str | None = None
    source_log: str | None = None
    destination: str | None = None
    rate: int | None = None
    status: str | None = None
    origin: str | None = None
    created_at: int | None = None
    updated_at: int | None = None
    total: int | None = None
    moved: int | None = None
    failed: int | None = None
    end: str | None = None
    next_at: int | None = None
    lease: str | None = None
    lease_until: int | None = None
    v: int | None = None
    last_error: str | None = None
    pos: str | None = None
    active: str | None = None


def source_key(log: str) -> str:
    return f"{SOURCE_PREFIX}{log}"


class RedriveRepo:
    @staticmethod
    def get(rid: str) -> Redrive | None:
        try:
            return record_of(Redrive, M.get(rid, consistent_read=True))
        except DoesNotExist:
            return None

    @staticmethod
    def source(log: str) -> Redrive | None:
        return RedriveRepo.get(source_key(log))

    @staticmethod
    def all() -> list[Redrive]:
        """Every redrive (a Scan; source items left out), newest first."""
        items = [record_of(Redrive, r) for r in M.scan(consistent_read=True) if not r.id.startswith(SOURCE_PREFIX)]
        return sorted(items, key=lambda r: (-int(r.created_at or 0), r.id))

    @staticmethod
    def create(r: Redrive) -> bool:
        """The redrive item and its source's ``active``, in one transaction. False: another
        redrive of that source is active."""
        item = model_of(M, r)

        def build(t) -> None:
            t.update(M(source_key(item.source_log)), actions=[M.active.set(item.id)],
                     condition=M.active.does_not_exist())
            t.save(item, condition=M.id.does_not_exist())
        return transact_if_first(build)

    @staticmethod
    def lease(r: Redrive, token: str, until: int, now: int) -> bool:
        """Take the runner's lease: the item is as read (``v``), still to run, and nobody else's
        lease is live."""
        cond = (M.v == int(r.v)) & M.status.is_in("running", "cancelling") & (
            M.lease_until.does_not_exist() | (M.lease_until < now))
        return update_if(M(r.id), [M.lease.set(token), M.lease_until.set(until), M.v.add(1), M.updated_at.set(now)],
                         cond)

    @staticmethod
    def progress(rid: str, v: int, pos: str, moved: int, failed: int, next_at: int, now: int,
                 error: str | None = None) -> bool:
        """A batch done: position, counts (ADD), the rate's next slot; if the item is still at
        version ``v`` and running (a cancel request makes it fail)."""
        actions = [M.pos.set(pos), M.moved.add(moved), M.failed.add(failed), M.next_at.set(next_at),
                   M.updated_at.set(now), M.v.add(1)]
        if error is not None:
            actions.append(M.last_error.set(error))
        return update_if(M(rid), actions, (M.v == v) & (M.status == "running"))

    @staticmethod
    def finish(r: Redrive, v: int, status: str, pos: str, moved: int, failed: int, now: int,
               error: str | None = None) -> bool:
        """End a redrive (``status``), counts added, and hand its position to its source item (the
        next redrive of that source starts there), in one transaction. False: the item moved since
        version ``v``."""
        actions = [M.status.set(status), M.pos.set(pos), M.moved.add(moved), M.failed.add(failed),
                   M.updated_at.set(now), M.v.add(1), M.lease.remove(), M.lease_until.remove()]
        if error is not None:
            actions.append(M.last_error.set(error))

        def build(t) -> None:
            t.update(M(r.id), actions=actions, condition=M.v == v)
            t.update(M(source_key(r.source_log)), actions=[M.pos.set(pos), M.active.remove()],
                     condition=M.active == r.id)
        return transact_if_first(build)

    @staticmethod
    def release(rid: str, v: int, token: str) -> bool:
        """Give the lease back when a run stops with work left (its budget spent, nothing readable
        yet), so the next invocation or a cancel need not wait for it to expire."""
        return update_if(M(rid), [M.lease.remove(), M.lease_until.remove(), M.v.add(1)],
                         (M.v == v) & (M.lease == token))

    @staticmethod
    def request_cancel(rid: str) -> bool:
        """``status`` running → cancelling (the runner holding the lease finishes it). False: not running."""
        return update_if(M(rid), [M.status.set("cancelling")], M.status == "running")
