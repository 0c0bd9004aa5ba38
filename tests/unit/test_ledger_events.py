"""The delivery ledger's events (issue 32.4): each archived offsets row says what its write did to
the messages (``settled``, ``delivered``, ``start_offset``: :func:`lakeq.lake.archive.settlement_of`).
A consumer driven through the real settlement state machine (:mod:`lakeq.log.settlement`: pulls with
a tag filter, partial settles, whole-batch acks, piggybacked acks folded into the next lock,
expiries, dead letters copied or gone, resets forward and back), each write turned into a DynamoDB
stream record and archived by :func:`lakeq.lake.archive.offset_rows`; replaying the rows must give
every offset the outcome and the deliveries a plain model of the same run recorded, and nothing
below the committed offset may be left unaccounted (what the ledger would call lost)."""
from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from lakeq.lake import archive as lake
from lakeq.log import settlement as S

OWNER = "g|risk|quotes"
SETTLED = ("accepted", "dead_lettered", "expired", "skipped")


def _av(v):
    if v is None:
        return {"NULL": True}
    if isinstance(v, int):
        return {"N": str(v)}
    return {"S": v}


def image(s: S.State, at: int, acks: list[str]) -> dict:
    """The OffsetsTable item ``write_state`` leaves for ``s`` (DynamoDB JSON)."""
    item = {"owner": OWNER, "queue": 0, "committed_offset": s.committed, "lock_ts": s.lock_ts,
            "lock_until": s.lock_until, "updated_at": at, "dead_lettered": s.dead_lettered}
    if s.lock_next is not None:
        item["lock_next"] = s.lock_next
    if (raw := S.to_settle(s)) is not None:
        item["settle"] = raw
    out = {k: _av(v) for k, v in item.items()}
    if acks:
        out["acks"] = {"L": [{"S": a} for a in acks]}
    return out


def record(old: S.State | None, new: S.State, at: int, seq: int, old_acks=(), new_acks=()) -> dict:
    d = {"SequenceNumber": str(seq), "NewImage": image(new, at, list(new_acks))}
    if old is not None:
        d["OldImage"] = image(old, at, list(old_acks))
    return {"eventName": "INSERT" if old is None else "MODIFY", "dynamodb": d,
            "eventSourceARN": "arn:aws:dynamodb:us-east-1:1:table/lakeq-offsets/stream/x"}


def replay(rows: list[dict]) -> tuple[dict[int, tuple], dict[int, int], int]:
    """The rows folded in stream order: each offset's last outcome (reason), its deliveries, the start."""
    status: dict[int, tuple] = {}
    deliveries: dict[int, int] = {}
    start = None
    for r in rows:
        if r["start_offset"] is not None:
            start = r["start_offset"] if start is None else min(start, r["start_offset"])
        for e in r["settled"]:
            for o in range(e["lo"], e["hi"]):
                status[o] = (e["outcome"], e["reason"])
        for o in r["delivered"]:
            deliveries[o] = deliveries.get(o, 0) + 1
    return status, deliveries, start


def run(rng: random.Random, steps: int, md: int | None, start: int):
    """A random consumer; returns the archived rows, the model's outcomes and deliveries, the final state."""
    s: S.State | None = None
    cur = S.from_record(start, 0, 0, None, None)  # as a pull reads a record it has not written yet
    now, seq = 1000, 0
    rows: list[dict] = []
    model: dict[int, tuple] = {}
    delivered: dict[int, int] = {}

    acks: list[str] = []

    def write(new: S.State, ack: str | None = None):
        nonlocal s, seq, cur, acks
        seq += 1
        after = acks + [ack] if ack else acks  # a whole-batch ack remembered (ack_fast, fold)
        rows.extend(lake.offset_rows(record(s, new, now, seq, acks, after)))
        s, cur, acks = new, new, after[-5:]

    for _ in range(steps):
        now += rng.randrange(1, 8)
        op = rng.choice(["pull", "pull", "settle", "settle", "ack", "fold", "flush", "reset"])
        if op == "fold" and cur.live(now):  # a pull's piggybacked whole-batch ack and its next lock: one write
            acked = S.settle(cur, cur.lock_ts, cur.lock_from, cur.lock_next, None, (), (), md).state
            if acked.pend or acked.due:
                continue  # (a fold needs nothing left unsettled: lakeq.log.selection.may_fold)
            span = rng.randrange(1, 5)
            new = S.lock(acked, acked.lock_ts + 1, now + 10, [], range(acked.frontier, acked.frontier + span),
                         acked.frontier + span)
            for o in cur.held:
                model[o] = ("accepted", None)
            for o in new.batch:
                delivered[o] = delivered.get(o, 0) + 1
            write(new, f"ack-{seq}")
        elif op == "pull" and not cur.live(now):
            u = S.upkept(cur, now, md)
            served = sorted(o for o in u.pend if o not in u.held)[:rng.randrange(0, 4)]
            span = rng.randrange(0, 6)
            fresh = [o for o in range(u.frontier, u.frontier + span) if rng.random() < 0.8]  # the rest: filtered
            for o in range(u.frontier, u.frontier + span):
                if o not in fresh:
                    model[o] = ("accepted", None)
            if not served and not fresh:  # everything examined was filtered out: the frontier moves on
                if span:
                    write(S.advance(u, u.frontier + span))
                continue
            new = S.lock(u, u.lock_ts + 1, now + 10, served, fresh, u.frontier + span)
            for o in new.batch:
                delivered[o] = delivered.get(o, 0) + 1
            write(new)
        elif op in ("settle", "ack") and cur.live(now):
            held = sorted(cur.held)
            ack = None
            if op == "ack":
                out = S.settle(cur, cur.lock_ts, cur.lock_from, cur.lock_next, None, (), (), md)
                acc, rej, ack = held, [], f"ack-{seq}"
            else:
                acc = [o for o in held if rng.random() < 0.5]
                rej = [o for o in held if o not in acc and rng.random() < 0.4]
                rel = [o for o in held if o not in acc and o not in rej]
                out = S.settle(cur, cur.lock_ts, cur.lock_from, cur.lock_next, acc, rel, rej, md)
            for o in acc:
                model[o] = ("accepted", None)
            write(out.state, ack)
        elif op == "flush" and cur.due:
            due = sorted(cur.due)
            gone = due[:rng.randrange(0, len(due) + 1)]  # below the log's first offset: the lowest
            done = [o for o in due[len(gone):] if rng.random() < 0.7]  # (the others: not readable yet)
            new = S.gone(S.dead_lettered(cur, done), gone)
            if new == cur:
                continue
            for o in gone:
                model[o] = ("expired", None)
            for o in done:
                model[o] = ("dead_lettered", cur.due[o][0])
            write(new)
        elif op == "reset" and s is not None and rng.random() < 0.3:  # (a reset that makes the record: its start)
            to = max(start, cur.frontier + rng.randrange(-4, 4))
            new = S.from_record(to, cur.lock_ts + 1, 0, None, None, cur.dead_lettered)
            unsettled = set(cur.pend) | set(cur.due)
            for o in range(min(to, cur.frontier), max(to, cur.frontier)):
                if to > cur.frontier or o < to:
                    model[o] = ("skipped", None)
                elif o not in unsettled:
                    model[o] = ("reopened", None)
            for o in unsettled:
                if o < to:
                    model[o] = ("skipped", None)
            write(new)
    return rows, model, delivered, cur


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**32), st.sampled_from([None, 1, 2, 3]), st.integers(0, 3))
def test_the_rows_account_for_every_offset_as_the_model_does(seed, md, start):
    rows, model, delivered, final = run(random.Random(seed), 60, md, start)
    status, deliveries, first = replay(rows)
    assert deliveries == delivered
    if not rows:
        return
    # the record's first position: where its first write found it, after what that write passed over
    # without a delivery (a first pull's filtered offsets: before the consumer's start in the ledger)
    # (unless a row names it later: a reset back below the start reopens it, then any outcome)
    assert first >= start and all(model[o][0] in ("accepted", "skipped") for o in range(start, first)
                                  if o not in status)
    settled = {o: v for o, v in status.items() if v[0] in SETTLED}
    # (below it, only offsets a reset back reopened: the same outcomes)
    assert settled == {o: v for o, v in model.items() if v[0] in SETTLED and (o >= first or o in status)}
    # nothing the consumer passed is unaccounted for (the ledger's "lost"), nothing unsettled is settled
    unsettled = set(final.pend) | set(final.due)
    for o in range(first, final.frontier):
        assert (o in settled) != (o in unsettled), o


def test_a_large_reset_is_one_span_not_one_entry_per_offset():
    a = S.State(10)
    b = S.from_record(5_000_000, 1, 0, None, None)
    rows = lake.offset_rows(record(a, b, 1, 1))
    (r,) = rows
    assert r["change"] == "reset" and r["start_offset"] is None and r["delivered"] == []
    assert r["settled"] == [{"lo": 10, "hi": 5_000_000, "outcome": "skipped", "reason": None, "deliveries": None}]


def test_a_dead_letter_carries_its_cause_and_deliveries_and_a_gone_one_expires():
    s = S.State(8, due={1: ("rejected", 1), 4: ("max_deliveries", 3), 6: ("rejected", 2)}, dead_lettered=2)
    new = S.gone(S.dead_lettered(s, [4, 6]), [1])
    (r,) = lake.offset_rows(record(s, new, 1, 1))
    assert [(e["lo"], e["outcome"], e["reason"], e["deliveries"]) for e in r["settled"]] == [
        (1, "expired", None, None), (4, "dead_lettered", "max_deliveries", 3), (6, "dead_lettered", "rejected", 2)]


def test_delivered_messages_retention_removed_unacknowledged_expire_not_accepted():
    """A lock ``[3, 6)`` delivered and never acknowledged (its consumer died); retention removed the
    log up to offset 8; the next pull finds nothing new past them and only moves the frontier
    (``reader``: ``settlement.advance`` of the state ``QueueView.state`` floored at the log's first
    offset). Those three messages were never acknowledged: ``expired``, not ``accepted`` (the ledger
    said ``accepted, 0 lost`` for a consumer that lost them)."""
    a = S.settle(S.lock(S.State(0), 1, 100, [], [0, 1, 2], 3), 1, 0, 3, None, (), (), None).state
    c = S.lock(a, 2, 200, [], [3, 4, 5], 6)
    d = S.advance(S.floor(c, 8), 9)  # (6, 7: never delivered, passed over: a filter or retention, unknown)
    (r,) = lake.offset_rows(record(c, d, 1, 1))
    assert [(e["lo"], e["hi"], e["outcome"]) for e in r["settled"]] == [(3, 6, "expired"), (6, 9, "accepted")]


def test_a_released_offset_accepted_on_the_same_receipt_stays_accepted():
    """SQS: ChangeMessageVisibility 0, then DeleteMessage on the same receipt (``settle``'s accepted
    released offset): it left ``pend`` in a settle of its lock's batch, the frontier unmoved."""
    s = S.lock(S.State(0), 9, 100, [], [0, 1, 2], 3)
    r = S.settle(s, 9, 0, 3, accept=[0], release=[1]).state
    t = S.settle(r, 9, 0, 3, accept=[1]).state
    (row,) = lake.offset_rows(record(r, t, 1, 1))
    assert [(e["lo"], e["hi"], e["outcome"]) for e in row["settled"]] == [(1, 2, "accepted")]
