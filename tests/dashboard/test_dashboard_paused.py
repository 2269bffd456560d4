"""A paused queue is marked on the overview and on its queue page (SQLite and PostgreSQL)."""

from __future__ import annotations

from dash_kit import client

from sluicegate import App
from support.brokers import over_brokers

pytestmark = over_brokers


def test_paused_queue_is_marked(dash_app: App) -> None:
    dash_app.enqueue("send", queue="email")
    dash_app.enqueue("build", queue="reports")
    dash_app.pause_queue("email", by="ops@deploy")
    c = client(dash_app)
    home = c.get("/").text
    email = home.split('data-queue="email"', 1)[1].split("</tr>", 1)[0]
    reports = home.split('data-queue="reports"', 1)[1].split("</tr>", 1)[0]
    assert 'data-testid="queue-paused"' in email
    assert 'title="paused by ops@deploy"' in email
    assert 'data-testid="queue-paused"' not in reports
    page = c.get("/queues/email").text
    assert 'data-testid="queue-paused"' in page and "ops@deploy" in page
    assert "queues resume email" in page
    assert 'data-testid="queue-paused"' not in c.get("/queues/reports").text

    dash_app.resume_queue("email")
    c = client(dash_app)  # a fresh dashboard: no cached system read
    assert 'data-testid="queue-paused"' not in c.get("/").text
