"""What a running task can know about itself: ``current_job()`` gives the job's id and
attempt, so side effects can be keyed by job id and made idempotent."""

from __future__ import annotations

from contextvars import ContextVar

from .job import Job

_current: ContextVar[Job | None] = ContextVar("sluicegate_current_job", default=None)


def current_job() -> Job:
    """The job being run by this thread or task. Raises RuntimeError outside a job."""
    job = _current.get()
    if job is None:
        raise RuntimeError("current_job() called outside a running sluicegate job")
    return job


def set_current(job: Job | None) -> object:
    return _current.set(job)


def reset_current(token: object) -> None:
    _current.reset(token)  # type: ignore[arg-type]
