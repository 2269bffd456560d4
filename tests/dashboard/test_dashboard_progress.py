"""A job's progress on its dashboard page and in its JSON, on a real broker (SQLite and
PostgreSQL), written by a real heartbeat; a job that never reported shows none."""

from __future__ import annotations

from dash_kit import client

from sluicegate import App
from sluicegate.job import Progress
from sluicegate.limits import Limit
from support.brokers import over_brokers

pytestmark = over_brokers


def test_job_page_shows_progress(dash_app: App) -> None:
    broker = dash_app.broker
    dash_app.configure()
    broker.register_limits([Limit("storage", concurrency=1)])  # the task names it
    first, second = (dash_app.tasks["store"].enqueue(n) for n in (1, 2))
    (holding,) = broker.claim(["files"], 1, 30.0, "w-files", "host-a")
    broker.start(holding.claim)
    message = "copying <2 of 5> & more"
    broker.heartbeat([holding.claim], 30.0, {holding.claim: Progress(0.4, message)})
    silent = second if holding.job.id == first.id else first

    c = client(dash_app)
    page = c.get(f"/jobs/{holding.job.id}").text
    shown = page.split('data-testid="job-progress"')[1].split("</dd>")[0]
    assert '<progress max="1" value="0.4">' in shown
    assert 'data-testid="job-progress-percent">40%<' in shown
    assert 'data-testid="job-progress-message">copying &lt;2 of 5&gt; &amp; more<' in shown
    assert "reported " in shown
    assert c.get(f"/jobs/{holding.job.id}/json").json()["progress"]["message"] == message

    assert 'data-testid="job-progress"' not in c.get(f"/jobs/{silent.id}").text
    assert c.get(f"/jobs/{silent.id}/json").json()["progress"] is None
