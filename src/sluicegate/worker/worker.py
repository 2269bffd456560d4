"""One worker process: pools over queues, and a loop on one thread that schedules services.

Each service has one job and says when it is next due (``services/``): the
dispatcher (finished jobs, soft timeouts), the shutdown sequence, the death watch (dead
workers of this host), a claimer per pool, the result writer, the lease keeper, the
recoverer and the pruner. The loop only waits (on a wake-up, or until the nearest due
time) and runs whatever is due, in that order: a turn claims and dispatches for free
slots *before* it writes the turn's starts and outcomes, so a freed slot never waits for
an ack's fsync. While the broker fails, services that use it wait out one shared backoff.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
import uuid
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING

from .. import __version__
from ..brokers import Broker, Retention, WorkerInfo
from ..codec import DEFAULT_PAYLOAD_LIMIT
from ..errors import ConfigError
from ..job import Claim
from ..limits import local_host
from ..metrics.host import HostSampler
from ..metrics.recorder import WorkerMetrics
from ..names import lease_problem
from .exporter import MetricsServer
from .health import STALL_AFTER, HealthCheck
from .pool import DEFAULT_POOL, PoolSpec, PoolState, check_pools
from .routing import check_tasks_fit
from .services.backoff import Backoff
from .services.base import Counters, Service
from .services.claimer import Claimer
from .services.deaths import DeathWatch
from .services.dispatch import Dispatcher
from .services.leases import LeaseKeeper
from .services.limits import LimitRegistrar
from .services.pauses import PauseWatcher
from .services.pruner import Pruner
from .services.recoverer import Recoverer
from .services.registry import PUBLISH_INTERVAL, Registry
from .services.results import ResultWriter
from .services.scheduler import Scheduler
from .services.shutdown import Shutdown

if TYPE_CHECKING:
    from ..app import App

log = logging.getLogger("sluicegate.worker")
IDLE_WAIT = 3600.0  # the longest sleep when no service has anything scheduled


def new_worker_id() -> str:
    """Unique per process start: host and pid for humans, random suffix for uniqueness."""
    return f"{local_host()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


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
        metrics: bool = True,
        metrics_port: int | None = None,
        metrics_host: str = "127.0.0.1",
        publish_interval: float = PUBLISH_INTERVAL,
        stall_after: float = STALL_AFTER,
        local_recovery: bool = True,
    ) -> None:
        if (problem := lease_problem(lease)) is not None:
            raise ConfigError(f"lease {problem}")
        self.app = app
        self.broker = broker = broker or app.broker
        self.pools = [PoolState(spec) for spec in check_pools(list(pools or [DEFAULT_POOL]))]
        app.configure()  # the settings file's task overrides, before tasks are fitted to pools
        check_tasks_fit(app, [p.spec for p in self.pools], broker.supports_transactions)
        self.burst = burst
        self.worker_id = worker_id or new_worker_id()
        self.host = local_host()  # host-scoped limits count the jobs of this host
        self.counters = counters = Counters()
        self.backoff = backoff = Backoff()
        self._wake = threading.Event()
        if publish_interval <= 0:
            raise ConfigError("publish_interval must be positive")
        # Signals: kept in memory here, published with the registry heartbeat. With
        # metrics=False no per-job bookkeeping runs; the registry still publishes.
        self.metrics = WorkerMetrics(
            self.worker_id,
            [(p.spec.name, list(p.spec.queues), p.spec.model, p.spec.slots) for p in self.pools],
            interval_s=publish_interval,
            lease_s=lease,
        )
        self.leases = LeaseKeeper(broker, lease, counters, on_lost=self._abandon, backoff=backoff)
        self.results = ResultWriter(broker, self.leases, counters, backoff, on_lost=self._abandon)
        self.dispatcher = Dispatcher(
            app,
            self.pools,
            broker,
            self.results,
            self.leases,
            result_limit=result_limit,
            counters=counters,
            wake=self._wake.set,
            metrics=self.metrics if metrics else None,
        )
        self.claimers = [
            Claimer(
                pool,
                broker,
                self.dispatcher.dispatch,
                lease=lease,
                worker_id=self.worker_id,
                host=self.host,
                poll_interval=poll_interval,
                backoff=backoff,
            )
            for pool in self.pools
        ]
        self.results.on_tokens_freed = self._tokens_freed
        for claimer in self.claimers:
            claimer.ended_claims = self.results.ended_limited
            claimer.held_back = lambda: self.results.failing
            if metrics:
                claimer.on_claimed = self.metrics.claimed
            if broker.records_with_claims:
                claimer.record_along = self.results.along_with
        self.health = HealthCheck(
            self.claimers,
            backoff,
            loop_deadline=max(5.0, 3 * publish_interval),
            stall_after=stall_after,
        )
        self.registry = Registry(
            broker,
            self._info(),
            self.metrics,
            self.health,
            HostSampler(),
            held=lambda: len(self.leases.held),
            limits=list(app.limits.values()),
            backoff=backoff,
            interval=publish_interval,
            counters=counters,
            heartbeat_lag=lambda: self.leases.lag,
        )
        self.exporter = (
            None
            if metrics_port is None
            else MetricsServer(
                metrics_host,
                metrics_port,
                lambda: self.registry.latest,
                self.health.check,
                self.worker_id,
                self.host,
            )
        )
        # The loop's services, in the order of a turn (filled in below); shutdown halts
        # every one of them, services added later included.
        self.services: list[Service] = []
        self.shutdown = Shutdown(
            shutdown_timeout,
            broker,
            self.services,
            self.dispatcher,
            self.results,
            self.leases,
            counters,
        )
        self.recoverer = Recoverer(broker, lease, counters, backoff)
        # Retention of finished jobs; None (the default for embedded use) keeps them all.
        self.pruner = Pruner(broker, retention, prune_interval) if retention else None
        self.registrar = LimitRegistrar(broker, list(app.limits.values()), backoff)
        # The jobs of dead workers of this host, at once (and a restarted worker's
        # predecessor's, before its first claim); local_recovery=False leaves them to leases.
        self.deaths = DeathWatch(broker, self.worker_id, counters, backoff)
        # Paused queues: read before the first claim, then about once a second.
        self.pauses = PauseWatcher(
            broker, [q for p in self.pools for q in p.spec.queues], self._pauses_changed
        )
        for claimer in self.claimers:
            claimer.open_queues = self.pauses.open_queues
        # Periodic jobs (docs/schedules.md): every worker runs the scheduler; the broker
        # lets one of them enqueue each tick.
        schedules = list(app.schedules.values())
        self.scheduler = Scheduler(app, broker, schedules) if schedules else None
        # The order of a turn: collect finished jobs, shut down, register the limits
        # (once), recover dead neighbours' jobs, read the paused queues, claim, write,
        # maintain, publish.
        self.services += [
            self.dispatcher,
            self.shutdown,
            self.registrar,
            *([self.deaths] if local_recovery else []),
            self.pauses,
            *self.claimers,
            self.results,
            self.leases,
            self.recoverer,
            *([self.pruner] if self.pruner else []),
            *([self.scheduler] if self.scheduler else []),
            self.registry,
        ]

    def _info(self) -> WorkerInfo:
        pools = tuple(
            {"name": p.spec.name, "queues": list(p.spec.queues), "slots": p.spec.slots,
             "model": p.spec.model}
            for p in self.pools
        )  # fmt: skip
        return WorkerInfo(self.worker_id, self.host, os.getpid(), __version__, pools)

    def _pauses_changed(self) -> None:
        for claimer in self.claimers:
            claimer.wake()  # a resumed queue's backlog is claimable now

    def _tokens_freed(self) -> None:
        for claimer in self.claimers:
            claimer.tokens_freed()

    # ---- control ---------------------------------------------------------------
    def stop(self, immediate: bool = False) -> None:
        """First call: stop claiming and drain; second call (or immediate): release now."""
        self.shutdown.request(immediate)
        self._wake.set()

    def install_signal_handlers(self) -> None:
        def handler(signum: int, frame: FrameType | None) -> None:
            self.stop()

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)

    @property
    def busy(self) -> int:
        return self.dispatcher.busy

    # ---- the loop -------------------------------------------------------------
    def run(self) -> None:
        """Serve until stopped; on return every held job is acked, failed or released."""
        for service in self.services:
            service.start()
        if self.exporter is not None:
            self.exporter.start()
        unsubscribe = self.broker.subscribe(self._on_wakeup)
        unsubscribe_cancels = self.broker.subscribe_cancelled(self._on_cancel_notice)
        log.info("worker %s started: %s", self.worker_id, self._describe())
        hooks = self.app.hooks
        try:
            if hooks.on_worker_start:
                hooks.fire("on_worker_start", self)
            while not self._turn():
                pass
        finally:
            unsubscribe()
            unsubscribe_cancels()
            for service in reversed(self.services):
                try:
                    service.stop()
                except Exception:  # one service's trouble must not keep the others running
                    log.exception("stopping %s failed", type(service).__name__)
            if self.exporter is not None:
                self.exporter.stop()
            if hooks.on_worker_stop:
                hooks.fire("on_worker_stop", self)
            log.info("worker %s stopped", self.worker_id)

    def _turn(self) -> bool:
        """Run every service that is due, in order, then sleep until one is. True: exit."""
        self._wake.clear()  # a wake-up from here on cuts the coming sleep short
        self.health.turned()
        now = time.monotonic()
        for service in self.services:
            if service.uses_broker and not self.backoff.ready(now):
                continue
            due = service.due_in(now)
            if due is not None and due <= 0:
                self._run(service, now)
            if self.shutdown.finished:
                return True
        if self.burst and self.backoff.ready(now) and self._drained():
            self._guarded(self.recoverer.recover)  # expired leases count as work to drain
            if self._drained():
                return True
        self._wake.wait(self._sleep_time())
        return False

    def _run(self, service: Service, now: float) -> None:
        if service.uses_broker:
            self._guarded(service.run, now)
        else:
            service.run(now)  # no broker call inside: an error here is a bug, not an outage

    def _guarded(self, step: Callable[..., None], *args: float) -> None:
        try:
            step(*args)
        except Exception as exc:
            self.backoff.failed(exc)

    def _sleep_time(self) -> float:
        """Until the nearest due time of a service that can act (not one held back)."""
        now = time.monotonic()
        backing_off = not self.backoff.ready(now)
        timers = [self.backoff.until - now] if backing_off else []
        for service in self.services:
            if not (backing_off and service.uses_broker):
                due = service.due_in(now)
                if due is not None:
                    timers.append(due)
        return max(0.0, min(timers, default=IDLE_WAIT))

    def _drained(self) -> bool:
        """Burst mode: nothing running, nothing to write, nothing ready in the pools' queues."""
        if not all(service.drained() for service in self.services):
            return False
        if self.pauses.paused is None:
            return False  # not known yet which queues are paused
        # A paused queue's jobs wait for its resume, not for this worker.
        open_queues = [self.pauses.open_queues(p.spec.queues) for p in self.pools]
        return not any(self.broker.has_work(queues) for queues in open_queues if queues)

    # ---- callbacks -----------------------------------------------------------------
    def _on_wakeup(self) -> None:
        """Jobs may have become ready (enqueued here or elsewhere); any thread."""
        for service in self.services:
            service.wake()
        self._wake.set()

    def _on_cancel_notice(self) -> None:
        """Running jobs were cancelled somewhere (any thread): renew the leases now, so
        the heartbeat finds which of ours, rather than up to lease/3 from now."""
        self.leases.beat_soon()
        self._wake.set()

    def _abandon(self, claim: Claim) -> None:
        """A lost lease (cancelled, or expired and maybe held elsewhere now): the job's
        outcome, whenever it comes, no longer counts, and its attempt is stopped."""
        self.dispatcher.stop_attempt(claim)
        self.results.lost(claim)

    def _describe(self) -> str:
        return ", ".join(
            f"{p.spec.name}={','.join(p.spec.queues)}:{p.spec.slots}:{p.spec.model}"
            for p in self.pools
        )
