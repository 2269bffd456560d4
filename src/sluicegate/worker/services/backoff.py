"""Broker trouble: one capped, jittered, doubling pause shared by every service."""

from __future__ import annotations

import logging
import random
import time

log = logging.getLogger("sluicegate.worker")


class Backoff:
    """Consulted by the loop before each broker-using service; logged once per outage."""

    def __init__(self, first: float = 0.05, cap: float = 5.0) -> None:
        self.first = first
        self.cap = cap
        self.delay = 0.0  # 0.0: the broker is healthy
        self.until = 0.0  # monotonic time before which no broker call is tried
        self.errors = 0  # broker calls that failed, ever (a signal)

    def ready(self, now: float) -> bool:
        return self.until <= now

    def failed(self, exc: Exception) -> None:
        """A broker call failed: pause longer each time (with jitter, so a fleet spreads)."""
        self.errors += 1
        if self.delay == 0.0:
            log.error("broker error (will retry): %s", exc)
        self.delay = min(max(self.delay * 2, self.first), self.cap)
        self.until = time.monotonic() + self.delay * random.uniform(0.5, 1.0)

    def ok(self) -> None:
        """A broker call that proves the broker works again succeeded."""
        if self.delay:
            log.info("broker reachable again")
        self.delay = 0.0
