"""Tasks: a registered function plus the options it runs with, and ways to enqueue it.

Each option name is declared once, in a TypedDict that the signatures unpack:
``TaskOptionsDict`` for ``@app.task(...)`` (and a settings file's ``[tasks.NAME]``),
``EnqueueOptionsDict`` for ``app.enqueue``, ``app.build_spec`` and ``task.with_options``.
``TaskOptions`` and ``EnqueueOptions`` are the checked values: they hold the defaults and
every check, so a bad value is refused the same way wherever it comes from.
"""

from __future__ import annotations

import datetime as dt
import inspect
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypedDict, TypeVar, Unpack

from .codec import text_problem
from .errors import ConfigError
from .job import Job
from .limits import check_task_limits
from .names import check_name
from .retry import MAX_DELAY, RetryPolicy

if TYPE_CHECKING:
    from .app import App

P = ParamSpec("P")
R = TypeVar("R")

PRIORITY_RANGE = (-(2**31), 2**31 - 1)  # a 32-bit integer, as every broker stores it
MAX_ATTEMPTS = 2**31 - 1
# run_at as epoch seconds: the years 1 to 9999 (what a datetime can say, and every broker
# stores); a delay: up to a century (retry.MAX_DELAY).
RUN_AT_RANGE = (-62_135_596_800.0, 253_402_300_799.0)


class TaskOptionsDict(TypedDict, total=False):
    """The options of ``@app.task(...)``; defaults and checks are ``TaskOptions``'."""

    queue: str
    max_attempts: int
    timeout: float | None
    priority: int  # lower runs first within a queue
    retry_on: Sequence[type[BaseException]]  # empty: every exception is retried
    backoff_base: float
    backoff_max: float
    transactional: bool  # gets connection=; its writes commit with the ack (postgresql)
    limits: Sequence[str] | Mapping[str, int]  # limits it uses: names, or names with a cost
    expires_in: float | dt.timedelta | None  # a job not started this long after enqueue: cancelled


class EnqueueOptionsDict(TypedDict, total=False):
    """One enqueue's options: None (or absent) keeps the task's own."""

    queue: str | None
    delay: float | dt.timedelta | None
    run_at: float | dt.datetime | None  # timezone-aware datetime or epoch seconds
    priority: int | None
    unique_key: str | None  # while a job with this key is unfinished, return it instead
    max_attempts: int | None
    limit_key: str | Mapping[str, str] | None  # partition of the task's partitioned limits
    connection: Any  # enqueue in this open transaction (postgresql broker)
    expires_in: float | dt.timedelta | None  # not started this long after enqueue: cancelled
    expires_at: float | dt.datetime | None  # not started by then: cancelled ("expired")
    max_wait: float | None  # refuse (QueueFull) if the predicted wait is longer (admission)


TASK_OPTION_NAMES = frozenset(TaskOptionsDict.__annotations__)
ENQUEUE_OPTION_NAMES = frozenset(EnqueueOptionsDict.__annotations__)


def check_priority(priority: object) -> int:
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise ConfigError(f"priority must be an integer, not {priority!r}")
    if not PRIORITY_RANGE[0] <= priority <= PRIORITY_RANGE[1]:
        raise ConfigError(f"priority {priority} is out of range {PRIORITY_RANGE}")
    return priority


def check_attempts(max_attempts: object) -> int:
    if not isinstance(max_attempts, int) or isinstance(max_attempts, bool) or max_attempts < 1:
        raise ConfigError(f"max_attempts must be an integer >= 1, not {max_attempts!r}")
    if max_attempts > MAX_ATTEMPTS:
        raise ConfigError(f"max_attempts must be at most {MAX_ATTEMPTS}, not {max_attempts!r}")
    return max_attempts


def seconds(value: object, what: str) -> float:
    """Seconds from a number or a timedelta: finite, so a NaN never becomes a job that
    runs at once or never."""
    if isinstance(value, dt.timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{what} must be seconds or a timedelta, not {value!r}")
    if not math.isfinite(value):
        raise ConfigError(f"{what} must be a finite number of seconds, not {value!r}")
    return float(value)


def delay_seconds(value: object) -> float:
    """A delay: at most a century; a negative one is no delay (the job is ready at once)."""
    delay = seconds(value, "delay")
    if delay > MAX_DELAY:
        raise ConfigError(f"delay must be at most {MAX_DELAY:g} s (a century), not {value!r}")
    return max(0.0, delay)


def epoch(value: object, what: str = "run_at") -> float:
    """Epoch seconds from a timezone-aware datetime or a number (years 1 to 9999)."""
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            raise ConfigError(f"{what} must be timezone-aware (e.g. datetime.now(timezone.utc))")
        return value.timestamp()
    at = seconds(value, what)
    if not RUN_AT_RANGE[0] <= at <= RUN_AT_RANGE[1]:
        raise ConfigError(f"{what} must be epoch seconds of the years 1 to 9999, not {value!r}")
    return at


def expires_in_seconds(value: object) -> float:
    """An expiry after the enqueue: more than 0 s (a job that expires as it is stored
    could never run), at most a century."""
    expires_in = seconds(value, "expires_in")
    if not 0 < expires_in <= MAX_DELAY:
        raise ConfigError(
            f"expires_in must be more than 0 s and at most {MAX_DELAY:g} s, not {value!r}"
        )
    return expires_in


def check_expiry(
    delay: float | None,
    run_at: float | None,
    expires_in: float | None,
    expires_at: float | None,
    where: str = "",
) -> None:
    """A job must be due before it expires. Checked where both times count from the
    same origin (delay with expires_in, run_at with expires_at); a run_at against an
    expires_in depends on the broker's clock, and is not."""
    if expires_in is not None and delay is not None and expires_in <= delay:
        raise ConfigError(
            f"expires_in={expires_in:g}{where} must be more than delay={delay:g}: "
            "the job would expire before it is due"
        )
    if expires_at is not None and run_at is not None and expires_at <= run_at:
        raise ConfigError(
            f"expires_at={expires_at} must be after run_at={run_at}: "
            "the job would expire before it is due"
        )


def check_key(what: str, value: object) -> str:
    """A unique key or limit key: non-empty text every broker can store."""
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{what} must be a non-empty string, not {value!r}")
    if (problem := text_problem(value)) is not None:
        raise ConfigError(f"{what} {value!r} {problem}")
    return value


def _known(task: str, options: Mapping[str, object], names: frozenset[str]) -> None:
    unknown = sorted(set(options) - names)
    if unknown:
        raise ConfigError(
            f"task {task!r}: unknown option {unknown[0]!r} (options: {', '.join(sorted(names))})"
        )


@dataclass(frozen=True, slots=True)
class TaskOptions:
    """How a task is routed and run: the fields of ``TaskOptionsDict``, with defaults,
    checked when made. ``retry`` is derived from ``retry_on`` and the backoff fields."""

    queue: str = "default"
    max_attempts: int = 3
    timeout: float | None = None
    priority: int = 0
    retry_on: Sequence[type[BaseException]] = ()
    backoff_base: float = 1.0
    backoff_max: float = 3600.0
    transactional: bool = False
    limits: Sequence[str] | Mapping[str, int] = ()  # kept as sorted (name, cost) pairs
    expires_in: float | dt.timedelta | None = None  # kept as seconds; None: never expires
    retry: RetryPolicy = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        check_name("queue", self.queue)
        check_attempts(self.max_attempts)
        check_priority(self.priority)
        timeout = self.timeout
        if timeout is not None and (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            or not 0 < timeout <= MAX_DELAY
        ):
            raise ConfigError(
                f"timeout must be a number of seconds > 0 (at most a century), not {timeout!r}"
            )
        if not isinstance(self.transactional, bool):
            raise ConfigError(f"transactional must be True or False, not {self.transactional!r}")
        if not isinstance(self.retry_on, list | tuple):  # a bare class is a common slip
            raise ConfigError(f"retry_on must be a tuple of exception types, not {self.retry_on!r}")
        policy = RetryPolicy(
            backoff_base=self.backoff_base,
            backoff_max=self.backoff_max,
            retry_on=tuple(self.retry_on),
        )
        object.__setattr__(self, "retry_on", policy.retry_on)
        object.__setattr__(self, "retry", policy)
        object.__setattr__(self, "limits", check_task_limits(self.limits))
        if self.expires_in is not None:
            object.__setattr__(self, "expires_in", expires_in_seconds(self.expires_in))

    @property
    def costs(self) -> tuple[tuple[str, int], ...]:
        """The limits this task uses, as sorted (limit name, cost) pairs."""
        return self.limits  # type: ignore[return-value]  # normalised in __post_init__

    @classmethod
    def of(cls, task: str, options: Mapping[str, Any]) -> TaskOptions:
        """``TaskOptions(**options)``; errors name the task (and an unknown option)."""
        _known(task, options, TASK_OPTION_NAMES)
        try:
            return cls(**options)
        except ConfigError as exc:
            raise ConfigError(f"task {task!r}: {exc}") from None


@dataclass(frozen=True, slots=True)
class EnqueueOptions:
    """The fields of ``EnqueueOptionsDict``, checked when made; None keeps the task's own."""

    queue: str | None = None
    delay: float | dt.timedelta | None = None
    run_at: float | dt.datetime | None = None
    priority: int | None = None
    unique_key: str | None = None
    max_attempts: int | None = None
    limit_key: str | Mapping[str, str] | None = None
    connection: Any = None
    expires_in: float | dt.timedelta | None = None
    expires_at: float | dt.datetime | None = None
    max_wait: float | None = None

    def __post_init__(self) -> None:
        if self.queue is not None:
            check_name("queue", self.queue)
        if self.max_wait is not None:
            from .admission import check_max_wait

            check_max_wait(self.max_wait)
        if self.delay is not None and self.run_at is not None:
            raise ConfigError("give delay or run_at, not both")
        if self.expires_in is not None and self.expires_at is not None:
            raise ConfigError("give expires_in or expires_at, not both")
        if self.delay is not None:
            delay_seconds(self.delay)
        if self.run_at is not None:
            epoch(self.run_at)
        check_expiry(
            None if self.delay is None else delay_seconds(self.delay),
            None if self.run_at is None else epoch(self.run_at),
            None if self.expires_in is None else expires_in_seconds(self.expires_in),
            None if self.expires_at is None else epoch(self.expires_at, "expires_at"),
        )
        if self.priority is not None:
            check_priority(self.priority)
        if self.unique_key is not None:
            check_key("unique_key", self.unique_key)
        if self.max_attempts is not None:
            check_attempts(self.max_attempts)
        key = self.limit_key
        if key is not None and not (
            (isinstance(key, str) and key)
            or (isinstance(key, Mapping) and all(isinstance(v, str) and v for v in key.values()))
        ):
            raise ConfigError(
                f"limit_key must be a non-empty string or a mapping of limit name to one, "
                f"not {key!r}"
            )
        if key is not None:
            for value in key.values() if isinstance(key, Mapping) else [key]:
                check_key("limit_key", value)

    @classmethod
    def of(
        cls, task: str, options: Mapping[str, Any], base: EnqueueOptions | None = None
    ) -> EnqueueOptions:
        """``options`` over ``base`` (or none); errors name the task (and an unknown option)."""
        if not options:
            return base or NO_OPTIONS
        _known(task, options, ENQUEUE_OPTION_NAMES)
        if base is not None:  # a later with_options' expiry replaces the earlier one's
            if options.get("expires_in") is not None:
                options = {"expires_at": None, **options}
            elif options.get("expires_at") is not None:
                options = {"expires_in": None, **options}
        try:
            return replace(base, **options) if base is not None else cls(**options)
        except ConfigError as exc:
            raise ConfigError(f"task {task!r}: {exc}") from None


NO_OPTIONS = EnqueueOptions()
MISSING = object()


class Task(Generic[P, R]):
    """A function registered with an App. Calling it runs it here and now."""

    def __init__(self, app: App, fn: Callable[P, R], name: str, options: TaskOptions) -> None:
        self.app = app
        self.fn = fn
        self.name = check_name("task", name)
        self.options = options
        self.is_coroutine = inspect.iscoroutinefunction(fn)
        self._signature: inspect.Signature | None = None
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<Task {self.name} queue={self.options.queue}>"

    def argument(self, name: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
        """The value the call would bind to parameter ``name`` (a partition key), or
        ``MISSING``: a keyword argument, else a positional one matched by the signature,
        else the parameter's default."""
        if name in kwargs:
            return kwargs[name]
        if self._signature is None:
            self._signature = inspect.signature(self.fn)
        try:
            bound = self._signature.bind_partial(*args, **kwargs)
        except TypeError:
            return MISSING
        bound.apply_defaults()
        return bound.arguments.get(name, MISSING)

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> Job:
        """Store a job that will call this task with these arguments; durable on return."""
        return self.app._enqueue(self.name, list(args), dict(kwargs), NO_OPTIONS)

    def with_options(self, **options: Unpack[EnqueueOptionsDict]) -> BoundTask[P, R]:
        """``task.with_options(delay=60, priority=-1).enqueue(42)``: per-enqueue overrides."""
        return BoundTask(self, EnqueueOptions.of(self.name, options))

    def enqueue_many(self, calls: Iterable[Sequence[Any]], connection: Any = None) -> list[Job]:
        """Enqueue one job per argument list, all in one transaction (bulk enqueue)."""
        return self.app.enqueue_many(((self.name, list(args), {}) for args in calls), connection)

    # ---- asyncio producers ----
    async def enqueue_async(self, *args: P.args, **kwargs: P.kwargs) -> Job:
        """``enqueue``, awaited (``await send_reset.enqueue_async(42)``)."""
        return await self.app._enqueue_async(self.name, list(args), dict(kwargs), NO_OPTIONS)

    async def enqueue_many_async(
        self, calls: Iterable[Sequence[Any]], connection: Any = None
    ) -> list[Job]:
        """``enqueue_many``, awaited: one transaction."""
        return await self.app.enqueue_many_async(
            ((self.name, list(args), {}) for args in calls), connection
        )


@dataclass(frozen=True, slots=True)
class BoundTask(Generic[P, R]):
    """A task with per-enqueue options, from ``task.with_options(...)``."""

    task: Task[P, R]
    options: EnqueueOptions

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> Job:
        return self.task.app._enqueue(self.task.name, list(args), dict(kwargs), self.options)

    async def enqueue_async(self, *args: P.args, **kwargs: P.kwargs) -> Job:  # asyncio producers
        return await self.task.app._enqueue_async(
            self.task.name, list(args), dict(kwargs), self.options
        )

    def with_options(self, **options: Unpack[EnqueueOptionsDict]) -> BoundTask[P, R]:
        return BoundTask(self.task, EnqueueOptions.of(self.task.name, options, self.options))
