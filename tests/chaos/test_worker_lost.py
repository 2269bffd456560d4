"""A task that kills its whole (thread-model) worker: the job comes back (to the restarted
worker, which finds the dead one's lock file free, or by lease expiry, whichever is
first), charged an attempt each time, and is dead with "worker lost" once attempts run
out -- restarted workers do not crash forever. On SQLite and on PostgreSQL."""

from __future__ import annotations

import signal
import time

import chaosapp

from sluicegate import App, JobState
from support.brokers import over_brokers
from support.fleet import Fleet, enqueue, wait_for

pytestmark = over_brokers

LEASE = 1.0
POOL = "crash=crash:1"


def test_crashing_task_ends_dead_with_worker_lost(fleet: Fleet, producer: App) -> None:
    job = enqueue(producer, chaosapp.crash)
    max_attempts = chaosapp.crash.options.max_attempts
    attempts_at_crash: list[int] = []

    # Restart a worker after every crash, as a supervisor would, until the job is dead.
    for _ in range(max_attempts + 2):
        worker = fleet.start([POOL], lease=LEASE, shutdown_timeout=5)
        wait_for(
            lambda w=worker: not w.alive() or producer.get_job(job.id).state == JobState.DEAD,
            what=fleet.logs,
        )
        if producer.get_job(job.id).state == JobState.DEAD:
            break
        assert worker.wait() == 1, worker.log()
        lost = producer.get_job(job.id)
        assert lost.state in (JobState.CLAIMED, JobState.RUNNING)  # no live worker looks
        attempts_at_crash.append(lost.attempts)

    assert attempts_at_crash == list(range(1, max_attempts + 1)), fleet.logs()
    dead = producer.get_job(job.id)
    assert dead.state == JobState.DEAD
    assert dead.attempts == max_attempts
    assert dead.last_error is not None
    assert dead.last_error.type == "WorkerLost"
    assert "worker lost" in dead.last_error.message
    assert dead.result is None

    # The last worker recovered the job to dead instead of running it: it stays up through
    # a few more recovery rounds (an absence, so a short fixed wait) and exits cleanly.
    survivor = fleet.started[-1]
    wait_for(lambda: "1 dead" in survivor.log(), what=survivor.log)
    time.sleep(LEASE)
    assert survivor.alive(), survivor.log()
    assert producer.get_job(job.id) == dead
    survivor.send(signal.SIGTERM)
    assert survivor.wait(30) == 0, survivor.log()
    assert producer.get_job(job.id) == dead
