"""Operator listings at depth: a page of ``list_jobs`` with every kind of filter, on a
table of 1,000,000 finished and 100,000 ready jobs (the dashboard's target: a page in
under 200 ms).

    .venv/bin/python bench/listing.py                                   # SQLite
    .venv/bin/python bench/listing.py --broker 'postgresql://postgres@127.0.0.1/test?schema=bench'
    .venv/bin/python bench/listing.py --finished 200000 --ready 20000   # smaller, faster

The table is loaded with SQL (a fresh SQLite file, or a fresh PostgreSQL schema dropped
afterwards), then analysed. Half the ready jobs are an old backlog (queue ``old``, task
``slow``: the lowest ids, below the whole history), half are fresh; the finished jobs
have 20 tasks (``t0`` half of them) over 5 queues, 2 % dead and 1 % cancelled, and one
in ten has a unique key that ten jobs share. Then, for each filter (state, queue, task,
unique key) on the first page and on a deep one (``before_id`` in the middle of the
history), ``--runs`` pages of ``--limit`` jobs through the broker's own ``list_jobs``:
prints the median and the slowest, the slowest filters, the time of the bulk actions
(``retry_matching``, ``cancel_matching``: 1,000 jobs a call), and how long migration
``0005_listings.sql``'s indexes take to build on that table. Prints; asserts nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

from pgscratch import connect, is_postgres, schema_of, scratch_schema, server_info  # noqa: E402
from sluicegate.brokers import Broker, broker_from_url  # noqa: E402
from sluicegate.brokers.sqlfiles import load_migrations  # noqa: E402
from sluicegate.job import JobState  # noqa: E402

# Columns of every loaded row, then one SELECT per kind of row over a series g(x).
COLUMNS = ("queue, task, state, run_at, attempts, enqueued_at, started_at, finished_at, "
           "result, unique_key, last_error")  # fmt: skip
FINISHED = """
SELECT 'q' || (x % 5), CASE WHEN x % 2 = 0 THEN 't0' ELSE 't' || (x % 20) END,
       CASE WHEN x % 50 = 3 THEN 'dead' WHEN x % 100 = 7 THEN 'cancelled'
            ELSE 'succeeded' END,
       {t}, 1, {t}, {t}, {t}, 'null',
       CASE WHEN x % 10 = 0 THEN 'key-' || (x % 100000) END,
       CASE WHEN x % 50 = 3 THEN '{{"type": "ValueError", "message": "boom"}}' END
"""
OLD_BACKLOG = "SELECT 'old', 'slow', 'ready', {t}, 0, {t}, NULL, NULL, NULL, NULL, NULL"
FRESH = """
SELECT 'q' || (x % 5), 't' || (x % 20), 'ready', {t}, 0, {t}, NULL, NULL, NULL, NULL, NULL
"""
PG_SERIES = "FROM generate_series(1, %(n)s) AS g(x)"
SQLITE_SERIES = """FROM (WITH RECURSIVE g(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM g WHERE x < :n)
      SELECT x FROM g)"""
PG_TIME = "now() - interval '10 days' + x * interval '1 ms'"
SQLITE_TIME = "unixepoch() - 864000 + x / 1000.0"


def load(url: str, finished: int, ready: int) -> float:
    """The rows, in id order: old backlog, history, fresh backlog; then ANALYZE."""
    broker_from_url(url).close()  # the schema, by the broker's own migrations
    parts = [(OLD_BACKLOG, ready // 2), (FINISHED, finished), (FRESH, ready - ready // 2)]
    start = time.perf_counter()
    if is_postgres(url):
        table = f"{schema_of(url)}.jobs"
        with connect(url) as conn:
            for select, n in parts:
                select = select.format(t=PG_TIME).replace(" % ", " %% ")  # psycopg's %
                sql = f"INSERT INTO {table} ({COLUMNS}) {select} {PG_SERIES}"
                conn.execute(sql, {"n": n})  # type: ignore[arg-type]
            conn.execute(f"VACUUM ANALYZE {table}")
        return time.perf_counter() - start
    conn = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)
    try:
        conn.execute("BEGIN")
        for select, n in parts:
            sql = f"INSERT INTO jobs ({COLUMNS}) {select.format(t=SQLITE_TIME)} {SQLITE_SERIES}"
            conn.execute(sql, {"n": n})
        conn.execute("COMMIT")
        conn.execute("ANALYZE")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    return time.perf_counter() - start


def migration_seconds(url: str) -> float:
    """Build 0005_listings.sql's indexes again on the loaded table (dropped first; on
    PostgreSQL 0004's jobs_listing put back, as 0005 finds it)."""
    if is_postgres(url):
        schema = schema_of(url)
        [migration] = [m for m in load_migrations("postgresql", {"schema": schema})
                       if m.version == 5]  # fmt: skip
        with connect(url) as conn:
            for name in ("jobs_listing", "jobs_task", "jobs_unique_key"):
                conn.execute(f"DROP INDEX {schema}.{name}")
            conn.execute(
                f"CREATE INDEX jobs_listing ON {schema}.jobs (state, queue, id) "
                "WHERE state IN ('succeeded', 'dead', 'cancelled')"
            )
            start = time.perf_counter()
            with conn.transaction():
                for statement in migration.statements:
                    conn.execute(statement)  # type: ignore[arg-type]
            return time.perf_counter() - start
    [migration] = [m for m in load_migrations("sqlite") if m.version == 5]
    conn = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)
    try:
        conn.execute("DROP INDEX jobs_task")
        conn.execute("DROP INDEX jobs_unique_key")
        start = time.perf_counter()
        conn.execute("BEGIN IMMEDIATE")
        for statement in migration.statements:
            conn.execute(statement)
        conn.execute("COMMIT")
        return time.perf_counter() - start
    finally:
        conn.close()


def filters() -> Iterator[dict[str, Any]]:
    for state, queue, task, key in itertools.product(
        (None, JobState.READY, JobState.SUCCEEDED, JobState.DEAD, JobState.RUNNING),
        (None, "q1", "old"),
        (None, "t3", "slow"),
        (None, "key-420"),
    ):
        yield {"state": state, "queue": queue, "task": task, "unique_key": key}


def shown(f: dict[str, Any], deep: bool) -> str:
    parts = [f"{k}={v.value if isinstance(v, JobState) else v}" for k, v in f.items() if v]
    return " ".join(parts + (["before=deep"] if deep else [])) or "(none)"


def measure(broker: Broker, runs: int, limit: int, deep_id: int) -> list[tuple[float, str]]:
    """(median seconds, filter) of every filter, first page and deep page."""
    out = []
    for f, deep in itertools.product(filters(), (False, True)):
        before = deep_id if deep else None
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            broker.list_jobs(limit=limit, before_id=before, **f)
            times.append(time.perf_counter() - start)
        out.append((statistics.median(times), shown(f, deep)))
    return out


def bulk(broker: Broker, runs: int) -> list[tuple[float, str]]:
    """(median seconds, action) of the bulk actions, 1,000 jobs a call (a page of the
    dashboard's "retry all" / "cancel all"): each call changes the table, so each run
    takes the next 1,000."""
    actions = {
        "retry_matching(limit=1000)": lambda: broker.retry_matching(limit=1000),
        "retry_matching(task=t3, limit=1000)": lambda: broker.retry_matching(task="t3"),
        "cancel_matching(ready, queue=old, limit=1000)": lambda: broker.cancel_matching(
            state=JobState.READY, queue="old"
        ),
        "cancel_matching(ready, task=t3, limit=1000)": lambda: broker.cancel_matching(
            state=JobState.READY, task="t3"
        ),
    }
    out = []
    for name, action in actions.items():
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            action()
            times.append(time.perf_counter() - start)
        out.append((statistics.median(times), name))
    return out


@contextlib.contextmanager
def fresh_url(given: str | None) -> Iterator[str]:
    if is_postgres(given):
        with scratch_schema(given) as url:  # type: ignore[arg-type]
            yield url
        return
    folder = tempfile.mkdtemp(prefix="sluicegate-listing-")
    try:
        yield f"sqlite:///{folder}/listing.db"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--broker", help="postgresql://...?schema=NAME (default: SQLite)")
    parser.add_argument("--finished", type=int, default=1_000_000)
    parser.add_argument("--ready", type=int, default=100_000)
    parser.add_argument("--limit", type=int, default=50, help="jobs per page")
    parser.add_argument("--runs", type=int, default=5, help="pages per filter (median)")
    args = parser.parse_args()
    with fresh_url(args.broker) as url:
        loaded = load(url, args.finished, args.ready)
        kind = "postgresql" if is_postgres(url) else "sqlite"
        print(f"{kind}: {args.finished:,} finished + {args.ready:,} ready jobs loaded in "
              f"{loaded:.1f} s")  # fmt: skip
        if kind == "postgresql":
            print(server_info(url))
        broker = broker_from_url(url)
        try:
            deep_id = args.ready // 2 + args.finished // 2
            results = measure(broker, args.runs, args.limit, deep_id)
            actions = bulk(broker, args.runs)
        finally:
            broker.close()
        built = migration_seconds(url)
    times = sorted(t for t, _ in results)
    print(f"{len(results)} filters x first/deep page, {args.limit} jobs a page, median of "
          f"{args.runs}: median {times[len(times) // 2] * 1000:.2f} ms, "
          f"slowest {times[-1] * 1000:.2f} ms")  # fmt: skip
    print("slowest filters:")
    for took, what in sorted(results, reverse=True)[:8]:
        print(f"  {took * 1000:7.2f} ms  {what}")
    print(f"bulk actions, median of {args.runs} calls:")
    for took, what in actions:
        print(f"  {took * 1000:7.2f} ms  {what}")
    print(f"migration 0005_listings.sql's indexes on this table: {built:.1f} s")


if __name__ == "__main__":
    main()
