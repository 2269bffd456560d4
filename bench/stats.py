"""What the read side costs at 2M rows, and whether a stats poller slows the claim path.

    .venv/bin/python bench/stats.py [--rows 2000000] [--drain 5000] [--repeat 3]
                                    [--postgres 'postgresql://postgres@127.0.0.1/test?schema=bench']

For each broker (a fresh temporary SQLite file; and PostgreSQL when ``--postgres`` or
SLUICEGATE_BENCH_POSTGRES names a server, in a fresh schema dropped afterwards):

1. fill: ``--rows`` jobs written with one bulk INSERT ... SELECT (not through the
   broker: that would take an hour), spread over the last six days, oldest first: 97.5%
   succeeded, 2% dead, 0.5% cancelled, and the newest 10,000 ready or scheduled (half
   each); queues "email" (45%), "reports" (30%), "transcode" (20%), "webhooks" (5%),
   and "rare" (one job in 20,000, all of them finished). Then ANALYZE (PostgreSQL:
   VACUUM ANALYZE, as autovacuum would have done to a table this old). Where the schema
   records when each job finished for the stats (migration 0004), the fill stamps its
   rows as a finishing write would, so the first ``stats()`` finds them all unsettled.
2. ``stats()``: the first call after the fill, then 5 calls in a row (median), then
   ``--rounds`` rounds of 200 new jobs of queue "churn" enqueued, claimed and finished
   through the broker (190 acked, 10 dead) before each timed call: median and max.
3. ``queue_depths()``, and ``list_jobs`` newest first with the filters an operator uses
   (100 rows): each 5 times, median.
4. the claim path with and without a poller: one worker subprocess (1 pool, 8 thread
   slots, queue "default") started idle, then ``--drain`` no-op jobs enqueued in one
   transaction; rate = jobs / (first start .. last finish) from the broker's columns.
   In the "poller" runs a thread of this process calls ``stats()`` on its own broker
   handle every 100 ms for the whole drain (the mean and max call time are printed, and
   how often and how long those calls settled finished counts: on SQLite the time the
   claim path may have waited for them).
   Both kinds alternate ``--repeat`` times; the table gives medians. A fresh worker per
   run, so its pruner (first pass 15-30 s after start) never runs during a drain.

Prints figures, asserts nothing. Run it on two checkouts (PYTHONPATH=other/src) to
compare code before and after a change on the same machine in the same sitting.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

import benchapp  # noqa: E402
import sluicegate  # noqa: E402
from fill import fill_postgres, fill_sqlite  # noqa: E402
from pgscratch import connect, schema_of, server_info  # noqa: E402
from sluicegate.brokers import broker_from_url  # noqa: E402
from sluicegate.brokers.base import Broker  # noqa: E402
from sluicegate.codec import encode_payload  # noqa: E402
from sluicegate.job import ErrorInfo, JobSpec, JobState  # noqa: E402
from sluicegate.outcomes import Buried, Succeeded  # noqa: E402
from throughput import (  # noqa: E402
    Worker,
    broker_url,
    load,
    machine,
    median,
    open_app,
    wait_listening,
)


def timed(call: Callable[[], Any]) -> float:
    """Seconds one call takes."""
    t0 = time.perf_counter()
    call()
    return time.perf_counter() - t0


def ms(seconds: float) -> str:
    return f"{seconds * 1000:,.1f} ms"


def spec(queue: str) -> JobSpec:
    args_json, kwargs_json = encode_payload("noop", [], {})
    return JobSpec(task="noop", queue=queue, args_json=args_json, kwargs_json=kwargs_json)


def churn(broker: Broker, jobs: int = 200, dead: int = 10) -> None:
    """New jobs finished through the broker: what a stats call sees between two polls."""
    broker.enqueue([spec("churn") for _ in range(jobs)])
    claimed = broker.claim(["churn"], jobs, 60.0, "bench")
    boom = ErrorInfo("ValueError", "boom")
    outcomes = [
        Buried(c.claim, boom) if i < dead else Succeeded(c.claim, "null")
        for i, c in enumerate(claimed)
    ]
    broker.record([], outcomes)


def read_side(broker: Broker, rounds: int) -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []
    first = timed(broker.stats)
    rows.append(("stats(), first call after the fill", ms(first)))
    again = [timed(broker.stats) for _ in range(5)]
    rows.append(("stats(), again (nothing new), median of 5", ms(median(again))))
    steady = []
    for _ in range(rounds):
        churn(broker)
        steady.append(timed(broker.stats))
    rows.append((f"stats(), 200 new jobs before each, median of {rounds}", ms(median(steady))))
    rows.append((f"stats(), 200 new jobs before each, max of {rounds}", ms(max(steady))))
    listings: list[tuple[str, Callable[[], Any]]] = [
        ("queue_depths()", broker.queue_depths),
        ("list_jobs() (no filter)", lambda: broker.list_jobs(limit=100)),
        ("list_jobs(state=dead)", lambda: broker.list_jobs(JobState.DEAD, limit=100)),
        ("list_jobs(state=cancelled)", lambda: broker.list_jobs(JobState.CANCELLED, limit=100)),
        ("list_jobs(state=ready)", lambda: broker.list_jobs(JobState.READY, limit=100)),
        ("list_jobs(queue=email)", lambda: broker.list_jobs(queue="email", limit=100)),
        ("list_jobs(queue=rare)", lambda: broker.list_jobs(queue="rare", limit=100)),
        (
            "list_jobs(state=dead, queue=webhooks)",
            lambda: broker.list_jobs(JobState.DEAD, "webhooks", limit=100),
        ),
        (
            "list_jobs(state=succeeded, queue=rare)",
            lambda: broker.list_jobs(JobState.SUCCEEDED, "rare", limit=100),
        ),
    ]
    for label, call in listings:
        call()  # warm
        rows.append((f"{label}, median of 5", ms(median([timed(call) for _ in range(5)]))))
    return rows


class Poller:
    """A thread calling ``stats()`` every ``interval`` s on its own broker handle; where
    the broker settles finished counts (``_settle``), how long each settling took (on
    SQLite, what the claim path may wait for: it holds the write lock)."""

    def __init__(self, url: str, interval: float = 0.1) -> None:
        self.broker = broker_from_url(url)
        self.interval = interval
        self.calls: list[float] = []
        self.settles: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        settle = getattr(self.broker, "_settle", None)
        if settle is not None:

            def timed_settle(*args: Any, **kwargs: Any) -> None:
                t0 = time.perf_counter()
                try:
                    settle(*args, **kwargs)
                finally:
                    self.settles.append(time.perf_counter() - t0)

            self.broker._settle = timed_settle  # type: ignore[attr-defined]

    def _run(self) -> None:
        while not self._stop.is_set():
            self.calls.append(timed(self.broker.stats))
            self._stop.wait(self.interval)

    def __enter__(self) -> Poller:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.broker.close()


def drain_window(url: str, first: int, last: int) -> tuple[int, float]:
    """(jobs succeeded, first start .. last finish in s) of the jobs with ids in range."""
    query = (
        "SELECT count(*), min(coalesce(started_at, finished_at)), max(finished_at) FROM {t} "
        "WHERE id BETWEEN %s AND %s AND state = 'succeeded'"
    )
    if url.startswith("sqlite"):
        conn = sqlite3.connect(url.split("sqlite://", 1)[1])
        try:
            n, t0, t1 = conn.execute(
                query.format(t="jobs").replace("%s", "?"), (first, last)
            ).fetchone()
        finally:
            conn.close()
        return int(n), float(t1 - t0)
    table = f"{schema_of(url)}.jobs"
    with connect(url) as conn:
        n, t0, t1 = conn.execute(query.format(t=table), (first, last)).fetchone()  # type: ignore[misc]
    return int(n), (t1 - t0).total_seconds()


def drain_once(url: str, jobs: int, poll: bool) -> tuple[float, list[float], list[float]]:
    """One idle worker (8 thread slots), then ``jobs`` no-ops; returns (jobs/s, poll times,
    settling times)."""
    worker = Worker(url, burst=False)
    calls: list[float] = []
    settles: list[float] = []
    try:
        worker.wait_ready()
        wait_listening(url, 1)
        time.sleep(0.2)
        broker = benchapp.app.broker
        poller = Poller(url) if poll else None
        if poller:
            poller.__enter__()
        try:
            ids = [job.id for job in benchapp.noop.enqueue_many([[] for _ in range(jobs)])]
            deadline = time.monotonic() + max(120.0, jobs / 50)
            while True:
                depth = broker.queue_depths(["default"]).get("default")
                if depth is None or not (
                    depth.ready + depth.scheduled + depth.claimed + depth.running
                ):
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{jobs} jobs not drained in time")
                time.sleep(0.05)
        finally:
            if poller:
                poller.__exit__()
                calls, settles = poller.calls, poller.settles
    finally:
        worker.close()
    done, window = drain_window(url, min(ids), max(ids))
    if done != jobs:
        raise RuntimeError(f"drain: {done} of {jobs} jobs succeeded")
    return jobs / window, calls, settles


def measure(given: str | None, args: argparse.Namespace) -> tuple[list[tuple[str, str]], str]:
    name = "postgresql" if given else "sqlite"
    with broker_url(given) as url:
        broker = broker_from_url(url)  # migrates
        try:
            t0 = time.perf_counter()
            if given:
                fill_postgres(url, args.rows)
            else:
                fill_sqlite(url.split("sqlite://", 1)[1], args.rows)
            print(
                f"  {name}: filled {args.rows:,} rows in {time.perf_counter() - t0:.1f} s",
                flush=True,
            )
            rows = read_side(broker, args.rounds)
            for label, value in rows:
                print(f"  {name}: {label}: {value}", flush=True)
        finally:
            broker.close()
        open_app(url)
        try:
            runs: dict[bool, list[float]] = {False: [], True: []}
            polls: list[float] = []
            settled: list[float] = []
            for _ in range(args.repeat):
                for poll in (False, True):
                    rate, calls, settles = drain_once(url, args.drain, poll)
                    runs[poll].append(rate)
                    polls += calls
                    settled += settles
                    extra = (
                        f" ({len(calls)} stats() calls, mean {ms(statistics.fmean(calls))}, "
                        f"max {ms(max(calls))}; {len(settles)} settled, "
                        f"{ms(sum(settles))} in all)"
                        if calls
                        else ""
                    )
                    kind = "poller" if poll else "alone"
                    print(f"  {name}: drain {kind:<6} {rate:>8,.0f} jobs/s{extra}", flush=True)
        finally:
            benchapp.app.close()
    plain, polled = median(runs[False]), median(runs[True])
    rows.append((f"drain {args.drain:,} no-ops, 1x8 threads, alone", f"{plain:,.0f} jobs/s"))
    rows.append(
        ("drain, with stats() every 100 ms", f"{polled:,.0f} jobs/s ({polled / plain:.2f}x)")
    )
    if polls:
        rows.append(
            (
                "stats() during the drains: mean / max",
                f"{ms(statistics.fmean(polls))} / {ms(max(polls))}",
            )
        )
    if settled:
        per_drain = len(settled) / args.repeat
        rows.append(
            (
                "settlings per drain; each: mean / max",
                f"{per_drain:.1f}; {ms(statistics.fmean(settled))} / {ms(max(settled))}",
            )
        )
    return rows, name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--drain", type=int, default=5_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--postgres", default=os.environ.get("SLUICEGATE_BENCH_POSTGRES"))
    parser.add_argument("--skip-sqlite", action="store_true")
    args = parser.parse_args()
    brokers: list[str | None] = [] if args.skip_sqlite else [None]
    if args.postgres:
        brokers.append(args.postgres)
    load_before = load()
    tables = [measure(given, args) for given in brokers]
    print()
    print(f"sluicegate stats benchmark: {args.rows:,} rows, median of {args.repeat} drain(s)")
    print(f"machine: {machine()}")
    print(f"code:    {Path(sluicegate.__file__).parent} (the sluicegate measured)")
    if args.postgres:
        print(f"postgresql: {server_info(args.postgres)}")
    print(f"load:    1-min load average {load_before} before, {load()} after")
    for rows, name in tables:
        print(f"\n{name}")
        width = max(len(label) for label, _ in rows)
        for label, value in rows:
            print(f"  {label:<{width}}  {value:>22}")


if __name__ == "__main__":
    main()
