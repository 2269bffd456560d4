"""The lease keeper: one batched heartbeat per worker process for every held claim.

Runs on the worker's main thread, never in a job's thread or child, so a busy or
stuck job cannot stop its own lease from being renewed (or from expiring when the
whole process is frozen).

Progress rides along: ``current_job().progress(...)`` only replaces the latest value kept
here for its claim (any thread, a dict write under a lock); each heartbeat hands the
values reported since the previous one to the broker in the same call. A task may report
thousands of times a second and cost no broker write of its own.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable

from ...brokers import Broker
from ...job import Claim, Progress
from .backoff import Backoff
from .base import Counters, Service

log = logging.getLogger("sluicegate.worker")


class LeaseKeeper(Service):
    """Holds the claims this process owns and renews them every lease/3."""

    def __init__(
        self,
        broker: Broker,
        lease: float,
        counters: Counters | None = None,
        on_lost: Callable[[Claim], None] | None = None,
        backoff: Backoff | None = None,
    ) -> None:
        self.broker = broker
        self.backoff = backoff or Backoff()  # a heartbeat that gets through ends an outage
        self.lease = lease
        self.interval = lease / 3
        self.counters = counters or Counters()
        self.on_lost = on_lost  # told of each claim a heartbeat found lost
        self.held: set[Claim] = set()
        self.next_beat = time.monotonic() + self.interval
        self.lag = 0.0  # how late (s) the last heartbeat ran past its due time
        self._reported: dict[Claim, Progress] = {}  # since the last heartbeat, latest wins
        self._reported_lock = threading.Lock()

    def report_progress(self, claim: Claim, fraction: float, message: str | None) -> None:
        """Keep ``claim``'s latest progress for the next heartbeat (any thread; validated
        by the caller). No broker call: the value waits for the beat."""
        with self._reported_lock:
            self._reported[claim] = Progress(fraction, message)

    def _take_progress(self, claims: Iterable[Claim]) -> dict[Claim, Progress]:
        """The progress reported for ``claims`` since the last beat; the rest (claims no
        longer held: finished, lost) is dropped with it."""
        with self._reported_lock:
            reported, self._reported = self._reported, {}
        return {c: reported[c] for c in claims if c in reported}

    def _keep_unwritten(self, progress: dict[Claim, Progress]) -> None:
        """A heartbeat that failed wrote nothing: its values wait for the next one, unless
        a newer report came meanwhile."""
        with self._reported_lock:
            self._reported = {**progress, **self._reported}

    def hold(self, claims: Iterable[Claim]) -> None:
        self.held.update(claims)

    def drop(self, claims: Iterable[Claim]) -> None:
        self.held.difference_update(claims)

    def due_in(self, now: float) -> float:
        return max(0.0, self.next_beat - now)

    def beat_soon(self) -> None:
        """Renew at the loop's next turn, not at the usual time (any thread): a cancel
        notice came, and the claims a heartbeat finds lost are the cancelled ones."""
        self.next_beat = min(self.next_beat, time.monotonic())

    def run(self, now: float) -> None:
        for claim in self.beat_if_due(now):
            self.counters.lease_lost += 1
            if self.on_lost is not None:
                self.on_lost(claim)

    def beat_if_due(self, now: float) -> list[Claim]:
        """Renew every held lease when due; returns the claims found lost."""
        if now < self.next_beat:
            return []
        self.lag = now - self.next_beat
        self.next_beat = now + self.interval
        if not self.held:
            self._take_progress(())
            return []
        claims = list(self.held)
        progress = self._take_progress(claims)
        try:
            lost = self.broker.heartbeat(claims, self.lease, progress)
        except BaseException:
            self._keep_unwritten(progress)
            raise
        self.backoff.ok()
        if lost:
            self.drop(lost)
            for claim in lost:
                log.warning(
                    "lease lost on job %s: it expired or was cancelled; its outcome will be refused",
                    claim.job_id,
                )
        return lost
