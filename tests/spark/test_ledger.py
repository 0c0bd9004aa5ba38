"""The delivery ledger (issue 32.4) on a tiny local lake written by the archiver's own code: the
offsets rows come from a consumer driven through the real settlement state machine
(:mod:`lakeq.log.settlement`), each write a stream record archived by
:func:`lakeq.lake.archive.offset_rows`, each row in an object of its own so that one can be deleted
by hand. One job run for the whole module (:func:`lakeq_lake.ledger.run_ledger`); its per-message
rows are checked against plain Python over the same rows (the definition in
docs/guide-lake.md, "The delivery ledger"), and its summaries against the numbers of the story:

* group ``risk`` on ``quotes`` queue 0: a batch ``[0, 4)`` of which 0 and 1 are accepted, 2
  released (redelivered and accepted with 4 and 5), 3 rejected (dead-lettered: cause
  ``rejected``, its copy in topic ``dlq`` traceable to its origin); queue 1: ``[0, 3)`` acked,
  ``[3, 5)`` acked, 5 delivered and not acked yet; **the row of the ack of ``[0, 3)`` is deleted
  from the lake by hand**: a later ack committed past them, so 0, 1 and 2 of queue 1 are ``lost``;
* group ``audit`` on queue 0: ``[0, 6)`` delivered, **its ack's row deleted by hand**: nothing
  committed past them, so they are ``pending`` (held back); it never pulled queue 1: pending too;
* group ``legacy`` on queue 0: ``[0, 4)`` delivered and acked **in rows archived before the ledger's
  columns existed** (no ``settled``/``delivered``/``start_offset``: the upgrade), then ``[4, 6)``
  delivered and acked: 0-3 are before its ledger (not ``lost``), 4 and 5 accepted.
"""
from __future__ import annotations

import json

import pytest

from lakeq.lake import archive as lake
from lakeq.lake.report_keys import ledger_key
from lakeq.log import settlement as S
from lakeq_lake import ledger as L
from lakeq_lake.store import Lake

T0 = 1_767_225_600_000  # 2026-01-01T00:00Z
SEG = "arn:aws:dynamodb:us-east-1:1:table/lakeq-segments/stream/x"
OFF = "arn:aws:dynamodb:us-east-1:1:table/lakeq-offsets/stream/x"
QUIET = {"log": lambda *_: None}


def _av(v):
    return {"N": str(v)} if isinstance(v, int) else {"S": v}


class Consumer:
    """One offsets record driven through lakeq.log.settlement; every write archived as a row."""

    def __init__(self, owner: str, queue: int, seqs: list[int]):
        self.owner, self.queue, self.seqs = owner, queue, seqs
        self.state: S.State | None = None
        self.rows: list[dict] = []

    def _image(self, s: S.State, at: int) -> dict:
        item = {"owner": self.owner, "queue": self.queue, "committed_offset": s.committed, "lock_ts": s.lock_ts,
                "lock_until": s.lock_until, "updated_at": at, "dead_lettered": s.dead_lettered}
        if s.lock_next is not None:
            item["lock_next"] = s.lock_next
        if (raw := S.to_settle(s)) is not None:
            item["settle"] = raw
        return {k: _av(v) for k, v in item.items()}

    def write(self, new: S.State, at: int) -> dict:
        self.seqs[0] += 1
        d = {"SequenceNumber": str(self.seqs[0]), "NewImage": self._image(new, at)}
        if self.state is not None:
            d["OldImage"] = self._image(self.state, at)
        (row,) = lake.offset_rows({"eventName": "MODIFY" if self.state else "INSERT", "dynamodb": d})
        self.state = new
        self.rows.append(row)
        return row

    def pull(self, at: int, served=(), fresh=(), frontier=None):
        cur = self.state or S.from_record(0, 0, 0, None, None)
        fresh = list(fresh)
        return self.write(S.lock(cur, cur.lock_ts + 1, at + 30_000, served, fresh,
                                 frontier if frontier is not None else max(fresh, default=cur.frontier - 1) + 1), at)

    def ack(self, at: int, accept=None, release=(), reject=()):
        s = self.state
        return self.write(S.settle(s, s.lock_ts, s.lock_from, s.lock_next, accept, release, reject, None).state, at)

    def flush(self, at: int, done):
        return self.write(S.dead_lettered(self.state, done), at)


def _messages():
    rows = []
    for q, n in ((0, 6), (1, 6)):
        for i in range(n):
            rows.append({"topic": "quotes", "inc": 0, "queue": q, "offset": i, "id": f"q{q}-{i}", "key": None,
                         "size": 2, "tags": [], "properties": {}, "produced_at": T0 + 1000 * (i + 1) + q,
                         "seq": str(100 + 10 * q + i)})
    rows.append({"topic": "quotes", "inc": 0, "queue": 0, "offset": 99, "id": "old", "key": None, "size": 1,
                 "tags": [], "properties": {}, "produced_at": T0 - 48 * 3_600_000, "seq": "90"})  # out of range
    copy = {"topic": "dlq", "inc": 0, "queue": 0, "offset": 0, "id": "dl-x", "key": None, "size": 2, "tags": [],
            "properties": {}, "produced_at": T0 + 20_000, "seq": "300",
            "dead_letter": {"topic": "quotes", "queue": 0, "offset": 3, "id": "q0-3", "group": "risk",
                            "deliveries": 1, "reason": "rejected", "at": T0 + 20_000}}
    return rows + [copy]


def _story():
    seqs = [1000]
    risk0, risk1 = Consumer("g|risk|quotes", 0, seqs), Consumer("g|risk|quotes", 1, seqs)
    audit0 = Consumer("g|audit|quotes", 0, seqs)
    at = T0 + 10_000
    risk0.pull(at, fresh=[0, 1, 2, 3])
    risk0.ack(at + 1, accept=[0, 1], release=[2], reject=[3])
    risk0.flush(at + 2, [3])
    risk0.pull(at + 3, served=[2], fresh=[4, 5])
    risk0.ack(at + 4)
    risk1.pull(at, fresh=[0, 1, 2])
    deleted = [risk1.ack(at + 1)]  # the row deleted by hand: lost
    risk1.pull(at + 2, fresh=[3, 4])
    risk1.ack(at + 3)
    risk1.pull(at + 4, fresh=[5])
    audit0.pull(at, fresh=list(range(6)))
    deleted.append(audit0.ack(at + 1))  # deleted by hand: held back
    legacy0 = Consumer("g|legacy|quotes", 0, seqs)
    legacy0.pull(at, fresh=[0, 1, 2, 3])
    legacy0.ack(at + 1)
    for r in legacy0.rows:  # archived before the upgrade: none of the ledger's columns
        for k in ("settled", "delivered", "start_offset"):
            del r[k]
    legacy0.pull(at + 2, fresh=[4, 5])
    legacy0.ack(at + 3)
    return risk0.rows + risk1.rows + audit0.rows + legacy0.rows, deleted


def reference(msgs, offs, lo, hi, as_of):
    """The ledger's definition in plain Python (docs/guide-lake.md, "The delivery ledger")."""
    def order(r):
        d = r["seq"].lstrip("0")
        return (len(d), d)
    offs = sorted((r for r in offs if r["at"] <= as_of), key=order)
    out = {}
    consumers = {(r["group"], r["client_id"] or "", r["topic"]) for r in offs}
    for g, c, t in consumers:
        mine = [r for r in offs if (r["group"], r["client_id"] or "", r["topic"]) == (g, c, t)]
        for m in msgs:
            if m["topic"] != t or not lo <= m["produced_at"] < hi:
                continue
            q, o = m["queue"], m["offset"]
            rows = [r for r in mine if r["queue"] == q]
            starts = [r["start_offset"] for r in rows if r.get("start_offset") is not None]
            # archived before the ledger's columns existed: what the newest such row committed is before the ledger
            legacy = [r["committed_offset"] for r in rows if r.get("settled") is None]
            last = None
            for r in rows:
                for e in r.get("settled") or []:
                    if e["lo"] <= o < e["hi"]:
                        last = e
            if o < max(min(starts) if starts else 0, legacy[-1] if legacy else 0) and last is None:
                continue
            committed = rows[-1]["committed_offset"] if rows else 0
            deliveries = sum(o in (r.get("delivered") or []) for r in rows)
            if last is not None and last["outcome"] != "reopened":
                state = last["outcome"]
            elif o < committed:
                state = "lost"
            else:
                state = "pending"
            cause = last["reason"] if state == "dead_lettered" else None
            out[(g, c or None, t, q, o)] = (state, cause, deliveries)
    return out


@pytest.fixture(scope="module")
def run(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("ledger") / "lake"
    msgs = _messages()
    offs, deleted = _story()
    for r in msgs:
        for key, blob in lake.objects("messages", SEG, [r]).items():
            (root / key).parent.mkdir(parents=True, exist_ok=True)
            (root / key).write_bytes(blob)
    for r in offs:  # one object per row: a row can be deleted by hand
        for key, blob in lake.objects("offsets", OFF, [r]).items():
            (root / key).parent.mkdir(parents=True, exist_ok=True)
            (root / key).write_bytes(blob)
    for r in deleted:
        (key,) = lake.objects("offsets", OFF, [r])
        (root / key).unlink()
    kept = [r for r in offs if r not in deleted]
    lk = Lake(str(root))
    as_of = T0 + 3_600_000
    out = L.run_ledger(spark, lk, as_of_ms=as_of, window_hours=24, **QUIET)
    hist = spark.read.parquet(lk.path(f"reports/ledger/history/computed_at={out['computed_at']}")).collect()
    return {"root": root, "lake": lk, "out": out, "rows": hist, "msgs": msgs, "offs": kept, "as_of": as_of}


def test_every_message_is_accounted_for_as_the_plain_definition_says(run):
    got = {(r["group"], r["client_id"], r["topic"], r["queue"], r["offset"]): (r["state"], r["cause"], r["deliveries"])
           for r in run["rows"]}
    assert len(got) == len(run["rows"])  # one row per consumer and message
    as_of = run["as_of"]
    assert got == reference(run["msgs"], run["offs"], as_of - 24 * 3_600_000, as_of + 1, as_of)
    risk = {k[3:]: v for k, v in got.items() if k[0] == "risk"}
    assert risk[(0, 3)] == ("dead_lettered", "rejected", 1)
    assert risk[(0, 2)] == ("accepted", None, 2)  # released, redelivered, accepted
    assert [risk[(1, o)][0] for o in range(6)] == ["lost"] * 3 + ["accepted"] * 2 + ["pending"]
    audit = {k[3:]: v for k, v in got.items() if k[0] == "audit"}
    # held back: its ack's row is gone; queue 1, never pulled, is pending too (not delivered yet)
    assert {q: {v for k, v in audit.items() if k[0] == q} for q in (0, 1)} == {
        0: {("pending", None, 1)}, 1: {("pending", None, 0)}} and len(audit) == 12
    assert (0, 99) not in risk  # produced before the range
    legacy = {k[3:]: v for k, v in got.items() if k[0] == "legacy" and k[3] == 0}
    # acked in rows archived before the upgrade: before its ledger, not lost (a false alarm on upgrade day)
    assert legacy == {(0, 4): ("accepted", None, 1), (0, 5): ("accepted", None, 1)}


def test_the_summaries_say_it_in_one_line(run):
    lk = run["lake"]
    risk = lk.get_json(ledger_key("risk", "quotes"))
    audit = lk.get_json(ledger_key("audit", "quotes"))
    assert {s["group"] for s in run["out"]["summaries"]} == {"risk", "audit", "legacy"}
    assert risk["line"] == "12 produced, 7 accepted, 1 dead-lettered, 1 pending, 3 lost, 1 redelivered"
    assert risk["causes"] == {"rejected": 1}
    assert [(m["queue"], m["offset"], m["id"]) for m in risk["lost_messages"]] == [(1, 0, "q1-0"), (1, 1, "q1-1"),
                                                                                    (1, 2, "q1-2")]
    assert [(m["queue"], m["offset"]) for m in risk["pending_messages"]] == [(1, 5)]
    assert audit["line"] == "12 produced, 0 accepted, 0 dead-lettered, 12 pending, 0 lost, 0 redelivered"
    assert risk["from"] == run["as_of"] - 24 * 3_600_000 and risk["to"] == run["as_of"]
    json.dumps(risk)  # plain JSON


def test_a_complete_lake_has_nothing_lost(run):
    """The same story with every row kept: nothing lost, audit's messages accepted (the reference
    only: the job ran once, on the lake with the rows deleted)."""
    offs, _ = _story()
    as_of = run["as_of"]
    ref = reference(run["msgs"], offs, as_of - 24 * 3_600_000, as_of + 1, as_of)
    assert sum(v[0] == "lost" for v in ref.values()) == 0
    assert {v[0] for k, v in ref.items() if k[0] == "audit" and k[3] == 0} == {"accepted"}


def test_the_catalog_declares_the_columns_of_the_ledger_files(run, template, spark):
    """template.yaml's Glue table ``ledger``: the columns of the job's Parquet history, partition
    ``computed_at`` projected over its folders (as the backlog and plans tables)."""
    from lakeq_lake import ledger as L

    table = template["Resources"]["LakeLedgerTable"]["Properties"]["TableInput"]
    columns = [(c["Name"], c["Type"]) for c in table["StorageDescriptor"]["Columns"]]
    files = run["lake"].path(f"reports/ledger/history/computed_at={run['out']['computed_at']}")
    assert columns == [(f.name, f.dataType.simpleString()) for f in spark.read.parquet(files).schema.fields]
    assert [f.name for f in L.LEDGER.fields] == [c for c, _ in columns]
    assert table["Name"] == "ledger" and [(p["Name"], p["Type"]) for p in table["PartitionKeys"]] == [
        ("computed_at", "bigint")]
    assert table["Parameters"]["storage.location.template"]["Fn::Sub"].endswith(
        "/reports/ledger/history/computed_at=${!computed_at}/")
