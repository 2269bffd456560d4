"""The App: task registry, routing and the producer API."""

from __future__ import annotations

import datetime as dt
import os
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ParamSpec, TypeVar, overload

from .brokers import Broker, broker_from_url
from .codec import DEFAULT_PAYLOAD_LIMIT, encode_payload
from .errors import ConfigError, JobNotFound
from .job import Job, JobSpec
from .names import check_name
from .retry import RetryPolicy
from .task import Task, TaskOptions, check_attempts, check_priority

P = ParamSpec("P")
R = TypeVar("R")

DEFAULT_BROKER = "sqlite:///sluicegate.db"
_DEFAULT_OPTIONS = TaskOptions()
BROKER_ENV = "SLUICEGATE_BROKER"


def default_broker_url() -> str:
    return os.environ.get(BROKER_ENV) or DEFAULT_BROKER


def _seconds(value: float | dt.timedelta, what: str) -> float:
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{what} must be seconds or a timedelta, not {value!r}")
    return float(value)


def _epoch(value: float | dt.datetime) -> float:
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            raise ConfigError("run_at must be timezone-aware (e.g. datetime.now(timezone.utc))")
        return value.timestamp()
    return _seconds(value, "run_at")


class App:
    """Holds tasks and a broker. The broker opens on first use, so importing an app is cheap."""

    def __init__(
        self,
        broker: str | Broker | None = None,
        *,
        payload_limit: int = DEFAULT_PAYLOAD_LIMIT,
    ) -> None:
        self._broker_url = broker if isinstance(broker, str) else None
        self._broker = broker if isinstance(broker, Broker) else None
        self._lock = threading.Lock()
        self.payload_limit = payload_limit
        self.tasks: dict[str, Task[Any, Any]] = {}
        self.import_path: str | None = None  # "MODULE:APP", set when loaded by that path

    # ---- broker ------------------------------------------------------------------
    @property
    def broker_url(self) -> str:
        if self._broker is not None:
            return self._broker.url
        return self._broker_url or default_broker_url()

    @property
    def broker(self) -> Broker:
        with self._lock:
            if self._broker is None:
                self._broker = broker_from_url(self.broker_url)
            return self._broker

    def use_broker(self, broker: str | Broker) -> None:
        """Point the app at another broker (the CLI's --broker does this)."""
        with self._lock:
            if self._broker is not None and self._broker is not broker:
                self._broker.close()
            self._broker = broker if isinstance(broker, Broker) else None
            self._broker_url = broker if isinstance(broker, str) else None

    def close(self) -> None:
        with self._lock:
            if self._broker is not None:
                self._broker.close()
                self._broker = None

    # ---- registry ----------------------------------------------------------------
    @overload
    def task(self, fn: Callable[P, R], /) -> Task[P, R]: ...

    @overload
    def task(
        self,
        fn: None = None,
        /,
        *,
        name: str | None = None,
        queue: str = "default",
        max_attempts: int = 3,
        timeout: float | None = None,
        priority: int = 0,
        retry_on: Sequence[type[BaseException]] = (),
        backoff_base: float = 1.0,
        backoff_max: float = 3600.0,
        transactional: bool = False,
    ) -> Callable[[Callable[P, R]], Task[P, R]]: ...

    def task(
        self,
        fn: Callable[P, R] | None = None,
        /,
        *,
        name: str | None = None,
        queue: str = "default",
        max_attempts: int = 3,
        timeout: float | None = None,
        priority: int = 0,
        retry_on: Sequence[type[BaseException]] = (),
        backoff_base: float = 1.0,
        backoff_max: float = 3600.0,
        transactional: bool = False,
    ) -> Task[P, R] | Callable[[Callable[P, R]], Task[P, R]]:
        """Register a task: ``@app.task`` or ``@app.task(queue="email", max_attempts=5)``.

        ``transactional=True`` (postgresql broker): the task is called with a
        ``connection=`` keyword argument, a psycopg connection in an open transaction;
        its writes and the job's ack commit together, and a raise rolls both back.
        """
        options = TaskOptions(
            queue=queue,
            max_attempts=max_attempts,
            timeout=timeout,
            priority=priority,
            retry=RetryPolicy(
                max_attempts=max_attempts,
                backoff_base=backoff_base,
                backoff_max=backoff_max,
                retry_on=tuple(retry_on),
            ),
            transactional=transactional,
        )

        def register(f: Callable[P, R]) -> Task[P, R]:
            task_name = name or f.__name__
            if task_name in self.tasks:
                raise ConfigError(f"task {task_name!r} is registered twice")
            task: Task[P, R] = Task(self, f, task_name, options)
            self.tasks[task_name] = task
            return task

        return register(fn) if fn is not None else register

    # ---- producing ----------------------------------------------------------------
    def build_spec(
        self,
        name: str,
        args: Sequence[Any] | None = None,
        kwargs: Mapping[str, Any] | None = None,
        *,
        queue: str | None = None,
        delay: float | dt.timedelta | None = None,
        run_at: float | dt.datetime | None = None,
        priority: int | None = None,
        unique_key: str | None = None,
        max_attempts: int | None = None,
    ) -> JobSpec:
        """Validate and encode one job; raises before anything is stored."""
        check_name("task", name)
        task = self.tasks.get(name)
        defaults = task.options if task is not None else _DEFAULT_OPTIONS
        if delay is not None and run_at is not None:
            raise ConfigError("give delay or run_at, not both")
        if unique_key is not None and (not isinstance(unique_key, str) or not unique_key):
            raise ConfigError(f"unique_key must be a non-empty string, not {unique_key!r}")
        args_json, kwargs_json = encode_payload(
            name, [] if args is None else args, {} if kwargs is None else kwargs, self.payload_limit
        )
        return JobSpec(
            task=name,
            queue=check_name("queue", queue) if queue is not None else defaults.queue,
            args_json=args_json,
            kwargs_json=kwargs_json,
            run_at=_epoch(run_at) if run_at is not None else None,
            delay=max(0.0, _seconds(delay, "delay")) if delay is not None else 0.0,
            priority=check_priority(priority) if priority is not None else defaults.priority,
            max_attempts=(
                check_attempts(max_attempts) if max_attempts is not None else defaults.max_attempts
            ),
            unique_key=unique_key,
        )

    def enqueue(
        self,
        name: str,
        args: Sequence[Any] | None = None,
        kwargs: Mapping[str, Any] | None = None,
        *,
        queue: str | None = None,
        delay: float | dt.timedelta | None = None,
        run_at: float | dt.datetime | None = None,
        priority: int | None = None,
        unique_key: str | None = None,
        max_attempts: int | None = None,
        connection: Any = None,
    ) -> Job:
        """Enqueue a job by task name (the task need not be registered here). Durable on return.

        ``connection`` (postgresql broker): a psycopg connection with an open transaction;
        the job is written in it, so it exists only if, and once, the caller commits.
        """
        spec = self.build_spec(
            name,
            args,
            kwargs,
            queue=queue,
            delay=delay,
            run_at=run_at,
            priority=priority,
            unique_key=unique_key,
            max_attempts=max_attempts,
        )
        return self.broker.enqueue([spec], connection=connection)[0]

    def enqueue_many(
        self, calls: Iterable[tuple[str, Sequence[Any], Mapping[str, Any]]], connection: Any = None
    ) -> list[Job]:
        """Enqueue ``(task_name, args, kwargs)`` triples in one transaction; all or nothing."""
        specs = [self.build_spec(name, args, kwargs) for name, args, kwargs in calls]
        return self.broker.enqueue(specs, connection=connection)

    # ---- reading -------------------------------------------------------------------
    def get_job(self, job_id: int) -> Job:
        """A fresh read of one job from the broker."""
        job = self.broker.get_job(job_id)
        if job is None:
            raise JobNotFound(f"job {job_id} not found")
        return job
