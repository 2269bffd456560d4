"""One root error and a few precise subclasses, so callers can catch exactly what they handle."""

from __future__ import annotations


class SluicegateError(Exception):
    """Root of every error sluicegate raises on purpose."""


class ConfigError(SluicegateError):
    """A setting, URL, pool spec or name is malformed; the message names what and why."""


class SerializationError(SluicegateError):
    """A payload or result cannot be stored as JSON, or is over the size limit."""


class UnknownTask(SluicegateError):
    """A job names a task that the app does not register."""


class JobNotFound(SluicegateError):
    """No job has the given id."""


class InvalidJobId(JobNotFound, ValueError):
    """The given job id is neither an integer nor an integer's decimal text, so no job can
    have it. A JobNotFound (a web handler's 404 covers it) and a ValueError."""


class InvalidTransition(SluicegateError):
    """The job's current state does not allow the requested change."""


class BrokerUnavailable(SluicegateError):
    """The broker's storage cannot be reached or opened."""


class LeaseLost(SluicegateError):
    """The claim's fencing token no longer matches: someone else holds the job, or it ended.

    Raised by heartbeat, ack, fail and release; nothing was changed.
    """

    def __init__(self, job_id: int, token: int, message: str | None = None) -> None:
        self.job_id = job_id
        self.token = token
        super().__init__(message or f"lease lost on job {job_id} (token {token})")
