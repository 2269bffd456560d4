"""Admission control: bounded queues that tell producers the truth (docs/admission.md).

A pool bounds how many jobs run at once, not how many wait: when arrivals outrun the
completion rate, the backlog and every job's wait grow without limit. A queue's bounds
refuse (``QueueFull``) or shed work at enqueue instead:

- ``max_ready``: ready jobs ahead of the new one;
- ``max_wait``: its predicted wait = jobs ahead x observed mean duration / effective
  concurrency (slots of the live pools serving the queue, lowered by the task's limits
  where they bind).

The figures come from the broker (``queue_depths``) and the workers' registry
(``list_workers``: their slots and the durations they measured), read at most once per
``ttl`` per producer process and queue; between reads the producer adds what it stored
itself. So the cost per enqueue is a dict lookup, and a bound across many producers is
approximate by the cache age (each of N producers may admit up to a ``ttl`` of its own
arrivals on a stale figure).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from .errors import ConfigError, QueueFull
from .names import check_name

if TYPE_CHECKING:
    from .brokers.base import Broker, WorkerList
    from .job import Job, JobSpec
    from .limits import Limit

Policy = Literal["refuse", "shed"]
POLICIES: tuple[Policy, ...] = ("refuse", "shed")
BOUND_KEYS = frozenset({"max_ready", "max_wait", "policy"})
DEFAULT_TTL = 1.0  # seconds a producer trusts its figures of a queue
DURATION_WINDOWS = ("1m", "5m", "15m")  # the first with finished jobs gives the mean
SHED_BY = "shed: queue full"


def check_max_wait(value: object, what: str = "max_wait") -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{what} must be a number of seconds, not {value!r}")
    if not (math.isfinite(value) and value > 0):
        raise ConfigError(f"{what} must be a positive finite number of seconds, not {value!r}")
    return float(value)


def check_max_ready(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"max_ready must be an integer >= 0, not {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class QueueBounds:
    """One queue's bounds, checked when made; None: that bound is not set."""

    queue: str
    max_ready: int | None = None
    max_wait: float | None = None
    policy: Policy = "refuse"

    def __post_init__(self) -> None:
        check_name("queue", self.queue)
        if self.max_ready is not None:
            check_max_ready(self.max_ready)
        if self.max_wait is not None:
            object.__setattr__(self, "max_wait", check_max_wait(self.max_wait))
        if self.policy not in POLICIES:
            raise ConfigError(f"policy must be one of {', '.join(POLICIES)}, not {self.policy!r}")
        if self.max_ready is None and self.max_wait is None:
            raise ConfigError(f"queue {self.queue!r}: give max_ready, max_wait, or both")


def predicted_wait(ahead: float, mean_duration: float | None, concurrency: float) -> float | None:
    """Seconds a job with ``ahead`` ready jobs before it waits to start: they drain at
    ``concurrency / mean_duration`` jobs per second. Infinite when nothing serves the
    queue but jobs are ahead; None when unknown (no duration observed yet)."""
    if ahead <= 0:
        return 0.0
    if concurrency <= 0:
        return math.inf
    if mean_duration is None:
        return None
    return ahead * mean_duration / concurrency


@dataclass(frozen=True, slots=True)
class Observed:
    """What the workers measured for one queue: slots of the live pools serving it, and
    the mean duration of its jobs (None: none finished yet), with the hosts they run on."""

    slots: int = 0
    mean_duration: float | None = None
    hosts: int = 0


def observe(workers: WorkerList, queue: str) -> Observed:
    """Slots and mean duration of ``queue`` from the live workers' registry rows."""
    from .metrics import histogram
    from .metrics.cluster import windows_of
    from .metrics.status import LIVE, current, worker_status

    rows = [row for row in current(workers) if worker_status(row[0], workers.now) == LIVE]
    slots, hosts = 0, set()
    for record, snap in rows:
        for pool in snap.get("pools", {}).values():
            if queue in pool["queues"]:
                slots += int(pool["slots"])
                hosts.add(record.info.host)
    mean = None
    for window in DURATION_WINDOWS:
        mean = histogram.mean(histogram.merge_all(w["duration"] for w in windows_of(
            (snap for _, snap in rows), queue, window)))  # fmt: skip
        if mean is not None:
            break
    return Observed(slots, mean, len(hosts))


def effective_concurrency(
    observed: Observed, costs: tuple[tuple[str, int], ...], limits: Mapping[str, Limit]
) -> float:
    """The pools' slots, lowered by each limit the task uses where it binds: a global
    concurrency limit lets ``concurrency // cost`` run at once (per host for a host
    scope); a rate lets ``rate / cost`` start per second, worth ``rate / cost x mean``
    slots. Partitioned limits bind per partition and are left out."""
    cap = float(observed.slots)
    for name, cost in costs:
        limit = limits.get(name)
        if limit is None or limit.partition is not None:
            continue
        if limit.concurrency is not None:
            per = limit.concurrency // cost
            cap = min(cap, per * max(1, observed.hosts) if limit.scope == "host" else per)
        if limit.rate is not None and observed.mean_duration:
            cap = min(cap, limit.rate / cost * observed.mean_duration)
    return cap


@dataclass(slots=True)
class _Figures:
    read_at: float  # monotonic
    ready: int
    observed: Observed
    mine: int = 0  # jobs this process stored in the queue since the read


@dataclass(frozen=True, slots=True)
class Verdict:
    """One enqueue's check: the figures it used, and whether to shed to make room."""

    depth: int
    predicted_wait: float | None
    shed: bool = False


class Gate:
    """A producer's admission check, with its per-queue figure cache (thread-safe)."""

    def __init__(self, ttl: float = DEFAULT_TTL, clock: Callable[[], float] = time.monotonic):
        self.ttl = ttl
        self._clock = clock
        self._lock = threading.Lock()
        self._figures: dict[str, _Figures] = {}
        self._workers: tuple[float, WorkerList] | None = None
        self._broker: Broker | None = None  # whose figures these are

    def forget(self) -> None:
        """Drop every cached figure (the broker changed)."""
        with self._lock:
            self._figures.clear()
            self._workers = None

    def figures(self, broker: Broker, queue: str) -> _Figures:
        now = self._clock()
        with self._lock:
            if broker is not self._broker:  # another broker (use_broker, borrowing)
                self._figures.clear()
                self._workers, self._broker = None, broker
            fig = self._figures.get(queue)
            if fig is not None and now - fig.read_at < self.ttl:
                return fig
            cached = self._workers
        if cached is None or now - cached[0] >= self.ttl:
            cached = (now, broker.list_workers(gone_within=0.0))
        depth = broker.queue_depths([queue]).get(queue)
        fig = _Figures(now, depth.ready if depth is not None else 0, observe(cached[1], queue))
        with self._lock:
            self._workers = cached
            self._figures[queue] = fig
        return fig

    def check(
        self,
        broker: Broker,
        spec: JobSpec,
        bounds: QueueBounds | None,
        max_wait: float | None,
        costs: tuple[tuple[str, int], ...],
        limits: Mapping[str, Limit],
    ) -> Verdict:
        """Raise QueueFull if storing ``spec`` breaks a bound (the queue's, or this
        enqueue's ``max_wait``, the tighter winning); else the verdict, ``shed`` when the
        queue's policy makes room by cancelling a ready job first."""
        verdict = self.estimate(broker, spec.queue, costs, limits)
        ahead, wait = verdict.depth, verdict.predicted_wait
        waits = [w for w in (bounds.max_wait if bounds else None, max_wait) if w is not None]
        limit_wait = min(waits) if waits else None
        broken: tuple[str, float] | None = None
        if bounds is not None and bounds.max_ready is not None and ahead >= bounds.max_ready:
            broken = ("max_ready", bounds.max_ready)
        elif limit_wait is not None and wait is not None and wait > limit_wait:
            broken = ("max_wait", limit_wait)
        if broken is None:
            return Verdict(ahead, wait)
        # Shedding keeps the queue within its own bounds; a tighter per-enqueue max_wait
        # is this caller's deadline, which cancelling the youngest job would not meet.
        own = broken[0] == "max_ready" or (bounds is not None and bounds.max_wait == limit_wait)
        if bounds is not None and bounds.policy == "shed" and own and ahead > 0:
            return Verdict(ahead, wait, shed=True)
        raise QueueFull(spec.queue, ahead, wait, *broken)

    def estimate(
        self,
        broker: Broker,
        queue: str,
        costs: tuple[tuple[str, int], ...] = (),
        limits: Mapping[str, Limit] | None = None,
    ) -> Verdict:
        """Jobs ahead of a new job of ``queue`` and its predicted wait, from the cached
        figures: the depth read, plus this process's jobs since, less what the observed
        concurrency finished since (for the wait only: the depth never under-counts)."""
        fig = self.figures(broker, queue)
        ahead = fig.ready + fig.mine
        concurrency = effective_concurrency(fig.observed, costs, limits or {})
        mean = fig.observed.mean_duration
        drained = 0.0
        if mean and concurrency > 0:
            drained = min(float(ahead), (self._clock() - fig.read_at) * concurrency / mean)
        return Verdict(ahead, predicted_wait(ahead - drained, mean, concurrency))

    def stored(self, queue: str, count: int = 1) -> None:
        """This process stored ``count`` jobs in ``queue``: they are ahead of the next."""
        with self._lock:
            fig = self._figures.get(queue)
            if fig is not None:
                fig.mine += count


def shed_one(broker: Broker, spec: JobSpec) -> Job | None:
    """Cancel the ready job of ``spec``'s queue that would start last (the lowest
    priority, then the youngest) to make room; None when none could be (the queue
    emptied, or every candidate was claimed first). A victim of higher priority than the
    new job is not cancelled: the new job is refused instead."""
    return broker.shed(spec.queue, spec.priority, by=SHED_BY)


def shed_refused(spec: JobSpec, verdict: Verdict, bounds: QueueBounds) -> QueueFull:
    """The QueueFull a ``shed`` queue raises when nothing could be shed for ``spec``."""
    if bounds.max_ready is not None and verdict.depth >= bounds.max_ready:
        return QueueFull(spec.queue, verdict.depth, verdict.predicted_wait, "max_ready",
                         bounds.max_ready)  # fmt: skip
    limit = bounds.max_wait if bounds.max_wait is not None else math.inf
    return QueueFull(spec.queue, verdict.depth, verdict.predicted_wait, "max_wait", limit)


def bounds_table(queue: str, table: Mapping[str, Any]) -> QueueBounds:
    """A ``[queues.NAME]`` table's bounds (the caller names file and key in errors)."""
    return QueueBounds(
        queue,
        max_ready=table.get("max_ready"),
        max_wait=table.get("max_wait"),
        policy=table.get("policy", "refuse"),
    )
