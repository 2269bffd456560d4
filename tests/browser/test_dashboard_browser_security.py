"""The dashboard's defences, seen from a real browser (Playwright driving Debian's
Chromium) against real ``sluicegate dashboard`` processes:

- hostile job data (script tags, attribute breakers, 100 KB strings, odd Unicode) in
  arguments, results, errors, unique keys and a worker's names renders as text on every
  page, also after the live refresh swaps regions in, and no script of it runs (nor is
  any blocked: the Content-Security-Policy is never even tested);
- a POST without the page's CSRF token, or with a wrong one, or from another site's
  form carrying a stolen one, gets 403 and changes nothing;
- ``--read-only`` shows no action and refuses a POST forged with a valid CSRF token.

That ``--host 0.0.0.0`` without a token refuses to start is tested on the command line
(tests/dashboard/test_dashboard_cli.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import pytest
from browser_kit import DashboardProcess, Watch, csp_events, expect

from sluicegate import App, Job
from sluicegate.brokers.base import WorkerInfo
from sluicegate.job import ErrorInfo
from sluicegate.limits import Limit
from sluicegate.metrics.recorder import WorkerMetrics
from support.fleet import sqlite_url

if TYPE_CHECKING:
    from playwright.sync_api import Page

SCRIPT = "<script>window.__pwned=1</script>"
BREAKER = '"><img src=x onerror="window.__pwned=1">'
SINGLE = "' onmouseover='window.__pwned=1' x='"
RTL = "\u202eright-to-left override\u202c"
ODD = [RTL, "zero\u200bwidth\u200djoiner", "e\u0301 combining, \U0001f600 emoji", "\x1b[31m"]
BIG = ("<i>" + "x" * 97) * 1000  # 100 KB, a thousand tags in it
KEY = BREAKER + SCRIPT
WORKER = "w-<b>1</b>"

# What a page's document holds that hostile data could have made: elements, handlers,
# scripts (only dashboard.js may be there), and what a script of it would have set.
INERT = """() => ({
  pwned: typeof window.__pwned,
  made: document.querySelectorAll("main img, main i, main b, main iframe").length,
  handlers: [...document.querySelectorAll("*")].filter(
    e => [...e.attributes].some(a => a.name.startsWith("on"))).length,
  scripts: [...document.scripts].map(s => new URL(s.src || "inline:", location.href).pathname),
})"""


@dataclass
class Site:
    base: str  # the dashboard
    read_only: str  # the same broker, served --read-only
    app: App
    ids: dict[str, int]


def seed(app: App) -> dict[str, int]:
    """Jobs whose every field a user sets is hostile, made as a worker makes them, and a
    worker whose id and host are; plus plain jobs for the action tests."""
    broker = app.broker
    broker.register_limits([Limit("storage", concurrency=2)])
    ids = {}

    def finish(job: Job, queue: str) -> Any:
        (got,) = broker.claim([queue], 1, 30.0, WORKER, BREAKER)
        assert got.job.id == job.id
        return got.claim

    args: list[Any] = [SCRIPT, BREAKER, SINGLE, *ODD, BIG]
    ids["args"] = app.enqueue("evil", args=args, kwargs={SCRIPT: BREAKER}, queue="email").id
    ids["key"] = app.enqueue("evil", args=[1], queue="email", unique_key=KEY).id
    job = app.enqueue("evil", args=[2], queue="burn", max_attempts=1)
    error = ErrorInfo(SCRIPT, BREAKER + " " + RTL + " " + BIG, f"Traceback\n{SCRIPT}\n{SINGLE}")
    broker.fail(finish(job, "burn"), error, None)
    ids["dead"] = job.id
    job = app.enqueue("evil", args=[3], queue="done")
    broker.ack(finish(job, "done"), json.dumps({"html": SCRIPT, "attr": BREAKER, "big": BIG}))
    ids["ok"] = job.id
    ids["csrf"] = app.enqueue("plain", args=[4], queue="csrf").id
    ids["ro_ready"] = app.enqueue("plain", args=[5], queue="ro").id
    job = app.enqueue("plain", args=[6], queue="ro-burn", max_attempts=1)
    broker.fail(finish(job, "ro-burn"), ErrorInfo("Boom", "plain failure"), None)
    ids["ro_dead"] = job.id
    publish_worker(app)
    return ids


def publish_worker(app: App) -> None:
    """A live worker's registry row, with the snapshot its recorder takes."""
    metrics = WorkerMetrics(WORKER, [(SCRIPT[:20], ["email"], "thread", 4)], 2.0, 30.0)
    metrics.busy_changed(SCRIPT[:20], 1)
    health = {"healthy": False, "loop_age_s": 0.0, "broker_ok": True, "stalled": [],
              "reasons": [SCRIPT, BREAKER]}  # fmt: skip
    snapshot = metrics.snapshot(health, held=0)
    pools = ({"name": "email", "queues": ["email"], "slots": 4, "model": "thread"},)
    app.broker.publish_worker(WorkerInfo(WORKER, BREAKER, 4242, SCRIPT, pools), 1,
                              json.dumps(snapshot))  # fmt: skip


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    folder = tmp_path_factory.mktemp("dashboard-browser-security")
    url = sqlite_url(folder / "jobs.db")
    app = App(broker=url, config=False)
    ids = seed(app)
    served = DashboardProcess(url, folder, name="dashboard")
    read_only = DashboardProcess(url, folder, "--read-only", name="dashboard-read-only")
    try:
        yield Site(served.ready().url, read_only.ready().url, app, ids)
    finally:
        served.stop()
        read_only.stop()
        app.close()


def csrf_of(page: Page) -> str:
    token = page.locator('meta[name="sluicegate-csrf"]').get_attribute("content")
    assert token
    return token


def assert_inert(page: Page) -> None:
    found = page.evaluate(INERT)
    assert found["pwned"] == "undefined", page.url
    assert found["made"] == 0 and found["handlers"] == 0, (page.url, found)
    assert found["scripts"] == ["/static/dashboard.js"], (page.url, found)
    assert csp_events(page) == [], page.url


def test_hostile_job_data_renders_as_text_and_runs_nothing(
    page: Page, watch: Watch, site: Site
) -> None:
    ids, base = site.ids, site.base
    # Where the live refresh swaps regions in, it must stay text too: the page's clock is
    # moved on to its next refresh there rather than waited for.
    live = {"/jobs", "/dead", f"/jobs/{ids['dead']}", "/workers"}
    page.clock.install()
    pages = ["/", "/jobs", "/jobs?state=succeeded", "/dead", "/workers", "/queues/email",
             *(f"/jobs/{ids[k]}" for k in ("args", "key", "dead", "ok"))]  # fmt: skip
    for path in pages:
        page.goto(base + path)
        expect(page.locator("main")).to_be_visible()
        if path in live:
            page.clock.run_for(2_100)
            expect(page.get_by_test_id("live-status")).to_contain_text("updated")
        assert_inert(page)

        if path == f"/jobs/{ids['args']}":
            shown = page.get_by_test_id("job-args")
            expect(shown).to_contain_text(SCRIPT)
            expect(shown).to_contain_text('<img src=x onerror=\\"window.__pwned=1\\">')
            expect(shown).to_contain_text(RTL)
            expect(shown).to_contain_text("e\u0301 combining, \U0001f600 emoji")
            expect(shown).to_contain_text("more characters)")  # 100 KB cut on the page
            assert len(shown.inner_text()) < 30_000
            assert shown.evaluate("e => getComputedStyle(e).unicodeBidi") == "isolate"
            expect(page.get_by_test_id("job-kwargs")).to_contain_text(SCRIPT)
        elif path == f"/jobs/{ids['key']}":
            expect(page.get_by_test_id("job-unique-key")).to_have_text(KEY)
        elif path == f"/jobs/{ids['dead']}":
            expect(page.get_by_test_id("job-error-type")).to_have_text(SCRIPT)
            expect(page.get_by_test_id("job-error-message")).to_contain_text(BREAKER + " " + RTL)
            expect(page.get_by_test_id("job-traceback")).to_contain_text(SCRIPT + "\n" + SINGLE)
            expect(page.get_by_test_id("job-worker")).to_contain_text(WORKER)
        elif path == f"/jobs/{ids['ok']}":
            expect(page.get_by_test_id("job-result")).to_contain_text(SCRIPT)
        elif path == "/dead":
            row = page.locator(f'[data-testid="job-row"][data-job-id="{ids["dead"]}"]')
            expect(row).to_contain_text(f"{SCRIPT}: {BREAKER}")
        elif path == "/workers":
            card = page.get_by_test_id("worker-card")
            expect(card.locator("h2")).to_have_text(WORKER)
            expect(card).to_contain_text(BREAKER)
            expect(card.get_by_test_id("worker-reasons")).to_contain_text(SCRIPT)

    # Searched by the hostile unique key: the box keeps it as its value, one job found.
    page.goto(f"{base}/jobs?q={quote(KEY)}")
    expect(page.get_by_test_id("filter-search")).to_have_value(KEY)
    expect(page.locator('[data-testid="jobs-list"] [data-testid="job-row"]')).to_have_count(1)
    expect(page.get_by_test_id("job-row")).to_have_attribute("data-job-id", str(ids["key"]))
    assert_inert(page)
    assert watch.csp_console() == []


def test_a_post_without_its_csrf_token_is_refused_and_changes_nothing(
    page: Page, watch: Watch, site: Site
) -> None:
    job_id, base, broker = site.ids["csrf"], site.base, site.app.broker
    page.goto(f"{base}/jobs/{job_id}")
    token = csrf_of(page)
    wrong = token[:-1] + ("1" if token[-1] == "0" else "0")
    cancel = f"{base}/jobs/{job_id}/cancel"
    refused = [
        (cancel, {}),
        (cancel, {"csrf": ""}),
        (cancel, {"csrf": wrong}),
        (f"{base}/jobs/cancel", {"state": "ready", "queue": "csrf"}),
        (f"{base}/limits/storage", {"concurrency": "9"}),
    ]
    for url, form in refused:
        answer = page.request.post(url, form={**form, "next": "/"}, max_redirects=0)
        assert answer.status == 403, (url, form, answer.status)
        assert "CSRF token is missing or stale" in answer.text()
    assert site.app.get_job(job_id).state.value == "ready"
    assert broker.limit_figures().limits["storage"].concurrency == 2

    # Another site's form, even carrying the token it stole: the browser does not send
    # the SameSite=Strict cookie the token is bound to.
    attacker = (
        f'<form method="post" action="{cancel}"><input type="hidden" name="csrf" '
        f'value="{token}"><button id="go">win a prize</button></form>'
    )
    page.route("http://attacker.test/", lambda route: route.fulfill(
        status=200, content_type="text/html", body=attacker))  # fmt: skip
    page.goto("http://attacker.test/")
    page.locator("#go").click()
    expect(page.locator("body")).to_contain_text("CSRF token is missing or stale")
    assert page.url == cancel
    assert [e for e in watch.take() if "403" not in e] == []
    assert site.app.get_job(job_id).state.value == "ready"

    # The same request with the page's own token works: the token was all that was missing.
    page.goto(f"{base}/jobs/{job_id}")
    answer = page.request.post(cancel, form={"csrf": csrf_of(page), "next": "/"},
                               max_redirects=0)  # fmt: skip
    assert answer.status == 303
    assert site.app.get_job(job_id).state.value == "cancelled"


def test_read_only_shows_no_action_and_refuses_a_forged_post(page: Page, site: Site) -> None:
    ids, base, app = site.ids, site.read_only, site.app
    for path in ["/", "/jobs?state=ready", "/dead", f"/jobs/{ids['ro_dead']}",
                 f"/jobs/{ids['ro_ready']}", "/limits"]:  # fmt: skip
        page.goto(base + path)
        expect(page.get_by_test_id("read-only-badge")).to_be_visible()
        expect(page.locator("main")).to_be_visible()
        expect(page.locator('form[method="post"]')).to_have_count(0)
        for action in ("job-retry", "job-cancel", "bulk-retry", "bulk-cancel", "limit-form",
                       "limit-reset"):  # fmt: skip
            expect(page.get_by_test_id(action)).to_have_count(0)
    expect(page.get_by_test_id("limits-table")).to_contain_text("storage")

    token = csrf_of(page)  # a valid token, as the page would send it
    forged = [
        (f"/jobs/{ids['ro_dead']}/retry", {}),
        (f"/jobs/{ids['ro_ready']}/cancel", {}),
        ("/jobs/retry", {"queue": "ro-burn"}),
        ("/jobs/cancel", {"state": "ready", "queue": "ro"}),
        ("/limits/storage", {"concurrency": "9"}),
        ("/limits/storage/reset", {}),
    ]
    for path, form in forged:
        answer = page.request.post(base + path, form={"csrf": token, "next": "/", **form},
                                   max_redirects=0)  # fmt: skip
        assert answer.status == 403, (path, answer.status)
        assert answer.text() == "the dashboard is read-only"
    assert app.get_job(ids["ro_dead"]).state.value == "dead"
    assert app.get_job(ids["ro_ready"]).state.value == "ready"
    assert app.broker.limit_figures().limits["storage"].concurrency == 2
