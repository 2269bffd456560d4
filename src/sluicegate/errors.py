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


class InvalidTransition(SluicegateError):
    """The job's current state does not allow the requested change."""


class BrokerUnavailable(SluicegateError):
    """The broker's storage cannot be reached, opened or written just now; what was being
    written was not stored. Workers treat it as an outage: they back off and retry."""


class BrokerBusy(BrokerUnavailable):
    """Another connection held the storage's write lock for longer than this process waits
    for it (SQLite: the URL's ``busy_timeout``). Nothing was written; try again later."""


class StorageFull(BrokerUnavailable):
    """The storage has no room for the write: a full disk, or the SQLite database at its
    ``max_pages`` cap. Nothing was written; it succeeds again once space is freed."""


class LeaseLost(SluicegateError):
    """The claim's fencing token no longer matches: someone else holds the job, or it ended.

    Raised by heartbeat, ack, fail and release; nothing was changed.
    """

    def __init__(self, job_id: int, token: int, message: str | None = None) -> None:
        self.job_id = job_id
        self.token = token
        super().__init__(message or f"lease lost on job {job_id} (token {token})")
