"""``drain``: run an app's jobs to the end, in this process, through the real lifecycle.

Each job is claimed with a lease from the app's broker, run by the worker's runner
(``testing.running``) and its outcome recorded by the broker, one job at a time in claim
order, until nothing is ready. Jobs that jobs enqueue run too. A failed attempt with
attempts left is retried; ``skip_backoff`` makes the retry due at once (the broker still
records the retry, with the time it is due), so a job that always fails ends dead after
its ``max_attempts`` within one drain.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..brokers.base import ClaimBatch
from ..errors import ConfigError
from ..job import Job
from ..outcomes import Buried, Report, Retried, Settled
from .clock import FakeClock
from .running import LEASE, WORKER_ID, Attempt, Loop

if TYPE_CHECKING:
    from ..app import App
    from ..brokers import Broker

OUTCOMES = ("succeeded", "retried", "dead", "lease_lost")
DRAIN_LIMIT = 10_000  # attempts one drain runs at most: a task that enqueues itself forever
IDLE_ROUNDS = 100  # clock moves in a row with nothing claimed: a job no claim will take


@dataclass(frozen=True)
class DrainResult:
    """What a drain ran, per attempt outcome: ``succeeded``, ``retried`` (failed with
    attempts left), ``dead`` (failed for good), ``lease_lost`` (its outcome was refused:
    the job was cancelled while it ran). The counts are attempts: a job retried twice then
    successful counts 2 in ``retried`` and 1 in ``succeeded``. ``jobs[outcome]`` holds each
    such attempt's job as read right after it was recorded."""

    jobs: dict[str, list[Job]] = field(default_factory=lambda: {o: [] for o in OUTCOMES})

    @property
    def succeeded(self) -> int:
        return len(self.jobs["succeeded"])

    @property
    def retried(self) -> int:
        return len(self.jobs["retried"])

    @property
    def dead(self) -> int:
        return len(self.jobs["dead"])

    @property
    def lease_lost(self) -> int:
        return len(self.jobs["lease_lost"])

    @property
    def attempts(self) -> int:
        return sum(len(jobs) for jobs in self.jobs.values())

    @property
    def counts(self) -> dict[str, int]:
        """``{"succeeded": 2, "retried": 1, "dead": 0, "lease_lost": 0}``."""
        return {outcome: len(jobs) for outcome, jobs in self.jobs.items()}

    def __repr__(self) -> str:
        counts = ", ".join(f"{k}={v}" for k, v in self.counts.items())
        return f"DrainResult({counts})"


def fake_clock_of(broker: Broker) -> FakeClock | None:
    """The broker's clock when it is a FakeClock (the plugin's fixtures give one)."""
    clock = getattr(broker, "_clock", None)
    return clock if isinstance(clock, FakeClock) else None


def _queues(broker: Broker, queues: Sequence[str] | None) -> list[str]:
    """The queues to claim from: those given, else every queue with unfinished jobs; a
    paused queue's jobs wait for its resume, as a worker's would."""
    names = list(queues) if queues is not None else sorted(broker.queue_depths(None))
    paused = broker.paused_queues()
    return [q for q in names if q not in paused]


def _outcome(report: Report, lost: bool) -> str:
    if lost or (isinstance(report, Settled) and report.lease_lost):
        return "lease_lost"
    if isinstance(report, Retried):
        return "retried"
    if isinstance(report, Buried):
        return "dead"
    return "succeeded"


def drain(
    app: App,
    queues: Sequence[str] | None = None,
    *,
    with_scheduled: bool = False,
    skip_backoff: bool = True,
    limit: int = DRAIN_LIMIT,
) -> DrainResult:
    """Run ``app``'s ready jobs (of ``queues``; None: every queue) until none is left.

    ``skip_backoff`` (default True): a retried job is due at once and runs again in this
    drain; False: it waits out its backoff (advance the clock and drain again).
    ``with_scheduled``: jobs due later run too, in the order they are due, the test clock
    moved forward to each one's time; it needs the app's broker on a ``FakeClock`` (the
    plugin's fixtures), and is a ConfigError otherwise. ``limit``: at most this many
    attempts (RuntimeError past it: a job that enqueues another forever).
    """
    if isinstance(queues, str):
        raise ConfigError(f"queues must be a list of queue names, not the string {queues!r}")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ConfigError(f"limit must be an integer >= 1 (attempts), not {limit!r}")
    app.configure()
    broker = app.broker
    clock = fake_clock_of(broker)
    if with_scheduled and clock is None:
        raise ConfigError(
            "drain(with_scheduled=True) moves the test clock to each scheduled job's time: "
            "the app's broker needs clock=FakeClock(...) (the sluicegate_sqlite and "
            "sluicegate_postgres fixtures bind the app to one)"
        )
    if app.limits:
        broker.register_limits(list(app.limits.values()))  # as a worker does at start
    result = DrainResult()
    loop = Loop()
    attempt = Attempt(app, broker, loop)
    idle = 0  # clock moves in a row that claimed nothing
    try:
        while True:
            names = _queues(broker, queues)
            batch = broker.claim(names, 1, LEASE, WORKER_ID) if names else ClaimBatch()
            if batch:
                if result.attempts >= limit:
                    broker.release([c.claim for c in batch])
                    raise RuntimeError(
                        f"drain ran {limit} attempts and jobs are still ready: does a task "
                        "enqueue another without end? (raise drain's limit= if not)"
                    )
                claimed, idle = batch[0], 0
                report = attempt.run(claimed)
                lost = False
                if not isinstance(report, Settled):
                    if skip_backoff and isinstance(report, Retried):
                        report = dataclasses.replace(report, retry_in=0.0)
                    lost = bool(broker.record((), [report]))
                job = broker.get_job(claimed.claim.job_id)
                if job is not None:
                    result.jobs[_outcome(report, lost)].append(job.bound(app))
                continue
            if not with_scheduled or clock is None:
                break
            # Nothing ready: the next job due later, or held back by a rate limit.
            wait = broker.next_due(names) if names else None
            later = [t for t in (wait, batch.retry_in) if t is not None and t > 0]
            idle += 1
            if not later or idle > IDLE_ROUNDS:
                break
            clock.advance(min(later))
    finally:
        loop.close()
    return result
