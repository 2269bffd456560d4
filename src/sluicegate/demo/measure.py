"""What the demo measures: per job, enqueue/start/finish times; per class, wait percentiles.

The start and finish come from the job's own result (each task returns when its body
started and finished, and in which process), so a wait (start - enqueued) is what a user
of the job would see, with no ack or bookkeeping latency mixed in, and the same whether
the body ran in a thread, on an event loop or in a child process.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..job import Job
from ..worker import PoolSpec
from .scenario import CLASSES


@dataclass(frozen=True, slots=True)
class ClassStats:
    """One job class in one run. Waits in ms; completion in s from the run's first enqueue;
    ``processes``: how many child processes ran its jobs (0: the worker process itself)."""

    job_class: str
    jobs: int
    p50_wait_ms: float
    p95_wait_ms: float
    max_wait_ms: float
    completion_s: float
    processes: int = 0


@dataclass(frozen=True, slots=True)
class RunResult:
    """One run of the arrivals against one pool layout."""

    label: str
    pools: tuple[PoolSpec, ...]
    classes: dict[str, ClassStats]
    elapsed_s: float


@dataclass(frozen=True, slots=True)
class DemoResult:
    """Both runs, and the two-line conclusion drawn from them."""

    quick: bool
    shared: RunResult
    separate: RunResult
    conclusion: tuple[str, str]
    elapsed_s: float


def percentile(values: Sequence[float], q: float) -> float:
    """Linearly interpolated percentile (``q`` in 0..100) of a non-empty sequence."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("percentile of no values")
    rank = (len(ordered) - 1) * q / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def class_stats(classes: Mapping[int, str], jobs: Mapping[int, Job]) -> dict[str, ClassStats]:
    """Per class figures from the finished jobs (``classes``: job id -> job class)."""
    first = min(jobs[i].enqueued_at for i in classes)
    here = os.getpid()
    out = {}
    for job_class in CLASSES:
        done = [jobs[i] for i, c in classes.items() if c == job_class]
        if not done:
            continue
        waits = [max(0.0, j.result["started"] - j.enqueued_at) * 1000 for j in done]
        pids = {j.result["pid"] for j in done} - {here}
        out[job_class] = ClassStats(
            job_class,
            len(done),
            percentile(waits, 50),
            percentile(waits, 95),
            max(waits),
            max(j.result["finished"] for j in done) - first,
            len(pids),
        )
    return out
