"""An app whose tasks name dependency limits, for real worker processes in limit tests.

Each task records when its body ran (start and end, by the wall clock, with the job id,
its partition key and the pid) in a separate SQLite file, so a test measures how many
ran at once from what the tasks saw themselves, not from the broker. It also records the
lease its job was claimed with (``lease_expires_at`` as claimed: the claim's time on the
broker's clock plus the worker's lease), for rate tests: a rate limit counts claims.
"""

from __future__ import annotations

import os
import sqlite3
import time

from sluicegate import App
from sluicegate.context import current_job

app = App(config=False)
app.limit("shared", concurrency=3)  # global: every worker on the broker
app.limit("per_host", concurrency=3, scope="host")
app.limit("per_key", concurrency=1, partition="key")
app.limit("paced", rate="20/s", burst=2)  # 2: a late claim catches up (docs/limits.md)
app.limit("adjustable", concurrency=2)
app.limit("one", concurrency=1)

SPANS_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS spans (job_id INTEGER NOT NULL, task TEXT NOT NULL, "
    "key TEXT, pid INTEGER NOT NULL, start REAL NOT NULL, stop REAL, claimed_until REAL)"
)


def create_spans_db(path: str) -> None:
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(SPANS_SCHEMA)
        conn.commit()
    finally:
        conn.close()


def read_spans(
    path: str, task: str | None = None
) -> list[tuple[int, str | None, float, float | None]]:
    """(job id, key, start, stop) per recorded run; stop is None for a run that was cut."""
    conn = sqlite3.connect(path, timeout=30)
    try:
        sql = "SELECT job_id, key, start, stop FROM spans"
        rows = conn.execute(sql + " WHERE task = ?", (task,)) if task else conn.execute(sql)
        return list(rows)
    finally:
        conn.close()


def read_claims(path: str, task: str) -> list[tuple[int, int, float]]:
    """(job id, pid, lease_expires_at as claimed) per recorded run of ``task``."""
    conn = sqlite3.connect(path, timeout=30)
    try:
        sql = "SELECT job_id, pid, claimed_until FROM spans WHERE task = ?"
        return list(conn.execute(sql, (task,)))
    finally:
        conn.close()


def _run(spans_db: str, seconds: float, key: str | None = None) -> None:
    job = current_job()
    conn = sqlite3.connect(spans_db, timeout=30)
    try:
        with conn:
            row = conn.execute(
                "INSERT INTO spans (job_id, task, key, pid, start, claimed_until) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (job.id, job.task, key, os.getpid(), time.time(), job.lease_expires_at),
            ).lastrowid
        if seconds:
            time.sleep(seconds)
        with conn:
            conn.execute("UPDATE spans SET stop = ? WHERE rowid = ?", (time.time(), row))
    finally:
        conn.close()


@app.task(queue="lim", limits=["shared"], max_attempts=50, backoff_base=0)
def global_limited(spans_db: str, seconds: float) -> None:
    _run(spans_db, seconds)


@app.task(queue="lim", limits=["per_host"])
def host_limited(spans_db: str, seconds: float) -> None:
    _run(spans_db, seconds)


@app.task(queue="lim", limits=["per_key"])
def key_limited(spans_db: str, seconds: float, key: str) -> None:
    _run(spans_db, seconds, key)


@app.task(queue="lim", limits=["paced"])
def paced(spans_db: str) -> None:
    _run(spans_db, 0.0)


@app.task(queue="lim", limits=["adjustable"])
def adjustable(spans_db: str, seconds: float) -> None:
    _run(spans_db, seconds)


@app.task(queue="lim", limits=["one"])
def single_file(spans_db: str, seconds: float) -> None:
    _run(spans_db, seconds)


@app.task(queue="lim")
def unlimited(spans_db: str, seconds: float) -> None:
    _run(spans_db, seconds)
