"""What a running task can know about itself, and say about itself.

``current_job()`` gives a handle on the running attempt: the job's fields as claimed
(``id``, ``attempts``, ``task``, ... so side effects can be keyed by job id and made
idempotent) and the calls a task makes about its own run, such as ``progress``. The
handle is not a ``Job``: a Job is a stored snapshot, and its ``progress`` is a value.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

from .errors import JobCancelled
from .job import Claim, Job, JobId, checked_progress

# Where a running attempt's progress goes: the worker keeps the latest per claim and the
# next batched heartbeat writes it (a process child forwards it to its parent first).
ProgressSink = Callable[[Claim, float, str | None], None]
# Whether a running attempt should stop (cancelled, its lease lost, past a thread's
# timeout): the worker answers from its own state, with no broker call.
StopCheck = Callable[[Claim], bool]


class RunningJob:
    """The attempt being run. Reads fall through to the claimed ``Job`` (``id``,
    ``attempts``, ``args``, ...); calls speak for this attempt, fenced by its claim."""

    __slots__ = ("_sink", "_stopped", "claim", "job", "pool")

    def __init__(
        self,
        job: Job,
        claim: Claim,
        sink: ProgressSink | None = None,
        stopped: StopCheck | None = None,
        pool: str | None = None,
    ) -> None:
        self.job = job
        self.claim = claim
        self.pool = pool  # the name of the pool running the attempt (None: not in a worker)
        self._sink = sink
        self._stopped = stopped

    def __getattr__(self, name: str) -> Any:  # any other Job field, as claimed
        if name in RunningJob.__slots__:  # not set yet (a copy being built): no recursion
            raise AttributeError(name)
        return getattr(self.job, name)

    @property
    def id(self) -> JobId:
        return self.job.id

    @property
    def attempts(self) -> int:
        """This attempt's number (1 for the first run): key idempotent side effects on it."""
        return self.job.attempts

    @property
    def task(self) -> str:
        return self.job.task

    @property
    def queue(self) -> str:
        return self.job.queue

    def __repr__(self) -> str:
        return f"RunningJob(id={self.job.id}, task={self.job.task!r}, attempt={self.job.attempts})"

    def progress(self, fraction: float, message: str | None = None) -> None:
        """Report how far this attempt is: ``fraction`` in [0, 1], an optional ``message``
        (cut to sluicegate.job.PROGRESS_MESSAGE characters). Costs no broker write: the
        latest value rides on the worker's next heartbeat, so calling it often is free.
        Raises TypeError or ValueError for a bad fraction or message."""
        value, text = checked_progress(fraction, message)
        if self._sink is not None:  # None: run outside a worker (a direct call in a test)
            self._sink(self.claim, value, text)

    @property
    def cancelled(self) -> bool:
        """True once this attempt should stop: the job was cancelled, or its lease was
        lost (its outcome will be refused), or, in a thread pool, it ran past its timeout.
        A thread cannot be killed, so a long task in a thread pool checks this (or calls
        ``raise_if_cancelled``) between steps; its slot stays busy until it returns. An
        async job is cancelled and a process child killed without asking."""
        return self._stopped is not None and self._stopped(self.claim)

    def raise_if_cancelled(self) -> None:
        """Raise JobCancelled if ``cancelled``: the way out of a long task in a thread
        pool. Do not catch it: what the attempt returns no longer counts anyway."""
        if self.cancelled:
            raise JobCancelled(self.job.id, "was stopped: cancelled, or its lease was lost")


_current: ContextVar[RunningJob | None] = ContextVar("sluicegate_current_job", default=None)


def current_job() -> RunningJob:
    """The attempt being run by this thread or task. Raises RuntimeError outside a job."""
    job = _current.get()
    if job is None:
        raise RuntimeError("current_job() called outside a running sluicegate job")
    return job


def set_current(job: RunningJob | None) -> object:
    return _current.set(job)


def reset_current(token: object) -> None:
    _current.reset(token)  # type: ignore[arg-type]
