"""PostgreSQL enqueue cost against bare SQL (and PgQueuer): one by one, and in bulk.

The same rows into the same table, with its indexes: a broker's ``jobs`` table in a
scratch schema (``pgscratch``). Per run, every system in turn, the table emptied before
each (TRUNCATE), the order rotated run by run so no system always goes first; the figures
are medians of ``--runs`` runs, in jobs per second, with ratios. Prints figures; asserts
nothing.

- one by one (``--one`` jobs): bare = plain psycopg 3, one connection, autocommit,
  ``INSERT INTO jobs (<the columns sluicegate writes>) VALUES (...)`` one statement per
  job, and the same with sluicegate's wake-up (``pg_notify``) in the statement;
  sluicegate = ``task.enqueue(i)`` with an App on the same schema (its row, its wake-up
  NOTIFY, the Job it returns);
- bulk (``--bulk`` jobs in one call): bare = one ``INSERT ... SELECT FROM unnest(...)``
  of the same rows (one array per column a job sets), and one binary ``COPY``;
  sluicegate = ``task.enqueue_many``;
- ``--pgqueuer-python PATH``: also PgQueuer (``Queries.enqueue``, one by one and with
  lists), run by that Python (a virtualenv with pgqueuer and asyncpg) as a subprocess
  that waits for each timed call, in its own database ``--pgqueuer-db`` (created if
  missing, PgQueuer's schema installed there); payload: the same JSON ``[i]``.

Each table also gives this process's CPU per job (the client's own work: psycopg's, or
sluicegate's above it; none for PgQueuer, timed in its subprocess).

    .venv/bin/python bench/pg_enqueue.py \\
        [--postgres 'postgresql://postgres@127.0.0.1:5432/test?schema=bench'] \\
        [--runs 5] [--one 1000] [--bulk 10000] [--pgqueuer-python /path/to/venv/bin/python]

With ``PYTHONPATH=OTHER/src`` the sluicegate rows measure another checkout's code.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from pgscratch import connect, schema_of, scratch_schema, server_info
from sluicegate import App

COLUMNS = (
    "queue, task, args, kwargs, state, priority, run_at, max_attempts, unique_key, "
    "enqueued_at, limits, headers, expires_at"
)
SETTINGS = ("wal_sync_method", "commit_delay", "full_page_writes")

PGQUEUER = r"""
import asyncio, json, sys, time
import asyncpg
from pgqueuer import AsyncpgDriver, Queries

async def main(dsn: str) -> None:
    conn = await asyncpg.connect(dsn)
    queries = Queries(AsyncpgDriver(conn))
    if not await queries.schema_is_installed():
        await queries.install()
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        mode, n = line.split()
        n = int(n)
        await conn.execute("TRUNCATE pgqueuer")
        start = time.perf_counter()  # encoding included, as sluicegate's calls encode
        if mode == "one":
            for i in range(n):
                await queries.enqueue("noop", json.dumps([i]).encode())
        else:
            payloads = [json.dumps([i]).encode() for i in range(n)]
            await queries.enqueue(["noop"] * n, payloads, [0] * n)
        print(json.dumps({"seconds": time.perf_counter() - start}), flush=True)

asyncio.run(main(sys.argv[1]))
"""


class PgQueuer:
    """PgQueuer's enqueue, timed in a subprocess under its own Python."""

    def __init__(self, python: str, url: str, database: str) -> None:
        with connect(url) as conn:
            found = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (database,))
            if found.fetchone() is None:
                conn.execute(f'CREATE DATABASE "{database}"')
            info = conn.info
            own = f"postgresql://{info.user}@{info.host}:{info.port}/{database}"
        self.proc = subprocess.Popen(
            [python, "-c", PGQUEUER, own],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self._read()  # ready

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the PgQueuer subprocess ended (see its stderr above)")
        result: dict[str, Any] = json.loads(line)
        return result

    def run(self, mode: str, n: int) -> float:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{mode} {n}\n")
        self.proc.stdin.flush()
        return float(self._read()["seconds"])

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=30)


class Systems:
    """Every timed way in, on one scratch schema."""

    def __init__(self, url: str) -> None:
        self.app = App(broker=url, config=False)

        @self.app.task
        def noop(i: int) -> None: ...

        self.task = noop
        self.task.enqueue(0)  # connect, migrate, prepare: not timed
        self.jobs = f"{schema_of(url)}.jobs"
        self.conn = connect(url)  # the bare baseline's one connection (autocommit)
        self.admin = connect(url)
        insert = f"INSERT INTO {self.jobs} ({COLUMNS}) VALUES (%s, %s, %s, %s, 'ready', %s, "
        self.insert_one = insert + (
            "statement_timestamp(), %s, NULL, statement_timestamp(), NULL, NULL, NULL)"
        )
        self.insert_notify = (
            f"WITH i AS ({self.insert_one} RETURNING id) SELECT id, pg_notify(%s, %s) FROM i"
        )
        self.channel = f"{schema_of(url)}_jobs"
        self.insert_bulk = (
            f"INSERT INTO {self.jobs} ({COLUMNS}) SELECT q, t, a, k, 'ready', p, "
            "statement_timestamp(), m, NULL, statement_timestamp(), NULL, NULL, NULL "
            "FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[], %s::int[], %s::int[]) "
            "AS u(q, t, a, k, p, m)"
        )

    def empty(self) -> None:
        self.admin.execute(f"TRUNCATE {self.jobs}")

    def bare_one(self, n: int) -> float:
        execute, sql = self.conn.execute, self.insert_one
        start = time.perf_counter()
        for i in range(n):
            execute(sql, ("default", "noop", f"[{i}]", "{}", 0, 3))
        return time.perf_counter() - start

    def bare_one_notify(self, n: int) -> float:
        """The same INSERT with the wake-up sluicegate sends (pg_notify, the queue's name),
        in the same statement: what the NOTIFY alone costs."""
        execute, sql, channel = self.conn.execute, self.insert_notify, self.channel
        start = time.perf_counter()
        for i in range(n):
            execute(sql, ("default", "noop", f"[{i}]", "{}", 0, 3, channel, "default")).fetchone()
        return time.perf_counter() - start

    def sluicegate_one(self, n: int) -> float:
        enqueue = self.task.enqueue
        start = time.perf_counter()
        for i in range(n):
            enqueue(i)
        return time.perf_counter() - start

    def bare_unnest(self, n: int) -> float:
        start = time.perf_counter()
        arrays = (["default"] * n, ["noop"] * n, [f"[{i}]" for i in range(n)], ["{}"] * n)
        self.conn.execute(self.insert_bulk, (*arrays, [0] * n, [3] * n))
        return time.perf_counter() - start

    def bare_copy(self, n: int) -> float:
        start = time.perf_counter()
        with self.conn.transaction(), self.conn.cursor() as cur:
            copy_sql = (
                f"COPY {self.jobs} (queue, task, args, kwargs, state, priority, run_at, "
                "max_attempts, enqueued_at) FROM STDIN (FORMAT BINARY)"
            )
            now = cur.execute("SELECT statement_timestamp()").fetchone()[0]  # type: ignore[index]
            with cur.copy(copy_sql) as copy:
                copy.set_types(
                    ["text", "text", "text", "text", "text", "int4", "timestamptz", "int4",
                     "timestamptz"]
                )  # fmt: skip
                for i in range(n):
                    copy.write_row(("default", "noop", f"[{i}]", "{}", "ready", 0, now, 3, now))
        return time.perf_counter() - start

    def sluicegate_many(self, n: int) -> float:
        start = time.perf_counter()
        self.task.enqueue_many([(i,) for i in range(n)])
        return time.perf_counter() - start

    def close(self) -> None:
        self.app.close()
        self.conn.close()
        self.admin.close()


def measure(
    ways: dict[str, Callable[[], float]], n: int, runs: int, empty: Callable[[], None]
) -> dict[str, tuple[float, float]]:
    """Per way, the median rate and the median CPU of this process per job (us; the
    client's own work for the ways timed here); the ways alternate, their order rotated
    each run."""
    times: dict[str, list[float]] = {name: [] for name in ways}
    cpu: dict[str, list[float]] = {name: [] for name in ways}
    names = list(ways)
    for run in range(runs):
        for name in names[run % len(names) :] + names[: run % len(names)]:
            empty()
            started = time.process_time()
            times[name].append(ways[name]())
            cpu[name].append(time.process_time() - started)
    return {
        name: (n / statistics.median(times[name]), statistics.median(cpu[name]) / n * 1e6)
        for name in ways
    }


def table(title: str, measured: dict[str, tuple[float, float]], bases: list[str]) -> None:
    print(f"\n{title}")
    print(f"| way | jobs/s | {' | '.join(f'x {b}' for b in bases)} | client CPU us/job |")
    print(f"|---|---|{'---|' * len(bases)}---|")
    for name, (rate, cpu) in measured.items():
        ratios = [f"{rate / measured[b][0]:.2f}" if b in measured else "-" for b in bases]
        mine = "-" if name.startswith("PgQueuer") else f"{cpu:.1f}"  # a subprocess's
        print(f"| {name} | {rate:,.0f} | {' | '.join(ratios)} | {mine} |")


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--postgres",
        default=os.environ.get(
            "SLUICEGATE_BENCH_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test?schema=bench"
        ),
    )
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--one", type=int, default=1000, help="jobs per one-by-one run (0: skip)")
    parser.add_argument("--bulk", type=int, default=10_000, help="jobs per bulk call (0: skip)")
    parser.add_argument("--pgqueuer-python", help="a Python with pgqueuer and asyncpg")
    parser.add_argument("--pgqueuer-db", default="bench_pgqueuer")
    args = parser.parse_args()

    print(f"load average before: {load()}")
    print(server_info(args.postgres))
    with connect(args.postgres) as conn:
        print(", ".join(f"{s}={conn.execute(f'SHOW {s}').fetchone()[0]}" for s in SETTINGS))  # type: ignore[index]
    import sluicegate

    print(f"sluicegate from {Path(sluicegate.__file__).parent}")
    peer = None
    if args.pgqueuer_python:
        peer = PgQueuer(args.pgqueuer_python, args.postgres, args.pgqueuer_db)
    with scratch_schema(args.postgres) as url:
        s = Systems(url)
        try:
            one: dict[str, Callable[[], float]] = {
                "bare INSERT": lambda: s.bare_one(args.one),
                "bare INSERT + NOTIFY": lambda: s.bare_one_notify(args.one),
                "sluicegate task.enqueue": lambda: s.sluicegate_one(args.one),
            }
            bulk: dict[str, Callable[[], float]] = {
                "bare unnest INSERT": lambda: s.bare_unnest(args.bulk),
                "bare COPY": lambda: s.bare_copy(args.bulk),
                "sluicegate task.enqueue_many": lambda: s.sluicegate_many(args.bulk),
            }
            if peer is not None:
                one["PgQueuer enqueue"] = lambda: peer.run("one", args.one)
                bulk["PgQueuer enqueue (lists)"] = lambda: peer.run("bulk", args.bulk)
            rates_one = measure(one, args.one, args.runs, s.empty) if args.one else {}
            rates_bulk = measure(bulk, args.bulk, args.runs, s.empty) if args.bulk else {}
        finally:
            s.close()
            if peer is not None:
                peer.close()
    print(f"\nmedians of {args.runs} runs, systems alternating")
    if rates_one:
        table(
            f"one by one, {args.one:,} jobs per run",
            rates_one,
            ["bare INSERT", "PgQueuer enqueue"],
        )
    if rates_bulk:
        table(
            f"bulk, {args.bulk:,} jobs in one call",
            rates_bulk,
            ["bare unnest INSERT", "PgQueuer enqueue (lists)"],
        )
    print(f"\nload average after: {load()}")


if __name__ == "__main__":
    main()
