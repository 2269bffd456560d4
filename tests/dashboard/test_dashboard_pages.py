"""Every page of the dashboard on a real broker (SQLite and PostgreSQL): with jobs in
every state and a live worker, and with nothing at all; the jobs listing's filters,
search and keyset pages; and one job's page in full."""

from __future__ import annotations

import json
import re

import pytest
from dash_kit import TRACEBACK, WORKER, client, job_ids, seed

from sluicegate import App
from sluicegate.job import JobState
from support.brokers import over_brokers

pytestmark = over_brokers

PAGES = ["/", "/jobs", "/dead", "/workers", "/limits"]


def test_every_page_renders_with_data(dash_app: App) -> None:
    jobs = seed(dash_app)
    c = client(dash_app)
    for path in [*PAGES, "/queues/email", "/queues/reports"]:
        page = c.get(path)
        assert page.status_code == 200, (path, page.text[:500])
        assert page.headers["content-type"].startswith("text/html")
    for state in JobState:
        assert c.get(f"/jobs?state={state.value}").status_code == 200
    for job in [jobs.succeeded, jobs.dead, jobs.running, jobs.unique, jobs.scheduled]:
        assert c.get(f"/jobs/{job.id}").status_code == 200
        assert c.get(f"/jobs/{job.id}/json").json()["id"] == job.id

    home = c.get("/").text
    assert re.search(r'data-testid="queue-row" data-queue="email"', home)
    assert re.search(r'data-testid="queue-row" data-queue="reports"', home)
    assert 'data-testid="pool-row" data-pool="email"' in home
    assert f'data-testid="worker-row" data-worker="{WORKER}"' in home
    assert 'data-testid="limit-row" data-limit="storage"' in home
    assert 'data-testid="concurrency-row" data-pool="email"' in home
    for chart in ("chart-completions", "chart-oldest-age", "chart-utilisation"):
        assert f'data-testid="{chart}"' in home
    # the worker's own per-minute history (its snapshot) draws the charts at once
    completions = home.split('data-testid="chart-completions"', 1)[1].split("</svg>", 1)[0]
    assert 'class="series series-0"' in completions and "no figures yet" not in completions
    # email: ready 3, running 1, succeeded 1, dead 1 (from the broker's counters)
    row = home.split('data-queue="email"', 1)[1].split("</tr>", 1)[0]
    assert 'data-testid="queue-ready">3<' in row
    assert "1/4" in home  # the pool's busy/slots


def test_every_page_renders_empty(dash_app: App) -> None:
    c = client(dash_app)
    for path in PAGES:
        page = c.get(path)
        assert page.status_code == 200, (path, page.text[:500])
    assert 'data-testid="queues-empty"' in c.get("/").text
    assert 'data-testid="jobs-empty"' in c.get("/jobs").text
    assert 'data-testid="jobs-empty"' in c.get("/dead").text
    assert 'data-testid="workers-empty"' in c.get("/workers").text
    assert 'data-testid="limits-empty"' in c.get("/limits").text
    assert c.get("/queues/email").status_code == 404
    assert c.get("/jobs/12345").status_code == 404
    to = c.get("/login?next=/workers")  # no token: nothing to sign in to
    assert to.status_code == 303 and to.headers["location"] == "/workers"


def test_filters_by_state_queue_and_task(dash_app: App) -> None:
    jobs = seed(dash_app)
    c = client(dash_app)
    dead = c.get("/dead").text
    assert job_ids(dead) == [jobs.dead.id]
    assert job_ids(c.get("/jobs?state=succeeded").text) == [jobs.succeeded.id]
    assert job_ids(c.get("/jobs?state=running").text) == [jobs.running.id]
    assert job_ids(c.get("/jobs?queue=reports").text) == [jobs.scheduled.id]
    assert job_ids(c.get("/jobs?task=build_report").text) == [jobs.scheduled.id]
    assert job_ids(c.get("/jobs?state=ready&queue=email").text) == sorted(
        [j.id for j in [*jobs.ready, jobs.unique]], reverse=True
    )
    assert job_ids(c.get("/jobs?state=ready&queue=reports").text) == []
    assert job_ids(c.get("/dead?queue=reports").text) == []
    # The state tabs count from the broker's counters.
    tabs = c.get("/jobs?queue=email").text
    assert re.search(r'data-state="ready"[^>]*>ready <span class="count">3</span>', tabs)
    assert c.get("/jobs?state=nonsense").status_code == 400
    assert c.get("/jobs?before=abc").status_code == 400


def test_search_by_id_and_unique_key(dash_app: App) -> None:
    jobs = seed(dash_app)
    c = client(dash_app)
    found = c.get(f"/jobs?q={jobs.dead.id}")
    assert found.status_code == 303
    assert found.headers["location"] == f"/jobs/{jobs.dead.id}"
    assert job_ids(c.get("/jobs?q=user-7").text) == [jobs.unique.id]
    assert job_ids(c.get("/jobs?q=no-such-key").text) == []
    assert job_ids(c.get("/jobs?q=999999").text) == []  # no such id, nor such a key


def test_keyset_pages_cover_every_job_once(dash_app: App) -> None:
    for n in range(130):
        dash_app.enqueue("page", args=[n], queue="paging")
    c = client(dash_app)
    seen: list[int] = []
    url = "/jobs?queue=paging"
    pages = 0
    while url:
        page = c.get(url).text
        ids = job_ids(page)
        assert ids == sorted(ids, reverse=True) and len(ids) <= 50
        assert not seen or ids[0] < seen[-1]  # strictly older than the page before
        seen += ids
        pages += 1
        older = re.search(r'href="([^"]+)" data-testid="page-older"', page)
        url = older.group(1).replace("&amp;", "&") if older else ""
        if pages > 1:
            assert 'data-testid="page-newest"' in page
    assert pages == 3
    assert len(seen) == len(set(seen)) == 130


def test_job_page_shows_arguments_result_error_and_timeline(dash_app: App) -> None:
    jobs = seed(dash_app)
    c = client(dash_app)
    dead = c.get(f"/jobs/{jobs.dead.id}").text
    assert 'data-testid="job-state" data-state="dead"' in dead
    assert "&#34;bad&#34;" in dead.split('data-testid="job-args"')[1]
    assert "&#34;retry&#34;: false" in dead.split('data-testid="job-kwargs"')[1]
    assert 'data-testid="job-error-type">ValueError<' in dead
    assert "bad address" in dead
    assert TRACEBACK.splitlines()[1].replace('"', "&#34;") in dead
    assert 'data-testid="job-attempts">1 of 1<' in dead
    events = re.findall(r'data-testid="timeline-entry" data-event="(\w+)"', dead)
    assert events == ["enqueued", "started", "failed", "dead"]  # failed: from its history
    failed = dead.split('data-event="failed"', 1)[1].split("</li>", 1)[0]
    assert "ValueError" in failed and "no attempts left" in failed
    assert 'data-testid="job-retry"' in dead

    ok = c.get(f"/jobs/{jobs.succeeded.id}").text
    assert "&#34;sent&#34;: true" in ok.split('data-testid="job-result"')[1]
    assert 'data-testid="job-retry"' not in ok and 'data-testid="job-cancel"' not in ok

    running = c.get(f"/jobs/{jobs.running.id}").text
    worker = running.split('data-testid="job-worker"')[1].split("</dd>")[0]
    assert WORKER in worker and "status-live" in worker and "host-a" in worker
    assert 'data-testid="job-cancel"' in running

    assert "user-7" in c.get(f"/jobs/{jobs.unique.id}").text
    raw = c.get(f"/jobs/{jobs.dead.id}/json")
    assert raw.headers["content-type"].startswith("application/json")
    assert raw.json()["last_error"]["traceback"] == TRACEBACK


def test_job_waiting_for_a_limit_says_which(dash_app: App) -> None:
    broker = dash_app.broker
    dash_app.configure()
    from sluicegate.limits import Limit

    broker.register_limits([Limit("storage", concurrency=1)])
    first = dash_app.tasks["store"].enqueue(1)
    second = dash_app.tasks["store"].enqueue(2)
    (holding,) = broker.claim(["files"], 2, 30.0, "w-files", "host-a")  # one unit: one job
    assert holding.job.id == first.id
    page = client(dash_app).get(f"/jobs/{second.id}").text
    waiting = page.split('data-testid="job-waiting-for">')[1].split("<")[0]
    assert "storage" in waiting
    assert 'data-testid="job-limits">storage<' in page
    limits = client(dash_app).get("/limits").text
    row = limits.split('data-testid="limit-row" data-limit="storage"')[1].split("</tr>")[0]
    assert 'data-testid="limit-in-use">1/1<' in row
    assert 'data-testid="limit-waiting">1<' in row
    assert "bar-hot" in row  # saturated


def test_workers_page_lists_held_jobs_and_health(dash_app: App) -> None:
    jobs = seed(dash_app)
    page = client(dash_app).get("/workers").text
    card = page.split(f'data-testid="worker-card" data-worker="{WORKER}"')[1].split("</article>")[0]
    assert 'data-status="live"' in page
    assert "healthy" in card
    assert f'data-testid="held-job" data-job-id="{jobs.running.id}"' in card
    assert 'data-testid="worker-pool" data-pool="email"' in card


def test_live_refresh_gets_the_main_region_only(dash_app: App) -> None:
    seed(dash_app)
    c = client(dash_app)
    for path in ["/", "/jobs", "/workers", "/limits", "/queues/email"]:
        part = c.get(path, headers={"X-Sluicegate-Live": "1"})
        assert part.status_code == 200
        assert "<html" not in part.text and "data-live" in part.text
        whole = c.get(path).text
        regions = re.findall(r'id="([\w-]+)" data-live', whole)
        assert regions and regions == re.findall(r'id="([\w-]+)" data-live', part.text)


def test_json_view_keeps_what_the_page_cuts(dash_app: App) -> None:
    big = "x" * 100_000
    job = dash_app.enqueue("send", args=[big], queue="email")
    c = client(dash_app)
    page = c.get(f"/jobs/{job.id}").text
    assert "more characters" in page
    assert len(page) < 60_000
    assert json.loads(c.get(f"/jobs/{job.id}/json").text)["args"] == [big]


@pytest.mark.parametrize("path", ["/jobs/0", "/queues/nothing-here"])
def test_missing_things_are_404_pages(dash_app: App, path: str) -> None:
    page = client(dash_app).get(path)
    assert page.status_code == 404
    assert 'data-testid="error-message"' in page.text


def test_every_page_names_its_icon(dash_app: App) -> None:
    """A page without one makes browsers ask for /favicon.ico, a 404 on every visit."""
    c = client(dash_app)
    for path in [*PAGES, "/login"]:
        page = c.get(path, follow_redirects=True)
        found = re.search(r'<link rel="icon" type="image/svg\+xml" href="([^"]+)">', page.text)
        assert found, path
        icon = c.get(found.group(1))
        assert icon.status_code == 200
        assert icon.headers["content-type"].startswith("image/svg+xml")
