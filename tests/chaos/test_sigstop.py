"""A frozen worker (SIGSTOP) loses its lease; another worker recovers and finishes the job;
when the frozen one resumes (SIGCONT) its outcome is fenced off and never overwrites --
whether it resumes after the new owner acked or while the new owner still runs the job.
On SQLite and on PostgreSQL."""

from __future__ import annotations

import signal
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

import chaosapp
import pytest

from sluicegate import App, Job, JobState
from support.brokers import over_brokers, row_lockable
from support.fleet import Fleet, WorkerProcess, enqueue, held_by, wait_for

pytestmark = over_brokers

LEASE = 1.0
A_RUN = 2.0  # seconds attempt 1 sleeps (on A)


def process_state(pid: int) -> str:
    """The one-letter state from /proc (T: stopped)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0]


def db_writable(path: str) -> bool:
    conn = sqlite3.connect(path, timeout=0.5, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        conn.close()


def others_can_proceed(broker_name: str, db_url: str, job: Job) -> Callable[[], bool]:
    """A probe: could another worker write now? SQLite: nobody holds the file's write lock.
    PostgreSQL: nobody holds the job's row lock in an open transaction (SKIP LOCKED claims
    and recovery would pass the row by while its holder is frozen)."""
    if broker_name == "sqlite":
        path = db_url.removeprefix("sqlite:///")
        return lambda: db_writable(path)
    return lambda: row_lockable(db_url, job.id)


def freeze(worker: WorkerProcess, others_can_proceed: Callable[[], bool]) -> None:
    """SIGSTOP the worker at a moment it holds no lock others need (a frozen holder would
    block everyone: a SQLite write lock, or a PostgreSQL row lock mid-transaction)."""
    for _ in range(50):
        worker.send(signal.SIGSTOP)
        wait_for(lambda: process_state(worker.pid) == "T", timeout=10, what="SIGSTOP to land")
        if others_can_proceed():
            return
        worker.send(signal.SIGCONT)
        time.sleep(0.05)
    raise AssertionError("the worker always held a lock others need when frozen")


def runs(effects_db: str) -> list[tuple[int, int]]:
    return sorted((attempt, pid) for _, attempt, pid in chaosapp.read_effects(effects_db))


def on(app: App, job: Job, worker: WorkerProcess, state: JobState) -> bool:
    current = app.get_job(job.id)
    return current.state == state and held_by(current, worker.pid)


@pytest.mark.parametrize("resume", ["after_b_acked", "while_b_runs"])
def test_frozen_worker_cannot_overwrite_the_new_owners_outcome(
    resume: str, broker_name: str, db_url: str, fleet: Fleet, producer: App, effects_db: str
) -> None:
    b_run = 0.0 if resume == "after_b_acked" else 4.0
    job = enqueue(producer, chaosapp.timed_attempts, effects_db, [A_RUN, b_run])
    a = fleet.start(["slow=slow:1"], lease=LEASE, shutdown_timeout=10)
    wait_for(lambda: on(producer, job, a, JobState.RUNNING), what=a.log)
    a_started = time.monotonic()
    freeze(a, others_can_proceed(broker_name, db_url, job))

    b = fleet.start(["slow=slow:1"], lease=LEASE, shutdown_timeout=10)

    def logs() -> str:
        return f"A:\n{a.log()}\nB:\n{b.log()}"

    b_state = JobState.SUCCEEDED if resume == "after_b_acked" else JobState.RUNNING
    wait_for(lambda: on(producer, job, b, b_state), what=logs)
    assert process_state(a.pid) == "T"  # A was frozen the whole time
    # Let A's attempt-1 sleep run out while A is frozen, so it finishes as soon as it resumes.
    wait_for(lambda: time.monotonic() > a_started + A_RUN + 0.2)

    a.send(signal.SIGCONT)
    wait_for(lambda: f"lease lost on job {job.id}" in a.log(), what=logs)
    # A's stale run completes (its side effect lands) but its outcome is refused.
    wait_for(lambda: (1, a.pid) in runs(effects_db), what=logs)
    assert a.alive(), a.log()
    if resume == "while_b_runs":
        assert on(producer, job, b, JobState.RUNNING), logs()  # B still owns it
        wait_for(lambda: producer.get_job(job.id).state == JobState.SUCCEEDED, what=logs)

    by_b = producer.get_job(job.id)
    assert by_b.state == JobState.SUCCEEDED
    assert by_b.result == {"pid": b.pid, "attempt": 2}
    assert held_by(by_b, b.pid)
    assert by_b.attempts == 2

    # On SIGTERM A flushes whatever it still has: B's outcome must survive it.
    a.send(signal.SIGTERM)
    assert a.wait(30) == 0, a.log()
    assert producer.get_job(job.id) == by_b
    b.send(signal.SIGTERM)
    assert b.wait(30) == 0, b.log()
    assert producer.get_job(job.id) == by_b
    assert runs(effects_db) == [(1, a.pid), (2, b.pid)]
    assert "Traceback" not in logs()
    assert "lease lost" not in b.log()
