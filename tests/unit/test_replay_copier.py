"""The copier's loop (lakeq.replay.copier) against a target that drops duplicate ids as the produce
does: whatever chunk the copier crashes in (after its produce, before its cursor write), restarts
deliver every copyable manifest row exactly once, in order per queue; a lost conditional write
makes it continue from the stored cursor; the pace is kept."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from lakeq.replay.copier import Progress, run
from lakeq.replay.rules import copy_id


class Crash(Exception):
    pass


class World:
    def __init__(self, rows, crash_after_produce: set[int]):
        self.rows, self.crashes = rows, set(crash_after_produce)
        self.stored = Progress(found=len(rows))
        self.delivered: list[tuple] = []  # what the target's consumers see
        self.ids: set[str] = set()
        self.produces = 0

    def load(self):
        return self.stored

    def save(self, old, new):
        if self.stored != old:
            return False
        self.stored = new
        return True

    def read(self, a, b):
        return self.rows[a:b]

    def produce(self, copies):
        new = 0
        for c in copies:
            if c.id not in self.ids:  # the produce's id dedup
                self.ids.add(c.id)
                self.delivered.append((c.row["queue"], c.row["offset"]))
                new += 1
        self.produces += 1
        if self.produces in self.crashes:
            raise Crash()
        return new


def manifest(sizes, missing):
    rows = []
    for q, n in enumerate(sizes):
        rows += [{"queue": q, "offset": o, "body": None if (q, o) in missing else f"b{q}-{o}"} for o in range(n)]
    return rows


@settings(max_examples=300, deadline=None)
@given(sizes=st.lists(st.integers(0, 30), min_size=1, max_size=4), chunk=st.integers(1, 9),
       crashes=st.sets(st.integers(1, 40), max_size=6),
       missing=st.sets(st.tuples(st.integers(0, 3), st.integers(0, 29))))
def test_crash_and_restart_delivers_each_once_in_order_per_queue(sizes, chunk, crashes, missing):
    rows = manifest(sizes, missing)
    w = World(rows, crashes)
    for _ in range(len(crashes) + 1):
        try:
            p = run("src", w.load, w.save, w.read, w.produce, rate=1000, chunk=chunk)
            break
        except Crash:
            continue
    else:
        raise AssertionError("never finished")
    want = [(r["queue"], r["offset"]) for r in rows if r["body"] is not None]
    assert sorted(w.delivered) == sorted(want) and len(w.delivered) == len(set(w.delivered))
    for q in range(len(sizes)):
        assert [d for d in w.delivered if d[0] == q] == [d for d in want if d[0] == q]
    assert p.done and p == w.stored and p.copied == len(want) and p.failed == len(rows) - len(want)
    assert p.duplicates <= sum(1 for c in crashes if c <= w.produces) * chunk  # only re-copied chunks


def test_two_incarnations_messages_at_the_same_offsets_are_both_copied_once():
    """A topic deleted and made again restarts its queues at offset 0: the manifest holds both logs'
    messages at the same (queue, offset), inc 0 then inc 1. Each gets its own copy id (incarnation 0
    keeps the id it always had), so the produce's dedup drops neither, and a restart drops both
    chunks' repeats."""
    rows = [{"queue": 0, "inc": inc, "offset": o, "body": f"b{inc}-{o}"} for inc in (0, 1) for o in range(3)]
    del rows[0]["inc"]  # a row of a manifest written before the lake had inc: incarnation 0
    w = World(rows, {1, 2})
    for _ in range(3):
        try:
            p = run("src", w.load, w.save, w.read, w.produce, rate=1000, chunk=2)
            break
        except Crash:
            continue
    assert p.done and p.copied == 6 and len(w.ids) == 6 and len(w.delivered) == 6
    assert copy_id("src", 0, 0) in w.ids and copy_id("src", 0, 0, 1) in w.ids


def test_a_lost_conditional_write_reloads_and_continues_from_the_stored_cursor():
    rows = manifest([10], set())
    w = World(rows, set())
    real_save, lost = w.save, []

    def save(old, new):
        if not lost and old.cursor == 4:  # another copier moved it to 8 meanwhile
            lost.append(1)
            w.stored = Progress(found=10, cursor=8, copied=8, version=old.version + 5)
            return False
        return real_save(old, new)
    p = run("src", w.load, save, w.read, w.produce, rate=1000, chunk=2)
    assert lost and p.cursor == 10 and p.copied == 10  # 8 (theirs) + rows 8, 9
    assert w.delivered == [(0, o) for o in range(6)] + [(0, 8), (0, 9)]  # this copier's own work


def test_rate_and_budget():
    rows = manifest([50], set())
    w = World(rows, set())
    now, slept = [0.0], []

    def sleep(s):
        slept.append(s)
        now[0] += s
    p = run("src", w.load, w.save, w.read, w.produce, rate=10, chunk=100, clock=lambda: now[0], sleep=sleep,
            budget_s=3.0)
    assert p.cursor == 30 and not p.done  # 10 rows/s for the 3 s it was given (chunks of <= rate rows)
    assert abs(now[0] - 3.0) < 1e-9 and all(s > 0 for s in slept)
    assert copy_id("src", 0, 1) in w.ids


def test_a_chunk_in_flight_is_not_resumed_when_stale_and_a_clean_stop_always_is():
    """``inflight`` after a crash between produce and cursor write; ``stale`` true → ResumeRefused
    before any produce. A stop on the time budget clears it, and ``stale`` is then never asked."""
    import pytest

    from lakeq.replay.copier import ResumeRefused

    rows = manifest([9], set())
    w = World(rows, {2})  # dies after the 2nd chunk's produce
    with pytest.raises(Crash):
        run("src", w.load, w.save, w.read, w.produce, rate=1000, chunk=3)
    assert w.stored.inflight and w.stored.cursor == 3
    w.ids.clear()  # the target's dedup forgot them (past its window)
    produced = w.produces
    with pytest.raises(ResumeRefused) as e:
        run("src", w.load, w.save, w.read, w.produce, rate=1000, chunk=3, stale=lambda p: True)
    assert e.value.progress == w.stored and w.produces == produced  # nothing produced again
    assert len(w.delivered) == 6  # chunks 1 and 2, once

    w2 = World(rows, set())
    now = [0.0]

    def sleep(s):
        now[0] += s
    run("src", w2.load, w2.save, w2.read, w2.produce, rate=3, chunk=3, clock=lambda: now[0], sleep=sleep,
        budget_s=1.5)
    assert 0 < w2.stored.cursor < 9 and not w2.stored.inflight  # a clean stop: nothing in flight

    def never(p):
        raise AssertionError("a clean stop needs no check")
    w2.ids.clear()
    p = run("src", w2.load, w2.save, w2.read, w2.produce, rate=1000, chunk=3, stale=never)
    assert p.done and sorted(w2.delivered) == [(0, o) for o in range(9)] and not p.inflight


class ForgetfulWorld(World):
    """A target whose dedup forgets an id ``window`` after it was written, and a wall clock ``now``
    that the test moves between runs; every save records when it was made."""

    def __init__(self, rows, crashes, window):
        super().__init__(rows, crashes)
        self.window, self.now, self.written, self.saved_at = window, 0, {}, 0

    def save(self, old, new):
        ok = super().save(old, new)
        if ok:
            self.saved_at = self.now
        return ok

    def produce(self, copies):
        for i, t in list(self.written.items()):
            if self.now - t >= self.window:  # expired (TTL): the dedup no longer knows it
                self.ids.discard(i)
                del self.written[i]
        for c in copies:
            self.written.setdefault(c.id, self.now)
        return super().produce(copies)


@settings(max_examples=300, deadline=None)
@given(sizes=st.lists(st.integers(0, 20), min_size=1, max_size=3), chunk=st.integers(1, 5),
       crashes=st.sets(st.integers(1, 30), max_size=5), gaps=st.lists(st.sampled_from([1, 10, 22, 23, 24, 30, 100]),
                                                                    min_size=12, max_size=12),
       budgets=st.lists(st.one_of(st.none(), st.floats(0.5, 4)), min_size=12, max_size=12))
def test_crashes_and_pauses_of_any_length_never_duplicate(sizes, chunk, crashes, gaps, budgets):
    """Runs separated by pauses (hours; the dedup forgets after 24, the copier refuses from 23),
    some cut by their time budget, some dying after a produce: never a copy twice; either every
    copyable row is delivered once or the copier refused to resume (and then nothing after it)."""
    from lakeq.replay.copier import ResumeRefused

    rows = manifest(sizes, set())
    w = ForgetfulWorld(rows, crashes, window=24)
    refused = False
    for gap, budget in zip(gaps, budgets):
        w.now += gap
        pace = [0.0]

        def sleep(s):
            pace[0] += s
        try:
            p = run("src", w.load, w.save, w.read, w.produce, rate=2, chunk=chunk, clock=lambda: pace[0],
                    sleep=sleep, budget_s=budget, stale=lambda p: w.now - w.saved_at >= 23)
        except Crash:
            continue
        except ResumeRefused:
            refused = True
            break
        if p.done:
            break
    assert len(w.delivered) == len(set(w.delivered))  # never twice
    if not refused and w.stored.done:
        assert sorted(w.delivered) == sorted((r["queue"], r["offset"]) for r in rows)
