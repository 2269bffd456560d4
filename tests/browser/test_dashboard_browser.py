"""The dashboard in a real browser (Playwright driving Debian's Chromium) against a real
``sluicegate dashboard`` process and real ``sluicegate worker`` processes: every page
shows its content and its links and filters lead where they say; a dead job retried
through the UI runs again and succeeds; a ready job cancelled through the UI (after the
confirmation) is cancelled; a limit changed through its form holds in the broker; and
the overview follows a worker draining a queue without being reloaded.

One dashboard and one worker serve the whole module on a SQLite file (each test uses a
queue of its own); one test runs the retry on PostgreSQL."""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from browser_kit import DashboardProcess, expect

from sluicegate import App, Job
from support.brokers import broker_url
from support.fleet import Fleet, sqlite_url, states, wait_for

if TYPE_CHECKING:
    from playwright.sync_api import Page

APP = "browserapp:app"
POOLS = ["repair=repair:2", "store=store:2"]


@dataclass
class Site:
    base: str  # the dashboard's address
    app: App  # a producer on the dashboard's broker
    fleet: Fleet
    folder: Path


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    folder = tmp_path_factory.mktemp("dashboard-browser")
    url = sqlite_url(folder / "jobs.db")
    app = App(broker=url, config=False)
    app.broker.stats()  # the schema exists before two processes open the file
    fleet = Fleet(url, folder)
    server = DashboardProcess(url, folder)
    try:
        fleet.start(POOLS, app=APP)
        yield Site(server.ready().url, app, fleet, folder)
    finally:
        server.stop()
        fleet.close()
        app.close()


def job_ids(page: Page) -> list[int]:
    """The ids of the listed jobs, read in one go (the live refresh may swap the rows)."""
    found = page.locator('[data-testid="jobs-list"] [data-testid="job-row"]').evaluate_all(
        "rows => rows.map(r => r.dataset.jobId)"
    )
    return [int(x) for x in found]


def wait_state(app: App, job: Job, state: str) -> None:
    wait_for(lambda: states(app, [job]) == [state], timeout=30,
             what=lambda: f"job {job.id} {state}, it is {states(app, [job])[0]}")  # fmt: skip


def test_every_page_shows_its_content(page: Page, site: Site) -> None:
    app = site.app
    done = [app.enqueue("store", args=[n], queue="store") for n in (1, 2, 3)]
    dead = app.enqueue("repair", args=[str(site.folder / "never")], queue="repair",
                       max_attempts=1)  # fmt: skip
    waiting = app.broker.enqueue([app.build_spec("nap", [n], queue="pages") for n in range(55)])
    keyed = app.enqueue("nap", args=[99], queue="pages", unique_key="order-42")
    later = app.enqueue("nap", args=[0], queue="pages", delay=3600)
    for job in done:
        wait_state(app, job, "succeeded")
    wait_state(app, dead, "dead")

    # Overview: the queue's backlog, the worker's pools, the worker, the limit.
    page.goto(site.base + "/")
    expect(page).to_have_title(re.compile(r"^Overview"))
    queue_row = page.locator('[data-testid="queue-row"][data-queue="pages"]')
    expect(queue_row.get_by_test_id("queue-ready")).to_have_text("56")
    expect(page.locator('[data-testid="pool-row"][data-pool="repair"]')).to_be_visible()
    expect(page.locator('[data-testid="pool-row"][data-pool="store"]')).to_be_visible()
    expect(page.locator('[data-testid="worker-row"][data-status="live"]').first).to_be_visible()
    expect(page.locator('[data-testid="limit-row"][data-limit="storage"]')).to_be_visible()

    # Queue page, reached from the overview's link.
    queue_row.get_by_test_id("queue-link").click()
    expect(page).to_have_url(re.compile(r"/queues/pages$"))
    expect(page.get_by_test_id("queue-name")).to_contain_text("pages")
    expect(page.get_by_test_id("queue-ready")).to_have_text("56")

    # Jobs of the queue, filtered by state, two pages of them by the older-page link.
    page.get_by_test_id("queue-jobs-link").click()
    expect(page).to_have_url(re.compile(r"/jobs\?queue=pages$"))
    page.get_by_test_id("filter-state").select_option("ready")
    page.get_by_test_id("filter-submit").click()
    expect(page).to_have_url(re.compile(r"state=ready"))
    expect(page.locator('[data-testid="state-tab"][data-state="ready"]')).to_contain_text("56")
    rows = page.locator('[data-testid="jobs-list"] [data-testid="job-row"]')
    expect(rows).to_have_count(50)
    expect(page.locator('[data-testid="job-row"]:not([data-state="ready"])')).to_have_count(0)
    first = job_ids(page)
    page.get_by_test_id("page-older").click()
    expect(page).to_have_url(re.compile(r"before=\d+"))
    expect(rows).to_have_count(6)
    older = job_ids(page)
    expect(page.get_by_test_id("page-newest")).to_be_visible()
    expect(page.get_by_test_id("page-older")).to_have_count(0)
    assert first == sorted(first, reverse=True) and max(older) < min(first)
    assert set(first) | set(older) == {j.id for j in [*waiting, keyed]}

    # Searched by unique key (one row), then by id (the job's page).
    page.get_by_test_id("filter-search").fill("order-42")
    page.get_by_test_id("filter-submit").click()
    expect(rows).to_have_count(1)
    assert job_ids(page) == [keyed.id]
    page.get_by_test_id("filter-search").fill(str(later.id))
    page.get_by_test_id("filter-submit").click()
    expect(page).to_have_url(re.compile(rf"/jobs/{later.id}$"))
    expect(page.get_by_test_id("job-state")).to_have_attribute("data-state", "scheduled")

    # A succeeded job: its result, the worker that ran it, its timeline.
    page.goto(f"{site.base}/jobs/{done[1].id}")
    expect(page).to_have_title(re.compile(rf"^Job {done[1].id}\b"))
    expect(page.get_by_test_id("job-state")).to_have_attribute("data-state", "succeeded")
    expect(page.get_by_test_id("job-task")).to_have_text("store")
    expect(page.get_by_test_id("job-result")).to_have_text("4")
    worker = page.get_by_test_id("job-worker")  # the worker that last held it, still live
    expect(worker).to_contain_text(re.compile(r"\blive on \S+ \(last\)"))
    expect(page.locator('[data-testid="timeline-entry"][data-event="succeeded"]')).to_have_count(1)

    # Dead jobs, filtered by queue, and the dead job's error and traceback.
    page.get_by_test_id("nav-dead").click()
    expect(page).to_have_title(re.compile(r"^Dead jobs"))
    dead_row = page.locator(f'[data-testid="job-row"][data-job-id="{dead.id}"]')
    expect(dead_row).to_contain_text("RuntimeError: ")
    expect(dead_row).to_contain_text("never is missing")
    page.get_by_test_id("filter-queue").select_option("repair")
    page.get_by_test_id("filter-submit").click()
    expect(page).to_have_url(re.compile(r"/dead\?.*queue=repair"))
    expect(page.locator('[data-testid="job-row"]:not([data-state="dead"])')).to_have_count(0)
    dead_row.get_by_test_id("job-link").click()
    expect(page.get_by_test_id("job-error-type")).to_have_text("RuntimeError")
    expect(page.get_by_test_id("job-traceback")).to_contain_text("raise RuntimeError")

    # Workers: the module's worker, live and healthy, with its two pools.
    page.get_by_test_id("nav-workers").click()
    card = page.locator('[data-testid="worker-card"][data-status="live"]').first
    expect(card.get_by_test_id("worker-health")).to_contain_text("healthy")
    expect(card.locator('[data-testid="worker-pool"][data-pool="repair"]')).to_contain_text("/2")
    expect(card.locator('[data-testid="worker-pool"][data-pool="store"]')).to_be_visible()
    expect(page.get_by_test_id("hosts-table")).to_be_visible()

    # Limits: the limit the worker registered, and its form.
    page.get_by_test_id("nav-limits").click()
    limit_row = page.locator('[data-testid="limit-row"][data-limit="storage"]')
    expect(limit_row).to_contain_text("2 at once")
    expect(limit_row.get_by_test_id("limit-in-use")).to_have_text(re.compile(r"^\d+/2$"))
    expect(page.locator('[data-testid="limit-form"][data-limit="storage"]')).to_be_visible()


def test_a_dead_job_retried_through_the_ui_succeeds(page: Page, site: Site) -> None:
    flag = site.folder / "flag-retry"
    job = site.app.enqueue("repair", args=[str(flag)], queue="repair", max_attempts=1)
    wait_state(site.app, job, "dead")

    page.goto(f"{site.base}/jobs/{job.id}")
    state = page.get_by_test_id("job-state")
    expect(state).to_have_attribute("data-state", "dead")
    expect(page.get_by_test_id("job-error-message")).to_contain_text("flag-retry is missing")
    flag.touch()  # the cause fixed
    page.get_by_test_id("job-actions").get_by_test_id("job-retry").click()
    expect(page.get_by_test_id("flash")).to_have_text(f"job {job.id} is ready again")
    page.evaluate("window.__sameDocument = true")
    # The worker runs it again; the live refresh shows the outcome without a reload.
    expect(state).to_have_attribute("data-state", "succeeded")
    expect(page.locator('[data-testid="timeline-entry"][data-event="succeeded"]')).to_be_visible()
    assert page.evaluate("window.__sameDocument") is True
    page.reload()
    expect(page.get_by_test_id("job-result")).to_have_text('"repaired"')
    expect(page.get_by_test_id("flash")).to_have_count(0)  # a message shows once
    assert states(site.app, [job]) == ["succeeded"]


def test_a_ready_job_is_cancelled_after_the_confirmation(page: Page, site: Site) -> None:
    job = site.app.enqueue("nap", args=[0], queue="parked")  # no worker serves "parked"
    page.goto(f"{site.base}/jobs?state=ready&queue=parked")
    row = page.locator(f'[data-testid="job-row"][data-job-id="{job.id}"]')
    asked: list[str] = []

    def answer(accept: bool) -> None:
        def handle(dialog: object) -> None:
            asked.append(dialog.message)  # type: ignore[attr-defined]
            if accept:
                dialog.accept()  # type: ignore[attr-defined]
            else:
                dialog.dismiss()  # type: ignore[attr-defined]

        page.once("dialog", handle)

    answer(accept=False)  # the confirmation, declined: nothing is sent
    row.get_by_test_id("job-cancel").click()
    assert asked == [f"Cancel job {job.id}?"]
    expect(row).to_be_visible()
    assert states(site.app, [job]) == ["ready"]

    answer(accept=True)
    row.get_by_test_id("job-cancel").click()
    expect(page.get_by_test_id("flash")).to_have_text(f"job {job.id} is cancelled")
    expect(row).to_have_count(0)  # back on the list of ready jobs, where it no longer is
    assert states(site.app, [job]) == ["cancelled"]
    page.goto(f"{site.base}/jobs/{job.id}")
    expect(page.get_by_test_id("job-state")).to_have_attribute("data-state", "cancelled")
    expect(page.locator('[data-testid="timeline-entry"][data-event="cancelled"]')).to_be_visible()


def test_a_limit_changed_through_its_form_holds_in_the_broker(page: Page, site: Site) -> None:
    broker = site.app.broker
    wait_for(lambda: "storage" in broker.limit_figures().limits, timeout=30,
             what="the worker to register its limit")  # fmt: skip
    page.goto(site.base + "/limits")
    form = page.locator('[data-testid="limit-form"][data-limit="storage"]')
    in_use = page.locator('[data-testid="limit-row"][data-limit="storage"]').get_by_test_id(
        "limit-in-use"
    )
    expect(form.get_by_test_id("limit-concurrency")).to_have_value("2")
    form.get_by_test_id("limit-concurrency").fill("5")
    form.get_by_test_id("limit-submit").click()
    expect(page.get_by_test_id("flash")).to_contain_text("limit storage: ")
    expect(page.get_by_test_id("flash")).to_have_attribute("data-kind", "ok")
    expect(in_use).to_have_text(re.compile(r"/5$"))
    expect(form.get_by_test_id("limit-concurrency")).to_have_value("5")
    assert broker.limit_figures().limits["storage"].concurrency == 5

    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_test_id("limit-reset").click()
    expect(page.get_by_test_id("flash")).to_contain_text("limit storage reset to ")
    expect(in_use).to_have_text(re.compile(r"/2$"))
    assert broker.limit_figures().limits["storage"].concurrency == 2

    form.get_by_test_id("limit-concurrency").fill("0")  # the browser's own check refuses it
    form.get_by_test_id("limit-submit").click()
    assert form.get_by_test_id("limit-concurrency").evaluate("i => !i.validity.valid")
    assert broker.limit_figures().limits["storage"].concurrency == 2


def test_the_overview_follows_a_worker_draining_a_queue(page: Page, site: Site) -> None:
    app = site.app
    jobs = app.broker.enqueue([app.build_spec("nap", [0.05], queue="drain") for _ in range(24)])
    page.goto(site.base + "/")
    ready = page.locator('[data-testid="queue-row"][data-queue="drain"]').get_by_test_id(
        "queue-ready"
    )
    expect(ready).to_have_text("24")
    page.evaluate("window.__sameDocument = true")

    site.fleet.start(["drain=drain:4"], app=APP)
    # Without a reload: the live refresh swaps in the worker's pool and the empty queue.
    expect(page.locator('[data-testid="pool-row"][data-pool="drain"]')).to_be_visible()
    expect(ready).to_have_text("0")
    expect(page.get_by_test_id("live-status")).to_contain_text("updated")
    assert page.evaluate("window.__sameDocument") is True
    wait_for(lambda: all(s == "succeeded" for s in states(app, jobs)), timeout=30,
             what="the drained jobs to succeed")  # fmt: skip


def test_on_postgresql_a_dead_job_is_retried_from_the_dead_page(page: Page, tmp_path: Path) -> None:
    url = broker_url("postgresql", tmp_path)  # given back when the test ends
    # A short path: the dead page's cell cuts a long error, and the test folder's path
    # grows with the runner's (pytest-xdist adds popen-gwN/).
    flag = Path(tempfile.mkdtemp(prefix="sg-")) / "flag-pg"
    app = App(broker=url, config=False)
    app.broker.stats()  # the schema exists before the processes open it
    fleet = Fleet(url, tmp_path)
    server = DashboardProcess(url, tmp_path)
    try:
        fleet.start(["repair=repair:1"], app=APP)
        base = server.ready().url
        job = app.enqueue("repair", args=[str(flag)], queue="repair", max_attempts=1)
        wait_state(app, job, "dead")

        page.goto(base + "/dead")
        expect(page.get_by_test_id("broker-url")).to_contain_text("postgresql://")
        row = page.locator(f'[data-testid="job-row"][data-job-id="{job.id}"]')
        expect(row).to_contain_text("flag-pg is missing")
        flag.touch()
        row.get_by_test_id("job-retry").click()
        expect(page.get_by_test_id("flash")).to_have_text(f"job {job.id} is ready again")
        expect(row).to_have_count(0)
        page.goto(f"{base}/jobs/{job.id}")
        expect(page.get_by_test_id("job-state")).to_have_attribute("data-state", "succeeded")
        wait_state(app, job, "succeeded")
    finally:
        server.stop()
        fleet.close()
        app.close()
        shutil.rmtree(flag.parent, ignore_errors=True)
