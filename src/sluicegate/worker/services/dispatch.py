"""The dispatcher: hands claimed jobs to their pool's executor and collects what comes back.

What a job needs from its pool's concurrency model is asked of the model class
(``pool.model``): the executor, whether it runs the task, the work item. Each model
enforces its own timeout; a thread job's soft timeout arrives as an outcome reported
with its slot still busy.
"""

from __future__ import annotations

import collections
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...brokers import Broker
from ...job import Claim, ClaimedJob
from ...loading import app_path
from ...outcomes import Report, Settled
from ..executors import Executor, WorkItem
from ..models import PoolContext
from ..pool import PoolState
from ..runner import refused
from .base import Counters, Service
from .leases import LeaseKeeper
from .results import ResultWriter

if TYPE_CHECKING:
    from ...app import App


@dataclass(slots=True)
class InFlight:
    pool: PoolState
    claimed: ClaimedJob
    abandoned: bool = False  # timed out or lease lost: the thread's outcome is ignored


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
        self._done: collections.deque[tuple[WorkItem, Report, bool]] = collections.deque()

    # ---- executors -------------------------------------------------------------------
    def start(self) -> None:
        # The app's import path is looked up only if a model asks for it (process children).
        context = PoolContext(functools.partial(app_path, self.app), self.result_limit, self.broker)
        for pool in self.pools:
            spec = pool.spec
            executor = pool.model.executor(spec.name, spec.slots, spec.options, context)
            executor.start(self._on_start, self._on_done)
            self._executors[pool.spec.name] = executor

    def stop(self) -> None:
        for executor in self._executors.values():
            executor.stop()

    def _on_start(self, item: WorkItem) -> None:  # any thread
        self.results.started(item.claimed.claim)
        self._wake_loop()

    def _on_done(self, item: WorkItem, outcome: Report, slot_free: bool) -> None:  # any thread
        self._done.append((item, outcome, slot_free))
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
        self.inflight[claim] = InFlight(pool, claimed)
        pool.busy[claim] = claimed
        self._executors[pool.spec.name].submit(pool.model.work_item(task, claimed))

    def due_in(self, now: float) -> float | None:
        return 0.0 if self._done else None

    def run(self, now: float) -> None:
        self.collect(now)

    def collect(self, now: float) -> None:
        """Free the slots of finished jobs and queue their outcomes. An outcome reported with
        its slot still busy is a soft timeout: the slot stays busy until the code returns."""
        while self._done:
            item, outcome, slot_free = self._done.popleft()
            claim = item.claimed.claim
            flight = self.inflight.pop(claim, None) if slot_free else self.inflight.get(claim)
            if flight is None:
                continue
            if slot_free:
                flight.pool.busy.pop(claim, None)
            if isinstance(outcome, Settled):
                self.results.settled(outcome)
            elif not flight.abandoned:
                self.results.add(outcome, body_ended=slot_free)
                if not slot_free:
                    self.counters.timed_out += 1
            if not slot_free:
                flight.abandoned = True  # the code's late return is not an outcome

    # ---- what is in flight -----------------------------------------------------------
    def abandon(self, claim: Claim) -> None:
        """Its outcome no longer counts (lease lost, timed out, released)."""
        flight = self.inflight.get(claim)
        if flight is not None:
            flight.abandoned = True

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
