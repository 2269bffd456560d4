"""PgQueuer on PostgreSQL, driven through the contract in bench/peers/README.md.

Used the way PgQueuer's docs show: an asyncpg connection wrapped in ``AsyncpgDriver``,
``Queries.enqueue(entrypoint, payload)`` for one job, the same call with lists for a
batch (one INSERT ... SELECT FROM unnest), and a worker built by a factory and run by
``pgqueuer.run`` (what ``pgq run`` calls, on uvloop as ``pgq run`` does).

The payload is JSON bytes ``{"i": index, "s": sent}``; the worker learns the sink path
and the task from its own ``--sink``/``--task`` options (one entrypoint, ``bench``).
A ``?schema=NAME`` in ``--broker`` puts PgQueuer's tables in that schema (search_path).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
from collections.abc import AsyncIterator
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import asyncpg
import contract
import pgqueuer
import sink
import uvloop
from pgqueuer import AsyncpgDriver, Job, PgQueuer, Queries

ENTRYPOINT = "bench"
# PgQueuer.run / QueueManager.run keyword defaults in the installed version.
DEFAULTS = "batch_size=10, concurrency_limit=0 (unbounded), heartbeat_timeout=30 s"


def split_dsn(url: str) -> tuple[str, str | None]:
    """The DSN without a ``schema`` query parameter (asyncpg would send it as a GUC)."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query)
    schema = next((v for k, v in query if k == "schema"), None)
    rest = urlencode([(k, v) for k, v in query if k != "schema"])
    return urlunsplit(parts._replace(query=rest)), schema


async def connect(url: str) -> asyncpg.Connection:
    dsn, schema = split_dsn(url)
    settings = {"search_path": schema} if schema else None
    return await asyncpg.connect(dsn, server_settings=settings)


async def setup(args: argparse.Namespace) -> dict[str, object]:
    dsn, schema = split_dsn(args.broker)
    conn = await asyncpg.connect(dsn)
    if schema:
        await conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
        await conn.close()
        conn = await connect(args.broker)
    queries = Queries(AsyncpgDriver(conn))
    if not await queries.schema_is_installed():
        await queries.install()
    await conn.close()
    return {}


def payload(index: int, sent: bool) -> bytes:
    return json.dumps({"i": index, "s": time.time() if sent else 0.0}).encode()


async def enqueue(args: argparse.Namespace) -> dict[str, object]:
    conn = await connect(args.broker)
    queries = Queries(AsyncpgDriver(conn))
    n = args.jobs
    start = time.perf_counter()
    if args.mode == "one":
        for i in range(n):
            await queries.enqueue(ENTRYPOINT, payload(i, args.sent))
    else:
        await queries.enqueue([ENTRYPOINT] * n, [payload(i, args.sent) for i in range(n)], [0] * n)
    seconds = time.perf_counter() - start
    await conn.close()
    return {"seconds": seconds, "jobs": n}


async def latency(args: argparse.Namespace) -> dict[str, object]:
    conn = await connect(args.broker)
    queries = Queries(AsyncpgDriver(conn))
    for i in range(args.jobs):
        await asyncio.sleep(args.spacing / 1000)
        await queries.enqueue(ENTRYPOINT, payload(i, True))
    await conn.close()
    return {"jobs": args.jobs}


def worker_settings(concurrency: str) -> tuple[int, int, int | None, str]:
    """(entrypoint concurrency_limit, batch_size, max_concurrent_tasks, notes) for C.

    ``max_concurrent_tasks`` is the documented hard cap on one worker's picked jobs, but
    it must be at least twice ``batch_size``: C slots run with batch_size=min(10, C//2).
    The entrypoint's ``concurrency_limit=8`` also bounds them, but measured 13x slower
    at batch 10: finished jobs stay counted as picked until the status buffer flushes
    (at batch_size entries or after 0.1 s), so 8 done jobs hold the cap for 0.1 s.
    """
    if concurrency == "default":
        return 0, 10, None, f"PgQueuer defaults: {DEFAULTS}"
    c = int(concurrency)
    if c < 2:
        return c, 10, None, f"entrypoint concurrency_limit={c}, batch_size=10"
    batch = min(10, c // 2)
    return 0, batch, c, f"max_concurrent_tasks={c}, batch_size={batch} (its largest allowed)"


def worker(args: argparse.Namespace) -> None:
    path, io20 = args.sink, args.task == "io20"
    limit, batch, cap, notes = worker_settings(args.concurrency)

    @contextlib.asynccontextmanager
    async def factory() -> AsyncIterator[PgQueuer]:
        conn = await connect(args.broker)
        pgq = PgQueuer.from_asyncpg_connection(conn)

        @pgq.entrypoint(ENTRYPOINT, concurrency_limit=limit)
        async def bench(job: Job) -> None:
            body = json.loads(job.payload or b"{}")
            sink.stamp(path, body["i"], body["s"])
            if io20:
                await asyncio.sleep(0.02)
                sink.stamp(path + ".done", body["i"], body["s"])

        print(json.dumps({"ready": True, "notes": notes}), flush=True)
        yield pgq
        await conn.close()

    # pgqueuer.run installs SIGINT/SIGTERM handlers that stop the worker.
    uvloop.run(pgqueuer.run(factory, batch_size=batch, max_concurrent_tasks=cap))


def describe() -> dict[str, object]:
    return {
        "system": "PgQueuer",
        "version": pgqueuer.__version__,
        "default_concurrency": "unbounded (concurrency_limit=0), batch_size=10",
        "notes": (
            f"{DEFAULTS}; asyncio, one asyncpg connection. N-way = max_concurrent_tasks=N "
            "with batch_size=min(10, N//2). Bulk = Queries.enqueue with lists (one "
            "statement). A killed worker's picked jobs are re-picked by a live worker's "
            "next dequeue once their heartbeat is older than heartbeat_timeout (30 s); an "
            "idle worker dequeues on NOTIFY or every dequeue_timeout (30 s): 30-60 s"
        ),
    }


def main() -> None:
    args = contract.parse_args(__doc__)
    if args.role == "worker":
        worker(args)
        return
    if args.role == "describe":
        out = describe()
    else:
        out = uvloop.run({"setup": setup, "enqueue": enqueue, "latency": latency}[args.role](args))
    sys.stdout.write(json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
