"""Tasks: a registered function plus the options it runs with, and ways to enqueue it."""

from __future__ import annotations

import datetime as dt
import inspect
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar

from .errors import ConfigError
from .job import Job
from .names import check_name
from .retry import RetryPolicy

if TYPE_CHECKING:
    from .app import App

P = ParamSpec("P")
R = TypeVar("R")

PRIORITY_RANGE = (-(2**31), 2**31 - 1)


def check_priority(priority: object) -> int:
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise ConfigError(f"priority must be an integer, not {priority!r}")
    if not PRIORITY_RANGE[0] <= priority <= PRIORITY_RANGE[1]:
        raise ConfigError(f"priority {priority} is out of range {PRIORITY_RANGE}")
    return priority


def check_attempts(max_attempts: object) -> int:
    if not isinstance(max_attempts, int) or isinstance(max_attempts, bool) or max_attempts < 1:
        raise ConfigError(f"max_attempts must be an integer >= 1, not {max_attempts!r}")
    return max_attempts


@dataclass(frozen=True, slots=True)
class TaskOptions:
    """How a task is routed and run. Lower ``priority`` runs first within a queue."""

    queue: str = "default"
    max_attempts: int = 3
    timeout: float | None = None
    priority: int = 0
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    transactional: bool = False  # gets connection=; its writes commit with the ack

    def __post_init__(self) -> None:
        check_name("queue", self.queue)
        check_attempts(self.max_attempts)
        check_priority(self.priority)
        if self.timeout is not None and not (
            isinstance(self.timeout, int | float) and self.timeout > 0
        ):
            raise ConfigError(f"timeout must be a positive number of seconds, not {self.timeout!r}")


@dataclass(frozen=True, slots=True)
class EnqueueOptions:
    """Per-enqueue overrides of a task's defaults."""

    queue: str | None = None
    delay: float | dt.timedelta | None = None
    run_at: float | dt.datetime | None = None
    priority: int | None = None
    unique_key: str | None = None
    max_attempts: int | None = None
    connection: Any = None  # enqueue in this open transaction (postgresql broker)


class Task(Generic[P, R]):
    """A function registered with an App. Calling it runs it here and now."""

    def __init__(self, app: App, fn: Callable[P, R], name: str, options: TaskOptions) -> None:
        self.app = app
        self.fn = fn
        self.name = check_name("task", name)
        self.options = options
        self.is_coroutine = inspect.iscoroutinefunction(fn)
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<Task {self.name} queue={self.options.queue}>"

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> Job:
        """Store a job that will call this task with these arguments; durable on return."""
        return self.app.enqueue(self.name, args=list(args), kwargs=dict(kwargs))

    def with_options(self, **options: Any) -> BoundTask[P, R]:
        """``task.with_options(delay=60, priority=-1).enqueue(42)``: per-enqueue overrides."""
        try:
            return BoundTask(self, EnqueueOptions(**options))
        except TypeError as exc:
            raise ConfigError(f"task {self.name!r}: {exc}") from None

    def enqueue_many(self, calls: Iterable[Sequence[Any]], connection: Any = None) -> list[Job]:
        """Enqueue one job per argument list, all in one transaction (bulk enqueue)."""
        return self.app.enqueue_many(((self.name, list(args), {}) for args in calls), connection)


@dataclass(frozen=True, slots=True)
class BoundTask(Generic[P, R]):
    task: Task[P, R]
    options: EnqueueOptions

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> Job:
        o = self.options
        return self.task.app.enqueue(
            self.task.name,
            args=list(args),
            kwargs=dict(kwargs),
            queue=o.queue,
            delay=o.delay,
            run_at=o.run_at,
            priority=o.priority,
            unique_key=o.unique_key,
            max_attempts=o.max_attempts,
            connection=o.connection,
        )

    def with_options(self, **options: Any) -> BoundTask[P, R]:
        return BoundTask(self.task, replace(self.options, **options))
