"""The one sluicegate task a Django project registers: it imports a Django task by its
module path and runs it, with Django's database connections tidied around it as a
request would have them, and Django's ``task_started``/``task_finished`` signals sent."""

from __future__ import annotations

import time
from typing import Any

from ..context import current_job
from ..errors import ConfigError


def resolve(task_path: str) -> Any:
    """The Django ``Task`` at ``task_path`` (``module.function``, as ``Task.module_path``)."""
    from django.utils.module_loading import import_string

    from .compat import Task

    try:
        found = import_string(task_path)
    except ImportError as exc:
        raise ConfigError(f"cannot import Django task {task_path!r}: {exc}") from None
    if not isinstance(found, Task):
        raise ConfigError(
            f"{task_path!r} is not a Django task (found {type(found).__name__}): "
            "decorate the function with @task"
        )
    return found


def run_django_task(task_path: str, /, *args: Any, **kwargs: Any) -> Any:
    """Run the Django task at ``task_path`` with the job's arguments; its return value is
    the job's result (JSON). ``@task(takes_context=True)`` gets a TaskContext first."""
    from django.db import close_old_connections

    from .compat import TaskContext, TaskError, TaskResultStatus, task_finished, task_started
    from .results import moment, result_id_of, task_result
    from .signals import send

    task = resolve(task_path)
    job = current_job().job
    result = task_result(task, job, task.backend, result_id_of(job))
    now = moment(time.time())
    set_ = object.__setattr__  # a TaskResult is frozen; Django's own backends do the same
    set_(result, "status", TaskResultStatus.RUNNING)
    set_(result, "started_at", now)
    set_(result, "last_attempted_at", now)
    sender = type(task.get_backend())
    close_old_connections()  # drop connections past CONN_MAX_AGE or broken, as requests do
    try:
        send(task_started, sender, result)
        try:
            if task.takes_context:
                value = task.call(TaskContext(task_result=result), *args, **kwargs)
            else:
                value = task.call(*args, **kwargs)
        except BaseException as exc:
            import traceback

            text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
            kind = type(exc)
            result.errors.append(
                TaskError(
                    exception_class_path=f"{kind.__module__}.{kind.__qualname__}", traceback=text
                )
            )
            set_(result, "status", TaskResultStatus.FAILED)
            set_(result, "finished_at", moment(time.time()))
            send(task_finished, sender, result)
            raise
        set_(result, "status", TaskResultStatus.SUCCESSFUL)
        set_(result, "finished_at", moment(time.time()))
        set_(result, "_return_value", value)
        send(task_finished, sender, result)
        return value
    finally:
        close_old_connections()
