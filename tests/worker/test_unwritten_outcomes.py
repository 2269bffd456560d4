"""A worker that cannot write its outcomes (the SQLite file is full) keeps them, takes no
new work meanwhile, and writes them once space returns: every job succeeds, once."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from sluicegate import App, JobState
from sluicegate.worker import PoolSpec, Worker
from support.fleet import counts, wait_for

CAP = 300  # pages
JOBS = 12
SLOTS = 2


def fill(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, timeout=30)
    conn.execute(f"PRAGMA max_page_count = {CAP}")
    conn.execute("CREATE TABLE IF NOT EXISTS filler (blob BLOB)")
    for size in (3000, 300, 30):
        try:
            while True:
                conn.execute("INSERT INTO filler VALUES (randomblob(?))", (size,))
        except sqlite3.OperationalError as exc:
            assert "full" in str(exc)
    return conn


def test_no_new_work_while_outcomes_cannot_be_written(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    app = App(broker=f"sqlite:///{path}?max_pages={CAP}", config=False)
    runs: list[int] = []

    @app.task(queue="q")
    def bulky(i: int) -> str:
        runs.append(i)
        return "r" * 5000  # pages of its own: writing the outcome needs free space

    try:
        jobs = [bulky.enqueue(i) for i in range(JOBS)]
        filler = fill(path)
        worker = Worker(app, [PoolSpec("p", ("q",), SLOTS)], lease=30.0)
        thread = threading.Thread(target=worker.run, daemon=True)
        thread.start()
        try:
            wait_for(lambda: worker.results.failing, timeout=10, what="an outcome write to fail")
            wait_for(lambda: worker.results.pending == len(runs), timeout=10)
            ready = counts(app.broker, "q")["ready"]
            assert ready >= JOBS - 2 * SLOTS  # a turn may refill its slots once before it writes
            # An absence: no claim while the outcomes wait. Two more failed writes: the
            # turn of the second began after the first, and its claimers ran before it.
            tried = worker.backoff.errors
            wait_for(lambda: worker.backoff.errors >= tried + 2, what="the writes tried again")
            assert counts(app.broker, "q")["ready"] == ready
            assert worker.results.pending == len(runs) == JOBS - ready
            assert worker.backoff.errors >= 2  # the write was tried again, and failed again

            filler.execute("DELETE FROM filler")  # space comes back
            filler.close()
            wait_for(
                lambda: counts(app.broker, "q")["succeeded"] == JOBS,
                timeout=30,
                what=lambda: str(counts(app.broker, "q")),
            )
        finally:
            worker.stop(immediate=True)
            thread.join(15)
        assert not thread.is_alive()
        assert sorted(runs) == list(range(JOBS))  # each ran once
        assert all(app.get_job(j.id).state == JobState.SUCCEEDED for j in jobs)
        assert not worker.results.failing
    finally:
        app.close()
