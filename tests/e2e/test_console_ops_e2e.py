"""The console's peek and redrive panel (issue 18.3) in Chromium (Playwright, as
test_console_e2e.py): the admin peeks at a dead-letter topic, starts a redrive after confirming
(a dismissed confirmation starts nothing), sees its progress and cancels it after confirming. The
screenshot is kept as ``docs/screenshots/console-ops.png``."""
from __future__ import annotations

import re

import requests
from playwright.sync_api import expect

from tests.e2e.test_console_e2e import browser, screenshot  # noqa: F401 (browser: the Chromium fixture)

T = 15


def test_peek_and_redrive_from_the_console(stack, browser):  # noqa: F811
    u, admin = stack.url, {"Authorization": f"Bearer {stack.admin_key}"}
    for name in ("ops.src", "ops.dlq"):
        assert requests.post(f"{u}/v1/topics", json={"name": name, "queues": 1}, headers=admin, timeout=T).ok
    c = requests.post(f"{u}/v1/clients", json={"name": "ops-c", "role": "consumer", "topics": ["ops.src"]},
                      headers=admin, timeout=T).json()
    assert requests.patch(f"{u}/v1/clients/ops-c", json={"dead_letter_topic": "ops.dlq"}, headers=admin, timeout=T).ok
    p = requests.post(f"{u}/v1/clients", json={"name": "ops-p", "role": "producer", "topics": ["ops.src"]},
                      headers=admin, timeout=T).json()
    msgs = [{"body": f"order {i}", "key": "k"} for i in range(6)]
    assert requests.post(f"{u}/v1/topics/ops.src/messages", json={"producer": "ops-p", "messages": msgs},
                         headers={"Authorization": f"Bearer {p['api_key']}"}, timeout=T).ok
    ck = {"Authorization": f"Bearer {c['api_key']}"}
    b = requests.get(f"{u}/v1/topics/ops.src/messages", params={"group": "ops-c", "max": 10}, headers=ck, timeout=T).json()
    assert requests.post(f"{u}/v1/acks", json={"group": "ops-c", "receipt": b["receipt"],
                                               "reject": [m["offset"] for m in b["messages"]]}, headers=ck, timeout=T).ok

    page = browser.new_page()
    problems: list[str] = []
    page.on("pageerror", lambda e: problems.append(f"pageerror: {e}"))
    page.on("console", lambda m: problems.append(f"{m.type}: {m.text}") if m.type == "error"
            and not re.search(r"/v1/reports/backlog\?|/ledger\?", (m.location or {}).get("url", "")) else None)
    assert page.goto(u + "/console").status == 200
    page.fill("#key", stack.admin_key)
    page.click("#use-key")
    expect(page.locator("body")).to_have_attribute("data-refreshed", re.compile(r"^\d+$"), timeout=30_000)
    expect(page.locator("#ops-section")).to_be_visible()

    page.fill("#peek-topic", "ops.dlq")
    page.fill("#peek-queue", "0")
    page.click("#peek-go")
    expect(page.locator("#peek-table tbody tr")).to_have_count(6, timeout=T * 1000)
    expect(page.locator('#peek-table td[data-field="body"][data-offset="0"]')).to_have_text("order 0")
    expect(page.locator('#peek-table td[data-field="dead_letter"][data-offset="5"]')
           ).to_have_text("rejected from ops.src#0@5")

    page.fill("#redrive-source", "ops.dlq")
    page.fill("#redrive-rate", "1")
    page.once("dialog", lambda d: d.dismiss())
    page.click("#redrive-go")
    expect(page.locator("#ops-status")).to_have_text("Redrive not started.")
    assert requests.get(f"{u}/v1/redrives", params={"source": "ops.dlq"}, headers=admin, timeout=T).json() == \
        {"redrives": []}
    page.once("dialog", lambda d: d.accept())
    page.click("#redrive-go")
    expect(page.locator("#ops-status")).to_have_text(re.compile(r"^Redrive [0-9a-f]+ running: \d of 6 moved\.$"),
                                                     timeout=T * 1000)
    rd = requests.get(f"{u}/v1/redrives", params={"source": "ops.dlq"}, headers=admin, timeout=T).json()["redrives"][0]
    expect(page.locator(f'td[data-redrive="{rd["id"]}"][data-field="total"]')).to_have_text("6")
    page.once("dialog", lambda d: d.accept())
    page.click(f'button[data-cancel="{rd["id"]}"]')
    expect(page.locator("#ops-status")).to_have_text(re.compile(r"^Redrive [0-9a-f]+ (cancelled|cancelling)\.$"),
                                                     timeout=T * 1000)
    rd = requests.get(f"{u}/v1/redrives/{rd['id']}", headers=admin, timeout=T).json()
    assert rd["status"] in ("cancelled", "cancelling") and rd["moved"] < 6
    expect(page.locator(f'td[data-redrive="{rd["id"]}"][data-field="status"]')).to_have_text(rd["status"])

    # the summary: the total backlog and dead-lettered count over every group and subscription, as
    # the offsets routes give them now (computed here the same way), and an age for the oldest
    def total() -> tuple[int, int]:
        topics = [t["name"] for t in requests.get(f"{u}/v1/topics", headers=admin, timeout=T).json()["topics"]]
        backlog = dead = 0
        for cl in requests.get(f"{u}/v1/clients", headers=admin, timeout=T).json()["clients"]:
            if cl["role"] != "consumer":
                continue
            if cl.get("mode") != "broadcasting":
                for t in topics:
                    if any(t == g or t.startswith(g + "/") for g in cl["topics"]):
                        o = requests.get(f"{u}/v1/groups/{cl['name']}/offsets", params={"topic": t}, headers=admin,
                                         timeout=T).json()
                        backlog += o["backlog"]
                        dead += sum(q["dead_lettered"] for q in o["queues"])
            subs = requests.get(f"{u}/v1/subscriptions", params={"subscriber": cl["name"]}, headers=admin,
                                timeout=T).json()["subscriptions"]
            for sub in subs:
                o = requests.get(f"{u}/v1/subscriptions/{sub['id']}/offsets", headers=admin, timeout=T).json()
                backlog += o["backlog"]
                dead += sum(q["dead_lettered"] for q in o["queues"])
        return backlog, dead
    backlog, dead = total()
    assert backlog >= rd["moved"] and dead >= 6  # ops-c has the moved messages to consume again
    summ = requests.get(f"{u}/v1/summary", headers=admin, timeout=T).json()
    assert (summ["totals"]["backlog"], summ["totals"]["dead_lettered"]) == (backlog, dead)  # the same sums
    expect(page.locator('[data-field="summary_backlog"]')).to_have_text(str(backlog), timeout=20_000)
    expect(page.locator('[data-field="summary_dead_lettered"]')).to_have_text(str(dead))
    expect(page.locator('[data-field="summary_oldest_age"]')).to_have_text(re.compile(r"^\d+(\.\d)? (s|min|h|d)$"))
    expect(page.locator('[data-field="summary_produce_rate"]')).to_have_text(re.compile(r" msg/s$"), timeout=20_000)

    screenshot(page, "console-ops")
    assert problems == [], problems
    page.close()
