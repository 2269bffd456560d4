"""A worker's figures, kept in its main process and read as one ``schema.Snapshot``.

The worker calls the recorder on its hot path (every claim, start and end of a job), so
each call is a few dict lookups and integer or list updates: no I/O, no locks, nothing
allocated after a task, queue or concurrency level is first seen. All the folding into
windows and dicts happens in ``snapshot``, once per publish. Not thread-safe: one thread
(the worker's loop) makes every call.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Protocol

from .histogram import Histogram
from .minutes import (
    BUCKETS,
    STEP_S,
    MinuteBusy,
    MinuteCounts,
    MinuteMax,
    MinuteRing,
    covered,
)
from .schema import (
    VERSION,
    Bin,
    Health,
    History,
    HostFigures,
    LimitFigures,
    PoolFigures,
    PoolHistory,
    QueueFigures,
    QueueHistory,
    QueueWindow,
    Snapshot,
    TaskFigures,
    WorkerFigures,
)
from .utilisation import BusyTracker
from .windows import Clock, CountWindow, HistWindow

OUTCOMES = ("succeeded", "retried", "dead")
REBASE_S = 1.0  # how far the wall clock may move against the monotonic one unnoticed


class DepthLike(Protocol):
    """What ``depths`` reads of a broker's depth sample (``brokers.QueueDepth``)."""

    @property
    def ready(self) -> int: ...
    @property
    def scheduled(self) -> int: ...
    @property
    def claimed(self) -> int: ...
    @property
    def running(self) -> int: ...
    @property
    def oldest_ready_age_s(self) -> float: ...


class _Queue:
    __slots__ = (
        "age_m",
        "claimed",
        "completed",
        "completed_m",
        "completed_w",
        "duration_w",
        "enqueued",
        "enqueued_w",
        "failed",
        "failed_m",
        "oldest_ready_age_s",
        "ready",
        "running",
        "scheduled",
        "wait_w",
    )

    def __init__(self, clock: Clock, start: float, offset: float, now: float) -> None:
        self.ready = self.scheduled = self.claimed = self.running = 0
        self.oldest_ready_age_s = 0.0
        self.enqueued = self.completed = self.failed = 0
        self.enqueued_w = CountWindow(clock, start)
        self.completed_w = CountWindow(clock, start)
        self.duration_w = HistWindow(clock, start)
        self.wait_w = HistWindow(clock, start)
        # The last hour by wall-clock minute (``minutes``), from ``now``: buckets before
        # a queue was first seen read as zero.
        self.completed_m = MinuteCounts(offset, now)
        self.failed_m = MinuteCounts(offset, now)
        self.age_m = MinuteMax(offset, now)


class _Pool:
    __slots__ = (
        "busy",
        "busy_m",
        "by_concurrency",
        "claimed",
        "model",
        "queues",
        "slots",
        "tracker",
    )

    def __init__(
        self, queues: list[str], model: str, slots: int, clock: Clock, start: float, offset: float
    ) -> None:
        self.queues = list(queues)
        self.model = model
        self.slots = slots
        self.busy = 0
        self.claimed = 0
        self.tracker = BusyTracker(slots, clock, start)
        self.busy_m = MinuteBusy(offset, start)
        self.by_concurrency: dict[int, _Bin] = {}


class _Bin:
    __slots__ = ("count", "sum")

    def __init__(self) -> None:
        self.count = 0
        self.sum = 0.0


class _Task:
    __slots__ = ("dead", "duration", "queues", "retried", "succeeded", "timed_out", "wait")

    def __init__(self) -> None:
        self.queues: set[str] = set()
        self.succeeded = self.retried = self.dead = self.timed_out = 0
        self.duration = Histogram()
        self.wait = Histogram()


class WorkerMetrics:
    """The recorder of one worker process. ``pools``: (name, queues, model, slots) each;
    naming a pool not among them is a KeyError (a wiring bug), while tasks and queues are
    added as they are first seen. ``clock`` times every figure; ``wall`` (the epoch) only
    places the per-minute history's buckets on whole minutes."""

    def __init__(
        self,
        worker_id: str,
        pools: list[tuple[str, list[str], str, int]],
        interval_s: float,
        lease_s: float,
        clock: Clock = time.monotonic,
        wall: Clock = time.time,
    ) -> None:
        self.worker_id = worker_id
        self.interval_s = interval_s
        self.lease_s = lease_s
        self._clock = clock
        self._wall = wall
        self._start = start = clock()
        self._offset = offset = wall() - start  # epoch = monotonic + offset
        self._since = start + offset  # the history covers from here (epoch s)
        self._pools = {
            name: _Pool(queues, model, slots, clock, start, offset)
            for name, queues, model, slots in pools
        }
        self._queues: dict[str, _Queue] = {}
        for pool in self._pools.values():
            for queue in pool.queues:
                self._queue(queue)
        self._tasks: dict[str, _Task] = {}
        self._claimed = self._released = self._recovered = 0
        self._lease_lost = self._broker_errors = 0
        self._heartbeat_lag_s = 0.0
        self._claim_latency = Histogram()
        self._limits: dict[str, LimitFigures] = {}
        self._host: HostFigures = {
            "cpus": 0,
            "cpu_percent": 0.0,
            "iowait_percent": None,
            "load1": 0.0,
            "load5": 0.0,
            "load15": 0.0,
        }

    def _queue(self, name: str) -> _Queue:
        queue = self._queues.get(name)
        if queue is None:  # a pool's queue, or one a job came from anyway
            queue = self._queues[name] = _Queue(
                self._clock, self._start, self._offset, self._clock()
            )
        return queue

    def _task(self, name: str, queue: str) -> _Task:
        task = self._tasks.get(name)
        if task is None:
            task = self._tasks[name] = _Task()
        task.queues.add(queue)
        return task

    # ---- the hot path --------------------------------------------------
    def claimed(self, pool: str, jobs: int, latency_s: float) -> None:
        """One broker claim call for ``pool`` returned ``jobs`` jobs in ``latency_s``."""
        self._pools[pool].claimed += jobs
        self._claim_latency.observe(latency_s)

    def started(self, task: str, queue: str, wait_s: float, now: float | None = None) -> None:
        """A job's body began after waiting ``wait_s`` since it was ready. The recorder
        keeps nothing per job: the pool's busy count comes from ``busy_changed``, and the
        caller hands the busy slots at the start to ``finished`` (``busy_at_start``)."""
        self._task(task, queue).wait.observe(wait_s)
        self._queue(queue).wait_w.observe(wait_s, now)

    def finished(
        self,
        pool: str,
        task: str,
        queue: str,
        duration_s: float,
        outcome: str,
        busy_at_start: int,
        timed_out: bool = False,
        now: float | None = None,
    ) -> None:
        """An attempt ended (at ``now`` on the recorder's clock, or the clock's time): ``outcome`` is "succeeded", "retried" or "dead" (a timeout is
        also one of the last two, with ``timed_out``). Every attempt counts in the
        durations, since each held a slot; only succeeded and dead jobs are completed."""
        t = self._task(task, queue)
        q = self._queue(queue)
        if outcome == "succeeded":
            t.succeeded += 1
        elif outcome == "retried":
            t.retried += 1
        elif outcome == "dead":
            t.dead += 1
        else:
            raise ValueError(f"unknown outcome {outcome!r}; expected one of {OUTCOMES}")
        if timed_out:
            t.timed_out += 1
        t.duration.observe(duration_s)
        if now is None:
            now = self._clock()
        if outcome != "succeeded":
            q.failed += 1
            q.failed_m.add(now)
        if outcome != "retried":
            q.completed += 1
            q.completed_w.add(1, now)
            q.completed_m.add(now)
        q.duration_w.observe(duration_s, now)
        bins = self._pools[pool].by_concurrency
        b = bins.get(busy_at_start)
        if b is None:
            b = bins[busy_at_start] = _Bin()
        b.count += 1
        b.sum += duration_s

    def busy_changed(self, pool: str, busy: int, now: float | None = None) -> None:
        """The pool's busy slots became ``busy`` (call on every change, up and down)."""
        p = self._pools[pool]
        p.busy = busy
        if now is None:
            now = self._clock()
        p.tracker.change(busy, now)
        p.busy_m.change(busy, now)

    def tallies(
        self,
        *,
        claimed: int,
        released: int,
        recovered: int,
        lease_lost: int,
        broker_errors: int,
        heartbeat_lag_s: float,
    ) -> None:
        """The worker's own totals as they stand (counted where they happen, metrics on
        or off), and how late its last lease heartbeat ran past its due time."""
        self._claimed = claimed
        self._released, self._recovered = released, recovered
        self._lease_lost, self._broker_errors = lease_lost, broker_errors
        self._heartbeat_lag_s = heartbeat_lag_s

    # ---- broker and host samples (once per publish) --------------------
    def depths(self, figures: Mapping[str, DepthLike]) -> None:
        """The latest depth sample for this worker's queues. A queue of ours missing from
        it has no unfinished jobs (the broker returns only queues with some); others'
        queues are ignored. The oldest age also goes into its minute's maximum."""
        now = self._clock()
        for name, q in self._queues.items():
            d = figures.get(name)
            if d is None:
                q.ready = q.scheduled = q.claimed = q.running = 0
                q.oldest_ready_age_s = 0.0
                q.age_m.observe(0.0, now)
            else:
                q.ready, q.scheduled, q.claimed, q.running = (
                    d.ready,
                    d.scheduled,
                    d.claimed,
                    d.running,
                )
                q.oldest_ready_age_s = d.oldest_ready_age_s
                q.age_m.observe(d.oldest_ready_age_s, now)

    def arrived(self, counts: dict[str, int]) -> None:
        """Jobs stored per queue since the last call (anyone's); other queues are ignored."""
        now = self._clock()
        for name, n in counts.items():
            q = self._queues.get(name)
            if q is not None and n:
                q.enqueued += n
                q.enqueued_w.add(n, now)

    def limits(self, figures: dict[str, LimitFigures]) -> None:
        self._limits = figures

    def host(self, figures: HostFigures) -> None:
        self._host = figures

    # ---- the snapshot ----------------------------------------------------
    def snapshot(self, health: Health, held: int) -> Snapshot:
        """Everything, as the JSON-safe dict a registry heartbeat carries."""
        now = self._clock()
        at = self._wall()
        pools = {name: _pool_figures(p, now) for name, p in self._pools.items()}
        return {
            "v": VERSION,
            "worker": self.worker_id,
            "at": at,
            "uptime_s": max(0.0, now - self._start),
            "interval_s": self.interval_s,
            "lease_s": self.lease_s,
            "health": health,
            "queues": {name: _queue_figures(q, now) for name, q in self._queues.items()},
            "pools": pools,
            "tasks": {name: _task_figures(t) for name, t in self._tasks.items()},
            "worker_figures": self._worker_figures(held),
            "host": self._host,
            "limits": dict(self._limits),
            "history": self._history(now, at),
        }

    def _history(self, now: float, at: float) -> History:
        """The last hour by wall-clock minute: every list holds one entry per minute
        covered since the worker started (at most 60), oldest first; a list that would be
        all zeros is left out."""
        rings: list[MinuteRing] = [p.busy_m for p in self._pools.values()]
        rings += [r for q in self._queues.values() for r in (q.completed_m, q.failed_m, q.age_m)]
        if abs(at - now - self._offset) > REBASE_S:  # the wall clock was stepped
            self._offset = at - now
            for ring in rings:
                ring.rebase(self._offset)
        until = now + self._offset
        # Every series ends at the same minute: a ring never moves back, even if the wall
        # clock did.
        newest = max([int(until // STEP_S), *(ring.head for ring in rings)])
        count = max(1, min(BUCKETS, newest - int(self._since // STEP_S) + 1))
        minutes = range(newest - count + 1, newest + 1)
        cover = [covered(m, self._since, until) for m in minutes]
        return {
            "step_s": STEP_S,
            "newest": newest * STEP_S,
            "since": _tenths(self._since),
            "until": _tenths(until),
            "queues": {name: _queue_history(q, newest, count) for name, q in self._queues.items()},
            "pools": {
                name: _pool_history(p, now, newest, cover) for name, p in self._pools.items()
            },
        }

    def _worker_figures(self, held: int) -> WorkerFigures:
        return {
            "claimed": self._claimed,
            "released": self._released,
            "recovered": self._recovered,
            "lease_lost": self._lease_lost,
            "broker_errors": self._broker_errors,
            "heartbeat_lag_s": self._heartbeat_lag_s,
            "held": held,
            "claim_latency": self._claim_latency.to_dict(),
        }


def _queue_figures(q: _Queue, now: float) -> QueueFigures:
    enqueued = q.enqueued_w.totals(now)
    completed = q.completed_w.totals(now)
    durations = q.duration_w.totals(now)
    waits = q.wait_w.totals(now)
    recent: dict[str, QueueWindow] = {
        w: {
            "seconds": seconds,
            "enqueued": n,
            "completed": completed[w][0],
            "duration": durations[w][0].to_dict(),
            "wait": waits[w][0].to_dict(),
        }
        for w, (n, seconds) in enqueued.items()
    }
    return {
        "ready": q.ready,
        "scheduled": q.scheduled,
        "claimed": q.claimed,
        "running": q.running,
        "oldest_ready_age_s": q.oldest_ready_age_s,
        "enqueued": q.enqueued,
        "completed": q.completed,
        "failed": q.failed,
        "recent": recent,
    }


def _pool_figures(p: _Pool, now: float) -> PoolFigures:
    bins: dict[str, Bin] = {
        str(busy): {"count": b.count, "sum": b.sum} for busy, b in sorted(p.by_concurrency.items())
    }
    return {
        "queues": list(p.queues),
        "model": p.model,
        "slots": p.slots,
        "busy": p.busy,
        "claimed": p.claimed,
        "utilisation": p.tracker.utilisation(now),
        "by_concurrency": bins,
    }


def _tenths(t: float) -> float:
    """Rounded down to 0.1 s, so it stays within its minute."""
    return math.floor(t * 10.0) / 10.0


def _queue_history(q: _Queue, newest: int, count: int) -> QueueHistory:
    out: QueueHistory = {}
    completed = q.completed_m.series(newest, count)
    if any(completed):
        out["completed"] = completed
    failed = q.failed_m.series(newest, count)
    if any(failed):
        out["failed"] = failed
    ages = [None if a is None else round(a, 1) for a in q.age_m.series(newest, count)]
    if any(a != 0.0 for a in ages):
        out["oldest_ready_age_s"] = ages
    return out


def _pool_history(p: _Pool, now: float, newest: int, cover: list[float]) -> PoolHistory:
    """Busy slot-seconds / (slots x seconds covered), per minute, to 0.1%."""
    busy = p.busy_m.seconds(now, newest, len(cover))
    ratios = [
        round(min(1.0, b / (p.slots * c)), 3) if p.slots > 0 and c > 0 else 0.0
        for b, c in zip(busy, cover, strict=True)
    ]
    return {"utilisation": ratios} if any(ratios) else {}


def _task_figures(t: _Task) -> TaskFigures:
    return {
        "queues": sorted(t.queues),
        "succeeded": t.succeeded,
        "failed": t.retried + t.dead,
        "retried": t.retried,
        "timed_out": t.timed_out,
        "dead": t.dead,
        "duration": t.duration.to_dict(),
        "wait": t.wait.to_dict(),
    }
