"""What the demo measures: per job, enqueue/start/finish times; per class, wait percentiles."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from ..context import current_job
from ..worker import PoolSpec
from .scenario import CLASSES


@dataclass(frozen=True, slots=True)
class ClassStats:
    """One job class in one run. Waits in ms; completion in s from the run's first enqueue."""

    job_class: str
    jobs: int
    p50_wait_ms: float
    p95_wait_ms: float
    max_wait_ms: float
    completion_s: float


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


class Recorder:
    """Thread-safe record of each job's enqueue, start and finish times (epoch seconds).

    The start is taken inside the task body, keyed by ``current_job().id``: the wait it
    gives (start - enqueued_at) is what a user of the job would see, with no ack or
    bookkeeping latency mixed in.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.enqueued: dict[int, tuple[str, float]] = {}
        self.started: dict[int, float] = {}
        self.finished: dict[int, float] = {}
        self.running = dict.fromkeys(CLASSES, 0)
        self.done = dict.fromkeys(CLASSES, 0)

    def on_enqueue(self, job_id: int, job_class: str, enqueued_at: float) -> None:
        with self._lock:
            self.enqueued[job_id] = (job_class, enqueued_at)

    def work(self, seconds: float) -> None:
        """A task body: note the start, 'work' for ``seconds``, note the finish."""
        started = time.time()
        job = current_job()
        with self._lock:
            self.started[job.id] = started
            self.running[job.queue] += 1
        time.sleep(seconds)
        with self._lock:
            self.finished[job.id] = time.time()
            self.running[job.queue] -= 1
            self.done[job.queue] += 1

    def snapshot(self) -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
        """Per class: enqueued, running and done counts."""
        with self._lock:
            enqueued = dict.fromkeys(CLASSES, 0)
            for job_class, _ in self.enqueued.values():
                enqueued[job_class] += 1
            return enqueued, dict(self.running), dict(self.done)

    def stats(self) -> dict[str, ClassStats]:
        """Per class figures; call once every enqueued job has finished."""
        with self._lock:
            first = min(at for _, at in self.enqueued.values())
            out = {}
            for job_class in CLASSES:
                ids = [i for i, (c, _) in self.enqueued.items() if c == job_class]
                if not ids:
                    continue
                waits = [max(0.0, self.started[i] - self.enqueued[i][1]) * 1000 for i in ids]
                out[job_class] = ClassStats(
                    job_class, len(ids), percentile(waits, 50), percentile(waits, 95),
                    max(waits), max(self.finished[i] for i in ids) - first,
                )  # fmt: skip
            return out
