"""Four worker processes, each on its own PostgreSQL connections, drain 20,000 jobs while
nobody dies: every job runs exactly once.

Each job inserts (job id, attempt, pid) into a side table in the same schema: half of
them over a plain connection of their own (committed at once, so a second run would
show as a second row), half as transactional tasks (the row commits with the ack). SKIP
LOCKED claims must never hand one job to two workers (every job is claimed once: one
attempt), and no job may run again.
"""

from __future__ import annotations

import time

import pgchaosapp
import pytest

from sluicegate import App
from support.brokers import connect, only_postgresql, plain_dsn, schema_of
from support.fleet import Fleet, counts, enqueue_mixed, stop_all, wait_for

pytestmark = [only_postgresql, pytest.mark.slow]

WORKERS = 4
SLOTS = 8
JOBS = 20_000
QUEUE = pgchaosapp.QUEUE


def test_four_workers_run_20000_jobs_exactly_once(db_url: str, fleet: Fleet, producer: App) -> None:
    schema = schema_of(db_url)
    table = f"{schema}.effects"
    producer.broker  # noqa: B018 - opening it creates (migrates) the schema
    with connect(db_url) as conn:
        conn.execute(pgchaosapp.EFFECTS_TABLE.format(table=table))
    dsn = plain_dsn(db_url)
    plain, tx = (pgchaosapp.record, [dsn, table, 0]), (pgchaosapp.record_tx, [table, 0])
    began = time.monotonic()
    jobs = enqueue_mixed(producer, (plain if i % 2 else tx for i in range(JOBS)))
    enqueued = time.monotonic()
    assert len({j.id for j in jobs}) == JOBS

    workers = [
        fleet.start([f"pg={QUEUE}:{SLOTS}"], lease=10, app="pgchaosapp:app") for _ in range(WORKERS)
    ]
    wait_for(
        lambda: counts(producer.broker, QUEUE)["succeeded"] == JOBS,
        timeout=90,
        interval=0.2,
        what=lambda: f"{counts(producer.broker, QUEUE)}\n{fleet.logs()[-4000:]}",
    )
    drained = time.monotonic()
    for worker in workers:
        assert worker.alive(), worker.log()
    stop_all(workers)

    c = counts(producer.broker, QUEUE)
    assert c["succeeded"] == JOBS and sum(c.values()) == JOBS, c
    with connect(db_url) as conn:
        rows, distinct = conn.execute(
            f"SELECT count(*), count(DISTINCT job_id) FROM {table}"
        ).fetchone()
        ids = {r[0] for r in conn.execute(f"SELECT job_id FROM {table}")}
        reclaimed = conn.execute(
            f"SELECT count(*) FROM {schema}.jobs WHERE attempts <> 1"
        ).fetchone()[0]
        mismatched = conn.execute(
            f"SELECT count(*) FROM {schema}.jobs AS j JOIN {table} AS e ON e.job_id = j.id "
            "WHERE (j.result::jsonb ->> 'pid')::int <> e.pid OR e.attempt <> j.attempts"
        ).fetchone()[0]
        by_pid = dict(conn.execute(f"SELECT pid, count(*) FROM {table} GROUP BY pid").fetchall())
    assert (rows, distinct) == (JOBS, JOBS), "a job ran twice (or never)"
    assert ids == {j.id for j in jobs}
    assert reclaimed == 0, "a job was claimed more than once"
    assert mismatched == 0, "a job's result names another run than its side effect"
    assert set(by_pid) == {w.pid for w in workers}, by_pid  # four processes shared the work
    for worker in workers:
        log = worker.log()
        for bad in ("Traceback", "broker error", "lease lost", "is dead"):
            assert bad not in log, log
    print(
        f"\n{JOBS} jobs: enqueue {enqueued - began:.2f} s, drain {drained - enqueued:.2f} s "
        f"({JOBS / (drained - enqueued):.0f} jobs/s), per worker {sorted(by_pid.values())}"
    )
