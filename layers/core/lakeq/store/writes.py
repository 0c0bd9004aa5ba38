"""The store's conditional writes and transactions, shared by the repositories of every table family
(:mod:`lakeq.store.catalog`, :mod:`lakeq.store.queue_log`, :mod:`lakeq.store.delayed`,
:mod:`lakeq.store.offsets`, and the other ``store`` modules): every lock, ack and offset move is a
conditional write (:func:`update_if`) or a transaction (:func:`transact`, :func:`transact_if_first`);
:class:`TransactionFailed` lists each item's cancellation reason in the order the items were added,
and :func:`conditional_failed` tells a single-item write refused by its condition. Costs per call are
listed in ``docs/design.md``.
"""
from __future__ import annotations

from pynamodb.connection import Connection
from pynamodb.exceptions import TransactWriteError, UpdateError
from pynamodb.transactions import TransactWrite

from lakeq.common import backoff
from lakeq.common.errors import LakeqError
from lakeq.store.models import TopicModel

CONDITION_FAILED = "ConditionalCheckFailed"


def conditional_failed(e: Exception) -> bool:
    """A single-item write (PutError / UpdateError / DeleteError) refused by its condition."""
    cause = getattr(e, "cause_response_code", None)
    return cause == "ConditionalCheckFailedException"


def _reasons(e: TransactWriteError) -> list[str | None]:
    return [r.code if r is not None else None for r in (e.cancellation_reasons or [])]


class TransactionFailed(LakeqError):
    """A transaction was cancelled; ``reasons`` lists each item's cancellation code (or None).
    ``head``: where a lost append at a queue's head learned the head moved to (the end of the
    segment that sits at its base, returned by the failed write itself: ``LogRepo.append``), None
    when the write did not say."""

    def __init__(self, reasons: list[str | None], head: int | None = None):
        super().__init__(f"transaction cancelled: {reasons}")
        self.reasons = reasons
        self.head = head

    def failed(self, i: int) -> bool:
        """Whether item ``i`` (in the order ``build`` added the items) failed its condition.

        >>> e = TransactionFailed(["None", CONDITION_FAILED])
        >>> e.failed(1), e.failed(0), e.failed(2), e.failed(-1)
        (True, False, False, False)
        """
        return 0 <= i < len(self.reasons) and self.reasons[i] == CONDITION_FAILED


_connections: dict[str, Connection] = {}


def _connection() -> Connection:
    """One pynamodb Connection (one botocore client) per region and container, made on first
    use: a new client per transaction loaded botocore's service model each time (~0.5 s on the
    test machine, tens of ms on Lambda) on produce's hot path."""
    region = TopicModel.Meta.region
    conn = _connections.get(region)
    if conn is None:
        conn = _connections[region] = Connection(region=region)
    return conn


def warm_transactions() -> None:
    """Create the transaction client now (its botocore client, made on first use, loads the service
    model): a pull that sees a delayed message ahead calls this so the promotion at its due time
    does not pay that on the consumer's clock (lakeq.produce.delayed)."""
    _ = _connection().client


_KIND_ORDER = {"condition_check": 0, "delete": 1, "save": 2, "update": 3}


class _Recorder:
    """Wraps a TransactWrite and remembers the kind of each item in call order: pynamodb sends
    condition checks first, then deletes, puts and updates, and DynamoDB's cancellation reasons
    follow that order, not ours."""

    def __init__(self, t: TransactWrite):
        self._t = t
        self.kinds: list[str] = []

    def __getattr__(self, name: str):
        attr = getattr(self._t, name)
        if name not in _KIND_ORDER:
            return attr

        def call(*args, **kwargs):
            self.kinds.append(name)
            return attr(*args, **kwargs)
        return call

    def in_call_order(self, reasons: list) -> list:
        sent = sorted(range(len(self.kinds)), key=lambda i: (_KIND_ORDER[self.kinds[i]], i))
        out: list = [None] * len(self.kinds)
        for position, i in enumerate(sent):
            out[i] = reasons[position] if position < len(reasons) else None
        return out


TRANSACTION_CONFLICT = "TransactionConflict"
TRANSACT_ATTEMPTS = 6


def only_conflicts(reasons: list[str | None]) -> bool:
    """Whether a cancellation is only another transaction in flight on some item (nothing failed
    its condition): the transaction wrote nothing and may be sent again as it is.

    >>> only_conflicts([None, "TransactionConflict"]), only_conflicts(["None", "TransactionConflict"])
    (True, True)
    >>> only_conflicts(["TransactionConflict", "ConditionalCheckFailed"]), only_conflicts([None, "None"])
    (False, False)
    """
    codes = {r for r in reasons if r not in (None, "None")}
    return codes == {TRANSACTION_CONFLICT}


def transact(build) -> None:
    """Run ``build(t)`` inside one TransactWrite; raise :class:`TransactionFailed` with the
    cancellation reasons listed in the order ``build`` added the items.

    A cancellation that is only ``TransactionConflict`` (another transaction in flight on one of the
    items, which the SDK does not retry) is sent again, rebuilt by ``build``, after the common
    backoff, up to :data:`TRANSACT_ATTEMPTS` times in all: it wrote nothing and every condition
    is evaluated again. It was a 500 on the routes that met it."""
    for attempt in range(TRANSACT_ATTEMPTS):
        recorder = None
        try:
            with TransactWrite(connection=_connection()) as t:
                recorder = _Recorder(t)
                build(recorder)
            return
        except TransactWriteError as e:
            reasons = _reasons(e)
            if not reasons:
                raise
            if only_conflicts(reasons) and attempt + 1 < TRANSACT_ATTEMPTS:
                backoff.sleep(attempt, base=0.005, cap=0.32)
                continue
            raise TransactionFailed(recorder.in_call_order(reasons) if recorder else reasons) from e


def update_if(item, actions: list, condition) -> bool:
    """One conditional UpdateItem of ``item``: True when written, False when ``condition``
    refused it; any other error raises."""
    try:
        item.update(actions=actions, condition=condition)
        return True
    except UpdateError as e:
        if conditional_failed(e):
            return False
        raise


def transact_if_first(build, answers: tuple[int, ...] = (0,)) -> bool:
    """:func:`transact`, answering False when the first item ``build`` added (or any item of
    ``answers``, in the order added) failed its condition (the usual "it changed meanwhile / it is
    gone" outcome); any other cancellation raises."""
    try:
        transact(build)
    except TransactionFailed as e:
        if any(e.failed(i) for i in answers):
            return False
        raise
    return True
