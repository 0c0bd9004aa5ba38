"""The console's replays panel (issue 18.1) in Chromium against the REAL replay routes of the local
stack (no ``page.route``): messages produced over HTTP reach the lake through the archiver; the
admin starts a replay from the console's form (a dismissed confirmation sends nothing: the real
``GET /v1/replays`` lists none), sees it listed as selecting, the selection job runs on Spark
``local[2]`` and ReplayCopierFunction's schedule is fired until the replay ends (as
test_replay_e2e.py does); after a refresh the console shows it done with the found / copied /
failed numbers the real ``GET /v1/replays/{id}`` gives. A second replay, started from the console,
is cancelled from it after a confirmation (a dismissed one leaves it running), as the real GET
then says. Skipped without pyspark or Java, like test_replay_e2e.py. The screenshot is kept as
``docs/screenshots/console-replays.png``."""
from __future__ import annotations

import datetime as dt
import json
import re
import time
import uuid

import pytest
from playwright.sync_api import expect

from tests.e2e.test_console_e2e import browser, screenshot  # noqa: F401 (browser: the Chromium fixture)
from tests.e2e.test_console_replays_e2e import open_replays_panel
from tests.e2e.test_replay_e2e import until_ended  # (skips this module without pyspark, as there)


def _utc_input(ms: int) -> str:
    """A ``datetime-local`` value (seconds), which the console reads as UTC."""
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")


def test_replay_started_watched_and_cancelled_from_the_console(stack, browser):  # noqa: F811
    from infra.local.glue import spark_missing

    if spark_missing():
        pytest.skip(spark_missing())
    tag = uuid.uuid4().hex[:6]
    topic, copies, feed, group = f"crp-{tag}", f"crp-copies-{tag}", f"crp-feed-{tag}", f"crp-billing-{tag}"
    stack.call("POST", "/v1/topics", json={"name": topic, "queues": 2}, status=201)
    stack.call("POST", "/v1/topics", json={"name": copies, "queues": 1}, status=201)
    fk = stack.call("POST", "/v1/clients", json={"name": feed, "role": "producer", "topics": [topic]},
                    status=201)["api_key"]
    stack.call("POST", "/v1/clients", json={"name": group, "role": "consumer", "topics": [topic]}, status=201)
    t_from = (int(time.time() * 1000) - 2000) // 1000 * 1000  # whole seconds: the form's resolution
    msgs = [{"id": f"m{i}", "body": f"m{i} é", "key": f"k{i % 3}", "properties": {"level": "error" if i % 3 == 0
                                                                               else "info"}} for i in range(10)]
    stack.call("POST", f"/v1/topics/{topic}/messages", fk, json={"producer": feed, "messages": msgs})
    t_to = (int(time.time() * 1000) + 3000) // 1000 * 1000
    flt = {"conditions": [{"field": "level", "values": ["error"]}]}  # m0, m3, m6, m9

    def mine() -> list[dict]:
        return [r for r in stack.call("GET", "/v1/replays", params={"limit": 100})["replays"] if r["topic"] == topic]

    page = browser.new_page()
    problems = open_replays_panel(page, stack)
    cellof = lambda rid, f: page.locator(f'td[data-replay="{rid}"][data-field="{f}"]')  # noqa: E731

    def fill(target_kind: str, target: str, rate: int, filter_: dict | None) -> None:
        page.fill("#replay-topic", topic)
        page.fill("#replay-from", _utc_input(t_from))
        page.fill("#replay-to", _utc_input(t_to))
        page.fill("#replay-filter", json.dumps(filter_) if filter_ else "")
        page.select_option("#replay-target-kind", target_kind)
        page.fill("#replay-target", target)
        page.fill("#replay-rate", str(rate))

    def started() -> str:
        expect(page.locator("#replay-status")).to_have_text(re.compile(r"^Replay \S+ selecting\.$"), timeout=20_000)
        return re.fullmatch(r"Replay (\S+) selecting\.", page.locator("#replay-status").inner_text()).group(1)

    # a dismissed confirmation sends nothing: the real list has no replay of the topic
    fill("group", group, 1000, flt)
    asked: list[str] = []
    page.once("dialog", lambda d: (asked.append(d.message), d.dismiss()))
    page.click("#replay-go")
    expect(page.locator("#replay-status")).to_have_text("Replay not started.")
    assert len(asked) == 1 and f"'{topic}'" in asked[0] and f"group '{group}'" in asked[0], asked
    assert mine() == []

    # accepted: POST /v1/replays; listed as selecting (found "…"), as the real GET says
    page.once("dialog", lambda d: d.accept())
    page.click("#replay-go")
    first = started()
    [r] = mine()
    assert (r["id"], r["from"], r["to"], r["filter"], r["target"], r["rate"]) == (
        first, t_from, t_to, {**flt, "tags": []}, {"group": group}, 1000), r  # the route adds "tags"
    expect(cellof(first, "status")).to_have_text("selecting")
    expect(cellof(first, "found")).to_have_text("…")
    expect(page.locator(f'button[data-cancel-replay="{first}"]')).to_have_count(1)

    # the selection job (Spark local[2]) and the copier's schedule, until it ends
    until_ended(stack, first)
    r = stack.call("GET", f"/v1/replays/{first}")
    assert (r["status"], r["found"], r["copied"], r["failed"]) == ("done", 4, 4, 0), (r, stack.stderr[-3000:])
    page.reload()
    expect(page.locator("body")).to_have_attribute("data-refreshed", re.compile(r"^\d+$"), timeout=30_000)
    expect(cellof(first, "status")).to_have_text("done")
    for f in ("found", "copied", "failed"):
        expect(cellof(first, f)).to_have_text(str(r[f]))
    expect(page.locator(f'button[data-cancel-replay="{first}"]')).to_have_count(0)

    # a second one, into a topic at 1 msg/s, cancelled from the console after a confirmation
    fill("topic", copies, 1, None)
    page.once("dialog", lambda d: d.accept())
    page.click("#replay-go")
    second = started()
    assert stack.call("GET", f"/v1/replays/{second}")["target"] == {"topic": copies}
    cancel = page.locator(f'button[data-cancel-replay="{second}"]')
    page.once("dialog", lambda d: d.dismiss())
    cancel.click()
    page.wait_for_timeout(500)
    assert stack.call("GET", f"/v1/replays/{second}")["status"] in ("selecting", "copying")  # not cancelled
    asked.clear()
    page.once("dialog", lambda d: (asked.append(d.message), d.accept()))
    cancel.click()
    expect(page.locator("#replay-status")).to_have_text(f"Replay {second} cancelled.", timeout=20_000)
    assert asked and second in asked[0], asked
    assert stack.call("GET", f"/v1/replays/{second}")["status"] == "cancelled"
    expect(cellof(second, "status")).to_have_text("cancelled")
    expect(page.locator(f'button[data-cancel-replay="{second}"]')).to_have_count(0)
    expect(cellof(first, "status")).to_have_text("done")

    screenshot(page, "console-replays")
    assert problems == [], problems
    page.close()
