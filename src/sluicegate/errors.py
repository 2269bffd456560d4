"""One root error and a few precise subclasses, so callers can catch exactly what they handle."""

from __future__ import annotations

import math


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
    """The broker's storage cannot be reached, opened or written just now, or a call on it
    failed or timed out; what was being written was not stored (unless this is
    EnqueueFateUnknown). Workers treat it as an outage: they back off and retry."""


class EnqueueFateUnknown(BrokerUnavailable):
    """The connection broke (or stopped answering) after an enqueue's commit was sent: the
    jobs may or may not be stored, and nobody can tell until the server is asked again.

    ``unique_keys``: each job's unique key (None for a job without one), in the order
    given. Enqueueing the same jobs again with the same keys is safe: a key whose job is
    stored and unfinished returns that job instead of a second one (``retry_is_safe``).
    A job without a key, enqueued again, may be stored twice."""

    def __init__(self, message: str, unique_keys: tuple[str | None, ...] = ()) -> None:
        super().__init__(message)
        self.unique_keys = unique_keys

    @property
    def retry_is_safe(self) -> bool:
        """Every job had a unique key: enqueue them again, with the same keys."""
        return bool(self.unique_keys) and None not in self.unique_keys


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


# ---- waiting for a job's result (job.wait, app.wait) ---------------------------------------
class JobFailed(SluicegateError):
    """The job waited for ended dead: its last error's ``type``, ``message`` and
    ``traceback`` (the worker's, as text: the exception itself never crosses processes)."""

    def __init__(self, job_id: int, type: str, message: str, traceback: str = "") -> None:
        self.job_id = job_id
        self.type = type
        self.message = message
        self.traceback = traceback
        detail = f"{type}: {message}" if message else type
        super().__init__(f"job {job_id} failed: {detail or 'no error recorded'}")


class JobCancelled(SluicegateError):
    """The job waited for was cancelled before it finished; inside a task,
    ``current_job().raise_if_cancelled()`` raises it to end a stopped attempt."""

    def __init__(self, job_id: int, detail: str = "was cancelled") -> None:
        self.job_id = job_id
        super().__init__(f"job {job_id} {detail}")


# ---- admission (sluicegate.admission; docs/admission.md) ------------------------------------
NO_WORKER_RETRY_AFTER = 30  # s: QueueFull.retry_after when no live worker serves the queue


class QueueFull(SluicegateError):
    """The enqueue would break a bound of its queue; nothing was stored. ``depth``: ready
    jobs ahead (as the producer last read them, plus its own since); ``predicted_wait``:
    seconds the job would wait to start (None when no figures are known yet); ``bound``:
    which bound (``max_ready`` or ``max_wait``) and ``limit`` its value. A web handler
    answers 503 with ``Retry-After: retry_after``."""

    def __init__(
        self, queue: str, depth: int, predicted_wait: float | None, bound: str, limit: float
    ) -> None:
        self.queue = queue
        self.depth = depth
        self.predicted_wait = predicted_wait
        self.bound = bound
        self.limit = limit
        if predicted_wait is None:
            wait = "unknown"
        elif math.isinf(predicted_wait):
            wait = "unbounded (no live worker serves the queue)"
        else:
            wait = f"{predicted_wait:.2f} s"
        super().__init__(
            f"queue {queue!r} is full: {depth} ready jobs ahead, predicted wait {wait}, "
            f"over its {bound} of {limit:g}{' s' if bound == 'max_wait' else ''}"
        )

    @property
    def retry_after(self) -> int:
        """Whole seconds a client should wait before trying again (at least 1): the
        predicted wait beyond the bound; 1 s when it is unknown, 30 s when no worker serves
        the queue."""
        if self.predicted_wait is None or self.bound != "max_wait":
            return 1
        if math.isinf(self.predicted_wait):
            return NO_WORKER_RETRY_AFTER
        return max(1, math.ceil(self.predicted_wait - self.limit))
