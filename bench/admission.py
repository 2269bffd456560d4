"""What a queue's bounds cost an enqueue: plain enqueue against enqueue into a queue with
``max_ready`` and ``max_wait`` declared (never reached, so every job is stored), on SQLite
and, with --postgres, PostgreSQL. Each round alternates the two job by job, so the
server's drift hits both alike; the figure is the median over the rounds of the mean
per-enqueue time, and the overhead their ratio. The check alone is timed too.

A real worker serves the bounded queue (paused, so the jobs stay ready): the figures
come from its registry row, as in production. The bounded enqueue reads the broker's figures (queue depth, the worker registry) at most
once per second per queue (sluicegate.admission.DEFAULT_TTL); between reads it adds a dict
lookup and some arithmetic. The claim is: under 10% of plain enqueue.

    .venv/bin/python bench/admission.py [--jobs 2000] [--rounds 7] [--postgres URL]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from admission_overload import start_worker
from sluicegate import App
from sluicegate.task import NO_OPTIONS


def alternating(app: App, jobs: int) -> tuple[float, float]:
    """Seconds per plain and per bounded enqueue, alternating job by job."""
    plain = bounded = 0.0
    for _ in range(jobs):
        t0 = time.perf_counter()
        app.enqueue("parked", queue="plain")
        t1 = time.perf_counter()
        app.enqueue("parked", queue="bounded")
        t2 = time.perf_counter()
        plain, bounded = plain + t1 - t0, bounded + t2 - t1
    return plain / jobs, bounded / jobs


def check_alone(app: App, jobs: int) -> float:
    """Seconds per admission check with the figures cached (what a bounded enqueue adds)."""
    spec = app.build_spec("parked", queue="bounded")
    start = time.perf_counter()
    for _ in range(jobs):
        app._verdict(spec, NO_OPTIONS)
    return (time.perf_counter() - start) / jobs


def measure(url: str, jobs: int, rounds: int) -> tuple[float, float, float]:
    app = App(url, config=False)
    app.queue("bounded", max_ready=10**9, max_wait=86400.0)
    app.pause_queue("bounded")  # a live worker serves it (its registry row is read) but
    with tempfile.TemporaryDirectory() as folder:  # claims nothing: the jobs stay ready
        worker = start_worker(url, Path(folder))
        try:
            while not app.broker.list_workers().workers:
                if worker.poll() is not None:
                    raise SystemExit((Path(folder) / "worker.log").read_text())
                time.sleep(0.1)
            alternating(app, 100)  # warm: open, migrate, first figures
            plain, bounded = [], []
            for _ in range(rounds):
                p, b = alternating(app, jobs)
                plain.append(p)
                bounded.append(b)
            check = check_alone(app, 10 * jobs)
        finally:
            worker.terminate()
            worker.wait(30)
    app.close()
    return statistics.median(plain), statistics.median(bounded), check


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=2000, help="enqueues per round and kind")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--postgres", help="also on this PostgreSQL URL (use a scratch schema)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        brokers = [("sqlite", f"sqlite:///{Path(scratch) / 'jobs.db'}")]
        if args.postgres:
            brokers.append(("postgresql", args.postgres))
        for name, url in brokers:
            plain, bounded, check = measure(url, args.jobs, args.rounds)
            print(
                f"{name:<10} plain {plain * 1e6:6.0f} us   bounded {bounded * 1e6:6.0f} us   "
                f"overhead {100 * (bounded / plain - 1):+5.1f}%   "
                f"(the check alone, figures cached: {check * 1e6:.1f} us, "
                f"{100 * check / plain:.1f}% of plain)"
            )


if __name__ == "__main__":
    main()
