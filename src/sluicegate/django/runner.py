"""The one sluicegate task a Django project registers: it imports a Django task by its
module path and runs it, with Django's database connections tidied around it as a
request would have them."""

from __future__ import annotations

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

    task = resolve(task_path)
    close_old_connections()  # drop connections past CONN_MAX_AGE or broken, as requests do
    try:
        if task.takes_context:
            from .compat import TaskContext
            from .results import result_id_of, task_result

            job = current_job().job
            context = TaskContext(
                task_result=task_result(task, job, task.backend, result_id_of(job))
            )
            return task.call(context, *args, **kwargs)
        return task.call(*args, **kwargs)
    finally:
        close_old_connections()
