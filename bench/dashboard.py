"""How long each dashboard page takes on a big table: 1,000,000 finished jobs and
100,000 ready, on SQLite and PostgreSQL.

    .venv/bin/python bench/dashboard.py [--rows 1101010] [--ready 100000] [--repeat 5]
                                        [--postgres 'postgresql://postgres@127.0.0.1/test?schema=bench']

For each broker (a fresh temporary SQLite file; and PostgreSQL when ``--postgres`` or
SLUICEGATE_BENCH_POSTGRES names a server, in a fresh schema dropped afterwards) the
table is filled as ``bench/stats.py`` fills it (one bulk INSERT, stamped for the stats
counters as a finishing write would, 97.5% succeeded, 2% dead, 0.5% cancelled, queues
email, reports, transcode, webhooks and a rare one), with the newest ``--ready`` rows
ready (and one in a hundred more scheduled). One ``stats()`` call then settles the counters, as the
workers' pruner would have long before; a worker's registry row (a real metrics
snapshot) and a limit are added. The dashboard's one-second cache of the system read
is turned off, so every request reads the broker. Each page is then requested ``--repeat`` times through
Starlette's test client (in process: no network), after one warm-up request; the table
gives the median and the slowest, against the target of 200 ms.

Prints figures, asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
sys.path.insert(0, str(BENCH_DIR))
sys.path.insert(0, str(ROOT / "tests" / "dashboard"))

from dash_kit import publish_worker  # noqa: E402
from starlette.testclient import TestClient  # noqa: E402

import fill  # noqa: E402
from pgscratch import scratch_schema, server_info  # noqa: E402
from sluicegate import App  # noqa: E402
from sluicegate.dashboard import asgi_app, data  # noqa: E402
from sluicegate.job import JobState  # noqa: E402
from sluicegate.limits import Limit  # noqa: E402

TARGET_MS = 200.0


def pages(app: App) -> list[str]:
    """The pages an operator opens, with the filters that reach deep into the table."""
    broker = app.broker
    newest = broker.list_jobs(None, None, 1)[0].id
    dead = broker.list_jobs(JobState.DEAD, "email", 1)[0].id
    done = broker.list_jobs(JobState.SUCCEEDED, "reports", 1)[0].id
    keyed = app.enqueue("noop", args=[], queue="email", unique_key="order-42")
    return [
        "/",
        "/jobs",
        "/jobs?state=succeeded",
        "/jobs?state=ready",
        "/jobs?state=scheduled",
        "/jobs?state=dead",
        "/dead",
        "/dead?queue=transcode",
        "/jobs?queue=email",
        "/jobs?state=succeeded&queue=rare",
        "/jobs?task=noop&state=succeeded",
        f"/jobs?before={newest - 1000}",
        f"/jobs?state=succeeded&before={done}",
        "/jobs?q=order-42",
        f"/jobs?q={keyed.id}",
        f"/jobs/{dead}",
        f"/jobs/{done}",
        "/workers",
        "/limits",
        "/queues/email",
        "/queues/rare",
    ]


def measure(url: str, repeat: int) -> list[tuple[str, float, float, int]]:
    app = App(broker=url, config=False)
    try:
        broker = app.broker
        t0 = time.perf_counter()
        broker.stats()  # settles the fill, as the pruner would have
        print(f"  first stats() after the fill (settling): {time.perf_counter() - t0:.1f} s")
        broker.register_limits([Limit("storage", concurrency=4)])
        publish_worker(app)
        client = TestClient(asgi_app(app), follow_redirects=False)
        rows = []
        for path in pages(app):
            client.get(path)  # warm-up: plans, caches
            times = []
            for _ in range(repeat):
                t0 = time.perf_counter()
                response = client.get(path)
                times.append((time.perf_counter() - t0) * 1000)
            rows.append((path, statistics.median(times), max(times), response.status_code))
        return rows
    finally:
        app.close()


def table(name: str, rows: list[tuple[str, float, float, int]]) -> None:
    print(f"\n{name}")
    print(f"  {'page':<44} {'status':>6} {'median':>10} {'slowest':>10}")
    for path, median, slowest, status in rows:
        flag = "" if slowest <= TARGET_MS else "  over 200 ms"
        print(f"  {path:<44} {status:>6} {median:>8.1f}ms {slowest:>8.1f}ms{flag}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_101_010, help="jobs in all")
    parser.add_argument("--ready", type=int, default=100_000, help="of them ready")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--postgres", default=os.environ.get("SLUICEGATE_BENCH_POSTGRES"))
    args = parser.parse_args()
    data.SYSTEM_TTL_S = 0.0  # every request reads the broker: no page served from the cache
    # The newest rows: 99 in 100 ready, the others scheduled an hour ahead.
    tail = args.ready * 100 // 99
    print(f"{args.rows - tail:,} finished, {args.ready:,} ready, {tail - args.ready:,} scheduled")
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "bench.db")
        url = f"sqlite:///{path}"
        App(broker=url, config=False).broker.close()  # the schema, by the broker
        t0 = time.perf_counter()
        fill.fill_sqlite(path, args.rows, tail, ready_percent=99)
        print(f"sqlite: filled in {time.perf_counter() - t0:.0f} s")
        table("sqlite", measure(url, args.repeat))
    if args.postgres:
        with scratch_schema(args.postgres) as url:
            App(broker=url, config=False).broker.close()
            t0 = time.perf_counter()
            fill.fill_postgres(url, args.rows, tail, ready_percent=99)
            print(f"postgresql: filled in {time.perf_counter() - t0:.0f} s ({server_info(url)})")
            table("postgresql", measure(url, args.repeat))


if __name__ == "__main__":
    main()
