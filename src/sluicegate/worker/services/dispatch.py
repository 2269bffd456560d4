"""The dispatcher: hands claimed jobs to their pool's executor and collects what comes back.

What a job needs from its pool's concurrency model is asked of the model class
(``pool.model``): the executor, whether it runs the task, the work item. Each model
enforces its own timeout; a thread job's soft timeout arrives as an outcome reported
with its slot still busy.
"""

from __future__ import annotations

import collections
import functools
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...brokers import Broker
from ...job import Claim, ClaimedJob
from ...loading import app_path
from ...outcomes import Buried, Failed, Outcome, Report, Retried, Settled
from ..executors import Executor, WorkItem
from ..models import PoolContext
from ..pool import PoolState
from ..runner import refused
from .base import Counters, Service
from .joblog import JobLog
from .leases import LeaseKeeper
from .results import ResultWriter

if TYPE_CHECKING:
    from ...app import App
    from ...metrics.recorder import WorkerMetrics

log = logging.getLogger("sluicegate.worker")


@dataclass(frozen=True, slots=True)
class Ended:
    """An attempt's figures, held until the broker accepts its outcome: one whose lease
    was lost meanwhile never counts (another worker's attempt does)."""

    flight: InFlight
    outcome: str
    took: float
    timed_out: bool
    now: float


@dataclass(slots=True)
class InFlight:
    pool: PoolState
    claimed: ClaimedJob
    abandoned: bool = False  # timed out or lease lost: the thread's outcome is ignored
    claimed_at: float = 0.0  # monotonic, when the claim reached this worker
    started_at: float | None = None  # monotonic, when its body began (set from any thread)
    busy_at_start: int = 0  # the pool's busy slots, this job's included, when it took one
    wait: float = 0.0  # seconds from ready (run_at) to body start
    running: bool = False  # its body began: counted in its pool's running bodies


def outcome_name(report: Report) -> str:
    """succeeded, retried or dead: what an attempt's report means for signals and logs."""
    if isinstance(report, Retried):
        return "retried"
    if isinstance(report, Buried):
        return "dead"
    if isinstance(report, Settled) and report.lease_lost:
        return "lease_lost"
    return "succeeded"


class Dispatcher(Service):
    """Due when a job finished (its slot frees, its outcome goes to the result writer)
    or timed out while its code runs on (the outcome goes, the slot stays busy)."""

    uses_broker = False

    def __init__(
        self,
        app: App,
        pools: list[PoolState],
        broker: Broker,
        results: ResultWriter,
        leases: LeaseKeeper,
        *,
        result_limit: int,
        counters: Counters | None = None,
        wake: Callable[[], None] = lambda: None,
        metrics: WorkerMetrics | None = None,
    ) -> None:
        self.app = app
        self.pools = pools
        self.broker = broker
        self.results = results
        self.leases = leases
        self.result_limit = result_limit
        self.counters = counters or Counters()
        self._wake_loop = wake  # wakes the loop (called from executor threads)
        self.inflight: dict[Claim, InFlight] = {}
        self._executors: dict[str, Executor[Any]] = {}
        # (item, report, slot_free, when it was reported): the body's end, not the moment
        # the loop got round to it (a commit may hold the loop a few ms meanwhile).
        self._done: collections.deque[tuple[WorkItem, Report, bool, float]] = collections.deque()
        # Signals: None runs no per-job bookkeeping at all (Worker(metrics=False)).
        self.metrics = metrics
        self._began: collections.deque[InFlight] = collections.deque()  # bodies begun
        # Per pool, the bodies running: the busy slots the signals integrate, from each
        # body's start to its end (the interval its duration covers), not from the claim
        # to the moment the loop collected it, which a busy loop would count as busy.
        self._running: collections.Counter[str] = collections.Counter()
        self._unwritten: dict[Claim, Ended] = {}  # figures of outcomes not yet written
        self.joblog = JobLog()
        results.on_written = self.written

    # ---- executors -------------------------------------------------------------------
    def start(self) -> None:
        # The app's import path is looked up only if a model asks for it (process children).
        context = PoolContext(
            functools.partial(app_path, self.app),
            self.result_limit,
            self.broker,
            progress=self.leases.report_progress,
            stopped=self.stopped,
            hooks=self.app.hooks,
        )
        for pool in self.pools:
            spec = pool.spec
            executor = pool.model.executor(spec.name, spec.slots, spec.options, context)
            executor.start(self._on_start, self._on_done)
            self._executors[pool.spec.name] = executor

    def stop(self) -> None:
        for executor in self._executors.values():
            executor.stop()

    def _on_start(self, item: WorkItem) -> None:  # any thread
        claim = item.claimed.claim
        self.results.started(claim)
        flight = self.inflight.get(claim)
        if flight is not None:
            flight.started_at = time.monotonic()
            self._began.append(flight)
        self._wake_loop()

    def _on_done(self, item: WorkItem, outcome: Report, slot_free: bool) -> None:  # any thread
        self._done.append((item, outcome, slot_free, time.monotonic()))
        self._wake_loop()

    # ---- in and out ------------------------------------------------------------------
    def dispatch(self, pool: PoolState, claimed: ClaimedJob) -> None:
        """Start a claimed job in ``pool``, or refuse it (dead at once) if it cannot run."""
        self.counters.claimed += 1
        claim = claimed.claim
        self.leases.hold([claim])
        if claimed.job.limits:
            self.results.holds_tokens(claim)
        task = self.app.tasks.get(claimed.job.task)
        if claimed.problem is not None or task is None:
            reason = claimed.problem or f"unknown task {claimed.job.task!r}"
            kind = "CorruptJob" if claimed.problem else "UnknownTask"
            self.results.add(refused(claimed, kind, reason))
            return
        mismatch = pool.model.refuses(task)
        if mismatch is not None:  # routed here by a per-enqueue queue override
            self.results.add(
                refused(claimed, "WrongPoolModel", f"{mismatch} (pool {pool.spec.name!r})")
            )
            return
        flight = InFlight(pool, claimed, claimed_at=time.monotonic())
        self.inflight[claim] = flight
        pool.busy[claim] = claimed
        flight.busy_at_start = len(pool.busy)
        self._executors[pool.spec.name].submit(pool.model.work_item(task, claimed))

    def due_in(self, now: float) -> float | None:
        return 0.0 if self._done or self._began else None

    def run(self, now: float) -> None:
        self.collect(now)

    def collect(self, now: float) -> None:
        """Free the slots of finished jobs and queue their outcomes. An outcome reported with
        its slot still busy is a soft timeout: the slot stays busy until the code returns."""
        while self._began:
            self._began_body(self._began.popleft())
        while self._done:
            item, outcome, slot_free, ended_at = self._done.popleft()
            claim = item.claimed.claim
            flight = self.inflight.pop(claim, None) if slot_free else self.inflight.get(claim)
            if flight is None:
                continue
            now = time.monotonic()
            if slot_free:
                flight.pool.busy.pop(claim, None)
                if flight.running and self.metrics is not None:
                    # Dated when the body ended, as its duration is (the busy count takes
                    # a change reported late at its own time).
                    name = flight.pool.spec.name
                    self._running[name] -= 1
                    self.metrics.busy_changed(name, self._running[name], ended_at)
            counts = not flight.abandoned
            # A deadline: the thread model reports it with the slot still busy; the async
            # and process models end the attempt and say so in the outcome.
            timed_out = not slot_free or (isinstance(outcome, Failed) and outcome.timed_out)
            if isinstance(outcome, Settled):
                self.results.settled(outcome)
            elif counts:
                took = ended_at - (flight.started_at or flight.claimed_at)
                self.results.add(outcome, body_ended=slot_free, took=took)
                if timed_out:
                    self.counters.timed_out += 1
            if counts:
                self._ended(flight, outcome, timed_out, now, ended_at)
            if not slot_free:
                flight.abandoned = True  # the code's late return is not an outcome

    def _began_body(self, flight: InFlight) -> None:
        """Its wait: from ready (run_at) to the claim on the broker's clock (the lease it
        was given, less the lease length), plus the time here until its body began."""
        job = flight.claimed.job
        claimed_at = (job.lease_expires_at or 0.0) - self.leases.lease
        assert flight.started_at is not None
        flight.wait = max(0.0, claimed_at - job.run_at) + (flight.started_at - flight.claimed_at)
        if self.metrics is not None:
            self.metrics.started(job.task, job.queue, flight.wait, flight.started_at)
            name = flight.pool.spec.name
            self._running[name] += 1
            flight.running = True
            self.metrics.busy_changed(name, self._running[name], flight.started_at)

    def _ended(
        self, flight: InFlight, outcome: Report, timed_out: bool, now: float, ended_at: float
    ) -> None:
        """The attempt's figures and its one log line, once its outcome is written (a
        transactional task's is already committed; one found lost counts for nothing).
        Its duration runs to ``ended_at``, when the body reported, not to ``now``."""
        took = max(0.0, ended_at - (flight.started_at or flight.claimed_at))
        ended = Ended(flight, outcome_name(outcome), took, timed_out, now)
        if not isinstance(outcome, Settled):
            self._unwritten[flight.claimed.claim] = ended
        elif not outcome.lease_lost:
            self._count(ended)

    def written(self, outcomes: Sequence[Outcome], lost: set[Claim]) -> None:
        """The result writer recorded these outcomes; the broker refused those in ``lost``."""
        for outcome in outcomes:
            ended = self._unwritten.pop(outcome.claim, None)
            if ended is not None and outcome.claim not in lost:
                self._count(ended)

    def _count(self, ended: Ended) -> None:
        flight = ended.flight
        job = flight.claimed.job
        pool = flight.pool.spec.name
        if self.metrics is not None:
            self.metrics.finished(
                pool,
                job.task,
                job.queue,
                ended.took,
                ended.outcome,
                flight.busy_at_start,
                ended.timed_out,
                ended.now,
            )
        self.joblog.outcome(job, pool, ended.outcome, ended.took, flight.wait, ended.timed_out)

    # ---- what is in flight -----------------------------------------------------------
    def abandon(self, claim: Claim) -> None:
        """Its outcome no longer counts (lease lost, timed out, released)."""
        flight = self.inflight.get(claim)
        if flight is not None:
            flight.abandoned = True

    def stop_attempt(self, claim: Claim) -> None:
        """Its lease is lost (the job was cancelled, or expired and may run elsewhere now):
        its outcome no longer counts, and its pool's model stops it as it can: a coroutine
        is cancelled, a child killed (and replaced); a thread only sees
        ``current_job().cancelled`` turn true, and keeps its slot until it returns."""
        flight = self.inflight.get(claim)
        if flight is None:
            return  # its body already ended (the outcome was refused, or is on its way)
        flight.abandoned = True
        job = flight.claimed.job
        log.warning(
            "job %s (%s): stopping its attempt in pool %s (%s model): it was cancelled or "
            "its lease lost",
            job.id,
            job.task,
            flight.pool.spec.name,
            flight.pool.spec.model,
        )
        self._executors[flight.pool.spec.name].interrupt(claim)

    def stopped(self, claim: Claim) -> bool:
        """Whether ``claim``'s attempt should stop: cancelled, its lease lost, or (thread
        model) past its timeout. Read from any thread by ``current_job().cancelled``."""
        flight = self.inflight.get(claim)
        return flight is not None and flight.abandoned

    @property
    def busy(self) -> int:
        return sum(len(p.busy) for p in self.pools)

    def drained(self) -> bool:
        return not self.busy and not self._done

    @property
    def finishing(self) -> bool:
        """Finished jobs reported but not collected yet."""
        return bool(self._done)

    def running(self) -> list[Claim]:
        """Claims still in flight whose outcome counts (worth waiting for, or releasing)."""
        return [c for c, f in self.inflight.items() if not f.abandoned]
