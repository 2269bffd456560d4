"""The registry heartbeat: who this worker is, what it holds, and its figures, every few s.

One small broker write per interval, never per job: the worker's row in the registry
(``Broker.publish_worker``) carries its metrics snapshot, so ``sluicegate stats``,
``top``, ``workers`` and ``size`` on any machine see the whole system. Each turn it
also samples the depth of its pools' queues and the jobs stored since the last turn
(both read through indexes, never the whole jobs table), the limits its app declares,
and the host's CPU. The last graceful publish marks the row stopped.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ...brokers import Broker, WorkerInfo
from ...limit_report import report
from ...limits import Limit, format_rate
from .backoff import Backoff
from .base import Counters, Service

if TYPE_CHECKING:
    from ...metrics.host import HostSampler
    from ...metrics.recorder import WorkerMetrics
    from ...metrics.schema import LimitFigures, Snapshot
    from ..health import HealthCheck

log = logging.getLogger("sluicegate.worker")
PUBLISH_INTERVAL = 2.0  # s between registry heartbeats (and metrics snapshots)


class Registry(Service):
    def __init__(
        self,
        broker: Broker,
        info: WorkerInfo,
        metrics: WorkerMetrics,
        health: HealthCheck,
        host: HostSampler,
        *,
        held: Callable[[], int],
        limits: Sequence[Limit] = (),
        backoff: Backoff,
        interval: float = PUBLISH_INTERVAL,
        counters: Counters | None = None,
        heartbeat_lag: Callable[[], float] = lambda: 0.0,
    ) -> None:
        self.broker = broker
        self.info = info
        self.metrics = metrics
        self.health = health
        self.host = host
        self.held = held
        self.limits = list(limits)
        self.backoff = backoff
        self.interval = interval
        self.counters = counters or Counters()  # the worker's own tallies, as they stand
        self.heartbeat_lag = heartbeat_lag
        self.queues = sorted({q for p in info.pools for q in p["queues"]})
        self.next_at = 0.0
        self.mark: int | None = None  # the highest job id seen by arrivals()
        self.latest: Snapshot | None = None  # the last snapshot taken (read by the exporter)

    def start(self) -> None:
        self.next_at = time.monotonic()  # register on the first turn

    def due_in(self, now: float) -> float:
        return self.next_at - now

    def run(self, now: float) -> None:
        self.next_at = now + self.interval
        self.publish()
        self.backoff.ok()

    def stop(self) -> None:
        """The last word: stopped, so ``workers`` shows it went gracefully, not lost."""
        try:
            self.publish(stopped=True)
        except Exception as exc:  # it will show as lost once its heartbeat is overdue
            log.warning("could not mark worker %s stopped in the registry: %s", self.info.id, exc)

    def publish(self, stopped: bool = False) -> None:
        self.sample()
        held = self.held()
        c = self.counters
        self.metrics.tallies(
            claimed=c.claimed,
            released=c.released,
            recovered=c.recovered,
            lease_lost=c.lease_lost,
            broker_errors=self.backoff.errors,
            heartbeat_lag_s=round(self.heartbeat_lag(), 3),
        )
        snapshot = self.metrics.snapshot(self.health.check(), held)
        self.latest = snapshot
        # Compact separators: a snapshot is mostly lists of numbers (about a fifth smaller).
        text = json.dumps(snapshot, separators=(",", ":"))
        self.broker.publish_worker(self.info, held, text, stopped)

    def sample(self) -> None:
        """The broker-side figures of this worker's queues and limits, and the host's."""
        depths = self.broker.queue_depths(self.queues)
        self.metrics.depths(depths)
        self.health.depths = depths
        mark, counts = self.broker.arrivals(self.mark)
        if self.mark is not None:
            self.metrics.arrived(counts)
        self.mark = mark
        if self.limits:
            self.metrics.limits(self._limit_figures())
        self.metrics.host(self.host.sample())

    def _limit_figures(self) -> dict[str, LimitFigures]:
        raw = self.broker.limit_figures()
        declared = {limit.name for limit in self.limits}
        out: dict[str, LimitFigures] = {}
        for line in report(raw):
            if line.name not in declared:
                continue
            limit = raw.limits.get(line.name)
            out[line.name] = {
                "concurrency": line.concurrency,
                "rate": format_rate(limit.rate) if limit is not None and limit.rate else None,
                "in_use": line.total.in_use,
                "waiting": line.total.waiting,
                "oldest_wait_s": round(line.total.wait_s(raw.now), 3),
            }
        return out
