"""The recoverer: returns anyone's expired leases to ready (or dead), every few seconds."""

from __future__ import annotations

import logging
import random
import time

from ...brokers import Broker
from .backoff import Backoff
from .base import Counters, Service

log = logging.getLogger("sluicegate.worker")


class Recoverer(Service):
    """Every max(0.2, min(lease/3, 10)) s, jittered: often enough that a dead worker's
    jobs come back about one lease after it died, rarely enough to cost nothing idle."""

    def __init__(
        self,
        broker: Broker,
        lease: float,
        counters: Counters | None = None,
        backoff: Backoff | None = None,
    ) -> None:
        self.broker = broker
        self.backoff = backoff or Backoff()  # a pass that gets through ends an outage
        self.interval = max(0.2, min(lease / 3, 10.0))
        self.counters = counters or Counters()
        self.next_at = 0.0

    def start(self) -> None:
        self.next_at = time.monotonic()  # the first turn recovers what a crash left behind

    def due_in(self, now: float) -> float:
        return self.next_at - now

    def run(self, now: float) -> None:
        self.next_at = now + self.interval * random.uniform(0.8, 1.2)
        self.recover()

    def recover(self) -> None:
        """One recovery pass now (safe from many workers at once)."""
        recovery = self.broker.recover_expired()
        self.backoff.ok()
        if recovery.requeued or recovery.dead:
            self.counters.recovered += len(recovery.requeued) + len(recovery.dead)
            log.warning(
                "recovered expired leases: %d back to ready, %d dead (attempts exhausted)",
                len(recovery.requeued),
                len(recovery.dead),
            )
