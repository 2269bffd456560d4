"""The pause watcher: which queues of this worker are paused, read about once a second.

Pauses live in the broker (``sluicegate queues pause``), so every worker sees one state
and a worker that starts while a queue is paused leaves it alone from its first claim.
The claim never reads them: claimers leave the paused queues out of their claims, by the
set read here from a tiny table every ``refresh`` s, and soon after a wake-up (a pause
or resume notifies workers the way an enqueue does).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from ...brokers import Broker
from .base import Service

log = logging.getLogger("sluicegate.worker")

REFRESH = 1.0  # s between reads of the paused set: "stops within about a second"
WAKE_GAP = 0.25  # s: wake-ups (enqueues too) add at most 4 reads a second


class PauseWatcher(Service):
    def __init__(
        self,
        broker: Broker,
        queues: Iterable[str],
        on_change: Callable[[], None],
        refresh: float = REFRESH,
    ) -> None:
        self.broker = broker
        self.queues = frozenset(queues)
        self.on_change = on_change  # the paused set changed: claimers look again
        self.refresh = refresh
        self.paused: frozenset[str] | None = None  # None until the first read succeeds
        self.next_read = 0.0  # due at once: before any claim
        self.last_read = float("-inf")
        self.woken = False

    def due_in(self, now: float) -> float | None:
        if self.woken:
            return min(self.next_read, self.last_read + WAKE_GAP) - now
        return self.next_read - now

    def wake(self) -> None:
        self.woken = True

    def run(self, now: float) -> None:
        self.woken = False
        self.last_read = now
        self.next_read = now + self.refresh  # a failed read is retried after the backoff
        paused = frozenset(self.broker.paused_queues()) & self.queues
        if paused == self.paused:
            return
        before, self.paused = self.paused, paused
        for queue in sorted(paused - (before or frozenset())):
            log.info("queue %s paused: no new claims from it", queue)
        for queue in sorted((before or frozenset()) - paused):
            log.info("queue %s resumed", queue)
        self.on_change()

    def open_queues(self, queues: tuple[str, ...]) -> tuple[str, ...]:
        """``queues`` without the paused ones; empty until the paused set was read once."""
        if self.paused is None:
            return ()
        return tuple(q for q in queues if q not in self.paused)
