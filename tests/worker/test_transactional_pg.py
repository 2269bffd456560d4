"""Transactional tasks end to end on PostgreSQL: writes and ack commit together.

The four outcomes: enqueue rolled back (never visible) / committed (claimable), and a
task that returns (its write and the ack both committed) / raises (both rolled back,
the job retried, and a later success commits exactly once).
"""

from __future__ import annotations

from typing import Any

import psycopg

from sluicegate import App
from sluicegate.context import current_job
from sluicegate.job import JobState
from sluicegate.worker import PoolSpec, Worker


def _schema(url: str) -> str:
    return url.split("schema=")[1].split("&")[0]


def test_transactional_task_commits_with_ack_and_rolls_back_on_raise(
    pg_url: str, pg_dsn: str
) -> None:
    app = App(broker=pg_url)
    schema = _schema(pg_url)
    app.broker.migrate()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {schema}.side (job_id bigint, attempt int)")
    failures_left = {"n": 1}

    @app.task(transactional=True, max_attempts=3, backoff_base=0)
    def charge(fail_once: bool, connection: Any = None) -> int:
        job = current_job()
        connection.execute(f"INSERT INTO {schema}.side VALUES (%s, %s)", (job.id, job.attempts))
        if fail_once and failures_left["n"]:
            failures_left["n"] -= 1
            raise RuntimeError("card declined")
        return job.attempts

    ok = charge.enqueue(False)
    flaky = charge.enqueue(True)
    Worker(app, [PoolSpec("p", ("default",), 2)], burst=True).run()

    done, retried = app.get_job(ok.id), app.get_job(flaky.id)
    assert (done.state, done.result) == (JobState.SUCCEEDED, 1)
    assert (retried.state, retried.result, retried.attempts) == (JobState.SUCCEEDED, 2, 2)
    assert retried.last_error is not None and "card declined" in retried.last_error.message
    with psycopg.connect(pg_dsn) as conn:
        rows = conn.execute(f"SELECT job_id, attempt FROM {schema}.side ORDER BY 1, 2").fetchall()
    # the failed attempt's write was rolled back with it: one row per job, from the success
    assert rows == [(ok.id, 1), (flaky.id, 2)]
    app.close()


def test_transactional_enqueue_visible_only_after_commit(pg_url: str, pg_dsn: str) -> None:
    app = App(broker=pg_url)

    @app.task
    def welcome(user: int) -> int:
        return user

    app.broker.migrate()
    with psycopg.connect(pg_dsn) as conn:
        with conn.transaction():
            kept = welcome.with_options(connection=conn).enqueue(1)
            assert app.broker.get_job(kept.id) is None  # not yet committed
        try:
            with conn.transaction():
                dropped = app.enqueue("welcome", [2], connection=conn)
                raise RuntimeError("rollback")
        except RuntimeError:
            pass
    assert app.broker.get_job(dropped.id) is None
    Worker(app, burst=True).run()
    assert app.get_job(kept.id).state is JobState.SUCCEEDED
    assert app.broker.get_job(dropped.id) is None
    app.close()
