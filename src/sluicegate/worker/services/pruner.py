"""Retention: a background thread that deletes old finished jobs, in small batches.

Kept off the loop's thread so a large first prune never delays claims or
heartbeats; started and stopped with the other services. Brokers make concurrent
pruners safe (PostgreSQL: each batch takes its own rows with FOR UPDATE SKIP
LOCKED; SQLite: batches serialise on the write lock).
"""

from __future__ import annotations

import logging
import random
import threading

from ...brokers import Broker, Retention
from .base import Service

log = logging.getLogger("sluicegate.worker")


class Pruner(Service):
    uses_broker = False  # its own thread, its own retries: never due on the loop

    def __init__(self, broker: Broker, retention: Retention, interval: float = 600.0) -> None:
        self.broker = broker
        self.retention = retention
        self.interval = interval
        self.deleted = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sluicegate-pruner", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        # The first pass waits a little, so a fleet restarting together spreads out.
        delay = min(self.interval, 30.0) * random.uniform(0.5, 1.0)
        while not self._stop.wait(delay):
            try:
                count = self.broker.prune(self.retention)
            except Exception as exc:  # storage trouble: try again next time
                log.warning("prune failed (will retry): %s", exc)
            else:
                self.deleted += count
                if count:
                    log.info("pruned %d finished job(s) past retention", count)
            delay = self.interval * random.uniform(0.8, 1.2)
