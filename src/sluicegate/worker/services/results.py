"""The result writer: every start and outcome of a turn recorded in one broker write.

Starts arrive from executor threads, outcomes from the loop. A failed write puts
the whole batch back in front of what came since, in order, so nothing is lost and
the next flush retries it (after the shared backoff); until one gets through the
writer is ``failing``, and the worker's claimers take no new work. Outcomes of jobs
whose lease was lost are refused by the broker's fencing, never applied.
"""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Callable, Sequence

from ...brokers import Broker
from ...brokers.base import ClaimBatch
from ...job import Claim, Event
from ...outcomes import Buried, Outcome, Settled
from .backoff import Backoff
from .base import Counters, Service
from .leases import LeaseKeeper

log = logging.getLogger("sluicegate.worker")
# A claim that writes a turn's starts and outcomes too (Broker.claim_and_record, its
# queues and sizes already given): the claimed jobs and the lost claims, or None.
RecordingClaim = Callable[[list[Claim], list[Outcome]], "tuple[ClaimBatch, list[Claim]] | None"]
# Bodies shorter than this (s) have their outcomes written with the next claim, where the
# broker can (along_with): a very short job's cost is its turn's, not its wait for a flush.
SHORT_BODY = 0.001
RING_INTERVAL = 0.02  # s: the most often other workers are woken for freed limit tokens


class ResultWriter(Service):
    def __init__(
        self,
        broker: Broker,
        leases: LeaseKeeper,
        counters: Counters | None = None,
        backoff: Backoff | None = None,
        on_lost: Callable[[Claim], None] | None = None,
    ) -> None:
        self.broker = broker
        self.leases = leases
        self.counters = counters or Counters()
        self.backoff = backoff or Backoff()
        self.on_lost = on_lost  # told of each claim whose outcome the broker refused
        self._started: collections.deque[Claim] = collections.deque()  # any thread appends
        self._pending: list[Outcome] = []  # the loop's thread only
        self._slowest = 0.0  # s: the longest body among the pending outcomes
        self._limited: set[Claim] = set()  # held claims of jobs that name limits
        self._ended: set[Claim] = set()  # of those, bodies ended, outcomes not yet written
        self.on_tokens_freed: Callable[[], None] | None = None  # wakes this worker's claimers
        # Told what each write recorded and which of it the broker refused (signals).
        self.on_written: Callable[[Sequence[Outcome], set[Claim]], None] | None = None
        self._rung_at = -RING_INTERVAL  # when other workers were last woken (monotonic)
        self.failing = False  # the last write failed: its batch waits to be written again
        self._ring_at: float | None = None  # a wake-up of other workers is owed by then

    def holds_tokens(self, claim: Claim) -> None:
        """This claim's job took tokens of a limit: once its outcome is written, the
        tokens are back, and every worker's claimers are woken to use them."""
        self._limited.add(claim)

    # ---- filling the buffers -----------------------------------------------------
    def started(self, claim: Claim) -> None:
        """A job's body began (called from its executor's thread)."""
        self._started.append(claim)

    def add(self, outcome: Outcome, body_ended: bool = True, took: float = 0.0) -> None:
        """Queue an outcome. ``body_ended`` False: a soft timeout, the code still runs.
        ``took``: how long its body ran (s), which decides whether it goes with a claim."""
        self._pending.append(outcome)
        if took > self._slowest:
            self._slowest = took
        if self._limited and body_ended and outcome.claim in self._limited:
            self._ended.add(outcome.claim)
            if self.on_tokens_freed is not None:
                self.on_tokens_freed()  # held-back claimers may take its tokens this turn

    def lost(self, claim: Claim) -> None:
        """A heartbeat found ``claim`` lost: the broker already gave its limit tokens
        back (the job is no longer held by us), so held-back claimers may use them."""
        self._free_tokens([claim])

    def ended_limited(self) -> list[Claim]:
        """Claims holding limit tokens whose bodies ended and whose outcomes are not
        written yet: a claim counts their tokens as free (Broker.claim's ``done``)."""
        return list(self._ended)

    def settled(self, outcome: Settled) -> None:
        """A transactional task already committed its ack (or found its lease lost)."""
        self.leases.drop([outcome.claim])
        self._free_tokens([outcome.claim])
        if outcome.lease_lost:
            self.counters.lease_lost += 1
            log.warning(
                "lease lost on job %s: its transaction was rolled back", outcome.claim.job_id
            )
        else:
            self.counters.succeeded += 1

    @property
    def pending(self) -> int:
        """Outcomes not yet recorded."""
        return len(self._pending)

    @property
    def unwritten(self) -> int:
        """Starts and outcomes not yet recorded."""
        return len(self._started) + len(self._pending)

    # ---- the service -----------------------------------------------------------------
    def due_in(self, now: float) -> float | None:
        if self._started or self._pending:
            return 0.0
        return None if self._ring_at is None else self._ring_at - now

    def run(self, now: float) -> None:
        self.flush()
        if self._ring_at is not None and now >= self._ring_at:
            self._ring_others(now)

    def flush(self) -> None:
        """Record starts and outcomes in one broker write; keep them for retry on error."""
        started, outcomes = self._take_batch()
        if not started and not outcomes:
            return
        try:
            lost = self.broker.record(started, outcomes)
        except Exception as exc:
            self._put_back(started, outcomes)
            self.failing = True
            self.backoff.failed(exc)
            return
        self.failing = False
        self.backoff.ok()
        self._recorded(outcomes, lost)

    def along_with(self, claim: RecordingClaim) -> ClaimBatch | None:
        """Hand the starts and outcomes waiting to ``claim`` (the broker's
        ``claim_and_record``), which writes them in the claim's own transaction: one round
        trip for the turn. None: nothing waited, or the broker could not take them
        (they stay for ``flush``); the caller claims on its own. A failure keeps them for
        the next try, as a failed flush does.

        Only outcomes of short bodies (under SHORT_BODY) go with a claim: a claim sharing
        an ack's transaction waits for its WAL flush, which is noise next to a turn of
        very short jobs (whose budget is the CPU a turn costs) but would hold up the
        refill of slots whose jobs take longer; theirs are written after the claim."""
        if not self._started and not self._pending:
            return None
        if self._slowest >= SHORT_BODY:  # the claim goes first, its commit not waited for
            return None
        started, outcomes = self._take_batch()
        if not started and not outcomes:
            return None
        try:
            got = claim(started, outcomes)
        except Exception:
            self._put_back(started, outcomes)
            self.failing = True
            raise
        if got is None:
            self._put_back(started, outcomes)
            return None
        claimed, lost = got
        self.failing = False
        self._recorded(outcomes, lost)
        return claimed

    def _take_batch(self) -> tuple[list[Claim], list[Outcome]]:
        """Starts and outcomes waiting to be written (taken out of the buffers); starts of
        jobs no longer held (already finished or lost) are not worth a write."""
        started = []
        while self._started:
            started.append(self._started.popleft())
        started = [c for c in started if c in self.leases.held]
        outcomes, self._pending = self._pending, []
        self._slowest = 0.0
        return started, outcomes

    def _put_back(self, started: list[Claim], outcomes: list[Outcome]) -> None:
        """Storage trouble: keep everything, in order, for the next try; nothing was recorded."""
        self._pending = outcomes + self._pending
        self._started.extendleft(reversed(started))

    def drained(self) -> bool:
        return not self.unwritten

    def _free_tokens(self, claims: list[Claim]) -> None:
        """Tokens of a limit came back: this worker's claimers look again at once, other
        workers' at most RING_INTERVAL later (one wake-up covers every freeing since the
        last, so a busy limit costs a few wake-ups a second, not one per job)."""
        if not self._limited:
            return
        freed = self._limited.intersection(claims)
        if not freed:
            return
        self._limited -= freed
        self._ended -= freed
        if self.on_tokens_freed is not None:
            self.on_tokens_freed()
        now = time.monotonic()
        if now - self._rung_at >= RING_INTERVAL:
            self._ring_others(now)
        elif self._ring_at is None:
            self._ring_at = self._rung_at + RING_INTERVAL

    def _ring_others(self, now: float) -> None:
        self._rung_at, self._ring_at = now, None
        try:
            self.broker.wake_claimers()
        except Exception:  # a missed wake-up costs a 0.5 s recheck, never a job
            log.debug("waking other workers' claimers failed", exc_info=True)

    def _recorded(self, outcomes: list[Outcome], lost: list[Claim]) -> None:
        self.leases.drop(o.claim for o in outcomes)
        self.leases.drop(lost)  # a refused start: no longer ours to renew
        if self._limited:  # nothing to do, and no list to build, for jobs without limits
            self._free_tokens([*(o.claim for o in outcomes), *lost])
        lost_set = set(lost)
        if self.on_written is not None:
            self.on_written(outcomes, lost_set)
        for outcome in outcomes:
            if outcome.claim in lost_set:
                continue
            if outcome.event is Event.ACK:
                self.counters.succeeded += 1
            elif isinstance(outcome, Buried):
                self.counters.dead += 1
                log.warning("job %s is dead: %s", outcome.claim.job_id, outcome.error)
            else:
                self.counters.retried += 1
        for claim in lost:
            self.counters.lease_lost += 1
            if self.on_lost is not None:
                self.on_lost(claim)
            log.warning(
                "lease lost on job %s: outcome refused (another worker holds it or it ended)",
                claim.job_id,
            )
