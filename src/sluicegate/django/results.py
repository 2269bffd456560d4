"""A sluicegate job read back as a Django ``TaskResult``: its status, times, errors and
return value, so ``get_result`` and ``result.refresh()`` work from any process."""

from __future__ import annotations

import builtins
from datetime import UTC, datetime
from typing import Any, cast

from ..job import ErrorInfo, Job, JobState
from .compat import Task, TaskError, TaskResult, TaskResultStatus

STATUS = {
    JobState.SCHEDULED: TaskResultStatus.READY,  # a delayed job, or one waiting to retry
    JobState.READY: TaskResultStatus.READY,
    JobState.CLAIMED: TaskResultStatus.RUNNING,  # a worker holds it and is starting it
    JobState.RUNNING: TaskResultStatus.RUNNING,
    JobState.SUCCEEDED: TaskResultStatus.SUCCESSFUL,
    JobState.DEAD: TaskResultStatus.FAILED,
    JobState.CANCELLED: TaskResultStatus.FAILED,  # the framework has no cancelled status
}


def moment(epoch: float | None) -> datetime | None:
    """An epoch as Django holds times: aware (UTC) with USE_TZ, else naive local time."""
    if epoch is None:
        return None
    from django.conf import settings

    if settings.USE_TZ:
        return datetime.fromtimestamp(epoch, tz=UTC)
    return datetime.fromtimestamp(epoch)


def exception_path(kind: str, traceback: str = "") -> str:
    """The dotted path of an error's class, as ``TaskError.exception_class`` imports it.
    sluicegate stores the class's qualified name; the traceback's last line has the module
    ("django.db.utils.IntegrityError: ..."); builtins have none."""
    for line in reversed(traceback.splitlines()):
        head = line.split(":", 1)[0].strip()
        if head == kind or head.endswith("." + kind):
            if "." in head and head != kind:
                return head
            break
    return f"builtins.{kind}" if isinstance(getattr(builtins, kind, None), type) else kind


def errors_of(job: Job) -> list[Any]:
    """One TaskError per failed attempt in the job's history (type and message); the last
    one carries the full traceback of ``job.last_error``."""
    errors: list[Any] = []
    for entry in job.history:
        error = entry.get("error")
        if isinstance(error, dict):
            kind = str(error.get("type", ""))
            errors.append(TaskError(exception_class_path=exception_path(kind), traceback=""))
    last: ErrorInfo | None = job.last_error
    if last is not None:
        full = TaskError(
            exception_class_path=exception_path(last.type, last.traceback),
            traceback=last.traceback or str(last),
        )
        if errors:
            errors[-1] = full
        else:
            errors.append(full)
    return errors


KEY_PREFIX = "django-"  # the unique key, and result id, of a job enqueued on commit


def result_id_of(job: Job) -> str:
    """The id Django knows the job by: its unique key when it was enqueued on commit (no
    job id existed yet), else the job id's text."""
    key = job.unique_key
    return key if key is not None and key.startswith(KEY_PREFIX) else str(job.id)


def task_result(task: Task[Any, Any], job: Job, alias: str, result_id: str) -> TaskResult[Any]:
    """``job`` (a ``django_task`` job) as the TaskResult of ``task``."""
    worker = job.worker_id or "sluicegate"
    result: TaskResult[Any] = TaskResult(
        task=task,
        id=result_id,
        status=cast(Any, STATUS[job.state]),
        enqueued_at=moment(job.enqueued_at),
        started_at=moment(job.started_at),
        finished_at=moment(job.finished_at),
        last_attempted_at=moment(job.started_at),
        args=list(job.args[1:]),
        kwargs=dict(job.kwargs),
        backend=alias,
        errors=errors_of(job),
        worker_ids=[worker] * job.attempts,
    )
    if job.state is JobState.SUCCEEDED:
        object.__setattr__(result, "_return_value", job.result)
    return result
