"""A small app for worker and chaos tests, imported by real ``sluicegate worker`` processes.

Tasks identify the process that ran them (``os.getpid()``) and record side effects in a
separate SQLite file keyed by job id and attempt, so tests can count re-runs. The app has
no broker of its own: workers get ``--broker``, tests enqueue through their own App.
"""

from __future__ import annotations

import os
import sqlite3
import time
from typing import Any

from sluicegate import App
from sluicegate.context import current_job

app = App()

EFFECTS_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS effects ("
    "job_id INTEGER NOT NULL, attempt INTEGER NOT NULL, pid INTEGER NOT NULL, at REAL NOT NULL)"
)


def create_effects_db(path: str) -> None:
    """Create the side-effect table (WAL, so many workers can append at once)."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(EFFECTS_SCHEMA)
        conn.commit()
    finally:
        conn.close()


def read_effects(path: str) -> list[tuple[int, int, int]]:
    """Every recorded side effect as (job_id, attempt, pid)."""
    conn = sqlite3.connect(path, timeout=30)
    try:
        return list(conn.execute("SELECT job_id, attempt, pid FROM effects ORDER BY rowid"))
    finally:
        conn.close()


def _append_effect(path: str) -> None:
    job = current_job()
    conn = sqlite3.connect(path, timeout=30)
    try:
        with conn:
            conn.execute(
                "INSERT INTO effects (job_id, attempt, pid, at) VALUES (?, ?, ?, ?)",
                (job.id, job.attempts, os.getpid(), time.time()),
            )
    finally:
        conn.close()


@app.task(queue="chaos", max_attempts=25, backoff_base=0)
def record(effects_db: str, seconds: float) -> int:
    """Work for ``seconds`` with a side effect in the middle; returns the worker's pid."""
    time.sleep(seconds / 2)
    _append_effect(effects_db)
    time.sleep(seconds / 2)
    return os.getpid()


@app.task(queue="once", max_attempts=1)
def once(effects_db: str, seconds: float) -> int:
    """One attempt only: record a side effect as the body begins, then work for
    ``seconds``; returns the pid of the process that ran it (a pool child's, in a
    process pool)."""
    _append_effect(effects_db)
    time.sleep(seconds)
    return os.getpid()


@app.task(queue="slow", max_attempts=3)
def slow(seconds: float) -> int:
    """Sleep, then return the pid of the worker process that ran it."""
    time.sleep(seconds)
    return os.getpid()


@app.task(queue="slow", max_attempts=3)
def timed_attempts(effects_db: str, seconds: list[float]) -> dict[str, Any]:
    """Sleep ``seconds[attempt - 1]`` (the last entry for later attempts), then record a
    side effect; say which process and attempt ran it."""
    job = current_job()
    time.sleep(seconds[min(job.attempts, len(seconds)) - 1])
    _append_effect(effects_db)
    return {"pid": os.getpid(), "attempt": job.attempts}


@app.task(queue="crash", max_attempts=3)
def crash() -> None:
    """Take the whole worker process down from a job thread, as a segfaulting library would."""
    os._exit(1)
