"""The limit registrar: puts the limits the app declares into the broker at start.

Limits live in the broker, so every worker (and ``sluicegate limits``) sees one value
and an operator can change it while workers run. A worker that cannot reach the broker
at start keeps trying with the shared backoff; until its limits are registered, jobs
that name them wait (claims hold them back as naming an unregistered limit).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from ...brokers import Broker
from ...limits import Limit
from .backoff import Backoff
from .base import Service

log = logging.getLogger("sluicegate.worker")


class LimitRegistrar(Service):
    def __init__(self, broker: Broker, limits: Sequence[Limit], backoff: Backoff) -> None:
        self.broker = broker
        self.limits = list(limits)
        self.backoff = backoff
        self.done = not self.limits

    def due_in(self, now: float) -> float | None:
        return None if self.done else 0.0

    def run(self, now: float) -> None:
        self.broker.register_limits(self.limits)
        self.backoff.ok()
        self.done = True
        log.info(
            "limits registered: %s", "; ".join(f"{x.name}: {x.describe()}" for x in self.limits)
        )
