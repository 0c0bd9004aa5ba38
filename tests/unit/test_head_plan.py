"""Issue 16 item 3: the head mover's pure rule (lakeq.log.head_plan), the pull's probe rule
(lakeq.log.selection.lagging) and HeadsFunction's place in template.yaml."""
from __future__ import annotations

import doctest

from hypothesis import given
from hypothesis import strategies as st

from lakeq.log import head_plan, selection
from lakeq.log.selection import QueueView


def test_doctests():
    assert doctest.testmod(head_plan).failed == 0
    assert doctest.testmod(selection).failed == 0


def rec(pq, end, at=1, name="INSERT", h=True):
    img = {"pq": {"S": pq}, "end": {"N": str(end)}, "produced_at": {"N": str(at)}}
    if h:
        img["h"] = {"BOOL": True}
    return {"eventName": name, "dynamodb": {"NewImage": img}}


records = st.lists(st.tuples(st.sampled_from(["t!1#0", "t!1#1", "~ab#0"]), st.integers(1, 50),
                             st.sampled_from(["INSERT", "REMOVE", "MODIFY"]), st.booleans()), max_size=30)


@given(records, st.randoms(use_true_random=False), st.lists(st.integers(0, 30), max_size=4))
def test_any_order_any_split_any_repeat_gives_the_largest_end(recs, rnd, cuts):
    """Applying batches with a forward-only write (max_offset < end) in any order, split anyhow,
    some twice, ends at the largest end of the INSERTs of segments put alone, per queue; other
    records change nothing."""
    rs = [rec(pq, end, end, name, h) for pq, end, name, h in recs]
    expected: dict[str, int] = {}
    for pq, end, name, h in recs:
        if name == "INSERT" and h:
            expected[pq] = max(expected.get(pq, 0), end)
    shuffled = rs[:]
    rnd.shuffle(shuffled)
    bounds = sorted(set([0, len(shuffled), *[c for c in cuts if c <= len(shuffled)]]))
    batches = [shuffled[a:b] for a, b in zip(bounds, bounds[1:])]
    batches += batches[: len(batches) // 2]  # some delivered twice (a retried batch)
    rnd.shuffle(batches)
    store: dict[str, int] = {}
    for b in batches:
        for pq, (end, _at) in head_plan.heads(b).items():
            if store.get(pq, 0) < end:  # the conditional UpdateItem
                store[pq] = end
    assert store == expected


def test_records_without_an_image_are_skipped():
    assert head_plan.heads([{"eventName": "INSERT", "dynamodb": {"Keys": {"pq": {"S": "t#0"}}}},
                            {"eventName": "INSERT"}, {"eventName": "INSERT", "dynamodb": {"NewImage": {
                                "pq": {"S": "t#0"}, "h": {"BOOL": True}}}}]) == {}


def test_a_pull_probes_only_queues_it_could_lock_whose_hint_shows_nothing():
    now = 100
    free = QueueView(0, 0, 5, committed=5)
    assert selection.lagging(free, now)
    assert not selection.lagging(QueueView(0, 0, 7, committed=5), now)  # the hint shows messages
    locked = QueueView(0, 0, 5, committed=3, lock_ts=1, lock_until=now + 1, lock_next=5)
    assert not selection.lagging(locked, now)
    expired = QueueView(0, 0, 5, committed=3, lock_ts=1, lock_until=now - 1, lock_next=5)
    assert selection.lagging(expired, now)  # frontier 5 = hint: fresh messages may be past it
    assert not selection.lagging(free, now, allowed={1})
    assert selection.lagging(QueueView(2, 0, 0), now)  # never read, nothing produced as far as the hint knows


def test_heads_function_in_the_template(template):
    from infra.local import template as tpl
    res = template["Resources"]
    fn = res["HeadsFunction"]["Properties"]
    stmts = [s for pol in fn["Policies"] for s in pol["Statement"]]
    # least privilege: the queue items' conditional UpdateItem, nothing else
    assert stmts == [{"Effect": "Allow", "Action": ["dynamodb:UpdateItem"],
                      "Resource": {"Fn::GetAtt": ["QueuesTable", "Arn"]}}]
    props = fn["Events"]["Segments"]["Properties"]
    assert props["FilterCriteria"] == {"Filters": [{"Pattern": '{"eventName": ["INSERT"]}'}]}
    specs = {s.logical_id: s for s in tpl.functions(template)}
    [ev] = specs["HeadsFunction"].stream_events
    assert ev.table == "SegmentsTable" and ev.starting_position == "TRIM_HORIZON"  # every segment counts
    # never discarded: a producer falls back to max_offset when a queue's segments all expired
    assert ev.maximum_retry_attempts == -1 and ev.maximum_record_age_s == -1
    assert ev.batch_size == 100 and ev.batching_window_s == 1
