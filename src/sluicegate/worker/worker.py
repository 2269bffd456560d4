"""One worker process: pools over queues, a single dispatcher thread doing all broker I/O.

The dispatcher loop (``run``) wakes on: a job finished, a job started, a wake-up
from the broker (enqueue here or elsewhere), a heartbeat or recovery being due, a
scheduled job coming due, or a signal. Each turn it records outcomes in one
batched write, claims for pools with free slots (claims sized to free slots), and
renews leases. Outcomes of jobs whose lease was lost are refused by the broker's
fencing, never applied.
"""

from __future__ import annotations

import collections
import logging
import os
import signal
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from types import FrameType
from typing import TYPE_CHECKING

from ..brokers import Broker, Retention
from ..codec import DEFAULT_PAYLOAD_LIMIT
from ..errors import ConfigError
from ..job import Claim, ClaimedJob
from ..loading import app_path
from ..outcomes import Report, Settled
from .executors import Executor, WorkItem, make_executor
from .pool import DEFAULT_POOL, PoolSpec, PoolState, check_pools
from .routing import check_tasks_fit, model_mismatch
from .runner import make_work, refused, timed_out
from .services.backoff import Backoff
from .services.base import Counters
from .services.claimer import Claimer
from .services.leases import LeaseKeeper
from .services.pruner import Pruner
from .services.recoverer import Recoverer
from .services.results import ResultWriter

if TYPE_CHECKING:
    from ..app import App

log = logging.getLogger("sluicegate.worker")


def new_worker_id() -> str:
    """Unique per process start: host and pid for humans, random suffix for uniqueness."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


@dataclass(slots=True)
class InFlight:
    pool: PoolState
    claimed: ClaimedJob
    deadline: float | None = None
    abandoned: bool = False  # timed out or lease lost: the thread's outcome is ignored


class Worker:
    """Runs jobs of ``app`` in bounded pools until stopped (or, with ``burst``, until idle)."""

    def __init__(
        self,
        app: App,
        pools: list[PoolSpec] | None = None,
        *,
        broker: Broker | None = None,
        lease: float = 30.0,
        shutdown_timeout: float = 30.0,
        burst: bool = False,
        poll_interval: float = 1.0,
        worker_id: str | None = None,
        result_limit: int = DEFAULT_PAYLOAD_LIMIT,
        retention: Retention | None = None,
        prune_interval: float = 600.0,
    ) -> None:
        if lease <= 0:
            raise ConfigError("lease must be positive")
        self.app = app
        self.broker = broker or app.broker
        self.pools = [PoolState(spec) for spec in check_pools(list(pools or [DEFAULT_POOL]))]
        check_tasks_fit(app, [p.spec for p in self.pools], self.broker.supports_transactions)
        self.lease = lease
        self.shutdown_timeout = shutdown_timeout
        self.burst = burst
        self.poll_interval = poll_interval
        self.worker_id = worker_id or new_worker_id()
        self.result_limit = result_limit
        self.counters = Counters()
        # Retention of finished jobs; None (the default for embedded use) keeps them all.
        self.pruner = Pruner(self.broker, retention, prune_interval) if retention else None
        self.leases = LeaseKeeper(self.broker, lease, self.counters, on_lost=self._abandon)
        self.recoverer = Recoverer(self.broker, lease, self.counters)
        self.backoff = Backoff()
        self.results = ResultWriter(
            self.broker, self.leases, self.counters, self.backoff, on_lost=self._abandon
        )
        self._executors: dict[str, Executor] = {}
        self._wake = threading.Event()
        self._done: collections.deque[tuple[WorkItem, Report]] = collections.deque()
        self._inflight: dict[Claim, InFlight] = {}
        self._stop_requests = 0
        self._stop_deadline: float | None = None
        self.claimers = [
            Claimer(
                pool,
                self.broker,
                self._dispatch,
                lease=lease,
                worker_id=self.worker_id,
                poll_interval=poll_interval,
                backoff=self.backoff,
            )
            for pool in self.pools
        ]

    # ---- control ---------------------------------------------------------------
    def stop(self, immediate: bool = False) -> None:
        """First call: stop claiming and drain; second call (or immediate): release now."""
        self._stop_requests = 2 if immediate else self._stop_requests + 1
        self._wake.set()

    def install_signal_handlers(self) -> None:
        def handler(signum: int, frame: FrameType | None) -> None:
            self.stop()

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)

    @property
    def busy(self) -> int:
        return sum(len(p.busy) for p in self.pools)

    # ---- the loop -------------------------------------------------------------
    def run(self) -> None:
        """Serve until stopped; on return every held job is acked, failed or released."""
        for pool in self.pools:
            executor = make_executor(
                pool.spec.model,
                pool.spec.name,
                pool.spec.slots,
                **self._executor_options(pool.spec),
            )
            executor.start(self._on_start, self._on_done)
            self._executors[pool.spec.name] = executor
        unsubscribe = self.broker.subscribe(self._on_wakeup)
        if self.pruner is not None:
            self.pruner.start()
        self.recoverer.start()
        for claimer in self.claimers:
            claimer.start()
        log.info("worker %s started: %s", self.worker_id, self._describe())
        try:
            while True:
                now = time.monotonic()
                self._collect(now)
                if self._stop_requests and self._shutdown_step(now):
                    break
                self._claim_turn(now)  # claims and dispatches; outcomes are written next
                if self.backoff.until <= now:
                    self.results.flush()
                    if self.burst and self._idle_and_drained():
                        self._guarded(
                            self.recoverer.recover
                        )  # expired leases count as work to drain
                        if self._idle_and_drained():
                            break
                if self.backoff.until <= now:
                    self._maintain(now)
                if self._done or (self.results.unwritten and self.backoff.until <= now):
                    self._wake.clear()
                    continue
                self._wake.wait(self._wait_timeout(now))
                self._wake.clear()
        finally:
            unsubscribe()
            if self.pruner is not None:
                self.pruner.stop()
            for executor in self._executors.values():
                executor.stop()
            log.info("worker %s stopped", self.worker_id)

    def _claim_turn(self, now: float) -> None:
        for claimer in self.claimers:
            if self.backoff.until <= now and not self._stop_requests:
                claimer.run(now)

    def _maintain(self, now: float) -> None:
        """Heartbeat when due; recover expired leases (anyone's) when due."""
        self._guarded(self.leases.run, now)
        if self.backoff.until <= now and self.recoverer.due_in(now) <= 0:
            self._guarded(self.recoverer.run, now)

    def _wait_timeout(self, now: float) -> float:
        """Sleep until the nearest timer that can act now (never a timer already past)."""
        if self.backoff.until > now:
            return self.backoff.until - now
        timers = [self.recoverer.due_in(now), self.leases.due_in(now), self._nearest_deadline(now)]
        if self._stop_requests:
            if self._stop_deadline is not None:
                timers.append(self._stop_deadline - now)
        else:
            timers.extend(d for c in self.claimers if (d := c.due_in(now)) is not None)
        return max(min(timers), 0.001)

    def _executor_options(self, spec: PoolSpec) -> dict[str, object]:
        if spec.model == "process":
            return {
                "app_path": app_path(self.app), "max_jobs_per_child": spec.max_jobs_per_child,
                "max_memory_mb": spec.max_memory_mb, "result_limit": self.result_limit,
            }  # fmt: skip
        return {}

    def _describe(self) -> str:
        return ", ".join(
            f"{p.spec.name}={','.join(p.spec.queues)}:{p.spec.slots}:{p.spec.model}"
            for p in self.pools
        )

    # ---- callbacks from executors and the broker (any thread) ----------------------
    def _on_start(self, item: WorkItem) -> None:
        self.results.started(item.claimed.claim)
        self._wake.set()

    def _on_done(self, item: WorkItem, outcome: Report) -> None:
        self._done.append((item, outcome))
        self._wake.set()

    def _on_wakeup(self) -> None:
        for claimer in self.claimers:
            claimer.wake()
        self._wake.set()

    # ---- turn steps ----------------------------------------------------------------
    def _collect(self, now: float) -> None:
        """Free the slots of finished jobs and queue their outcomes; enforce soft timeouts."""
        while self._done:
            item, outcome = self._done.popleft()
            flight = self._inflight.pop(item.claimed.claim, None)
            if flight is None:
                continue
            flight.pool.busy.pop(item.claimed.claim, None)
            if isinstance(outcome, Settled):
                self.results.settled(outcome)
            elif not flight.abandoned:
                self.results.add(outcome)
        for claim, flight in self._inflight.items():
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

    def _dispatch(self, pool: PoolState, claimed: ClaimedJob) -> None:
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
        self._inflight[claim] = InFlight(pool, claimed, soft)
        pool.busy[claim] = claimed
        item = make_work(task, claimed, model, self.result_limit, self.broker)
        self._executors[pool.spec.name].submit(item)

    def _abandon(self, claim: Claim) -> None:
        flight = self._inflight.get(claim)
        if flight is not None:
            flight.abandoned = True

    def _guarded(self, step: object, *args: object) -> None:
        try:
            step(*args)  # type: ignore[operator]
        except Exception as exc:
            self.backoff.failed(exc)

    def _nearest_deadline(self, now: float) -> float:
        deadlines = [f.deadline for f in self._inflight.values() if f.deadline and not f.abandoned]
        return max(0.0, min(deadlines) - now) if deadlines else 3600.0

    def _idle_and_drained(self) -> bool:
        if self.busy or self.results.unwritten or self._done:
            return False
        return not any(self.broker.has_work(p.spec.queues) for p in self.pools)

    # ---- shutdown --------------------------------------------------------------------
    def _shutdown_step(self, now: float) -> bool:
        """Stop claiming; when drained or out of time, release what is left. True: exit."""
        if self._stop_deadline is None:
            self._stop_deadline = now + self.shutdown_timeout
            log.info("shutting down: no more claims; waiting up to %g s for %d job(s)",
                     self.shutdown_timeout, self.busy)  # fmt: skip
        out_of_time = self._stop_requests >= 2 or now >= self._stop_deadline
        # Jobs already timed out or lost are not waited for: their outcome is decided.
        if any(not f.abandoned for f in self._inflight.values()) and not out_of_time:
            return False
        self.results.flush()
        leftover = [c for c, f in self._inflight.items() if not f.abandoned]
        if leftover:
            try:
                lost = self.broker.release(leftover)
            except Exception as exc:
                log.error(
                    "could not release %d job(s); their leases will expire: %s", len(leftover), exc
                )
                lost = leftover
            self.counters.released += len(leftover) - len(lost)
            log.info("released %d job(s) back to ready without charging an attempt",
                     len(leftover) - len(lost))  # fmt: skip
            for claim in leftover:
                self._abandon(claim)
            self.leases.drop(leftover)
        if self.results.pending:
            log.error(
                "%d outcome(s) could not be recorded; those jobs return by lease expiry",
                self.results.pending,
            )
        return True
