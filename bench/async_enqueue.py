"""Async enqueue against the sync API, one by one and in bulk, on SQLite and PostgreSQL.

Per broker and way, the median of a few rounds, in jobs per second: ``task.enqueue`` in
a loop against ``await task.enqueue_async`` in a loop (one producer waiting for each
job), ``asyncio.gather`` of ``enqueue_async`` calls, 16 in flight (concurrent producers in
one loop: PostgreSQL runs them on its asyncio pool, ``pool_max`` connections, SQLite
on the broker's two threads), and
``enqueue_many`` against ``enqueue_many_async`` (one transaction). The machine's load
is printed before and after. Prints figures; asserts nothing.

    .venv/bin/python bench/async_enqueue.py [--jobs N] [--rounds R]
        [--postgres 'postgresql://postgres@127.0.0.1:5432/test?schema=bench']
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from pgscratch import scratch_schema, server_info
from sluicegate import App

IN_FLIGHT = 16
WAYS = ("one by one", "concurrent (gather)", "bulk (one call)")


def make_app(url: str) -> App:
    app = App(broker=url, config=False)

    @app.task(queue="bench")
    def work(i: int, note: str = "") -> None: ...

    return app


def sync_rounds(app: App, jobs: int) -> dict[str, float]:
    work = app.tasks["work"]
    t0 = time.perf_counter()
    for i in range(jobs):
        work.enqueue(i, note="x" * 50)
    t1 = time.perf_counter()
    work.enqueue_many([(i,) for i in range(jobs)])
    t2 = time.perf_counter()
    return {"one by one": jobs / (t1 - t0), "bulk (one call)": jobs / (t2 - t1)}


async def async_rounds(app: App, jobs: int) -> dict[str, float]:
    work = app.tasks["work"]

    async def timed(body: Callable[[], Awaitable[object]]) -> float:
        t0 = time.perf_counter()
        await body()
        return jobs / (time.perf_counter() - t0)

    async def one_by_one() -> None:
        for i in range(jobs):
            await work.enqueue_async(i, note="x" * 50)

    async def together() -> None:
        # At most IN_FLIGHT at once: calls past the pool's connections wait for one, and
        # that wait counts against call_timeout, as for sync callers in many threads.
        gate = asyncio.Semaphore(IN_FLIGHT)

        async def one(i: int) -> None:
            async with gate:
                await work.enqueue_async(i, note="x" * 50)

        await asyncio.gather(*(one(i) for i in range(jobs)))

    async def bulk() -> None:
        await work.enqueue_many_async([(i,) for i in range(jobs)])

    return {
        "one by one": await timed(one_by_one),
        "concurrent (gather)": await timed(together),
        "bulk (one call)": await timed(bulk),
    }


def measure(url: str, jobs: int, rounds: int) -> dict[tuple[str, str], float]:
    """Median jobs/s per (api, way)."""
    app = make_app(url)
    seen: dict[tuple[str, str], list[float]] = {}

    async def run_async() -> dict[str, float]:
        try:
            await app.tasks["work"].enqueue_async(-1)  # open the broker and pool first
            return await async_rounds(app, jobs)
        finally:
            await app.aclose()

    try:
        app.tasks["work"].enqueue(-1)
        for _ in range(rounds):
            for way, rate in sync_rounds(app, jobs).items():
                seen.setdefault(("sync", way), []).append(rate)
            for way, rate in asyncio.run(run_async()).items():
                seen.setdefault(("async", way), []).append(rate)
    finally:
        app.close()
    return {key: statistics.median(rates) for key, rates in seen.items()}


def table(name: str, figures: dict[tuple[str, str], float]) -> None:
    print(f"\n{name}")
    print(f"  {'way':<22}{'sync jobs/s':>14}{'async jobs/s':>15}{'async/sync':>12}")
    for way in WAYS:
        sync, asyn = figures.get(("sync", way)), figures.get(("async", way))
        ratio = f"{asyn / sync:.2f}" if sync and asyn else "-"
        sync_text = f"{sync:,.0f}" if sync else "-"
        async_text = f"{asyn:,.0f}" if asyn else "-"
        print(f"  {way:<22}{sync_text:>14}{async_text:>15}{ratio:>12}")


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.2f} (1 min), {five:.2f} (5 min) on {os.cpu_count()} CPUs"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1000, metavar="N", help="per way, default 1000")
    parser.add_argument("--rounds", type=int, default=5, metavar="R", help="default 5")
    parser.add_argument("--postgres", metavar="URL", help="also measure on this server")
    args = parser.parse_args()
    print(f"{args.jobs} jobs per way, median of {args.rounds} rounds; before: {load()}")
    with tempfile.TemporaryDirectory() as folder:
        table(
            "sqlite (synchronous=full)",
            measure(f"sqlite:///{folder}/jobs.db", args.jobs, args.rounds),
        )
    if args.postgres:
        with scratch_schema(args.postgres) as url:
            figures = measure(url, args.jobs, args.rounds)
            info = server_info(url)
        table(f"postgresql ({info})", figures)
    print(f"\nafter: {load()}")


if __name__ == "__main__":
    main()
