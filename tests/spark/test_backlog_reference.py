"""The backlog transform (``lakeq_lake.transforms.backlog``) against a plain-Python reference of its
documented meaning, on a generated lake with the cases the lake really holds: batches redelivered
(rows written twice), a topic deleted and made again (incarnations; the old rows carry no ``inc``),
rows in no order (the archiver writes shards as they come), writers' clocks that disagree with the
stream's sequence numbers, numbers of different lengths, rows after ``as_of``, subscriptions' rows,
queues never pulled, offsets across the 64-offset blocks the transform counts in, empty buckets.

A message written twice is written with the same fields (the stream record twice): two rows of one
``(topic, inc, queue, offset)`` with different ``produced_at`` have no single right answer (the
deduplication before kept either), so the lake here has none."""
from __future__ import annotations

import random

import pytest

from lakeq_lake import schemas
from lakeq_lake import transforms as T

H = 3_600_000
T0 = 1_767_225_600_000  # 2026-01-01T00:00Z
AS_OF = T0 + 5 * H + 1_234


def generated_lake(seed: int = 7):
    rnd = random.Random(seed)
    msgs, offs = [], []
    # topic "a": incarnation 0 (rows without ``inc``) over hours 0-2, deleted, made again (inc 1) in hour 3
    # topic "b": one incarnation, 3 queues; queue 2 crosses several 64-offset blocks, with an empty hour
    logs = [("a", None, 2, T0, 3 * H, 40), ("a", 1, 2, T0 + 3 * H, 2 * H + 10_000, 25),
            ("b", None, 2, T0 + 10, 5 * H, 30)]
    for topic, inc, queues, start, span, n in logs:
        for q in range(queues):
            for off in range(n):
                at = start + off * span // n + rnd.randrange(1000)
                msgs.append((topic, q, off, f"{topic}{inc}{q}-{off}", None, 10, [], {}, at, str(rnd.randrange(10**9)),
                             inc))
    for off in range(200):  # b/2: 200 offsets, none in hour 2
        h = [0, 1, 3, 4][off * 4 // 200]
        msgs.append(("b", 2, off, f"b2-{off}", None, 10, [], {}, T0 + h * H + off, str(off), None))
    msgs.append(("b", 0, 30, "late", None, 10, [], {}, AS_OF + 1, "late", None))  # after as_of: ignored
    msgs.append((None, 0, 0, "x", None, 10, [], {}, T0, "x", None))  # no topic: ignored
    msgs += [msgs[i] for i in rnd.sample(range(len(msgs)), 60)]  # redelivered rows

    def commit(group, topic, q, committed, at, seq, client=None, inc=None):
        offs.append((group, client, None, topic, q, committed, None, 0, 0, 0, "MODIFY", "commit", at, seq, inc))

    seq = 10**20
    for topic, inc, queues, start, span, n in logs:
        for q in range(queues):
            for k, committed in enumerate(sorted(rnd.sample(range(1, n + 1), 6))):
                seq += rnd.randrange(1, 10**6)
                at = start + committed * span // n + 600_000 + rnd.randrange(-900_000, 900_000)  # clocks disagree
                commit("g", topic, q, committed, at, str(seq), inc=inc)
                if k % 2:
                    commit("bc", topic, q, max(committed - 3, 0), at + 5, str(seq + 1), client=f"c{k % 3}", inc=inc)
    for k, committed in enumerate((5, 70, 64, 130, 199)):  # b/2: the newest change stamped in an older hour
        commit("g", "b", 2, committed, T0 + [0, 1, 1, 3, 4][k] * H + 50, "9" * (k + 2))
    commit("g", "b", 0, 1, T0 + 60, "7" * 45)  # a 45-digit sequence number: the newest of b/0 …
    commit("g", "b", 0, 29, T0 + 4 * H, "8" * 44)  # … and this one, shorter, is older
    commit("g", "b", 1, 29, AS_OF + 10, "9" * 50)  # after as_of: ignored
    commit("late", "b", 1, 3, AS_OF + 10, "9" * 51)  # a group seen after as_of only: not a key
    commit("old", "a", 0, 7, T0 + 60, "5", inc=None)  # a group of the old incarnation only: the new log's queues, at 0
    offs.append((None, None, "sub", "b", 0, 9, None, 0, 0, 0, "MODIFY", "commit", T0 + 70, "6", None))  # a subscription
    offs += [offs[i] for i in rnd.sample(range(len(offs)), 15)]  # redelivered rows
    rnd.shuffle(msgs)
    rnd.shuffle(offs)
    return msgs, offs


def reference(msgs, offs, as_of, bucket):
    """The report by its definition (the transform's docstring), one key and bucket at a time."""
    last_b = as_of // bucket
    m = {}
    for topic, queue, offset, _id, _k, _s, _t, _p, produced_at, _seq, inc in msgs:
        if topic is not None and offset is not None:
            m.setdefault((topic, inc or 0, queue, offset), produced_at)
    m = {k: at for k, at in m.items() if at is not None and at <= as_of}
    o = {(g, c or "", t, inc or 0, q, committed, at, s)
         for g, c, _sub, t, q, committed, *_, at, s, inc in offs
         if g is not None and t is not None and committed is not None and at <= as_of}
    mb, ob = {}, {}
    for (t, i, q, off), at in m.items():
        count, end = mb.get((t, i, q, at // bucket), (0, 0))
        mb[(t, i, q, at // bucket)] = (count + 1, max(end, off + 1))
    for g, c, t, i, q, committed, at, s in o:
        digits = (s or "").lstrip("0")
        k = (g, c, t, i, q, at // bucket)
        ob[k] = max(ob.get(k, ((-1, ""), -1)), ((len(digits), digits), committed))
    starts = {}
    for t, i, _q, b in [*mb, *((k[2], k[3], k[4], k[5]) for k in ob)]:
        starts[(t, i)] = min(starts.get((t, i), b), b)
    newest = {}
    for t, i in starts:
        newest[t] = max(newest.get(t, i), i)
    keys = {(g, c, t, q, i) for g, c, t, *_ in o for (t2, i, q, _b) in mb if t2 == t}
    keys |= {(g, c, t, q, i) for g, c, t, i, q, _b in ob}
    rows = []
    for g, c, t, q, i in sorted(keys, key=repr):
        if newest[t] != i:
            continue
        produced = committed = 0
        order = None
        for b in range(starts[(t, i)], last_b + 1):
            count, end = mb.get((t, i, q, b), (0, 0))
            produced = max(produced, end)
            if (g, c, t, i, q, b) in ob and (order is None or ob[(g, c, t, i, q, b)] > order):
                order = ob[(g, c, t, i, q, b)]
            prev, committed = committed, (order[1] if order else 0)
            at = min((b + 1) * bucket, as_of)
            backlog = max(produced - committed, 0)
            secs = max((at - b * bucket) / 1000.0, 0.001)
            head = m.get((t, i, q, committed))
            age = max(at - head, 0) if backlog > 0 and head is not None else 0
            rows.append((g, c or None, t, q, b * bucket, at, produced, committed, backlog, count,
                         max(committed - prev, 0), count / secs, max(committed - prev, 0) / secs, age))
    return rows


@pytest.mark.parametrize("seed", [7, 8])
def test_backlog_equals_the_reference_on_an_adversarial_lake(spark, seed):
    msgs, offs = generated_lake(seed)
    want = reference(msgs, offs, AS_OF, H)
    got = [tuple(r) for r in T.backlog(spark.createDataFrame(msgs, schemas.MESSAGES),
                                       spark.createDataFrame(offs, schemas.OFFSETS), AS_OF, H, persisted=[]).collect()]
    spark.catalog.clearCache()
    assert len(want) > 100 and {r[0] for r in want} == {"g", "bc", "old"}
    assert any(r[8] > 0 and r[13] > 0 for r in want) and any(r[7] > 0 for r in want)  # backlogs with ages, commits
    assert sorted(got, key=repr) == sorted(want, key=repr)
