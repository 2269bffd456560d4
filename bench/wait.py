"""job.wait(): how soon a waiter returns after the ack, and what many waiters cost the broker.

Latency: one waiter at a time, idle (its hub asleep), the job acked through ANOTHER broker
handle (as a worker process would: the wake-up crosses the doorbell on SQLite, LISTEN/
NOTIFY on PostgreSQL); measured from the ack's return (its commit is done) and from the
ack's call, to wait() returning, sync (a thread) and async (wait_async on an event loop).

Queries: W waiters (asyncio tasks) on W jobs, then the jobs acked in batches of B; the
hub's own count of its reads (each ONE query for every waited id), while the waiters
register and per completion batch. Prints figures; asserts nothing.

    .venv/bin/python bench/wait.py [--postgres URL] [--jobs N] [--waiters W] [--batch B]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import queue
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from pgscratch import scratch_schema, server_info
from sluicegate import App
from sluicegate.brokers import broker_from_url
from sluicegate.brokers.base import Broker
from sluicegate.job import JobSpec
from sluicegate.outcomes import Succeeded

LEASE = 30.0


def load() -> str:
    return f"{os.getloadavg()[0]:.2f}"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def put_and_claim(acker: Broker) -> tuple[int, object]:
    [job] = acker.enqueue([JobSpec("t", "q", "[]", "{}")])
    [claimed] = acker.claim(["q"], 1, LEASE, "bench-wait")
    return job.id, claimed.claim


def latency_sync(url: str, jobs: int, spacing: float) -> tuple[list[float], list[float]]:
    """(from ack return, from ack call) per job, in ms."""
    app, acker = App(broker=url, config=False), broker_from_url(url)
    ids: queue.Queue[int | None] = queue.Queue()
    returned: queue.Queue[float] = queue.Queue()

    def waiter() -> None:
        while (job_id := ids.get()) is not None:
            app.wait(job_id, 30)
            returned.put(time.perf_counter())

    thread = threading.Thread(target=waiter, daemon=True)
    thread.start()
    after, before = [], []
    try:
        for _ in range(jobs + 1):  # the first one starts the hub: not counted
            job_id, claim = put_and_claim(acker)
            ids.put(job_id)
            time.sleep(spacing)  # the waiter registered, the hub asleep again
            t0 = time.perf_counter()
            acker.ack(claim, "1")  # type: ignore[arg-type]
            t1 = time.perf_counter()
            t2 = returned.get(timeout=30)
            after.append(max(0.0, t2 - t1) * 1000)
            before.append((t2 - t0) * 1000)
    finally:
        ids.put(None)
        thread.join(5)
        app.close()
        acker.close()
    return after[1:], before[1:]


def latency_async(url: str, jobs: int, spacing: float) -> tuple[list[float], list[float]]:
    app, acker = App(broker=url, config=False), broker_from_url(url)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    async def wait(job_id: int) -> float:
        await app.wait_async(job_id, 30)
        return time.perf_counter()

    after, before = [], []
    try:
        for _ in range(jobs + 1):
            job_id, claim = put_and_claim(acker)
            returned = asyncio.run_coroutine_threadsafe(wait(job_id), loop)
            time.sleep(spacing)
            t0 = time.perf_counter()
            acker.ack(claim, "1")  # type: ignore[arg-type]
            t1 = time.perf_counter()
            t2 = returned.result(timeout=30)
            after.append(max(0.0, t2 - t1) * 1000)
            before.append((t2 - t0) * 1000)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        app.close()
        acker.close()
    return after[1:], before[1:]


def queries(url: str, waiters: int, batch: int) -> dict[str, float]:
    """The hub's reads while ``waiters`` register, and per completion batch of ``batch``."""
    app, acker = App(broker=url, config=False), broker_from_url(url)
    try:
        jobs = acker.enqueue([JobSpec("t", "q", "[]", "{}") for _ in range(waiters)])
        hub = app._waiting()

        async def scenario() -> dict[str, float]:
            start = time.perf_counter()
            waits = [asyncio.ensure_future(app.wait_async(j.id, 120)) for j in jobs]
            while hub.waiting < waiters or hub._unchecked:
                await asyncio.sleep(0.005)
            registered = hub.queries
            registering_s = time.perf_counter() - start
            await asyncio.sleep(0.05)
            before, batches, finish = hub.queries, 0, time.perf_counter()
            left = waiters
            while left:
                claimed = acker.claim(["q"], min(batch, left), LEASE, "bench-wait")
                acker.record([], [Succeeded(c.claim, "1") for c in claimed])
                batches += 1
                left -= len(claimed)
                await asyncio.sleep(0)  # let waiters that returned run
            await asyncio.gather(*waits)
            finish_s = time.perf_counter() - finish
            during = hub.queries - before
            return {
                "registered": registered,
                "registering_s": registering_s,
                "batches": batches,
                "during": during,
                "per_batch": during / batches,
                "finish_s": finish_s,
            }

        return asyncio.run(scenario())
    finally:
        app.close()
        acker.close()


@contextmanager
def sqlite_url() -> Iterator[str]:
    folder = tempfile.mkdtemp(prefix="sluicegate-wait-")
    try:
        yield f"sqlite:///{folder}/wait.db"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--postgres", metavar="URL", help="also PostgreSQL: ...?schema=NAME")
    parser.add_argument("--jobs", type=int, default=200, help="latency jobs per mode (200)")
    parser.add_argument("--spacing", type=float, default=20, help="ms idle before each ack")
    parser.add_argument("--waiters", type=int, default=1000, help="concurrent waiters (1000)")
    parser.add_argument("--batch", type=int, default=100, help="jobs per ack batch (100)")
    args = parser.parse_args()
    print(f"load average before: {load()}; nproc {os.cpu_count()}", flush=True)
    brokers: list[tuple[str, object]] = [("sqlite", sqlite_url)]
    if args.postgres:
        print(f"postgresql: {server_info(args.postgres)}")
        brokers.append(("postgresql", lambda: scratch_schema(args.postgres)))
    lat_rows, q_rows = [], []
    for name, fresh in brokers:
        for mode, measure in (("sync", latency_sync), ("async", latency_async)):
            with fresh() as url:  # type: ignore[operator]
                after, before = measure(url, args.jobs, args.spacing / 1000)
            lat_rows.append((name, mode, after, before))
            print(f"[{name} {mode}] p50 {statistics.median(after):.2f} ms", flush=True)
        with fresh() as url:  # type: ignore[operator]
            q_rows.append((name, queries(url, args.waiters, args.batch)))
        print(f"[{name} queries] {q_rows[-1][1]}", flush=True)

    print(
        f"\njob.wait() latency, {args.jobs} jobs each, idle ({args.spacing:g} ms before each ack):"
    )
    head = f"  {'broker':<11} {'mode':<6} {'from ack return: p50':>21} {'p99':>8}"
    print(head + f" {'from ack call: p50':>19} {'p99':>8}")
    for name, mode, after, before in lat_rows:
        print(
            f"  {name:<11} {mode:<6} {statistics.median(after):>18.2f} ms {pct(after, 0.99):>5.2f} ms"
            f" {statistics.median(before):>16.2f} ms {pct(before, 0.99):>5.2f} ms"
        )
    print(f"\nbroker queries of the waiting hub, {args.waiters} concurrent waiters (asyncio):")
    print(
        f"  {'broker':<11} {'while registering':>18} {'ack batches':>12} "
        f"{'queries then':>13} {'per batch':>10}"
    )
    for name, r in q_rows:
        print(
            f"  {name:<11} {r['registered']:>18.0f} {r['batches']:>12.0f} "
            f"{r['during']:>13.0f} {r['per_batch']:>10.2f}"
        )
    print(f"\nload average after: {load()}")


if __name__ == "__main__":
    main()
