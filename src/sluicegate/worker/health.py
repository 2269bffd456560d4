"""Is this worker doing its job? Answered from inside the process, cheaply, any time.

Healthy only if all hold: the loop turned recently, the last broker call succeeded,
and no pool is *stalled*: one with free slots and ready work in its queues (by the last
depth sample) that has not tried to claim for ``stall_after`` seconds. A worker that
silently stopped consuming is unhealthy even while its process and connection are fine.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from ..brokers import QueueDepth
from .services.backoff import Backoff
from .services.claimer import Claimer

if TYPE_CHECKING:
    from ..metrics.schema import Health

STALL_AFTER = 60.0  # s without a claim attempt while slots are free and work is ready


class HealthCheck:
    def __init__(
        self,
        claimers: Sequence[Claimer],
        backoff: Backoff,
        loop_deadline: float,
        stall_after: float = STALL_AFTER,
    ) -> None:
        self.claimers = claimers
        self.backoff = backoff
        self.loop_deadline = loop_deadline  # s: a loop quieter than this is stuck
        self.stall_after = stall_after
        self.turned_at = time.monotonic()
        self.depths: Mapping[str, QueueDepth] = {}  # the registry's last sample

    def turned(self) -> None:
        """The loop went round (called every turn; one store)."""
        self.turned_at = time.monotonic()

    def stalled(self, now: float) -> list[str]:
        return [
            c.pool.spec.name for c in self.claimers if c.stalled(now, self.depths, self.stall_after)
        ]

    def check(self) -> Health:
        now = time.monotonic()
        loop_age = now - self.turned_at
        broker_ok = self.backoff.delay == 0.0
        stalled = self.stalled(now)
        reasons = []
        if loop_age > self.loop_deadline:
            reasons.append(f"the worker loop has not turned for {loop_age:.1f} s")
        if not broker_ok:
            reasons.append("the broker is unreachable (backing off)")
        for name in stalled:
            reasons.append(
                f"pool {name} has free slots and ready jobs but has not tried to claim "
                f"for over {self.stall_after:g} s"
            )
        return {
            "healthy": not reasons,
            "loop_age_s": round(loop_age, 3),
            "broker_ok": broker_ok,
            "stalled": stalled,
            "reasons": reasons,
        }
