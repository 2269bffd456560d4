"""The shutdown sequence: stop claiming at once, let jobs finish, release the rest.

In-flight jobs get up to the shutdown timeout to finish; what is left then goes back
to ready without charging an attempt. A second stop request releases at once.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from ...brokers import Broker
from .base import Counters, Service
from .dispatch import Dispatcher
from .leases import LeaseKeeper
from .results import ResultWriter

log = logging.getLogger("sluicegate.worker")


class Shutdown(Service):
    uses_broker = False  # runs through broker trouble: what it cannot write, leases return

    def __init__(
        self,
        timeout: float,
        broker: Broker,
        services: Sequence[Service],
        dispatcher: Dispatcher,
        results: ResultWriter,
        leases: LeaseKeeper,
        counters: Counters | None = None,
    ) -> None:
        self.timeout = timeout
        self.broker = broker
        self.services = services  # each is halted when shutdown begins (claimers: no claims)
        self.dispatcher = dispatcher
        self.results = results
        self.leases = leases
        self.counters = counters or Counters()
        self.requests = 0
        self.deadline: float | None = None
        self.finished = False  # everything held is recorded or released: the loop may exit

    def request(self, immediate: bool = False) -> None:
        """First call: stop claiming and drain; second call (or immediate): release now."""
        self.requests = 2 if immediate else self.requests + 1

    def due_in(self, now: float) -> float | None:
        if not self.requests or self.finished:
            return None
        if self.deadline is None or self._may_finish(now):
            return 0.0
        return self.deadline - now

    def _may_finish(self, now: float) -> bool:
        assert self.deadline is not None
        out_of_time = self.requests >= 2 or now >= self.deadline
        # Jobs already timed out or lost are not waited for: their outcome is decided.
        return out_of_time or not self.dispatcher.running()

    def run(self, now: float) -> None:
        if self.deadline is None:
            self.deadline = now + self.timeout
            for service in self.services:
                service.halt()
            log.info(
                "shutting down: no more claims; waiting up to %g s for %d job(s)",
                self.timeout,
                self.dispatcher.busy,
            )
        if self._may_finish(now):
            self.finish()

    def finish(self) -> None:
        """Write what is buffered, release what is still running, and be done."""
        self.results.flush()
        leftover = self.dispatcher.running()
        if leftover:
            try:
                lost = self.broker.release(leftover)
            except Exception as exc:
                log.error(
                    "could not release %d job(s); their leases will expire: %s", len(leftover), exc
                )
                lost = leftover
            self.counters.released += len(leftover) - len(lost)
            log.info(
                "released %d job(s) back to ready without charging an attempt",
                len(leftover) - len(lost),
            )
            for claim in leftover:
                self.dispatcher.abandon(claim)
            self.leases.drop(leftover)
        if self.results.pending:
            log.error(
                "%d outcome(s) could not be recorded; those jobs return by lease expiry",
                self.results.pending,
            )
        self.finished = True
