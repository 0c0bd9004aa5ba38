"""The backlog console (``GET /console``) in a real browser: Playwright (sync API) drives Debian's
Chromium (``/usr/bin/chromium``; ``make chromium`` installs it, Playwright downloads nothing)
against the local stack.

The operator pastes the admin key; produce / join / sync / pull / ack / subscribe go through the
API; the page must show exactly the numbers the JSON routes return (topic offsets, per-queue
backlog, lock holder, dead-lettered counts, members, generation and assignment, subscription list backlog, the lake
report in the chart), refresh by itself, and log no console error. Screenshots are kept in ``docs/screenshots/``
(committed, shown in docs/api.md's console section; :func:`screenshot`, used by every console test).
"""
from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import boto3
import pytest
import requests
from playwright.sync_api import expect

CHROMIUM = Path("/usr/bin/chromium")
# where the console's tests keep what they saw: docs/screenshots/ (committed, linked from docs/api.md)
# when LAKEQ_KEEP_SCREENSHOTS=1 (refresh them with `LAKEQ_KEEP_SCREENSHOTS=1 make e2e`), else
# tests/artifacts/ (git-ignored), so that a test run leaves the tree clean
ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / ("docs/screenshots" if os.environ.get("LAKEQ_KEEP_SCREENSHOTS") == "1" else "tests/artifacts")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
TOPIC, FEED, GROUP = "console.quotes", "console-feed", "console-risk"
T = 15  # HTTP timeout, s


def _h(key: str) -> dict:
    return {"Authorization": f"Bearer {key}"}


def _ok(r: requests.Response, status: int = 200) -> dict:
    assert r.status_code == status, (r.request.method, r.request.url, r.status_code, r.text)
    return r.json() if r.text else {}


@pytest.fixture(scope="module")
def stack(start_local_stack):
    """This module's own local stack, not the session's (console35). The admin's console shows every
    group and topic of the stack and refreshes every 5 s, each refresh ~4 requests a (group, topic)
    (docs/costs.md, "The console page"); on the session's stack after test_queue_e2e.py (its 21
    groups × 2 topics left behind) a refresh was ~240 requests, the first 19 s at load ~4.7 (6
    requests, 0.8 s on a stack of its own), so this module's waits (30 s, 20 s) passed or failed with
    the machine's load and with which test files ran before it in the process."""
    st = start_local_stack(admin_key=os.environ.get("LAKEQ_E2E_ADMIN_KEY", "e2e-admin-key"))
    yield st
    code = st.stop()
    assert code == 0, f"local stack exit code {code}\n{st.stderr[-3000:]}"


@pytest.fixture(scope="module")
def world(stack):
    """A topic (3 queues), a producer, a clustering group with one synced member holding a lock,
    a subscription with a delivered backlog, and a lake backlog report."""
    url, admin = stack.url, _h(stack.admin_key)
    # the stack is this module's alone: no other test's clients (what the page shows is this world)
    assert _ok(requests.get(f"{url}/v1/clients", headers=admin, timeout=T))["clients"] == []
    _ok(requests.post(f"{url}/v1/topics", json={"name": TOPIC, "queues": 3}, headers=admin, timeout=T), 201)
    feed = _ok(requests.post(f"{url}/v1/clients", json={"name": FEED, "role": "producer", "topics": [TOPIC]},
                             headers=admin, timeout=T), 201)["api_key"]
    gk = _ok(requests.post(f"{url}/v1/clients", json={"name": GROUP, "role": "consumer", "topics": [TOPIC],
                                                      "visibility_timeout_ms": 600_000},
                           headers=admin, timeout=T), 201)["api_key"]
    sub = _ok(requests.post(f"{url}/v1/subscriptions", json={
        "subscriber": GROUP, "topic": TOPIC, "conditions": [{"field": "type", "values": ["A"]}]},
        headers=_h(gk), timeout=T), 201)

    def produce(n: int, start: int) -> None:
        msgs = [{"id": f"c-{i}", "body": f"m{i}", "key": f"k{i % 5}", "properties": {"type": "A" if i % 2 else "B"}}
                for i in range(start, start + n)]
        _ok(requests.post(f"{url}/v1/topics/{TOPIC}/messages", json={"producer": FEED, "messages": msgs},
                          headers=_h(feed), timeout=T))

    produce(12, 0)
    # the longest session (300 s): the test reads m1 back as a member minutes later on a loaded machine, and
    # nothing here heartbeats (with the default 45 s a CI run at load 13 found the group empty: the fixture
    # alone took 58 s)
    m = _ok(requests.post(f"{url}/v1/groups/{GROUP}/members",
                          json={"member_id": "m1", "topics": [TOPIC], "session_timeout_ms": 300_000},
                          headers=_h(gk), timeout=T))
    _ok(requests.post(f"{url}/v1/groups/{GROUP}/members/m1/sync", json={"generation": m["generation"]},
                      headers=_h(gk), timeout=T))
    def pull() -> dict:
        return _ok(requests.get(f"{url}/v1/topics/{TOPIC}/messages",
                                params={"group": GROUP, "member_id": "m1", "max": 3}, headers=_h(gk), timeout=T))
    first = pull()
    assert first["messages"] and first["receipt"]
    offs = [x["offset"] for x in first["messages"]]  # reject one (no dead-letter topic: dropped and counted)
    _ok(requests.post(f"{url}/v1/acks", json={"group": GROUP, "receipt": first["receipt"], "reject": offs[:1],
                                               "accept": offs[1:]}, headers=_h(gk), timeout=T))
    held = pull()  # not acknowledged: its queue stays locked by m1 (visibility 10 min)
    assert held["messages"]
    stack.drain()  # the fan-out delivers the type A messages to the subscription's list

    # a lake report, as the backlog job writes it (the jobs themselves need Spark: test_lake_e2e)
    info = requests.get(f"{url}/_local/info", timeout=T).json()
    offsets = _ok(requests.get(f"{url}/v1/groups/{GROUP}/offsets", params={"topic": TOPIC}, headers=admin, timeout=T))
    from lakeq.lake.reports import summary_key
    report = {"group": GROUP, "topic": TOPIC, "computed_at": int(time.time() * 1000) - 60_000, "as_of": 0,
              "bucket_minutes": 60, "backlog": offsets["backlog"] + 2,
              "queues": [{"queue": q["queue"], "produced": q["max_offset"], "committed": q["committed_offset"],
                          "backlog": q["backlog"] + (2 if i == 0 else 0), "at": 0} for i, q in enumerate(offsets["queues"])]}
    s3 = boto3.client("s3", endpoint_url=info["aws_endpoint_url"], region_name=info["region"],
                      aws_access_key_id="testing", aws_secret_access_key="testing")
    s3.put_object(Bucket=info["environment"]["LAKE_BUCKET"], Key=summary_key(GROUP, TOPIC),
                  Body=json.dumps(report).encode())
    # and a delivery ledger, as the ledger job writes it (issue 32.4; the job itself: tests/spark/test_ledger.py)
    from lakeq.lake.report_keys import ledger_key
    ledger = {"group": GROUP, "topic": TOPIC, "computed_at": report["computed_at"], "as_of": 0, "from": 0, "to": 0,
              "produced": 12, "accepted": 2, "dead_lettered": 1, "pending": 9, "expired": 0, "skipped": 0, "lost": 0,
              "redelivered": 0, "deliveries": 6, "causes": {"rejected": 1}, "lost_messages": [],
              "pending_messages": [],
              "line": "12 produced, 2 accepted, 1 dead-lettered, 9 pending, 0 lost, 0 redelivered"}
    s3.put_object(Bucket=info["environment"]["LAKE_BUCKET"], Key=ledger_key(GROUP, TOPIC),
                  Body=json.dumps(ledger).encode())
    return {"url": url, "admin": admin, "gk": gk, "sub": sub, "held": held, "report": report, "produce": produce,
            "ledger": ledger}


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    if not CHROMIUM.exists():
        pytest.fail("Debian's Chromium is missing: `make chromium` (apt-get install chromium) first")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")), executable_path=str(CHROMIUM), headless=True,
            args=ARGS, viewport={"width": 1280, "height": 900})
        try:
            yield ctx
        finally:
            ctx.close()


def _expected(m) -> bool:
    """A 404 of ``GET /v1/reports/backlog`` or ``GET /v1/groups/{g}/ledger`` means "no lake report
    yet" (the page says so); Chromium still logs every non-2xx fetch as a console error. Nothing
    else is expected."""
    return m.type == "error" and re.search(r"/v1/reports/backlog\?|/ledger\?", (m.location or {}).get("url", "")) \
        is not None and "status of 404" in m.text


def screenshot(page, name: str) -> Path:
    """The page, full height, as ``<name>.png`` in :data:`SCREENSHOTS` (``docs/screenshots/``,
    committed and linked from docs/api.md, with ``LAKEQ_KEEP_SCREENSHOTS=1``). Returns the path,
    also printed."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    shot = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(shot), full_page=True)
    print(f"\nconsole screenshot: {shot}")
    assert shot.stat().st_size > 10_000
    return shot


def _text(page, selector: str) -> str:
    return page.locator(selector).inner_text().strip()


def test_console_shows_what_the_api_returns(world, browser, stack):
    url, admin = world["url"], world["admin"]
    page = browser.new_page()
    problems: list[str] = []
    page.on("console", lambda m: problems.append(f"console.{m.type}: {m.text} @ {m.location}")
            if m.type in ("error", "warning") and not _expected(m) else None)
    page.on("pageerror", lambda e: problems.append(f"pageerror: {e}"))
    # a fetch the page's own reload (below) cuts off is aborted by the navigation, not failed
    reloading = {"now": False}
    page.on("requestfailed", lambda r: None if reloading["now"] and "ERR_ABORTED" in (r.failure or "")
            else problems.append(f"requestfailed: {r.url} {r.failure}"))
    off_origin: list[str] = []
    page.on("request", lambda r: off_origin.append(r.url) if not r.url.startswith(url) and
            not r.url.startswith("data:") else None)
    asked: list[tuple[float, str]] = []  # (when, path?query) of each request the page sends
    page.on("request", lambda r: asked.append((time.monotonic(), r.url[len(url):])))

    r = page.goto(url + "/console")
    assert r.status == 200
    assert "No key yet" in _text(page, "#status")
    page.fill("#key", stack.admin_key)
    page.click("#use-key")
    expect(page.locator("body")).to_have_attribute("data-refreshed", re.compile(r"^\d+$"), timeout=30_000)
    assert _text(page, "#status").startswith("admin key")
    assert page.input_value("#key") == ""  # the key is not left in the form
    assert page.evaluate("sessionStorage.getItem('lakeq.console.key')") == stack.admin_key
    assert page.evaluate("localStorage.length") == 0

    # topics and queues: produced = max_offset, min/max offsets
    topic = _ok(requests.get(f"{url}/v1/topics/{TOPIC}", headers=admin, timeout=T))
    assert topic["produced"] == 12 and len(topic["queue_offsets"]) == 3
    for q in topic["queue_offsets"]:
        sel = f'#topics-table td[data-topic="{TOPIC}"][data-queue="{q["queue"]}"]'
        assert _text(page, sel + '[data-field="produced"]') == str(q["max_offset"])
        assert _text(page, sel + '[data-field="min_offset"]') == str(q["min_offset"])
        assert _text(page, sel + '[data-field="max_offset"]') == str(q["max_offset"])

    # the group: backlog per queue, lock holder and expiry
    off = _ok(requests.get(f"{url}/v1/groups/{GROUP}/offsets", params={"topic": TOPIC}, headers=admin, timeout=T))
    g = f'.group[data-group="{GROUP}"]'
    assert _text(page, f'{g} [data-field="total_backlog"][data-topic="{TOPIC}"]') == str(off["backlog"])
    # the delivery ledger's line (issue 32.4), as GET /v1/groups/{group}/ledger serves it
    led = _ok(requests.get(f"{url}/v1/groups/{GROUP}/ledger", params={"topic": TOPIC}, headers=admin, timeout=T))
    assert led == world["ledger"]
    assert _text(page, f'{g} [data-field="ledger"][data-topic="{TOPIC}"]') == \
        f"ledger: {led['line']} (dead letters: rejected 1)"
    held_queue = world["held"]["messages"][0]["queue"]
    for q in off["queues"]:
        sel = f'{g} td[data-topic="{TOPIC}"][data-queue="{q["queue"]}"]'
        assert _text(page, sel + '[data-field="backlog"]') == str(q["backlog"])
        assert _text(page, sel + '[data-field="committed_offset"]') == str(q["committed_offset"])
        assert _text(page, sel + '[data-field="produced"]') == str(q["max_offset"])
        assert _text(page, sel + '[data-field="lock_owner"]') == (q["lock_owner"] or "")
        assert _text(page, sel + '[data-field="dead_lettered"]') == str(q["dead_lettered"])
        assert page.get_attribute(sel + '[data-field="locked_until"]', "data-value") == str(q["locked_until"])
    assert {q["queue"]: q["lock_owner"] for q in off["queues"] if q["lock_owner"]} == {held_queue: "m1"}
    assert sum(q["backlog"] for q in off["queues"]) == off["backlog"] > 0
    assert sum(q["dead_lettered"] for q in off["queues"]) == 1  # the rejected message

    # members, generation and assignment
    desc = _ok(requests.get(f"{url}/v1/groups/{GROUP}", headers=admin, timeout=T))
    assert _text(page, f'{g} b[data-field="generation"]') == str(desc["generation"])
    [member] = desc["members"]
    shown = _text(page, f'{g} td[data-member="m1"][data-field="assignment"]')
    assert shown == " ".join(f'{a["topic"]}#{a["queue"]}' for a in member["assignment"]) and shown

    # the subscription's list backlog
    sb = _ok(requests.get(f"{url}/v1/subscriptions/{world['sub']['id']}/offsets", headers=admin, timeout=T))
    assert sb["backlog"] == 6  # the type A messages of 12
    assert _text(page, f'{g} td[data-subscription="{world["sub"]["id"]}"][data-field="backlog"]') == str(sb["backlog"])

    # backlog over time: only the latest lake report exists, and the page says so
    note = _text(page, f'{g} [data-field="chart_note"][data-topic="{TOPIC}"]')
    assert "Only the latest lake report exists" in note
    lake_points = page.locator(f'{g} svg.chart circle[data-series="lake"]')
    assert lake_points.count() == 1 and lake_points.get_attribute("data-value") == str(world["report"]["backlog"])
    # the chart's backlog: CloudWatch's per-minute figures once the metrics function has published
    # some (it runs each minute), the page's own samples until then (and the page says which)
    def charted() -> int:
        src = _text(page, f'{g} [data-field="chart_source"][data-topic="{TOPIC}"]')
        name = "metrics" if src.startswith("Backlog per minute over the last hour from CloudWatch") else "live"
        assert name == "metrics" or src.startswith("No metrics in CloudWatch yet"), src
        return page.locator(f'{g} svg.chart circle[data-series="{name}"]').count()

    assert charted() >= 1

    # it refreshes by itself: new messages show up without a reload
    world["produce"](5, 100)
    after = _ok(requests.get(f"{url}/v1/groups/{GROUP}/offsets", params={"topic": TOPIC}, headers=admin, timeout=T))
    assert after["backlog"] == off["backlog"] + 5
    expect(page.locator(f'{g} [data-field="total_backlog"][data-topic="{TOPIC}"]')).to_have_text(
        str(after["backlog"]), timeout=20_000)
    topic = _ok(requests.get(f"{url}/v1/topics/{TOPIC}", headers=admin, timeout=T))
    for q in topic["queue_offsets"]:
        expect(page.locator(f'#topics-table td[data-topic="{TOPIC}"][data-queue="{q["queue"]}"][data-field="produced"]')
               ).to_have_text(str(q["max_offset"]), timeout=20_000)
    assert charted() >= 1

    # the summary first (issue 18 item 3): the same totals and per-group figures as GET /v1/summary;
    # rates appear from the second summary on (the page has refreshed since the produce above)
    summ = _ok(requests.get(f"{url}/v1/summary", headers=admin, timeout=T))
    row = next(x for x in summ["groups"] if x["group"] == GROUP and x["topic"] == TOPIC)
    assert row["backlog"] == after["backlog"] and row["dead_lettered"] == 1 and row["oldest_unconsumed_at"]
    sg = f'#summary-table td[data-group="{GROUP}"][data-topic="{TOPIC}"]'
    expect(page.locator(sg + '[data-field="summary_group_backlog"]')).to_have_text(str(row["backlog"]), timeout=20_000)
    assert _text(page, sg + '[data-field="summary_group_dead_lettered"]') == "1"
    assert _text(page, sg + '[data-field="summary_group_oldest_age"]') not in ("", "—")
    expect(page.locator('[data-field="summary_backlog"]')).to_have_text(
        str(_ok(requests.get(f"{url}/v1/summary", headers=admin, timeout=T))["totals"]["backlog"]), timeout=20_000)
    assert _text(page, '[data-field="summary_oldest_age"]') not in ("", "—")
    expect(page.locator('[data-field="summary_produce_rate"]')).to_contain_text("msg/s", timeout=20_000)
    assert page.locator('#summary-table tr[data-group] a[href="#group-' + GROUP + '"]').count() == 1  # drill-down link
    sub_row = page.locator(f'#summary-table td[data-subscription="{world["sub"]["id"]}"][data-field="summary_sub_backlog"]')
    assert sub_row.inner_text().strip() == str(next(x for x in summ["subscriptions"] if x["subscription"] == world["sub"]["id"])["backlog"])


    # the lake's reports are hourly: the page asks each (group, topic)'s report and ledger at most once
    # a minute (console35: it asked them every refresh, two of ~4 requests a (group, topic) each 5 s)
    assert sum(1 for _t, p in asked if p.startswith("/v1/summary")) >= 2  # refreshed more than once
    for route in ("/v1/reports/backlog?", f"/v1/groups/{GROUP}/ledger?"):
        times = [t for t, p in asked if p.startswith(route) and f"topic={TOPIC.replace('/', '%2F')}" in p
                 and (route != "/v1/reports/backlog?" or f"group={GROUP}" in p)]
        assert times and all(b - a >= 55 for a, b in zip(times, times[1:])), (route, times)

    # issue 34.4: the metrics function publishes; the chart then shows CloudWatch's per-minute backlog
    # (GET /v1/console/metrics, the same figures), no browser samples; the summary's rates and chart too
    # (the publisher reads the queue items' max_offset hints, which the head mover keeps a moment
    # behind: on a loaded machine a run can see the backlog late, so run it until CloudWatch has it)
    deadline = time.monotonic() + 120
    while True:
        run = requests.post(f"{url}/_local/schedules/run", params={"name": "MetricsFunction"}, timeout=120)
        assert run.status_code == 200 and [x["ok"] for x in run.json()["runs"]] == [True], run.text
        cw = _ok(requests.get(f"{url}/v1/console/metrics", params={"topic": TOPIC, "group": GROUP}, headers=admin,
                              timeout=T))
        if cw["series"]["backlog"] or time.monotonic() > deadline:
            break
        time.sleep(2)
    page.evaluate("document.body.removeAttribute('data-refreshed')")
    reloading["now"] = True
    page.reload()  # the page asks CloudWatch at most once a minute: a new page asks now
    expect(page.locator("body")).to_have_attribute("data-refreshed", re.compile(r"^\d+$"), timeout=60_000)
    reloading["now"] = False
    expect(page.locator(f'{g} [data-field="chart_source"][data-topic="{TOPIC}"]')).to_contain_text(
        "from CloudWatch", timeout=60_000)
    cw = _ok(requests.get(f"{url}/v1/console/metrics", params={"topic": TOPIC, "group": GROUP}, headers=admin, timeout=T))
    assert cw["scope"]["backlog"] == "topic+group" and cw["series"]["backlog"][-1]["v"] >= 1
    pts = page.locator(f'{g} svg.chart circle[data-series="metrics"]')
    expect(pts.last).to_have_attribute("data-value", str(cw["series"]["backlog"][-1]["v"]), timeout=20_000)
    assert page.locator(f'{g} svg.chart circle[data-series="live"]').count() == 0
    expect(page.locator('[data-field="summary_rates_source"]')).to_contain_text("from CloudWatch", timeout=20_000)
    assert page.locator('#summary-chart circle[data-series="produced"]').count() >= 1
    assert _text(page, '[data-field="summary_produce_rate"]').endswith(" msg/s")
    assert "(CloudWatch, minute of" in _text(page, '.tile:has([data-field="summary_produce_rate"]) .muted')

    screenshot(page, "console")

    assert problems == [], problems
    assert off_origin == [], off_origin  # no CDN: the machine has no internet
    page.close()


def test_console_with_a_group_key_shows_only_that_group(world, browser, stack):
    page = browser.new_page()
    problems: list[str] = []
    page.on("console", lambda m: problems.append(f"{m.type}: {m.text}") if m.type == "error" and not _expected(m)
            else None)
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.goto(world["url"] + "/console")
    page.fill("#key", world["gk"])
    page.click("#use-key")
    expect(page.locator("body")).to_have_attribute("data-refreshed", re.compile(r"^\d+$"), timeout=30_000)
    assert _text(page, "#status").startswith(f"key of {GROUP}")
    assert page.locator(".group").count() == 1 and page.locator(f'.group[data-group="{GROUP}"]').count() == 1
    off = _ok(requests.get(f"{world['url']}/v1/groups/{GROUP}/offsets", params={"topic": TOPIC},
                           headers=_h(world["gk"]), timeout=T))
    expect(page.locator(f'[data-field="total_backlog"][data-topic="{TOPIC}"]')).to_have_text(
        str(off["backlog"]), timeout=20_000)
    screenshot(page, "console-group-key")
    page.click("#forget-key")
    assert page.evaluate("sessionStorage.length") == 0 and page.locator(".group").count() == 0
    assert problems == [], problems
    page.close()


def test_console_offset_reset_asks_twice_and_moves_the_offset(world, browser, stack):
    """The reset action (admin): a prompt for the offset, then a confirmation; dismissing the
    confirmation changes nothing, accepting it moves the committed offset (PUT /v1/groups/{g}/offsets)."""
    url, admin = world["url"], world["admin"]
    page = browser.new_page()
    answers: list = []

    def on_dialog(d):
        a = answers.pop(0)
        if a is False:
            d.dismiss()
        else:
            d.accept(a) if d.type == "prompt" else d.accept()
    page.on("dialog", on_dialog)
    page.goto(url + "/console")
    page.fill("#key", stack.admin_key)
    page.click("#use-key")
    expect(page.locator("body")).to_have_attribute("data-refreshed", re.compile(r"^\d+$"), timeout=30_000)
    off = _ok(requests.get(f"{url}/v1/groups/{GROUP}/offsets", params={"topic": TOPIC}, headers=admin, timeout=T))
    q = next(x for x in off["queues"] if not x["lock_owner"] and x["backlog"] > 0)
    button = page.locator(f'button[data-action="reset"][data-group="{GROUP}"][data-topic="{TOPIC}"]'
                          f'[data-queue="{q["queue"]}"]')
    answers[:] = [str(q["max_offset"]), False]  # prompt answered, confirmation dismissed
    button.click()
    page.wait_for_timeout(500)
    assert answers == []
    again = _ok(requests.get(f"{url}/v1/groups/{GROUP}/offsets", params={"topic": TOPIC}, headers=admin, timeout=T))
    assert next(x for x in again["queues"] if x["queue"] == q["queue"])["committed_offset"] == q["committed_offset"]
    answers[:] = [str(q["max_offset"]), True]
    page.locator(f'button[data-action="reset"][data-group="{GROUP}"][data-topic="{TOPIC}"]'
                 f'[data-queue="{q["queue"]}"]').click()
    expect(page.locator("#status")).to_contain_text(f"reset to {q['max_offset']}", timeout=20_000)
    again = _ok(requests.get(f"{url}/v1/groups/{GROUP}/offsets", params={"topic": TOPIC}, headers=admin, timeout=T))
    assert next(x for x in again["queues"] if x["queue"] == q["queue"])["committed_offset"] == q["max_offset"]
    page.close()
