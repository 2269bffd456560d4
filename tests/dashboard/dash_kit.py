"""What the dashboard tests share: an App on a real broker (SQLite file, or a fresh
PostgreSQL schema where a module runs ``over_brokers``), jobs in every state made through
the broker's own verbs, a worker's registry row with a real metrics snapshot, and a
client that reads the CSRF field off a page before it posts."""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from typing import Any

from starlette.testclient import TestClient

from sluicegate import App
from sluicegate.brokers.base import WorkerInfo
from sluicegate.job import ErrorInfo, Job, JobId
from sluicegate.limits import Limit
from sluicegate.metrics.recorder import WorkerMetrics
from sluicegate.testing import FakeClock

WORKER = "w-1a2b3c"
TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "tasks.py", line 12, in send\n'
    "    raise ValueError(address)\n"
    "ValueError: bad address"
)
CSRF = re.compile(r'name="sluicegate-csrf" content="([0-9a-f]+)"')


@dataclass
class Seeded:
    succeeded: Job
    dead: Job
    running: Job
    ready: list[Job]
    unique: Job
    scheduled: Job


def seed(app: App) -> Seeded:
    """One job in each state the pages show, made as a worker makes them."""
    broker = app.broker
    broker.register_limits([Limit("storage", concurrency=1)])

    def claimed(queue: str, worker: str = "w-old") -> Any:
        (got,) = broker.claim([queue], 1, 30.0, worker, "host-a")
        return got.claim

    ok = app.enqueue("send", args=[1], queue="email")
    broker.ack(claimed("email"), json.dumps({"sent": True, "to": "a@example.com"}))
    dead = app.enqueue("send", args=["bad"], kwargs={"retry": False}, queue="email",
                       max_attempts=1)  # fmt: skip
    broker.fail(claimed("email"), ErrorInfo("ValueError", "bad address", TRACEBACK), None)
    running = app.enqueue("send", args=[3], queue="email")
    claim = claimed("email", WORKER)
    broker.start(claim)
    ready = [app.enqueue("send", args=[n], queue="email") for n in (4, 5)]
    unique = app.enqueue("send", args=[6], queue="email", unique_key="user-7")
    scheduled = app.enqueue("build_report", args=[], queue="reports", delay=3600)
    publish_worker(app)
    get = app.get_job
    return Seeded(
        get(ok.id), get(dead.id), get(running.id), [get(j.id) for j in ready], get(unique.id),
        get(scheduled.id),
    )  # fmt: skip


def publish_worker(app: App, worker: str = WORKER, host: str = "host-a") -> None:
    """A live worker's registry row with a snapshot its recorder took (one busy slot)."""
    # Recorded over the last 30 s (a clock and a wall clock moved together), so its
    # per-minute history has figures for the charts.
    clock = FakeClock(time.monotonic() - 30)
    offset = time.time() - time.monotonic()
    pools = [("email", ["email"], "thread", 4)]
    metrics = WorkerMetrics(worker, pools, 2.0, 30.0, clock=clock, wall=lambda: clock() + offset)
    metrics.busy_changed("email", 1)
    metrics.started("send", "email", 0.01)
    metrics.finished("email", "send", "email", 0.2, "succeeded", 1)
    metrics.finished("email", "send", "email", 0.4, "dead", 2)
    clock.advance(30)
    health = {"healthy": True, "loop_age_s": 0.0, "broker_ok": True, "stalled": [],
              "reasons": []}  # fmt: skip
    snapshot = metrics.snapshot(health, held=1)
    pools = ({"name": "email", "queues": ["email"], "slots": 4, "model": "thread"},)
    info = WorkerInfo(worker, host, 4242, "0.1.0", pools)
    app.broker.publish_worker(info, 1, json.dumps(snapshot))


def client(app: App, **options: Any) -> TestClient:
    from sluicegate.dashboard import asgi_app

    return TestClient(asgi_app(app, **options), follow_redirects=False)


def csrf_of(c: TestClient, path: str = "/") -> str:
    page = c.get(path)
    assert page.status_code == 200, page.text
    found = CSRF.search(page.text)
    assert found, "no CSRF token on the page"
    return found.group(1)


def post(c: TestClient, path: str, data: dict[str, str] | None = None, page: str = "/") -> Any:
    """POST a form as the page would: with its CSRF field (read from ``page``)."""
    form = {"csrf": csrf_of(c, page), **(data or {})}
    return c.post(path, data=form)


def job_ids(html: str) -> list[int]:
    return [int(x) for x in re.findall(r'data-testid="job-row" data-job-id="(\d+)"', html)]


def state_of(app: App, job_id: int) -> str:
    return app.get_job(JobId(job_id)).state.value
