"""The dispatcher: hands claimed jobs to their pool's executor and collects what comes back.

All that depends on a pool's concurrency model is here: how executors are built,
how a job becomes a work item, and the thread model's soft timeout (async and
process executors enforce their own).
"""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...brokers import Broker
from ...job import Claim, ClaimedJob
from ...loading import app_path
from ...outcomes import Report, Settled
from ..executors import Executor, WorkItem, make_executor
from ..pool import PoolSpec, PoolState
from ..routing import model_mismatch
from ..runner import make_work, refused, timed_out
from .base import Counters, Service
from .leases import LeaseKeeper
from .results import ResultWriter

if TYPE_CHECKING:
    from ...app import App

log = logging.getLogger("sluicegate.worker")


@dataclass(slots=True)
class InFlight:
    pool: PoolState
    claimed: ClaimedJob
    deadline: float | None = None
    abandoned: bool = False  # timed out or lease lost: the thread's outcome is ignored


class Dispatcher(Service):
    """Due when a job finished (its slot frees, its outcome goes to the result writer)
    or a thread job's soft timeout passed."""

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
    ) -> None:
        self.app = app
        self.pools = pools
        self.broker = broker
        self.results = results
        self.leases = leases
        self.result_limit = result_limit
        self.counters = counters or Counters()
        self.wake = wake  # wakes the loop (called from executor threads)
        self.inflight: dict[Claim, InFlight] = {}
        self._executors: dict[str, Executor] = {}
        self._done: collections.deque[tuple[WorkItem, Report]] = collections.deque()

    # ---- executors -------------------------------------------------------------------
    def start(self) -> None:
        for pool in self.pools:
            executor = make_executor(
                pool.spec.model,
                pool.spec.name,
                pool.spec.slots,
                **self._executor_options(pool.spec),
            )
            executor.start(self._on_start, self._on_done)
            self._executors[pool.spec.name] = executor

    def stop(self) -> None:
        for executor in self._executors.values():
            executor.stop()

    def _executor_options(self, spec: PoolSpec) -> dict[str, object]:
        if spec.model == "process":
            return {
                "app_path": app_path(self.app),
                "max_jobs_per_child": spec.max_jobs_per_child,
                "max_memory_mb": spec.max_memory_mb,
                "result_limit": self.result_limit,
            }
        return {}

    def _on_start(self, item: WorkItem) -> None:  # any thread
        self.results.started(item.claimed.claim)
        self.wake()

    def _on_done(self, item: WorkItem, outcome: Report) -> None:  # any thread
        self._done.append((item, outcome))
        self.wake()

    # ---- in and out ------------------------------------------------------------------
    def dispatch(self, pool: PoolState, claimed: ClaimedJob) -> None:
        """Start a claimed job in ``pool``, or refuse it (dead at once) if it cannot run."""
        self.counters.claimed += 1
        claim = claimed.claim
        self.leases.hold([claim])
        task = self.app.tasks.get(claimed.job.task)
        if claimed.problem is not None or task is None:
            reason = claimed.problem or f"unknown task {claimed.job.task!r}"
            kind = "CorruptJob" if claimed.problem else "UnknownTask"
            self.results.add(refused(claimed, kind, reason))
            return
        model = pool.spec.model
        mismatch = model_mismatch(task, model)
        if mismatch is not None:  # routed here by a per-enqueue queue override
            self.results.add(
                refused(claimed, "WrongPoolModel", f"{mismatch} (pool {pool.spec.name!r})")
            )
            return
        timeout = task.options.timeout
        # Thread timeouts are soft and kept here; async and process executors enforce their own.
        soft = time.monotonic() + timeout if timeout and model == "thread" else None
        self.inflight[claim] = InFlight(pool, claimed, soft)
        pool.busy[claim] = claimed
        item = make_work(task, claimed, model, self.result_limit, self.broker)
        self._executors[pool.spec.name].submit(item)

    def due_in(self, now: float) -> float | None:
        if self._done:
            return 0.0
        return self._nearest_deadline(now)

    def run(self, now: float) -> None:
        self.collect(now)

    def collect(self, now: float) -> None:
        """Free the slots of finished jobs and queue their outcomes; enforce soft timeouts."""
        while self._done:
            item, outcome = self._done.popleft()
            flight = self.inflight.pop(item.claimed.claim, None)
            if flight is None:
                continue
            flight.pool.busy.pop(item.claimed.claim, None)
            if isinstance(outcome, Settled):
                self.results.settled(outcome)
            elif not flight.abandoned:
                self.results.add(outcome)
        for claim, flight in self.inflight.items():
            if flight.deadline is not None and not flight.abandoned and now >= flight.deadline:
                flight.abandoned = True  # the slot stays busy until the thread really returns
                task = self.app.tasks.get(flight.claimed.job.task)
                timeout = task.options.timeout if task and task.options.timeout else 0.0
                policy = task.options.retry if task else None
                if policy is not None:
                    self.results.add(timed_out(policy, flight.claimed, timeout))
                    self.counters.timed_out += 1
                    log.warning(
                        "job %s (%s) timed out after %g s",
                        claim.job_id,
                        flight.claimed.job.task,
                        timeout,
                    )

    def _nearest_deadline(self, now: float) -> float | None:
        deadlines = [f.deadline for f in self.inflight.values() if f.deadline and not f.abandoned]
        return max(0.0, min(deadlines) - now) if deadlines else None

    # ---- what is in flight -----------------------------------------------------------
    def abandon(self, claim: Claim) -> None:
        """Its outcome no longer counts (lease lost, timed out, released)."""
        flight = self.inflight.get(claim)
        if flight is not None:
            flight.abandoned = True

    @property
    def busy(self) -> int:
        return sum(len(p.busy) for p in self.pools)

    @property
    def finishing(self) -> bool:
        """Finished jobs reported but not collected yet."""
        return bool(self._done)

    def running(self) -> list[Claim]:
        """Claims still in flight whose outcome counts (worth waiting for, or releasing)."""
        return [c for c, f in self.inflight.items() if not f.abandoned]
