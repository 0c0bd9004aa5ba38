"""Review 34 (issue 34, adversarial): what a tenant's key can do to the metrics and the alarms."""
from __future__ import annotations

import pytest

from lakeq.common import metric_names as M
from tests.emf import documents, problems
from tests.history import path
from tests.integration.test_metrics import counted_by, produce

T = "quotes"


def pulled(api, key, n=2):
    produce(api, key["feed"], [{"body": f"b{i}", "key": "k"} for i in range(n)])
    s, b = api.call("GET", path(T), query={"group": "risk", "max": 10}, key=key["risk"])
    assert s == 200 and len(b["messages"]) == n, b
    return b


def test_a_batch_ack_entrys_own_group_field_names_no_metric_row(api, setup, clock, capsys):
    """A batch ack's entries act for the envelope's group (validation.ack_batch ignores an entry's
    ``group``), but the counters' row was taken from the entry's raw ``group``: any string a consumer
    key writes there became a ``Group`` dimension value, one new CloudWatch metric (and one EMF line)
    per entry, up to 100 a request, for ever new names."""
    b = pulled(api, setup)
    offs = [m["offset"] for m in b["messages"]]
    capsys.readouterr()
    s, out = api.call("POST", "/v1/acks", {"group": "risk", "acks": [
        {"receipt": b["receipt"], "accept": [o], "group": f"made-up-{i}"} for i, o in enumerate(offs)]},
        key=setup["risk"])
    assert s == 200 and all("error" not in r for r in out["results"]), out
    c = counted_by(capsys.readouterr().out)
    groups = {dict(dims).get("Group") for dims, _ in c} - {None}
    assert groups == {"risk"}, groups
    assert c[((("Topic", T), ("Group", "risk"))), M.ACKS] == len(offs)


@pytest.mark.parametrize("junk", [{"a": 1}, ["x"], "x" * 2000, "line\nbreak\"quote"])
def test_a_batch_ack_entrys_junk_group_field_is_harmless(api, setup, clock, capsys, junk):
    """The same field holding JSON that is not a name: a dict or a list made the route's counting raise
    (unhashable) after the ack had settled (a 500 for a settled ack, the client retries); a long or
    unprintable string went out as a dimension value CloudWatch refuses (> 1024 chars / control
    characters), and with one row it rode the invocation's own EMF line, dropping the deployment's
    counters of that invocation with it."""
    b = pulled(api, setup, n=1)
    capsys.readouterr()
    s, out = api.call("POST", "/v1/acks", {"group": "risk", "acks": [{"receipt": b["receipt"], "group": junk}]},
                      key=setup["risk"])
    assert s == 200 and "error" not in out["results"][0], out
    for d in documents(capsys.readouterr().out):
        assert problems(d) == [], d


def dead_letters_counted(text: str) -> float:
    """What the dead-letter alarm sees in the EMF printed: ``AlarmedMessagesDeadLettered``'s sum."""
    from tests.integration.test_metrics import counted
    return counted(text).get(M.ALARMED_DEAD_LETTERS, 0)


def test_a_tenant_deleting_its_subscription_does_not_hide_anothers_new_dead_letter(api, setup, dlq, clock, capsys):
    """Found as: DeadLetteredAlarm fired on ``DIFF`` of a sum over the rows of each row's
    dead-lettered-so-far count, and any consumer key could take a row out of that sum (deleting its
    own subscription whose list had dead letters) in the minute another group dead-lettered: the
    sum did not move. Now the alarm's figure is counted by the settlement that dead-letters, so a
    row leaving changes nothing."""
    from lakeq.store.models import OffsetModel
    from lakeq.store.subscriptions import list_owner
    from tests.integration.test_settlement import patch
    assert patch(api, "risk", {"dead_letter_topic": "dlq"})[0] == 200
    s, mal = api.call("POST", "/v1/clients", {"name": "mallory", "role": "consumer", "topics": ["quotes"]})
    assert s == 201, mal
    s, sub = api.call("POST", "/v1/subscriptions", {"topic": T, "subscriber": "mallory"}, key=mal["api_key"])
    assert s == 201, sub
    OffsetModel(list_owner(sub["id"]), 0, committed_offset=1, dead_lettered=1).save()  # it rejected one
    produce(api, setup["feed"], [{"body": "poison", "key": "k"}])
    s, b = api.call("GET", path(T), query={"group": "risk"}, key=setup["risk"])
    off = b["messages"][0]["offset"]
    capsys.readouterr()
    s, out = api.call("POST", "/v1/acks", {"group": "risk", "receipt": b["receipt"], "reject": [off]},
                      key=setup["risk"])
    assert s == 200, out
    assert api.call("DELETE", f"/v1/subscriptions/{sub['id']}", key=mal["api_key"])[0] == 204
    assert dead_letters_counted(capsys.readouterr().out) == 1


def test_a_run_the_timeout_cuts_keeps_the_rows_it_printed(api, setup, clock, capsys, monkeypatch):
    """The run printed its rows only after computing all of them: a Lambda timeout (one slow row:
    sequential segment Queries with botocore's retries can outlast the 5-s margin) lost the whole
    minute. Each row is printed as it is computed now: here the run is killed (a BaseException, as
    the timeout ends the process) at the row after the quotes group's, whose row was printed."""
    from lakeq.console import gauges
    from tests.emf import documents
    from tests.handlers import Context, load_function
    from tests.integration.test_metrics import row
    produce(api, setup["feed"], [{"body": "old", "key": "k", "id": "old-1"}])
    clock.t += 30_000
    real = gauges.OffsetRepo.records

    class Killed(BaseException):
        pass

    class Slow(gauges.OffsetRepo):
        @staticmethod
        def records(owner, *a, **kw):
            if "quotes/sh" in owner:
                raise Killed()
            return real(owner, *a, **kw)

    monkeypatch.setattr(gauges, "OffsetRepo", Slow)
    fn = load_function("MetricsFunction")
    capsys.readouterr()
    with pytest.raises(Killed):
        fn({}, Context())
    docs = documents(capsys.readouterr().out)
    assert row(docs, Topic=T, Group="risk")[M.AGE] == 30_000


def test_one_rows_store_error_does_not_lose_the_whole_run(api, setup, clock, capsys, monkeypatch):
    """A busy deployment: one row's read fails (a throttled Query past botocore's retries, on a hot
    offsets partition). The run computed every row before printing any, so the exception lost the
    whole minute — every row, the totals and ``AlarmedAgeOfOldestMessage`` (the age alarm's only
    input) — and the same again each minute while that read keeps failing. The other rows and the
    age the alarm watches are printed; the run counts as truncated (no sums: they would drop)."""
    from pynamodb.exceptions import QueryError

    from lakeq.console import gauges
    from tests.integration.test_metrics import publish, row
    produce(api, setup["feed"], [{"body": "old", "key": "k", "id": "old-1"}])
    clock.t += 30_000
    real = gauges.OffsetRepo.records

    class Flaky(gauges.OffsetRepo):
        @staticmethod
        def records(owner, *a, **kw):
            if "quotes/sh" in owner:
                raise QueryError("ProvisionedThroughputExceededException (injected)")
            return real(owner, *a, **kw)

    monkeypatch.setattr(gauges, "OffsetRepo", Flaky)
    stats, docs = publish(capsys)
    assert stats["truncated"] is True
    total = row(docs)
    assert total[M.PUBLISHER_TRUNCATED] == 1 and M.BACKLOG not in total
    assert total[M.ALARMED_AGE] == 30_000 == row(docs, Topic=T, Group="risk")[M.AGE]


def test_a_deployment_over_the_row_cap_still_alarms_on_a_dead_letter(api, setup, dlq, clock, capsys, monkeypatch):
    """Found as: past ``MAX_ROWS`` (500) rows every metrics run is truncated, and the dead-letter
    alarm's figure (complete runs only) was never printed: the alarm was blind for good. Now the
    figure is counted by the settlement itself: with the metrics function's cap at 2 and 3 rows,
    the reject that dead-letters prints it, and the truncated runs do not matter."""
    from lakeq.console import gauges
    from tests.integration.test_metrics import publish
    from tests.integration.test_settlement import patch
    assert patch(api, "risk", {"dead_letter_topic": "dlq"})[0] == 200
    monkeypatch.setattr(gauges.compute, "__defaults__", (None, None, 2, "active"))
    produce(api, setup["feed"], [{"body": "poison", "key": "k"}])
    s, b = api.call("GET", path(T), query={"group": "risk"}, key=setup["risk"])
    capsys.readouterr()
    assert api.call("POST", "/v1/acks", {"group": "risk", "receipt": b["receipt"], "reject": [0]},
                    key=setup["risk"])[0] == 200
    assert dead_letters_counted(capsys.readouterr().out) == 1
    stats, _ = publish(capsys)
    assert stats["truncated"] is True


def test_subscription_churn_mints_no_more_metric_rows_than_the_cap(api, setup, clock, capsys, monkeypatch):
    """The per-client cap (100) was meant to bound what one tenant adds to the metrics. But every
    subscription is a new random id, and the request paths count per ``Subscription``: a consumer
    key that creates a subscription, pulls (and acks) one message, deletes it and starts again mints
    2-5 new CloudWatch metrics per round (billed for the hours they get data), with no rate limit on
    the creations (abuse.md: none per key). Here the cap is 1 and 3 rounds mint 3 rows."""
    from lakeq.fanout.worker import append_groups
    from lakeq.log.fanout_plan import Group, ListMessage
    from lakeq.subscriptions import service
    monkeypatch.setattr(service, "MAX_SUBSCRIPTIONS_PER_CLIENT", 1)
    capsys.readouterr()
    for i in range(3):
        s, sub = api.call("POST", "/v1/subscriptions", {"topic": T, "subscriber": "risk"}, key=setup["risk"])
        assert s == 201, sub
        # a message the fan-out delivered to the list (its source: quotes, queue 0, offset i)
        append_groups(sub["id"], [Group(f"quotes@0:{i}", 0, [ListMessage(
            id=f"m{i}", body="b", produced_at=clock.t, topic=T, queue=0, source_offset=i)])], clock.t)
        s, b = api.call("GET", f"/v1/subscriptions/{sub['id']}/messages", key=setup["risk"])
        assert s == 200 and len(b["messages"]) == 1, b
        s, out = api.call("POST", "/v1/acks", {"subscription": sub["id"], "receipt": b["receipt"]},
                          key=setup["risk"])
        assert s == 200, out
        assert api.call("DELETE", f"/v1/subscriptions/{sub['id']}", key=setup["risk"])[0] == 204
    c = counted_by(capsys.readouterr().out)
    minted = {dims for dims, _ in c if dims}
    assert minted == {(("Subscriber", "risk"),)}, minted  # one row, whatever the churn


def test_subscription_churn_with_a_backlog_mints_no_gauge_rows(api, setup, clock, capsys, monkeypatch):
    """Second review of issue 34: the gauges were printed per ``Subscription`` (the id), so a key that
    creates a subscription, lets the fan-out give it a message, waits for the minute's run and
    deletes it minted 5 CloudWatch metrics a round. A client's subscriptions to one topic are now one
    row per ``Subscriber`` + ``Topic``: three rounds, one row; a run reads a client's subscriptions to a
    topic on one page (never half of them), and a row one of whose reads failed is not printed."""
    from lakeq.console import gauges
    from lakeq.fanout.worker import append_groups
    from lakeq.log.fanout_plan import Group, ListMessage
    from tests.integration.test_metrics import publish, row
    subs, dims = [], set()
    for i in range(3):
        s, sub = api.call("POST", "/v1/subscriptions", {"topic": T, "subscriber": "risk"}, key=setup["risk"])
        assert s == 201, sub
        subs.append(sub["id"])
        append_groups(sub["id"], [Group(f"quotes@0:{i}", 0, [ListMessage(
            id=f"m{i}", body="b", produced_at=clock.t, topic=T, queue=0, source_offset=i)])], clock.t)
        clock.t += 60_000
        _, docs = publish(capsys)
        dims |= {tuple(sorted(k for k in d if k[0].isupper() and k not in M.ALL)) for d in docs}
        assert row(docs, Subscriber="risk", Topic=T)[M.BACKLOG] == 1 + (i > 0)  # 2 live at most
        if i:
            assert api.call("DELETE", f"/v1/subscriptions/{subs[i - 1]}", key=setup["risk"])[0] == 204
    assert ("Subscription",) not in dims and ("Subscriber", "Topic") in dims, dims
    # two live subscriptions of risk to quotes: with a cap of 1 row a page, they are still one page
    s, sub = api.call("POST", "/v1/subscriptions", {"topic": T, "subscriber": "risk"}, key=setup["risk"])
    assert s == 201, sub
    append_groups(sub["id"], [Group("quotes@0:9", 0, [ListMessage(
        id="m9", body="b", produced_at=clock.t, topic=T, queue=0, source_offset=9)])], clock.t)
    monkeypatch.setattr(gauges.compute, "__defaults__", (None, None, 1, "active"))
    printed = []
    for minute in range(4):  # the pairs' pages (risk: quotes, quotes/sh) and the subscriptions' one
        clock.t = (clock.t // 60_000 + 1) * 60_000
        r = row(publish(capsys)[1], Subscriber="risk", Topic=T)
        if r is not None:
            printed.append(r[M.BACKLOG])
    assert printed and set(printed) == {2}, printed  # subs[2] has 1, the new one 1: never half
    # one subscription's read fails: its client's row for the topic is not printed (not a half sum)
    monkeypatch.setattr(gauges.compute, "__defaults__", (None, None, 500, "active"))
    real = gauges.OffsetRepo.records

    class Flaky(gauges.OffsetRepo):
        @staticmethod
        def records(owner, *a, **kw):
            if sub["id"] in owner:
                from pynamodb.exceptions import QueryError
                raise QueryError("ProvisionedThroughputExceededException (injected)")
            return real(owner, *a, **kw)

    monkeypatch.setattr(gauges, "OffsetRepo", Flaky)
    stats, docs = publish(capsys)
    assert row(docs, Subscriber="risk", Topic=T) is None and row(docs)[M.PUBLISHER_TRUNCATED] == 1


def test_a_pulls_piggybacked_ack_is_counted_as_an_ack(api, setup, clock, capsys):
    """``GET …/messages?ack=<receipt>`` settles the previous batch (API.md: the efficient consumer's
    loop, what the Python client does). Only ``POST /v1/acks`` counted ``NumberOfAcks``: a consumer
    that acks by piggybacking shows no consumption on the dashboard and the console's ``consumed``
    chart (both read ``NumberOfAcks``), as if it were stuck."""
    b = pulled(api, setup, n=1)
    capsys.readouterr()
    s, b2 = api.call("GET", path(T), query={"group": "risk", "ack": b["receipt"]}, key=setup["risk"])
    assert s == 200, b2
    c = counted_by(capsys.readouterr().out)
    assert c.get(((), M.ACKS)) == 1, c


def test_a_producers_delayed_message_does_not_arrive_over_the_age_threshold(api, setup, clock, capsys, template):
    """``ApproximateAgeOfOldestMessage`` (and ``AlarmedAgeOfOldestMessage``, OldestMessageAgeAlarm's
    input, default threshold 300,000 ms) is ``now - produced_at`` of the oldest unsettled message,
    and a delayed message keeps its produce time when it joins its queue. A producer key (any
    tenant allowed to write the topic, not the group's owner) sends one message with the largest
    delay, 900 s: the minute it becomes visible it is already 900 s old, so the shared age alarm
    pages the operator though the group consumed everything on time, and the only remedy (muting
    the group) hides that group's real trouble. Now the promotion records when the message joined
    its queue (``visible_at``, in the segment's header) and the age counts from then; the consumer
    still sees its ``produced_at`` (the produce time) and nothing else new."""
    from tests.handlers import Context, load_function
    from tests.integration.test_metrics import publish, row
    threshold = template["Parameters"]["OldestMessageAgeThresholdMs"]["Default"]
    t0 = clock.t
    produce(api, setup["feed"], [{"body": "late", "key": "k", "delay_ms": 900_000}])
    clock.t += 900_000
    load_function("PromoterFunction")({}, Context())
    clock.t += 20_000
    _, docs = publish(capsys)
    assert row(docs, Topic=T, Group="risk")[M.BACKLOG] == 1  # it is visible now, for the first time
    assert row(docs, Topic=T, Group="risk")[M.AGE] == 20_000  # since it became visible
    assert row(docs)[M.ALARMED_AGE] == 20_000 <= threshold, row(docs)
    s, b = api.call("GET", path(T), query={"group": "risk"}, key=setup["risk"])
    assert s == 200 and [m["produced_at"] for m in b["messages"]] == [t0], b
    assert "visible_at" not in b["messages"][0]


def test_putting_a_client_back_into_the_alarms_is_no_new_dead_letter(api, setup, dlq, clock, capsys):
    """Found as: ``PATCH /v1/clients/risk {"alarms": true}`` put back a group whose records count
    past dead letters, the alarm's sum jumped and it paged with nothing dead-lettered. Now muting
    and unmuting print nothing the alarm watches; a dead letter while muted counts nothing."""
    from tests.integration.test_metrics import publish
    from tests.integration.test_settlement import patch
    assert patch(api, "risk", {"dead_letter_topic": "dlq"})[0] == 200
    assert patch(api, "risk", {"alarms": False})[0] == 200
    produce(api, setup["feed"], [{"body": "poison", "key": "k"}])
    s, b = api.call("GET", path(T), query={"group": "risk"}, key=setup["risk"])
    capsys.readouterr()
    assert api.call("POST", "/v1/acks", {"group": "risk", "receipt": b["receipt"], "reject": [0]},
                    key=setup["risk"])[0] == 200
    assert patch(api, "risk", {"alarms": True})[0] == 200
    assert dead_letters_counted(capsys.readouterr().out) == 0  # the reject (muted), the unmute
    clock.t += 60_000
    _, docs = publish(capsys)
    assert all(M.ALARMED_DEAD_LETTERS not in d for d in docs)


def test_the_pair_build_does_not_test_every_grant_against_every_topic(monkeypatch):
    """A big deployment: the (topic, group) rows were built by testing every grant of every consumer
    against every topic (``covers``), before any paging or deadline: topics x consumers x grants
    string tests each minute. 2,000 topics x 200 consumers x 100 grants measured 20 s of the run's
    55 before its first row (a throwaway script on this machine; a 512 MB Lambda is slower), so a
    deployment a few times that size printed nothing at all, every minute. A grant covers a topic
    exactly when it is one of the topic's ancestors (``names.ancestors``): look the consumers up by
    those instead. Here: 100 topics, 50 consumers with 100 grants each, a few nested grants that
    match; the rows are those of the definition, and ``covers`` is not run topics x consumers x
    grants times."""
    from types import SimpleNamespace as NS

    from lakeq.common import names
    from lakeq.console import gauges
    topics = [NS(name=f"t{i:03d}" + ("/sub" if i % 2 else ""), queues=1) for i in range(100)]
    consumers = [NS(name=f"c{j:02d}", role="consumer", mode="broadcasting" if j == 7 else "clustering",
                    alarms_muted=None, dead_letter_topic=None,
                    topics=[f"x{j}-{k}" for k in range(98)] + [f"t{j:03d}", f"t{j + 1:03d}/sub"])
                 for j in range(50)]
    calls = []

    def counting(g, t):
        calls.append(1)
        return names.covers(g, t)
    monkeypatch.setattr(gauges, "covers", counting, raising=False)  # (no longer used there)
    monkeypatch.setattr(gauges.TopicRepo, "all", staticmethod(lambda: list(topics)))
    monkeypatch.setattr(gauges.ClientRepo, "all", staticmethod(lambda attributes=None: list(consumers)))
    monkeypatch.setattr(gauges.SubscriptionRepo, "all", staticmethod(lambda consistent=False, attributes=None: []))
    monkeypatch.setattr(gauges, "log_of", lambda t: t.name)
    monkeypatch.setattr(gauges.LogRepo, "queues", staticmethod(lambda log, n, exact=False: []))
    monkeypatch.setattr(gauges.OffsetRepo, "records", staticmethod(lambda owner: []))
    monkeypatch.setattr(gauges, "views_of", lambda metas, recs: [])
    out = gauges.compute(now=0, detail="all")
    want = [(t.name, c.name) for t in topics for c in consumers
            if c.mode != "broadcasting" and any(names.covers(g, t.name) for g in c.topics)]
    got = [(d["Topic"], d["Group"]) for d, _ in out.rows if "Group" in d]
    assert got == want and len(want) == 74 and out.total_rows == 74
    assert len(calls) < 100 * 50, len(calls)


def test_a_consumer_key_hammering_the_charts_costs_one_read_a_minute(api, setup, clock, monkeypatch):
    """``GET /v1/console/metrics`` is open to any consumer key (its own group); each call is one
    ``GetMetricData`` of 3 metrics ($0.01 per 1,000 metrics: $0.00003 a call) on the operator's bill
    and against the account's GetMetricData request quota (which the operator's own dashboard
    shares), with no per-key rate limit (abuse.md). 50 requests a second from one key is ~$130 a
    day. The figures move once a minute: the same question within the minute could be answered
    from the last answer."""
    from lakeq.console import charts
    calls = []
    monkeypatch.setattr(charts.MetricsRepo, "series",
                        staticmethod(lambda queries, start, end: calls.append(1) or {}))
    for _ in range(20):
        s, b = api.call("GET", "/v1/console/metrics", query={"topic": T, "group": "risk"}, key=setup["risk"])
        assert s == 200, b
    assert len(calls) <= 1, len(calls)


def test_a_failed_metrics_run_is_not_retried_beside_the_next_ones(template):
    """A scheduled (asynchronous) invocation that fails or times out is retried twice by Lambda by
    default, each retry up to the 60 s timeout: a run that failed because the tables were throttled
    or the deployment too big for a minute ran again up to twice more, beside the next minutes'
    runs, each with the whole Scans and row reads — more load on the tables at the moment they were
    short of it, for figures the next minute's run publishes anyway."""
    fn = template["Resources"]["MetricsFunction"]["Properties"]
    assert fn.get("EventInvokeConfig", {}).get("MaximumRetryAttempts") == 0, fn.get("EventInvokeConfig")
