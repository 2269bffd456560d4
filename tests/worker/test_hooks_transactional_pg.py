"""Hooks around transactional tasks (PostgreSQL), in an embedded burst Worker: the
attempt's outcome is ``Settled`` (its own transaction acked it), a raise is an ordinary
retry, and the worker hooks get the Worker. Hooks read ``current_job()``, pool included."""

from __future__ import annotations

from typing import Any

from sluicegate import App
from sluicegate.context import current_job
from sluicegate.hooks import outcome_name
from sluicegate.job import JobState
from sluicegate.worker import PoolSpec, Worker


def test_transactional_attempts_end_settled_or_retried(pg_url: str) -> None:
    app = App(broker=pg_url, config=False)
    heard: list[tuple[str, Any, str]] = []
    failures_left = {"n": 1}

    @app.task(transactional=True, max_attempts=3, backoff_base=0)
    def charge(fail_once: bool, connection: Any = None) -> int:
        connection.execute("SELECT 1")
        if fail_once and failures_left["n"]:
            failures_left["n"] -= 1
            raise RuntimeError("card declined")
        return current_job().attempts

    @app.before_job
    def before(job: Any) -> None:
        heard.append(("before_job", job.id, current_job().pool or "-"))

    @app.after_job
    def after(job: Any, outcome: Any) -> None:
        heard.append(("after_job", job.id, outcome_name(outcome)))

    @app.on_retry
    def retry(job: Any, outcome: Any) -> None:
        heard.append(("on_retry", job.id, outcome_name(outcome)))

    workers: list[Worker] = []
    app.on_worker_start(lambda worker: workers.append(worker))
    app.on_worker_stop(lambda worker: heard.append(("on_worker_stop", worker.worker_id, "-")))

    ok = charge.enqueue(False)
    flaky = charge.enqueue(True)
    worker = Worker(app, [PoolSpec("pay", ("default",), 1)], burst=True)
    worker.run()

    assert workers == [worker]
    assert [h for h in heard if h[1] == ok.id] == [
        ("before_job", ok.id, "pay"),
        ("after_job", ok.id, "settled"),
    ]
    assert [h for h in heard if h[1] == flaky.id] == [
        ("before_job", flaky.id, "pay"),
        ("after_job", flaky.id, "retried"),
        ("on_retry", flaky.id, "retried"),
        ("before_job", flaky.id, "pay"),
        ("after_job", flaky.id, "settled"),
    ]
    assert heard[-1] == ("on_worker_stop", worker.worker_id, "-")
    assert app.get_job(flaky.id).state is JobState.SUCCEEDED
    app.close()
