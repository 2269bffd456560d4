"""Tasks that misbehave, in every concurrency model (thread, async, process): an exception
whose ``__str__`` raises, results that are not JSON, error messages holding a lone
surrogate or a NUL, SystemExit, KeyboardInterrupt and BaseException, and a process-pool
child that writes megabytes to stdout. Each ends with its reason stored (or, for a NUL in
a result, succeeds with it), healthy jobs in the same pools complete, and the worker
keeps serving: an in-process burst worker drains everything, and a real ``sluicegate
worker`` survives the same mix and stops cleanly.

The tasks live in tests/apps/badinputapp.py (process-pool children import it).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import badinputapp
import pytest

from sluicegate import App, Job, JobState
from sluicegate.worker import PoolSpec, Worker
from support.brokers import over_brokers
from support.fleet import Fleet, wait_for

POOLS = [
    PoolSpec("thr", ("bad_thread",), 3, "thread"),
    PoolSpec("aio", ("bad_async",), 3, "async"),
    PoolSpec("proc", ("bad_process",), 2, "process"),
]
CLI_POOLS = ["thr=bad_thread:3:thread", "aio=bad_async:3:async", "proc=bad_process:2:process"]
HEALTHY = 4


@pytest.fixture
def drain_badinputapp(app: App) -> Iterator[Callable[..., Worker]]:
    """A burst worker for badinputapp's tasks on the test's broker; stopped at teardown."""
    workers: list[tuple[Worker, threading.Thread]] = []

    def run(**options: Any) -> Worker:
        options.setdefault("lease", 10.0)
        worker = Worker(badinputapp.app, POOLS, broker=app.broker, burst=True, **options)
        thread = threading.Thread(target=worker.run, name="burst-worker", daemon=True)
        thread.start()
        workers.append((worker, thread))
        thread.join(60)
        assert not thread.is_alive(), "burst worker did not drain its queues within 60 s"
        return worker

    yield run
    for worker, thread in workers:
        worker.stop(immediate=True)
        thread.join(10)


def enqueue(app: App, task: str, *args: Any) -> Job:
    options = badinputapp.app.tasks[task].options
    return app.enqueue(
        task, args=list(args), queue=options.queue, max_attempts=options.max_attempts
    )


def enqueue_the_mix(app: App) -> tuple[dict[tuple[str, str], Job], list[Job]]:
    """Every bad case in every model, healthy jobs between them, and the loud child."""
    bad: dict[tuple[str, str], Job] = {}
    healthy: list[Job] = []
    for n in range(HEALTHY):
        for model in badinputapp.MODELS:
            healthy.append(enqueue(app, f"{model}_ok", n))
            for case in badinputapp.CASES:
                if n == 0:
                    bad[(model, case)] = enqueue(app, f"{model}_{case}")
    bad[("process", "shout")] = enqueue(app, "process_shout")
    return bad, healthy


def assert_outcomes(app: App, bad: dict[tuple[str, str], Job], healthy: list[Job]) -> None:
    for (model, case), job in bad.items():
        done = app.get_job(job.id)
        if case == "shout":  # megabytes on stdout cost the job nothing
            assert (done.state, done.result) == (JobState.SUCCEEDED, badinputapp.SHOUT_MB)
            continue
        expected = badinputapp.CASES[case][1]
        if expected is None:
            assert (done.state, done.result, done.attempts) == (JobState.SUCCEEDED, "a\x00b", 1)
            continue
        assert done.state == JobState.DEAD, (model, case, done)
        assert done.attempts == badinputapp.ATTEMPTS, (model, case, done)  # retried once
        assert done.last_error is not None
        assert (done.last_error.type, done.last_error.message) == expected, (model, case)
        assert done.result is None
        assert done.last_error.type in done.last_error.traceback, (model, case)
    for job in healthy:
        done = app.get_job(job.id)
        assert done.state == JobState.SUCCEEDED and done.result["n"] == job.args[0], done


def test_misbehaving_tasks_end_with_their_reason_in_every_model(
    app: App, drain_badinputapp: Callable[..., Worker]
) -> None:
    bad, healthy = enqueue_the_mix(app)
    worker = drain_badinputapp()
    assert_outcomes(app, bad, healthy)
    failing = sum(1 for _, expected in badinputapp.CASES.values() if expected is not None)
    assert worker.counters.dead == failing * len(badinputapp.MODELS)

    # The pools are still whole: a second round of healthy jobs runs in every model.
    again = [enqueue(app, f"{model}_ok", 7) for model in badinputapp.MODELS]
    drain_badinputapp()
    assert all(app.get_job(j.id).state == JobState.SUCCEEDED for j in again)


@over_brokers
def test_a_worker_process_survives_misbehaving_tasks(
    fleet: Fleet, producer: App, tmp_path: Path
) -> None:
    bad, healthy = enqueue_the_mix(producer)
    worker = fleet.start(CLI_POOLS, lease=5.0, app="badinputapp:app")
    everything = [*bad.values(), *healthy]
    wait_for(
        lambda: all(producer.get_job(j.id).finished for j in everything),
        timeout=90,
        what=lambda: f"every job finished; worker log:\n{worker.log()[-3000:]}",
    )
    assert worker.alive(), worker.log()[-3000:]
    assert_outcomes(producer, bad, healthy)
    log = worker.log()
    assert log.count("x" * 1023) >= badinputapp.SHOUT_MB * 1024  # the child's output landed
    worker.send(signal.SIGTERM)
    assert worker.wait(30) == 0, log[-3000:]
