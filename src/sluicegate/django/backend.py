"""``SluicegateBackend``: Django's task framework enqueues into sluicegate.

Each Django task becomes a job of the generic task ``django_task`` whose first argument
is the task's module path; ``queue_name`` is the job's queue, ``priority`` its priority
(negated: Django runs higher first, sluicegate lower first), ``run_after`` its ``run_at``.
A result id is the job id's text (or, for a job enqueued on commit, its unique key).
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, cast

from ..app import App
from ..codec import encode_payload
from ..errors import ConfigError, InvalidJobId
from ..job import Job
from ..names import check_name
from ..task import MAX_ATTEMPTS
from .compat import (
    BaseTaskBackend,
    InvalidTask,
    Task,
    TaskResult,
    TaskResultDoesNotExist,
    task_enqueued,
)
from .project import TASK_NAME, app_for, broker_url
from .results import KEY_PREFIX, moment, task_result
from .runner import resolve
from .signals import send
from .transactions import raw_psycopg, same_database

OPTIONS = ("BROKER", "DATABASE", "MAX_ATTEMPTS")
DEFAULT_MAX_ATTEMPTS = 3


def run_at(when: datetime | None) -> datetime | None:
    """``run_after`` as sluicegate takes it: aware (a naive one, with USE_TZ off, is local)."""
    if when is None or when.tzinfo is not None:
        return when
    return when.astimezone()


class SluicegateBackend(BaseTaskBackend):
    """A ``TASKS`` backend storing tasks as sluicegate jobs; ``sluicegate worker
    sluicegate.django.worker:app`` (or ``manage.py sluicegate_worker``) runs them.

    OPTIONS: ``BROKER`` (a broker URL; default ``settings.SLUICEGATE_BROKER``, then the
    ``SLUICEGATE_BROKER`` environment variable, then sluicegate's default), ``DATABASE``
    (the Django database whose transactions an enqueue joins; default ``"default"``),
    ``MAX_ATTEMPTS`` (runs before a failing task is FAILED; default 3)."""

    supports_defer = True
    supports_async_task = True  # run through async_to_sync in a thread or process pool
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        options: Mapping[str, Any] = self.options
        where = f"TASKS[{alias!r}]['OPTIONS']"
        unknown = sorted(str(key) for key in options if key not in OPTIONS)
        if unknown:
            raise ConfigError(
                f"{where}: unknown option {', '.join(map(repr, unknown))} "
                f"(known: {', '.join(OPTIONS)})"
            )
        self.broker_url = broker_url(options)
        self.database = options.get("DATABASE", "default")
        if not isinstance(self.database, str):
            raise ConfigError(
                f"{where}['DATABASE'] must be a database alias, not {self.database!r}"
            )
        attempts = options.get("MAX_ATTEMPTS", DEFAULT_MAX_ATTEMPTS)
        if (
            isinstance(attempts, bool)
            or not isinstance(attempts, int)
            or not 1 <= attempts <= MAX_ATTEMPTS
        ):
            raise ConfigError(f"{where}['MAX_ATTEMPTS'] must be an integer >= 1, not {attempts!r}")
        self.max_attempts = attempts
        self._shared: bool | None = None  # does the broker live in Django's database?

    @property
    def app(self) -> App:
        """The process's sluicegate App on this backend's broker."""
        return app_for(self.broker_url)

    def validate_task(self, task: Task[Any, Any]) -> None:
        super().validate_task(task)
        try:
            check_name("queue", task.queue_name)
        except ConfigError as exc:
            raise InvalidTask(str(exc)) from None

    # ---- enqueue ---------------------------------------------------------------------
    def enqueue(
        self, task: Task[Any, Any], args: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> TaskResult[Any]:
        """Store the task as a job: at once, in the caller's transaction (PostgreSQL, same
        database), or when it commits (elsewhere); see sluicegate.django.transactions."""
        from django.db import connections

        self.validate_task(task)
        args, kwargs = list(args), dict(kwargs)
        app = self.app
        # Checked under the Django task's own name, so an error names its own argument.
        encode_payload(task.module_path, args, kwargs, app.payload_limit)
        call = [task.module_path, *args]
        options: dict[str, Any] = {
            "queue": task.queue_name,
            "priority": -operator.index(task.priority),
            "max_attempts": self.max_attempts,
            "run_at": run_at(task.run_after),
        }
        db = connections[self.database]
        if not db.in_atomic_block:
            job = app.enqueue(TASK_NAME, call, kwargs, **options)
        elif self._shares(db, app):
            job = app.enqueue(TASK_NAME, call, kwargs, connection=raw_psycopg(db), **options)
        else:
            return self._on_commit(task, app, call, kwargs, options)
        result = task_result(task, job, self.alias, str(job.id))
        send(task_enqueued, type(self), result)
        return result

    def _shares(self, db: Any, app: App) -> bool:
        if self._shared is None:
            self._shared = same_database(db, app.broker)
        return self._shared

    def _on_commit(
        self,
        task: Task[Any, Any],
        app: App,
        call: list[Any],
        kwargs: dict[str, Any],
        options: dict[str, Any],
    ) -> TaskResult[Any]:
        """Check and encode the job now; store it when the transaction commits. It has no
        id yet, so it is known by a unique key, which is also its result id."""
        from django.db import transaction
        from django.utils.crypto import get_random_string

        from .compat import TaskResultStatus

        key = KEY_PREFIX + get_random_string(32)
        spec = app.build_spec(TASK_NAME, call, kwargs, unique_key=key, **options)
        result: TaskResult[Any] = TaskResult(
            task=task,
            id=key,
            status=cast(Any, TaskResultStatus.READY),
            enqueued_at=None,
            started_at=None,
            finished_at=None,
            last_attempted_at=None,
            args=call[1:],
            kwargs=kwargs,
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )

        def store() -> None:
            (job,) = app.broker.enqueue([spec])
            object.__setattr__(result, "enqueued_at", moment(job.enqueued_at))
            send(task_enqueued, type(self), result)

        transaction.on_commit(store, using=self.database)
        return result

    # ---- results ---------------------------------------------------------------------
    def get_result(self, result_id: str) -> TaskResult[Any]:
        """The job behind ``result_id``, read now; TaskResultDoesNotExist if there is none
        (a job enqueued on commit whose transaction has not committed, or rolled back)."""
        job = self._find(result_id)
        if job is None or job.task != TASK_NAME or not job.args or not isinstance(job.args[0], str):
            raise TaskResultDoesNotExist(f"no task result has id {result_id!r}")
        try:
            task = resolve(job.args[0])
        except ConfigError as exc:
            raise TaskResultDoesNotExist(f"task result {result_id!r}: {exc}") from None
        return task_result(task, job, self.alias, result_id)

    def _find(self, result_id: str) -> Job | None:
        broker = self.app.broker
        if isinstance(result_id, str) and result_id.startswith(KEY_PREFIX):
            jobs = broker.list_jobs(unique_key=result_id, limit=1)
            return jobs[0] if jobs else None
        try:
            return broker.get_job(result_id)
        except InvalidJobId:
            return None
