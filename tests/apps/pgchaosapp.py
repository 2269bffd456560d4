"""A test app for PostgreSQL-only chaos tests, imported by real ``sluicegate worker``
processes (``pgchaosapp:app``). Apart from chaosapp because one transactional task makes
a worker refuse any broker but PostgreSQL.

Each job records a side effect (job id, attempt, pid) in a table next to the jobs:
``record`` over its slot thread's own connection straight to the server (committed at
once, whatever happens to the ack), ``record_tx`` as a transactional task, over the
``connection=`` the worker passes, so the row commits together with the ack or not at all.
Both return ``ACK_MARKER`` in their result, so only acks carry it to the server.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from sluicegate import App
from sluicegate.context import current_job

app = App()

QUEUE = "pgchaos"
ACK_MARKER = "sgack7f3e"
EFFECTS_TABLE = (
    "CREATE TABLE IF NOT EXISTS {table} (job_id bigint NOT NULL, attempt integer NOT NULL, "
    "pid integer NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())"
)
INSERT_EFFECT = "INSERT INTO {table} (job_id, attempt, pid) VALUES (%s, %s, %s)"
_local = threading.local()


def _own_connection(dsn: str) -> Any:
    """This slot thread's autocommit connection (slots are long-lived threads)."""
    import psycopg

    conn = getattr(_local, "conn", None)
    if conn is None or conn.closed or conn.broken:
        conn = psycopg.connect(dsn, autocommit=True, application_name="sg-chaos-effects")
        _local.conn = conn
    return conn


def _result() -> dict[str, Any]:
    return {"pid": os.getpid(), "attempt": current_job().attempts, "tag": ACK_MARKER}


@app.task(queue=QUEUE, max_attempts=25, backoff_base=0)
def record(dsn: str, table: str, seconds: float) -> dict[str, Any]:
    """Work for ``seconds`` with a side effect (a committed row in ``table``) in the middle."""
    job = current_job()
    time.sleep(seconds / 2)
    _own_connection(dsn).execute(
        INSERT_EFFECT.format(table=table), (job.id, job.attempts, os.getpid())
    )
    time.sleep(seconds / 2)
    return _result()


@app.task(queue=QUEUE, max_attempts=25, backoff_base=0, transactional=True)
def record_tx(table: str, seconds: float, *, connection: Any) -> dict[str, Any]:
    """Like ``record``, but the row commits with the ack, in the worker's transaction."""
    job = current_job()
    time.sleep(seconds / 2)
    connection.execute(INSERT_EFFECT.format(table=table), (job.id, job.attempts, os.getpid()))
    time.sleep(seconds / 2)
    return _result()
