"""Issue 34 item 1: the metrics function (MetricsFunction, rate(1 minute), as itself: its IAM role)
prints per (topic, group), per subscription, per topic and in total the gauges SQS publishes, as
valid embedded-metric-format documents."""
from __future__ import annotations

import pytest

from lakeq.common import metric_names as M
from lakeq.console import gauges
from tests.emf import documents, problems
from tests.handlers import Context, load_function
from tests.history import path

T = "quotes"


def publish(capsys) -> tuple[dict, list[dict]]:
    fn = load_function("MetricsFunction")
    capsys.readouterr()
    stats = fn({}, Context())
    docs = documents(capsys.readouterr().out)
    for d in docs:
        assert problems(d) == [], d
    return stats, docs


def row(docs: list[dict], **dims) -> dict | None:
    """The values of the one document whose dimensions (besides ``service``) are exactly ``dims``
    (None: there is none)."""
    found = []
    for d in docs:
        (keys,) = d["_aws"]["CloudWatchMetrics"][0]["Dimensions"]
        if set(keys) == {*dims, "service"} and all(d[k] == v for k, v in dims.items()):
            found.append({m["Name"]: d[m["Name"]] for m in d["_aws"]["CloudWatchMetrics"][0]["Metrics"]})
    assert len(found) <= 1, (dims, found)
    if not found:
        return None
    return {k: (v[0] if isinstance(v, list) else v) for k, v in found[0].items()}


def produce(api, key, messages, topic=T):
    s, b = api.call("POST", path(topic), {"producer": "feed", "messages": messages}, key=key)
    assert s == 200, b


def test_gauges_per_group_topic_subscription_and_totals(api, setup, clock, capsys, monkeypatch):
    t0 = clock.t
    produce(api, setup["feed"], [{"body": f"b{i}", "key": "k"} for i in range(5)])
    produce(api, setup["feed"], [{"body": "later", "key": "k", "delay_ms": 60_000}])
    clock.t = t0 + 7_000
    s, b = api.call("GET", path(T), query={"group": "risk", "max": 2}, key=setup["risk"])
    assert s == 200 and len(b["messages"]) == 2
    s, sub = api.call("POST", "/v1/subscriptions", {"topic": T, "subscriber": "risk"}, key=setup["risk"])
    assert s == 201, sub
    stats, docs = publish(capsys)
    assert stats["truncated"] is False and stats["rows"] == stats["of"] >= 2
    g = row(docs, Topic=T, Group="risk")
    assert g == {M.VISIBLE: 3, M.NOT_VISIBLE: 2, M.BACKLOG: 5, M.AGE: 7_000, M.DEAD_LETTERED: 0}
    assert row(docs, Topic=T) == {M.DELAYED: 1}
    assert row(docs, Subscriber="risk", Topic=T) is None  # active (the default): only rows with a backlog
    assert row(docs, Topic="quotes/sh", Group="risk") is None and row(docs, Topic="quotes/sh") is None
    total = row(docs)
    assert total[M.BACKLOG] == 5 and total[M.NOT_VISIBLE] == 2 and total[M.AGE] == 7_000
    assert total[M.DELAYED] == 1 and total[M.PUBLISHER_TRUNCATED] == 0
    # every document's timestamp is the run's minute, its namespace the stack's
    assert {d["_aws"]["Timestamp"] for d in docs} == {clock.t}
    assert {d["_aws"]["CloudWatchMetrics"][0]["Namespace"] for d in docs} == {"lakeq/lakeq-local"}
    assert {d["service"] for d in docs} == {"lakeq-local"}
    # all: every row, idle ones too; totals: the totals only, the same figures
    monkeypatch.setenv("LAKEQ_METRICS_DETAIL", "all")
    _, docs = publish(capsys)
    assert row(docs, Subscriber="risk", Topic=T)[M.BACKLOG] == 0 and row(docs, Topic="quotes/sh") == {M.DELAYED: 0}
    assert row(docs, Topic="quotes/sh", Group="risk")[M.BACKLOG] == 0 and row(docs) == total
    monkeypatch.setenv("LAKEQ_METRICS_DETAIL", "totals")
    _, docs = publish(capsys)
    assert len(docs) == 1 and row(docs) == total


def test_dead_lettered_moves_and_the_age_is_of_the_oldest(api, setup, dlq, clock, capsys, monkeypatch):
    from tests.integration.test_settlement import patch
    monkeypatch.setenv("LAKEQ_METRICS_DETAIL", "all")
    assert patch(api, "risk", {"dead_letter_topic": "dlq"})[0] == 200
    produce(api, setup["feed"], [{"body": "poison", "key": "k"}])
    _, docs = publish(capsys)
    assert row(docs, Topic=T, Group="risk")[M.DEAD_LETTERED] == 0
    s, b = api.call("GET", path(T), query={"group": "risk"}, key=setup["risk"])
    s, out = api.call("POST", "/v1/acks", {"group": "risk", "receipt": b["receipt"], "reject": [0]},
                      key=setup["risk"])
    assert s == 200, out
    clock.t += 60_000
    _, docs = publish(capsys)
    assert row(docs, Topic=T, Group="risk")[M.DEAD_LETTERED] == 1
    assert row(docs, Topic=T, Group="risk")[M.BACKLOG] == 0
    # the copy waits in the dead-letter topic for its group: a backlog there, as old as the copy
    assert row(docs, Topic="dlq", Group="ops")[M.BACKLOG] == 1
    assert row(docs)[M.DEAD_LETTERED] == 1


def test_over_the_cap_pages_rotate_by_minute_and_totals_are_withheld(api, setup, clock, capsys, monkeypatch):
    for i in range(3):
        assert api.call("POST", "/v1/topics", {"name": f"quotes/p{i}", "queues": 1})[0] == 201
    monkeypatch.setattr(gauges, "MAX_ROWS", 2)
    monkeypatch.setattr(gauges.compute, "__defaults__", (None, None, 2, "active"))
    monkeypatch.setenv("LAKEQ_METRICS_DETAIL", "all")
    seen = set()
    for minute in range(3):
        clock.t = (clock.t // 60_000 + 1) * 60_000
        stats, docs = publish(capsys)
        assert stats["truncated"] is True and stats["rows"] <= 2
        total = row(docs)
        # paging alone is no truncation (every row is read in its turn); the totals are withheld
        assert total[M.PUBLISHER_TRUNCATED] == 0 and M.BACKLOG not in total
        seen |= {d["Topic"] for d in docs if "Group" in d}
    # quotes, quotes/sh, quotes/p0..p2 (risk is granted quotes and its children): 5 rows, 3 pages
    assert seen == {T, "quotes/sh", "quotes/p0", "quotes/p1", "quotes/p2"}


@pytest.mark.parametrize("field", ["Topic", "Group"])
def test_a_row_without_its_dimension_fails_validation(field):
    doc = {"_aws": {"Timestamp": 1, "CloudWatchMetrics": [{"Namespace": "lakeq", "Dimensions": [["Topic", "Group"]],
                                                           "Metrics": [{"Name": "X", "Unit": "Count"}]}]},
           "Topic": "t", "Group": "g", "X": [1.0]}
    assert problems(doc) == []
    del doc[field]
    assert problems(doc)


def test_the_metrics_function_only_reads(template):
    """Least privilege (checked in every call above by aws_rules): Scan, BatchGetItem and Query on
    the tables it reads, nothing that writes a table, no cloudwatch:PutMetricData (EMF goes via the
    log); S3 only for its own state, under ops/metrics/."""
    fn = template["Resources"]["MetricsFunction"]["Properties"]
    actions = {a for pol in fn["Policies"] for st in pol["Statement"] for a in st["Action"]}
    assert actions == {"dynamodb:Scan", "dynamodb:BatchGetItem", "dynamodb:Query", "s3:GetObject", "s3:PutObject"}
    s3 = [st for pol in fn["Policies"] for st in pol["Statement"] if st["Action"][0].startswith("s3:")]
    assert [st["Resource"] for st in s3] == [{"Fn::Sub": "${LakeBucket.Arn}/ops/metrics/*"}]
    assert fn["Events"]["Publish"]["Type"] == "Schedule"
    assert fn["Events"]["Publish"]["Properties"]["Schedule"] == "rate(1 minute)"


def counted(text: str) -> dict[str, float]:
    """Each metric's sum over the EMF documents printed (the functions' per-invocation flushes)."""
    out: dict[str, float] = {}
    for d in documents(text):
        assert problems(d) == [], d
        for m in d["_aws"]["CloudWatchMetrics"][0]["Metrics"]:
            v = d[m["Name"]]
            out[m["Name"]] = out.get(m["Name"], 0) + sum(v if isinstance(v, list) else [v])
    return out


def test_request_paths_count_sent_received_and_settled(api, setup, clock, capsys):
    capsys.readouterr()
    produce(api, setup["feed"], [{"body": f"b{i}", "key": "k"} for i in range(4)])
    s, b = api.call("GET", path(T), query={"group": "risk", "max": 10}, key=setup["risk"])
    assert s == 200 and len(b["messages"]) == 4
    offs = [m["offset"] for m in b["messages"]]
    s, out = api.call("POST", "/v1/acks", {"group": "risk", "receipt": b["receipt"], "accept": offs[:2],
                                           "release": [offs[2]], "reject": [offs[3]]}, key=setup["risk"])
    assert s == 200, out
    # a batch ack: one good entry (whole batch), one stale (its error is not counted)
    s, b2 = api.call("GET", path(T), query={"group": "risk", "max": 10}, key=setup["risk"])
    assert s == 200 and [m["offset"] for m in b2["messages"]] == [offs[2]]  # the released one
    s, out = api.call("POST", "/v1/acks", {"group": "risk", "acks": [{"receipt": b2["receipt"]},
                                                                     {"receipt": b["receipt"]}]}, key=setup["risk"])
    assert s == 200 and "error" in out["results"][1], out
    c = counted(capsys.readouterr().out)
    assert c[M.SENT] == 4 and c[M.RECEIVED] == 4 + len(b2["messages"])
    assert c[M.ACKS] == 2 and c[M.ACCEPTED] == 2 and c[M.RELEASED] == 1 and c[M.REJECTED] == 1


def counted_by(text: str) -> dict[tuple, float]:
    """Each (dimension set without ``service``, metric) sum over the EMF documents printed: a
    document with two dimension sets counts its values once under each."""
    out: dict[tuple, float] = {}
    for d in documents(text):
        assert problems(d) == [], d
        directive = d["_aws"]["CloudWatchMetrics"][0]
        for keys in directive["Dimensions"]:
            dims = tuple((k, d[k]) for k in keys if k != "service")
            for m in directive["Metrics"]:
                v = d[m["Name"]]
                out[dims, m["Name"]] = out.get((dims, m["Name"]), 0) + sum(v if isinstance(v, list) else [v])
    return out


def test_request_counters_per_topic_group_and_subscription(api, setup, clock, capsys):
    """Issue 34 item 1: the request paths' rates per row as well — sent per ``Topic``, received and
    settled per ``Topic`` + ``Group``, a subscription's per ``Subscription`` — each row's figures its
    own (a batch ack across two topics: one document a row), the deployment's (service only) the sum;
    an empty pull or a failed ack adds no row."""
    s, sub = api.call("POST", "/v1/subscriptions", {"topic": T, "subscriber": "risk"}, key=setup["risk"])
    assert s == 201, sub
    produce(api, setup["feed"], [{"body": f"b{i}", "key": "k"} for i in range(3)])
    produce(api, setup["feed"], [{"body": "sh", "key": "k"}], topic=f"{T}/sh")
    capsys.readouterr()
    s, a = api.call("GET", path(T), query={"group": "risk", "max": 10}, key=setup["risk"])
    assert s == 200 and len(a["messages"]) == 3, a
    s, e = api.call("GET", path(T), query={"group": "risk", "max": 10}, key=setup["risk"])
    assert s == 200 and e["messages"] == [], e  # the key's queue is locked: an empty pull
    s, b = api.call("GET", path(f"{T}/sh"), query={"group": "risk", "max": 10}, key=setup["risk"])
    assert s == 200 and len(b["messages"]) == 1, b
    produce(api, setup["feed"], [{"body": "x", "key": "k"}])
    n = len(a["messages"])
    offs = [m["offset"] for m in a["messages"]]
    s, out = api.call("POST", "/v1/acks", {"group": "risk", "acks": [
        {"receipt": a["receipt"], "accept": offs[:1], "reject": offs[1:2]}, {"receipt": b["receipt"]},
        {"receipt": "b:quotes@9:0:1:1"}]}, key=setup["risk"])
    assert s == 200 and "error" in out["results"][2], out
    c = counted_by(capsys.readouterr().out)
    qg, sg = (("Topic", T), ("Group", "risk")), (("Topic", f"{T}/sh"), ("Group", "risk"))
    assert c[(("Topic", T),), M.SENT] == 1 and ((("Topic", f"{T}/sh"),), M.SENT) not in c  # produced before
    assert c[qg, M.RECEIVED] == n == 3 and c[sg, M.RECEIVED] == 1
    assert c[qg, M.ACKS] == 1 and c[qg, M.ACCEPTED] == 1 and c[qg, M.REJECTED] == 1 and (qg, M.RELEASED) not in c
    assert c[sg, M.ACKS] == 1 and (sg, M.ACCEPTED) not in c
    assert c[(), M.ACKS] == 2 and c[(), M.RECEIVED] == 4 and c[(), M.SENT] == 1
    assert {dims for dims, _ in c} == {(), (("Topic", T),), qg, sg}


def test_the_sqs_endpoint_counts_sends_receives_and_deletes(api, capsys, monkeypatch):
    from lakeq.sqs import handler as sqs_service
    from tests.integration.sqs_harness import Harness, fake_auth
    monkeypatch.setattr(sqs_service, "authenticate_request", fake_auth)
    sqs = Harness().client("admin")
    url = sqs.create_queue(QueueName="jobs")["QueueUrl"]
    capsys.readouterr()
    sqs.send_message(QueueUrl=url, MessageBody="a")
    sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": "1", "MessageBody": "b"}, {"Id": "2", "MessageBody": "c"}])
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    sqs.delete_message(QueueUrl=url, ReceiptHandle=got[0]["ReceiptHandle"])
    sqs.delete_message_batch(QueueUrl=url, Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
                                                    for i, m in enumerate(got[1:])])
    text = capsys.readouterr().out
    c = counted(text)
    assert c[M.SENT] == 3 and c[M.RECEIVED] == len(got) == 3 and c[M.ACKS] == 3
    by = counted_by(text)  # and per queue (its topic), as SQS publishes per queue
    assert {k: v for k, v in by.items() if k[0]} == {
        ((("Topic", "jobs"),), M.SENT): 3, ((("Topic", "jobs"),), M.RECEIVED): 3, ((("Topic", "jobs"),), M.ACKS): 3}


class Budget:
    """A fake clock for the run's deadline: each read of it is one ms later (a run's budget of ``k``
    ms covers ``k`` rows: the deadline is checked once before each row)."""

    def __init__(self):
        self.t = 0

    def now(self) -> int:
        self.t += 1
        return self.t


def test_a_run_cut_by_its_deadline_does_not_starve_the_rows_late_in_its_page(api, setup, clock, monkeypatch):
    """Review of issue 34, item 1: a run that hits its deadline used to start the same page from its
    first row the next minute, so the page's later rows were never published. The starting row
    rotates by the minute: in as many minutes as the page has rows, every row is computed."""
    for i in range(3):
        assert api.call("POST", "/v1/topics", {"name": f"quotes/p{i}", "queues": 1})[0] == 201
    seen: set[str] = set()
    minute0 = clock.t // 60_000 + 1
    for m in range(5):  # 5 rows (quotes, quotes/sh, quotes/p0..p2 by risk), one page
        budget = Budget()
        monkeypatch.setattr(gauges, "_clock", budget)
        out = gauges.compute(now=(minute0 + m) * 60_000, deadline=2, detail="all")
        assert out.truncated and out.published == 1 and out.total_rows == 5
        assert M.BACKLOG not in out.rows[-1][1]  # a partial run prints no totals
        seen |= {d["Topic"] for d, _ in out.rows if "Group" in d}
    assert seen == {T, "quotes/sh", "quotes/p0", "quotes/p1", "quotes/p2"}


def test_a_broadcasting_consumers_subscription_is_measured(api, setup, clock, capsys, monkeypatch):
    """Review of issue 34, item 2: a subscription's list is one consumer's whatever the client's
    mode; a broadcasting client's subscriptions were left out of the rows."""
    s, b = api.call("POST", "/v1/clients", {"name": "fans", "role": "consumer", "topics": ["quotes"],
                                            "mode": "broadcasting"})
    assert s == 201, b
    s, sub = api.call("POST", "/v1/subscriptions", {"topic": T, "subscriber": "fans"}, key=b["api_key"])
    assert s == 201, sub
    monkeypatch.setenv("LAKEQ_METRICS_DETAIL", "all")
    _, docs = publish(capsys)
    assert row(docs, Subscriber="fans", Topic=T) is not None
    assert row(docs, Topic=T, Group="fans") is None  # a broadcasting group's offsets are per instance


def metrics_calls(capsys) -> list:
    from tests.crash import CountCalls
    with CountCalls({"MetricsFunction"}) as c:
        publish(capsys)
    return c.calls


def test_a_run_over_idle_topics_reads_no_segment_and_scans_eventually(api, setup, clock, capsys):
    """Review of issue 34, item 3: the run read each queue's newest segment (the exact head: one
    Query a queue a minute, up to ~44 RRU for a big segment) and scanned the subscriptions
    strongly. It reads the queue items' ``max_offset`` (the head mover keeps it within seconds), so
    an idle topic costs its queue items and its groups' offsets only."""
    s, sub = api.call("POST", "/v1/subscriptions", {"topic": T, "subscriber": "risk"}, key=setup["risk"])
    assert s == 201, sub
    produce(api, setup["feed"], [{"body": "b", "key": "k"}])
    s, b = api.call("GET", path(T), query={"group": "risk"}, key=setup["risk"])
    assert api.call("POST", "/v1/acks", {"group": "risk", "receipt": b["receipt"], "accept": [0]},
                    key=setup["risk"])[0] == 200  # quotes has a segment, nothing left to read
    got = sorted((x.operation, (x.params.get("TableName") or ",".join(x.params.get("RequestItems") or {}))
                  .rsplit("-", 1)[-1]) for x in metrics_calls(capsys))
    # topics, clients, subscriptions; per topic (quotes, quotes/sh, the subscription's list) its
    # queue items; per row (2 pairs, 1 subscription) its offsets
    # and its state: read (none yet: the call fails, uncounted) and written, one object
    assert got == sorted([("Scan", "topics"), ("Scan", "clients"), ("Scan", "subscriptions")]
                         + [("BatchGetItem", "queues")] * 3 + [("Query", "offsets")] * 3 + [("PutObject", "")]), got
    again = metrics_calls(capsys)
    assert not any(x.params.get("ConsistentRead") for x in again if x.operation == "Scan")
    assert sorted(x.operation for x in again if x.service == "s3") == ["GetObject", "PutObject"]


SECRET_ATTRIBUTES = {"push", "push_secrets", "push_state", "push_leases", "key_hash", "key_map", "sqs_keys",
                     "conditions", "push_url", "headers"}


def test_the_publishers_scans_return_no_secret(api, setup, clock, capsys):
    """Review of issue 34, item 4: the metrics role scanned whole client and subscription items, every
    tenant's push secrets, URLs, headers and key hashes with them. Its Scans name the attributes it
    needs (ProjectionExpression): no item it reads holds a secret."""
    s, sub = api.call("POST", "/v1/subscriptions", {"topic": T, "subscriber": "risk"}, key=setup["risk"])
    assert s == 201, sub
    from tests.crash import CountCalls

    class Items(CountCalls):
        def after(self, call, response):
            if self._counts(call) and call.operation == "Scan":
                self.calls.append((call, response.get("Items") or []))
            return response

    with Items({"MetricsFunction"}) as c:
        publish(capsys)
    scanned = {call.params["TableName"].rsplit("-", 1)[-1]: items for call, items in c.calls}
    assert scanned["clients"] and scanned["subscriptions"]  # the premise: there are items to read
    for table in ("clients", "subscriptions"):
        for item in scanned[table]:
            assert not SECRET_ATTRIBUTES & set(item), (table, sorted(item))
    assert all(set(i) <= {"name", "role", "mode", "topics", "alarms_muted"} for i in scanned["clients"])
    assert all(set(i) <= {"id", "subscriber", "topic"} for i in scanned["subscriptions"])


def test_an_offset_named_twice_in_an_ack_is_counted_once(api, setup, clock, capsys):
    """Review of issue 34, item 5: the counters counted the request's lists as sent; an offset
    repeated in a list settles once (the validation drops the repeats) and counts once."""
    produce(api, setup["feed"], [{"body": "b", "key": "k"}])
    s, b = api.call("GET", path(T), query={"group": "risk"}, key=setup["risk"])
    off = b["messages"][0]["offset"]
    capsys.readouterr()
    s, out = api.call("POST", "/v1/acks", {"group": "risk", "receipt": b["receipt"], "reject": [off] * 100},
                      key=setup["risk"])
    assert s == 200, out
    c = counted(capsys.readouterr().out)
    assert c[M.ACKS] == 1 and c[M.REJECTED] == 1


# --- review of issue 34: the alarms see every run, and a tenant's stale rows can be left out ------------
def printed_names(docs: list[dict]) -> set[str]:
    return {m["Name"] for d in docs for m in d["_aws"]["CloudWatchMetrics"][0]["Metrics"]}


def test_a_paged_run_publishes_what_the_alarms_watch_over_every_row(api, setup, clock, capsys, monkeypatch,
                                                                    template):
    """Item 1b, then the reviews of issue 34: past the row cap each run reads part of the rows. The
    age alarm watched the oldest over the run's page only (past 5 pages it flapped) and the backlog
    alarm a sum complete runs alone printed (no data past 500 rows). Both figures now come from every
    row as last read (the function's state), and the run reads the rows read longest ago first:
    once the quotes row has been read, every run's ``AlarmedAgeOfOldestMessage`` holds its age; while
    its backlog grows at each read (two reads at least), ``AlarmedBacklogGrowingMinutes`` counts the
    minutes since it began."""
    from tests.unit.test_metric_names import watched
    alarms = watched(template)
    assert alarms["OldestMessageAgeAlarm"] == [M.ALARMED_AGE]
    assert alarms["BacklogGrowingAlarm"] == [M.ALARMED_GROWING]
    assert alarms["DeadLetteredAlarm"] == [M.ALARMED_DEAD_LETTERS]  # counted where it happens: below
    for i in range(3):
        assert api.call("POST", "/v1/topics", {"name": f"quotes/p{i}", "queues": 1})[0] == 201
    produce(api, setup["feed"], [{"body": "old", "key": "k", "id": "old-1"}])  # with an id: the head moves now
    monkeypatch.setattr(gauges.compute, "__defaults__", (None, None, 2, "active"))
    t0, reads, growing = clock.t, [], []
    for minute in range(1, 13):  # 5 rows, 2 a run: each read every 2-3 minutes
        clock.t = (t0 // 60_000 + minute) * 60_000
        if minute <= 8:  # one more message a minute, then none
            produce(api, setup["feed"], [{"body": f"m{minute}", "key": "k", "id": f"m-{minute}"}])
        stats, docs = publish(capsys)
        total = row(docs)
        assert stats["truncated"] is True and total[M.PUBLISHER_TRUNCATED] == 0 and stats["state_saved"] is True
        assert set(alarms["OldestMessageAgeAlarm"]) <= printed_names(docs)  # every run
        g = row(docs, Topic=T, Group="risk")
        if g is not None:
            reads.append(minute)
        assert total[M.ALARMED_AGE] == ((clock.t - t0) if reads else 0)  # read once: held every run
        growing.append(total[M.ALARMED_GROWING])
    gaps = [b - a for a, b in zip(reads, reads[1:])]
    assert len(reads) >= 4 and set(gaps) <= {2, 3}, reads  # least recently read first: no row waits long
    # growing since its first read (its backlog larger at each read) once two reads found it larger,
    # for as long as messages come
    during = [growing[m - 1] for m in reads if m <= 8]
    assert during[:2] == [0, 0] and during[2:] == [m - reads[0] for m in reads[2:len(during)]], (reads, growing)
    after = [growing[m - 1] for m in reads if m > 9]
    assert after and after[-1] == 0, (reads, growing)  # read again with nothing new: no longer growing
    monkeypatch.setattr(gauges.compute, "__defaults__", (None, None, 500, "active"))
    _, docs = publish(capsys)
    assert {M.ALARMED_AGE, M.ALARMED_GROWING, M.BACKLOG} <= set(row(docs))


def test_a_key_toggling_its_subscription_moves_no_other_row_out_of_its_turn(api, setup, clock, capsys,
                                                                             monkeypatch):
    """Second review of issue 34: pages were cut by position, so a key that creates a subscription
    on even minutes and deletes it on odd ones moved every later row across a page boundary in step
    with the minute: another client's row was read in 0 of 14 runs. Rows are now read by when they
    were last read (the state), not by position."""
    s, other = api.call("POST", "/v1/subscriptions", {"topic": T, "subscriber": "risk"}, key=setup["risk"])
    assert s == 201, other
    monkeypatch.setattr(gauges.compute, "__defaults__", (None, None, 1, "all"))
    monkeypatch.setenv("LAKEQ_METRICS_DETAIL", "all")  # every row read is printed, a backlog or not
    read, sub = 0, None
    for minute in range(1, 13):
        clock.t = (clock.t // 60_000 + 1) * 60_000
        if sub is None:
            s, sub = api.call("POST", "/v1/subscriptions", {"topic": "quotes/sh", "subscriber": "risk"},
                              key=setup["risk"])
            assert s == 201, sub
        else:
            assert api.call("DELETE", f"/v1/subscriptions/{sub['id']}", key=setup["risk"])[0] == 204
            sub = None
        docs = publish(capsys)[1]
        read += row(docs, Subscriber="risk", Topic=T) is not None
    # 1 row a run: the toggled subscription (new each time: never read) takes every other run, the
    # two pairs and this one share the rest — each read twice in 12 runs (by position: never)
    assert read >= 2, read


def test_a_muted_clients_rows_are_published_but_left_out_of_the_alarms(api, setup, clock, capsys):
    """Item 3: one tenant's stale group (nobody consumes it any more, an old backlog) held the shared
    age and backlog alarms in ALARM for everyone. The admin can leave a consumer out of the alarms
    (``PATCH /v1/clients/{name}`` ``{"alarms": false}``): its rows are still published (and in the
    totals), but not in the ``Alarmed*`` figures the alarms watch; ``{"alarms": true}`` puts it back."""
    from tests.integration.test_settlement import patch
    s, stale = api.call("POST", "/v1/clients", {"name": "stale", "role": "consumer", "topics": ["quotes"]})
    assert s == 201, stale
    s, sub = api.call("POST", "/v1/subscriptions", {"topic": T, "subscriber": "stale"}, key=stale["api_key"])
    assert s == 201, sub
    t0 = clock.t
    produce(api, setup["feed"], [{"body": "old", "key": "k", "id": "old-1"}])  # with an id: the head moves now
    clock.t = t0 + 600_000
    s, b = api.call("GET", path(T), query={"group": "risk"}, key=setup["risk"])
    assert api.call("POST", "/v1/acks", {"group": "risk", "receipt": b["receipt"]}, key=setup["risk"])[0] == 200
    _, docs = publish(capsys)
    assert row(docs, Topic=T, Group="stale")[M.AGE] == 600_000
    assert row(docs)[M.ALARMED_AGE] == 600_000

    s, view = patch(api, "stale", {"alarms": False})
    assert s == 200 and view["alarms"] is False, view
    _, docs = publish(capsys)
    assert row(docs, Topic=T, Group="stale")[M.AGE] == 600_000  # still published as a row
    total = row(docs)
    assert total[M.AGE] == 600_000 and total[M.BACKLOG] == 1  # and in the totals
    assert total[M.ALARMED_AGE] == 0

    s, view = patch(api, "stale", {"alarms": True})
    assert s == 200 and "alarms" not in view, view
    _, docs = publish(capsys)
    assert row(docs)[M.ALARMED_AGE] == 600_000
    # admin only, consumers only, a boolean
    assert patch(api, "stale", {"alarms": False}, key=stale["api_key"])[0] == 403
    assert patch(api, "feed", {"alarms": False})[0] == 400
    assert patch(api, "stale", {"alarms": "no"})[0] == 400 and patch(api, "stale", {"alarms": None})[0] == 400
    assert "alarms" not in api.call("GET", "/v1/clients")[1]["clients"][-1]


def test_dead_letters_are_counted_where_they_happen_for_the_alarm(api, setup, clock, capsys, template):
    """Review of issue 34: the dead-letter alarm watched a sum only a complete metrics run printed,
    so past 500 rows (every run truncated) it never fired. It now watches
    ``AlarmedMessagesDeadLettered``, counted by the settlement that dead-letters (a pull's upkeep
    here), whatever the metrics function reads; a client left out of the alarms counts nothing."""
    from tests.integration.test_settlement import patch
    from tests.unit.test_metric_names import watched
    assert watched(template)["DeadLetteredAlarm"] == [M.ALARMED_DEAD_LETTERS]
    assert patch(api, "risk", {"max_deliveries": 1})[0] == 200

    def poison(body: str) -> dict[str, float]:
        produce(api, setup["feed"], [{"body": body, "key": "k"}])
        s, b = api.call("GET", path(T), query={"group": "risk"}, key=setup["risk"])
        assert s == 200 and [m["body"] for m in b["messages"]] == [body], b
        clock.t += 1_001  # risk's visibility: the lock ends unsettled, the message is due
        capsys.readouterr()
        s, b = api.call("GET", path(T), query={"group": "risk"}, key=setup["risk"])
        assert s == 200 and b["messages"] == [], b
        s, o = api.call("GET", "/v1/groups/risk/offsets", query={"topic": T}, key=setup["risk"])
        assert s == 200 and sum(q["dead_lettered"] for q in o["queues"]) >= 1, o
        return counted(capsys.readouterr().out)

    assert poison("p1").get(M.ALARMED_DEAD_LETTERS) == 1
    assert patch(api, "risk", {"alarms": False})[0] == 200
    assert M.ALARMED_DEAD_LETTERS not in poison("p2")


def test_overlapping_runs_do_not_overwrite_each_others_state(api, setup, clock, capsys):
    """The state is written only if the object is still the one the run read (S3 conditional put):
    of two runs that overlap, the later writer's save answers False and changes nothing."""
    import boto3

    from lakeq.store.metrics import STATE_KEY, MetricsStateRepo
    assert MetricsStateRepo.load() == (None, None)
    assert MetricsStateRepo.put({"v": 1, "rows": {}, "run": "a"}, None) is True
    assert MetricsStateRepo.put({"v": 1, "rows": {}, "run": "b"}, None) is False  # a wrote it first
    got, etag = MetricsStateRepo.load()
    assert got["run"] == "a"
    assert MetricsStateRepo.put({"v": 1, "rows": {}, "run": "c"}, etag) is True
    assert MetricsStateRepo.put({"v": 1, "rows": {}, "run": "d"}, etag) is False  # c wrote it since
    assert MetricsStateRepo.load()[0]["run"] == "c"
    # an object that is not the function's (not JSON): the run starts afresh and replaces it
    import os
    boto3.client("s3").put_object(Bucket=os.environ["LAKE_BUCKET"], Key=STATE_KEY, Body=b"\xff not json")
    stats, docs = publish(capsys)
    assert stats["state_saved"] is True and row(docs)[M.ALARMED_GROWING] == 0
    assert MetricsStateRepo.load()[0]["v"] == gauges.STATE_VERSION
    clock.t += 60_000
    stats, docs = publish(capsys)
    assert row(docs)[M.ALARMED_GROWING] == 0
