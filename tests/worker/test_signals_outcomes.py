"""What counts as an outcome in the signals: a timeout is a timeout whichever model
enforced it (thread, process, async), and an outcome the broker refused (the lease was
lost meanwhile) is neither counted nor logged as what the worker thought it was."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator

import deadlineapp
import pytest

from sluicegate import App
from sluicegate.worker import PoolSpec, Worker
from support.fleet import wait_for


@pytest.fixture
def deadline_app(db_url: str) -> Iterator[App]:
    deadlineapp.app.use_broker(db_url)
    yield deadlineapp.app
    deadlineapp.app.close()


def test_timeouts_count_in_every_model(deadline_app: App, caplog: pytest.LogCaptureFixture) -> None:
    tasks = [deadlineapp.overrun_thread, deadlineapp.overrun_process, deadlineapp.overrun_async]
    jobs = [task.enqueue() for task in tasks]
    pools = [
        PoolSpec("t", ("overrun_thread",), 1, "thread"),
        PoolSpec("p", ("overrun_process",), 1, "process"),
        PoolSpec("a", ("overrun_async",), 1, "async"),
    ]
    worker = Worker(deadline_app, pools, publish_interval=0.1, lease=10.0)
    thread = threading.Thread(target=worker.run, daemon=True)
    caplog.set_level(logging.INFO, logger="sluicegate.jobs")
    thread.start()
    try:
        wait_for(lambda: all(deadline_app.get_job(j.id).state.value == "dead" for j in jobs))
        snap = wait_for(
            lambda: (
                (s := worker.registry.latest)
                and all(s["tasks"].get(t.name, {}).get("timed_out") == 1 for t in tasks)
                and s
            ),
            timeout=15,
            what="every model's timeout in the snapshot",
        )
        for task in tasks:
            figures = snap["tasks"][task.name]
            assert (figures["timed_out"], figures["dead"], figures["failed"]) == (1, 1, 1)
        assert worker.counters.timed_out == 3
        logged = [r.job for r in caplog.records if r.name == "sluicegate.jobs"]  # type: ignore[attr-defined]
        assert sorted(x["task"] for x in logged if x["timed_out"]) == sorted(t.name for t in tasks)
    finally:
        worker.stop(immediate=True)
        thread.join(15)


def test_an_outcome_refused_by_the_broker_is_not_counted(
    app: App, run_worker: Callable[..., Worker], caplog: pytest.LogCaptureFixture
) -> None:
    started, cancelled = threading.Event(), threading.Event()

    @app.task(queue="q")
    def slow() -> str:
        started.set()
        cancelled.wait(10)  # the body runs on until its lease is gone
        return "done"

    caplog.set_level(logging.INFO, logger="sluicegate.jobs")
    # A long lease: no heartbeat finds the loss first; the ack itself is refused.
    worker = run_worker([PoolSpec("p", ("q",), 1)], lease=60.0, publish_interval=0.1)
    job = slow.enqueue()
    assert started.wait(10)
    app.broker.cancel(job.id)  # the lease is gone while the body still runs
    cancelled.set()
    wait_for(lambda: worker.counters.lease_lost == 1, what="the refused ack")
    published = worker.registry.latest
    snap = wait_for(lambda: (s := worker.registry.latest) is not published and s)
    assert snap["tasks"].get("slow", {}).get("succeeded", 0) == 0
    assert snap["queues"]["q"]["completed"] == 0
    assert worker.counters.succeeded == 0
    assert not [r for r in caplog.records if r.name == "sluicegate.jobs"]
    assert app.get_job(job.id).state.value == "cancelled"
