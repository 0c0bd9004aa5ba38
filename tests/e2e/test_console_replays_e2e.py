"""The console's replays panel (issue 18.1) in Chromium (Playwright, as test_console_ops_e2e.py),
with the replay routes answered by ``page.route`` (:class:`FakeReplays`, per docs/api.md
"Replays"); the rest of the console talks to the real local stack. The real routes, the selection
job on Spark and the copier are driven from the console in test_console_replays_live_e2e.py; this
test keeps what the local stack does not produce on demand: a replay that failed (its error shown,
found "—"), one copying with failures counted, the exact request bodies the form sends (from / to
read as UTC, a filter, a topic target) and a bad filter refused before any confirmation or
request. Also an API without the replay routes (404). The screenshot
is kept as ``docs/screenshots/console-replays-fake.png`` (the fake's replays, not the stack's).
"""
from __future__ import annotations

import json
import re

from playwright.sync_api import expect

from tests.e2e.test_console_e2e import browser, screenshot  # noqa: F401 (browser: the Chromium fixture)

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def _replay(rid: str, **over) -> dict:
    r = {"id": rid, "topic": "orders", "from": T0, "to": T0 + 3_600_000, "filter": None,
         "target": {"group": "billing"}, "rate": 100, "status": "copying", "found": 10, "copied": 4, "failed": 1,
         "duplicates": 0, "created_at": T0 + 7_200_000, "updated_at": T0 + 7_300_000}
    r.update(over)
    return r


class FakeReplays:
    """The contract's four routes over a list (newest first); every request is recorded."""

    def __init__(self):
        self.replays = [_replay("rp_copying"), _replay("rp_done", status="done", found=3, copied=3, failed=0,
                                                       target={"topic": "orders.copy"}),
                        _replay("rp_failed", status="failed", found=None, copied=0, failed=0,
                                error="selection failed: no Java runtime")]
        self.requests: list[tuple[str, str, dict | None]] = []

    def __call__(self, route, request):
        path = request.url.split("/v1/replays", 1)[1].split("?", 1)[0]
        body = json.loads(request.post_data) if request.post_data else None
        self.requests.append((request.method, path, body))
        if request.method == "GET" and path == "":
            return route.fulfill(status=200, content_type="application/json",
                                 body=json.dumps({"replays": self.replays}))
        if request.method == "POST" and path == "":
            r = _replay(f"rp_new{len(self.posts())}", topic=body["topic"], **{"from": body["from"]}, to=body["to"],
                        filter=body.get("filter"), target=body["target"], rate=body.get("rate", 100),
                        status="selecting", found=None, copied=0, failed=0)
            if body.get("dry_run"):
                r.update(dry_run=True, sample=None)
            self.replays.insert(0, r)
            return route.fulfill(status=202, content_type="application/json", body=json.dumps(r))
        m = re.fullmatch(r"/([^/]+)/cancel", path)
        if request.method == "POST" and m:
            r = next(x for x in self.replays if x["id"] == m.group(1))
            r["status"] = "cancelled"
            return route.fulfill(status=200, content_type="application/json", body=json.dumps(r))
        return route.fulfill(status=404, content_type="application/json",
                             body=json.dumps({"error": {"code": "not_found", "message": path}}))

    def posts(self) -> list[tuple[str, dict | None]]:
        return [(p, b) for m, p, b in self.requests if m == "POST"]


def open_replays_panel(page, stack) -> list[str]:
    """``page`` on the console with the admin key, refreshed once, the replays panel shown; returns
    the list the page's errors (script errors, console errors but the lake report's 404s) go to."""
    problems: list[str] = []
    page.on("pageerror", lambda e: problems.append(f"pageerror: {e}"))
    page.on("console", lambda m: problems.append(f"{m.type}: {m.text}") if m.type == "error"
            and not re.search(r"/v1/reports/backlog\?|/ledger\?", (m.location or {}).get("url", "")) else None)
    assert page.goto(stack.url + "/console").status == 200
    page.fill("#key", stack.admin_key)
    page.click("#use-key")
    expect(page.locator("body")).to_have_attribute("data-refreshed", re.compile(r"^\d+$"), timeout=30_000)
    expect(page.locator("#replays-section")).to_be_visible()
    return problems


def test_replays_list_form_and_cancel(stack, browser):  # noqa: F811
    fake = FakeReplays()
    page = browser.new_page()
    page.route(re.compile(r".*/v1/replays(/[^?]*)?(\?.*)?$"), fake)
    problems = open_replays_panel(page, stack)

    # the list: status and progress per replay; found is "…" while selecting
    cellof = lambda rid, f: page.locator(f'td[data-replay="{rid}"][data-field="{f}"]')  # noqa: E731
    expect(page.locator("#replays-table tbody tr")).to_have_count(3)
    expect(cellof("rp_copying", "status")).to_have_text("copying")
    for f, v in (("found", "10"), ("copied", "4"), ("failed", "1")):
        expect(cellof("rp_copying", f)).to_have_text(v)
    expect(cellof("rp_done", "target")).to_have_text("topic orders.copy")
    expect(cellof("rp_failed", "status")).to_have_text("failed: selection failed: no Java runtime")
    expect(cellof("rp_failed", "found")).to_have_text("—")  # never selected (not "…": nothing is pending)
    expect(page.locator('button[data-cancel-replay="rp_copying"]')).to_have_count(1)
    expect(page.locator('button[data-cancel-replay="rp_done"]')).to_have_count(0)

    # the form: a bad filter is refused before any confirmation or request
    page.fill("#replay-topic", "orders")
    page.fill("#replay-from", "2026-01-01T00:30:00")
    page.fill("#replay-to", "2026-01-01T02:00:00")
    page.fill("#replay-filter", "{not json")
    page.select_option("#replay-target-kind", "group")
    page.fill("#replay-target", "billing")
    page.fill("#replay-rate", "50")
    dialogs: list[str] = []
    page.on("dialog", lambda d: dialogs.append(d.message))  # recorded; each step answers its own
    page.click("#replay-go")
    expect(page.locator("#replay-status")).to_have_text("the filter is not JSON")
    assert dialogs == [] and fake.posts() == []

    # dismissing the confirmation sends nothing
    flt = {"conditions": [{"field": "level", "values": ["error"]}], "tags": ["eu"]}
    page.fill("#replay-filter", json.dumps(flt))
    page.once("dialog", lambda d: d.dismiss())
    page.click("#replay-go")
    expect(page.locator("#replay-status")).to_have_text("Replay not started.")
    assert fake.posts() == []
    assert len(dialogs) == 1 and "orders" in dialogs[0] and "group 'billing'" in dialogs[0] and "50/s" in dialogs[0]
    assert "2026-01-01 00:30:00Z" in dialogs[0] and "2026-01-01 02:00:00Z" in dialogs[0]

    # accepting it POSTs the contract's body (from / to as epoch ms, the times read as UTC)
    page.once("dialog", lambda d: d.accept())
    page.click("#replay-go")
    expect(page.locator("#replay-status")).to_have_text("Replay rp_new1 selecting.")
    assert fake.posts() == [("", {"topic": "orders", "from": T0 + 1_800_000, "to": T0 + 7_200_000,
                                  "filter": flt, "target": {"group": "billing"}, "rate": 50})]
    expect(page.locator("#replays-table tbody tr")).to_have_count(4)
    expect(cellof("rp_new1", "status")).to_have_text("selecting")
    expect(cellof("rp_new1", "found")).to_have_text("…")  # while selecting

    # into a topic
    page.select_option("#replay-target-kind", "topic")
    page.fill("#replay-target", "orders.again")
    page.fill("#replay-filter", "")
    page.once("dialog", lambda d: d.accept())
    page.click("#replay-go")
    expect(page.locator("#replay-status")).to_have_text("Replay rp_new2 selecting.")
    assert fake.posts()[-1][1]["target"] == {"topic": "orders.again"} and "filter" not in fake.posts()[-1][1]

    # cancel: dismissed → nothing; accepted → POST …/cancel, the row shows it and loses its button
    n = len(fake.posts())
    page.once("dialog", lambda d: d.dismiss())
    page.click('button[data-cancel-replay="rp_copying"]')
    page.wait_for_timeout(300)
    assert len(fake.posts()) == n
    expect(cellof("rp_copying", "status")).to_have_text("copying")
    page.once("dialog", lambda d: d.accept())
    page.click('button[data-cancel-replay="rp_copying"]')
    expect(page.locator("#replay-status")).to_have_text("Replay rp_copying cancelled.")
    assert fake.posts()[-1] == ("/rp_copying/cancel", None)
    expect(cellof("rp_copying", "status")).to_have_text("cancelled")
    expect(page.locator('button[data-cancel-replay="rp_copying"]')).to_have_count(0)

    screenshot(page, "console-replays-fake")
    assert problems == [], problems
    page.close()


def test_the_console_says_so_when_the_api_has_no_replays(stack, browser):  # noqa: F811
    """Before the replay routes exist (404), the panel says so and the rest of the console works."""
    page = browser.new_page()
    page.route(re.compile(r".*/v1/replays(/[^?]*)?(\?.*)?$"), lambda route, request: route.fulfill(
        status=404, content_type="application/json",
        body=json.dumps({"error": {"code": "not_found", "message": "no route"}})))
    page.goto(stack.url + "/console")
    page.fill("#key", stack.admin_key)
    page.click("#use-key")
    expect(page.locator("body")).to_have_attribute("data-refreshed", re.compile(r"^\d+$"), timeout=30_000)
    expect(page.locator("#replays")).to_have_text("This API has no replays (GET /v1/replays: 404).")
    expect(page.locator("#status")).not_to_have_class("error")
    page.close()


def test_a_dry_run_from_the_form_and_its_count_and_sample(stack, browser):  # noqa: F811
    """Issue 32 item 5: "Dry run" sends the form's request with ``"dry_run": true`` and no
    confirmation (it copies nothing); a selected dry run shows its count, "—" for copied/failed
    and its sample (queue, offset, id, key, produced, bytes); one that selected nothing says so."""
    fake = FakeReplays()
    sample = [{"queue": 0, "offset": 7, "id": "m7", "key": "k2", "produced_at": T0 + 60_000, "size": 12},
              {"queue": 1, "offset": 3, "id": "m3", "key": None, "produced_at": T0 + 1_000, "size": None}]
    fake.replays = [_replay("rp_dry", status="selected", found=2, copied=0, failed=0, dry_run=True, sample=sample),
                    _replay("rp_dry0", status="selected", found=0, copied=0, failed=0, dry_run=True, sample=[])]
    page = browser.new_page()
    page.route(re.compile(r".*/v1/replays(/[^?]*)?(\?.*)?$"), fake)
    problems = open_replays_panel(page, stack)
    cellof = lambda rid, f: page.locator(f'td[data-replay="{rid}"][data-field="{f}"]')  # noqa: E731
    expect(cellof("rp_dry", "status")).to_have_text("dry run: selected")
    expect(cellof("rp_dry", "found")).to_have_text("2")
    expect(cellof("rp_dry", "copied")).to_have_text("—")
    rows = page.locator('tr[data-replay-sample="rp_dry"] tbody tr')
    expect(rows).to_have_count(2)
    expect(rows.nth(0)).to_have_text(re.compile(r"07m7k22026-01-01 00:01:00Z12"))
    expect(rows.nth(1)).to_have_text(re.compile(r"13m32026-01-01 00:00:01Z—"))
    expect(page.locator('tr[data-replay-sample="rp_dry0"]')).to_have_text("The dry run selected nothing.")
    expect(page.locator('button[data-cancel-replay="rp_dry"]')).to_have_count(0)

    page.fill("#replay-topic", "orders")
    page.fill("#replay-from", "2026-01-01T00:30:00")
    page.fill("#replay-to", "2026-01-01T02:00:00")
    page.select_option("#replay-target-kind", "group")
    page.fill("#replay-target", "billing")
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.click("#replay-dry")
    expect(page.locator("#replay-status")).to_have_text(re.compile(r"^Dry run rp_new1 selecting"))
    assert dialogs == []
    assert fake.posts() == [("", {"topic": "orders", "from": T0 + 1_800_000, "to": T0 + 7_200_000,
                                  "target": {"group": "billing"}, "rate": 100, "dry_run": True})]
    assert problems == [], problems
    page.close()
