"""Procrastinate on PostgreSQL (psycopg 3 connector), driven through bench/peers/README.md.

Used the way Procrastinate's docs show: an ``App`` over a ``PsycopgConnector``, its schema
applied by the app's ``SchemaManager`` (what ``procrastinate schema --apply`` runs), one
job = ``task.defer(...)`` on the synchronously opened app, bulk = ``task.batch_defer(...)``
(one INSERT for the whole list), and the worker = ``app.run_worker_async`` with an async
task (the docs' advice for concurrency above 1).

The job's arguments are ``i`` (index) and ``s`` (sent); the worker learns the sink path
and the task from its own ``--sink``/``--task`` options. A ``?schema=NAME`` in
``--broker`` puts Procrastinate's objects in that schema (search_path).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from importlib.metadata import version
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import contract
import procrastinate
import psycopg
import sink
from psycopg.conninfo import make_conninfo

STATE = {"sink": "", "io20": False}

DEFAULTS = (
    "concurrency=1 (one job at a time), listen_notify=True, fetch_job_polling_interval=5 s, "
    "delete_jobs=never (finished rows stay in procrastinate_jobs)"
)


def conninfo(url: str) -> tuple[str, str | None]:
    """A libpq conninfo for --broker, with ``?schema=`` turned into a search_path option."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query)
    schema = next((v for k, v in query if k == "schema"), None)
    dsn = urlunsplit(parts._replace(query=urlencode([(k, v) for k, v in query if k != "schema"])))
    if schema:
        return make_conninfo(dsn, options=f"-c search_path={schema}"), schema
    return dsn, None


def make_app(url: str) -> tuple[procrastinate.App, procrastinate.Task]:
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=conninfo(url)[0]))

    @app.task(name="bench")
    async def bench(i: int, s: float) -> None:
        sink.stamp(STATE["sink"], i, s)
        if STATE["io20"]:
            await asyncio.sleep(0.02)
            sink.stamp(STATE["sink"] + ".done", i, s)

    return app, bench


def setup(args: argparse.Namespace) -> dict[str, object]:
    info, schema = conninfo(args.broker)
    with psycopg.connect(info, autocommit=True) as conn:
        if schema:
            conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
        installed = conn.execute("SELECT to_regclass('procrastinate_jobs')").fetchone()
    if installed and installed[0] is not None:
        return {}
    app, _ = make_app(args.broker)
    with app.open():
        app.schema_manager.apply_schema()
    return {}


def enqueue(args: argparse.Namespace) -> dict[str, object]:
    app, task = make_app(args.broker)
    n, sent = args.jobs, args.sent
    with app.open():
        app.check_connection()  # connect before the clock starts
        if args.mode == "one":
            start = time.perf_counter()
            for i in range(n):
                task.defer(i=i, s=time.time() if sent else 0.0)
        else:
            calls = [{"i": i, "s": 0.0} for i in range(n)]  # the callers' data, as for sluicegate
            start = time.perf_counter()
            task.batch_defer(*calls)
        seconds = time.perf_counter() - start
    return {"seconds": seconds, "jobs": n}


def latency(args: argparse.Namespace) -> dict[str, object]:
    app, task = make_app(args.broker)
    with app.open():
        app.check_connection()
        for i in range(args.jobs):
            time.sleep(args.spacing / 1000)
            task.defer(i=i, s=time.time())
    return {"jobs": args.jobs}


def worker(args: argparse.Namespace) -> None:
    STATE["sink"], STATE["io20"] = args.sink, args.task == "io20"
    app, _ = make_app(args.broker)
    options = {} if args.concurrency == "default" else {"concurrency": int(args.concurrency)}
    notes = f"Procrastinate defaults: {DEFAULTS}"
    if options:
        notes = f"concurrency={args.concurrency} (asyncio tasks), other settings default"

    async def run() -> None:
        async with app.open_async():
            await app.check_connection_async()
            print(json.dumps({"ready": True, "notes": notes}), flush=True)
            # Its own signal handlers stop it gracefully on SIGTERM/SIGINT.
            await app.run_worker_async(**options)

    asyncio.run(run())


def describe() -> dict[str, object]:
    return {
        "system": "Procrastinate",
        "version": version("procrastinate"),
        "default_concurrency": "1",
        "notes": (
            f"{DEFAULTS}; asyncio worker, psycopg 3 pool. Bulk = task.batch_defer. "
            "A killed worker's jobs stay 'doing': no retry by default (the docs' recipe "
            "is a periodic task calling job_manager.get_stalled_jobs and retry_job; "
            "stalled_worker_timeout=30 s only prunes the worker row)"
        ),
    }


def main() -> None:
    args = contract.parse_args(__doc__)
    if args.role == "worker":
        worker(args)
        return
    roles = {"setup": setup, "enqueue": enqueue, "latency": latency}
    out = describe() if args.role == "describe" else roles[args.role](args)
    sys.stdout.write(json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
