"""Review 34c (adversarial) of 2c811d8, the metrics function's alarm figures: dead-letter topics left
out of them, ReservedConcurrentExecutions. Each strict xfail fails on the code it was written against."""
from __future__ import annotations

import pytest

from lakeq.common import metric_names as M
from lakeq.console import gauges
from tests.history import path
from tests.integration.test_metrics import produce
from tests.integration.test_review34b import alarmed_ages, dead_letter_one
from tests.integration.test_settlement import patch

T = "quotes"


@pytest.mark.moto  # reads DynamoDB Streams
@pytest.mark.xfail(strict=True, reason="review34c: dead-letter topics are left out of the alarms by exact name, "
                   "but a subscription to a topic covers its children: a muted client's dead letters (its "
                   "dead_letter_topic dlq/risk) page through an unmuted subscription to dlq")
def test_a_muted_clients_dead_letters_do_not_page_through_a_subscription_to_the_parent_topic(
        api, setup, dlq, clock, aws, fanout_handler):
    from tests.handlers import Context, segment_records
    assert api.call("POST", "/v1/topics", {"name": "dlq/risk", "queues": 1})[0] == 201
    assert patch(api, "risk", {"dead_letter_topic": "dlq/risk"})[0] == 200
    assert patch(api, "risk", {"alarms": False})[0] == 200
    s, sub = api.call("POST", "/v1/subscriptions", {"topic": "dlq", "subscriber": "ops"}, key=dlq)
    assert s == 201, sub  # ops reads every dead-letter topic under dlq
    dead_letter_one(api, setup)
    assert fanout_handler({"Records": segment_records(aws)}, Context()) == {"batchItemFailures": []}
    ages = alarmed_ages(clock, {"Subscriber": "ops", "Topic": "dlq"})  # the copy reached the subscription
    # the same copy read by ops' group on dlq/risk is left out (test_review34b); through the subscription it pages
    assert ages[10] < 300_000, ages  # OldestMessageAgeThresholdMs' default


def test_a_revoked_subscription_dead_letter_setting_does_not_keep_a_topic_out_of_the_alarms(api, setup, dlq, clock):
    """Review 34c: a subscription's dead_letter_topic its subscriber's key named kept the topic out of the
    alarms after the admin cleared the client's setting (its dead letters are then dropped): the tenant,
    not the admin, decided that ops' stuck group on dlq never paged (age 0 for a 10-minute stuck message)."""
    _stuck_on_dlq_after_a_revoked_setting(api, setup, clock, subscribe=True)


def test_control_without_the_subscription_the_stuck_message_pages(api, setup, dlq, clock):
    _stuck_on_dlq_after_a_revoked_setting(api, setup, clock, subscribe=False)


def test_a_subscription_dead_letter_topic_the_admin_named_stays_out_of_the_alarms(api, setup, dlq, clock):
    ages = _stuck_on_dlq_after_a_revoked_setting(api, setup, clock, subscribe=True, by_admin=True, check=False)
    assert ages == 0  # the admin's choice: dlq receives the subscription's dead letters whatever risk's setting


def _stuck_on_dlq_after_a_revoked_setting(api, setup, clock, subscribe: bool, by_admin: bool = False,
                                          check: bool = True) -> int:
    assert patch(api, "risk", {"dead_letter_topic": "dlq"})[0] == 200
    if subscribe:
        s, sub = api.call("POST", "/v1/subscriptions", {"topic": T, "subscriber": "risk", "dead_letter_topic": "dlq"},
                          **({} if by_admin else {"key": setup["risk"]}))
        assert s == 201, sub  # the key may: its client's setting names dlq
    assert patch(api, "risk", {"dead_letter_topic": None})[0] == 200  # the admin revokes it
    s, c = api.call("POST", "/v1/clients", {"name": "ingest", "role": "producer", "topics": ["dlq"]})
    assert s == 201, c
    t0 = clock.t
    msg = {"body": "work", "key": "k", "id": "w-1"}
    s, b = api.call("POST", path("dlq"), {"producer": "ingest", "messages": [msg]}, key=c["api_key"])
    assert s == 200, b  # dlq: now a topic like any
    clock.t = t0 + 10 * 60_000
    out = gauges.run(now=clock.t, detail="all")
    assert [v[M.BACKLOG] for d, v in out.rows if d == {"Topic": "dlq", "Group": "ops"}] == [1]
    if check:
        assert out.rows[-1][1][M.ALARMED_AGE] >= 600_000, out.rows[-1]  # ops' message, 10 minutes stuck
    return out.rows[-1][1][M.ALARMED_AGE]


def test_the_metrics_functions_reserved_concurrency_is_optional_or_documented(template):
    import pathlib
    fn = template["Resources"]["MetricsFunction"]["Properties"]
    rc = fn.get("ReservedConcurrentExecutions")
    docs = " ".join(p.read_text() for p in pathlib.Path("docs").glob("*.md"))
    assert not isinstance(rc, int) or "UnreservedConcurrentExecution" in docs or "concurrency quota" in docs, rc


def test_the_throttles_alarm_does_not_page_for_the_metrics_functions_designed_throttles(template):
    expr = template["Resources"]["FunctionThrottlesAlarm"]["Properties"]["Metrics"][0]["Expression"]
    rc = template["Resources"]["MetricsFunction"]["Properties"].get("ReservedConcurrentExecutions")
    assert rc is None or "MetricsFunction" not in str(expr), expr



def _churn_run(api, setup, clock, monkeypatch, churn: bool) -> tuple[list, list]:
    """``max_rows`` 3 stands for MAX_ROWS 500 (a key's unit: 3 of 3 here, 100 of 500 there: five keys).
    mallory holds a unit of 3 subscriptions to quotes; with ``churn`` it deletes one and creates one each
    minute (2 calls). A message for risk arrives at minute 3 and is never pulled."""
    s, c = api.call("POST", "/v1/clients", {"name": "mallory", "role": "consumer", "topics": ["quotes/sh"]})
    assert s == 201, c
    key = c["api_key"]
    subs = []
    for _ in range(3):
        s, sub = api.call("POST", "/v1/subscriptions", {"topic": "quotes/sh", "subscriber": "mallory"}, key=key)
        assert s == 201, sub
        subs.append(sub["id"])
    monkeypatch.setattr(gauges.compute, "__defaults__", (None, None, 3, "all"))
    t0 = clock.t
    ages, truncated = [], []
    for m in range(1, 16):
        clock.t = (t0 // 60_000 + m) * 60_000
        if m == 3:
            produce(api, setup["feed"], [{"body": "stuck", "key": "k", "id": "late-1"}])
        if churn and m > 1:
            assert api.call("DELETE", f"/v1/subscriptions/{subs.pop(0)}", key=key)[0] == 204
            s, sub = api.call("POST", "/v1/subscriptions", {"topic": "quotes/sh", "subscriber": "mallory"}, key=key)
            assert s == 201, sub
            subs.append(sub["id"])
        out = gauges.run(now=clock.t)
        ages.append(out.rows[-1][1][M.ALARMED_AGE])
        truncated.append(out.rows[-1][1][M.PUBLISHER_TRUNCATED])
    return ages, truncated


def test_control_without_churn_a_message_stuck_later_is_seen(api, setup, clock, monkeypatch):
    ages, truncated = _churn_run(api, setup, clock, monkeypatch, churn=False)
    assert ages[-1] >= 10 * 60_000 and truncated == [0] * 15, (ages, truncated)


def test_a_key_churning_one_subscription_a_minute_does_not_starve_other_rows(api, setup, clock, monkeypatch):
    ages, truncated = _churn_run(api, setup, clock, monkeypatch, churn=True)
    assert ages[-1] >= 10 * 60_000 or any(truncated), (ages, truncated)
