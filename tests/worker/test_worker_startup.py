"""A worker that starts while another connection holds the SQLite write lock for longer
than ``busy_timeout`` waits it out with its backoff, then comes up; it does not exit.

Real ``sluicegate worker`` processes: what was wrong was the command's exit (code 1, one
line) when opening the broker, which migrates a new file, found the lock taken; only a
process shows that. The fleet test (test_schedules_fleet.py) starts five at once.
"""

from __future__ import annotations

import sqlite3

from sluicegate import App, JobState
from support.fleet import Fleet, stop_all, wait_for


def test_a_worker_waits_out_a_write_lock_held_at_its_start(
    fleet: Fleet, producer: App, db_url: str
) -> None:
    path = db_url.removeprefix("sqlite:///")
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("PRAGMA journal_mode = WAL")
    holder.execute("BEGIN IMMEDIATE")  # a new, empty file: the worker must migrate it
    fleet.url = f"{db_url}?busy_timeout=100"
    worker = fleet.start(["p=cron:2"], app="scheduleapp:app", lease=5)
    try:
        wait_for(
            lambda: "broker error (will retry)" in worker.log() or not worker.alive(),
            timeout=60,
            what=lambda: f"the worker to meet the lock:\n{worker.log()}",
        )
        assert worker.alive(), worker.log()
        assert " started: " not in worker.log()
        assert "is locked by another connection" in worker.log()
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    wait_for(lambda: " started: " in worker.log() or not worker.alive(), timeout=60)
    assert worker.alive(), worker.log()
    assert "broker reachable again" in worker.log()
    wait_for(
        lambda: any(j.state is JobState.SUCCEEDED for j in producer.broker.list_jobs(task="tick")),
        timeout=30,
        what=lambda: f"a tick to run:\n{worker.log()}",
    )
    stop_all([worker])
