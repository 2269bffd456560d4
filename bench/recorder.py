"""What the worker's figures cost per job: the recorder's hot-path calls, in microseconds.

One job is the calls the worker makes for it in its main process: a claim, the busy
count going up, the start, the outcome, and the busy count going down, with the
dispatcher's own clock readings passed in (as the worker does). Times advance 1 ms per
job on a fake clock, so the rings move into a new slot now and then, as in a drain. No
broker, no threads: the figure (CPU time of this process, steadier than wall time on a
shared machine) is the recorder's own cost, which
``throughput.py --metrics-cost`` measures inside a whole drain. Prints figures; asserts
nothing. Run it with ``PYTHONPATH=OTHER/src`` to measure another checkout's code.

    .venv/bin/python bench/recorder.py [--jobs N] [--repeat R]
"""

from __future__ import annotations

import argparse
import statistics
import time

import sluicegate
from sluicegate.metrics.recorder import WorkerMetrics

POOLS = [("io", ["emails", "hooks"], "thread", 8), ("cpu", ["reports"], "process", 2)]
OUTCOMES = ("succeeded",) * 18 + ("retried", "dead")  # 10% failed attempts


def one_run(jobs: int) -> float:
    """Microseconds per job over ``jobs`` jobs."""
    now = [1000.0]
    m = WorkerMetrics("bench", POOLS, 2.0, 30.0, clock=lambda: now[0])
    queues = ("emails", "hooks")
    t0 = time.process_time()
    for i in range(jobs):
        t = now[0] = now[0] + 0.001
        queue = queues[i & 1]
        m.claimed("io", 1, 0.0005)
        m.busy_changed("io", 1, t)
        m.started("send", queue, 0.01, t)
        m.finished("io", "send", queue, 0.0008, OUTCOMES[i % 20], 1, False, t + 0.0008)
        m.busy_changed("io", 0, t + 0.0008)
    return (time.process_time() - t0) / jobs * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    one_run(10_000)  # warm up
    runs = [one_run(args.jobs) for _ in range(args.repeat)]
    print(f"recorder of {sluicegate.__file__}")
    print(
        f"  {statistics.median(runs):.2f} us per job (median of {args.repeat} x {args.jobs:,};"
        f" min {min(runs):.2f}, max {max(runs):.2f})"
    )


if __name__ == "__main__":
    main()
