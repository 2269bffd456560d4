"""The task framework's names, from Django 6's ``django.tasks`` when present, else from the
``django-tasks`` backport (Django 5.2): the backend is written once against both."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # typed against the backport, whose API Django 6 took over unchanged
    from django_tasks import (
        TaskContext,
        TaskResult,
        TaskResultStatus,
        default_task_backend,
        task_backends,
    )
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import Task, TaskError
    from django_tasks.exceptions import InvalidTaskError as InvalidTask
    from django_tasks.exceptions import TaskResultDoesNotExist
    from django_tasks.signals import task_enqueued, task_finished, task_started
else:
    try:
        from django.tasks import (
            TaskContext,
            TaskResult,
            TaskResultStatus,
            default_task_backend,
            task_backends,
        )
        from django.tasks.backends.base import BaseTaskBackend
        from django.tasks.base import Task, TaskError
        from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
        from django.tasks.signals import task_enqueued, task_finished, task_started
    except ImportError:
        from django_tasks import (
            TaskContext,
            TaskResult,
            TaskResultStatus,
            default_task_backend,
            task_backends,
        )
        from django_tasks.backends.base import BaseTaskBackend
        from django_tasks.base import Task, TaskError
        from django_tasks.exceptions import InvalidTaskError as InvalidTask
        from django_tasks.exceptions import TaskResultDoesNotExist
        from django_tasks.signals import task_enqueued, task_finished, task_started

__all__ = [
    "BaseTaskBackend",
    "InvalidTask",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "default_task_backend",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
]
