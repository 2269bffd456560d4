"""What a global limit costs: no-op drain throughput with a limit of 50 against none.

    .venv/bin/python bench/limits.py [--jobs N] [--repeat R] [--configs 1x8,2x32]
                                     [--postgres 'postgresql://postgres@127.0.0.1/test?schema=bench']

For each broker (a fresh temporary SQLite file; and PostgreSQL when ``--postgres`` or
SLUICEGATE_BENCH_POSTGRES names a server, in a fresh schema per measurement) and each
configuration W x S (W worker processes, S thread slots each): W idle workers, then N
no-op jobs enqueued in one transaction, either ``noop`` (no limit) or ``noop_limited``
(global concurrency limit "bench50" = 50); rate = N / (first start .. last finish) from
the broker's own timestamps. The two kinds alternate within each repeat, so both see
the same machine; the table gives medians and the limited/unlimited ratio. With 8
slots the limit never binds (the cost is the admission itself); with 2 x 32 = 64 slots
it does (at most 50 of them run). Prints figures, asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

import benchapp  # noqa: E402
from pgscratch import server_info  # noqa: E402
from throughput import (  # noqa: E402
    broker_url,
    load,
    machine,
    measure_warm_drain,
    median,
    parse_config,
)


def measure(url: str, n: int, workers: int, slots: int, limited: bool) -> float:
    """W idle workers x S slots, then N no-op jobs (limited or not); returns jobs/s."""
    task = benchapp.noop_limited if limited else benchapp.noop
    return measure_warm_drain(url, n, workers, slots, task)[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--configs",
        type=lambda text: [parse_config(c) for c in text.split(",")],
        default=[(1, 8), (2, 32)],
        help="WORKERSxSLOTS,... (default 1x8,2x32)",
    )
    parser.add_argument("--postgres", default=os.environ.get("SLUICEGATE_BENCH_POSTGRES"))
    args = parser.parse_args()
    brokers: list[str | None] = [None]  # None: a fresh temporary SQLite file each time
    if args.postgres:
        brokers.append(args.postgres)
    load_before = load()
    rows = []
    for given in brokers:
        name = "postgresql" if given else "sqlite"
        for workers, slots in args.configs:
            runs: dict[bool, list[float]] = {False: [], True: []}
            for _ in range(args.repeat):
                for limited in (False, True):
                    with broker_url(given) as url:
                        rate = measure(url, args.jobs, workers, slots, limited)
                    runs[limited].append(rate)
                    kind = "limit 50" if limited else "no limit"
                    print(f"  {name} {workers}x{slots} {kind:<8} {rate:>9,.0f} jobs/s", flush=True)
            plain, capped = median(runs[False]), median(runs[True])
            rows.append((name, f"{workers}x{slots}", plain, capped, capped / plain))
    print()
    print(f"sluicegate limits benchmark: {args.jobs:,} no-op jobs, median of {args.repeat} run(s)")
    print(f"machine: {machine()}")
    if args.postgres:
        print(f"postgresql: {server_info(args.postgres)}")
    print(f"load:    1-min load average {load_before} before, {load()} after")
    print(f"{'broker':<11} {'WxS':<5} {'no limit':>10} {'limit 50':>10} {'ratio':>6}")
    for name, config, plain, capped, ratio in rows:
        print(f"{name:<11} {config:<5} {plain:>10,.0f} {capped:>10,.0f} {ratio:>6.2f}")
    print("ratio = limited / unlimited jobs/s; the target is a cost under 20% (ratio >= 0.80)")


if __name__ == "__main__":
    main()
