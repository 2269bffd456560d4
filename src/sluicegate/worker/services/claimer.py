"""The claimer of one pool: claims as many jobs as the pool has free slots, no more.

Waiting work stays in the broker, where any other worker can take it. A pool
claims again when something may have changed: a wake-up from the broker, its last
claim coming back full (a backlog), a scheduled job coming due, or the fallback
poll in case a wake-up was missed. Pools with weighted queues split their free
slots by stride scheduling. Paused queues (read by the pause watcher, never by the
claim) are left out of its claims.
"""

from __future__ import annotations

import functools
import random
import time
from collections.abc import Callable, Mapping

from ...brokers import Broker, QueueDepth
from ...brokers.base import ClaimBatch
from ...job import Claim, ClaimedJob
from ..pool import PoolSpec, PoolState
from .backoff import Backoff
from .base import Service
from .results import RecordingClaim

HEALTHY_POLL_FACTOR = 5.0  # safety poll every 5 x poll_interval while wake-ups are healthy

Dispatch = Callable[[PoolState, ClaimedJob], None]


class Claimer(Service):
    def __init__(
        self,
        pool: PoolState,
        broker: Broker,
        dispatch: Dispatch,
        *,
        lease: float,
        worker_id: str,
        host: str = "",
        poll_interval: float = 1.0,
        backoff: Backoff | None = None,
    ) -> None:
        self.pool = pool
        self.broker = broker
        self.dispatch = dispatch  # starts a claimed job (or refuses it) before the next claim
        self.lease = lease
        self.worker_id = worker_id
        self.host = host
        self.poll_interval = poll_interval
        self.backoff = backoff or Backoff()
        self.shares = Stride(pool.spec) if pool.spec.weights is not None else None
        self.halted = False  # shutting down: no more claims
        self.next_poll = 0.0
        self.next_due: float | None = None  # a scheduled job of the pool's queues comes due
        self.limit_wait: float | None = None  # a job held back by a limit may start in (s)
        # This worker's claims whose bodies ended with outcomes unwritten: their limit
        # tokens count as free in the next claim (the result writer's ended_limited).
        self.ended_claims: Callable[[], list[Claim]] | None = None
        # True while this worker cannot write its outcomes (the result writer is
        # failing: a full disk, a lock held elsewhere): no new work until it can.
        self.held_back: Callable[[], bool] | None = None
        self.wake_gen = 0
        self.attempted_at = time.monotonic()  # the last claim call, for the health check
        self.on_claimed: Callable[[str, int, float], None] | None = None  # pool, jobs, latency
        # The result writer's along_with, where the broker records with its claims.
        self.record_along: Callable[[RecordingClaim], ClaimBatch | None] | None = None
        # The pool's queues that are not paused (the pause watcher's open_queues); None:
        # no pauses are looked at (a claimer used on its own).
        self.open_queues: Callable[[tuple[str, ...]], tuple[str, ...]] | None = None

    def start(self) -> None:
        self.next_poll = time.monotonic() + self.poll_interval

    def wake(self) -> None:
        """Jobs may have become ready (called from any thread)."""
        self.wake_gen += 1
        self.pool.maybe_more = True

    def halt(self) -> None:
        self.halted = True

    def tokens_freed(self) -> None:
        """A job of this worker that held limit tokens finished: if the last claim held
        jobs back for a limit, look again now rather than at the recheck."""
        if self.limit_wait is not None:
            self.pool.maybe_more = True

    def stalled(self, now: float, depths: Mapping[str, QueueDepth], after: float) -> bool:
        """Free slots and ready work in its queues (by ``depths``, the last sample), yet no
        claim tried for over ``after`` s: the pool silently stopped consuming."""
        if self.halted or self.pool.free <= 0 or now - self.attempted_at <= after:
            return False
        return any((d := depths.get(q)) is not None and d.ready > 0 for q in self._queues())

    def _queues(self) -> tuple[str, ...]:
        """The pool's queues it may claim from now: paused queues left out."""
        queues = self.pool.spec.queues
        return queues if self.open_queues is None else self.open_queues(queues)

    def due_in(self, now: float) -> float | None:
        if self.halted or (self.held_back is not None and self.held_back()):
            return None  # looked at again each turn: the writer's success ends it
        if self.pool.free > 0 and self.pool.maybe_more:
            return 0.0
        if self.next_due is not None:
            return min(self.next_poll, self.next_due) - now
        return self.next_poll - now

    def run(self, now: float) -> None:
        if now >= self.next_poll:  # the fallback poll, in case a wake-up was missed
            # Rarer while the broker's wake-ups are known to work: an idle worker's poll
            # is most of its idle CPU.
            healthy = self.broker.wakeups_healthy()
            interval = self.poll_interval * (HEALTHY_POLL_FACTOR if healthy else 1.0)
            self.next_poll = now + interval * random.uniform(0.8, 1.2)
            self.pool.maybe_more = True
        if self.next_due is not None and now >= self.next_due:
            self.next_due = None
            self.pool.maybe_more = True
        due = self.claim()
        if due is not None:
            self.next_due = now + due

    def claim(self) -> float | None:
        """Claim for free slots and dispatch; returns seconds to the next scheduled job."""
        pool = self.pool
        if pool.free <= 0 or not pool.maybe_more:
            return None
        queues = self._queues()
        if not queues:  # all paused: idle (no polling) until a resume wakes the claimer
            pool.maybe_more = False
            pool.backlog = False
            return None
        seen = self.wake_gen
        self.attempted_at = time.monotonic()  # it looked at the broker (the health check)
        try:
            # An idle pool looks first with a read-only probe: a wake-up caused by some
            # other worker's commit must not make every idle worker take the write lock.
            probe = not pool.backlog and not self.broker.cheap_empty_claim
            claimed: list[ClaimedJob] = []
            trouble: Exception | None = None
            self.limit_wait = None
            if not probe or self.broker.has_work(queues):
                wanted = pool.free
                claimed, trouble = self._claim(queues, wanted)
                pool.backlog = len(claimed) == wanted and trouble is None
            for job in claimed:  # start them before any further look at the broker
                self.dispatch(pool, job)
            if trouble is not None:  # what was claimed before it runs; back off now
                raise trouble
            due = None
            if not pool.backlog:
                # A wake-up that raced with this look keeps the pool looking.
                pool.maybe_more = self.wake_gen != seen
                due = self.broker.next_due(queues)
                if self.limit_wait is not None:  # look again when a held-back job may start
                    due = self.limit_wait if due is None else min(due, self.limit_wait)
        except Exception as exc:
            self.backoff.failed(exc)
            return None
        self.backoff.ok()
        return due

    def _claim(
        self, queues: tuple[str, ...], wanted: int
    ) -> tuple[list[ClaimedJob], Exception | None]:
        """One claim order over the pool's queues, or one claim per queue by weighted share.

        Weighted claims commit one queue at a time: if a later queue's claim fails, the
        jobs already claimed come back with the error, so they are dispatched (and their
        leases held) instead of left to expire."""
        if self.shares is None:
            return self._claim_from(queues, wanted), None
        out: list[ClaimedJob] = []
        paused = set(self.pool.spec.queues) - set(queues)
        empty: set[str] = set(paused)  # paused queues get no share ...
        try:
            while wanted > 0:
                shares = self.shares.split(wanted, empty)
                if not shares:
                    break
                for queue, share in shares.items():
                    got = self._claim_from((queue,), share)
                    out.extend(got)
                    wanted -= len(got)
                    if len(got) < share:  # refund the picks it could not use; others get them
                        self.shares.refund(queue, share - len(got))
                        empty.add(queue)
        except Exception as exc:
            if not out:
                raise
            return out, exc
        self.shares.no_credit_for(empty)  # ... and earn no credit to burst with on resume
        return out, None

    def _claim_from(self, queues: tuple[str, ...], wanted: int) -> list[ClaimedJob]:
        """Claim only: the turn's starts and outcomes are written after the new jobs are
        dispatched (by the result writer), so refilling a slot never waits for an ack's
        fsync; except where the broker writes them in the claim's own statement
        (``record_along``, PostgreSQL): one round trip and one commit for the turn."""
        began = time.monotonic()
        batch = None
        if self.record_along is not None:  # the turn's starts and outcomes ride along
            claim = functools.partial(
                self.broker.claim_and_record, queues, wanted, self.lease, self.worker_id
            )
            batch = self.record_along(claim)
        if batch is None:
            ended = self.ended_claims() if self.ended_claims is not None else []
            batch = self.broker.claim(queues, wanted, self.lease, self.worker_id, self.host, ended)
        if self.on_claimed is not None:
            self.on_claimed(self.pool.spec.name, len(batch), time.monotonic() - began)
        if batch.retry_in is not None:
            wait = self.limit_wait
            self.limit_wait = batch.retry_in if wait is None else min(wait, batch.retry_in)
        return batch


class Stride:
    """Weighted queues of one pool: each queue gets weight/sum(weights) of the slots.

    Each queue has a pass; a slot goes to the queue with the lowest pass, whose pass then
    grows by 1/weight. A queue with work never starves: its pass stays behind until it is
    picked. Queues found empty are skipped, and earn no credit to burst with later.
    """

    def __init__(self, spec: PoolSpec) -> None:
        self.queues = spec.queues
        self.weights = dict(zip(spec.queues, spec.weights or (1,) * len(spec.queues), strict=True))
        self.passes: dict[str, float] = {}

    def split(self, slots: int, empty: set[str]) -> dict[str, int]:
        """Split ``slots`` free slots among the queues not in ``empty``."""
        live = [q for q in self.queues if q not in empty]
        if not live:
            return {}
        floor = min((self.passes[q] for q in live if q in self.passes), default=0.0)
        for queue in live:  # a queue seen for the first time (or back from idle) starts level
            self.passes[queue] = max(self.passes.get(queue, floor), floor)
        shares: dict[str, int] = {}
        for _ in range(slots):
            queue = min(live, key=lambda q: (self.passes[q], self.queues.index(q)))
            self.passes[queue] += 1 / self.weights[queue]
            shares[queue] = shares.get(queue, 0) + 1
        return shares

    def refund(self, queue: str, unused: int) -> None:
        """Give back picks a queue could not use (it had fewer jobs than its share)."""
        self.passes[queue] -= unused / self.weights[queue]

    def no_credit_for(self, empty: set[str]) -> None:
        """An idle queue earns no credit: its pass catches up with the busy queues'."""
        busy = [self.passes[q] for q in self.queues if q not in empty and q in self.passes]
        for queue in empty:
            self.passes[queue] = max(self.passes.get(queue, 0.0), min(busy, default=0.0))
