"""Latency of single broker calls on an idle system: probe, claim, start, ack, enqueue.

What an idle worker pays between a wake-up and a job's start (a probe, a claim of one
job, the start write) and a producer per enqueue, one call at a time, as medians in
microseconds. Prints figures; asserts nothing.

    .venv/bin/python bench/single_calls.py [--broker URL] [--calls N]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid

from sluicegate.brokers import broker_from_url
from sluicegate.job import JobSpec


def measure(url: str, calls: int) -> dict[str, float]:
    broker = broker_from_url(url)
    timings: dict[str, list[float]] = {"enqueue": [], "probe": [], "claim": [], "start": []}
    timings["ack"] = []
    try:
        for _ in range(calls):
            t0 = time.perf_counter()
            broker.enqueue([JobSpec("t", "q", "[]", "{}")])
            t1 = time.perf_counter()
            broker.has_work(["q"])
            t2 = time.perf_counter()
            [claimed] = broker.claim(["q"], 8, 30, "bench")
            t3 = time.perf_counter()
            broker.start(claimed.claim)
            t4 = time.perf_counter()
            broker.ack(claimed.claim)
            t5 = time.perf_counter()
            took = (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4)
            for name, seconds in zip(timings, took, strict=True):
                timings[name].append(seconds)
    finally:
        broker.close()
    return {name: 1e6 * statistics.median(values) for name, values in timings.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--broker", metavar="URL", help="default: a temporary SQLite file")
    parser.add_argument("--calls", type=int, default=1000, metavar="N", help="default 1000")
    args = parser.parse_args()
    url = args.broker or f"sqlite:///{tempfile.mkdtemp()}/jobs.db"
    scratch = None
    if url.startswith("postgresql") and "schema=" not in url:
        scratch = f"bench_{uuid.uuid4().hex[:8]}"  # a schema of its own, dropped after
        url += ("&" if "?" in url else "?") + f"schema={scratch}"
    try:
        figures = measure(url, args.calls)
    finally:
        if scratch is not None:
            import psycopg

            from sluicegate.brokers.postgres import parse_postgres_url

            with psycopg.connect(parse_postgres_url(url)[0], autocommit=True) as conn:
                conn.execute(f"DROP SCHEMA IF EXISTS {scratch} CASCADE")
    print(f"broker: {url}")
    for name, micros in figures.items():
        print(f"  {name:8} {micros:8.1f} us (median of {args.calls})")


if __name__ == "__main__":
    main()
