"""Graceful shutdown of real ``sluicegate worker`` processes on SIGTERM and SIGINT.

Stop claiming at once, let in-flight jobs finish within --shutdown-timeout, release the
rest without charging an attempt, exit 0; a second signal releases at once. Every test
runs on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import signal

import chaosapp
import pytest

from sluicegate import App, Job, JobState
from support.brokers import over_brokers
from support.fleet import Fleet, WorkerProcess, counts, enqueue, held_by, wait_for

pytestmark = over_brokers

SIGNALS = pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["TERM", "INT"])


def wait_running_on(app: App, jobs: list[Job], worker: WorkerProcess) -> None:
    def running() -> bool:
        if not worker.alive():
            raise AssertionError(f"worker exited early; log:\n{worker.log()}")
        current = [app.get_job(j.id) for j in jobs]
        return all(j.state == JobState.RUNNING and held_by(j, worker.pid) for j in current)

    wait_for(running, what=lambda: f"jobs running on the worker; log:\n{worker.log()}")


def assert_nothing_held(app: App, queue: str) -> None:
    c = counts(app.broker, queue)
    assert c["claimed"] == 0 and c["running"] == 0, c


@SIGNALS
def test_signal_lets_in_flight_jobs_finish_and_exits_0(
    sig: signal.Signals, fleet: Fleet, producer: App
) -> None:
    in_flight = [enqueue(producer, chaosapp.slow, 2.0) for _ in range(2)]
    waiting = [enqueue(producer, chaosapp.slow, 2.0) for _ in range(2)]
    worker = fleet.start(["slow=slow:2"], lease=2, shutdown_timeout=20)
    wait_running_on(producer, in_flight, worker)

    worker.send(sig)
    assert worker.wait(30) == 0, worker.log()

    for job in in_flight:
        done = producer.get_job(job.id)
        assert done.state == JobState.SUCCEEDED, worker.log()
        assert done.result == worker.pid
        assert done.attempts == 1
    for job in waiting:  # claiming stopped at the signal: these were never touched
        untouched = producer.get_job(job.id)
        assert untouched.state == JobState.READY
        assert untouched.attempts == 0
        assert untouched.worker_id is None
    assert_nothing_held(producer, "slow")
    log = worker.log()
    assert "shutting down" in log
    assert "Traceback" not in log


def _ready_after_one_lost_attempt(app: App) -> Job:
    """A job whose first attempt was lost (lease expired): ready again, 1 attempt charged."""
    job = enqueue(app, chaosapp.slow, 60)
    claimed = app.broker.claim(["slow"], 1, 0.05, "a-worker-that-vanished")
    assert [c.job.id for c in claimed] == [job.id]
    wait_for(lambda: job.id in app.broker.recover_expired().requeued, what="lease recovery")
    recovered = app.get_job(job.id)
    assert recovered.state == JobState.READY and recovered.attempts == 1
    return recovered


@SIGNALS
def test_shutdown_timeout_releases_long_jobs_without_charging_an_attempt(
    sig: signal.Signals, fleet: Fleet, producer: App
) -> None:
    earlier = _ready_after_one_lost_attempt(producer)
    fresh = enqueue(producer, chaosapp.slow, 60)
    before = {j.id: producer.get_job(j.id).attempts for j in (earlier, fresh)}
    assert before == {earlier.id: 1, fresh.id: 0}

    worker = fleet.start(["slow=slow:2"], lease=2, shutdown_timeout=0.5)
    wait_running_on(producer, [earlier, fresh], worker)
    assert producer.get_job(earlier.id).attempts == 2  # the claim charged one

    worker.send(sig)
    assert worker.wait(30) == 0, worker.log()

    for job_id, attempts in before.items():
        released = producer.get_job(job_id)
        assert released.state == JobState.READY, worker.log()
        assert released.attempts == attempts
        assert released.worker_id is None
        assert released.lease_expires_at is None
        assert released.result is None
    assert_nothing_held(producer, "slow")
    assert "released 2 job(s)" in worker.log()


@pytest.mark.parametrize(
    ("first", "second"),
    [(signal.SIGTERM, signal.SIGTERM), (signal.SIGTERM, signal.SIGINT)],
    ids=["TERM-TERM", "TERM-INT"],
)
def test_second_signal_releases_at_once(
    first: signal.Signals, second: signal.Signals, fleet: Fleet, producer: App
) -> None:
    jobs = [enqueue(producer, chaosapp.slow, 60) for _ in range(2)]
    worker = fleet.start(["slow=slow:2"], lease=2, shutdown_timeout=120)
    wait_running_on(producer, jobs, worker)

    worker.send(first)
    wait_for(lambda: "shutting down" in worker.log(), what="the worker to start draining")
    assert worker.alive()  # draining: it would wait up to 120 s for the jobs
    assert all(producer.get_job(j.id).state == JobState.RUNNING for j in jobs)

    worker.send(second)
    assert worker.wait(20) == 0, worker.log()
    for job in jobs:
        released = producer.get_job(job.id)
        assert released.state == JobState.READY
        assert released.attempts == 0
    assert_nothing_held(producer, "slow")


def test_released_jobs_are_run_by_the_next_worker(fleet: Fleet, producer: App) -> None:
    job = enqueue(producer, chaosapp.slow, 2.0)
    first = fleet.start(["slow=slow:1"], lease=2, shutdown_timeout=0.2)
    wait_running_on(producer, [job], first)
    first.send(signal.SIGTERM)
    assert first.wait(30) == 0, first.log()
    assert producer.get_job(job.id).attempts == 0

    second = fleet.start(["slow=slow:1"], lease=2, shutdown_timeout=5)
    wait_for(lambda: producer.get_job(job.id).state == JobState.SUCCEEDED, what=second.log)
    done = producer.get_job(job.id)
    assert done.result == second.pid
    assert done.attempts == 1  # released, not lost: the second run is attempt 1 again
    second.send(signal.SIGTERM)
    assert second.wait(30) == 0, second.log()
